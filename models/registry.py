"""Scheme registry: a scheme is one module in `models/schemes/` that decorates its class with
`@register_scheme("name")`. Modules are discovered (imported) on first lookup, so adding a scheme
is adding one file (plus its test). Importing this module does not import torch.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from models.scheme import Scheme

_SCHEMES: dict[str, type[Scheme]] = {}
_discovered = False
S = TypeVar("S", bound=type[Scheme])


def register_scheme(name: str) -> Callable[[S], S]:
    """Class decorator: make `cls` available as scheme `name`."""

    def decorate(cls: S) -> S:
        if name in _SCHEMES and _SCHEMES[name] is not cls:
            raise ValueError(f"scheme '{name}' is registered twice ({_SCHEMES[name].__module__} and {cls.__module__})")
        cls.name = name
        _SCHEMES[name] = cls
        return cls

    return decorate


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import models.schemes as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    _discovered = True


def scheme_names() -> list[str]:
    """All registered scheme names, sorted."""
    _discover()
    return sorted(_SCHEMES)


def get_scheme(name: str) -> type[Scheme]:
    """The scheme class registered as `name`; ValueError naming the allowed names otherwise."""
    _discover()
    try:
        return _SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown scheme '{name}' (allowed: {', '.join(sorted(_SCHEMES))})") from None


def make_scheme(name: str, depth: int, options: Mapping[str, Any] | None = None) -> Scheme:
    """An instance of scheme `name` for a network of `depth` blocks."""
    return get_scheme(name)(depth, options)
