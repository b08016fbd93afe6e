"""`sweeper launch SWEEP.yaml --simulate SURFACE.yaml`: the real controller on a planted surface.

Everything but the trial is real: the plan, Ray Tune with a virtual pool (the surface's `pool`:
N GPUs as Ray resources on this node, so GPU fractions, `by_size`, `concurrency: auto` and
`stack: auto` pack as they would on a cluster), the ledger, the store, resume, `status`, `optima`,
`fit` and the dashboard. The trial is `sweeper.sim.trial`: it sleeps its simulated duration and
reports the surface's losses.

A simulated sweep is marked everywhere: the manifest's `simulated` entry, every cell's
compatibility fingerprint (so a simulated directory and a trained one can never be mixed: a
relaunch of either kind over the other is refused), the corpus fingerprint of every point
(`simulated:<surface fingerprint>`), and the readers show it (`sweeper.records.manifest.Manifest.simulated_label`).

`GpuProbe` measures the share of the pool's GPU-time that trials held (Ray's bookkeeping), overall
and while the open cells asked for at least the whole pool, on the pool's clock
(`sweeper.sim.clock`); the busy log (`sweeper.sim.devices`: the trials' devices, the driver's
proposals and processed ends) says how busy the devices themselves were: where Ray put each trial,
over the first simulated day and the whole run (`busy_figures`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweeper.core.errors import UserError
from sweeper.core.ids import cell_of
from sweeper.search.planner import Plan, fingerprint_of
from sweeper.search.replay import load_table
from sweeper.search.recorded import RecordedGroup
from sweeper.sim import devices
from sweeper.sim.clock import PoolClock
from sweeper.sim.surface import Surface, SurfaceTable
from sweeper.sim.trial import SimulatedCell
from sweeper.spec.schema import problems_from, user_error
from sweeper.spec.yamlio import YamlProblem, load_file


def load_surface(path: str | Path) -> Surface:
    """Read and validate a surface file; UserError with FILE:LINE per problem (as the sweep file's)."""
    label = str(path)
    if not Path(path).is_file():
        raise UserError(f"--simulate {label}: no such file")
    try:
        loaded = load_file(path)
    except YamlProblem as exc:
        raise UserError(f"{label}: {exc.message}") from None
    try:
        surface = Surface.model_validate(loaded.data)
    except ValidationError as exc:
        raise user_error(problems_from(exc, Surface), loaded, label) from None
    for name, method in surface.methods.items():
        if method.table is not None:
            method.table.recorded = read_recorded(method.table, Path(path).parent, f"{label}: methods.{name}.table")
    return surface


def read_recorded(table: SurfaceTable, base: Path, where: str) -> dict[float, RecordedGroup]:
    """Each size's recorded grid, read from the table's CSV (`sweeper replay`'s reader and checks)."""
    file = Path(table.file) if Path(table.file).is_absolute() else base / table.file
    if not file.is_file():
        raise UserError(f"{where}.file: no such file: {file}")
    columns = table.group_columns
    try:
        recorded = load_table(file, columns, table.lr_column, table.loss_column, duplicates=table.duplicates)
    except UserError as exc:
        raise UserError(f"{where}: {exc}", details=exc.details) from None
    by_key = {tuple(_plain(v) for v in group.values): group for group in recorded.groups}
    grids: dict[float, RecordedGroup] = {}
    for size, values in table.sizes.items():
        key = tuple(_plain(values[c]) for c in columns)
        group = by_key.get(key)
        if group is None:
            example = ", ".join(f"{c}={v}" for c, v in zip(columns, recorded.groups[0].values))
            raise UserError(f"{where}.sizes.{size:g}: no group with "
                            f"{', '.join(f'{c}={values[c]}' for c in columns)} in {file} "
                            f"({len(recorded.groups)} groups, e.g. {example})")
        if len(group.lrs) < 2:
            raise UserError(f"{where}.sizes.{size:g}: the group records only one learning rate; a surface needs a grid")
        grids[size] = group
    return grids


def _plain(value: Any) -> Any:
    """A group value comparable across YAML and CSV (1e11 and 100000000000 are one value)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


@dataclass
class Simulation:
    surface: Surface
    path: str
    busy: dict[str, Any] | None = None  # set by `prepare`: where trials log their devices, and this launch's index

    @property
    def fingerprint(self) -> str:
        return self.surface.fingerprint()

    @property
    def corpus(self) -> str:
        return f"simulated:{self.fingerprint}"

    def manifest_entry(self) -> dict[str, Any]:
        return {"surface": self.surface.name, "file": self.path, "fingerprint": self.fingerprint,
                "time_compression": self.surface.time_compression, "pool": self.surface.pool.model_dump()}

    def check(self, plan: Plan) -> None:
        missing = sorted({c.method for c in plan.cells} - set(self.surface.methods))
        if missing:
            raise UserError(f"{self.path}: methods: no surface for {', '.join(missing)} (the sweep's methods; the "
                            f"surface has {', '.join(sorted(self.surface.methods))})")
        for cell in plan.cells:
            table = self.surface.methods[cell.method].table
            if table is not None and not any(math.isclose(cell.x, size, rel_tol=1e-9) for size in table.sizes):
                raise UserError(f"{self.path}: methods.{cell.method}.table.sizes: no group for size {cell.x:g} of "
                                f"{cell.cell_id} (the table maps {', '.join(f'{s:g}' for s in table.sizes)})")
        pool = self.surface.pool
        for cell in plan.cells:
            gpu = cell.resources.get("GPU", 0.0)
            if gpu > pool.gpus or cell.resources.get("CPU", 0.0) > pool.cpus:
                raise UserError(f"{self.path}: pool: {pool.gpus} GPUs and {pool.cpus} CPUs cannot hold one trial of "
                                f"{cell.cell_id} ({cell.resources})")

    def mark(self, plan: Plan) -> Plan:
        """The plan with every cell's compatibility marked simulated (its fingerprint changes with it)."""
        cells = []
        for cell in plan.cells:
            compat = {**cell.compat, "simulated": {"surface": self.surface.name, "fingerprint": self.fingerprint}}
            cells.append(replace(cell, compat=compat, fingerprint=fingerprint_of(compat)))
        return replace(plan, cells=cells)

    def prepare(self, sweep_dir: str | Path) -> None:
        """Before the trials start: the devices' seats of a killed launch cleared, this launch's index
        in the busy log (`sweeper.sim.devices`)."""
        self.busy = {"dir": str(devices.sim_dir(sweep_dir).resolve()), "launch": devices.prepare(sweep_dir)}

    def payload(self, plan: Plan) -> dict[str, Any]:
        """What every simulated trial is given (`sweeper.sim.trial.simulated_trainable`)."""
        cells = {
            c.cell_id: SimulatedCell(method=c.method, x=c.x, steps=c.steps_per_point,
                                     tokens_per_step=c.tokens_per_point // max(1, c.steps_per_point),
                                     flops_per_token=c.flops_per_token, params=c.params,
                                     params_nonembed=c.params_nonembed, vocab=c.model.vocab,
                                     gpu=float(c.resources.get("GPU", 0.0))).to_dict()
            for c in plan.cells
        }
        # only what the file set: a table method must not come back with the planted law's defaults
        surface = self.surface.model_dump(mode="json", exclude_unset=True)
        surface["time_compression"] = self.surface.time_compression  # also when --time-compression set it
        return {"surface": surface, "cells": cells, "clock": self.busy}

    def driver_log(self) -> devices.DriverLog:
        """The driver's lines in this launch's busy log (after `prepare`)."""
        assert self.busy is not None, "prepare the simulation first"
        return devices.DriverLog(Path(self.busy["dir"]), int(self.busy["launch"]), self.surface.time_compression,
                                 float(self.surface.pool.gpus))

    def pool_clock(self) -> PoolClock:
        """This launch's clock, read from the busy log (after `prepare`)."""
        assert self.busy is not None, "prepare the simulation first"
        return PoolClock(Path(self.busy["dir"]) / devices.BUSY_LOG, int(self.busy["launch"]),
                         self.surface.time_compression)

    def probe(self, plan: Plan) -> tuple[GpuProbe, float]:
        """This launch's GPU-slot probe (after `prepare`) and the simulated seconds per second of its clock: a
        sweep with GPU cells is timed on the pool's clock, a CPU-only one (no busy log) on wall time."""
        if any(cell.resources.get("GPU", 0.0) > 0 for cell in plan.cells):
            return GpuProbe(float(self.surface.pool.gpus), clock=self.pool_clock().now), 1.0
        return GpuProbe(float(self.surface.pool.gpus)), self.surface.time_compression

    def busy_figures(self, sweep_dir: str | Path) -> dict[str, Any]:
        """The pool's busy and compute fractions (first simulated day, whole run) from the busy log."""
        return devices.busy_figures(sweep_dir, float(self.surface.pool.gpus)) or {}


@dataclass
class GpuProbe:
    """GPU-slot utilisation of a launch, sampled after every Tune loop step (a display hook).

    In use: the GPU fractions of the Tune trials that started and have not ended. Demand: those,
    plus trials waiting for resources, plus one first trial per cell with queued points. The
    utilisation "while enough cells are open" counts only the time demand covered the pool.
    `clock`: the time it integrates over; a simulation's launch gives it the pool's clock
    (simulated seconds: `figures(compression=1)`)."""

    pool_gpus: float
    clock: Callable[[], float] = time.time
    last: tuple[float, float, float] | None = None  # (time, in use, demand)
    busy: float = 0.0  # GPU-seconds held
    span: float = 0.0  # seconds observed
    saturated_busy: float = 0.0
    saturated_span: float = 0.0
    peak: float = 0.0
    samples: list[tuple[float, float, float]] = field(default_factory=list)

    def __call__(self, sweep: Any) -> None:
        now = self.clock()
        cells = sweep.cells
        live = sweep.trials.points
        started = sweep.trials.stats.trial_spans
        in_use = waiting = 0.0
        busy_cells = set()
        for tid, pids in live.items():
            cid = cell_of(pids[0]) if pids else None
            gpu = cells[cid].resources.get("GPU", 0.0) if cid in cells else 0.0
            busy_cells.add(cid)
            if tid in started:
                in_use += gpu
            else:
                waiting += gpu
        queued = sum(cells[cid].resources.get("GPU", 0.0) for cid, q in sweep.book.queue.items()
                     if q and cid not in busy_cells)
        self.sample(now, in_use, in_use + waiting + queued)

    def sample(self, now: float, in_use: float, demand: float) -> None:
        if self.last is not None:
            t0, used, wanted = self.last
            dt = max(0.0, now - t0)
            self.busy += used * dt
            self.span += dt
            if wanted >= self.pool_gpus - 1e-9:
                self.saturated_busy += used * dt
                self.saturated_span += dt
        self.last = (now, in_use, demand)
        self.peak = max(self.peak, in_use)
        if not self.samples or now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, in_use, demand))

    def figures(self, compression: float) -> dict[str, Any]:
        """`compression`: simulated seconds per second of the probe's clock."""
        return {
            "pool_gpus": self.pool_gpus,
            "gpu_utilisation": self.busy / (self.pool_gpus * self.span) if self.span else None,
            "gpu_utilisation_while_saturated": (self.saturated_busy / (self.pool_gpus * self.saturated_span)
                                                if self.saturated_span else None),
            "saturated_fraction_of_wall": self.saturated_span / self.span if self.span else None,
            "peak_gpus_in_use": self.peak,
            "simulated_gpu_hours": self.busy * compression / 3600,
            "simulated_wall_hours": self.span * compression / 3600,
        }
