"""Crash-point harness (issue 19): kill the driver at each of its durable writes, relaunch, and
check that the results are those of the uninterrupted run.

    python -m tests.reliability.crash_harness                    # every write, killed right after it
    python -m tests.reliability.crash_harness --when both --hog 2
    python -m tests.reliability.crash_harness --points 1,5,ledger:open#2 --json out.json
    python -m tests.reliability.crash_harness --in-process --when both   # no Ray: SweepRun, seconds a point

1. The small sweep runs once, uninterrupted, with `LAYERROPE_SWEEPER_WRITE_LOG`: its N durable
   writes (ledger commits, store chunks, cells snapshot, manifest, YAML copy, the Searcher's part
   of Tune's snapshot; `sweeper.records.crash_points`) and its results.
2. For each crash point k, a fresh sweep directory: a driver with `LAYERROPE_SWEEPER_CRASH_AT=k`
   SIGKILLs itself right after (or before) its k-th write; a second driver resumes the sweep to the
   end. Checked: the same points with bit-identical objectives and states, the same optima
   (`sweeper optima`), no point trained again after the kill had found it finished, one ledger
   entry per point, and the store agreeing with the ledger point by point.

Drivers are subprocesses (`sweeper launch --address`) joining one local Ray (started here unless
`--address` names one). `--hog N` keeps N busy processes running throughout (timing must not
change results). Exit status 1 if any crash point gave other results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.records import crash_points
from sweeper.records.crash_points import CRASH_AT_ENV, WRITE_LOG_ENV, CrashPoint
from sweeper.records.ledger import OptunaLedger, storage_url
from sweeper.records.store import load_curves, load_points
from sweeper.run.sweep_run import SWEEP_DONE, SweepRun
from tests.sweeper.run.driving import end, make_sweep, member, report, result
from tests.reliability.conftest import (Driver, cpu_hog, finished_in_ledger, ledger_trials, optima_cells,
                                        write_sweep)

# One cell whose best learning rate is at the grid's edge: the grid, an extension and a
# two-point refinement (a plan that two trials start one after the other), five points.
SWEEP = dict(methods="[pre]", depths="[1]", steps=30, eval_every=15, stack=1, concurrency=2,
             lr="{grid: [1e-2, 3e-2], max_points: 6}")
STATE_OF = {"COMPLETE": "ok", "PRUNED": "diverged", "FAIL": "failed"}


@dataclass
class Results:
    """What a finished sweep says, in the terms the harness compares."""

    points: dict[str, tuple[str, float | None]]  # point id -> (state, objective), the store's latest rows
    optima: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)  # the store and the ledger disagree, duplicates

    @classmethod
    def of(cls, sweep: Path) -> Results:
        latest = load_points(sweep)
        points = {pid: (state, obj) for pid, state, obj in
                  zip(latest["point_id"].to_list(), latest["state"].to_list(), latest["objective"].to_list())}
        problems = []
        entries = ledger_trials(sweep)
        per_point = Counter(t["point_id"] for t in entries)
        problems += [f"{pid}: {n} ledger entries" for pid, n in per_point.items() if n > 1]
        finished = finished_in_ledger(sweep)
        if set(finished) != set(points) or len(finished) != len(entries):
            problems.append(f"ledger points {sorted(finished)} vs store points {sorted(points)}")
        for pid, t in finished.items():
            state, objective = points.get(pid, (None, None))
            if (STATE_OF[t["state"]], t["value"] if t["state"] == "COMPLETE" else None) != (state, objective):
                problems.append(f"{pid}: ledger {t['state']} {t['value']} vs store {state} {objective}")
        return cls(points, optima_cells(sweep), problems)


def differences(got: Results, want: Results) -> list[str]:
    out = list(got.problems)
    if got.points.keys() != want.points.keys():
        out.append(f"explored points differ: {sorted(got.points.keys() ^ want.points.keys())}")
    out += [f"{pid}: {got.points[pid]} vs uninterrupted {want.points[pid]}"
            for pid in sorted(got.points.keys() & want.points.keys()) if got.points[pid] != want.points[pid]]
    if got.optima != want.optima:
        out.append(f"optima differ: {got.optima} vs {want.optima}")
    return out


def read_writes(log: Path) -> list[str]:
    """The kinds of the writes a launch logged, in order."""
    if not log.exists():
        return []
    return [line.split("\t", 1)[1] for line in log.read_text().splitlines() if "\t" in line]


# -- in-process: the driver's SweepRun with a stand-in for Tune (no Ray) ------------------------


IN_PROCESS_SWEEP = {"name": "crash", "methods": ["pre"],
                    "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
                    "train": {"steps": 30, "batch_size": 4}, "lr": {"grid": [3e-3, 1e-2, 3e-2], "max_points": 8},
                    "stack": 1}


def objective(method: str, lr: float) -> float:
    """A planted landscape: the optimum past the grid's upper edge (an extension, then a
    two-point refinement: plans that trials start one after the other)."""
    best = 0.035 if method == "pre" else 0.025
    return 3.0 + 0.2 * math.log(lr / best) ** 2


class StandIn:
    """Tune's part, deterministic: two slots; every round, each live trial takes one step
    (start, a progress report, the final report and its end), then free slots are filled."""

    def __init__(self, sweep: SweepRun, prefix: str) -> None:
        self.sweep, self.prefix = sweep, prefix
        self.live: dict[str, tuple[dict[str, Any], int]] = {}  # trial -> (config, next step)
        self.n = 0

    def run(self) -> None:
        while True:
            for tid in list(self.live):
                self._step(tid)
            while len(self.live) < 2:
                self.n += 1
                tid = f"{self.prefix}-{self.n}"
                suggestion = self.sweep.suggest(tid)
                if suggestion is SWEEP_DONE:
                    return
                if suggestion is None:
                    break
                self.live[tid] = (suggestion.to_tune(), 0)
            self.sweep.flush()
            if not self.live:
                raise AssertionError("nothing to run and the sweep is not done")

    def _step(self, tid: str) -> None:
        config, step = self.live[tid]
        pids, lrs = config["spec"]["point_ids"], config["spec"]["lrs"]
        method = config["cell_id"].split("/")[0]
        if step == 0:
            self.sweep.on_trial_start(tid, pids)
        elif step == 1:
            report(self.sweep, tid, pids, {"step": 15, "tokens": 1920, "train_seconds": 1.0, "done": False,
                                           "members": [member(p, lr, eval_loss=objective(method, lr) + 0.5)
                                                       for p, lr in zip(pids, lrs)]})
        else:
            last = {"step": 30, "tokens": 3840, "train_seconds": 2.0, "done": True,
                    "members": [member(p, lr, "ok", eval_loss=objective(method, lr)) for p, lr in zip(pids, lrs)],
                    "results": [result(p, lr, "ok", loss=objective(method, lr), objective=objective(method, lr),
                                       init_loss=5.5, steps=30, tokens=3840) for p, lr in zip(pids, lrs)]}
            report(self.sweep, tid, pids, last)
            end(self.sweep, tid, pids, last, None)
            del self.live[tid]
            return
        self.live[tid] = (config, step + 1)


def launch_in_process(folder: Path, prefix: str) -> None:
    """One launch as `sweeper.run.launch` opens a sweep: the ledger's points, the store's states,
    no Tune trial restored (their points run again); then run to the end."""
    sweep = make_sweep(folder, IN_PROCESS_SWEEP, concurrency=2)
    latest = load_points(sweep.plan.sweep_dir)
    states = dict(zip(latest["point_id"].to_list(), latest["state"].to_list())) if latest.height else {}
    sweep.load(sweep.ledger.load(), {}, store_states=states)
    sweep.flush(force=True)
    StandIn(sweep, prefix).run()
    sweep.flush(force=True)


def outcome_in_process(folder: Path) -> dict[str, Any]:
    """Points (state, objective) and each cell's decision; asserts that the store agrees with the
    ledger and that no point has two ledger entries."""
    sweep_dir = folder / "sweep"
    points = load_points(sweep_dir)
    ledger = OptunaLedger(storage_url("sqlite", sweep_dir))
    entries = ledger.load()
    store = {pid: (state, obj) for pid, state, obj in
             zip(points["point_id"].to_list(), points["state"].to_list(), points["objective"].to_list())}
    recorded = {e.row.point_id: (e.row.state.value, e.row.objective) for e in entries}
    assert recorded == store, "the store disagrees with the ledger"
    per_point = Counter(t.user_attrs["point_id"] for s in ledger.storage.get_all_studies()
                        for t in ledger.storage.get_all_trials(ledger.storage.get_study_id_from_name(s.study_name)))
    assert max(per_point.values()) == 1, per_point
    final = make_sweep(folder, IN_PROCESS_SWEEP, concurrency=2)
    final.load(entries, {})
    decisions = {cid: (d.status, d.best, d.interp_lr, d.interp_objective) for cid, d in final.book.decisions.items()}
    return {"points": store, "decisions": decisions}


def _raise() -> None:
    raise CrashPoint()


def crash_in_process(folder: Path, k: int | str, when: str) -> bool:
    """One launch stopped at a crash point (`CrashPoint` raised), then a relaunch to the end.
    False if the first launch finished the sweep before it (store flushes follow the clock, so a
    run's number of writes varies a little)."""
    crash_points.arm(crash_at=k, when=when, action=_raise)
    try:
        launch_in_process(folder, "first")
        return False
    except CrashPoint:
        pass
    finally:
        crash_points.disarm()
    launch_in_process(folder, "again")
    return True


def reference_in_process(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """The uninterrupted in-process sweep: its outcome and the kinds of its durable writes."""
    log = folder / "writes.log"
    folder.mkdir(parents=True, exist_ok=True)
    crash_points.arm(log=log)
    try:
        launch_in_process(folder / "reference", "ref")
    finally:
        crash_points.disarm()
    return outcome_in_process(folder / "reference"), read_writes(log)


# -- real drivers: subprocesses joining one Ray, killed by SIGKILL ------------------------------------


@dataclass
class CrashOutcome:
    point: str  # K[:when] or KIND#N[:when], comma-separated for a chain of launches
    killed: bool  # every launch died at its crash point (False: one never got that far)
    kind: str | None  # the kind of the write the (last) launch died at
    finished_at_kill: int
    differences: list[str]
    retrained: list[str]
    seconds: float

    @property
    def identical(self) -> bool:
        return not self.differences and not self.retrained


class Harness:
    def __init__(self, folder: Path, address: str, sweep: dict[str, Any] | None = None, timeout: float = 600) -> None:
        self.folder, self.address, self.timeout = folder, address, timeout
        self.sweep = sweep or SWEEP
        self.reference: Results | None = None
        self.reference_writes: list[str] = []
        self.reference_seconds = 0.0

    def _yaml(self, name: str) -> tuple[Path, Path]:
        case = self.folder / name
        case.mkdir(parents=True, exist_ok=True)
        return write_sweep(case, "crash", **self.sweep), case / "crash"

    def _launch(self, yaml: Path, env: dict[str, str]) -> Driver:
        return Driver(yaml, self.address, yaml.parent / "logs", env=env)

    def run_reference(self) -> Results:
        yaml, sweep = self._yaml("reference")
        log = yaml.parent / "writes.log"
        started = time.time()
        summary = self._launch(yaml, {WRITE_LOG_ENV: str(log)}).summary()
        assert not summary["interrupted"], summary
        self.reference_seconds = time.time() - started
        self.reference_writes = read_writes(log)
        self.reference = Results.of(sweep)
        assert not self.reference.problems, self.reference.problems
        return self.reference

    def crash(self, points: list[str], name: str | None = None) -> CrashOutcome:
        """One sweep killed at each crash point in turn (one launch each), then resumed to the end."""
        assert self.reference is not None, "run_reference first"
        yaml, sweep = self._yaml(name or "crash-" + "-".join(p.replace(":", "_").replace("#", "_").replace("/", "_")
                                                            for p in points))
        started = time.time()
        killed, kind, finished = True, None, {}
        since_kill: list[tuple[float, set[str]]] = []  # (the next launch's start, points finished at the kill)
        for n, point in enumerate(points):
            log = yaml.parent / f"writes-{n}.log"
            driver = self._launch(yaml, {CRASH_AT_ENV: point, WRITE_LOG_ENV: str(log)})
            code, _, err = driver.wait(self.timeout)
            driver.kill_group()  # anything the driver started dies with it, as with a real SIGKILL of the group
            writes = read_writes(log)
            if code == 0:
                killed = False  # fewer writes than the crash point: the sweep finished
                kind = None
            else:
                assert code == -9, f"the driver failed at crash point {point} (exit {code}): {err[-3000:]}"
                kind = writes[-1] if writes else None  # "KIND (killed before it)" for a :before point
            finished = finished_in_ledger(sweep) if (sweep / "ledger.db").exists() else {}
            since_kill.append((time.time(), set(finished)))
        resumed = self._launch(yaml, {})
        summary = resumed.summary()
        assert not summary["interrupted"], summary
        results = Results.of(sweep)
        curves = load_curves(sweep)
        retrained = {pid for after, done in since_kill
                     for pid in curves.filter(curves["time"] > after)["point_id"].unique().to_list() if pid in done}
        return CrashOutcome(",".join(points), killed, kind, len(finished), differences(results, self.reference),
                            sorted(retrained), time.time() - started)


def every_crash_point(writes: list[str], when: str) -> list[str]:
    """Every crash point of a run with these writes: K:after (K:before too with `both`)."""
    out = []
    for k in range(1, len(writes) + 1):
        if when in ("before", "both"):
            out.append(f"{k}:before")
        if when in ("after", "both"):
            out.append(f"{k}:after")
    return out


@contextmanager
def local_ray(address: str | None) -> Iterator[str]:
    if address:
        yield address
        return
    import ray  # only the harness's own Ray needs it here

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="all", help="'all', or a comma list of K[:when] / KIND#N[:when]")
    parser.add_argument("--when", choices=("after", "before", "both"), default="after",
                        help="with --points all: kill right after each write, right before, or both")
    parser.add_argument("--every", type=int, default=1, help="with --points all: every n-th write only")
    parser.add_argument("--hog", type=int, default=0, help="busy processes to run throughout (e.g. 2: both cores)")
    parser.add_argument("--address", default=None, help="a running Ray to join (default: start a local one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the sweeps go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome here")
    parser.add_argument("--in-process", action="store_true",
                        help="the driver's SweepRun with a stand-in for Tune, stopped by an exception (no Ray)")
    args = parser.parse_args(argv)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="crash-harness-"))
    if args.in_process:
        with cpu_hog(args.hog):
            return main_in_process(folder, args)
    with local_ray(args.address) as address, cpu_hog(args.hog):
        harness = Harness(folder, address)
        harness.run_reference()
        kinds = Counter(harness.reference_writes)
        print(f"uninterrupted: {len(harness.reference_writes)} durable writes in {harness.reference_seconds:.1f} s "
              f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); {len(harness.reference.points)} points")
        points = (every_crash_point(harness.reference_writes, args.when)[:: args.every] if args.points == "all"
                  else [p.strip() for p in args.points.split(",") if p.strip()])
        outcomes = []
        for point in points:
            outcome = harness.crash([point])
            outcomes.append(outcome)
            verdict = "identical" if outcome.identical else "DIFFERENT: " + "; ".join(
                outcome.differences + [f"retrained {outcome.retrained}"] * bool(outcome.retrained))
            print(f"  {point:>28} {'killed at ' + str(outcome.kind) if outcome.killed else 'not reached':<34} "
                  f"finished {outcome.finished_at_kill:>2}  {outcome.seconds:5.1f} s  {verdict}", flush=True)
    killed = [o for o in outcomes if o.killed]
    same = sum(o.identical for o in outcomes)
    print(f"killed at {len(killed)} of {len(points)} crash points ({len(harness.reference_writes)} durable writes"
          f"{', hog ' + str(args.hog) if args.hog else ''}): identical results in {same} of {len(outcomes)}; "
          f"kinds killed at: {dict(Counter(o.kind for o in killed))}")
    if args.json:
        args.json.write_text(json.dumps({"writes": harness.reference_writes, "hog": args.hog,
                                         "outcomes": [o.__dict__ for o in outcomes]}, indent=2, default=str))
    return 0 if same == len(outcomes) else 1


