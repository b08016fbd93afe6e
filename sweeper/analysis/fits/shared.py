"""One irreducible loss shared by several methods: `L_m(x) = E + A_m·x^(-α_m)` (`sweeper fit --shared-e`).

With 4–8 sizes per method, E and α trade off: a lower floor with a smaller exponent fits
almost as well as a higher floor with a larger one, so per-method exponents are hard to
compare. When the methods share the architecture's width and data, their floor is plausibly
the same (at width 128 it is the width-limited floor, not the data's entropy), and fitting
one E to all of them makes the α_m comparable and uses every point to pin E down.

Fit: the profile over E (grid over [0, max loss], then Brent), where for each E every
method's best (A_m ≥ 0, α_m) has the α-scan closed form of `sweeper.analysis.fits.powerlaw`; then a
joint trust-region polish of all 1 + 2M parameters. Intervals: the calibrated residual
bootstrap, resampling each method's residuals within that method, with t-calibration on the
joint residual degrees of freedom; each replicate is refitted by the same profile (coarser
grids) plus vectorised Gauss-Newton steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from sweeper.stats.estimate import Estimate, estimate, small_sample_factor, width_warnings
from sweeper.stats.loglog import fit_power_law
from sweeper.analysis.fits.powerlaw import (
    ALPHA_BOUNDS,
    ALPHA_GRID_SIZE,
    DEFAULT_RESAMPLES,
    BootstrapDraws,
    LossFit,
    _leverage,
    alpha_grid,
)

E_GRID = 200
BOOT_E_GRID = 60  # over Ê ± the spread of the losses; Gauss-Newton steps remove the grid error
BOOT_ALPHA_GRID = 120
_CHUNK = 100


@dataclass
class _Series:
    name: str
    x: np.ndarray
    y: np.ndarray
    x_ref: float

    @property
    def xt(self) -> np.ndarray:
        return self.x / self.x_ref


@dataclass
class SharedFit:
    E: Estimate
    fits: dict[str, LossFit]  # per method, E shared; methods left out keep no entry
    left_out: dict[str, str] = field(default_factory=dict)
    dof: int = 0
    converged: bool | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.fits) >= 2


def _profile_terms(xt: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, ...]:
    f = np.power(xt[None, :], -alphas[:, None])
    return f.sum(axis=1), (f * f).sum(axis=1), f @ y


def _method_profile(s: _Series, e: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each E: the best SSE over α (A ≥ 0 in closed form), its α index and A. Shapes (G_E,)."""
    sf, sff, sfy = _profile_terms(s.xt, s.y, alphas)
    base = np.sum(s.y**2) - 2 * e * np.sum(s.y) + s.y.size * e * e
    c = sfy[None, :] - e[:, None] * sf[None, :]
    gain = np.maximum(c, 0.0) ** 2 / sff[None, :]
    k = np.argmax(gain, axis=1)
    rows = np.arange(e.size)
    return base - gain[rows, k], k, np.maximum(c[rows, k], 0.0) / sff[k]


def _total(series: list[_Series], e: float, alphas: np.ndarray) -> float:
    return float(sum(_method_profile(s, np.array([e]), alphas)[0][0] for s in series))


