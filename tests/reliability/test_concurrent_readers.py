"""Item 7: `sweeper status`, `sweeper optima` and the dashboard read a sweep while it runs.

The kill test's sweep runs once (twice with `RELIABILITY_FULL=1`; subprocess drivers on the session's Ray), after a
run alone — the session's uninterrupted reference run when it has just finished (as in a full run of
the suite, where this test is the first to ask for it), else one more run alone: first while three
readers poll it as fast as they can — `status --json` and `optima --format json`
in new processes back to back, and a `sweeper dashboard` process whose update endpoint is polled
incrementally. Every read must succeed with whole rows (no torn or short table: a cell never shows
fewer finished points than an earlier read), and the sweep must end with the uninterrupted run's
results.

The readers run at the lowest CPU priority (nice 19): on a 2-core machine, readers at equal
priority simply take CPU from the trials (a back-to-back `sweeper status` loop is a core of
Python start-up), which says nothing about the store. At nice 19 they get the CPU the sweep leaves,
so a slowdown would come from the writer waiting for readers — chunks are renamed into place and
readers take no lock, so it should not. The readers' CPU time is recorded beside the wall times.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sweeper.core.states import CELL_STATUSES

from .conftest import FULL, KILL_SWEEP, Driver, cli_cmd, optima_json, write_sweep

BASELINE_FRESH_S = 120.0  # a reference run that ended this recently is the baseline (the load drifts)

pytestmark = pytest.mark.slow


class Reader(threading.Thread):
    """Runs `read()` back to back until stopped; keeps counts, errors and CPU time."""

    def __init__(self, name: str, read: Any, every: float = 0.0) -> None:
        super().__init__(name=name, daemon=True)
        self.read, self.stop, self.every = read, threading.Event(), every
        self.reads, self.errors, self.cpu = 0, [], 0.0
        self.seen: dict[str, int] = {}  # cell -> finished points last seen

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.read(self)
                self.reads += 1
            except Exception as exc:  # noqa: BLE001 (every failure is collected and asserted on)
                self.errors.append(f"{type(exc).__name__}: {exc}"[:500])
            self.stop.wait(self.every)

    def monotone(self, cell: str, finished: int) -> None:
        if finished < self.seen.get(cell, 0):
            raise AssertionError(f"{cell}: {finished} finished points after {self.seen[cell]} (a short read)")
        self.seen[cell] = finished


def run_with_cpu(proc: subprocess.Popen) -> tuple[int, bytes, bytes, float]:
    """Wait for a process; (exit code, stdout, stderr, CPU seconds), from wait4."""
    assert proc.stdout is not None and proc.stderr is not None
    err_chunks: list[bytes] = []
    drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    drain.start()
    out = proc.stdout.read()
    drain.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, b"".join(err_chunks), usage.ru_utime + usage.ru_stime


READER_ENV = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a crashing reader prints where it crashed


def lowest_priority(cmd: list[str]) -> list[str]:
    """The command at nice 19 (`nice` itself, not a preexec_fn: readers are started from threads)."""
    return ["nice", "-n", "19", *cmd]


def cli_read(args: list[str]) -> Any:
    def read(reader: Reader) -> None:
        proc = subprocess.Popen(lowest_priority(cli_cmd(*args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=READER_ENV)
        code, out, err, cpu = run_with_cpu(proc)
        reader.cpu += cpu
        if code != 0 or b"Traceback" in err:
            raise AssertionError(f"exit {code}: {err.decode(errors='replace')[-3000:]}")
        doc = json.loads(out)
        for row in doc["cells"]:
            assert row["cell_id"] and row["status"] in CELL_STATUSES, row
            reader.monotone(row["cell_id"], row["n_points"])

    return read


def dashboard_read(url: str) -> Any:
    state = {"since": 0, "epoch": ""}

    def read(reader: Reader) -> None:
        query = f"since={state['since']}" + (f"&epoch={state['epoch']}" if state["epoch"] else "")
        with urllib.request.urlopen(f"{url}api/update?{query}", timeout=60) as resp:
            msg = json.loads(resp.read())
        assert msg["error"] is None, msg["error"]
        state["since"], state["epoch"] = msg["rev"], msg.get("epoch") or ""
        reader.monotone("summary", msg["summary"]["n_points"])

    return read


def sweep_with_readers(folder: Path, ray_session: str, logs: Path, drivers: list, every: float,
                       status_every: float) -> tuple[Path, float, float, list[Reader], float]:
    """Run the kill test's sweep while status, optima and the dashboard read it; `every` seconds
    between dashboard polls (0: back to back), `status_every` between status / optima runs."""
    folder.mkdir(parents=True, exist_ok=True)
    yaml = write_sweep(folder, "killsweep", **KILL_SWEEP)
    sweep = folder / "killsweep"
    driver = Driver(yaml, ray_session, logs)
    drivers.append(driver)
    deadline = time.time() + 120
    while not (sweep / "manifest.json").exists():
        assert time.time() < deadline and driver.running, "the sweep never started"
        time.sleep(0.05)

    dash = subprocess.Popen(lowest_priority(cli_cmd("dashboard", str(sweep), "--port", "0")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=READER_ENV)
    assert dash.stdout is not None
    url = re.search(r"http://\S+/", dash.stdout.readline().decode()).group(0)  # type: ignore[union-attr]
    readers = [Reader("status", cli_read(["status", str(sweep), "--json"]), status_every),
               Reader("optima", cli_read(["optima", str(sweep), "--format", "json"]), status_every),
               Reader("dashboard", dashboard_read(url), every)]
    for reader in readers:
        reader.start()
    try:
        driver.summary()
        wall, load_during = time.time() - driver.started, os.getloadavg()[0]
    finally:
        for reader in readers:
            reader.stop.set()
        for reader in readers:
            reader.join(120)
        dash.terminate()
        _, _, _, dash_cpu = run_with_cpu(dash)
    for reader in readers:
        assert not reader.errors, (reader.name, reader.errors[:5])
    return sweep, wall, load_during, readers, dash_cpu


def test_readers_poll_a_running_sweep_without_errors_or_torn_rows(ray_session, tmp_path, reference_run, drivers,
                                                                 figures):
    # Baseline: the same sweep without readers, just before (the machine's load drifts): the reference
    # run if it has just ended, else one more run alone.
    baseline_run = "the uninterrupted reference run, just before"
    baseline, load_alone = reference_run["wall"], reference_run["load"]
    if time.time() - reference_run["ended"] > BASELINE_FRESH_S:
        baseline_run = "the same sweep alone, just before"
        (tmp_path / "alone").mkdir()
        alone = Driver(write_sweep(tmp_path / "alone", "killsweep", **KILL_SWEEP), ray_session, tmp_path / "logs")
        drivers.append(alone)
        alone.summary()
        baseline, load_alone = time.time() - alone.started, os.getloadavg()[0]

    sweep, wall, load_during, readers, dash_cpu = sweep_with_readers(
        tmp_path / "flat-out", ray_session, tmp_path / "logs", drivers, every=0.0, status_every=0.0)
    for reader in readers:
        assert reader.reads >= 3, (reader.name, reader.reads)
    keys = ("cell_id", "status", "best_lr", "best_loss", "interp_lr", "interp_objective", "n_points")
    got = [{k: r[k] for k in keys} for r in optima_json(sweep)["cells"]]
    want = [{k: r[k] for k in keys} for r in optima_json(reference_run["dir"])["cells"]]
    assert got == want
    assert wall < 3 * baseline, (wall, baseline)  # a writer blocked by readers would stall; CPU sharing slows a bit

    # At the rates a user reads (the dashboard page polls once a second, `status --watch 10`, an
    # `optima` now and then), the sweep must not slow measurably. A third run of the sweep: only with
    # RELIABILITY_FULL=1 (the flat-out run above already fails for a writer that waits on readers).
    user: dict[str, Any] = {}
    if FULL:
        _, user_wall, _, user_readers, _ = sweep_with_readers(
            tmp_path / "user-rate", ray_session, tmp_path / "logs", drivers, every=1.0, status_every=10.0)
        user_got = [{k: r[k] for k in keys} for r in optima_json(tmp_path / "user-rate" / "killsweep")["cells"]]
        assert user_got == want
        assert user_wall < 1.5 * baseline, (user_wall, baseline)
        user = dict(
            user_rate_readers="dashboard polled every 1 s, status and optima every 10 s",
            user_rate_reads={r.name: r.reads for r in user_readers},
            sweep_wall_seconds_with_user_rate_readers=round(user_wall, 1),
            slowdown_at_user_rate=round(user_wall / baseline, 2),
        )

    figures.record(
        "concurrency", order=12, title="Concurrent readers",
        does=("the 4-cell sweep again while `status --json`, `optima --format json` (new processes, back to back) "
              "and the dashboard's update endpoint poll it without pause; then (RELIABILITY_FULL=1) once more with readers at a user's rate"),
        reads={r.name: r.reads for r in readers},
        read_errors=sum(len(r.errors) for r in readers),
        torn_or_short_reads=0,
        results_equal_to_uninterrupted=got == want,  # (and the user-rate run's, asserted above)
        sweep_wall_seconds_without_readers=round(baseline, 1),
        baseline_run=baseline_run,
        sweep_wall_seconds_with_readers=round(wall, 1),
        slowdown_flat_out=round(wall / baseline, 2),
        **user,
        reader_priority="nice 19 (they take the CPU the trials leave)",
        reader_cpu_seconds=round(sum(r.cpu for r in readers) + dash_cpu, 1),
        load_average_before_and_during=[round(load_alone, 1), round(load_during, 1)],
        cpus=os.cpu_count(),
    )
