"""The pool's clock: simulated time that runs at the time compression while the virtual pool
trains, and at wall speed while it waits for the orchestration.

A simulated trial sleeps its training time over the compression. Before this clock, simulated time
was wall time × compression throughout, so every wall second in which the devices waited for the
controller — Tune handing a trial's last report to the driver, the searcher deciding, Ray starting a
worker process for the next trial, the trial setting itself up — became `compression` simulated
seconds of idle GPU (67 simulated minutes per wall second at 4000×) where a real pool spends seconds.
So the pool's clock of a launch runs at the compression except while the pool *waits for the
orchestration*:

- a trial has left its device (`end`) and the driver has not yet processed its end (`done`), or
- a trial the driver proposed (`proposed`, with the GPU share it asks Ray for) has not yet joined a
  device (`start`), and some device has room for that share (a free device holds any share; with no
  room it waits for capacity, which a real pool waits for too, and the clock runs on);

then it runs at 1×: those wall seconds count as the seconds they are. A wait counts at 1× for at most
`LATENCY_CAP` wall seconds (from the end, or from when the proposal found room), so that nothing the
fold misjudges (a trial Ray restarts after a fault, a proposal Ray cannot place) can stop the clock.
Waiting for *work* — nothing proposed, because the policy holds cells back or nothing is left —
always runs at the compression: the policy's own idling counts in full.

The driver (`proposed`, `done`: `sweeper.sim.devices.DriverLog`) and the trials (`start`, `end`:
`sweeper.sim.devices.Seat`) append to one busy log. A launch's clock is a fold over that launch's
lines in file order (a line's wall time taken as at least its predecessor's), starting at its first
line, so a trial waiting for its training time to pass (`PoolClock`, `Training`) and `busy_figures`
afterwards read the same clock. An end counts as a wait only once the driver has logged in the
launch, so a log without driver lines (written before this clock) reads as before: wall time ×
compression.

Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the most wall seconds one wait for the orchestration counts at 1× (a worker start on a loaded
#: 2-core machine was measured at up to ~30 s)
LATENCY_CAP = 120.0
#: a trial waiting for its training time while the clock runs at 1× looks again this often (wall seconds)
POLL_SECONDS = 0.05
#: Ray counts GPU shares in units of 1e-4; a share fits a device whose free share is this close to it
FIT_TOLERANCE = 1e-6


@dataclass
class LaunchClock:
    """One launch's clock, folded from its busy-log lines in order (`feed`); `at(wall)` reads it."""

    compression: float
    cap: float = LATENCY_CAP
    wall: float | None = None  # the last line's wall time (None: no line yet)
    sim: float = 0.0  # simulated seconds since the launch's first line, at `wall`
    gpus: int = 0  # the pool's GPUs (from the driver's lines)
    driver: bool = False  # the driver logs in this launch (its `done` lines will come)
    seated: dict[str, tuple[int, float]] = field(default_factory=dict)  # trial -> (device, share)
    left: dict[str, float] = field(default_factory=dict)  # trial -> when it left; the driver has not processed it
    proposed: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # trial -> (share, room since)
    processed: set[str] = field(default_factory=set)  # trials whose end the driver processed before they left
    until: float = -math.inf  # the clock runs at 1× until this wall time (while nothing changes)

    def feed(self, line: dict[str, Any]) -> float:
        """Take one line of this launch; returns its simulated time."""
        t = float(line["wall"])
        if self.wall is None:
            self.wall = t
        else:
            t = max(t, self.wall)
            self.sim, self.wall = self.at(t), t
        kind, trial = line.get("event"), str(line.get("trial"))
        if kind == "start":
            self.seated[trial] = (int(line["device"]), float(line.get("share", line.get("demand", 0.0))))
            self.proposed.pop(trial, None)
            self.left.pop(trial, None)
        elif kind == "end":
            if self.seated.pop(trial, None) is not None and self.driver and trial not in self.processed:
                self.left[trial] = t
        elif kind == "proposed":
            self.proposed[trial] = (float(line.get("share", 0.0)), None)
            self.gpus = max(self.gpus, int(line.get("gpus", 0)))
            self.driver = True
        elif kind == "done":
            self.driver = True
            if self.left.pop(trial, None) is None and trial in self.seated:
                self.processed.add(trial)  # the driver stopped it (its points were finished): it leaves next
            self.proposed.pop(trial, None)
        self._recount(t)
        return self.sim

    def _recount(self, now: float) -> None:
        """Which waits hold the clock at 1× now, and until when (room changes only with a line)."""
        load: dict[int, float] = defaultdict(float)
        for device, share in self.seated.values():
            load[device] += share
        devices = set(range(self.gpus)) | set(load)
        free = max((1.0 - load[d] for d in devices), default=1.0)
        since = list(self.left.values())
        for trial, (share, room) in list(self.proposed.items()):
            if free >= share - FIT_TOLERANCE:
                room = now if room is None else room
                since.append(room)
            else:
                room = None
            self.proposed[trial] = (share, room)
        self.until = max(since) + self.cap if since else -math.inf

    def frozen(self, wall: float) -> bool:
        """The clock runs at 1× at this wall time (as far as the lines fed so far say)."""
        return self.wall is not None and wall < self.until

    def at(self, wall: float) -> float:
        """Simulated seconds since the launch's first line, at this wall time (no later line assumed)."""
        if self.wall is None:
            return 0.0
        wall = max(wall, self.wall)
        slow = max(0.0, min(wall, self.until) - self.wall)
        return self.sim + slow + (wall - self.wall - slow) * self.compression


