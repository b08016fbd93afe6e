"""`sweeper trial`: one-line errors with exit code 2 for bad input, and a real tiny run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.cli import main

# as for the trials tests: one intra-op thread, a private corpus cache (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trial", *argv])
    out, err = capsys.readouterr()
    return code, out, err


BASE = ["--method", "pre", "--depth", "1", "--width", "32", "--seq-len", "16", "--batch-size", "2"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "layerope", "--depth", "2", "--lr", "1e-3"], "error: --method 'layerope': unknown scheme; did you mean 'layerrope'?"),
        ([*BASE, "--lr", "-1"], "error: --lr -1.0: a learning rate must be a finite number > 0"),
        ([*BASE, "--lr", "1e-3", "--data", "colour=red"], "error: data.colour: Extra inputs are not permitted"),
        ([*BASE, "--lr", "1e-3", "--data", "source=text", "--data", "path=/nonexistent/x.txt"],
         "error: data.path: /nonexistent/x.txt: no such file or folder"),
        ([*BASE, "--lr", "1e-3", "--model", "vocab=100"], "error: model.vocab 100 is smaller than the data's vocabulary 256"),
        ([*BASE, "--lr", "1e-3", "--train", "optimizer.betas=[0.9, 2]"], "error: train.optimizer.betas.1: Input should be less than or equal to 1"),
        ([*BASE, "--lr", "1e-3", "--heads", "3"], "error: --heads 3: the width 32 must split into heads of an even size"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *extra)
    assert code == 2
    assert err.startswith(message), err
    assert "Traceback" not in err and out == ""


def test_bad_method_answers_without_importing_torch() -> None:
    code = "import sys; from sweeper.cli import main; rc = main(['trial', '--method', 'nope', '--depth', '2', '--lr', '1']); print('torch' in sys.modules); sys.exit(rc)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ})
    assert proc.returncode == 2 and proc.stdout.strip() == "False"
    assert proc.stderr.startswith("error: --method 'nope': unknown scheme")


def test_tiny_trial_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(
        capsys, *BASE, "--lr", "3e-3", "--lr", "100", "--steps", "8", "--data", "synthetic", "--train", "eval_every=4",
        "--divergence", "stall_margin=null",  # 8 steps learn little: the stall rule is tested in test_stall_and_noise
        "--export-dir", str(tmp_path / "w"), "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    results = doc["results"]
    assert [r["outcome"] for r in results] == ["ok", "diverged"]
    assert results[0]["loss"] < results[0]["init_loss"]
    assert results[1]["diverged_step"] <= 3 and results[1]["loss"] is None
    assert doc["spec"]["model"]["vocab"] == 64  # taken from the data (synthetic default vocab)
    assert doc["tokens_per_second"] > 0 and (tmp_path / "w" / "1" / "config.json").is_file()


def test_tiny_trial_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *BASE, "--lr", "3e-3", "--steps", "4", "--data", "synthetic")
    assert code == 0, err
    assert "pre L1 d32" in out and "synthetic:" in out
    assert "final eval loss" in out and "tokens/s" in out
    # Four steps learn nothing beyond token frequencies: the header names the baseline, the row says stalled.
    words = " ".join(out.split())  # lines wrap at the console's width (100 columns in a pipe)
    assert "unigram entropy" in words and "frequency-only loss on the eval batches" in words
    assert " stalled " in out and " ok " not in out


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(tmp_path: Path) -> None:
    import signal
    import time

    argv = [sys.executable, "-m", "sweeper.cli", "trial", *BASE, "--lr", "3e-3", "--steps", "100000", "--data", "synthetic",
            "--threads", "1", "--checkpoint-dir", str(tmp_path), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while time.time() < deadline and not any(tmp_path.glob("step-*")):  # first checkpoint at step 200
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["stopped"] and doc["results"][0]["outcome"] == "failed"
    stopped_at = doc["results"][0]["steps"]
    assert doc["results"][0]["reason"] == f"stopped at step {stopped_at} of 100000"
    assert sorted(p.name for p in tmp_path.glob("step-*")) == [f"step-{stopped_at:09d}"]
