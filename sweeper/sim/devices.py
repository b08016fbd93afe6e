"""The virtual pool's devices: where Ray puts a simulated trial, how trials on one device share it,
and how busy the devices were.

**Placement is Ray's own.** The virtual pool is one Ray node with N GPUs. Ray assigns a fractional
request to one GPU instance, best fit: the instance with the least free share that still holds the
request (Ray 2.60, checked with fake GPUs: twelve 0.125-GPU actors land eight on GPU 0 and four on
GPU 1; with 0.5 free on GPU 0 and 0.4 on GPU 1, a 0.25 request goes to GPU 1). A simulated trial
reads its device from `ray.get_gpu_ids()`, so the simulation packs exactly as Ray does on a node:
nothing here re-implements the rule.

**Sharing a device: time-slicing.** Ray's fractions are bookkeeping; without MPS, CUDA gives the
processes on one GPU turns (time slices), and a process alone gets the whole device's time. A
narrow model cannot use a whole device, so a trial's *demand* is the share of the device's compute
it would keep busy alone: `min(1, solo_speedup × f)`, with f the GPU fraction its cell declares
(`resources.gpu` / `by_size`: the sweep author's statement that 1/f such trials fill a device). On
a device whose trials' demands sum to D, each trial runs at `throughput × demand / max(1, D)`:
below D = 1 the turns fit in the device's time and nobody waits; above it every trial slows in
proportion. `solo_speedup` is the surface's (`sharing.solo_speedup`, default 1): how much faster
than its declared share a trial runs when the device is its own. With 1, a trial never runs
faster than its fraction of `throughput` whatever its company (the assumption the simulation made
before devices were modelled, and `--dry-run`'s), and Ray's bookkeeping (declared fractions on a
device sum to at most 1) means nobody ever slows. With 2 (`sweeps/surfaces/study.yaml`), a lone
0.125-GPU trial runs at a quarter of the device, four of them share a device without slowing, and
eight packed on one run at an eighth each. The demand follows the *declared* fraction, not the
request: a policy that asks Ray for a larger share (to spread trials) makes a trial no faster, it
only keeps others off its device. Assumptions: the stack's members share their trial's demand (the
simulated trial charges each member's FLOPs, as before); context switches cost nothing; memory is
Ray's business (`stack: auto` sizes stacks by the declared fraction). What a GPU would have to
measure: one trial's tokens/s alone against 2, 4 and 8 copies sharing the device.

**Busy.** Every trial on a GPU logs its start and end (wall time, device, demand, the share it
asked Ray for) to `DIR/simulation/busy.jsonl`, and the driver logs each GPU trial it proposes and each
trial end it has processed (`DriverLog`); `busy_figures` turns the log into simulated time on the
pool's clock (`sweeper.sim.clock`: each launch's wall time since its first line × its compression,
except the seconds in which the pool waited for the orchestration, which count at 1×; launches end
to end) and reports, over the first 24 simulated hours (or the whole run when shorter) and over the
whole run:
- `gpu_busy_fraction`: the share of device-time with at least one trial on the device (what the
  GPU suite's sweep check measures on a real GPU, and what `nvidia-smi` shows as utilisation for a
  trial that keeps its kernels queued);
- `gpu_compute_fraction`: the share of device-time's compute in use, `min(1, D)` per device — the
  stricter figure: a device holding one 0.125-GPU trial is busy, but computes at a quarter (or an
  eighth) of what it could.
A device with no trial while nothing is proposed (the policy holds its cells back, or nothing is
left) is idle on the compressed clock, in full.

Live seats: a trial on a device keeps a seat file (its demand and a heartbeat) in
`DIR/simulation/devices/`, which the other trials read to know their device's load; a seat whose
heartbeat is older than `STALE_SECONDS` of wall time is ignored (a trial killed without leaving).

Standard library only; no Ray (the trial passes its device in).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.sim.clock import LaunchClock

SIM_DIR = "simulation"
BUSY_LOG = "busy.jsonl"
SEATS = "devices"
DAY_SECONDS = 24 * 3600.0
#: a seat not refreshed for this many wall seconds belongs to a trial that is gone
STALE_SECONDS = 30.0
#: a live trial refreshes its seat at most this often (wall seconds)
BEAT_SECONDS = 2.0


def demand(declared_fraction: float, solo_speedup: float) -> float:
    """The share of a device's compute a trial of this declared GPU fraction would keep busy alone."""
    return min(1.0, max(0.0, declared_fraction) * max(1.0, solo_speedup))


