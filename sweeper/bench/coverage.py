"""Benchmark: how often do the 95% intervals contain the truth? `sweeper bench coverage`.

Draws synthetic depth sweeps with known `E + A·x^(-α)` (and a known LR law) plus Gaussian
noise, fits each draw, and prints the share of draws whose interval contains the true E, α,
the true mean loss at an extrapolated depth, and the true LR law exponent, for each bootstrap
scheme and number of sizes. This is the measurement behind the default scheme; the test
suite checks a small version of it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sweeper.analysis.fits.powerlaw import SCHEMES, fit_loss_curve
from sweeper.analysis.fits.shared import fit_shared_e
from sweeper.stats.lrlaw import fit_lr_law

DEPTHS = np.array([48, 64, 96, 128, 192, 256, 384, 512], dtype=float)
TRUTH = {"E": 3.2, "A": 40.0, "alpha": 0.9}
LR_TRUTH = {"c": 0.05, "b": -0.6, "sigma": 0.2}


def loss_coverage(points: int, scheme: str, draws: int, resamples: int, noise: float, seed: int = 2024) -> dict:
    x = DEPTHS[np.linspace(0, DEPTHS.size - 1, points).astype(int)]
    truth = TRUTH["E"] + TRUTH["A"] * x ** (-TRUTH["alpha"])
    far = 2 * DEPTHS[-1]
    truth_far = TRUTH["E"] + TRUTH["A"] * far ** (-TRUTH["alpha"])
    rng = np.random.default_rng(seed)
    hits = np.zeros(3)
    widths = np.zeros(3)
    for d in range(draws):
        fit = fit_loss_curve(x, truth + rng.normal(0, noise, x.size), resamples=resamples, seed=d, scheme=scheme)
        _, lo, hi = fit.predict(np.array([far]))
        hits += [fit.E.contains(TRUTH["E"]), fit.alpha.contains(TRUTH["alpha"]),
                 lo is not None and lo[0] <= truth_far <= hi[0]]
        widths += [(fit.E.hi or 0) - (fit.E.lo or 0), (fit.alpha.hi or 0) - (fit.alpha.lo or 0),
                   0 if lo is None else hi[0] - lo[0]]
    return {"E": hits[0] / draws, "alpha": hits[1] / draws, f"loss@{far:g}": hits[2] / draws,
            "mean width α": widths[1] / draws}


def lr_coverage(points: int, draws: int, resamples: int, seed: int = 7) -> dict:
    x = DEPTHS[np.linspace(0, DEPTHS.size - 1, points).astype(int)]
    rng = np.random.default_rng(seed)
    far = 2 * DEPTHS[-1]
    truth_far = LR_TRUTH["c"] * far ** LR_TRUTH["b"]
    hits = np.zeros(2)
    for d in range(draws):
        lrs = LR_TRUTH["c"] * x ** LR_TRUTH["b"] * np.exp(rng.normal(0, LR_TRUTH["sigma"], x.size))
        fit = fit_lr_law(x, lrs, resamples=resamples, seed=d)
        _, lo, hi = fit.predict(np.array([far]))
        hits += [fit.exponent.contains(LR_TRUTH["b"]), lo is not None and lo[0] <= truth_far <= hi[0]]
    return {"exponent": hits[0] / draws, f"lr@{far:g}": hits[1] / draws}


SHARED_TRUTH = {"E": 3.0, "methods": {"a": (6.0, 0.5), "b": (9.0, 0.7), "c": (4.0, 0.4)}}


def shared_coverage(points: int, draws: int, resamples: int, noise: float, seed: int = 99) -> dict:
    """Coverage of the shared-E fit: the common E and each method's α."""
    x = DEPTHS[np.linspace(0, DEPTHS.size - 1, points).astype(int)]
    rng = np.random.default_rng(seed)
    hits = {"E": 0, **{f"alpha_{m}": 0 for m in SHARED_TRUTH["methods"]}}
    for d in range(draws):
        data = {m: (x, SHARED_TRUTH["E"] + a * x ** (-al) + rng.normal(0, noise, x.size))
                for m, (a, al) in SHARED_TRUTH["methods"].items()}
        fit = fit_shared_e(data, resamples=resamples, seed=d)
        hits["E"] += fit.E.contains(SHARED_TRUTH["E"])
        for m, (_, al) in SHARED_TRUTH["methods"].items():
            hits[f"alpha_{m}"] += fit.fits[m].alpha.contains(al)
    return {k: v / draws for k, v in hits.items()}


def print_coverage(args: argparse.Namespace) -> None:
    """Measure and print, draw count and sizes from `args` (`draws`, `resamples`, `noise`, `points`, `schemes`,
    `shared_e`), each line as soon as it is measured."""
    if args.shared_e:
        for points in args.points:
            started = time.perf_counter()
            cov = shared_coverage(points, args.draws, args.resamples, args.noise)
            print(f"shared E, 3 methods, {points} sizes: " + "  ".join(f"{k} {v:.3f}" for k, v in cov.items())
                  + f"  ({time.perf_counter() - started:.1f} s)")
        return
    print(f"truth: L = {TRUTH['E']} + {TRUTH['A']}·x^-{TRUTH['alpha']}, noise sd {args.noise}; "
          f"{args.draws} draws, {args.resamples} resamples; depths from {DEPTHS.tolist()}")
    for scheme in args.schemes:
        for points in args.points:
            started = time.perf_counter()
            cov = loss_coverage(points, scheme, args.draws, args.resamples, args.noise)
            cells = "  ".join(f"{k} {v:.3f}" for k, v in cov.items())
            print(f"loss  {scheme:12s} {points} sizes: {cells}  ({time.perf_counter() - started:.1f} s)")
    for points in args.points:
        cov = lr_coverage(points, args.draws, args.resamples)
        print(f"LR law residual      {points} sizes: " + "  ".join(f"{k} {v:.3f}" for k, v in cov.items()))