class PoolClock:
    """A launch's clock, read live from the busy log (each call reads only the lines added since the last)."""

    def __init__(self, log: str | Path, launch: int, compression: float, *, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, cap: float = LATENCY_CAP) -> None:
        self.log = Path(log)
        self.launch = launch
        self.fold = LaunchClock(compression, cap)
        self.wall = wall
        self.sleep = sleep
        self.offset = 0
        self.rest = b""
        self.tag = b'"launch": %d,' % launch  # other launches' lines are skipped unparsed

    def _catch_up(self) -> None:
        try:
            if os.stat(self.log).st_size <= self.offset:
                return
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()  # a line still being written
        for raw in lines:
            if self.tag not in raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if int(line.get("launch", 0)) == self.launch:
                self.fold.feed(line)

    def now(self) -> float:
        """Simulated seconds since the launch's first line."""
        self._catch_up()
        return self.fold.at(self.wall())

    def wait_until(self, target: float) -> None:
        """Sleep until the clock reads `target`. While it runs at the compression the sleep is the rest over
        the compression (a wait for the orchestration that begins meanwhile only wakes it early); while it
        runs at 1× it looks again every POLL_SECONDS."""
        while True:
            self._catch_up()
            wall = self.wall()
            left = target - self.fold.at(wall)
            if left <= 0:
                return
            if self.fold.wall is None:  # no line of this launch yet: plain compressed time
                self.sleep(left / self.fold.compression)
                return
            if self.fold.frozen(wall):
                self.sleep(min(POLL_SECONDS, left, self.fold.until - wall))
            else:
                self.sleep(left / self.fold.compression)


@dataclass
class Training:
    """A trial's training time on the pool's clock: each report interval ends its simulated duration after
    the previous one was *due*, so the wall time a trial spends between intervals — a late wake-up, its
    report (Tune's synchronous round trip to the driver, with its checkpoint: tens of milliseconds, tens
    of simulated minutes at 4000×, where a real trial's report costs milliseconds) — is made up from the
    next intervals instead of added to its stay on the device. A trial later than its next deadline does
    not sleep at all (it can fall behind only when its reports take longer than its training)."""

    clock: PoolClock
    deadline: float | None = None

    def start(self) -> None:
        self.deadline = self.clock.now()

    def pause(self, duration: float) -> None:
        """Let `duration` simulated seconds of training pass."""
        if self.deadline is None:
            self.start()
        assert self.deadline is not None
        self.deadline += duration
        self.clock.wait_until(self.deadline)
