"""Shared pieces of the reliability suite (issue 8): tiny sweeps, subprocess drivers, fault
plans, ledger and store snapshots, and the figures every test records.

Figures: each test stores what it measured with `figures.record(key, title=..., does=...,
**numbers)`. At the end of the session they are merged into a JSON file —
`$RELIABILITY_REPORT` if set, else `<pytest basetemp>/reliability.json` (printed in the
terminal summary) — and `python tests/reliability/table.py FILE` turns that file into the
README's reliability table.

Length: by default the long tests run their CI versions (two controller kills instead of six, two
real-driver crash points instead of four); `RELIABILITY_FULL=1` runs the full ones, as the README's
reliability figures were measured.

CPU load: `RELIABILITY_CPU_HOG=2` runs two busy processes (at Ray's worker niceness, 15) beside the
kill tests (the six random kills, the crash points), to show that timing does not change results.

Fault injection (`trials.faults`) is switched on for the whole session by pointing
`LAYERROPE_SWEEPER_FAULTS` at a file that exists only while a test writes it. The variable
is set here, at import (collection) time, before any test starts Ray, so the Ray workers of
the shared `ray_session` and of every subprocess driver inherit it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from tests.shared_runs import once_per_session

FAULTS_FILE = Path(tempfile.gettempdir()) / f"layerrope-reliability-faults-{os.getpid()}.json"
os.environ["LAYERROPE_SWEEPER_FAULTS"] = str(FAULTS_FILE)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPORT_ENV = "RELIABILITY_REPORT"
HOG_NICENESS = 15  # Ray's worker niceness (core_worker: "Adjusted worker niceness to 15")
HOG_ENV = "RELIABILITY_CPU_HOG"  # N busy processes beside the kill tests (timing must not change results)
FULL = os.environ.get("RELIABILITY_FULL", "") == "1"  # the long versions (six kills, four crash points)

SWEEP = """\
name: {name}
output: {out}
methods: {methods}
model: {{width: 32, heads: 2, depths: {depths}, seq_len: 32}}
train: {{steps: {steps}, batch_size: 8, eval_every: {eval_every}, eval_batches: 2, report_every: 10,
        checkpoint_every: 10, schedule: {{warmup: 0.1}}}}
divergence: {{stall_margin: null}}  # seconds of training learn little beyond byte frequencies (rule: tests/trials)
lr: {lr}
resources: {{cpu: 1}}
concurrency: {concurrency}
stack: {stack}
retries: {retries}
"""


def write_sweep(folder: Path, name: str, *, out: Path | None = None, methods: str = "[pre]", depths: str = "[1]",
                steps: int = 60, eval_every: int = 20, lr: str = "{grid: [3e-3, 1e-2, 3e-2], max_points: 6}",
                concurrency: int = 2, stack: int | str = 1, retries: int = 1) -> Path:
    """A tiny sweep YAML (width 32, built-in corpus, seconds per trial); returns its path."""
    path = folder / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name, out=out or folder / name, methods=methods, depths=depths, steps=steps,
                                 eval_every=eval_every, lr=lr, concurrency=concurrency, stack=stack, retries=retries))
    return path


# -- subprocess drivers ----------------------------------------------------------------------------


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sweeper.cli", *args]


class Driver:
    """`sweeper launch FILE --address ADDR --json` in its own session (its own process group),
    with its output in files (a full pipe would stall it). `pipes`: through pipes that threads copy
    into those files (a file-size limit on the driver does not cover a pipe)."""

    def __init__(self, yaml: Path, address: str, logs: Path, *extra: str, env: dict[str, str] | None = None,
                 pipes: bool = False) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        stamp = f"{time.time():.6f}"
        self.out_path, self.err_path = logs / f"launch-{stamp}.out", logs / f"launch-{stamp}.err"
        self.started = time.time()
        self.copiers: list[threading.Thread] = []
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cli_cmd("launch", str(yaml), "--address", address, "--json", *extra),
                                         stdout=subprocess.PIPE if pipes else out,
                                         stderr=subprocess.PIPE if pipes else err, start_new_session=True,
                                         env={**os.environ, **(env or {})})
        for stream, path in ((self.proc.stdout, self.out_path), (self.proc.stderr, self.err_path)):
            if stream is not None:
                self.copiers.append(threading.Thread(target=_copy, args=(stream, path), daemon=True))
                self.copiers[-1].start()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def kill_group(self) -> float:
        """SIGKILL the driver's whole process group (exactly the group this test started); returns when."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        when = time.time()
        self.proc.wait(30)
        return when

    def wait(self, timeout: float = 600) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise
        for copier in self.copiers:
            copier.join(30)
        return code, self.out_path.read_text(), self.err_path.read_text()

    def summary(self) -> dict[str, Any]:
        code, out, err = self.wait()
        assert code == 0, err[-4000:]
        return json.loads(out)


def _copy(stream: IO[bytes], path: Path) -> None:
    with open(path, "wb") as fh:
        for chunk in iter(lambda: stream.read1(1 << 16), b""):  # type: ignore[attr-defined]
            fh.write(chunk)
            fh.flush()


