"""Names the sweep schema accepts, known without importing torch (`sweeper validate` answers
in well under a second): the normalization schemes of `models.registry` (its scheme modules
import torch only when a model is built) and the named model sizes of `models.named`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from models import registry
from models.config import swiglu_hidden
from models.named import named_configs, nominal_params


@dataclass(frozen=True)
class NamedShape:
    """A named model size of the width ladder (LLaMA conventions, vocab 32000), or of the looped
    LM / ViT families (`family`, and the family's shape settings in `extra`: the looped model's
    prelude/core/coda split, the ViT's image and patch sizes)."""

    width: int
    depth: int
    heads: int
    mlp_hidden: int
    family: str = "llama"
    extra: tuple[tuple[str, Any], ...] = ()
    nominal_params: int | None = None  # the count the name states (`parcae-140M`: 140M), for budget_params: label


@lru_cache(maxsize=1)
def named_sizes() -> dict[str, NamedShape]:
    """The named model sizes of `models.named` (a torch-free module) by name."""
    return {
        name: NamedShape(width=c.width, depth=c.depth, heads=c.n_heads, mlp_hidden=c.mlp_hidden or swiglu_hidden(c.width),
                         family=c.family, extra=tuple(sorted(c.extra.items())), nominal_params=nominal_params(name))
        for name, c in named_configs().items()
    }


def scheme_names() -> tuple[str, ...]:
    """Every normalization scheme the models package registers, sorted."""
    return tuple(registry.scheme_names())


def suggest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for a near miss, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            close = [lowered[word.lower()]]
    return f"; did you mean {close[0]!r}?" if close else ""
