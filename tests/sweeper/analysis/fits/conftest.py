"""Synthetic sweep directories with known truths, written through the real `sweeper.records.store.StoreWriter`.

Each method has a loss surface `E + A·depth^(-α) + k·log(lr / LR*)²` with `LR* = c·depth^b`,
swept on a factor-2 grid of powers of two around LR* (or through LR* itself, `on_optimum`); points more than 8× above LR* diverge.
The cell snapshot is what the driver would write: status from the grid (bracketed when the
best point has a finished neighbour on each side), grid best and the parabola optimum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from sweeper.core.rows import CellRow, PointRow
from sweeper.records.store import MANIFEST, STORE_VERSION, StoreWriter

WIDTH, VOCAB, SEQ, TOKENS = 128, 32000, 256, 2_000_000
INIT_LOSS = math.log(VOCAB)


@dataclass(frozen=True)
class Truth:
    E: float = 3.0
    A: float = 6.0
    alpha: float = 0.5
    c: float = 0.04  # LR* = c · depth^b
    b: float = -0.5
    curvature: float = 0.05


def params_of(depth: int) -> tuple[int, int, float]:
    """(total, non-embedding, flops per token) of a width-128 LLaMA decoder (the store's columns)."""
    hidden = 352
    block = 4 * WIDTH * WIDTH + 3 * WIDTH * hidden + 2 * WIDTH
    nonembed = depth * block + WIDTH
    total = nonembed + 2 * VOCAB * WIDTH
    flops = 6.0 * (depth * (4 * WIDTH * WIDTH + 3 * WIDTH * hidden) + WIDTH * VOCAB) + 12.0 * depth * SEQ * WIDTH
    return total, nonembed, flops


def _parabola_min(lrs: list[float], losses: list[float]) -> float:
    x = np.log(lrs)
    a, b, _ = np.polyfit(x, losses, 2)
    return float(math.exp(-b / (2 * a)))


def write_sweep(
    root: Path,
    truths: dict[str, Truth],
    depths: list[int],
    *,
    seeds: tuple[int, ...] = (0,),
    noise: float = 0.0,
    rng_seed: int = 0,
    grid: tuple[int, ...] = (-2, -1, 0, 1, 2),
    edge: set[tuple[str, int]] = frozenset(),  # (method, depth) cells whose grid stops at the best point
    all_diverged: set[tuple[str, int]] = frozenset(),
    all_stalled: set[tuple[str, int]] = frozenset(),  # every point trained to the end at the unigram loss
    stalled_seeds: set[tuple[str, int, int]] = frozenset(),  # (method, depth, seed): that seed's cell alone stalls
    seed_noise: dict[tuple[str, int], float] | None = None,  # (method, depth): its own seed-to-seed sd (else `noise`)
    eval_se: float | None = None,  # every finished point's SE over the eval batches
    pending: set[tuple[str, int]] = frozenset(),
    on_optimum: bool = False,  # grid through LR* itself: best loss = E + A·depth^(-α) exactly
) -> Path:
    """A finished sweep directory; returns root."""
    rng = np.random.default_rng(rng_seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_text(json.dumps({"store_version": STORE_VERSION, "name": root.name, "x": "depth"}))
    writer = StoreWriter(root)
    cells = []
    for method, t in truths.items():
        for depth in depths:
            total, nonembed, flops = params_of(depth)
            lr_star = t.c * depth**t.b
            centre = lr_star if on_optimum else 2.0 ** round(math.log2(lr_star))
            for seed in seeds:
                cid = f"{method}/L{depth}/s{seed}"
                offsets = [k for k in grid if not ((method, depth) in edge and k < 0)]
                rows = []
                base = t.E + t.A * depth ** (-t.alpha)
                # the same noise for a whole cell: what varies across seeds
                seed_shift = rng.normal(0, (seed_noise or {}).get((method, depth), noise))
                for k in offsets:
                    lr = centre * 2.0**k
                    diverged = (method, depth) in all_diverged or lr > 8 * lr_star
                    stalled = ((method, depth) in all_stalled or (method, depth, seed) in stalled_seeds) and not diverged
                    loss = None if diverged else base + t.curvature * math.log(lr / lr_star) ** 2 + seed_shift
                    if stalled:
                        loss = INIT_LOSS - 0.01
                    if (method, depth) in pending:
                        state = "running"
                        loss = None
                    else:
                        state = "diverged" if diverged else "stalled" if stalled else "ok"
                    rows.append({
                        "point_id": f"{cid}/lr={lr:.6g}", "cell_id": cid, "method": method, "family": "llama",
                        "size": f"L{depth}", "depth": depth, "width": WIDTH, "seed": seed, "params": total,
                        "params_nonembed": nonembed, "flops_per_token": flops, "lr": lr, "state": state,
                        "objective": loss if state == "ok" else None, "loss": loss, "init_loss": INIT_LOSS,
                        "loss_se": eval_se if loss is not None else None,
                        "diverged_step": 10 if diverged else None, "reason": "nan" if diverged else None,
                        "steps": 100 if not diverged else 10, "tokens": TOKENS if not diverged else TOKENS // 10,
                        "attempt": 0,
                    })
                writer.append_points([PointRow.from_columns(r) for r in rows])
                ok = [r for r in rows if r["state"] == "ok"]
                status, best_lr, best_obj, interp = "diverged", None, None, None
                if any(r["state"] == "stalled" for r in rows):
                    status = "stalled"
                if (method, depth) in pending:
                    status = "running"
                elif ok:
                    ordered = sorted(rows, key=lambda r: r["lr"])
                    best = min(ok, key=lambda r: r["objective"])
                    i = ordered.index(best)
                    best_lr, best_obj = best["lr"], best["objective"]
                    status = "bracketed" if 0 < i < len(ordered) - 1 else "edge"
                    if status == "bracketed" and ordered[i - 1]["state"] == ordered[i + 1]["state"] == "ok":
                        trio = ordered[i - 1 : i + 2]
                        interp = _parabola_min([r["lr"] for r in trio], [r["objective"] for r in trio])
                cells.append({
                    "cell_id": cid, "method": method, "family": "llama", "size": f"L{depth}", "depth": depth,
                    "width": WIDTH, "seed": seed, "params": total, "status": status, "n_points": len(rows),
                    "n_running": 0, "n_diverged": sum(r["state"] == "diverged" for r in rows),
                    "n_stalled": sum(r["state"] == "stalled" for r in rows),
                    "best_lr": best_lr, "best_objective": best_obj, "interp_lr": interp, "interp_objective": None,
                    "updated_at": 0.0,
                })
    writer.write_cells([CellRow.from_columns(c) for c in cells])
    return root


@pytest.fixture
def make_sweep(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "sweep", **kwargs) -> Path:
        return write_sweep(tmp_path / name, **kwargs)

    return make
