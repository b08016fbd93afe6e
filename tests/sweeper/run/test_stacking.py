"""Sweeps train stacks: a cell's queued learning rates go into one trial up to the YAML's `stack`
(`auto`: as many as fit in memory), and each trial asks Ray for the YAML's resources (GPU fractions
included). Driven through the real cell book, ledger and store, without Ray."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sweeper.run.sweep_run import SWEEP_DONE, SweepRun
from sweeper.search.memory import auto_stack, device_memory
from tests.sweeper.run.driving import end, make_sweep, next_config, report


def make_state(tmp_path: Path, **overrides: object) -> SweepRun:
    raw: dict = {
        "name": "stacks",
        "methods": ["pre", "layerrope"],
        "model": {"width": 32, "heads": 2, "depths": [2, 4], "seq_len": 32},
        "train": {"steps": 30, "batch_size": 4},
        "lr": {"center": 3e-3, "points": 5, "refine": False},
        "stack": 3,
    }
    raw.update(overrides)
    state = make_sweep(tmp_path, raw, concurrency=100, host_memory=16 * 2**30)
    state.load([])
    return state


def all_trials(state: SweepRun) -> list[dict]:
    configs = []
    while (config := next_config(state, f"t{len(configs)}")) is not None and config is not SWEEP_DONE:
        configs.append(config)
    return configs


def test_a_cells_points_go_into_stacks_of_the_yamls_size(tmp_path: Path) -> None:
    configs = all_trials(make_state(tmp_path, stack=3))
    by_cell: dict[str, list[int]] = {}
    for config in configs:
        lrs, pids = config["spec"]["lrs"], config["spec"]["point_ids"]
        assert all(pid.startswith(config["cell_id"] + "/lr=") for pid in pids)  # one cell per trial
        assert len(set(lrs)) == len(lrs)
        by_cell.setdefault(config["cell_id"], []).append(len(lrs))
    assert len(by_cell) == 4  # 2 methods x 2 depths
    assert all(sorted(sizes) == [2, 3] for sizes in by_cell.values())  # 5 initial points: 3 + 2


def test_stack_auto_takes_the_whole_grid_when_it_fits_and_respects_max_stack(tmp_path: Path) -> None:
    configs = all_trials(make_state(tmp_path, stack="auto"))
    assert sorted(len(c["spec"]["lrs"]) for c in configs) == [5, 5, 5, 5]
    configs = all_trials(make_state(tmp_path / "capped", stack="auto", max_stack=2))
    assert max(len(c["spec"]["lrs"]) for c in configs) == 2


def test_auto_stack_follows_memory(tmp_path: Path) -> None:
    """The terms are tested in tests/sweeper/search/test_memory.py; here, how the stack follows them."""
    state = make_state(tmp_path, stack="auto", model={"width": 128, "heads": 4, "depths": [8], "seq_len": 128, "vocab": 32000},
                       train={"steps": 10, "batch_size": 8})
    cell = next(iter(state.cells.values()))
    fused = replace(cell, memory_gb=1.0)
    # per member on a CPU, fp32: 16 B x params, 96 B per token, layer and width, the fused loss's head copies and chunk
    per_member = (16 * cell.params + 96 * 128 * 1024 * 8 + 6 * 128 * 32000 + 4 * 1024 * 128
                  + 8 * 32000 * (2**23 // 32000)) * 1.1
    assert auto_stack(fused, 8, 8, None, 1) == int(2**30 // per_member) == 2
    unfused = replace(fused, train=cell.train.model_copy(update={"fused_loss": False}))
    assert auto_stack(unfused, 8, 8, None, 1) == 1  # + the logits, their log-softmax and gradient: 12 B x 1024 x 32000
    # A quarter of an 80 GiB GPU (the default when no GPU is seen) less a CUDA context; bf16 halves the activations.
    gpu = replace(cell, resources={"CPU": 1.0, "GPU": 0.25})
    assert 50 < auto_stack(gpu, 500, 500, None, 1) < auto_stack(gpu, 500, 500, None, 1, device=device_memory(141.0))
    # Host memory is shared between the trials that run at once.
    assert auto_stack(cell, 64, 64, 8 * 2**30, 4) < auto_stack(cell, 64, 64, 8 * 2**30, 1)
    assert auto_stack(cell, 2, 8, 8 * 2**30, 1) == 2  # never more than the queued points
    # Micro-batches of 2 sequences hold the activations of 2 x 128 tokens instead of 8 x 128.
    micro = replace(fused, train=cell.train.model_copy(update={"micro_batch": 2}))
    assert auto_stack(micro, 8, 8, None, 1) > auto_stack(fused, 8, 8, None, 1)


def test_trials_ask_for_the_yamls_resources_gpu_fractions_included(tmp_path: Path) -> None:
    resources = {"cpu": 2, "gpu": 0.25, "by_size": [{"max_depth": 2, "gpu": 0.125, "cpu": 1}]}
    configs = all_trials(make_state(tmp_path, resources=resources))
    by_depth = {c["spec"]["model"]["depth"]: c["resources"] for c in configs}
    assert by_depth == {2: {"CPU": 1.0, "GPU": 0.125}, 4: {"CPU": 2.0, "GPU": 0.25}}
    pytest.importorskip("ray")
    from sweeper.run.tune_session import trial_resources

    bundles = trial_resources(configs[0]).bundles
    assert bundles == [configs[0]["resources"]]


def test_slot_time_accounting(tmp_path: Path) -> None:
    """The launch summary's figures: training summed over trials, trial lifetimes, and the overhead ratio
    wall / (summed training / slots), which is 1.0 when every slot trained all the time."""
    from sweeper.run.launch import LaunchSummary

    state = make_state(tmp_path)
    now = {"t": 100.0}
    state.clock = lambda: now["t"]
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    state.on_trial_start("t1", pids)
    now["t"] = 104.0
    report(state, "t1", pids, {"step": 10, "tokens": 10, "train_seconds": 3.0, "done": False, "members": []})
    now["t"] = 110.0
    end(state, "t1", pids, {"step": 30, "train_seconds": 8.0, "done": False, "members": []}, "boom")
    assert state.stats.train_seconds == pytest.approx(3.0)  # an ended trial's last report counts; errors add nothing
    assert state.stats.alive_seconds == pytest.approx(10.0)
    summary = LaunchSummary(sweep_dir="x", wall_seconds=20.0, ray_start_seconds=5.0, train_seconds=30.0, slots=2,
                            trials=4, points_finished=0, counts={}, resumed={}, interrupted=False, experiment="run-1",
                            restored=False, trial_alive_seconds=36.0)
    assert summary.utilisation == pytest.approx(0.75) and summary.overhead_ratio == pytest.approx(40 / 30)
    assert summary.to_dict()["alive_fraction"] == pytest.approx(0.9)
