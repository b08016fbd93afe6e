"""Cell and point ids: one format and one parse for every sweep axis.

- A *cell* is one (method, size, seed): `CellId("pre", "L48", 0)` is `pre/L48/s0`. Its size
  label names the sweep's axis value: `L<blocks>` in a depth sweep (`model.depths`),
  `T<loops>` in a loop-count sweep (`model.loops`), the size's own name in a ladder
  (`model.sizes`). `size_labels` makes them; nothing else spells them out.
- A *point* is one learning rate of a cell: `PointId(cell, 0.002)` is `pre/L48/s0/lr=0.002`.
  Learning rates are kept at the precision of the id (6 significant digits, `canonical`), so
  "never propose an LR twice" and "which point is this" are exact comparisons.

Method and size names cannot contain "/" (the schema's `Name`), so parsing is unambiguous.
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SEED = re.compile(r"^s(\d+)$")
_DEPTH = re.compile(r"^L(\d+)$")
_LR = "/lr="


def canonical(lr: float) -> float:
    """A learning rate at the precision of point ids (`f"{lr:.6g}"`)."""
    return float(f"{lr:.6g}")


def depth_label(depth: int) -> str:
    return f"L{depth}"


def loops_label(loops: int) -> str:
    return f"T{loops}"


def depth_of_label(label: str) -> int | None:
    """The number of blocks a depth sweep's size label names (`L48` -> 48); None for any other label."""
    match = _DEPTH.match(str(label))
    return int(match.group(1)) if match else None


def size_labels(*, depths: Sequence[int] | None = None, loops: Sequence[int] | None = None,
                sizes: Iterable[str] | None = None) -> list[str]:
    """The size labels of a sweep axis, in the YAML's order (exactly one axis is given)."""
    if depths is not None:
        return [depth_label(d) for d in depths]
    if loops is not None:
        return [loops_label(n) for n in loops]
    return list(sizes or [])


@dataclass(frozen=True, order=True)
class CellId:
    method: str
    size: str
    seed: int

    def __str__(self) -> str:
        return f"{self.method}/{self.size}/s{self.seed}"

    @classmethod
    def parse(cls, text: str) -> CellId:
        parts = str(text).rsplit("/", 2)
        match = _SEED.match(parts[-1]) if len(parts) == 3 else None
        if match is None or not parts[0] or not parts[1]:
            raise ValueError(f"not a cell id (method/size/s<seed>): {text!r}")
        return cls(parts[0], parts[1], int(match.group(1)))

    def point(self, lr: float) -> PointId:
        return PointId(self, lr)


@dataclass(frozen=True, order=True)
class PointId:
    cell: CellId
    lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", canonical(self.lr))

    def __str__(self) -> str:
        return f"{self.cell}{_LR}{self.lr:.6g}"

    @classmethod
    def parse(cls, text: str) -> PointId:
        cell, sep, lr = str(text).rpartition(_LR)
        if not sep:
            raise ValueError(f"not a point id (<cell id>/lr=<lr>): {text!r}")
        try:
            value = float(lr)
        except ValueError:
            raise ValueError(f"not a point id (<cell id>/lr=<lr>): {text!r}") from None
        return cls(CellId.parse(cell), value)


def cell_id(method: str, size: str, seed: int) -> str:
    """The text of a cell id."""
    return str(CellId(method, size, seed))


def point_id(cell: str | CellId, lr: float) -> str:
    """The text of a point id (`cell` as text or typed)."""
    return str(PointId(cell if isinstance(cell, CellId) else CellId.parse(cell), lr))


def cell_of(point: str) -> str:
    """The cell id (text) of a point id (text)."""
    return str(PointId.parse(point).cell)


def is_point_id(text: object) -> bool:
    """Whether `text` is a point id (`<cell id>/lr=<lr>`)."""
    try:
        PointId.parse(str(text))
    except ValueError:
        return False
    return isinstance(text, str)