@pytest.fixture()
def drivers() -> Iterator[list[Driver]]:
    """Drivers a test starts; any still running at the end are killed (their own groups only)."""
    started: list[Driver] = []
    yield started
    for driver in started:
        if driver.running:
            driver.kill_group()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
        except Exception:  # the store or ledger may not exist yet
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextmanager
def cpu_hog(processes: int) -> Iterator[None]:
    """`processes` busy loops for the duration: a machine whose cores are all taken.

    The loops run at nice 15, the niceness Ray gives its worker processes: at nice 0 they would take
    ~97% of each core from the trials (CFS weights 1024 against 36), and a trial that trains in
    seconds would take many minutes (measured: 3 minutes to import and build one trial actor)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(HOG_NICENESS))
            for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture()
def cpu_load() -> Iterator[int]:
    """`$RELIABILITY_CPU_HOG` busy processes for the test's duration (none by default)."""
    processes = int(os.environ.get(HOG_ENV, "0") or 0)
    with cpu_hog(processes):
        yield processes


# -- fault plans ------------------------------------------------------------------------------------


@pytest.fixture()
def fault_plan() -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """Write the session's fault file (read by every trial at start); removed after the test."""

    def write(faults: list[dict[str, Any]]) -> None:
        tmp = FAULTS_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults))
        tmp.replace(FAULTS_FILE)

    yield write
    FAULTS_FILE.unlink(missing_ok=True)


def fired(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# -- ledger and store snapshots ---------------------------------------------------------------------


def ledger_trials(sweep: Path) -> list[dict[str, Any]]:
    """Every Optuna trial in the sweep's ledger: point id, state, value, attempt."""
    import optuna

    from sweeper.records.ledger import storage_url

    storage = optuna.storages.RDBStorage(storage_url("sqlite", sweep))
    out = []
    for study in storage.get_all_studies():
        for t in storage.get_all_trials(storage.get_study_id_from_name(study.study_name), deepcopy=False):
            out.append({"cell_id": study.study_name, "point_id": t.user_attrs.get("point_id"), "state": t.state.name,
                        "value": t.value, "attempt": t.user_attrs.get("attempt"), "number": t.number,
                        "reason": t.user_attrs.get("reason"), "metrics": t.user_attrs.get("metrics") or {}})
    storage.engine.dispose()
    return out


def finished_in_ledger(sweep: Path) -> dict[str, dict[str, Any]]:
    """point id -> its finished ledger trial (COMPLETE, PRUNED or FAIL)."""
    return {t["point_id"]: t for t in ledger_trials(sweep) if t["state"] in ("COMPLETE", "PRUNED", "FAIL")}


def objectives(sweep: Path) -> dict[str, float | None]:
    from sweeper.records.store import load_points

    points = load_points(sweep)
    return dict(zip(points["point_id"].to_list(), points["objective"].to_list()))


def optima_json(sweep: Path) -> dict[str, Any]:
    proc = subprocess.run(cli_cmd("optima", str(sweep), "--format", "json"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def optima_cells(sweep: Path) -> list[dict[str, Any]]:
    """What `sweeper optima` says of each cell: status, grid optimum, interpolated optimum."""
    keys = ("cell_id", "status", "best_lr", "best_loss", "interp_lr", "interp_objective")
    return [{k: row[k] for k in keys} for row in optima_json(sweep)["cells"]]


# -- the shared sweep of items 1 and 7 ------------------------------------------------------------

KILL_SWEEP = dict(methods="[pre, post]", depths="[1, 2]", steps=60, stack=1, concurrency=2,
                  lr="{grid: [3e-3, 1e-2, 3e-2], max_points: 8}")


@pytest.fixture(scope="session")
def reference_run(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The kill test's sweep run once without interruption (a subprocess driver joining the
    session's Ray): its results are what every interrupted run must reproduce, and its wall
    time is the concurrency test's baseline."""
    def run(folder: Path) -> dict[str, Any]:
        yaml = write_sweep(folder, "killsweep", **KILL_SWEEP)
        driver = Driver(yaml, ray_session, folder / "logs")
        summary = driver.summary()
        ended = time.time()
        return {"dir": str(folder / "killsweep"), "summary": summary, "wall": ended - driver.started, "ended": ended,
                "load": os.getloadavg()[0]}

    done = once_per_session(tmp_path_factory, "reference", run)  # one run for both xdist workers
    return {**done, "dir": Path(done["dir"])}


# -- figures ----------------------------------------------------------------------------------------


class Figures:
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def record(self, key: str, *, title: str, does: str, order: int, **numbers: Any) -> None:
        entry = self.entries.setdefault(key, {"title": title, "does": does, "order": order, "figures": {}})
        entry["figures"].update(numbers)


def report_path(config: pytest.Config) -> Path:
    env = os.environ.get(REPORT_ENV)
    if env:
        return Path(env)
    return Path(str(config._tmp_path_factory.getbasetemp())) / "reliability.json"  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    collected = Figures()
    yield collected
    if not collected.entries:
        return
    path = report_path(request.config)
    merged: dict[str, Any] = {}
    if path.exists():
        try:
            merged = json.loads(path.read_text()).get("tests", {})
        except ValueError:
            merged = {}
    merged.update(collected.entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"created": time.time(), "machine": machine(), "tests": merged}, indent=2,
                               default=str) + "\n")
    request.config._reliability_report = path  # type: ignore[attr-defined]


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "load_average": load, "python": sys.version.split()[0]}
