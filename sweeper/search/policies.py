"""A sweep's distinct LR policies, as `sweeper replay` and the prior simulation read them: the
top-level `lr` section, then each method's overrides, with `--policy KEY=VALUE` overrides applied
(`sweep_policies`), and a short label for each (`describe_policy`). No polars, no torch.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sweeper.core.errors import UserError
from sweeper.core.grid import LRPolicy
from sweeper.spec.schema import LRSection, deep_merge, load_sweep, problems_from
from sweeper.spec.yamlio import YamlProblem, load_text


def sweep_policies(path: str, overrides: list[str]) -> list[tuple[str, list[str], LRSection]]:
    """(label, methods, LRSection) per distinct LR policy of the sweep, overrides applied; the
    top-level `lr` section first."""
    cfg = load_sweep(path, need_data=False).config  # replay reads recorded losses, never the data
    patch: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--policy {item}: write KEY=VALUE, e.g. --policy points=3")
        try:
            patch[key.strip()] = load_text(value.strip() or "null").data
        except YamlProblem as exc:
            raise UserError(f"--policy {item}: {exc.message}") from None

    def section(raw: dict[str, Any]) -> LRSection:
        try:
            return LRSection.model_validate(deep_merge(raw, patch))
        except ValidationError as exc:
            lines = [f"--policy: {p.dotted()}: {p.message}" for p in problems_from(exc, LRSection)]
            raise UserError(lines[0], details=lines[1:]) from None

    top = section(cfg.lr.model_dump())
    found: list[tuple[str, list[str], LRSection]] = []
    for method in cfg.methods:
        mine = section(cfg.lr_for(method).model_dump()) if method.lr else top
        for _, names, existing in found:
            if existing == mine:
                names.append(method.name)
                break
        else:
            found.append(("", [method.name], mine))
    found.sort(key=lambda entry: entry[2] != top)  # the top-level policy first
    return [(describe_policy(sec.to_policy()), names, sec) for _, names, sec in found]


def describe_policy(policy: LRPolicy) -> str:
    """A short label: 'factor 2, 3 points, refine toward vertex, vertex first, half step past failures, cap 10'."""
    grid = f"grid of {len(policy.grid)}" if policy.grid is not None else f"{policy.points} points"
    refine = {True: "refine", False: "no refine", "vertex": "refine toward vertex"}[policy.refine]
    parts = [f"factor {policy.factor:g}", grid, refine]
    if policy.refine_min_gain:
        parts.append(f"min gain {policy.refine_min_gain:g}")
    if policy.vertex_first:
        parts.append("vertex first")
    if (policy.refine == "vertex" or policy.vertex_first) and policy.vertex_offset != 0.5:
        parts.append(f"vertex offset {policy.vertex_offset:g}")
    if policy.failed_neighbour != "skip":
        parts.append("half step past failures")
    if policy.pair_fallback:
        parts.append("pair fallback")
    if policy.failed_side_last:
        parts.append("failed side last")
    if policy.close_after_failures:
        parts.append(f"close after {policy.close_after_failures} failures")
    if policy.extend_by != 1:
        parts.append(f"extend by {policy.extend_by}")
    parts.append(f"cap {policy.max_points}")
    return ", ".join(parts)