def shared_rate(throughput: float, own_demand: float, device_demand: float) -> float:
    """FLOP/s of a trial on a device whose trials' demands (its own included) sum to `device_demand`."""
    return throughput * own_demand / max(1.0, device_demand)


def sim_dir(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / SIM_DIR


# ---- the launch side -----------------------------------------------------------------------------


def prepare(sweep_dir: str | Path) -> int:
    """Before a launch's trials start: clear the seats a killed launch left, return this launch's
    index in the busy log (0 for the first)."""
    root = sim_dir(sweep_dir)
    seats = root / SEATS
    seats.mkdir(parents=True, exist_ok=True)
    for seat in seats.glob("*.json"):
        seat.unlink(missing_ok=True)
    launches = {int(e.get("launch", 0)) for e in read_log(root / BUSY_LOG)}
    return max(launches) + 1 if launches else 0


# ---- the trial side ------------------------------------------------------------------------------


@dataclass
class Seat:
    """One trial on one device: its seat for the others, its lines in the busy log, its rate."""

    root: Path
    trial: str
    device: int
    demand: float
    throughput: float
    launch: int
    compression: float
    clock: Callable[[], float] = time.time
    share: float | None = None  # the GPU share the trial asked Ray for (default: its demand)
    beat: float = field(default=0.0, init=False)

    @property
    def path(self) -> Path:
        return self.root / SEATS / f"{self.device}__{self.trial}.json"

    def join(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_seat()
        self._log("start")

    def leave(self) -> None:
        if self.path.exists():
            self._log("end")
        self.path.unlink(missing_ok=True)

    def rate(self) -> float:
        """This trial's FLOP/s now: its demand over its device's load (seats read now)."""
        if self.clock() - self.beat >= BEAT_SECONDS:
            self._write_seat()
        return shared_rate(self.throughput, self.demand, device_load(self.root, self.device, self.clock()))

    def _write_seat(self) -> None:
        self.beat = self.clock()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"demand": self.demand, "beat": self.beat}))
        os.replace(tmp, self.path)

    def _log(self, event: str) -> None:
        line = {"launch": self.launch, "compression": self.compression, "wall": self.clock(), "trial": self.trial,
                "device": self.device, "demand": self.demand, "event": event}
        if event == "start":
            line["share"] = self.demand if self.share is None else self.share
        append(self.root, line)


def append(root: Path, line: dict[str, Any]) -> None:
    """One line of the busy log (one short line per write: appends of several processes do not interleave)."""
    with open(root / BUSY_LOG, "a") as out:
        out.write(json.dumps(line) + "\n")


# ---- the driver's side ---------------------------------------------------------------------------


@dataclass
class DriverLog:
    """The driver's lines in the busy log: a GPU trial it proposed (with the share it asks Ray for) and a
    trial end it has processed. They tell the pool's clock when the pool waits for the orchestration."""

    root: Path
    launch: int
    compression: float
    gpus: float
    clock: Callable[[], float] = time.time

    def proposed(self, trial: str, share: float) -> None:
        if share > 0:
            self._log(trial, "proposed", share=share, gpus=int(self.gpus))

    def ended(self, trial: str) -> None:
        self._log(trial, "done")

    def _log(self, trial: str, event: str, **extra: Any) -> None:
        append(self.root, {"launch": self.launch, "compression": self.compression, "wall": self.clock(),
                           "trial": trial, "event": event, **extra})


