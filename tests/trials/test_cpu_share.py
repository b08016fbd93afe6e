"""Bounded thread and process counts (`trials.cpu_share`), read inside a real Ray worker: the trial process
that `trials.ray_entry.configure_process` sets up before a trial is built, with the CPUs Ray assigned it."""

from __future__ import annotations

from typing import Any

import pytest

from models import ModelConfig
from trials.config import DataConfig, TrainConfig
from trials.spec import TrialSpec

pytestmark = pytest.mark.slow


def spec(**train: Any) -> TrialSpec:
    return TrialSpec(
        model=ModelConfig(scheme="pre", width=32, depth=1, n_heads=2, vocab=48, seq_len=16),
        train=TrainConfig(steps=2, batch_size=2, **train),
        data=DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=4096),
        lrs=[1e-3],
    )


def read_in_worker(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """Runs in a Ray worker: set the process up as the trainable does, then read what it runs with."""
    import torch

    from trials.ray_entry import configure_process

    settings = configure_process(TrialSpec.from_dict(spec_dict))
    return {**settings, "deterministic": torch.are_deterministic_algorithms_enabled(), "torch_threads_now": torch.get_num_threads()}


def test_threads_and_compile_workers_follow_the_trials_cpu_share(ray_session: str) -> None:
    import ray

    one = ray.get(ray.remote(num_cpus=1)(read_in_worker).remote(spec().to_dict()))
    assert one["torch_threads"] == one["torch_threads_now"] == 1
    assert one["compile_threads"] == 1  # inductor compiles in the trial process: no worker pool at all
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS",
                 "TORCHINDUCTOR_COMPILE_THREADS"):
        assert one[name] == "1", name
    assert one["TOKENIZERS_PARALLELISM"] == "false"
    assert one["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert one["deterministic"] is False

    two = ray.get(ray.remote(num_cpus=2)(read_in_worker).remote(spec(threads=1, deterministic=True).to_dict()))
    assert two["compile_threads"] == 2 and two["RAYON_NUM_THREADS"] == "2" and two["TOKENIZERS_PARALLELISM"] == "true"
    assert two["torch_threads"] == 1  # train.threads overrides the share for torch's own pool
    assert two["deterministic"] is True
