"""Statistics of per-layer norm gains: magnitude with depth, direction drift, the MDS arc.

Pure numpy/scipy. Every function takes the gains of one site as an `(L, d)` array (row l is
the gain vector of the l-th layer present) and the 1-based depth index of each row.

Definitions (the README section mirrors them):

- *Magnitude*: per layer, the mean, median, 90th and 99th percentile of |γ_l,i| over channels,
  and the RMS ‖γ_l‖/√d.
- *Trend*: Spearman rank correlation of a per-layer statistic with depth, and the least-squares
  slope of the statistic against ln l (with its standard error and p-value).
- *LayerRoPE schedule fit*: ln RMS_l = a + b·ln l by least squares, with R². LayerRoPE scales
  every layer's gain by exp(a_mag + b_mag·ln l) and rotates pairs of channels, which preserves
  the vector norm but not the individual |γ_i|, so the fit uses the RMS: on a LayerRoPE model it
  recovers b = b_mag with R² = 1.
- *Direction*: u_l = γ_l/‖γ_l‖; the cosine matrix C = U Uᵀ; the adjacent-layer cosines C[l, l+1].
- *Classical MDS*: of the chordal distances ‖u_l − u_m‖² = 2 − 2C (equivalently PCA of the
  centred unit vectors), to 2-D, with the share of variance the two axes explain.
- *Arc ordering*: the position of each layer along the 2-D configuration, computed from the
  coordinates alone (never from depth): the angle around the least-squares circle through the
  points, cut at the widest empty angular gap (the arc's opening) and unwrapped; for a nearly
  straight configuration (circle radius over 10× its extent), the projection on the principal
  axis. `arc_order` is |Spearman(position, depth)|. A smooth drift traces an arc whose
  position follows depth (≈ 1). A rigid rotation — the same large rotation applied from each
  layer to the next — puts the layers on a closed ring in the order of l·angle mod 2π, which
  does not follow depth (≈ 0); so does noise.
- *Locality*: mean chordal distance between depth-adjacent layers over the mean distance between
  all pairs. ≈ 1 when neighbours in depth are no closer than any two layers (noise, rigid
  rotation by a large angle); ≪ 1 for a smooth drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

PERCENTILES = {"median": 50.0, "p90": 90.0, "p99": 99.0}
MAGNITUDE_STATS = ("mean", "median", "p90", "p99", "rms")
STRAIGHT_RADIUS_RATIO = 10.0


def magnitude_profile(gains: np.ndarray) -> dict[str, np.ndarray]:
    """Per-layer magnitude statistics of |γ|: mean, median, p90, p99 and RMS, each shape (L,)."""
    g = np.abs(np.asarray(gains, dtype=np.float64))
    profile = {"mean": g.mean(axis=1)}
    for name, q in PERCENTILES.items():
        profile[name] = np.percentile(g, q, axis=1)
    profile["rms"] = np.sqrt((g**2).mean(axis=1))
    return profile


@dataclass(frozen=True)
class Trend:
    """How a per-layer statistic moves with depth."""

    spearman: float  # rank correlation with depth (nan when undefined)
    spearman_p: float
    slope: float  # d statistic / d ln l
    slope_stderr: float
    slope_p: float


def depth_trend(depth: np.ndarray, values: np.ndarray) -> Trend:
    """Spearman correlation with depth and the least-squares slope against ln(depth)."""
    depth = np.asarray(depth, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    nan = float("nan")
    if len(depth) < 3:
        return Trend(nan, nan, nan, nan, nan)
    if np.ptp(values) == 0.0:  # flat: no rank correlation, zero slope
        return Trend(nan, nan, 0.0, 0.0, nan)
    rho, p = sps.spearmanr(depth, values)
    fit = sps.linregress(np.log(depth), values)
    return Trend(float(rho), float(p), float(fit.slope), float(fit.stderr), float(fit.pvalue))


@dataclass(frozen=True)
class ScheduleFit:
    """ln RMS_l = a + b ln l: LayerRoPE's magnitude schedule (gain ∝ l^b)."""

    a: float
    b: float
    b_stderr: float
    r2: float  # nan when the profile is flat (nothing to explain)
    n: int


def fit_magnitude_schedule(depth: np.ndarray, rms: np.ndarray) -> ScheduleFit:
    """Least-squares fit of ln(rms) against ln(depth)."""
    depth = np.asarray(depth, dtype=np.float64)
    rms = np.asarray(rms, dtype=np.float64)
    nan = float("nan")
    if len(depth) < 2 or np.any(rms <= 0):
        return ScheduleFit(nan, nan, nan, nan, len(depth))
    x, y = np.log(depth), np.log(rms)
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - (a + b * x)
    ss_res = float(resid @ resid)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 1e-24 else nan
    dof = len(x) - 2
    sxx = float(((x - x.mean()) ** 2).sum())
    b_stderr = math.sqrt(ss_res / dof / sxx) if dof > 0 and sxx > 0 else nan
    return ScheduleFit(float(a), float(b), b_stderr, r2, len(depth))


def unit_directions(gains: np.ndarray) -> np.ndarray:
    """Rows normalised to unit length. Raises ValueError for an all-zero gain vector."""
    g = np.asarray(gains, dtype=np.float64)
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("a layer's gain vector is all zeros: its direction is undefined")
    return g / norms


