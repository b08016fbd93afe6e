"""Closed-form non-negative least squares for `y ≈ E + A·f` with E, A ≥ 0, vectorised.

For a fixed exponent α the form `E + A·x^(-α)` is linear in (E, A), so with f = x^(-α)
the best non-negative (E, A) has a closed form: the unconstrained 2×2 normal-equation
solution when both are ≥ 0, otherwise the better of the two one-parameter solutions on
the boundary (E = 0 or A = 0). That is exact for a convex quadratic in two variables.
Everything works on weighted sums, so one call evaluates thousands of bootstrap
resamples × hundreds of α values at once (weights are the resample counts; all ones for
a residual bootstrap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sums:
    """Weighted sums of one data set (or a batch of them) against one basis f (or a batch)."""

    s1: np.ndarray  # Σ w
    sf: np.ndarray  # Σ w f
    sff: np.ndarray  # Σ w f²
    sy: np.ndarray  # Σ w y
    sfy: np.ndarray  # Σ w f y
    syy: np.ndarray  # Σ w y²


def grid_sums(weights: np.ndarray, values: np.ndarray, basis: np.ndarray) -> Sums:
    """Sums for B data sets against G bases: weights, values (B, n); basis (G, n) -> arrays (B, G)."""
    # einsum's own loops, not BLAS: these products are tiny, and a multithreaded BLAS on a
    # busy machine spends ten times longer synchronising threads than computing.
    wy = weights * values
    return Sums(
        s1=weights.sum(axis=1)[:, None],
        sf=np.einsum("bn,gn->bg", weights, basis),
        sff=np.einsum("bn,gn->bg", weights, basis * basis),
        sy=wy.sum(axis=1)[:, None],
        sfy=np.einsum("bn,gn->bg", wy, basis),
        syy=(wy * values).sum(axis=1)[:, None],
    )


def row_sums(weights: np.ndarray, values: np.ndarray, basis: np.ndarray) -> Sums:
    """Sums for B data sets, each against its own basis: all arrays (B, n) -> arrays (B,)."""
    wf = weights * basis
    wy = weights * values
    return Sums(
        s1=weights.sum(axis=1),
        sf=wf.sum(axis=1),
        sff=(wf * basis).sum(axis=1),
        sy=wy.sum(axis=1),
        sfy=(wf * values).sum(axis=1),
        syy=(wy * values).sum(axis=1),
    )


def sse(s: Sums, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Weighted sum of squared residuals of y - (e + a f), from the sums alone."""
    return s.syy - 2 * e * s.sy - 2 * a * s.sfy + s.s1 * e * e + 2 * e * a * s.sf + a * a * s.sff


def solve(s: Sums) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-negative least-squares (E, A) and its SSE, elementwise over the sums' shape.

    At a least-squares solution the residual is orthogonal to the fitted columns, so
    SSE = Σy² − θ·(Xᵀy): each candidate's SSE costs two multiplications.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        det = s.s1 * s.sff - s.sf * s.sf
        # A relative threshold: f nearly constant makes E and A collinear (α → 0).
        well_posed = det > 1e-12 * s.s1 * s.sff
        e_free = (s.sff * s.sy - s.sf * s.sfy) / det
        a_free = (s.s1 * s.sfy - s.sf * s.sy) / det
        interior = well_posed & (e_free >= 0) & (a_free >= 0)
        sse_free = s.syy - e_free * s.sy - a_free * s.sfy

        # Boundary E = 0: A = <f, y> / <f, f>, clipped at 0.
        a_only = np.where(s.sff > 0, np.maximum(s.sfy / s.sff, 0.0), 0.0)
        sse_a_only = s.syy - a_only * s.sfy
        # Boundary A = 0: E = mean(y), clipped at 0.
        e_only = np.where(s.s1 > 0, np.maximum(s.sy / s.s1, 0.0), 0.0)
        sse_e_only = s.syy - e_only * s.sy

        use_a = sse_a_only < sse_e_only
        e = np.where(interior, e_free, np.where(use_a, 0.0, e_only))
        a = np.where(interior, a_free, np.where(use_a, a_only, 0.0))
        best = np.where(interior, sse_free, np.where(use_a, sse_a_only, sse_e_only))
        return e, a, np.maximum(best, 0.0)
