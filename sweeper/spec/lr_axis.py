"""What a point's learning rate is, for the readers that label an LR axis (the dry run, `sweeper fit`).

With AdamW (`train.optimizer.kind: adamw`) a point's LR is the one learning rate. With Muon it is one of
two (`trials.muon`): Muon's, AdamW's tied to it as `adamw_lr_ratio x lr` (`swept: muon`, the default), or
AdamW's, Muon's `lr / adamw_lr_ratio` (`swept: adamw`), or one alone with the other held at `other_lr`.
The ratio may differ by size (a size's own `train` overrides: Parcae's AdamW LR is 6e-3 at 770M against
Muon's 8e-3). Works on the optimizer as `OptimizerConfig.model_dump()` writes it (the planner's cells and a
sweep directory's manifest alike); no pydantic, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LRAxis:
    """The label of a sweep's LR axis and, when it depends on the size, which ratio applies where."""

    label: str  # e.g. "Muon LR (AdamW = r × lr)"
    note: str | None  # e.g. "r = 1 at parcae-140M, parcae-370M; 0.75 at parcae-770M"
    ratios: dict[str, float]  # size -> adamw_lr_ratio (Muon sweeps)


def _g(value: float) -> str:
    return f"{value:g}"


def lr_axis(optimizers: Iterable[tuple[str, Mapping[str, Any]]]) -> LRAxis | None:
    """The axis of the (size, optimizer dump) pairs of a sweep's cells; None when every one is AdamW (its
    LR is plainly the LR: readers keep their label)."""
    pairs = [(size, opt) for size, opt in optimizers]
    muon = [(size, opt.get("muon") or {}) for size, opt in pairs if opt.get("kind") == "muon"]
    if not muon:
        return None
    swept = {m.get("swept", "muon") for _, m in muon}
    held = {m.get("other_lr") for _, m in muon}
    ratios: dict[str, float] = {}
    for size, m in muon:
        ratios.setdefault(size, float(m.get("adamw_lr_ratio", 1.0)))
    mixed = len(muon) < len(pairs)  # some methods train AdamW alone
    if len(swept) > 1 or len(held) > 1:
        label = "LR (Muon's or AdamW's by method: see train.optimizer.muon.swept)"
    elif None not in held:
        (other,) = held
        label = ("Muon LR (AdamW held at " if swept == {"muon"} else "AdamW LR (Muon held at ") + f"{_g(other)})"
    elif swept == {"muon"}:
        label = "Muon LR (AdamW = r × lr)"
    else:
        label = "AdamW LR (Muon = lr / r)"
    if mixed:
        label += "; AdamW LR for the methods without Muon"
    note = None
    if "r " in label or "/ r" in label:
        by_ratio: dict[float, list[str]] = {}
        for size, ratio in ratios.items():
            by_ratio.setdefault(ratio, []).append(size)
        if len(by_ratio) == 1:
            note = f"r = {_g(next(iter(by_ratio)))}"
        else:
            note = "r = " + "; ".join(f"{_g(r)} at {', '.join(sizes)}" for r, sizes in by_ratio.items())
    return LRAxis(label, note, ratios)
