"""LLaMA-style decoder (RMSNorm, SwiGLU or ReLU^2, RoPE causal attention), stacked, with the block options
of `models.families.llama.DecoderOptions` (QK-norm, value embeddings, tied embeddings, init rules).

Read top to bottom: `Block` (two residual steps whose wiring the scheme decides), `LlamaLM` (embed,
blocks, optional final norm, head). Shapes: the input `idx` `[B, T]` feeds every member; the residual
stream is `[K, B*T, d]`; logits are `[K, B, T, V]`. Parameter names (per member, K removed):

    tok_emb [V, d]              token embedding (also the head with `tie_embeddings`)
    embed_gain [d]              only when the scheme normalises the embeddings (Peri-LN)
    blocks.{i}.attn.qkv [d, 3d] blocks.{i}.attn.o [d, d]
    blocks.{i}.mlp.gate_up [d, 2h]  blocks.{i}.mlp.down [h, d]     SwiGLU (`mlp: swiglu`)
    blocks.{i}.mlp.up [d, h]        blocks.{i}.mlp.down [h, d]     ReLU^2 (`mlp: relu2`)
    blocks.{i}.gains.{site} [d] the block's norm gains (sites chosen by the scheme)
    site_gains.sites.{site}.{gamma,a_mag,b_mag,a_rot,b_rot}  LayerRoPE only
    final_gain [d]              when the scheme has a final norm
    head [d, V]                 LM head (untied; with `tie_embeddings`, `model.head` is tok_emb transposed)
    value_embeds.{l} [V, d]     `value_embeddings`: the table of the block at 1-based position l

Every scheme wires the blocks as without the options: QK-norm and value embeddings act inside attention
(on q, k before RoPE; on v), the ReLU^2 MLP replaces SwiGLU as the branch, so they compose with every
wiring. A scheme's init multiplier of `gate` does not apply to ReLU^2 (it has none).

Initialisation (`init_weights(seed)`): one member is drawn from `torch.Generator().manual_seed(seed)`
in a fixed order that does not depend on the scheme, and copied into all K members; then the scheme's
init multipliers are applied. Gains start at one. So a seed gives the same base weights for every scheme
and every K. The rules (`init`):

- `normal` (default): tok_emb, then per block qkv, o, the MLP (gate_up or up), down, then the head
  (untied only), then the value tables by position; every draw N(0, init_std) in fp32 on the CPU.
- `scaled_zero_orthogonal` (Parcae's "scaled-zero" with orthogonal matrices), with s = sqrt(2 / (5 d))
  (the "small init" std, Parcae's initializer range; `init_std` is not used): tok_emb N(0, s) truncated
  at +-3 s; per block q, k, v each a scaled orthogonal d x d matrix, o = 0, the MLP's input matrices
  (gate then up for SwiGLU, up for ReLU^2) scaled semi-orthogonal d x h, down = 0; then the untied head
  and the value tables N(0, s) truncated at +-3 s. Scaled orthogonal: entries of RMS s, every singular
  value s sqrt(max(in, out)) (`models.init_draws`). The zero output projections make every block the
  identity at step 0; they get gradients at once (their inputs are not zero), the other weights from
  the second step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import init_draws
from models.config import ModelConfig
from models.families.llama import DecoderOptions, decoder_options
from models.layers import Attention, ReLU2MLP, ResidualStep, SwiGLU, rms_norm, rotary_tables
from models.registry import make_scheme
from models.scheme import BLOCK_WEIGHTS, ParamKind, Scheme
from models.stacked import StackedModel

GAIN_SITES = ("attn_in", "attn_out", "mlp_in", "mlp_out")
HIDDEN_SUFFIXES = ("attn.qkv", "attn.o", "mlp.gate_up", "mlp.up", "mlp.down")


class Block(nn.Module):
    """Block `layer` (1-based): an attention step then an MLP step, each wired by the scheme."""

    def __init__(self, cfg: ModelConfig, scheme: Scheme, layer: int, stack: int, options: DecoderOptions) -> None:
        super().__init__()
        self.layer = layer
        self.eps = cfg.norm_eps
        qk_norm_eps = cfg.norm_eps if options.qk_norm else None
        self.attn = Attention(cfg.width, cfg.n_heads, stack=stack, qk_norm_eps=qk_norm_eps)
        mlp = SwiGLU if options.mlp == "swiglu" else ReLU2MLP
        self.mlp = mlp(cfg.width, options.hidden(cfg), stack=stack)
        self.gains = nn.ParameterDict({site: nn.Parameter(torch.ones(stack, cfg.width)) for site in scheme.block_sites(layer)})
        for name, value in scheme.constants(layer).items():
            # A 0-dim tensor, not a Python float, so that one compiled block serves every layer;
            # fp64 so that it is exact in an fp64 model (a 0-dim tensor does not promote x's dtype).
            self.register_buffer("c_" + name, torch.tensor(float(value), dtype=torch.float64), persistent=False)
        self.step = scheme.step_for(layer)

    def forward(self, h: Tensor, seq_len: int, rope, external: Mapping[str, Tensor], ve: Tensor | None = None) -> Tensor:
        """`ve`: this block's value embedding of the input tokens `[K, B*T, d]`, or None."""
        attn = ResidualStep(lambda x, **kw: self.attn(x, seq_len, rope, ve=ve, **kw), "attn_", self.gains, external, self,
                            self.eps)
        h = self.step(h, attn)
        mlp = ResidualStep(self.mlp, "mlp_", self.gains, external, self, self.eps)
        return self.step(h, mlp)

    def weight_view(self, name: str) -> Tensor | None:
        """The slice of a fused weight holding `name` (one of BLOCK_WEIGHTS), all members; None for a
        weight this block does not have (ReLU^2 has no gate)."""
        d = self.attn.width
        if name in ("q", "k", "v"):
            i = ("q", "k", "v").index(name)
            return self.attn.qkv[..., i * d : (i + 1) * d]
        if name == "o":
            return self.attn.o
        if name == "down":
            return self.mlp.down
        if isinstance(self.mlp, SwiGLU):
            h = self.mlp.hidden
            return self.mlp.gate_up[..., 0:h] if name == "gate" else self.mlp.gate_up[..., h : 2 * h]
        return self.mlp.up if name == "up" else None

    def mlp_inputs(self) -> tuple[str, ...]:
        """The MLP's input matrices, in draw order."""
        return ("gate", "up") if isinstance(self.mlp, SwiGLU) else ("up",)


