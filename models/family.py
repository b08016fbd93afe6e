"""Model-family registry: one frozen `FamilySpec` per network family, registered under its name.

A family is one module in `models/families/` that calls `register_family(FamilySpec(...))`; modules
are discovered (imported) on first lookup, as the schemes of `models.registry` are. The entry carries
everything the rest of the code needs to know about a family, so that nothing branches on its name
(torchtitan's `TrainSpec` / `register_train_spec`):

- the network (`network`, a "module:Class" imported by `build`, the only step that imports torch);
- its settings (`options`: a frozen dataclass whose fields are the `model.extra` keys with their
  defaults, read and validated by its `read`): the place for every option of a family;
- exact parameter counting and training FLOPs per token (`count_params`, `flops_per_token`), and the
  shape figures derived from the settings (`tokens_per_sample`, `activation_layers`, `mlp_hidden`,
  `blocks_label`, `eval_loop_counts`);
- its data (`data_kind`: token sequences or labelled images), its size axis besides named sizes
  (`size_axis` and `axis_shape`: depths, or mean loop counts), the scheme options it sets by default;
- what trials and the planner ask as capabilities: `classifies_sequences`, `samples_loops`,
  `fused_loss`, `rotary`, `micro_batch`.

The family names are the `Family` literal of `models.config` (written once); discovery checks that the
registered families are exactly those names. Importing this module does not import torch.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, get_args

from models.config import Family, ModelConfig
from models.registry import get_scheme

if TYPE_CHECKING:  # pragma: no cover - typing only
    from models.stacked import StackedModel

__all__ = ["DataKind", "Family", "FamilyOptions", "FamilySpec", "SizeAxis", "families", "family_names", "family_of",
           "get_family", "register_family"]

#: what a sample of the family's data is: a token sequence (LM) or a labelled image (classifier)
DataKind = Literal["tokens", "images"]
#: what `model.<axis>` sweeps besides named sizes: numbers of blocks, or mean training loop counts
SizeAxis = Literal["depths", "loops"]
O = TypeVar("O", bound="FamilyOptions")


# ---- a family's settings (`model.extra`) -----------------------------------------------------------


class FamilyOptions:
    """Base of a family's settings: subclasses are frozen dataclasses whose fields are the `model.extra`
    keys, each with its default, and whose `read` validates a mapping (ValueError naming the key).

    A new option of a family is a new field of its settings class, with its default, and one line in its
    `read`; every reader (counting, the network, the planner, `sweeper validate`) then sees it. Parcae's
    official blocks (ReLU^2 MLP, QK-norm, value embeddings, tied embeddings, scaled-zero / orthogonal init)
    are such options of the decoder, `models.families.llama.DecoderOptions`, which `LlamaSettings` (the GPT
    baseline) and the looped family's `LoopSettings` (adding the prelude norm, the state init and the
    recurrence) extend; `LlamaLM` builds from them and `count_decoder` counts them, so that neither the
    trainer nor the planner gains a branch."""

    family: ClassVar[str] = ""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in fields(cls) if f.default is not MISSING}  # type: ignore[arg-type]

    @classmethod
    def read(cls: type[O], extra: Mapping[str, Any], depth: int | None = None) -> O:
        """The settings in `extra` (defaults for the keys not given), checked against a network of
        `depth` blocks (None: the depth the settings imply)."""
        check_keys(cls.family, extra, cls.keys())
        return cls()


def check_keys(family: str, extra: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    if extra and not allowed:
        raise ValueError(f"model.extra: the {family} family takes no extra settings (got {', '.join(sorted(extra))})")
    unknown = sorted(set(extra) - set(allowed))
    if unknown:
        raise ValueError(f"model.extra for the {family} family: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")


def read_int(family: str, extra: Mapping[str, Any], key: str, default: int, lo: int) -> int:
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"model.extra.{key} for the {family} family must be an integer >= {lo}, got {value!r}")
    return value


def read_float(family: str, extra: Mapping[str, Any], key: str, default: float, *, lo: float = 0.0,
               lo_open: bool = True, hi: float | None = None) -> float:
    value = extra.get(key, default)
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > lo if lo_open else value >= lo) and (hi is None or value <= hi)
    if not ok:
        bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi is not None else "")
        raise ValueError(f"model.extra.{key} for the {family} family must be a number {bound}, got {value!r}")
    return float(value)


def read_bool(family: str, extra: Mapping[str, Any], key: str, default: bool) -> bool:
    value = extra.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"model.extra.{key} for the {family} family must be true or false, got {value!r}")
    return value


def read_choice(family: str, extra: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = extra.get(key, default)
    if value not in allowed:
        raise ValueError(f"model.extra.{key} for the {family} family must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


# ---- the entry ----------------------------------------------------------------------------------------


def _seq_len(cfg: ModelConfig) -> int:
    return cfg.seq_len


def _depth(cfg: ModelConfig) -> int:
    return cfg.depth


def _hidden(cfg: ModelConfig) -> int:
    return cfg.hidden


def _depth_label(cfg: ModelConfig) -> str:
    return str(cfg.depth)


def _depth_axis(extra: Mapping[str, Any], value: int) -> tuple[int, dict[str, Any]]:
    return value, dict(extra)


def _no_loop_counts(cfg: ModelConfig) -> tuple[int, ...]:
    return ()


@dataclass(frozen=True)
class FamilySpec:
    """One model family (see the module docstring). The callables' defaults are the decoder's."""

    name: Family
    summary: str  # one line: what the network is
    network: str  # "module:Class" of the stacked network `build` instantiates
    options: type[FamilyOptions]  # the `model.extra` settings, with defaults and validation
    count_params: Callable[[ModelConfig], dict[str, int]]  # {"total", "nonembed", "embedding", "head", "matmul"}
    flops_per_token: Callable[[ModelConfig, int | None], float]  # training FLOPs per token (seq_len: attention's T)
    data_kind: DataKind = "tokens"
    size_axis: SizeAxis = "depths"
    #: (blocks, extra) of the cell at one value of `size_axis`, from the sweep's `model.extra`
    axis_shape: Callable[[Mapping[str, Any], int], tuple[int, dict[str, Any]]] = _depth_axis
    #: scheme options the family sets unless the method gives them (only for schemes that have the option)
    scheme_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: tokens per training sample (`seq_len` for an LM; a ViT's patches and class token)
    tokens_per_sample: Callable[[ModelConfig], int] = _seq_len
    #: layers whose activations a training step keeps for the backward pass (`trials.footprint`)
    activation_layers: Callable[[ModelConfig], int] = _depth
    mlp_hidden: Callable[[ModelConfig], int] = _hidden
    blocks_label: Callable[[ModelConfig], str] = _depth_label  # "L", or a looped model's "P/C/Q"
    #: the loop counts an evaluation reports a loss at (a looped model's `eval_loops`; () for a network without loops)
    eval_loop_counts: Callable[[ModelConfig], tuple[int, ...]] = _no_loop_counts
    # capabilities: what trials and the planner ask instead of the name
    classifies_sequences: bool = False  # one prediction per sample (the loss has a row per sequence, not per token)
    samples_loops: bool = False  # the trainer draws the step's loop count(s) (`model.training_loops`)
    fused_loss: bool = False  # `trials.fused_loss` (the decoder's chunked head + cross-entropy) applies
    rotary: bool = True  # attention rotates q and k (RoPE): the head size must be even
    micro_batch: bool = True  # `train.micro_batch` (gradient accumulation) is allowed

    def __post_init__(self) -> None:
        if self.options.family != self.name:
            raise ValueError(f"family {self.name!r}: its options {self.options.__name__} are for {self.options.family!r}")

    @property
    def requires_image_data(self) -> bool:
        return self.data_kind == "images"

    def settings(self, cfg: ModelConfig) -> FamilyOptions:
        """The family's settings of `cfg` (ValueError naming the key when one is wrong)."""
        return self.options.read(cfg.extra, cfg.depth)

    def validate_extra(self, extra: Mapping[str, Any], depth: int | None = None) -> None:
        """Check a sweep's `model.extra` as the network will read it (`depth` None: the depth it implies)."""
        self.options.read(extra, depth)

    def has_option(self, key: str) -> bool:
        return key in self.options.keys()

    def scheme_options(self, cfg: ModelConfig) -> dict[str, Any]:
        """`cfg.scheme_options` with the family's defaults for the options the scheme has."""
        allowed = get_scheme(cfg.scheme).defaults
        defaults = {k: v for k, v in self.scheme_defaults.items() if k in allowed}
        return {**defaults, **cfg.scheme_options}

    def network_class(self) -> type[StackedModel]:
        module, _, name = self.network.partition(":")
        cls: type[StackedModel] = getattr(importlib.import_module(module), name)
        return cls

    def build(self, cfg: ModelConfig, stack: int = 1) -> StackedModel:
        """K stacked networks of `cfg`, not yet initialised (`models.build.build_model` draws the weights)."""
        return self.network_class()(cfg, stack=stack)  # type: ignore[call-arg]


