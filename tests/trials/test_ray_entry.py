"""The Ray Tune trainable through a real `ray.tune.Tuner`: metrics, checkpoints, and a trial that
crashes mid-way and is restarted by Tune from its last checkpoint, ending exactly where a run
without Ray ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models import ModelConfig
from trials.config import DataConfig, DivergenceConfig, ScheduleConfig, TrainConfig
from trials.run import run_trial
from trials.spec import TrialSpec

pytestmark = pytest.mark.slow

SPEC = TrialSpec(
    model=ModelConfig(scheme="pre", width=32, depth=2, n_heads=2, vocab=48, seq_len=16),
    train=TrainConfig(steps=12, batch_size=4, eval_every=6, eval_batches=2, report_every=2, checkpoint_every=4,
                      schedule=ScheduleConfig(warmup=2), threads=1),
    data=DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192),
    lrs=[3e-3, 80.0],
    seed=2,
    divergence=DivergenceConfig(stall_margin=None),  # 12 steps learn little: the stall rule is tested elsewhere
    point_ids=["cell/lr=0.003", "cell/lr=80"],
)


def crash_once_then_train(config: dict[str, Any]) -> None:
    """The real trainable, made to crash right after its step-8 checkpoint on the first attempt."""
    import trials.ray_entry as entry

    marker = Path(config["marker"])
    real = entry._report_to_tune

    def report(r, *rest):  # type: ignore[no-untyped-def]
        real(r, *rest)
        if r.step == 8 and not marker.exists():
            marker.write_text("crashed")
            raise RuntimeError("injected crash")

    entry._report_to_tune = report
    try:
        entry.trainable(config)
    finally:
        entry._report_to_tune = real


def test_tuner_runs_the_trainable_and_resumes_after_a_crash(ray_session: str, tmp_path: Path) -> None:
    from ray import tune

    steps: list[int] = []

    class StepLog(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):  # type: ignore[no-untyped-def]
            steps.append(result["step"])

    tuner = tune.Tuner(
        crash_once_then_train,
        param_space={"spec": SPEC.to_dict(), "marker": str(tmp_path / "marker"), "export_dir": str(tmp_path / "weights")},
        tune_config=tune.TuneConfig(num_samples=1, reuse_actors=True),
        run_config=tune.RunConfig(
            name="trial-test", storage_path=str(tmp_path / "ray"), verbose=0,
            failure_config=tune.FailureConfig(max_failures=1), callbacks=[StepLog()],
        ),
    )
    grid = tuner.fit()
    result = grid[0]
    assert result.error is None and (tmp_path / "marker").exists()  # it crashed once and recovered
    final = result.metrics
    assert final["done"] is True and final["step"] == 12 and final["tokens"] == 12 * 4 * 16
    assert [m["state"] for m in final["members"]] == ["ok", "diverged"]
    assert [m["point_id"] for m in final["members"]] == SPEC.point_ids
    assert result.checkpoint is not None
    # Reports every 2 steps and at checkpoints (4, 8) and evaluations (6, 12); the crash came after
    # the step-8 report, and the restarted attempt continued from the step-8 checkpoint.
    assert steps == [2, 4, 6, 8, 10, 12]
    # Through Ray, crash and restore included, the numbers equal a plain run without Ray.
    plain = run_trial(SPEC)
    got = final["results"]
    assert [r["outcome"] for r in got] == ["ok", "diverged"]
    assert got[0]["loss"] == pytest.approx(plain[0].loss, abs=1e-6)
    assert got[1]["diverged_step"] == plain[1].diverged_step
    assert (tmp_path / "weights" / "0" / "model.safetensors").is_file()
