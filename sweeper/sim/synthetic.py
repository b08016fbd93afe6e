"""A synthetic depth sweep written with the real `StoreWriter`: fixtures for the dashboard's
tests and the benchmark's large store.

The sweep is simulated, not trained: each method has a "true" loss surface
`L(depth, lr) = E + A·depth^(-α) + k·ln(lr/lr*(depth))²` with `lr*(depth) = lr0·(depth/4)^(-β)`,
points above a divergence threshold diverge partway through training, a few fail, and a
scheduler with a fixed number of slots runs the points in order, so the store receives
what a driver writes: queued/running/final point events in time order, learning-curve
rows every report, cell snapshots with bracketed, edge, running, pending and diverged
statuses, and (on request) a fits.json shaped like the one `sweeper fit` writes.
Everything is derived from `SyntheticSpec.seed`: the same spec writes the same store.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sweeper.analysis.fits.document import FitsDocument, RankRow, write_fits
from sweeper.core.ids import CellId, depth_label, loops_label
from sweeper.core.rows import CellFacts, CellRow, CurvePoint, PointRow
from sweeper.core.states import CellStatus, PointState
from sweeper.records.manifest import STORE_VERSION, Manifest, write_manifest
from sweeper.records.store import StoreWriter

T0 = 1_700_000_000.0  # a fixed start time keeps plots of a fixture byte-identical


@dataclass(frozen=True)
class MethodTruth:
    E: float
    A: float
    alpha: float
    lr0: float  # optimal LR at depth 4
    beta: float  # lr* ∝ depth^(-beta)
    div_mult: float  # points above lr*·div_mult diverge
    unstable_from: int | None = None  # every LR diverges from this depth on


TRUTHS: dict[str, MethodTruth] = {
    "pre": MethodTruth(E=3.30, A=1.20, alpha=0.50, lr0=3e-3, beta=0.30, div_mult=6.0),
    "post": MethodTruth(E=3.36, A=1.30, alpha=0.45, lr0=1.2e-3, beta=0.50, div_mult=3.0, unstable_from=32),
    "layerrope": MethodTruth(E=3.20, A=1.10, alpha=0.60, lr0=4e-3, beta=0.05, div_mult=8.0),
    "deepnet": MethodTruth(E=3.26, A=1.15, alpha=0.55, lr0=2e-3, beta=0.15, div_mult=6.0),
    "lns": MethodTruth(E=3.28, A=1.25, alpha=0.50, lr0=3e-3, beta=0.20, div_mult=5.0),
    "peri": MethodTruth(E=3.29, A=1.20, alpha=0.48, lr0=2.5e-3, beta=0.25, div_mult=5.0),
}


def truth_for(method: str) -> MethodTruth:
    if method in TRUTHS:
        return TRUTHS[method]
    h = int.from_bytes(hashlib.sha256(method.encode()).digest()[:8], "big")
    u = [((h >> (8 * i)) & 0xFF) / 255 for i in range(5)]
    return MethodTruth(
        E=3.2 + 0.2 * u[0], A=1.0 + 0.4 * u[1], alpha=0.4 + 0.3 * u[2], lr0=1e-3 * (1 + 4 * u[3]),
        beta=0.4 * u[4], div_mult=5.0,
    )  # fmt: skip


@dataclass(frozen=True)
class SyntheticSpec:
    name: str = "synthetic-depth"
    methods: tuple[str, ...] = ("pre", "post", "layerrope")
    depths: tuple[int, ...] = (4, 8, 16, 32)  # or loop counts, with `loop_blocks`
    loop_blocks: int | None = None  # a loop-count sweep of networks of this many blocks: `depths` are loop counts
    seeds: tuple[int, ...] = (0,)
    lrs_per_cell: int = 7
    lr_ratio: float = 2.0
    steps: int = 200
    report_every: int = 10
    eval_every: int = 50
    width: int = 128
    vocab: int = 32000
    tokens_per_step: int = 8192
    concurrency: int = 4
    seconds_per_block_step: float = 0.01  # simulated wall time of one step per block
    failed_fraction: float = 0.03
    prior_spread: float = 0.8  # log-normal error of the grid centre around the true optimum
    seed: int = 0


@dataclass
class _Point:
    point_id: str
    cell_id: str
    method: str
    size: str
    depth: int  # the size's x: blocks, or the loop count of a loop-count sweep (`loop_blocks`)
    seed: int
    lr: float
    outcome: str  # ok | diverged | failed
    final_loss: float
    stop_step: int
    start: float = 0.0
    end: float = 0.0
    curve: np.ndarray = field(default_factory=lambda: np.zeros(0))
    diverged_step: int | None = None
    reason: str | None = None


def _params(depth: int, width: int, vocab: int) -> tuple[int, int]:
    mlp = -(-(8 * width // 3) // 32) * 32
    block = 4 * width * width + 3 * width * mlp + 2 * width
    nonembed = depth * block + width
    return nonembed + 2 * vocab * width, nonembed


class SyntheticSweep:
    """A simulated sweep that writes its store up to any simulated time."""

    def __init__(self, root: str | Path, spec: SyntheticSpec = SyntheticSpec()) -> None:
        self.root = Path(root)
        self.spec = spec
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = Manifest(store_version=STORE_VERSION, name=spec.name, compat_key="synthetic",
                            corpus="synthetic-corpus")
        if spec.loop_blocks is not None:
            manifest.x = "loops"
        write_manifest(self.root, manifest)
        self.writer = StoreWriter(self.root)
        self.points = self._plan()
        self._schedule()
        self.t_end = max(p.end for p in self.points)
        self.now = T0 - 1.0
        self._state: dict[str, PointRow] = {}

    # Planning -----------------------------------------------------------------------------

    def _plan(self) -> list[_Point]:
        s = self.spec
        rng = np.random.default_rng(s.seed)
        init = math.log(s.vocab)
        points: list[_Point] = []
        for depth in sorted(s.depths):
            for method in s.methods:
                t = truth_for(method)
                lr_star = t.lr0 * (depth / 4) ** (-t.beta)
                # one grid per (method, depth), shared by the seeds, as a sweep's prior gives
                centre = lr_star * math.exp(rng.normal(0.0, s.prior_spread))
                for seed in s.seeds:
                    size = depth_label(depth) if s.loop_blocks is None else loops_label(depth)
                    cell = CellId(method, size, seed)
                    half = (s.lrs_per_cell - 1) / 2
                    for k in range(s.lrs_per_cell):
                        lr = float(f"{centre * s.lr_ratio ** (k - half):.6g}")
                        loss = t.E + t.A * depth ** (-t.alpha) + 0.08 * math.log(lr / lr_star) ** 2
                        loss += rng.normal(0.0, 0.004)
                        unstable = t.unstable_from is not None and depth >= t.unstable_from
                        if unstable or lr > lr_star * t.div_mult:
                            outcome, stop = "diverged", int(s.steps * rng.uniform(0.08, 0.6))
                        elif rng.uniform() < s.failed_fraction:
                            outcome, stop = "failed", int(s.steps * rng.uniform(0.2, 0.8))
                        else:
                            outcome, stop = "ok", s.steps
                        stop = max(stop, s.report_every)
                        p = _Point(str(cell.point(lr)), str(cell), method, cell.size, depth, seed, lr,
                                   outcome, loss if outcome == "ok" else math.nan, stop)  # fmt: skip
                        p.curve = self._curve(rng, init, loss, p)
                        if outcome == "diverged":
                            p.diverged_step = stop
                            p.reason = "loss is NaN" if rng.uniform() < 0.5 else "smoothed loss above the initial loss"
                        elif outcome == "failed":
                            p.reason = "RuntimeError: CUDA error: an illegal memory access was encountered"
                        points.append(p)
        return points

    def _curve(self, rng: np.random.Generator, init: float, final: float, p: _Point) -> np.ndarray:
        s = self.spec
        steps = np.arange(0, p.stop_step + 1, s.report_every, dtype=float)
        if steps[-1] != p.stop_step:
            steps = np.append(steps, p.stop_step)
        tau = s.steps / 30
        target = final if math.isfinite(final) else init - 2.0
        decay = (tau / (tau + steps)) ** 0.7
        end_decay = (tau / (tau + s.steps)) ** 0.7
        curve = target + (init - target) * (decay - end_decay * steps / s.steps)
        curve = curve + rng.normal(0.0, 0.02, size=curve.shape) * (steps > 0)
        if p.outcome == "diverged":
            blow = steps > p.stop_step * 0.7
            curve[blow] = curve[blow] + np.linspace(0.0, init, blow.sum()) ** 1.5
            if rng.uniform() < 0.5:
                curve[-1] = math.nan
        return np.stack([steps, curve])

    def _schedule(self) -> None:
        s = self.spec
        slots = [T0] * s.concurrency
        rng = np.random.default_rng(s.seed + 1)
        for p in self.points:  # planned order: small depths first, like a driver filling its slots
            i = int(np.argmin(slots))
            p.start = slots[i] + 1.0
            duration = s.seconds_per_block_step * p.depth * p.stop_step * rng.uniform(0.9, 1.1)
            p.end = p.start + max(duration, 1.0)
            slots[i] = p.end

    # Writing ------------------------------------------------------------------------------

    def _row(self, p: _Point, state: PointState, **extra: Any) -> PointRow:
        s = self.spec
        params, nonembed = _params(p.depth, s.width, s.vocab)
        looped = s.loop_blocks is not None
        cell = CellFacts(
            cell_id=p.cell_id, method=p.method, family="looped" if looped else "llama", size=p.size,
            depth=s.loop_blocks if looped else p.depth, loops=p.depth if looped else None, width=s.width,
            seed=p.seed, params=params, params_nonembed=nonembed,
            flops_per_token=6.0 * nonembed + 6.0 * p.depth * 256 * s.width,
        )
        return PointRow(cell, p.lr, state, attempt=1, tune_trial_id=hashlib.sha256(p.point_id.encode()).hexdigest()[:8],
                        init_loss=math.log(s.vocab), corpus="synthetic-corpus", **extra)

    def advance_to(self, t: float) -> int:
        """Write every event up to simulated time `t`; returns how many point events were written."""
        s = self.spec
        prev, self.now = self.now, t
        point_rows: list[PointRow] = []
        curve_rows: list[dict[str, Any]] = []
        for p in self.points:
            if prev < T0 <= t:
                point_rows.append(self._row(p, PointState.QUEUED))
            if p.start > t or p.end <= prev:
                continue
            if prev < p.start <= t:
                point_rows.append(self._row(p, PointState.RUNNING, started_at=p.start, steps=0, tokens=0))
            steps, losses = p.curve
            running = self._row(p, PointState.RUNNING)
            times = p.start + (p.end - p.start) * steps / max(p.stop_step, 1)
            new = (times > prev) & (times <= t)
            for step, loss, when in zip(steps[new], losses[new], times[new]):
                step = int(step)
                evaluated = step % s.eval_every == 0 or step == p.stop_step
                curve_rows.append(CurvePoint(
                    running, step, step * s.tokens_per_step, train_loss=float(loss),
                    eval_loss=float(loss) + 0.01 if evaluated and math.isfinite(loss) else None, time=float(when),
                ).columns())  # fmt: skip
            if prev < p.end <= t:
                common = {
                    "started_at": p.start, "finished_at": p.end, "steps": p.stop_step,
                    "tokens": p.stop_step * s.tokens_per_step, "train_seconds": p.end - p.start,
                }  # fmt: skip
                if p.outcome == "ok":
                    row = self._row(p, PointState.OK, objective=p.final_loss, loss=p.final_loss, **common)
                else:
                    row = self._row(p, PointState(p.outcome), diverged_step=p.diverged_step, reason=p.reason, **common)
                point_rows.append(row)
            elif p.start <= t < p.end and curve_rows and curve_rows[-1]["point_id"] == p.point_id:
                last = curve_rows[-1]
                point_rows.append(
                    self._row(p, PointState.RUNNING, started_at=p.start, steps=last["step"], tokens=last["tokens"])
                )
        point_rows.sort(key=lambda r: (r.finished_at or r.started_at or 0.0, r.point_id))
        curve_rows.sort(key=lambda r: (r["time"], r["point_id"]))
        if curve_rows:
            self.writer.append_curves(curve_rows)
        if point_rows:
            self.writer.append_points(point_rows)
            for row in point_rows:
                self._state[row.point_id] = row
            self.writer.write_cells(self._cells(t))
        return len(point_rows)

    def advance(self, fraction: float) -> int:
        return self.advance_to(T0 + (self.t_end - T0) * fraction)

    def finish(self) -> int:
        return self.advance_to(self.t_end + 1.0)

    def _cells(self, t: float) -> list[CellRow]:
        by_cell: dict[str, list[_Point]] = {}
        for p in self.points:
            by_cell.setdefault(p.cell_id, []).append(p)
        rows = []
        for cell_id, pts in sorted(by_cell.items()):
            pts = sorted(pts, key=lambda p: p.lr)
            states = [self._state[p.point_id].state if p.point_id in self._state else PointState.QUEUED for p in pts]
            finished = [st.is_finished for st in states]
            ok = [i for i, st in enumerate(states) if st == "ok"]
            n_div = sum(st == "diverged" for st in states)
            best_i = min(ok, key=lambda i: pts[i].final_loss) if ok else None
            if any(st == "running" for st in states):
                status = "running"
            elif not any(finished):
                status = "pending"
            elif not ok:
                status = "diverged"
            elif 0 < best_i < len(pts) - 1 and finished[best_i - 1] and finished[best_i + 1]:  # type: ignore[operator]
                status = "bracketed"
            else:
                status = "edge"
            interp_lr = interp_obj = None
            if best_i is not None and 0 < best_i < len(pts) - 1 and states[best_i - 1] == "ok" == states[best_i + 1]:
                x = np.log([pts[best_i + d].lr for d in (-1, 0, 1)])
                y = np.array([pts[best_i + d].final_loss for d in (-1, 0, 1)])
                a, b, c = np.polyfit(x, y, 2)
                if a > 0:
                    interp_lr, interp_obj = float(math.exp(-b / (2 * a))), float(c - b * b / (4 * a))
            p0 = pts[0]
            rows.append(CellRow(
                cell=self._row(p0, PointState.QUEUED).cell, status=CellStatus(status), n_points=sum(finished),
                n_running=sum(st == "running" for st in states), n_diverged=n_div,
                best_lr=pts[best_i].lr if best_i is not None else None,
                best_objective=pts[best_i].final_loss if best_i is not None else None,
                interp_lr=interp_lr, interp_objective=interp_obj, updated_at=t,
            ))
        return rows

    # Fits ----------------------------------------------------------------------------------

    def write_fits(self, targets: tuple[int, ...] = (64, 128)) -> FitsDocument:
        """A fits.json shaped like `sweeper fit`'s, from the simulated truth (not a real fit)."""
        s = self.spec
        depths = sorted(s.depths)
        grid = np.geomspace(min(depths), max(max(depths), *targets), 40)
        methods: dict[str, Any] = {}
        for method in s.methods:
            t = truth_for(method)
            usable = [d for d in depths if t.unstable_from is None or d < t.unstable_from]
            if len(usable) < 2:
                continue
            spread = lambda x: 0.004 + 0.01 * math.log(x / min(depths) + 1)  # noqa: E731
            loss = lambda x: t.E + t.A * x ** (-t.alpha)  # noqa: E731
            lr = lambda x: t.lr0 * (x / 4) ** (-t.beta)  # noqa: E731

            def est(v: float, w: float) -> dict[str, float]:
                return {"value": v, "lo": v - w, "hi": v + w}

            methods[method] = {
                "loss_fit": {
                    "E": est(t.E, 0.05), "A": est(t.A, 0.2), "alpha": est(t.alpha, 0.08),
                    "loglog_slope": est(-0.05, 0.01),
                    "points": [[float(d), loss(d) + 0.003] for d in usable],
                    "curve": [[float(x), loss(x), loss(x) - spread(x), loss(x) + spread(x)] for x in grid],
                    "holdout": {"x": float(usable[-1]), "actual": loss(usable[-1]) + 0.003,
                                "predicted": loss(usable[-1]) - 0.004, "lo": loss(usable[-1]) - 0.02,
                                "hi": loss(usable[-1]) + 0.012, "rel_error": 0.002},
                    "warnings": [] if len(usable) >= 4 else ["only 3 sizes: the interval is wide"],
                    "trustworthy": len(usable) >= 4,
                },
                "lr_fit": {
                    "coef": est(t.lr0 * 4**t.beta, t.lr0), "exponent": est(-t.beta, 0.05),
                    "points": [[float(d), lr(d) * 1.05] for d in usable],
                    "curve": [[float(x), lr(x), lr(x) * 0.8, lr(x) * 1.25] for x in grid],
                    "targets": [{"x": float(d), "lr": lr(d), "lo": lr(d) * 0.7, "hi": lr(d) * 1.4} for d in targets],
                    "warnings": [], "trustworthy": True,
                },
                "compute_exponent": est(-t.alpha * 0.9, 0.05),
                "sensitivity": [],
            }  # fmt: skip
        fits = FitsDocument.from_json({
            "version": 1, "created": T0, "x": "depth", "x_label": "Depth (blocks)",
            "n_definition": "all parameters, embeddings included", "c_definition": "6·N·D plus attention",
            "methods": methods,
        })  # fmt: skip
        fits.ranking = [RankRow(method=m, compute_exponent=v.compute_exponent.value,  # type: ignore[union-attr]
                                loss_at_largest=v.loss_fit.points[-1][1]) for m, v in sorted(fits.methods.items())]
        write_fits(self.root, fits)
        return fits


def write_in_steps(
    root: str, spec: SyntheticSpec, steps: int, compact_at: int | None = None, ready: Any = None
) -> None:
    """Write a whole synthetic sweep in `steps` advances, as fast as possible (a process
    target for concurrency tests and benchmarks; `ready` is set once the writer exists)."""
    sweep = SyntheticSweep(root, spec)
    if compact_at is not None:
        sweep.writer.COMPACT_AT = compact_at
    if ready is not None:
        ready.set()
    for i in range(1, steps + 1):
        sweep.advance(i / steps)
    sweep.finish()