# ---- the registry ---------------------------------------------------------------------------------------

_FAMILIES: dict[str, FamilySpec] = {}
_discovered = False


def register_family(spec: FamilySpec) -> FamilySpec:
    """Make `spec` available under `spec.name` (a family module calls this once)."""
    known = _FAMILIES.get(spec.name)
    if known is not None and known.options.__module__ != spec.options.__module__:
        raise ValueError(f"model family '{spec.name}' is registered twice ({known.options.__module__} and "
                         f"{spec.options.__module__})")
    _FAMILIES[spec.name] = spec
    return spec


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import models.families as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    declared = set(get_args(Family))
    if set(_FAMILIES) != declared:
        raise RuntimeError(f"models.config.Family names {sorted(declared)} but models/families registers {sorted(_FAMILIES)}")
    _discovered = True


def family_names() -> tuple[str, ...]:
    """Every family name, in the order of `models.config.Family`."""
    _discover()
    return tuple(get_args(Family))


def families() -> tuple[FamilySpec, ...]:
    """Every entry, in the order of `family_names()`."""
    return tuple(_FAMILIES[name] for name in family_names())


def get_family(name: str) -> FamilySpec:
    """The entry of family `name`; ValueError naming the allowed names otherwise."""
    _discover()
    try:
        return _FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model family '{name}' (allowed: {', '.join(family_names())})") from None


def family_of(cfg: ModelConfig) -> FamilySpec:
    """The entry of `cfg.family`."""
    return get_family(cfg.family)
