"""Sizes written the way researchers write them: `1024`, `350M`, `1.3B`, `2e9`, `64k`, `6e20`."""

from __future__ import annotations

import math
import re

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> float:
    """A positive number with an optional k/M/B(G)/T suffix; ValueError saying what is allowed."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size: use a positive number like 1024, 2e9, 350M or 1.3B (suffixes k, M, B, T)")
    value = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{text!r}: a size must be positive and finite")
    return value


def format_size(value: float) -> str:
    """Compact label: 1.3B, 350M, 48 (integers below 10k print as they are)."""
    if value < 1e4 and float(value).is_integer():
        return str(int(value))
    if value >= 1e15:  # FLOPs: scientific notation reads better than a suffix
        return f"{value:.3g}"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.4g}"
