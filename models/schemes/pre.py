"""Pre-Norm (LLaMA): `h = h + A(N(h))`; `h = h + F(N(h))`; a final norm before the head."""

from __future__ import annotations

from models.registry import register_scheme
from models.scheme import Scheme


@register_scheme("pre")
class PreNorm(Scheme):
    """Pre-Norm (LLaMA): h = h + B(N(h)), final norm before the head."""

    # The base class already implements exactly this wiring; the class exists to name it.
