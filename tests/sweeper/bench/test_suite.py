"""`sweeper bench --suite gpu --device cpu --quick --json`: every check of the GPU suite at small shapes on
this CPU, through the real command in a subprocess (its sweep joins the session's Ray), so that the suite
cannot be broken when a GPU is lent. The figures are judged on a GPU only: here every check must finish
(`ran`, `pass`) or not apply (`skipped`: CUDA graphs and the CUDA tests), never `error` or `timeout`.

Needs > 20 s: it trains four shapes, a determinism check, a compiled 60-step trial and a small sweep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# as for the trials tests: one intra-op thread, a private corpus cache (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")


@pytest.mark.slow
def test_quick_cpu_suite_runs_every_check(ray_session: str, tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    cmd = [sys.executable, "-m", "sweeper.cli", "bench", "--suite", "gpu", "--device", "cpu", "--quick", "--json",
           "--out", str(out), "--address", ray_session]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result == json.loads(out.read_text())  # the file holds the final JSON too
    assert result["finished"] and result["ok"] and result["device"] == "cpu" and result["quick"]
    checks = result["checks"]
    from sweeper.bench.suite import compiled_schemes

    correct = [f"correct/{scheme}" for scheme in compiled_schemes()]
    assert {"correct/pre", "correct/layerrope"} <= set(correct)  # depth.yaml's schemes, compiled
    expected = {"shape/L2/K8", "shape/L2/K1", "shape/L4/K8", "shape/L4/K1", "graphs/L2/K8", "determinism",
                "stacked_vs_separate", "mfu", "memory_model", "long_trial", "sweep", "cuda_tests", *correct}
    assert set(checks) == expected
    # in their order of value: correctness, then the shapes (memory, then throughput), then the long trial and sweep
    order = list(checks)
    assert order[:len(correct) + 2] == [*correct, "determinism", "cuda_tests"]
    assert order.index("memory_model") < order.index("stacked_vs_separate") < order.index("sweep")
    assert all(checks[name]["status"] == "pass" and checks[name]["result"]["agrees"] for name in correct)
    statuses = {name: c["status"] for name, c in checks.items()}
    assert statuses["graphs/L2/K8"] == statuses["cuda_tests"] == "skipped", statuses
    assert all(s in ("pass", "ran", "skipped") for s in statuses.values()), statuses
    assert "[suite]" in done.stderr  # progress on stderr

    shape = checks["shape/L4/K8"]["result"]
    assert shape["stack"] == 8 and shape["evaluation"]["measured"] >= 1 and shape["tokens_per_s"] > 0
    assert shape["execution"].startswith("eager")  # the quick run's shapes; its long trial compiles
    speedup = checks["stacked_vs_separate"]["speedup"]
    assert speedup["L4"] == pytest.approx(shape["tokens_per_s"] / checks["shape/L4/K1"]["result"]["tokens_per_s"])
    assert checks["determinism"]["status"] == "pass"  # bit-identical on a CPU: judged here too
    memory = checks["memory_model"]["shapes"]["shape/L4/K8"]
    assert memory["predicted_bytes"] > checks["memory_model"]["shapes"]["shape/L4/K1"]["predicted_bytes"] > 0

    long = checks["long_trial"]
    assert long["result"]["steps"] == 60 and long["result"]["evaluations"] >= 2 and long["learned"]
    assert long["result"]["execution"].startswith("compiled")
    assert long["recompile_limit_hits"] == 0 and long["recompiles"] <= 4
    sweep = checks["sweep"]
    assert sweep["exit_code"] == 0 and sweep["points_finished"] > 0 and not sweep["gpu_fractions"]
    assert 0 < sweep["busy_fraction"] <= 1  # the share of its time with a trial running (judged on a GPU)


@pytest.mark.slow
def test_a_failing_or_hanging_check_never_stops_the_others(tmp_path: Path) -> None:
    """The worker protocol alone: a check that raises is `error`, one past its limit is killed (`timeout`,
    with its last progress), and the checks after both still run, in a new worker process."""
    from sweeper.bench.suite import Check, Report, SuiteConfig, Worker

    report = Report(SuiteConfig.make("cpu", True, None), tmp_path / "suite.json")
    ended: list[tuple[str, str]] = []
    worker = Worker(report, tmp_path, lambda check, record: ended.append((check.name, record["status"])))
    long = {"device": "cpu", "width": 16, "depth": 1, "heads": 2, "seq_len": 8, "vocab": 32, "batch_size": 2,
            "micro_batch": None, "eval_every": 10**6, "eval_batches": 1, "steps": 10**6, "report_every": 1,
            "dtype": "fp32", "compile": False, "tokens": 4096}
    checks = [
        Check("broken", "train", {"no_such_setting": 1}, 60, "-"),
        Check("endless", "long_trial", long, 12, "-"),
        Check("determinism", "determinism", {"device": "cpu", "steps": 4, "width": 16, "seq_len": 8}, 120, "-"),
    ]
    worker.run(checks, lambda check: check.timeout_s)
    assert ended == [("broken", "error"), ("endless", "timeout"), ("determinism", "done")]
    assert "no_such_setting" in worker.results["broken"]["error"]
    assert worker.results["endless"]["progress"]["step"] >= 1  # how far it got before it was stopped
    assert worker.results["determinism"]["result"]["rerun_bit_identical"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_memory_prediction_is_where_stack_auto_grants_the_stack(device: str, tmp_path: Path) -> None:
    """The memory check's prediction is `stack: auto`'s own model: at the predicted bytes it grants K members,
    one byte-percent below it fewer."""
    from dataclasses import replace

    from sweeper.bench.suite import SuiteConfig
    from sweeper.bench.suite_run import _cell_for, predicted_trial_bytes
    from sweeper.search.memory import auto_stack

    cfg = SuiteConfig.make(device, False, None)
    cell = _cell_for(cfg, tmp_path, depth=48, batch=512, micro_batch=16, name="memory")
    for k in (2, 5, 8):
        predicted = predicted_trial_bytes(cell, k)
        assert auto_stack(replace(cell, memory_gb=predicted * 1.0001 / 2**30), k, k, None, 1) == k
        assert auto_stack(replace(cell, memory_gb=predicted * 0.9999 / 2**30), k, k, None, 1) == k - 1
    one, two = predicted_trial_bytes(cell, 1), predicted_trial_bytes(cell, 2)
    # linear in K, but for the fused loss's GPU chunk, which all members share up to its cap
    assert 0 < one < two < predicted_trial_bytes(cell, 8) <= one + 7 * (two - one) + 4


def test_the_sweep_checks_busy_time_is_the_union_of_the_points_spans() -> None:
    from sweeper.bench.suite_run import covered

    # two overlapping trials, a gap, one more, and one outside the window
    spans = [(10.0, 30.0), (20.0, 40.0), (50.0, 60.0), (200.0, 300.0)]
    assert covered(spans, 0.0, 100.0) == 40.0
    assert covered(spans, 25.0, 55.0) == 20.0
    assert covered([], 0.0, 1.0) == 0.0
