"""How a simulated sweep did against its planted truth (a benchmark command, not a test):

    sweeper bench simcheck runs/depth-sim [--band 0.25] [--json]

Reads the sweep directory (`sweeper launch ... --simulate SURFACE.yaml`), the surface it names
in its manifest, the stored optima and `sweeper fit`'s fits (run without writing), and prints:
points per cell (mean, max, per method), the bracketed share, regret of each cell's best loss
at its best LR (the planted, noise-free loss there over the planted optimum E + A·x^-α; for a
method read from a recorded table, the table's loss there over the group's recorded best) and the
distance of its best LR from lr*(x) in factor-2 steps, the share within `--band` percent, whether each method's 95% intervals of α and of the LR
exponent cover the planted values, the launches' simulated GPU-hours, wall time and GPU-slot
utilisation, the devices' busy and compute fractions (`sweeper.sim.devices`), and the ledger's and
store's size (`check`). With `--timings`, how long `sweeper status`,
`optima`, `fit` and the dashboard's first payload take on the directory (`sweeper.bench.readers`: it
times the dashboard, which the simulation wing sits below).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sweeper.analysis.fits.document import EstimateValue, FitsDocument
from sweeper.core.errors import UserError
from sweeper.records.manifest import read_manifest
from sweeper.records.results import optima
from sweeper.records.store import load_points
from sweeper.sim.devices import busy_figures
from sweeper.sim.simulation import load_surface


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def check(sweep_dir: str, band: float = 0.25, surface_path: str | None = None) -> dict[str, Any]:
    manifest = read_manifest(sweep_dir)
    surface_path = surface_path or (manifest.simulated.file if manifest.simulated is not None else None)
    if surface_path is None:
        raise UserError(f"{sweep_dir}: its manifest names no surface (not a `sweeper launch --simulate` sweep); "
                        "give one with --surface")
    surface = load_surface(surface_path)
    rows = optima(sweep_dir)
    cells = []
    for r in rows:
        method = surface.methods[r["method"]]
        entry = manifest.cells.get(r["cell_id"])
        x = float((entry.x if entry is not None else None) or r.get("depth"))
        planted_loss, planted_lr = method.optimal_loss(x), method.optimal_lr(x)
        fails = method.fails_above is not None and x > method.fails_above
        best = r.get("best_loss")
        cells.append({
            "cell_id": r["cell_id"], "method": r["method"], "x": x, "status": r["status"], "points": r["n_points"],
            "fails_by_design": fails,
            # regret: the planted (noise-free) loss at the chosen LR over the planted optimum; the measured
            # best loss carries seed noise and can sit below the optimum
            "regret": (None if r.get("best_lr") is None or fails else
                       100 * (method.valley_loss(x, r["best_lr"]) / planted_loss - 1)),  # type: ignore[operator]
            "measured_over_planted": None if best is None else 100 * (best / planted_loss - 1),
            "lr_error_steps": (None if r.get("best_lr") is None else abs(math.log2(r["best_lr"] / planted_lr))),
        })
    trainable = [c for c in cells if not c["fails_by_design"]]
    regrets = [c["regret"] for c in trainable if c["regret"] is not None]
    fit = subprocess.run([sys.executable, "-m", "sweeper.cli", "fit", sweep_dir, "--json", "--no-write"],
                         capture_output=True, text=True)
    coverage: dict[str, Any] = {}
    if fit.returncode == 0:
        fits = FitsDocument.from_json(json.loads(fit.stdout))
        for name, f in fits.methods.items():
            planted = surface.methods[name]
            if not planted.planted:  # a recorded table plants no exponents
                continue
            alpha = f.loss_fit.alpha
            slope = f.lr_fit.exponent if f.lr_fit is not None else EstimateValue()
            coverage[name] = {
                "alpha": alpha.value, "alpha_interval": [alpha.lo, alpha.hi],
                "alpha_planted": planted.alpha, "alpha_covered": alpha.covers(planted.alpha),
                "lr_exponent": slope.value, "lr_exponent_interval": [slope.lo, slope.hi],
                "lr_exponent_planted": planted.lr_b, "lr_exponent_covered": slope.covers(planted.lr_b),
            }
    # GPU-hours of training, from the FLOPs each point trained (load-independent, unlike the GPU-time
    # the trials held on a machine whose overhead the time compression multiplies)
    points = load_points(sweep_dir).to_dicts()
    flops = sum((p.get("tokens") or 0) * (p.get("flops_per_token") or 0) for p in points)
    launches = manifest.launches
    sims = [launch.simulation for launch in launches if launch.simulation is not None]
    by_method: dict[str, list[int]] = {}
    for c in cells:
        by_method.setdefault(c["method"], []).append(c["points"])
    return {
        "sweep_dir": sweep_dir, "surface": surface.name, "cells": len(cells),
        "points_per_cell_mean": statistics.fmean(c["points"] for c in cells) if cells else None,
        "points_per_cell_max": max((c["points"] for c in cells), default=None),
        "points_per_cell_by_method": {m: statistics.fmean(v) for m, v in sorted(by_method.items())},
        "points_total": sum(c["points"] for c in cells),
        "bracketed_fraction": sum(c["status"] == "bracketed" for c in trainable) / max(1, len(trainable)),
        "failing_by_design": sum(c["fails_by_design"] for c in cells),
        "failing_by_design_not_bracketed": sum(c["fails_by_design"] and c["status"] != "bracketed" for c in cells),
        "regret_mean": statistics.fmean(regrets) if regrets else None,
        "regret_max": max(regrets) if regrets else None,
        "within_band_fraction": sum(r <= band for r in regrets) / max(1, len(trainable)),
        "lr_error_steps_mean": statistics.fmean(c["lr_error_steps"] for c in trainable if c["lr_error_steps"] is not None),
        "fit_coverage": coverage,
        "trained_flops": flops,
        "trained_gpu_hours_at_throughput": flops / surface.throughput / 3600,
        "launches": [{"gpu_utilisation": s.gpu_utilisation,
                      "gpu_utilisation_while_saturated": s.gpu_utilisation_while_saturated,
                      "saturated_fraction_of_wall": s.saturated_fraction_of_wall,
                      "simulated_gpu_hours": s.simulated_gpu_hours, "simulated_wall_hours": s.simulated_wall_hours,
                      "pool_gpus": s.pool_gpus, "time_compression": s.time_compression} for s in sims],
        "devices": busy_figures(sweep_dir, float(((manifest.simulated.pool if manifest.simulated else None) or {}).get("gpus") or 0)),
        "wall_seconds": [launch.wall_seconds for launch in launches],
        "trials": [launch.trials for launch in launches],
        "ledger_bytes": (Path(sweep_dir) / "ledger.db").stat().st_size if (Path(sweep_dir) / "ledger.db").exists() else 0,
        "store_bytes": folder_bytes(Path(sweep_dir) / "store"),
        "cell_rows": cells,
    }
