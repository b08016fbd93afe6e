"""Issue 19, item 4: a trial killed between the writes of a checkpoint (each file, the rename into
place, the pruning of the older one) resumes to a bit-identical result on CPU.

The crash-point seam of `trials.checkpoint` stops the trial right after one write of its second
checkpoint: in this process by an exception (what is on disk is what a kill leaves), and once
for real, a subprocess SIGKILLed by `LAYERROPE_SWEEPER_CHECKPOINT_CRASH`. The trial then runs
again on the same checkpoint folder, as Ray Tune's retry does, and must end with exactly the
losses, objectives, divergence records and weights of an uninterrupted run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.trials.test_resume import make_spec
from trials.checkpoint import CRASH_ENV, WRITES, arm_crash, disarm_crash, list_checkpoints
from trials.run import run_trial
from trials.spec import PointResult

LRS = [3e-3, 3e-2, 60.0]  # the last one diverges and leaves the stack: its record is part of the state
STEPS, EVERY = 24, 8  # checkpoints at 8, 16, 24: the second one is killed


class Killed(BaseException):
    """The in-process stand-in for SIGKILL (nothing in the trial may catch it)."""


def _kill() -> None:
    raise Killed()


def _spec():
    return make_spec(LRS, steps=STEPS, checkpoint_every=EVERY)


def _numbers(results: list[PointResult]) -> list[tuple]:
    return [(r.outcome, r.loss, r.objective, r.init_loss, r.diverged_step, r.reason, r.steps, r.tokens)
            for r in results]


def _weights(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {member.name: load_file(str(member / "model.safetensors")) for member in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[PointResult], dict[str, dict[str, torch.Tensor]]]:
    folder = tmp_path_factory.mktemp("straight")
    results = run_trial(_spec(), checkpoint_dir=folder / "ckpt", export_dir=folder / "w")
    assert [r.outcome for r in results] == ["ok", "ok", "diverged"]
    return results, _weights(folder / "w")


@pytest.fixture()
def disarmed() -> Iterator[None]:
    yield
    disarm_crash()


def _assert_identical(results: list[PointResult], weights: dict[str, dict[str, torch.Tensor]], straight) -> None:
    want_results, want_weights = straight
    assert _numbers(results) == _numbers(want_results)  # bit-identical floats, not approximately
    assert weights.keys() == want_weights.keys()
    for member, tensors in weights.items():
        assert tensors.keys() == want_weights[member].keys()
        for name, tensor in tensors.items():
            assert torch.equal(tensor, want_weights[member][name]) or (
                tensor.isnan().all() and want_weights[member][name].isnan().all()), (member, name)


@pytest.mark.parametrize("write", WRITES)
def test_killed_after_each_checkpoint_write_the_trial_resumes_bit_identically(tmp_path, straight, disarmed, write):
    arm_crash(2, write, _kill)
    with pytest.raises(Killed):
        run_trial(_spec(), checkpoint_dir=tmp_path / "ckpt", export_dir=tmp_path / "w")
    disarm_crash()
    left = [p.name for p in list_checkpoints(tmp_path / "ckpt")]
    assert left in (["step-000000008"], ["step-000000008", "step-000000016"], ["step-000000016"])
    resumed = run_trial(_spec(), checkpoint_dir=tmp_path / "ckpt", export_dir=tmp_path / "w")
    _assert_identical(resumed, _weights(tmp_path / "w"), straight)


def test_a_sigkilled_trial_process_resumes_bit_identically(tmp_path, straight):
    script = ("import sys; from pathlib import Path; from tests.trials.test_checkpoint_crash import _spec; "
              "from trials.run import run_trial; "
              "run_trial(_spec(), checkpoint_dir=Path(sys.argv[1]), export_dir=Path(sys.argv[2]))")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ckpt"), str(tmp_path / "w")],
                          env={**os.environ, CRASH_ENV: "2:optimizer"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert [p.name for p in list_checkpoints(tmp_path / "ckpt")] == ["step-000000008"]  # the second never landed
    resumed = run_trial(_spec(), checkpoint_dir=tmp_path / "ckpt", export_dir=tmp_path / "w")
    _assert_identical(resumed, _weights(tmp_path / "w"), straight)