def fit_shared_e(
    data: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    alpha_bounds: tuple[float, float] = ALPHA_BOUNDS,
    grid_size: int = ALPHA_GRID_SIZE,
) -> SharedFit:
    """Fit every method's (A_m, α_m) with one E; methods with fewer than two sizes are left out."""
    series: list[_Series] = []
    left_out: dict[str, str] = {}
    for name, (x, y) in sorted(data.items()):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        if np.unique(x).size < 2:
            left_out[name] = f"{np.unique(x).size} size(s): a method needs 2 sizes to share E"
            continue
        series.append(_Series(name, x, y, float(np.exp(np.mean(np.log(x))))))
    result = SharedFit(E=Estimate(None), fits={}, left_out=left_out)
    if len(series) < 2:
        result.warnings.append("shared E needs at least two methods with two or more sizes each; not fitted")
        return result

    alphas = alpha_grid(alpha_bounds, grid_size)
    y_max = max(float(s.y.max()) for s in series)
    e_grid = np.linspace(0.0, y_max, E_GRID)
    totals = sum(_method_profile(s, e_grid, alphas)[0] for s in series)
    k = int(np.argmin(totals))
    lo_e, hi_e = e_grid[max(k - 1, 0)], e_grid[min(k + 1, e_grid.size - 1)]
    res = minimize_scalar(lambda e: _total(series, e, alphas), bounds=(lo_e, hi_e), method="bounded",
                          options={"xatol": 1e-12})
    e_hat = float(res.x) if _total(series, float(res.x), alphas) <= totals[k] else float(e_grid[k])
    params = [e_hat]
    for s in series:
        _, idx, a = _method_profile(s, np.array([e_hat]), alphas)
        params += [float(a[0]), float(alphas[idx[0]])]
    theta = np.array(params)
    converged = bool(res.success)
    if all(theta[1 + 2 * i] > 0 for i in range(len(series))):
        theta, ok = _polish(series, theta, alpha_bounds)
        converged = converged and ok
    result.converged = converged

    # Residuals, leverage and degrees of freedom of the joint model.
    fitted = _predict_all(series, theta)
    resid = [s.y - f for s, f in zip(series, fitted)]
    jac = _joint_jacobian(series, theta)
    lev, rank = _leverage(jac)
    n_total = sum(s.y.size for s in series)
    result.dof = n_total - rank
    draws = None
    if result.dof > 0 and resamples > 0:
        draws = _bootstrap(series, theta, fitted, resid, lev, result.dof, resamples, seed, alpha_bounds)
    else:
        result.warnings.append(f"{n_total} points for {rank} free parameters: no residual scatter, so no intervals")
    result.E = estimate(theta[0], None if draws is None else draws[0])
    if theta[0] <= 0:
        result.warnings.append("shared E is at its bound 0")
    if not converged:
        result.warnings.append("shared-E optimiser did not converge")

    offset = 0
    for i, s in enumerate(series):
        a, alpha = theta[1 + 2 * i], theta[2 + 2 * i]
        fit = LossFit(x=s.x, y=s.y, x_ref=s.x_ref)
        fit._e, fit._a, fit._alpha = theta[0], a, alpha if a > 0 else math.nan
        fit.rss = float(np.sum(resid[i] ** 2))
        fit.dof = result.dof
        fit.converged = converged
        fit.optimizer = {"method": "shared-E profile + joint least squares", "converged": converged}
        if np.all(s.y > 0):
            fit.loglog = fit_power_law(s.x, s.y, resamples=resamples, seed=seed + 7919, what="the log-log line")
            fit.loglog_slope = fit.loglog.exponent
        n = s.y.size
        if draws is not None:
            e_d, a_d, al_d = draws[0], draws[1][:, i], draws[2][:, i]
            pool = (resid[i] / np.sqrt(np.clip(1 - lev[offset : offset + n], 1e-12, None)))
            pool = (pool - pool.mean()) * small_sample_factor(result.dof)
            fit.draws = BootstrapDraws(e=e_d, a=a_d, alpha=al_d, noise=pool)
            a_orig_d = a_d * np.power(s.x_ref, np.where(np.isfinite(al_d), al_d, 0.0))
            fit.E = result.E
            fit.A = estimate(float(a * np.power(s.x_ref, alpha)), a_orig_d)
            fit.A_ref = estimate(a, a_d)
            fit.alpha = estimate(alpha, al_d) if a > 0 else Estimate(None)
        else:
            fit.E, fit.A, fit.A_ref = result.E, Estimate(float(a * np.power(s.x_ref, alpha))), Estimate(a)
            fit.alpha = Estimate(alpha) if a > 0 else Estimate(None)
        offset += n
        if a <= 0:
            fit.status = "flat"
            fit.warnings.append("loss does not decrease with x (A = 0 with the shared E): α is undetermined")
        else:
            if alpha <= alpha_bounds[0] * (1 + 1e-9) or alpha >= alpha_bounds[1] * (1 - 1e-9):
                fit.warnings.append(f"α = {alpha:.4g} is at the edge of the search range {alpha_bounds}")
            fit.warnings.extend(width_warnings({"A·x_ref^(-α)": fit.A_ref, "α": fit.alpha}))
        fit.warnings.extend(result.warnings)
        fit.warnings.extend(width_warnings({"shared E": result.E}))
        result.fits[s.name] = fit
    return result


