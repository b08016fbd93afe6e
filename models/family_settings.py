"""Transitional: the families' settings live in `models/families/` (entries of `models.family`).

`sweeper/spec/schema.py` still imports these three readers by name; once it reads the family entry
instead (`get_family(name).validate_extra(...)`, `.axis_shape(...)`), this module goes.
"""

from __future__ import annotations

from models.families.looped import loop_settings, looped_depth
from models.families.vit import vit_settings

__all__ = ["loop_settings", "looped_depth", "vit_settings"]
