"""Which tensors of a checkpoint are per-layer norm gains, and which site each one serves.

Pure naming rules (no numpy, no torch): given the tensor names of a checkpoint and its
`config.json`, find the layer stacks (`model.layers.N.…`, `encoder.layer.N.…`, …), and for
each stack the first `LayoutRule` whose norm names it carries. A rule maps the norm's name
inside a block (its *leaf*, e.g. `post_attention_layernorm`) to a site:

- `attn_in` / `mlp_in`: the norm whose output feeds the attention / MLP sublayer;
- `attn_out` / `mlp_out`: a norm applied after the sublayer (Post-LN's norm of the residual sum,
  or the output norm of Peri-LN/sandwich blocks such as Gemma 2/3 and OLMo-2).

The same leaf name means different things in different families (LLaMA's
`post_attention_layernorm` is the MLP's *input* norm; Gemma 2's and OLMo-2's normalises the
attention *output*), so a rule is chosen from the whole set of leaves a stack has, most specific
rule first.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SITES = ("attn_in", "mlp_in", "attn_out", "mlp_out")
SITE_GROUPS: dict[str, tuple[str, ...]] = {
    "mlp": ("mlp_in", "mlp_out"),
    "attn": ("attn_in", "attn_out"),
    "all": SITES,
}

# Families whose RMSNorm stores w and scales by (1 + w): the effective gain is 1 + w.
ZERO_CENTERED_MODEL_TYPES = frozenset(
    {"gemma", "gemma2", "gemma3", "gemma3_text", "recurrent_gemma", "qwen3_next"}
)

# `<stack>.<container>.<index>.<leaf>.<param>`; the stack is the shortest prefix before a
# layer container, so nested containers (MoE experts) stay inside the leaf.
_LAYER_NAME = re.compile(
    r"^(?P<stack>(?:[\w\-]+\.)*?)(?P<container>layers|layer|h|blocks|block)\.(?P<index>\d+)\."
    r"(?P<leaf>.+)\.(?P<param>weight|gamma|scale)$"
)


def _config_flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    return default if value is None else bool(value)


def _is_post_ln_seq(config: Mapping[str, Any]) -> bool:
    """OPT/BART naming is shared by pre-LN (OPT, mBART, Whisper) and post-LN (BART, Marian, OPT-350m) models."""
    if "do_layer_norm_before" in config:
        return not _config_flag(config, "do_layer_norm_before", True)
    if "normalize_before" in config:
        return not _config_flag(config, "normalize_before", True)
    return model_type(config) in {"bart", "marian", "fsmt"}


@dataclass(frozen=True)
class LayoutRule:
    """One naming convention: the leaves it requires/excludes, and the site(s) each leaf feeds."""

    name: str
    sites: Mapping[str, str]  # site -> leaf
    requires: frozenset[str]
    excludes: frozenset[str] = frozenset()
    when: Callable[[Mapping[str, Any]], bool] | None = None
    rmsnorm_names: bool = False  # decoder RMSNorm naming: (1 + w) applies for ZERO_CENTERED_MODEL_TYPES
    note: str = ""

    def matches(self, leaves: set[str], config: Mapping[str, Any]) -> bool:
        return (
            self.requires <= leaves
            and not (self.excludes & leaves)
            and (self.when is None or self.when(config))
        )


def _rule(name: str, sites: dict[str, str], *, excludes: Iterable[str] = (), **kw: Any) -> LayoutRule:
    return LayoutRule(
        name=name, sites=sites, requires=frozenset(sites.values()), excludes=frozenset(excludes), **kw
    )


# Most specific first: the first rule whose leaves a stack has wins.
RULES: tuple[LayoutRule, ...] = (
    _rule(
        "Gemma 2/3 sandwich (input_layernorm, post_attention_layernorm, pre_/post_feedforward_layernorm)",
        {"attn_in": "input_layernorm", "attn_out": "post_attention_layernorm",
         "mlp_in": "pre_feedforward_layernorm", "mlp_out": "post_feedforward_layernorm"},
        rmsnorm_names=True,
        note="post_attention_layernorm normalises the attention output here (not the MLP input)",
    ),
    _rule(
        "OLMo-2 post-norms (post_attention_layernorm, post_feedforward_layernorm)",
        {"attn_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm"},
        excludes=("input_layernorm",),
        rmsnorm_names=True,
        note="OLMo-2 normalises each sublayer's output before the residual add; no input norms",
    ),
    _rule(
        "Jamba (input_layernorm, pre_ff_layernorm)",
        {"attn_in": "input_layernorm", "mlp_in": "pre_ff_layernorm"},
        rmsnorm_names=True,
        note="attn_in is the token mixer's input norm (attention or Mamba layer)",
    ),
    _rule(
        "LLaMA-style pre-norm (input_layernorm, post_attention_layernorm): LLaMA, Mistral, Mixtral, Qwen, DeepSeek, GPT-NeoX, BLOOM, Gemma 1",
        {"attn_in": "input_layernorm", "mlp_in": "post_attention_layernorm"},
        rmsnorm_names=True,
    ),
    _rule(
        "parallel block, one input_layernorm: Phi-1/2, Falcon-7B, Cohere",
        {"attn_in": "input_layernorm", "mlp_in": "input_layernorm"},
        excludes=("post_attention_layernorm",),
        rmsnorm_names=True,
        note="parallel block: the single input_layernorm is reported as both attn_in and mlp_in",
    ),
    _rule("GPT-2 pre-LN (ln_1, ln_2)", {"attn_in": "ln_1", "mlp_in": "ln_2"}),
    _rule(
        "parallel block, one ln_1: GPT-J, CodeGen",
        {"attn_in": "ln_1", "mlp_in": "ln_1"},
        excludes=("ln_2",),
        note="parallel block: the single ln_1 is reported as both attn_in and mlp_in",
    ),
    _rule("Falcon parallel block (ln_attn, ln_mlp)", {"attn_in": "ln_attn", "mlp_in": "ln_mlp"}),
    _rule(
        "BERT post-LN (attention.output.LayerNorm, output.LayerNorm)",
        {"attn_out": "attention.output.LayerNorm", "mlp_out": "output.LayerNorm"},
        note="Post-LN: each norm normalises the residual sum after its sublayer (and feeds the next one)",
    ),
    _rule(
        "DistilBERT post-LN (sa_layer_norm, output_layer_norm)",
        {"attn_out": "sa_layer_norm", "mlp_out": "output_layer_norm"},
    ),
    _rule(
        "post-LN (BART/Marian naming)",
        {"attn_out": "self_attn_layer_norm", "mlp_out": "final_layer_norm"},
        when=_is_post_ln_seq,
    ),
    _rule(
        "pre-LN (OPT/mBART/Whisper naming)",
        {"attn_in": "self_attn_layer_norm", "mlp_in": "final_layer_norm"},
        note="final_layer_norm inside a block is the MLP's input norm in this naming",
    ),
    _rule("ViT pre-LN (layernorm_before, layernorm_after)", {"attn_in": "layernorm_before", "mlp_in": "layernorm_after"}),
    _rule("CLIP/SigLIP pre-LN (layer_norm1, layer_norm2)", {"attn_in": "layer_norm1", "mlp_in": "layer_norm2"}),
    _rule("timm ViT pre-LN (norm1, norm2)", {"attn_in": "norm1", "mlp_in": "norm2"}),
    _rule(
        "Meta consolidated LLaMA/Mistral (attention_norm, ffn_norm)",
        {"attn_in": "attention_norm", "mlp_in": "ffn_norm"},
    ),
    _rule(
        "RecurrentGemma (temporal_pre_norm, channel_pre_norm)",
        {"attn_in": "temporal_pre_norm", "mlp_in": "channel_pre_norm"},
        rmsnorm_names=True,
        note="attn_in is the temporal (recurrence or attention) block's input norm",
    ),
    _rule(
        "T5 decoder (layer.0/1/2.layer_norm)",
        {"attn_in": "layer.0.layer_norm", "mlp_in": "layer.2.layer_norm"},
        note="layer.1.layer_norm (cross-attention input) is not reported",
    ),
    _rule("T5 encoder (layer.0/1.layer_norm)", {"attn_in": "layer.0.layer_norm", "mlp_in": "layer.1.layer_norm"},
          excludes=("layer.2.layer_norm",)),
)

KNOWN_LEAVES = frozenset(leaf for rule in RULES for leaf in rule.sites.values())


@dataclass(frozen=True)
class StackLayout:
    """The norm gains of one layer stack: per site, the tensor name of each layer (0-based index)."""

    stack: str  # the prefix before the layer container, e.g. "model." ("" for a bare `layers.N`)
    rule: LayoutRule
    sites: dict[str, dict[int, str]]
    zero_centered: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def n_layers(self) -> int:
        return 1 + max(i for layers in self.sites.values() for i in layers)

    def shared_sites(self) -> dict[str, str]:
        """Sites that read the same tensor as an earlier site (parallel blocks): site -> the earlier site."""
        by_leaf: dict[str, str] = {}
        shared: dict[str, str] = {}
        for site, leaf in self.rule.sites.items():
            if leaf in by_leaf:
                shared[site] = by_leaf[leaf]
            else:
                by_leaf[leaf] = site
        return shared


class UnknownLayout(Exception):
    """No layer stack of the checkpoint matches a known naming convention."""

    def __init__(self, names: list[str]) -> None:
        super().__init__("no known norm-gain naming")
        self.names = names


def model_type(config: Mapping[str, Any]) -> str | None:
    """`model_type` of a Hugging Face config; for multimodal configs, that of the text model."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type"):
        return str(text["model_type"])
    value = config.get("model_type")
    return str(value) if value else None


