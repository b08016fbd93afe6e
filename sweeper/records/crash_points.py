"""Crash points: a test seam that counts the driver's durable writes and can kill it at one, or
hold it there.

Crash consistency is tested the way storage systems test it: run a small sweep once and list
its durable writes, then for every k kill the driver right before or right after its k-th write,
relaunch, and compare with the uninterrupted run (`tests/reliability/crash_harness.py`).

Every durable write of a running sweep passes through `durable_write(kind)`: each ledger commit
(`sweeper.records.ledger`), each atomic file (`sweeper.records.durable`: store chunks, the cells
snapshot, the manifest, the YAML copy) and the Searcher's part of Tune's experiment snapshot
(`sweeper.run.tune_session`). Off (one `None` check) unless `sweeper launch` arms it from:

- `LAYERROPE_SWEEPER_WRITE_LOG=FILE`: append one line per write, `k<TAB>kind`, written after
  the write returned (a line is a write that completed; a kill right before a write logs that
  write with "(killed before it)");
- `LAYERROPE_SWEEPER_CRASH_AT=K` or `K:before` / `K:after` (the default): SIGKILL this process
  (the driver) right before or right after its K-th write; `KIND#N[:when]` (e.g.
  `ledger:open#2`): at its N-th write of that kind (a relaunch's writes differ from the first
  launch's, so a chain of kills names its crash points by kind);
- `LAYERROPE_SWEEPER_PAUSE_AT=K[:when]` or `KIND#N[:when]` with `LAYERROPE_SWEEPER_PAUSE_DIR=DIR`: hold
  the driver right before or right after that write (after, by default) until a test has done
  something to the real environment there (taken the ledger's lock from another process, filled the
  disk): the driver writes `DIR/paused` (`k<TAB>kind<TAB>pid`, renamed into place) and waits until
  `DIR/resume` exists, then goes on. A fault injected so lands at a known write of the sweep, however
  fast the sweep runs.

Only the driver arms it (`sweeper.run.launch`), so Ray workers that inherit the environment never
count or die. Tests that drive a `SweepRun` in-process arm it with an action that raises
`CrashPoint` instead.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

WRITE_LOG_ENV = "LAYERROPE_SWEEPER_WRITE_LOG"
CRASH_AT_ENV = "LAYERROPE_SWEEPER_CRASH_AT"
PAUSE_AT_ENV = "LAYERROPE_SWEEPER_PAUSE_AT"
PAUSE_DIR_ENV = "LAYERROPE_SWEEPER_PAUSE_DIR"
WHEN = ("before", "after")
PAUSED_FILE, RESUME_FILE = "paused", "resume"


class CrashPoint(BaseException):
    """Raised by an in-process crash point (a BaseException: nothing on the way may swallow it)."""


def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def pause_until_resumed(folder: Path, k: int, kind: str, poll: float = 0.05) -> None:
    """Say where this process stands (`folder/paused`) and wait until `folder/resume` exists."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{PAUSED_FILE}.{os.getpid()}.tmp"
    tmp.write_text(f"{k}\t{kind}\t{os.getpid()}\n")
    os.replace(tmp, folder / PAUSED_FILE)  # whole or absent: the test polls for it
    while not (folder / RESUME_FILE).exists():
        time.sleep(poll)


@dataclass
class _Armed:
    crash_at: int | str | None  # the K-th write, or "KIND#N"
    when: str
    log: Path | None
    action: Callable[[], None]
    pause_at: int | str | None = None  # the same forms as crash_at
    pause_when: str = "after"
    pause_dir: Path | None = None
    count: int = 0
    of_kind: Counter[str] = field(default_factory=Counter)

    def at(self, point: int | str | None, k: int, kind: str) -> bool:
        return point is not None and (point == k or point == f"{kind}#{self.of_kind[kind]}")

    def hit(self, k: int, kind: str) -> bool:
        return self.at(self.crash_at, k, kind)

    def pause(self, k: int, kind: str, when: str) -> None:
        if self.pause_dir is not None and self.pause_when == when and self.at(self.pause_at, k, kind):
            pause_until_resumed(self.pause_dir, k, kind)


_ARMED: _Armed | None = None


def parse_crash_at(text: str, env: str = CRASH_AT_ENV) -> tuple[int | str, str]:
    """`K[:when]` -> (K, when); `KIND#N[:when]` -> ("KIND#N", when); `when` is before or after."""
    text = text.strip()
    when = "after"
    for suffix in WHEN:
        if text.endswith(f":{suffix}"):
            text, when = text[: -len(suffix) - 1], suffix
    if text.isdigit() and int(text) >= 1:
        return int(text), when
    kind, _, n = text.rpartition("#")
    if kind and n.isdigit() and int(n) >= 1:
        return text, when
    raise ValueError(f"{env}={text!r}: expected K or KIND#N (N, K >= 1), optionally :before or :after")


def arm(*, crash_at: int | str | None = None, when: str = "after", log: Path | None = None,
        action: Callable[[], None] = sigkill_self, pause_at: int | str | None = None, pause_when: str = "after",
        pause_dir: Path | None = None) -> None:
    """Count durable writes from now on (from 1); log them; run `action` at write `crash_at`; hold at
    write `pause_at` until `pause_dir/resume` exists."""
    global _ARMED
    for w in (when, pause_when):
        if w not in WHEN:
            raise ValueError(f"when must be one of {WHEN}, not {w!r}")
    if pause_at is not None and pause_dir is None:
        raise ValueError(f"{PAUSE_AT_ENV} needs {PAUSE_DIR_ENV}: the folder of the paused/resume handshake")
    _ARMED = _Armed(crash_at, when, log, action, pause_at, pause_when, pause_dir)


def disarm() -> None:
    global _ARMED
    _ARMED = None


def arm_from_env() -> None:
    """Arm from `LAYERROPE_SWEEPER_WRITE_LOG` / `_CRASH_AT` / `_PAUSE_AT` (+ `_PAUSE_DIR`) when any is set."""
    log, crash, pause = (os.environ.get(name) for name in (WRITE_LOG_ENV, CRASH_AT_ENV, PAUSE_AT_ENV))
    if not log and not crash and not pause:
        return
    k, when = parse_crash_at(crash) if crash else (None, "after")
    p, pause_when = parse_crash_at(pause, PAUSE_AT_ENV) if pause else (None, "after")
    pause_dir = os.environ.get(PAUSE_DIR_ENV)
    arm(crash_at=k, when=when, log=Path(log) if log else None, pause_at=p, pause_when=pause_when,
        pause_dir=Path(pause_dir) if pause_dir else None)


def writes() -> int:
    """Durable writes counted since `arm` (0 when not armed)."""
    return _ARMED.count if _ARMED is not None else 0


@contextmanager
def durable_write(kind: str) -> Iterator[None]:
    """Wrap one durable write (one commit, one renamed file) of kind `kind`."""
    armed = _ARMED
    if armed is None:
        yield
        return
    armed.count += 1
    armed.of_kind[kind] += 1
    k = armed.count
    hit = armed.hit(k, kind)
    armed.pause(k, kind, "before")
    if hit and armed.when == "before":
        if armed.log is not None:
            with open(armed.log, "a") as fh:
                fh.write(f"{k}\t{kind} (killed before it)\n")
        armed.action()
    yield
    if armed.log is not None:
        with open(armed.log, "a") as fh:  # not fsynced: the log of a killed process needs only the OS's page cache
            fh.write(f"{k}\t{kind}\n")
    armed.pause(k, kind, "after")
    if hit and armed.when == "after":
        armed.action()