class LlamaLM(StackedModel):
    """K stacked LLaMA-style decoders of one configuration and scheme."""

    def __init__(self, cfg: ModelConfig, *, stack: int = 1) -> None:
        super().__init__()
        validate_llama_config(cfg)
        if stack < 1:
            raise ValueError(f"stack must be >= 1, got {stack}")
        self.cfg, self.stack = cfg, stack
        self.options: DecoderOptions = decoder_options(cfg)
        self.scheme = scheme = make_scheme(cfg.scheme, cfg.depth, cfg.scheme_options)
        self.options.check_scheme(scheme)
        d = cfg.width
        self.tok_emb = nn.Parameter(torch.empty(stack, cfg.vocab, d))
        self.embed_gain = nn.Parameter(torch.ones(stack, d)) if scheme.embed_norm else None
        self.blocks = nn.ModuleList(Block(cfg, scheme, layer, stack, self.options) for layer in range(1, cfg.depth + 1))
        self.site_gains = scheme.make_site_gains(cfg, stack)
        self.final_gain = nn.Parameter(torch.ones(stack, d)) if scheme.final_norm else None
        self.tied_head = self.options.tie_embeddings
        if not self.tied_head:
            self.head = nn.Parameter(torch.empty(stack, d, cfg.vocab))
        layers = self.options.value_layers(cfg.depth)
        self.value_embeds = nn.ParameterDict(
            {str(layer): nn.Parameter(torch.empty(stack, cfg.vocab, d)) for layer in layers}
        ) if layers else None
        self.register_buffer("vocab_offsets", torch.arange(stack)[:, None] * cfg.vocab, persistent=False)

    def __getattr__(self, name: str) -> Any:
        # `head` [K, d, V] with tied embeddings: the token embedding, transposed (a view: its gradient reaches tok_emb)
        if name == "head" and self.__dict__.get("tied_head", False):
            return self.tok_emb.transpose(1, 2)
        return super().__getattr__(name)

    # ---- init -------------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        if self.options.init == "normal":
            self._init_normal(generator)
        else:
            self._init_scaled_zero_orthogonal(generator)
        for block in self.blocks:
            for name in BLOCK_WEIGHTS:
                factor = self.scheme.init_scale(name, block.layer)
                view = block.weight_view(name)
                if factor != 1.0 and view is not None:
                    view.mul_(factor)

    def _init_normal(self, generator: torch.Generator) -> None:
        std = self.cfg.init_std

        def draw(param: Tensor) -> None:
            param.copy_(init_draws.normal(param.shape[1:], std, generator))  # broadcasts the one member over K

        draw(self.tok_emb)
        for block in self.blocks:
            mlp_in = block.mlp.gate_up if isinstance(block.mlp, SwiGLU) else block.mlp.up
            for param in (block.attn.qkv, block.attn.o, mlp_in, block.mlp.down):
                draw(param)
        if not self.tied_head:
            draw(self.head)
        for table in (self.value_embeds or {}).values():
            draw(table)

    def _init_scaled_zero_orthogonal(self, generator: torch.Generator) -> None:
        std = self.options.embedding_std(self.cfg)

        def truncated(param: Tensor) -> None:
            param.copy_(init_draws.truncated_normal(param.shape[1:], std, generator))

        truncated(self.tok_emb)
        for block in self.blocks:
            for name in ("q", "k", "v", *block.mlp_inputs()):
                view = block.weight_view(name)
                assert view is not None
                view.copy_(init_draws.scaled_orthogonal(tuple(view.shape[1:]), std, generator))  # type: ignore[arg-type]
            block.attn.o.zero_()
            block.mlp.down.zero_()
        if not self.tied_head:
            truncated(self.head)
        for table in (self.value_embeds or {}).values():
            truncated(table)

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, idx: Tensor) -> Tensor:
        """Logits `[K, B, T, V]` for tokens `idx` `[B, T]` (the same batch for every member)."""
        batch, seq = idx.shape
        logits = torch.bmm(self.final_hidden(idx), self.head)
        return logits.view(self.stack, batch, seq, self.cfg.vocab)

    def final_hidden(self, idx: Tensor) -> Tensor:
        """The head's input `[K, B*T, d]`."""
        _, seq = idx.shape
        h = self.embed(idx)
        if self.embed_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.embed_gain.unsqueeze(1)
        table_dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        rope = rotary_tables(seq, self.cfg.head_dim, self.cfg.rope_base, h.device, table_dtype)
        values = self.value_lookups(idx)
        for block, external in zip(self.blocks, self._external_gains_by_layer()):
            h = block(h, seq, rope, external, values.get(block.layer))
        if self.final_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.final_gain.unsqueeze(1)
        return h

    def _flat_ids(self, idx: Tensor) -> Tensor:
        """`[1 or K, B*T]` row indices into a `[K*V, d]` view of a stacked table (member k's rows offset by k*V)."""
        flat = idx.reshape(1, -1)
        return flat + self.vocab_offsets if self.stack > 1 else flat

    def embed(self, idx: Tensor) -> Tensor:
        """`[K, B*T, d]`: member k looks its tokens up in its own table (rows offset by k*V)."""
        return F.embedding(self._flat_ids(idx), self.tok_emb.view(-1, self.cfg.width))

    def value_lookups(self, idx: Tensor) -> dict[int, Tensor]:
        """{block position: its value embedding of `idx`, `[K, B*T, d]`}; {} without value embeddings."""
        if self.value_embeds is None:
            return {}
        flat = self._flat_ids(idx)
        return {int(layer): F.embedding(flat, table.view(-1, self.cfg.width)) for layer, table in self.value_embeds.items()}

    def member_losses(self, idx: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
        """Mean next-token cross-entropy per member, `[K]` (fp32). Train on `.sum()`, not the mean,
        so that each member's gradient equals that of a model trained alone."""
        return member_cross_entropy(self(idx), targets, ignore_index)

    def _external_gains_by_layer(self) -> Iterable[Mapping[str, Tensor]]:
        if self.site_gains is None:
            return itertools.repeat({})
        gains = self.site_gains()  # computed once per forward for all layers: {site: [K, L, d]}
        names = list(gains)
        rows = zip(*(g.unbind(1) for g in gains.values()))
        return [dict(zip(names, row)) for row in rows]

    # ---- introspection -------------------------------------------------------------------------------
    def param_kind(self, name: str) -> ParamKind:
        if name == "tok_emb" or name.startswith("value_embeds."):
            return "embedding"
        if name == "head":
            return "head"
        if name.endswith(HIDDEN_SUFFIXES):
            return "hidden"
        if name.startswith("site_gains.") and not name.endswith(".gamma"):
            return "scalar"
        return "gain"

    @torch.no_grad()
    def layer_gains(self) -> dict[str, Tensor]:
        """Effective per-layer norm gains `[K, L, d]` by site (detached, fp32).

        Block gains times any fixed scheme factor (LNS: 1/sqrt(l) at the input norms); LayerRoPE:
        its sites' outputs. A site that exists only in some layers (Mix-LN) is NaN in the others;
        sites absent from every layer are omitted.
        """
        external = self.site_gains() if self.site_gains is not None else {}
        result: dict[str, Tensor] = {}
        for site in GAIN_SITES:
            rows: list[Tensor | None] = []
            for block in self.blocks:
                if site in block.gains:
                    rows.append(self.scheme.effective_gain(site, block.layer, block.gains[site]))
                elif site in external:
                    rows.append(external[site][:, block.layer - 1])
                else:
                    rows.append(None)
            if all(row is None for row in rows):
                continue
            nan = torch.full((self.stack, self.cfg.width), math.nan, device=self.head.device)
            result[site] = torch.stack([nan if row is None else row.float() for row in rows], dim=1)
        return result


def member_cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Mean cross-entropy per member `[K]` (fp32) of logits `[K, B, T, V]` against targets `[B, T]`
    shared by the members; positions equal to `ignore_index` are not counted."""
    stack, vocab = logits.shape[0], logits.shape[-1]
    flat_targets = targets.reshape(1, -1).expand(stack, -1).reshape(-1)
    losses = F.cross_entropy(
        logits.reshape(-1, vocab).float(), flat_targets, reduction="none", ignore_index=ignore_index
    ).view(stack, -1)
    counted = (targets != ignore_index).sum().clamp_min(1)
    return losses.sum(dim=1) / counted


def validate_llama_config(cfg: ModelConfig) -> None:
    """ValueError with a one-line message for a configuration the decoder cannot build."""
    problems = []
    if cfg.width < 2 or cfg.n_heads < 1 or cfg.width % cfg.n_heads:
        problems.append(f"width ({cfg.width}) must be a multiple of n_heads ({cfg.n_heads})")
    elif cfg.head_dim % 2:
        problems.append(f"head dimension width/n_heads = {cfg.head_dim} must be even (RoPE rotates pairs)")
    if cfg.depth < 1:
        problems.append(f"depth must be >= 1, got {cfg.depth}")
    if cfg.vocab < 2:
        problems.append(f"vocab must be >= 2, got {cfg.vocab}")
    if cfg.mlp_hidden is not None and cfg.mlp_hidden < 1:
        problems.append(f"mlp_hidden must be >= 1, got {cfg.mlp_hidden}")
    if not cfg.init_std > 0 or not cfg.norm_eps > 0 or not cfg.rope_base > 0:
        problems.append("init_std, norm_eps and rope_base must be > 0")
    if problems:
        raise ValueError("model config: " + "; ".join(problems))