def cosine_matrix(gains: np.ndarray) -> np.ndarray:
    """Cosine similarity between every pair of layers' gain vectors, shape (L, L)."""
    u = unit_directions(gains)
    return np.clip(u @ u.T, -1.0, 1.0)


def adjacent_cosines(cos: np.ndarray) -> np.ndarray:
    """C[l, l+1] for consecutive rows, shape (L-1,)."""
    return np.diagonal(cos, offset=1).copy()


def locality(cos: np.ndarray) -> float:
    """Mean chordal distance of depth-adjacent layers / mean over all pairs (nan if L < 3)."""
    n = cos.shape[0]
    if n < 3:
        return float("nan")
    dist = np.sqrt(np.clip(2.0 - 2.0 * cos, 0.0, None))
    upper = dist[np.triu_indices(n, k=1)]
    mean_all = float(upper.mean())
    return float(np.diagonal(dist, offset=1).mean() / mean_all) if mean_all > 0 else float("nan")


@dataclass(frozen=True)
class MDS:
    coords: np.ndarray  # (L, k)
    explained: float  # share of the (positive) variance carried by the k axes


def classical_mds(cos: np.ndarray, k: int = 2) -> MDS:
    """Classical (Torgerson) MDS of unit vectors from their cosine matrix.

    Squared distances 2 − 2C are double-centred; the top-k eigenvectors scaled by the square
    roots of their eigenvalues are the coordinates. Signs are fixed so that the first layer has a
    non-positive first coordinate and the largest |entry| of the second axis is positive.
    """
    n = cos.shape[0]
    d2 = 2.0 - 2.0 * np.asarray(cos, dtype=np.float64)
    centre = np.eye(n) - np.full((n, n), 1.0 / n)
    b = -0.5 * centre @ d2 @ centre
    b = (b + b.T) / 2.0
    eigvals, eigvecs = np.linalg.eigh(b)
    order = np.argsort(eigvals)[::-1]
    eigvals, eigvecs = np.clip(eigvals[order], 0.0, None), eigvecs[:, order]
    k_eff = min(k, n)
    coords = np.zeros((n, k))
    coords[:, :k_eff] = eigvecs[:, :k_eff] * np.sqrt(eigvals[:k_eff])
    if n and coords[0, 0] > 0:
        coords[:, 0] *= -1
    if k > 1 and n:
        j = int(np.argmax(np.abs(coords[:, 1])))
        if coords[j, 1] < 0:
            coords[:, 1] *= -1
    total = float(eigvals.sum())
    explained = float(eigvals[:k_eff].sum() / total) if total > 0 else float("nan")
    return MDS(coords, explained)


def _fit_circle(xy: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Algebraic (Kåsa) least-squares circle: centre and radius, or None when degenerate."""
    x, y = xy[:, 0], xy[:, 1]
    design = np.column_stack([x, y, np.ones_like(x)])
    rhs = -(x**2 + y**2)
    sol, _, rank, _ = np.linalg.lstsq(design, rhs, rcond=None)
    if rank < 3:
        return None
    centre = -0.5 * sol[:2]
    r2 = float(centre @ centre - sol[2])
    if not np.isfinite(r2) or r2 <= 0:
        return None
    return centre, math.sqrt(r2)


@dataclass(frozen=True)
class ArcOrder:
    position: np.ndarray  # each layer's position along the arc (radians, or axis units for a line)
    kind: str  # "circle" | "line"
    order: float  # |Spearman(position, depth)|
    p: float  # Spearman's p-value (the sign of the traversal is not chosen from data; |ρ| is)


def arc_positions(xy: np.ndarray) -> tuple[np.ndarray, str]:
    """Position of each point along the arc it lies on, from the 2-D coordinates only."""
    xy = np.asarray(xy, dtype=np.float64)
    centred = xy - xy.mean(axis=0)
    extent = float(np.max(np.linalg.norm(centred, axis=1))) * 2.0
    circle = _fit_circle(xy) if len(xy) >= 3 else None
    if circle is None or extent == 0.0 or circle[1] > STRAIGHT_RADIUS_RATIO * extent:
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        return centred @ vt[0], "line"
    centre, _ = circle
    angles = np.mod(np.arctan2(xy[:, 1] - centre[1], xy[:, 0] - centre[0]), 2 * math.pi)
    order = np.argsort(angles)
    sorted_angles = angles[order]
    gaps = np.diff(np.concatenate([sorted_angles, [sorted_angles[0] + 2 * math.pi]]))
    cut = sorted_angles[(int(np.argmax(gaps)) + 1) % len(sorted_angles)]  # first angle after the opening
    return np.mod(angles - cut, 2 * math.pi), "circle"


def arc_order(depth: np.ndarray, xy: np.ndarray) -> ArcOrder:
    """How well position along the 2-D arc orders the layers by depth."""
    nan = float("nan")
    if len(depth) < 3:
        return ArcOrder(np.zeros(len(depth)), "line", nan, nan)
    position, kind = arc_positions(xy)
    if np.ptp(position) == 0:
        return ArcOrder(position, kind, nan, nan)
    rho, p = sps.spearmanr(position, depth)
    return ArcOrder(position, kind, abs(float(rho)), float(p))