def device_load(root: Path, device: int, now: float) -> float:
    """The summed demand of the live seats on `device`."""
    total = 0.0
    for seat in (root / SEATS).glob(f"{device}__*.json"):
        try:
            raw = json.loads(seat.read_text())
        except (OSError, ValueError):
            continue  # a seat being replaced or removed
        if now - float(raw.get("beat", 0.0)) <= STALE_SECONDS:
            total += float(raw.get("demand", 0.0))
    return total


# ---- the reader ----------------------------------------------------------------------------------


def read_log(path: Path) -> list[dict[str, Any]]:
    """The busy log's events ([] when there is none; a torn last line is skipped)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


@dataclass(frozen=True)
class Span:
    """A trial's time on one device, in simulated seconds since the sweep's first trial started."""

    device: int
    demand: float
    start: float
    end: float


def spans(events: Iterable[dict[str, Any]]) -> list[Span]:
    """Each trial's stay on its device in simulated time. A launch's clock (`sweeper.sim.clock`) starts at
    its first line; launches follow each other (the time between them held no GPU). A trial whose end
    was never logged (its launch was killed) ends with its launch's last line."""
    by_launch: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_launch[int(e.get("launch", 0))].append(e)
    out: list[Span] = []
    offset = 0.0
    for launch in sorted(by_launch):
        items = by_launch[launch]
        clock = LaunchClock(float(items[0].get("compression") or 1.0))
        open_: dict[str, tuple[dict[str, Any], float]] = {}
        last = 0.0
        for e in items:
            last = offset + clock.feed(e)
            if e.get("event") == "start":
                open_[str(e["trial"])] = (e, last)
            elif e.get("event") == "end" and str(e["trial"]) in open_:
                s, start = open_.pop(str(e["trial"]))
                out.append(Span(int(s["device"]), float(s["demand"]), start, last))
        for s, start in open_.values():
            out.append(Span(int(s["device"]), float(s["demand"]), start, last))
        offset = last
    return out


def integrate(items: list[Span], horizon: float) -> tuple[float, float]:
    """(device-seconds with at least one trial, device-seconds of compute in use) over [0, horizon]."""
    busy = compute = 0.0
    by_device: dict[int, list[Span]] = defaultdict(list)
    for s in items:
        by_device[s.device].append(s)
    for dev_spans in by_device.values():
        edges = sorted({0.0, horizon, *(min(horizon, max(0.0, t)) for s in dev_spans for t in (s.start, s.end))})
        for a, b in zip(edges, edges[1:]):
            if b <= a:
                continue
            mid = (a + b) / 2
            load = sum(s.demand for s in dev_spans if s.start <= mid < s.end)
            if any(s.start <= mid < s.end for s in dev_spans):
                busy += b - a
                compute += (b - a) * min(1.0, load)
    return busy, compute


def busy_figures(sweep_dir: str | Path, pool_gpus: float) -> dict[str, Any] | None:
    """The pool's busy and compute fractions over the first simulated day and overall (None: no GPU trial logged)."""
    items = spans(read_log(sim_dir(sweep_dir) / BUSY_LOG))
    if not items or pool_gpus <= 0:
        return None
    total = max(s.end for s in items)
    if total <= 0:
        return None
    day = min(DAY_SECONDS, total)
    busy_day, compute_day = integrate(items, day)
    busy_all, compute_all = integrate(items, total)
    return {
        "gpu_busy_fraction_first_day": busy_day / (pool_gpus * day),
        "gpu_compute_fraction_first_day": compute_day / (pool_gpus * day),
        "first_day_hours": day / 3600,
        "gpu_busy_fraction": busy_all / (pool_gpus * total),
        "gpu_compute_fraction": compute_all / (pool_gpus * total),
        "busy_log_hours": total / 3600,
        "devices_used": len({s.device for s in items}),
    }
