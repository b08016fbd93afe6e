"""Shared test fixtures. One local Ray instance serves every stream's Ray tests in a session.

Start-up of Ray costs 6-12 s on a 2-core machine and its processes take about 0.9 GB, so
tests must never call `ray.init` themselves: they ask for `ray_session` (it yields the
cluster's GCS address, which a subprocess can join with `--address`). Ray is started
lazily, only if some selected test asks for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# OpenMP's default spin-wait makes multi-threaded torch 10-25x slower when the cores are shared
# (pytest beside Ray workers on 2 cores); it must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The CLI prints to a pipe at its own width unless COLUMNS says otherwise; pytest-xdist's workers export
# COLUMNS=80, which would wrap the tables the tests read. Tests that check COLUMNS set it themselves.
os.environ.pop("COLUMNS", None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): two workers, or one on a single core. Each worker has its own Ray
    (`ray_session`, 2 CPUs); more workers than cores would only slow the subprocess sweeps."""
    return max(1, min(2, os.cpu_count() or 1))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """Where the reliability figures went (`figures` in tests/reliability/conftest.py writes them; under
    pytest-xdist, each worker that ran reliability tests wrote its own file)."""
    paths = [getattr(config, "_reliability_report", None)]
    if paths[0] is None and getattr(config.option, "numprocesses", None):
        env = os.environ.get("RELIABILITY_REPORT")
        base = Path(str(config._tmp_path_factory.getbasetemp()))  # type: ignore[attr-defined]
        paths = [Path(env)] if env else sorted(base.glob("popen-gw*/reliability.json"))
    for path in paths:
        if path is not None and path.exists():
            terminalreporter.write_line(f"reliability figures: {path} (table: python tests/reliability/table.py {path})")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs for the whole test session; yields its GCS address."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    address = ray.get_runtime_context().gcs_address
    yield address
    ray.shutdown()


# -- settings for tests that train tiny models in this process ------------------------------------------
# Autouse in tests/models and tests/trials (their conftests); a test module elsewhere that trains asks for
# them with `pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")`.


@pytest.fixture()
def one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP's spinning
    threads make them 10-20x slower (measured: 0.5 s vs 10 s per training test under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture()
def private_cache(corpus_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Corpora cached in a folder private to the test session, never in the user's ~/.cache."""
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(corpus_cache))
    return corpus_cache



# -- one small real sweep with two seeds, shared by the tests that read one (slow: ~1 min on 2 cores) -----


@pytest.fixture(scope="session")
def two_seed_sweep(tmp_path_factory: pytest.TempPathFactory, corpus_cache: Path) -> Path:
    """`sweeper launch sweeps/quickstart.yaml "methods=[pre,layerrope]" "model.depths=[1]" "seeds=[0,1]"
    "train.steps=60"`, run once per session in its own process (its own Ray); returns the sweep directory."""
    out = tmp_path_factory.mktemp("two-seed") / "sweep"
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "LAYERROPE_SWEEPER_CACHE": str(corpus_cache)}
    done = subprocess.run(
        [sys.executable, "-m", "sweeper.cli", "launch", str(repo / "sweeps" / "quickstart.yaml"), "methods=[pre,layerrope]",
         "model.depths=[1]", "seeds=[0,1]", "train.steps=60", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out
