"""The looped latent language model (Parcae-style), stacked, for every normalization scheme.

The network is the LLaMA decoder's blocks in three sections (`depth` = P + C + Q distinct blocks):

    e   = prelude(embed(idx))                       blocks 1 .. P
    h_0 = 0
    u_t = exp(-dt * A) * h_t + dt * (e @ B)         re-injection of the prelude's output, every step
    h_{t+1} = core(u_t)                             blocks P+1 .. P+C, applied T times (t = 0 .. T-1)
    out = head(final_norm(coda(h_T)))               blocks P+C+1 .. P+C+Q, then as the decoder

`A` and `dt` are learnable per-channel vectors (d each), kept positive as `exp(inject_log_a)` and
`exp(inject_log_dt)`, so the state decay `exp(-dt*A)` lies in (0, 1) on every channel: the linear part
of the recurrence is always contracting (Parcae's stability condition, a diagonal negative generator
`-A` discretised with step `dt`). `B` is a learnable `d x d` matrix (the write of `e` into the state).
`e @ B` is computed once per forward pass and re-used by every iteration. Initialisation: `A` =
`inject_a` (1), `dt` = `inject_dt` (1), `B` ~ N(0, init_std) like every other matrix.

The blocks are the decoder's `Block`s, wired by the scheme exactly as in the LLaMA decoder. A block's
depth index is its **position in the network** (prelude 1..P, core P+1..P+C, coda P+C+1..P+C+Q),
whatever the loop iteration: per-layer scheme constants (LNS's 1/sqrt(l), Mix-LN's Post-Norm share,
DeepNet's alpha, CompleteP's L) see L = P + C + Q, and LayerRoPE's gains of the core rows are the
same tensors at every iteration. LayerRoPE's magnitude slopes start at 0 here (scheme option
`mag_slope_init`, set by the family unless the method gives it).

Loop count T: in training mode, drawn from a Poisson of mean `mean_loops` clipped to
[1, max_loops]; in eval mode, `eval_loops` (8). Only the last `k = backprop_loops` iterations carry
gradients: the first T - k run under `torch.no_grad()` (no activations kept), so the state entering
iteration T - k is a constant for autograd. The prelude and `B` still learn, through the injections of
the last k iterations. Per-sequence loop counts (`loop_sampling: per_sequence`, a LongTensor `[B]`)
run the batch for max(T) iterations; a sequence whose count is reached keeps its state (masked
update), and its state is detached at its own iteration T_i - k, so every sequence back-propagates
through exactly its own last k iterations. `per_batch` (the default) draws one T per step for the
whole batch: the same marginal distribution of T, no wasted iterations, and the usual choice of
recurrent-depth training (it keeps a step's compute identical across data-parallel ranks).
The trainer draws T from `training_loops(step, seed, batch)`, a pure function of its arguments, so a
resumed trial sees the same loop counts.

Parameter names are the decoder's plus `inject_b [d, d]`, `inject_log_dt [d]`, `inject_log_a [d]`
(kinds: hidden, scalar, scalar). The base weights of the blocks, embeddings and head are drawn
exactly as for a LLaMA decoder of depth P + C + Q with the same seed (the non-looped baseline of the
same size starts from the same blocks); `B` comes from a second generator seeded with
`seed + INJECT_SEED_OFFSET`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor, nn

from models.config import ModelConfig
from models.families.looped import LOOPED, LoopSettings, loop_settings
from models.family import family_of
from models.layers import Rotary, rms_norm, rotary_tables
from models.llama import LlamaLM, member_cross_entropy
from models.scheme import ParamKind

INJECT_SEED_OFFSET = 1_000_003

Loops = int | Tensor  # one count for the batch, or a LongTensor [B] of per-sequence counts


class LoopedLM(LlamaLM):
    """K stacked looped LMs of one configuration and scheme (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, *, stack: int = 1) -> None:
        if family_of(cfg) is not LOOPED:
            raise ValueError(f"LoopedLM needs model.family 'looped', got {cfg.family!r}")
        self.loops: LoopSettings = loop_settings(cfg)
        super().__init__(replace(cfg, scheme_options=LOOPED.scheme_options(cfg)), stack=stack)
        d = cfg.width
        self.inject_b = nn.Parameter(torch.empty(stack, d, d))
        self.inject_log_dt = nn.Parameter(torch.zeros(stack, d))
        self.inject_log_a = nn.Parameter(torch.zeros(stack, d))
        p, c = self.loops.prelude, self.loops.core
        self.prelude = self.blocks[:p]
        self.core = self.blocks[p : p + c]
        self.coda = self.blocks[p + c :]

    # ---- init -------------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        super().init_weights(seed)
        generator = torch.Generator().manual_seed(seed + INJECT_SEED_OFFSET)
        base = torch.empty(self.inject_b.shape[1:], dtype=torch.float32).normal_(0.0, self.cfg.init_std, generator=generator)
        self.inject_b.copy_(base)
        self.inject_log_dt.fill_(math.log(self.loops.inject_dt))
        self.inject_log_a.fill_(math.log(self.loops.inject_a))

    # ---- loop counts --------------------------------------------------------------------------------
    def training_loops(self, step: int, seed: int, batch_size: int) -> Loops:
        """The loop count(s) of training step `step`: a pure function of (seed, step), so resuming is exact."""
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step) & 0xFFFFFFFF, 0x100B])
        return self._draw(rng, batch_size)

    def sample_loops(self, batch_size: int, generator: torch.Generator | None = None) -> Loops:
        """A fresh draw from torch's RNG (used when training without explicit counts)."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())
        return self._draw(np.random.default_rng(seed), batch_size)

    def _draw(self, rng: np.random.Generator, batch_size: int) -> Loops:
        s = self.loops
        if s.loop_sampling == "per_batch":
            return int(np.clip(rng.poisson(s.mean_loops), 1, s.max_loops))
        counts = np.clip(rng.poisson(s.mean_loops, size=batch_size), 1, s.max_loops)
        return torch.from_numpy(counts.astype(np.int64))

    def _resolve_loops(self, loops: Loops | None, batch_size: int) -> Loops:
        if loops is None:
            return self.sample_loops(batch_size) if self.training else self.loops.eval_loops
        if isinstance(loops, Tensor):
            if loops.shape != (batch_size,) or loops.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"loops: expected an integer tensor of shape [{batch_size}], got {loops.dtype} {tuple(loops.shape)}")
            if int(loops.min()) < 1:
                raise ValueError("loops: every loop count must be >= 1")
            return loops
        if int(loops) < 1:
            raise ValueError(f"loops must be >= 1, got {loops}")
        return int(loops)

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, idx: Tensor, loops: Loops | None = None) -> Tensor:
        """Logits `[K, B, T, V]`; `loops`: a count, per-sequence counts `[B]`, or None (sampled / eval_loops)."""
        batch, seq = idx.shape
        logits = torch.bmm(self.final_hidden(idx, loops), self.head)
        return logits.view(self.stack, batch, seq, self.cfg.vocab)

    def member_losses(self, idx: Tensor, targets: Tensor, ignore_index: int = -100, *, loops: Loops | None = None) -> Tensor:
        """Mean next-token cross-entropy per member `[K]` at the given loop count(s) (see `forward`)."""
        return member_cross_entropy(self(idx, loops), targets, ignore_index)

    def final_hidden(self, idx: Tensor, loops: Loops | None = None) -> Tensor:
        """The head's input `[K, B*T, d]` after T iterations of the core."""
        batch, seq = idx.shape
        count = self._resolve_loops(loops, batch)
        h = self.embed(idx)
        if self.embed_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.embed_gain.unsqueeze(1)
        table_dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        rope = rotary_tables(seq, self.cfg.head_dim, self.cfg.rope_base, h.device, table_dtype)
        gains = list(self._external_gains_by_layer_list())
        p, c = self.loops.prelude, self.loops.core
        for block, external in zip(self.prelude, gains[:p]):
            h = block(h, seq, rope, external)
        core_gains = gains[p : p + c]
        dt = self.inject_log_dt.exp()
        decay = torch.exp(-dt * self.inject_log_a.exp()).unsqueeze(1)  # [K, 1, d], in (0, 1)
        inject = dt.unsqueeze(1) * torch.bmm(h, self.inject_b)  # [K, B*T, d]: dt * (e @ B), once per forward
        state = torch.zeros_like(inject)
        if isinstance(count, int):
            state = self._run_core_uniform(state, inject, decay, count, seq, rope, core_gains)
        else:
            state = self._run_core_per_sequence(state, inject, decay, count.to(h.device), seq, rope, core_gains)
        h = state
        for block, external in zip(self.coda, gains[p + c :]):
            h = block(h, seq, rope, external)
        if self.final_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.final_gain.unsqueeze(1)
        return h

    def _core_step(self, state: Tensor, inject: Tensor, decay: Tensor, seq: int, rope: Rotary,
                   gains: Sequence[Mapping[str, Tensor]]) -> Tensor:
        h = torch.addcmul(inject, decay, state)  # u_t = exp(-dt A) * h_t + dt * (e @ B)
        for block, external in zip(self.core, gains):
            h = block(h, seq, rope, external)
        return h

    def _run_core_uniform(self, state: Tensor, inject: Tensor, decay: Tensor, count: int, seq: int, rope: Rotary,
                          gains: Sequence[Mapping[str, Tensor]]) -> Tensor:
        with_grad = min(count, self.loops.backprop_loops)
        with torch.no_grad():
            for _ in range(count - with_grad):
                state = self._core_step(state, inject, decay, seq, rope, gains)
        for _ in range(with_grad):
            state = self._core_step(state, inject, decay, seq, rope, gains)
        return state

    def _run_core_per_sequence(self, state: Tensor, inject: Tensor, decay: Tensor, counts: Tensor, seq: int,
                               rope: Rotary, gains: Sequence[Mapping[str, Tensor]]) -> Tensor:
        k = self.loops.backprop_loops
        per_token = counts.repeat_interleave(seq).view(1, -1, 1)  # [1, B*T, 1]: each token's sequence count
        cut = (per_token - k).clamp_min(0)  # the iteration at which a sequence's gradient window opens
        first_grad = int(cut.min())
        for t in range(int(counts.max())):
            if t < first_grad:
                with torch.no_grad():
                    new = self._core_step(state, inject, decay, seq, rope, gains)
            else:
                state = torch.where(cut == t, state.detach(), state)
                new = self._core_step(state, inject, decay, seq, rope, gains)
            state = torch.where(per_token > t, new, state)
        return state

    def _external_gains_by_layer_list(self) -> list[Mapping[str, Tensor]]:
        return list(self._external_gains_by_layer()) if self.site_gains is not None else [{}] * len(self.blocks)

    # ---- introspection ---------------------------------------------------------------------------
    def param_kind(self, name: str) -> ParamKind:
        if name == "inject_b":
            return "hidden"
        if name in ("inject_log_dt", "inject_log_a"):
            return "scalar"
        return super().param_kind(name)

    @torch.no_grad()
    def injection(self) -> dict[str, Tensor]:
        """The re-injection's current `dt`, `A` and state decay `exp(-dt*A)`, each `[K, d]`."""
        dt, a = self.inject_log_dt.exp(), self.inject_log_a.exp()
        return {"dt": dt.clone(), "A": a.clone(), "decay": torch.exp(-dt * a)}