def _predict_all(series: list[_Series], theta: np.ndarray) -> list[np.ndarray]:
    return [theta[0] + theta[1 + 2 * i] * np.power(s.xt, -theta[2 + 2 * i]) for i, s in enumerate(series)]


def _joint_jacobian(series: list[_Series], theta: np.ndarray) -> np.ndarray:
    """Jacobian over the free parameters (a parameter on its bound 0 is not free)."""
    n_total = sum(s.y.size for s in series)
    cols = []
    if theta[0] > 0:
        cols.append(np.ones(n_total))
    offset = 0
    for i, s in enumerate(series):
        a, alpha = theta[1 + 2 * i], theta[2 + 2 * i]
        if a > 0:
            f = np.power(s.xt, -alpha)
            for block in (f, -a * f * np.log(s.xt)):
                col = np.zeros(n_total)
                col[offset : offset + s.y.size] = block
                cols.append(col)
        offset += s.y.size
    return np.stack(cols, axis=1) if cols else np.zeros((n_total, 0))


def _polish(series: list[_Series], theta0: np.ndarray, bounds: tuple[float, float]) -> tuple[np.ndarray, bool]:
    m = len(series)
    y = np.concatenate([s.y for s in series])

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.concatenate(_predict_all(series, theta)) - y

    def jacobian(theta: np.ndarray) -> np.ndarray:
        jac = np.zeros((y.size, 1 + 2 * m))
        jac[:, 0] = 1.0
        offset = 0
        for i, s in enumerate(series):
            f = np.power(s.xt, -theta[2 + 2 * i])
            jac[offset : offset + s.y.size, 1 + 2 * i] = f
            jac[offset : offset + s.y.size, 2 + 2 * i] = -theta[1 + 2 * i] * f * np.log(s.xt)
            offset += s.y.size
        return jac

    lower = np.array([0.0] + [0.0, bounds[0]] * m)
    upper = np.array([np.inf] + [np.inf, bounds[1]] * m)
    start = np.clip(theta0, lower, upper)
    res = least_squares(residuals, start, jac=jacobian, bounds=(lower, upper), method="trf", x_scale="jac",
                        xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=500)
    if np.sum(res.fun**2) <= np.sum(residuals(start) ** 2) * (1 + 1e-9) + 1e-300:
        return res.x, bool(res.status > 0)
    return start, False