def detect_layouts(names: Iterable[str], config: Mapping[str, Any] | None = None) -> list[StackLayout]:
    """Every layer stack whose norm names match a rule, in order of the stack prefix.

    Raises `UnknownLayout` (carrying the names) when no stack matches.
    """
    config = config or {}
    all_names = list(names)
    # stack -> leaf -> layer index -> full name
    stacks: dict[str, dict[str, dict[int, str]]] = defaultdict(lambda: defaultdict(dict))
    for name in all_names:
        match = _LAYER_NAME.match(name)
        if match is None:
            continue
        stack = match["stack"] + match["container"] + "."
        layer = int(match["index"])
        leaf = match["leaf"]
        # `weight` wins over TF-era `gamma`/`scale` if a checkpoint somehow has both
        if layer not in stacks[stack][leaf] or match["param"] == "weight":
            stacks[stack][leaf][layer] = name

    zero_centered_type = model_type(config) in ZERO_CENTERED_MODEL_TYPES
    found: list[StackLayout] = []
    for stack in sorted(stacks):
        leaves = stacks[stack]
        rule = next((r for r in RULES if r.matches(set(leaves), config)), None)
        if rule is None:
            continue
        sites = {site: dict(sorted(leaves[leaf].items())) for site, leaf in rule.sites.items()}
        zero_centered = zero_centered_type and rule.rmsnorm_names
        notes = [rule.note] if rule.note else []
        if zero_centered:
            notes.append(f"{model_type(config)} stores RMSNorm gains as w and scales by (1 + w): reported gains are 1 + w")
        if model_type(config) == "gpt_neox" and _config_flag(config, "use_parallel_residual", True):
            notes.append("GPT-NeoX parallel residual: attn_in and mlp_in both read the same residual stream")
        found.append(StackLayout(stack=stack.rstrip("."), rule=rule, sites=sites,
                                 zero_centered=zero_centered, notes=tuple(notes)))
    if not found:
        raise UnknownLayout(all_names)
    return found


def sample_names(names: list[str], limit: int = 12) -> list[str]:
    """A readable sample of tensor names: those that look like norms first, then the rest."""
    normish = [n for n in names if re.search(r"norm|ln_?\d|LayerNorm", n, re.IGNORECASE)]
    rest = [n for n in names if n not in set(normish)]
    return (normish + rest)[:limit]