def main_in_process(folder: Path, args: argparse.Namespace) -> int:
    started = time.time()
    want, writes = reference_in_process(folder)
    print(f"uninterrupted (in-process): {len(writes)} durable writes in {time.time() - started:.1f} s "
          f"({', '.join(f'{k} {n}' for k, n in sorted(Counter(writes).items()))}); {len(want['points'])} points")
    points = (every_crash_point(writes, args.when)[:: args.every] if args.points == "all"
              else [p.strip() for p in args.points.split(",") if p.strip()])
    same, killed, outcomes = 0, 0, []
    for point in points:
        k, when = crash_points.parse_crash_at(point)
        case = folder / point.replace(":", "_").replace("#", "_").replace("/", "_")
        started = time.time()
        reached = crash_in_process(case, k, when)
        got = outcome_in_process(case)
        kind = (writes[k - 1] if isinstance(k, int) and k <= len(writes) else str(k)) if reached else "not reached"
        identical = got == want
        same += identical
        killed += reached
        outcomes.append({"point": point, "kind": kind, "identical": identical, "seconds": time.time() - started})
        print(f"  {point:>28} {kind:<28} {time.time() - started:5.1f} s  {'identical' if identical else 'DIFFERENT'}",
              flush=True)
    print(f"in-process: killed at {killed} of {len(points)} crash points ({len(writes)} durable writes"
          f"{', hog ' + str(args.hog) if args.hog else ''}): identical results in {same} of {len(points)}")
    if args.json:
        args.json.write_text(json.dumps({"writes": writes, "hog": args.hog, "outcomes": outcomes}, indent=2))
    return 0 if same == len(points) else 1


if __name__ == "__main__":
    sys.exit(main())