def _bootstrap(
    series: list[_Series],
    theta: np.ndarray,
    fitted: list[np.ndarray],
    resid: list[np.ndarray],
    leverage: np.ndarray,
    dof: int,
    resamples: int,
    seed: int,
    bounds: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(E, A (B, M), α (B, M), replicate data (B, N)) for every replicate."""
    rng = np.random.default_rng(seed)
    factor = small_sample_factor(dof)
    values = []
    offset = 0
    for s, f, r in zip(series, fitted, resid):
        n = s.y.size
        adj = r / np.sqrt(np.clip(1 - leverage[offset : offset + n], 1e-12, None))
        adj = (adj - adj.mean()) * factor
        values.append(f[None, :] + adj[rng.integers(0, n, size=(resamples, n))])
        offset += n
    alphas = alpha_grid(bounds, BOOT_ALPHA_GRID)
    log_alphas = np.log(alphas)
    bases = [np.power(s.xt[None, :], -alphas[:, None]) for s in series]
    sf = [b.sum(axis=1) for b in bases]
    sff = [(b * b).sum(axis=1) for b in bases]
    y_all = np.concatenate([s.y for s in series])
    spread = float(y_all.max() - y_all.min())
    e_grid = np.linspace(max(0.0, theta[0] - spread), theta[0] + spread, BOOT_E_GRID)
    h = e_grid[1] - e_grid[0]
    m = len(series)
    out_e = np.empty(resamples)
    out_a = np.empty((resamples, m))
    out_al = np.empty((resamples, m))
    for start in range(0, resamples, _CHUNK):
        vals = [v[start : start + _CHUNK] for v in values]
        c = vals[0].shape[0]
        total = np.zeros((c, e_grid.size))
        for v, b, f1, f2 in zip(vals, bases, sf, sff):
            sfy = np.einsum("bn,gn->bg", v, b)
            base = (v * v).sum(1)[:, None] - 2 * e_grid[None, :] * v.sum(1)[:, None] + v.shape[1] * e_grid[None, :] ** 2
            cc = sfy[:, None, :] - e_grid[None, :, None] * f1[None, None, :]
            total += base - (np.maximum(cc, 0.0) ** 2 / f2[None, None, :]).max(axis=2)
        k = np.argmin(total, axis=1)
        rows = np.arange(c)
        inner = (k > 0) & (k < e_grid.size - 1)
        t_l, t_c, t_r = total[rows, np.clip(k - 1, 0, None)], total[rows, k], total[rows, np.clip(k + 1, None, e_grid.size - 1)]
        curv = t_l - 2 * t_c + t_r
        with np.errstate(divide="ignore", invalid="ignore"):
            off = np.where(inner & (curv > 0), 0.5 * h * (t_l - t_r) / curv, 0.0)
        e = np.clip(e_grid[k] + np.clip(off, -h, h), 0.0, None)
        a = np.empty((c, m))
        al = np.empty((c, m))
        for j, (v, b, f1, f2) in enumerate(zip(vals, bases, sf, sff)):
            sfy = np.einsum("bn,gn->bg", v, b)
            cc = sfy - e[:, None] * f1[None, :]
            gain = np.maximum(cc, 0.0) ** 2 / f2[None, :]
            idx = np.argmax(gain, axis=1)
            a[:, j] = np.maximum(cc[rows, idx], 0.0) / f2[idx]
            al[:, j] = np.exp(log_alphas[idx])
        e, a, al = _gauss_newton(series, vals, e, a, al, bounds)
        al[a <= 0] = np.nan
        out_e[start : start + c], out_a[start : start + c], out_al[start : start + c] = e, a, al
    return out_e, out_a, out_al, np.concatenate(values, axis=1)


def _gauss_newton(
    series: list[_Series],
    vals: list[np.ndarray],
    e: np.ndarray,
    a: np.ndarray,
    al: np.ndarray,
    bounds: tuple[float, float],
    steps: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Joint Gauss-Newton polish of every replicate with all A_m > 0 (steps kept only if the SSE falls)."""
    m = len(series)
    c = e.size
    active = (a > 0).all(axis=1)

    def sse(e_: np.ndarray, a_: np.ndarray, al_: np.ndarray) -> np.ndarray:
        out = np.zeros(c)
        for j, (s, v) in enumerate(zip(series, vals)):
            r = e_[:, None] + a_[:, j : j + 1] * np.power(s.xt[None, :], -al_[:, j : j + 1]) - v
            out += (r * r).sum(1)
        return out

    current = sse(e, a, al)
    p = 1 + 2 * m
    for _ in range(steps):
        if not active.any():
            break
        jtj = np.zeros((c, p, p))
        jtr = np.zeros((c, p))
        for j, (s, v) in enumerate(zip(series, vals)):
            f = np.power(s.xt[None, :], -al[:, j : j + 1])
            r = e[:, None] + a[:, j : j + 1] * f - v
            cols = {0: np.ones_like(f), 1 + 2 * j: f, 2 + 2 * j: -a[:, j : j + 1] * f * np.log(s.xt)[None, :]}
            for pi, ci in cols.items():
                jtr[:, pi] += (ci * r).sum(1)
                for qi, cq in cols.items():
                    jtj[:, pi, qi] += (ci * cq).sum(1)
        diag = np.einsum("bii->bi", jtj)
        jtj = jtj + 1e-9 * np.einsum("bi,ij->bij", diag + 1e-300, np.eye(p))
        ok = np.isfinite(jtj).all(axis=(1, 2)) & (np.abs(np.linalg.det(jtj)) > 0)
        jtj[~ok] = np.eye(p)
        delta = -np.linalg.solve(jtj, jtr[:, :, None])[:, :, 0]
        ne = e + delta[:, 0]
        na = a + delta[:, 1::2]
        nal = al + delta[:, 2::2]
        feasible = ok & active & (ne >= 0) & (na > 0).all(1) & (nal > bounds[0]).all(1) & (nal < bounds[1]).all(1)
        with np.errstate(invalid="ignore", over="ignore"):
            trial = sse(np.where(feasible, ne, e), np.where(feasible[:, None], na, a), np.where(feasible[:, None], nal, al))
        accept = feasible & (trial <= current)
        e = np.where(accept, ne, e)
        a = np.where(accept[:, None], na, a)
        al = np.where(accept[:, None], nal, al)
        current = np.where(accept, trial, current)
        active = accept
    return e, a, al
