"""Model configuration: one small dataclass shared by every family and scheme."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: the model family names, written once: each is one entry of the registry in `models.family` (one module
#: in `models/families/`; the registry checks that it registers exactly these)
Family = Literal["llama", "looped", "vit"]


def swiglu_hidden(width: int, multiple: int = 32) -> int:
    """SwiGLU hidden size: 8/3 of the width, rounded up to a multiple of `multiple`."""
    return multiple * math.ceil(8 * width / 3 / multiple)


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to build one network (independent of the stack size K).

    `depth` is the number of blocks L. For the looped family, `depth` counts the
    distinct blocks (prelude + core + coda) and `extra` carries the loop settings;
    for the ViT, `vocab` is the number of classes and `extra` the image settings.
    """

    family: Family = "llama"
    scheme: str = "pre"
    width: int = 128
    depth: int = 8
    n_heads: int = 4
    vocab: int = 32000
    seq_len: int = 256
    init_std: float = 0.02
    norm_eps: float = 1e-6
    mlp_hidden: int | None = None  # None: swiglu_hidden(width)
    rope_base: float = 10000.0
    scheme_options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hidden(self) -> int:
        """`mlp_hidden`, else the SwiGLU default. A decoder with the ReLU^2 MLP (`extra.mlp: relu2`) defaults
        to 4 d instead: its family entry's `mlp_hidden(cfg)` is the size the network builds."""
        return self.mlp_hidden if self.mlp_hidden is not None else swiglu_hidden(self.width)

    @property
    def head_dim(self) -> int:
        return self.width // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        return cls(**data)
