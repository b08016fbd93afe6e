"""Fixture sweeps for the dashboard tests, written with the real StoreWriter (see
`sweeper.sim.synthetic`), and a helper to run `sweeper dashboard` as its own process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dashboards.data import SweepData, load_sweep
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep

HOSTILE = "<img src=x onerror=alert(1)>"
SPEC = SyntheticSpec(methods=("pre", "post", "layerrope"), depths=(4, 8, 16, 32), seeds=(0, 1), lrs_per_cell=6,
                     prior_spread=1.0, steps=120, report_every=10)  # fmt: skip


@pytest.fixture(scope="session")
def finished_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep with fits.json."""
    root = tmp_path_factory.mktemp("finished") / "sweep"
    sweep = SyntheticSweep(root, SPEC)
    sweep.advance(0.5)
    sweep.finish()
    sweep.write_fits()
    return root


@pytest.fixture(scope="session")
def finished(finished_dir: Path) -> SweepData:
    return load_sweep(finished_dir)


@pytest.fixture(scope="session")
def midway(tmp_path_factory: pytest.TempPathFactory) -> SweepData:
    """A sweep caught while running: running, pending, bracketed, edge and diverged cells, no fits."""
    root = tmp_path_factory.mktemp("midway") / "sweep"
    SyntheticSweep(root, SPEC).advance(0.62)
    return load_sweep(root)


@pytest.fixture()
def live_sweep(tmp_path: Path) -> SyntheticSweep:
    """A fresh sweep a test can advance; one method name is an HTML injection attempt."""
    spec = SyntheticSpec(methods=("pre", "layerrope", HOSTILE), depths=(4, 8, 16), seeds=(0,), lrs_per_cell=5,
                         steps=100, report_every=10, name="live <b>sweep</b>")  # fmt: skip
    sweep = SyntheticSweep(tmp_path / "sweep", spec)
    sweep.advance(0.4)
    return sweep


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    url: str
    port: int


def start_dashboard(sweep_dir: Path, *extra: str) -> ServerProcess:
    """`sweeper dashboard DIR --port 0` in its own process; returns once it printed its URL."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeper.cli", "dashboard", str(sweep_dir), "--port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    match = re.search(r"(http://[^\s]+:(\d+)/)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"dashboard did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return ServerProcess(proc, match.group(1), int(match.group(2)))


@pytest.fixture()
def dashboard_process(live_sweep: SyntheticSweep) -> Iterator[ServerProcess]:
    server = start_dashboard(live_sweep.root)
    yield server
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
