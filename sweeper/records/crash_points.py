"""Crash points: a test seam that counts the driver's durable writes and can kill it at one.

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
  launch's, so a chain of kills names its crash points by kind).

Only the driver arms it (`sweeper.run.launch`), so Ray workers that inherit the environment never
count or die. Tests that drive a `SweepRun` in-process arm it with an action that raises
`CrashPoint` instead.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

WRITE_LOG_ENV = "LAYERROPE_SWEEPER_WRITE_LOG"
CRASH_AT_ENV = "LAYERROPE_SWEEPER_CRASH_AT"
WHEN = ("before", "after")


class CrashPoint(BaseException):
    """Raised by an in-process crash point (a BaseException: nothing on the way may swallow it)."""


def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class _Armed:
    crash_at: int | str | None  # the K-th write, or "KIND#N"
    when: str
    log: Path | None
    action: Callable[[], None]
    count: int = 0
    of_kind: Counter[str] = field(default_factory=Counter)

    def hit(self, k: int, kind: str) -> bool:
        return self.crash_at == k or self.crash_at == f"{kind}#{self.of_kind[kind]}"


_ARMED: _Armed | None = None


def parse_crash_at(text: str) -> tuple[int | str, str]:
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
    raise ValueError(f"{CRASH_AT_ENV}={text!r}: expected K or KIND#N (N, K >= 1), optionally :before or :after")


def arm(*, crash_at: int | str | None = None, when: str = "after", log: Path | None = None,
        action: Callable[[], None] = sigkill_self) -> None:
    """Count durable writes from now on (from 1); log them; run `action` at write `crash_at`."""
    global _ARMED
    if when not in WHEN:
        raise ValueError(f"when must be one of {WHEN}, not {when!r}")
    _ARMED = _Armed(crash_at, when, log, action)


def disarm() -> None:
    global _ARMED
    _ARMED = None


def arm_from_env() -> None:
    """Arm from `LAYERROPE_SWEEPER_WRITE_LOG` / `LAYERROPE_SWEEPER_CRASH_AT` when either is set."""
    log, crash = os.environ.get(WRITE_LOG_ENV), os.environ.get(CRASH_AT_ENV)
    if not log and not crash:
        return
    k, when = parse_crash_at(crash) if crash else (None, "after")
    arm(crash_at=k, when=when, log=Path(log) if log else None)


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
    if hit and armed.when == "before":
        if armed.log is not None:
            with open(armed.log, "a") as fh:
                fh.write(f"{k}\t{kind} (killed before it)\n")
        armed.action()
    yield
    if armed.log is not None:
        with open(armed.log, "a") as fh:  # not fsynced: the log of a killed process needs only the OS's page cache
            fh.write(f"{k}\t{kind}\n")
    if hit and armed.when == "after":
        armed.action()
