"""Names the sweep schema accepts, known without importing torch.

`sweeper validate` must answer in well under a second, so it cannot import the scheme
modules (which import torch). Scheme names are read from the source of
`models/schemes/*.py` (each scheme file registers itself with `@register_scheme("name")`)
and checked against the real registry by tests/sweeper/test_catalog.py, so they cannot
drift. Named model sizes come from `models.named`, which imports no torch.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# Used only when the models package cannot be found on disk (e.g. a broken install).
FALLBACK_SCHEMES = ("pre", "post", "peri", "lns", "deepnet", "layerrope")

_REGISTER = re.compile(r"""register_scheme\(\s*["']([A-Za-z0-9_.\-]+)["']""")


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


@lru_cache(maxsize=1)
def named_sizes() -> dict[str, NamedShape]:
    """The named model sizes of `models.named` (a torch-free module) by name."""
    from models.config import swiglu_hidden
    from models.named import named_configs

    return {
        name: NamedShape(width=c.width, depth=c.depth, heads=c.n_heads, mlp_hidden=c.mlp_hidden or swiglu_hidden(c.width),
                         family=c.family, extra=tuple(sorted(c.extra.items())))
        for name, c in named_configs().items()
    }


def _schemes_dir() -> Path | None:
    spec = importlib.util.find_spec("models")  # finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "schemes"
    return folder if folder.is_dir() else None


@lru_cache(maxsize=1)
def scheme_names() -> tuple[str, ...]:
    """Every normalization scheme the installed `models` package registers, sorted."""
    folder = _schemes_dir()
    names: set[str] = set()
    if folder is not None:
        for path in folder.glob("*.py"):
            try:
                names.update(_REGISTER.findall(path.read_text(encoding="utf-8")))
            except OSError:
                continue
    return tuple(sorted(names)) if names else FALLBACK_SCHEMES


def suggest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for a near miss, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            close = [lowered[word.lower()]]
    return f"; did you mean {close[0]!r}?" if close else ""
