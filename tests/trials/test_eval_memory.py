"""Evaluation in micro-batch chunks through the fused loss's no-grad path: the same losses as the model's
own full-batch loss, and a memory ceiling of one training micro-step, never the `[K, B*T, V]` logits.

The memory test measures peak resident memory in a fresh subprocess (Linux: `/proc/self/status` VmHWM,
reset through `/proc/self/clear_refs`), so that nothing else in the test session moves it; there glibc
maps every allocation above 64 KiB on its own (`MALLOC_MMAP_THRESHOLD_`), so the resident set follows the
live tensors instead of whatever heap glibc kept from earlier calls.

The bound, and why: an evaluation runs the same micro-batch through the blocks as a training micro-step
(without keeping activations for a backward pass) and one chunk of logits at a time through the loss, so
its transient memory is at most a training micro-step's. Stated as: peak of an evaluation of a batch 8x
the micro-batch <= 1.25 x the peak of one training step made of such micro-steps + 8 MiB (allocator and
measurement slack). The evaluation as it was before (the model's own loss over the whole batch: logits and
their log-softmax, 2 x K x B*T x V x 4 bytes = 256 MiB here) is measured in the same process and must
exceed that bound several times over, so the measurement can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from models import ModelConfig
from trials.config import DataConfig, TrainConfig
from trials.spec import TrialSpec
from trials.train import Trial

MEASURE = textwrap.dedent('''
    import json, torch
    from models import ModelConfig
    from trials.config import DataConfig, TrainConfig
    from trials.spec import TrialSpec
    from trials.train import Trial

    torch.set_num_threads(1)

    def rss_kib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])

    def peak_mib(fn):
        """Peak resident memory above the current one while fn() runs, MiB."""
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        before = rss_kib("VmRSS")
        fn()
        return (rss_kib("VmHWM") - before) / 1024

    model = ModelConfig(scheme="pre", width=32, depth=2, n_heads=2, vocab=4096, seq_len=64)
    train = TrainConfig(steps=50, batch_size=64, micro_batch=8, eval_every=50, eval_batches=1, threads=1)
    data = DataConfig(source="synthetic", synthetic_vocab=4096, synthetic_tokens=65536)
    trial = Trial(TrialSpec(model=model, train=train, data=data, lrs=[1e-3, 2e-3], seed=0))
    batch = trial.eval_data[0]

    def old_evaluation():
        with torch.no_grad():
            trial.model.member_losses(batch[:, :-1], batch[:, 1:])

    for _ in range(2):  # first calls: lazy allocations of the runtime, not the evaluation's own
        trial.train_step(); trial.evaluate(); old_evaluation()
    print(json.dumps({
        "train_step": max(peak_mib(trial.train_step) for _ in range(2)),
        "evaluation": max(peak_mib(trial.evaluate) for _ in range(2)),
        "old_evaluation": peak_mib(old_evaluation),
    }))
''')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.slow
def test_evaluation_of_8x_the_micro_batch_stays_within_a_training_micro_step() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    peak = json.loads(done.stdout.strip().splitlines()[-1])
    bound = 1.25 * peak["train_step"] + 8
    assert peak["evaluation"] <= bound, peak
    assert peak["old_evaluation"] > 3 * bound, peak  # the unchunked evaluation: the measurement can fail


def test_chunked_evaluation_equals_the_models_own_loss() -> None:
    model = ModelConfig(scheme="pre", width=32, depth=2, n_heads=2, vocab=300, seq_len=16)
    train = TrainConfig(steps=4, batch_size=12, micro_batch=5, eval_every=4, eval_batches=3, objective="error")
    data = DataConfig(source="synthetic", synthetic_vocab=300, synthetic_tokens=8192)
    trial = Trial(TrialSpec(model=model, train=train, data=data, lrs=[1e-3, 3e-2], seed=1))
    for _ in range(3):
        trial.train_step()
    trial.evaluate()  # chunks of 5, 5 and 2 sequences per batch
    with torch.no_grad():
        losses = torch.stack([trial.model.member_losses(b[:, :-1], b[:, 1:]) for b in trial.eval_data]).mean(0)
        hits = torch.stack([(trial.model(b[:, :-1]).argmax(-1) == b[:, 1:]).float().mean(dim=(1, 2)) for b in trial.eval_data])
    assert trial.eval_loss == pytest.approx(losses.tolist(), rel=1e-6)
    assert trial.accuracy == pytest.approx(hits.mean(0).tolist(), abs=1e-7)
    assert trial.evaluations == 1
