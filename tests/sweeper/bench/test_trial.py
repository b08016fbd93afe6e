"""`sweeper bench`: the figures it prints are consistent with each other and with the counting rules
(speed itself is measured by the command, never asserted); bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from models import ModelConfig, count_params, flops_per_token
from sweeper.cli import main
from sweeper.bench.trial import BenchSettings, run_bench

# as for the trials tests: one intra-op thread, a private corpus cache (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")


@pytest.mark.slow
def test_figures_follow_from_the_timings_and_the_counts() -> None:
    settings = BenchSettings(method="layerrope", width=32, depth=2, vocab=300, seq_len=16, batch=4, stack=2, threads=1,
                             steps=5, warmup=1, compare=True)
    result = run_bench(settings)
    cfg = ModelConfig(scheme="layerrope", width=32, depth=2, n_heads=1, vocab=300, seq_len=16)
    counting = result["counting"]
    assert counting["flops_per_token"] == flops_per_token(cfg)
    assert counting["flops_per_token_6n"] == 6 * count_params(cfg)["matmul"]
    assert counting["flops_per_token_attention"] == 12 * 2 * 16 * 32
    assert len(result["matmul_peak_gflops_measured"]) == 6 and result["matmul_peak_gflops"] == max(result["matmul_peak_gflops_measured"])
    for run in result["runs"].values():
        assert run["steps"] == 5
        tokens = 2 * 4 * 16 * 5  # the stack's members, or the 2 separate models, each 4 x 16 tokens per step
        assert run["tokens_per_s"] == pytest.approx(tokens / run["wall_s"])
        assert run["model_flops_per_s"] == pytest.approx(run["tokens_per_s"] * counting["flops_per_token"])
        assert run["fraction_of_peak_6n"] == pytest.approx(
            run["tokens_per_s"] * counting["flops_per_token_6n"] / (result["matmul_peak_gflops"] * 1e9))
        assert len(run["fraction_of_peak_6n_by_round"]) == 5 and run["fraction_of_peak_6n_cpu"] > 0
    speedup = result["runs"]["stack"]["tokens_per_s"] / result["runs"]["separate"]["tokens_per_s"]
    assert result["stack_speedup"] == pytest.approx(speedup)
    assert result["compile_s"] == 0.0 and len(result["warmup_step_s"]) == 1
    assert result["execution"].startswith("eager") and result["machine"]["threads"] == 1


@pytest.mark.slow
def test_breakdown_splits_profiled_steps_by_kind_of_work() -> None:
    settings = BenchSettings(width=32, depth=2, vocab=256, seq_len=16, batch=4, stack=2, threads=1, steps=5, warmup=1,
                             breakdown=True)
    result = run_bench(settings)
    b = result["breakdown"]
    assert b["steps"] == 5 and b["profiled_step_s"] > 0
    assert set(b["ms_per_step"]) == {"gemm", "attention", "compiled graphs", "other"}
    assert sum(b["share"].values()) == pytest.approx(1.0)
    assert b["ms_per_step"]["gemm"] > 0 and b["ms_per_step"]["attention"] > 0
    assert b["ms_per_step"]["compiled graphs"] == 0  # eager: no inductor graph
    cfg = ModelConfig(scheme="pre", width=32, depth=2, n_heads=1, vocab=256, seq_len=16)
    gemm_flops = 6 * count_params(cfg)["matmul"] * 2 * 4 * 16 * 5  # 2 members x 4 x 16 tokens x 5 steps
    assert b["gemm_rate"]["gflops_per_s"] == pytest.approx(gemm_flops / (b["ms_per_step"]["gemm"] * 5 / 1000) / 1e9)
    assert b["gemm_rate"]["fraction_of_peak"] == pytest.approx(b["gemm_rate"]["gflops_per_s"] / result["matmul_peak_gflops"])


@pytest.mark.slow
def test_cli_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--width", "32", "--depth", "1", "--seq-len", "16", "--batch", "2", "--steps", "5", "--warmup", "1",
            "--threads", "1"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["settings"]["vocab"] == 256 and result["runs"]["stack"]["tokens_per_s"] > 0
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "matmul peak" in out and "load average" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--method", "nope"], "--method 'nope': unknown scheme"),
    (["--steps", "3"], "--steps: must be >= 5"),
    (["--width", "100", "--heads", "3"], "head width"),
    (["--compare"], "--compare: give --stack K >= 2"),
    (["--cuda-graphs"], "--cuda-graphs: needs --device cuda"),
    (["--breakdown", "--device", "cuda"], "--breakdown: cpu only"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "sweeper.cli", "bench", *args], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_member_lost_mid_benchmark_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A diverged member skips its backward pass: timings would be wrong, so nothing is reported."""
    from sweeper.bench import trial as bench
    from trials.errors import TrialInputError

    monkeypatch.setattr(bench, "BENCH_LR", 1e6)
    with pytest.raises(TrialInputError, match="diverged"):
        run_bench(BenchSettings(width=32, depth=1, seq_len=16, batch=2, threads=1, steps=5, warmup=1))
