"""From gains to results: the JSON document `sweeper gamma` writes, and its summary rows.

`analyze(models, group)` runs the statistics of `sweeper.analysis.gamma.stats` on each selected site of
each model and returns a JSON-safe dict (NaN becomes null):

    {"version": 1, "site_group": "mlp", "models": [
      {"name", "path", "source", "layout", "model_type", "n_layers", "gain_transform", "notes",
       "meta", "sites": {"mlp_in": {
          "depth": [1..L], "dim": d, "shared_with": null,
          "magnitude": {"mean": [...], "median": [...], "p90": [...], "p99": [...], "rms": [...]},
          "trend": {"mean": {"spearman", "spearman_p", "slope", "slope_stderr", "slope_p"}, ...},
          "schedule": {"a", "b", "b_stderr", "r2", "n"},
          "direction": {"cosine": [[...]], "adjacent_cosine": [...], "mean_adjacent_cosine",
                        "min_adjacent_cosine", "first_last_cosine", "locality",
                        "mds": [[x, y], ...], "mds_explained", "arc_position": [...],
                        "arc_kind", "arc_order", "arc_order_p"}}}}]}

`summary_rows(results)` flattens it to one row per (model, site) for tables (CLI and dashboard).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from sweeper.analysis.gamma import stats
from sweeper.analysis.gamma.checkpoints import ModelGains, SiteGains
from sweeper.analysis.gamma.layouts import SITE_GROUPS, SITES

RESULTS_VERSION = 1
_DIGITS = 6


def _clean(value: Any) -> Any:
    """JSON-safe: numpy to Python, NaN/inf to None, floats rounded to keep files small."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return round(f, _DIGITS) if math.isfinite(f) else None
    return value


def analyze_site(site: SiteGains) -> dict[str, Any]:
    """Every statistic of one site (see `sweeper.analysis.gamma.stats` for the definitions)."""
    depth, gains = site.depth, site.gains
    profile = stats.magnitude_profile(gains)
    cos = stats.cosine_matrix(gains)
    adjacent = stats.adjacent_cosines(cos)
    mds = stats.classical_mds(cos)
    arc = stats.arc_order(depth, mds.coords)
    nan = float("nan")
    return _clean({
        "depth": depth,
        "dim": int(gains.shape[1]),
        "shared_with": site.shared_with,
        "magnitude": profile,
        "trend": {name: asdict(stats.depth_trend(depth, values)) for name, values in profile.items()},
        "schedule": asdict(stats.fit_magnitude_schedule(depth, profile["rms"])),
        "direction": {
            "cosine": cos,
            "adjacent_cosine": adjacent,
            "mean_adjacent_cosine": float(adjacent.mean()) if adjacent.size else nan,
            "min_adjacent_cosine": float(adjacent.min()) if adjacent.size else nan,
            "first_last_cosine": float(cos[0, -1]),
            "locality": stats.locality(cos),
            "mds": mds.coords,
            "mds_explained": mds.explained,
            "arc_position": arc.position,
            "arc_kind": arc.kind,
            "arc_order": arc.order,
            "arc_order_p": arc.p,
        },
    })


def analyze_model(model: ModelGains, sites: Iterable[str]) -> dict[str, Any]:
    chosen = [s for s in sites if s in model.sites]
    notes = list(model.notes)
    missing = [s for s in sites if s not in model.sites]
    if not chosen:
        notes.append(f"no {'/'.join(missing)} site in this layout (it has {', '.join(model.sites)})")
    return _clean({
        "name": model.name,
        "path": model.path,
        "source": model.source,
        "layout": model.layout,
        "model_type": model.model_type,
        "n_layers": model.n_layers,
        "gain_transform": model.gain_transform,
        "notes": notes,
        "meta": model.meta,
        "sites": {s: analyze_site(model.sites[s]) for s in chosen},
    })


def unique_names(models: list[ModelGains]) -> list[ModelGains]:
    """Models with distinct display names (a repeated name gets ` (2)`, ` (3)`, …)."""
    seen: dict[str, int] = {}
    out = []
    for m in models:
        seen[m.name] = seen.get(m.name, 0) + 1
        out.append(m if seen[m.name] == 1 else replace(m, name=f"{m.name} ({seen[m.name]})"))
    return out


def analyze(models: list[ModelGains], group: str = "mlp") -> dict[str, Any]:
    """The results document for `models`, for the sites of `group` ("mlp", "attn" or "all")."""
    sites = SITE_GROUPS[group]
    return {
        "version": RESULTS_VERSION,
        "site_group": group,
        "models": [analyze_model(m, sites) for m in unique_names(models)],
    }


SUMMARY_COLUMNS: dict[str, str] = {
    "model": "model",
    "site": "site",
    "layers": "layers",
    "dim": "d",
    "mean_first": "mean|γ| first",
    "mean_last": "mean|γ| last",
    "mean_spearman": "ρ(mean|γ|, l)",
    "mean_slope": "slope / ln l",
    "p99_spearman": "ρ(p99, l)",
    "schedule_b": "schedule b",
    "schedule_r2": "schedule R²",
    "mean_adjacent_cosine": "adj. cos",
    "first_last_cosine": "cos(first, last)",
    "locality": "locality",
    "mds_explained": "MDS 2-D var.",
    "arc_order": "arc order |ρ|",
}


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (model, site), keys as in SUMMARY_COLUMNS (None where undefined)."""
    rows = []
    for model in results["models"]:
        for site in SITES:
            s = model["sites"].get(site)
            if s is None:
                continue
            mean = s["magnitude"]["mean"]
            direction = s["direction"]
            rows.append({
                "model": model["name"],
                "site": site + (f" (= {s['shared_with']})" if s["shared_with"] else ""),
                "layers": len(s["depth"]),
                "dim": s["dim"],
                "mean_first": mean[0],
                "mean_last": mean[-1],
                "mean_spearman": s["trend"]["mean"]["spearman"],
                "mean_slope": s["trend"]["mean"]["slope"],
                "p99_spearman": s["trend"]["p99"]["spearman"],
                "schedule_b": s["schedule"]["b"],
                "schedule_r2": s["schedule"]["r2"],
                "mean_adjacent_cosine": direction["mean_adjacent_cosine"],
                "first_last_cosine": direction["first_last_cosine"],
                "locality": direction["locality"],
                "mds_explained": direction["mds_explained"],
                "arc_order": direction["arc_order"],
            })
    return rows
