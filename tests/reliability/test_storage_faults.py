"""Item 4: storage faults. Damaged Parquet chunks, a damaged or replaced ledger, a ledger locked
by another process, a full disk: each is a clear one-line error, or a recovery that keeps every
finished result — never a silently wrong table, never a traceback.

Exit codes: 2 for a damaged file in the sweep directory (the user must repair or restore it),
1 for the environment (free space, release the lock) — run the same command again afterwards.
The finished sweep these tests damage is a copy of the session's uninterrupted reference run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from sweeper.records.crash_points import PAUSE_AT_ENV, PAUSE_DIR_ENV, PAUSED_FILE, RESUME_FILE
from sweeper.records.store import load_points

from .conftest import KILL_SWEEP, Driver, cli_cmd, optima_cells, optima_json, wait_for, write_sweep

pytestmark = pytest.mark.slow

READERS = {  # every command that reads a sweep directory
    "status": ["status", "{dir}"],
    "status --json": ["status", "{dir}", "--json"],
    "optima": ["optima", "{dir}", "--format", "json"],
    "fit": ["fit", "{dir}", "--no-write", "--resamples", "200"],
    "plots": ["plots", "{dir}", "--out", "{out}", "--file-types", "html"],
}


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kw)


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def finished(reference_run: dict[str, Any], tmp_path: Path) -> Path:
    """A copy of a finished 4-cell sweep (Ray's experiment folder left out: nothing to resume)."""
    sweep = tmp_path / "killsweep"
    shutil.copytree(reference_run["dir"], sweep, ignore=shutil.ignore_patterns("ray", "driver.lock"))
    write_sweep(tmp_path, "killsweep", out=sweep, **KILL_SWEEP)
    return sweep


# -- damaged chunks ----------------------------------------------------------------------------------

CORRUPTOR = r"""
import json, sys
from pathlib import Path
from sweeper.core.errors import UserError
from sweeper.records.store import load_cells, load_curves, load_points

root, targets = Path(sys.argv[1]), json.loads(sys.argv[2])
readers = {"points": lambda: load_points(root, latest=False), "curves": lambda: load_curves(root),
           "cells": lambda: load_cells(root)}
out = {"variants": 0, "detected": 0, "identical": 0, "silent": 0, "silent_examples": []}
for table, rel in targets:
    path, read = root / rel, readers[table]
    original, data = read(), (root / rel).read_bytes()
    cuts = sorted({0, 1, 4, 8, len(data) // 2, len(data) - 8, len(data) - 1})
    step = max(1, len(data) // 60)
    variants = [("truncate", n, 0) for n in cuts]
    variants += [("flip", off, bit) for off in range(0, len(data), step) for bit in (0x01, 0x10, 0x80)]
    for kind, n, bit in variants:
        bad = data[:n] if kind == "truncate" else data[:n] + bytes([data[n] ^ bit]) + data[n + 1:]
        path.write_bytes(bad)
        print(f"{rel} {kind} {n} {bit}", file=sys.stderr, flush=True)  # the last line names a crash
        out["variants"] += 1
        try:
            now = read()
        except UserError as exc:
            assert "damaged store chunk" in exc.message and str(path) in exc.message, exc.message
            out["detected"] += 1
            continue
        if now.equals(original):
            out["identical"] += 1
        else:
            out["silent"] += 1
            out["silent_examples"].append([rel, kind, n, bit])
    path.write_bytes(data)
print(json.dumps(out))
"""


def test_damaged_chunks_are_reported_never_read_wrong_and_repaired_from_the_ledger(finished, tmp_path, figures):
    original = optima_json(finished)
    points_chunk = sorted((finished / "store" / "points").glob("*.parquet"))[0]
    curves_chunk = sorted((finished / "store" / "curves").glob("*.parquet"))[0]
    targets = [["points", str(points_chunk.relative_to(finished))], ["curves", str(curves_chunk.relative_to(finished))],
               ["cells", "store/cells.parquet"]]
    # Every truncation and ~180 single-bit flips per file, read by the store's readers in one process:
    # each must raise the one-line damaged-chunk error or read the identical table (a flip in an unused
    # footer field); a silently different table or a crash of the process fails the test.
    proc = subprocess.run([sys.executable, "-c", CORRUPTOR, str(finished), json.dumps(targets)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"the reader process died at: {proc.stderr.strip().splitlines()[-1:]}"
    flips = json.loads(proc.stdout)
    assert flips["silent"] == 0, flips["silent_examples"]

    # Every reading command names a damaged file and the repair, in one line, exit 2.
    cells = finished / "store" / "cells.parquet"
    for damaged in (points_chunk, cells):
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    for name, args in READERS.items():
        cmd = [a.format(dir=finished, out=tmp_path / "plots") for a in args]
        line = one_line_error(run(*cmd), 2, "damaged store chunk", "--repair")
        assert str(points_chunk) in line or str(cells) in line, line
    served = _dashboard_error(finished)
    assert "damaged store chunk" in served and "--repair" in served

    # The repair rebuilds the store from the ledger: the same optima as before the damage.
    repaired = run("status", str(finished), "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert optima_json(finished) == original
    assert len(list(finished.glob("store.damaged-*"))) == 1  # the damaged store is kept aside, not deleted

    figures.record(
        "storage_chunks", order=4, title="Storage: damaged Parquet chunks",
        does=("every truncation and ~180 single-bit flips of a points chunk, a curves chunk and cells.parquet, "
              "read by the store; then every reading command on a truncated chunk; then `status --repair`"),
        corrupted_variants=flips["variants"],
        detected_as_damaged=flips["detected"],
        read_back_identical=flips["identical"],
        silently_wrong_tables=flips["silent"],
        reader_crashes=0,
        commands_with_one_line_error=f"{len(READERS)} of {len(READERS)} (+ dashboard shows the error)",
        optima_after_repair_equal=True,
    )


def _dashboard_error(sweep: Path) -> str:
    """Start `sweeper dashboard` on the sweep and return the error its update endpoint reports."""
    proc = subprocess.Popen(cli_cmd("dashboard", str(sweep), "--port", "0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "api/update?since=0", timeout=30) as resp:
            return json.loads(resp.read())["error"] or ""
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_relaunch_over_a_damaged_chunk_rebuilds_the_store_and_trains_nothing(finished, ray_session, drivers):
    original = optima_json(finished)
    chunk = sorted((finished / "store" / "curves").glob("*.parquet"))[-1]
    chunk.write_bytes(b"PAR1" + os.urandom(64))
    driver = Driver(finished.parent / "killsweep.yaml", ray_session, finished.parent / "logs")
    drivers.append(driver)
    summary = driver.summary()
    assert summary["trials"] == 0 and summary["points_finished"] == 0
    assert any("rebuilt from the ledger" in m for m in summary["messages"]), summary["messages"]
    assert optima_json(finished) == original


# -- the ledger ----------------------------------------------------------------------------------------

LEDGER_DAMAGE = {
    "truncated to half": lambda data: data[: len(data) // 2],
    "header overwritten": lambda data: b"\x00" * 100 + data[100:],
    "random bytes": lambda data: os.urandom(len(data)),
    "emptied (0 bytes)": lambda data: b"",
}


@pytest.mark.parametrize("damage", list(LEDGER_DAMAGE))
def test_a_damaged_or_replaced_ledger_is_refused_and_the_store_kept(finished, ray_session, damage, figures):
    ledger = finished / "ledger.db"
    ledger.write_bytes(LEDGER_DAMAGE[damage](ledger.read_bytes()))
    original_optima = optima_json(finished)  # readers use the store, not the ledger: still fine
    store_before = tree_digest(finished / "store")
    yaml = finished.parent / "killsweep.yaml"

    launch = run("launch", str(yaml), "--address", ray_session, "--json", timeout=300)
    line = one_line_error(launch, 2, str(ledger))
    repair = run("status", str(finished), "--repair")
    one_line_error(repair, 2, str(ledger), "left as it is")
    assert tree_digest(finished / "store") == store_before, "the store must be left exactly as it was"
    assert not list(finished.glob("store.damaged-*"))
    assert optima_json(finished) == original_optima

    entry = figures.entries.get("storage_ledger", {}).get("figures", {}).get("cases", {})
    entry[damage] = {"launch": line[len("error: "):][:160], "repair": "refused, store untouched"}
    figures.record("storage_ledger", order=5, title="Storage: damaged or replaced ledger",
                   does=("ledger.db truncated, overwritten, randomised or emptied; then `launch` and "
                         "`status --repair`; readers keep working from the store"),
                   cases=entry, store_changed=0, readers_affected=0)


LOCKER = r"""
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=float(sys.argv[3]), isolation_level=None)
try:
    con.execute("BEGIN EXCLUSIVE")
except sqlite3.OperationalError:
    print("busy", flush=True)
    sys.exit(3)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


def hold_lock(ledger: Path, seconds: float, acquire_timeout: float = 60.0) -> subprocess.Popen | None:
    """Another process takes SQLite's exclusive lock on the ledger for `seconds`; None if it could
    not get the lock within `acquire_timeout`."""
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(ledger), str(seconds), str(acquire_timeout)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line == "busy":
        proc.wait()
        return None
    assert line == "locked"
    return proc


def test_a_locked_ledger_waits_or_stops_cleanly_and_readers_do_not_care(finished, ray_session, figures):
    ledger, yaml = finished / "ledger.db", finished.parent / "killsweep.yaml"
    locker = hold_lock(ledger, 30)
    assert locker is not None
    try:
        timings = {}
        for name in ("status", "optima"):
            t = time.monotonic()
            proc = run(*[a.format(dir=finished, out="") for a in READERS[name]])
            timings[name] = round(time.monotonic() - t, 2)
            assert proc.returncode == 0, proc.stderr
        t = time.monotonic()
        stopped = run("launch", str(yaml), "--address", ray_session, timeout=300,
                      env={"LAYERROPE_SWEEPER_LEDGER_TIMEOUT": "2"})
        refused_after = time.monotonic() - t
        one_line_error(stopped, 1, "locked by another process", "LAYERROPE_SWEEPER_LEDGER_TIMEOUT")
    finally:
        locker.kill()
        locker.wait()
    # A lock held for a while (an optuna-dashboard write, a backup) is waited for.
    locker = hold_lock(ledger, 4)
    assert locker is not None
    t = time.monotonic()
    waited = run("launch", str(yaml), "--address", ray_session, "--json", timeout=300)
    waited_for = time.monotonic() - t
    locker.wait()
    assert waited.returncode == 0, waited.stderr[-3000:]
    assert json.loads(waited.stdout)["trials"] == 0

    figures.record(
        "storage_locked_ledger", order=6, title="Storage: ledger locked by another process",
        does=("another process holds SQLite's exclusive lock on ledger.db: readers, a launch with a 2 s lock "
              "timeout, a launch while the lock is held for 4 s"),
        reader_seconds_while_locked=timings,
        launch_refused_after_seconds=round(refused_after, 1),
        launch_exit_code_when_lock_outlasts_timeout=1,
        launch_waited_for_4s_lock_and_completed_seconds=round(waited_for, 1),
    )


# -- faults while a sweep runs: a lock that outlasts the timeout, then a full disk -----------------------


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 64 MB tmpfs at tmp_path/disk if this process may mount one (root with CAP_SYS_ADMIN), else None."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill the filesystem until at most `leave` bytes are free (a sweep may be writing to it too)."""
    filler = disk / "filler.bin"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb", buffering=0) as fh:
        chunk = b"\0" * (1 << 20)
        remaining = free - leave
        while remaining > 0:
            try:
                fh.write(chunk[: min(len(chunk), remaining)])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            remaining -= len(chunk)
    return filler


HALF_SWEEP = {**KILL_SWEEP, "methods": "[pre]"}  # the reference run's two Pre-Norm cells


def test_a_sweep_survives_a_lock_and_a_full_disk_with_every_result(ray_session, tmp_path, reference_run, small_disk,
                                                                   drivers, figures):
    """One sweep, three launches: the ledger gets locked past the timeout mid-sweep (stop, exit 1);
    the disk fills up mid-sweep (stop, exit 1); after the space is freed the sweep completes, with
    no failed point and the same optima as the uninterrupted run.

    Each fault is injected at a known write of the sweep, whatever its speed: the driver is held
    there by the pause seam (`LAYERROPE_SWEEPER_PAUSE_AT`, `sweeper.records.crash_points`) while
    the test applies the real fault, then released. No timer decides where a fault lands.

    The sweep is the reference run's Pre-Norm half (its two cells): a cell's points, learning rates and
    objectives depend on that cell alone (one LR per trial, the cell's seed), so the reference run's rows
    of those cells are what this sweep must end with, point by point."""
    root = small_disk or tmp_path
    sweep = root / "killsweep"
    yaml = write_sweep(tmp_path, "killsweep", out=sweep, **HALF_SWEEP)
    finished = lambda: int(load_points(sweep)["state"].is_in(["ok", "diverged", "failed"]).sum())  # noqa: E731

    # 1. a lock that outlasts the ledger timeout, mid-sweep: the driver is held right before the
    # commit that finishes its third point (between commits: it holds no SQLite lock), another
    # process takes the ledger's exclusive lock and keeps it until the driver has stopped.
    first = Driver(yaml, ray_session, tmp_path / "logs", env={"LAYERROPE_SWEEPER_LEDGER_TIMEOUT": "2",
                                                                **pause_at("ledger:finish#3:before", tmp_path / "p1")})
    drivers.append(first)
    held_at = wait_paused(first, tmp_path / "p1")
    locker = hold_lock(sweep / "ledger.db", 600, acquire_timeout=10)
    assert locker is not None, "the held driver kept the ledger busy"
    resume(tmp_path / "p1")
    code, _, err = first.wait(300)
    locker.kill()
    locker.wait()
    assert code == 1, err[-3000:]
    lock_line = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lock_line) == 1 and "locked by another process" in lock_line[0], err[-3000:]
    after_lock = finished()

    # 2. a full disk, mid-sweep: the relaunch is held right before it writes its first points chunk (a
    # point it finished); then the tmpfs is filled up (without a tmpfs: a 1-byte file-size limit is put
    # on the driver, whose output goes to pipes, which the limit does not cover).
    env = pause_at("file:points/chunk#1:before", tmp_path / "p2")
    second = Driver(yaml, ray_session, tmp_path / "logs", env=env, pipes=small_disk is None)
    drivers.append(second)
    wait_paused(second, tmp_path / "p2")
    if small_disk is not None:
        filler: Path | None = fill(small_disk, leave=0)
        how = "tmpfs filled up while the relaunch was held before its first points chunk"
    else:
        filler = None
        resource.prlimit(second.proc.pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        how = "RLIMIT_FSIZE 1 byte on the relaunch, held before its first points chunk"
    resume(tmp_path / "p2")
    code, _, err = second.wait(300)
    assert code == 1, err[-3000:]
    disk_line = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(disk_line) == 1 and ("no space left" in disk_line[0] or "size limit" in disk_line[0]
                                    or "disk is full" in disk_line[0]), err[-3000:]
    after_disk = finished()
    if filler is not None:
        filler.unlink()

    # 3. space freed: the sweep completes with everything
    third = Driver(yaml, ray_session, tmp_path / "logs")
    drivers.append(third)
    summary = third.summary()
    points = load_points(sweep)
    assert set(points["state"]) <= {"ok", "diverged"}, points.filter(points["state"] == "failed")
    reference = load_points(reference_run["dir"]).filter(pl.col("cell_id").str.starts_with("pre/"))
    mine = dict(zip(points["point_id"].to_list(), points["objective"].to_list()))
    assert mine == dict(zip(reference["point_id"].to_list(), reference["objective"].to_list()))
    got = optima_cells(sweep)
    want = [cell for cell in optima_cells(reference_run["dir"]) if cell["cell_id"].startswith("pre/")]
    assert len(got) == 2 and got == want

    figures.record(
        "storage_during_sweep", order=7, title="Storage: lock and full disk during a sweep",
        does=(f"one sweep, three launches: ledger locked past a 2 s timeout mid-sweep (driver held before write "
              f"{held_at}); disk full mid-sweep ({how}); then relaunch"),
        lock_error=lock_line[0][len("error: "):],
        disk_error=disk_line[0][len("error: "):],
        finished_after_lock_stop=after_lock,
        finished_after_disk_stop=after_disk,
        final_points=points.height,
        failed_points=0,
        objectives_equal_to_uninterrupted=f"{points.height} of {reference.height}",
        last_launch_resumed=summary["resumed"],
        optima_equal_to_uninterrupted=got == want,
    )


def pause_at(point: str, folder: Path) -> dict[str, str]:
    """The environment that holds a driver at durable write `point` (the crash points' seam)."""
    return {PAUSE_AT_ENV: point, PAUSE_DIR_ENV: str(folder)}


def wait_paused(driver: Driver, folder: Path, timeout: float = 300) -> str:
    """Wait until the driver is held at its pause point; returns `k kind` of the write it is held at."""
    wait_for(lambda: (folder / PAUSED_FILE).exists() or not driver.running, timeout, "the driver to pause")
    assert (folder / PAUSED_FILE).exists(), f"the driver ended before its pause point: {driver.wait(30)[2][-3000:]}"
    k, kind, _ = (folder / PAUSED_FILE).read_text().split("\t")
    return f"{k} ({kind})"


def resume(folder: Path) -> None:
    (folder / RESUME_FILE).touch()


def test_a_failed_write_leaves_the_old_file_and_no_debris(finished, tmp_path, figures):
    """`sweeper fit` writing fits.json under a file-size limit: one line, exit 1, the previous
    fits.json intact, no temporary file left behind."""
    assert run("fit", str(finished), "--resamples", "200").returncode == 0
    before = (finished / "fits.json").read_bytes()
    limit = 2_000
    proc = subprocess.run(cli_cmd("fit", str(finished), "--resamples", "200", "--seed", "1"), capture_output=True,
                          text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = one_line_error(proc, 1, "file size limit exceeded")
    assert (finished / "fits.json").read_bytes() == before
    assert not [p.name for p in finished.iterdir() if p.name.endswith(".tmp")]
    figures.record("storage_failed_write", order=8, title="Storage: a write that fails (file-size limit)",
                   does="`sweeper fit` under RLIMIT_FSIZE 2 kB (fits.json is larger)",
                   error=line[len("error: "):], old_file_intact=True, temporary_files_left=0)
