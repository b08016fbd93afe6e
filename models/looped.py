"""The looped latent language model (Parcae-style), stacked, for every normalization scheme.

The network is the LLaMA decoder's blocks in three sections (`depth` = P + C + Q distinct blocks):

    e   = prelude(embed(idx))                       blocks 1 .. P (then N(e), with `prelude_norm`)
    h_0 = 0, or drawn like a weight                 `state_init`
    u_t = exp(-dt * A) * h_t + dt * (e @ B)         re-injection of the prelude's output, every step
    h_{t+1} = core(u_t)                             blocks P+1 .. P+C, applied T times (t = 0 .. T-1)
    out = head(final_norm(coda(h_T)))               blocks P+C+1 .. P+C+Q, then as the decoder

`A` and `dt` are learnable per-channel vectors (d each), kept positive as `exp(inject_log_a)` and
`exp(inject_log_dt)`, so the state decay `exp(-dt*A)` lies in (0, 1) on every channel: the linear part
of the recurrence is always contracting (Parcae's stability condition, a diagonal negative generator
`-A` discretised with step `dt`). `B` is a learnable `d x d` matrix (the write of `e` into the state).
`e @ B` is computed once per forward pass and re-used by every iteration. Initialisation: `A` =
`inject_a` (1), `dt` = `inject_dt` (1), `B` like the blocks' input matrices (N(0, init_std), or scaled
orthogonal under `init: scaled_zero_orthogonal`).

The blocks are the decoder's `Block`s with its block options (`models.llama`), wired by the scheme
exactly as in the LLaMA decoder. A block's depth index is its **position in the network** (prelude
1..P, core P+1..P+C, coda P+C+1..P+C+Q), whatever the loop iteration: per-layer scheme constants (LNS's
1/sqrt(l), Mix-LN's Post-Norm share, DeepNet's alpha, CompleteP's L) see L = P + C + Q, LayerRoPE's gains
of the core rows are the same tensors at every iteration, and value embeddings sit at the alternating
positions counted back from the last one (a core block's table is looked up once per forward pass and
added at every iteration). LayerRoPE's magnitude slopes start at 0 here (scheme option
`mag_slope_init`, set by the family unless the method gives it). The prelude norm is an RMSNorm with its
own gain (`prelude_gain`, like the final norm; not a LayerRoPE site) for every scheme; after a Post-Norm
prelude, whose last step is already a norm, it only adds a second gain in series.

Loop count T: in training mode, drawn per step from a Poisson of mean `mean_loops` raised to 1 and
clipped to `max_loops`; in eval mode, the largest of `eval_loops`. Only the last `k = backprop_loops`
iterations carry gradients: the first T - k run under `torch.no_grad()` (no activations kept), so the
state entering iteration T - k is a constant for autograd. The prelude and `B` still learn, through the
injections of the last k iterations. Per-sequence loop counts (`loop_sampling: per_sequence`, a
LongTensor `[B]`) run as Parcae does: sequence i makes n_i = T_i - min(T_i, k) iterations without
gradients, then k_i = min(T_i, k) with them; the batch runs max(n_i) no-grad iterations (sequence i
active in the first n_i, its state kept, masked, afterwards) and then max(k_i) <= k iterations with
gradients (active in the first k_i). Every sequence thus sees exactly its T_i iterations and
back-propagates through exactly its last k_i, and the batch never keeps the activations of more than k
core iterations. `per_batch` (the default) draws one T per step for the whole batch: the same marginal
distribution of T, no waiting iterations. The trainer draws T from `training_loops(step, seed, batch)`,
a pure function of its arguments, so a resumed trial sees the same loop counts.

State init (`state_init`): `zeros`, or `like_weights`: every token's h_0 drawn i.i.d. from N(0, s)
truncated at +-3 s, s the token embedding's init std (`init_std`, or sqrt(2/(5d)) under
`scaled_zero_orthogonal`), the same for the K members, fresh for every forward pass (Parcae's
"like-init"). The draws come from seeded generators on the model's device: in training, each sequence's
seed comes with its loop count from `training_loops`, which then returns a LongTensor `[B, 2]` of
(count, seed) rows, a pure function of (seed, step) that a micro-batch slices with its sequences, so a
resumed trial and a micro-batched step see the same draws; without seeds (eval mode, explicit counts)
every sequence gets the same draw of the fixed seed `EVAL_STATE_SEED`, so evaluation is deterministic.

Evaluation at several loop counts: `eval_losses(idx, targets)` gives each member's loss at every count
of `eval_loops` (or those given) in one pass: the core runs up to the largest count and the coda, head
and loss run on the state after each requested count.

Parameter names are the decoder's plus `inject_b [d, d]`, `inject_log_dt [d]`, `inject_log_a [d]`
(kinds: hidden, scalar, scalar) and `prelude_gain [d]` (gain, with `prelude_norm`). The base weights of
the blocks, embeddings and head are drawn exactly as for a LLaMA decoder of depth P + C + Q with the
same seed and block options (the non-looped baseline of the same size starts from the same blocks); `B`
comes from a second generator seeded with `seed + INJECT_SEED_OFFSET`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from models import init_draws
from models.config import ModelConfig
from models.families.looped import LOOPED, LoopSettings, loop_settings
from models.family import family_of
from models.layers import Rotary, rms_norm, rotary_tables
from models.llama import LlamaLM, member_cross_entropy
from models.scheme import ParamKind

INJECT_SEED_OFFSET = 1_000_003
EVAL_STATE_SEED = 0x5EED  # the state draw of every sequence when no per-sequence seeds are given
_SEED_LIMIT = 2**62

#: one count for the batch, per-sequence counts `[B]`, or (count, state seed) rows `[B, 2]`
Loops = int | Tensor


class LoopPlan(NamedTuple):
    """A forward pass's loop counts (one int, or a LongTensor `[B]`) and per-sequence state seeds (or None)."""

    counts: int | Tensor
    seeds: Tensor | None


class CoreInputs(NamedTuple):
    """What every iteration of the core reads: the injection, the decay, and the core blocks' context."""

    inject: Tensor  # [K, B*T, d]: dt * (e @ B)
    decay: Tensor  # [K, 1, d]: exp(-dt * A)
    seq: int
    rope: Rotary
    gains: Sequence[Mapping[str, Tensor]]  # the core blocks' external gains
    values: Mapping[int, Tensor]  # value embeddings by block position


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
        self.prelude_gain = nn.Parameter(torch.ones(stack, d)) if self.loops.prelude_norm else None
        p, c = self.loops.prelude, self.loops.core
        self.prelude = self.blocks[:p]
        self.core = self.blocks[p : p + c]
        self.coda = self.blocks[p + c :]

    # ---- init -------------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        super().init_weights(seed)
        generator = torch.Generator().manual_seed(seed + INJECT_SEED_OFFSET)
        shape = tuple(self.inject_b.shape[1:])
        if self.loops.init == "normal":
            base = init_draws.normal(shape, self.cfg.init_std, generator)
        else:
            base = init_draws.scaled_orthogonal(shape, self.loops.embedding_std(self.cfg), generator)  # type: ignore[arg-type]
        self.inject_b.copy_(base)
        self.inject_log_dt.fill_(math.log(self.loops.inject_dt))
        self.inject_log_a.fill_(math.log(self.loops.inject_a))

    # ---- loop counts --------------------------------------------------------------------------------
    def training_loops(self, step: int, seed: int, batch_size: int) -> Loops:
        """The loop count(s) of training step `step` (with `like_weights`, the state seeds too: `[B, 2]`):
        a pure function of (seed, step), so resuming is exact."""
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step) & 0xFFFFFFFF, 0x100B])
        return self._draw(rng, batch_size)

    def sample_loops(self, batch_size: int, generator: torch.Generator | None = None) -> Loops:
        """A fresh draw from torch's RNG (used when training without explicit counts)."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())
        return self._draw(np.random.default_rng(seed), batch_size)

    def _draw(self, rng: np.random.Generator, batch_size: int) -> Loops:
        s = self.loops
        counts: int | Tensor
        if s.loop_sampling == "per_batch":
            counts = int(np.clip(rng.poisson(s.mean_loops), 1, s.max_loops))
        else:
            draws = np.clip(rng.poisson(s.mean_loops, size=batch_size), 1, s.max_loops)
            counts = torch.from_numpy(draws.astype(np.int64))
        if s.state_init == "zeros":
            return counts
        seeds = torch.from_numpy(rng.integers(0, _SEED_LIMIT, size=batch_size, dtype=np.int64))
        column = counts if isinstance(counts, Tensor) else torch.full((batch_size,), counts, dtype=torch.int64)
        return torch.stack((column, seeds), dim=1)

    def _resolve_loops(self, loops: Loops | None, batch_size: int) -> LoopPlan:
        if loops is None:
            if not self.training:
                return LoopPlan(self.loops.eval_count, None)
            loops = self.sample_loops(batch_size)
        if isinstance(loops, Tensor):
            shaped = loops.shape in ((batch_size,), (batch_size, 2))
            if not shaped or loops.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"loops: expected an integer tensor of shape [{batch_size}] (counts) or [{batch_size}, 2] "
                                 f"(counts, state seeds), got {loops.dtype} {tuple(loops.shape)}")
            counts, seeds = (loops[:, 0], loops[:, 1]) if loops.ndim == 2 else (loops, None)
            if int(counts.min()) < 1:
                raise ValueError("loops: every loop count must be >= 1")
            if seeds is not None and bool((counts == counts[0]).all()):  # one count for the batch: no masking
                return LoopPlan(int(counts[0]), seeds)
            return LoopPlan(counts, seeds)
        if int(loops) < 1:
            raise ValueError(f"loops must be >= 1, got {loops}")
        return LoopPlan(int(loops), None)

    # ---- forward ------------------------------------------------------------------------------------
    def forward(self, idx: Tensor, loops: Loops | None = None) -> Tensor:
        """Logits `[K, B, T, V]`; `loops`: a count, per-sequence counts `[B]`, (count, seed) rows `[B, 2]`,
        or None (sampled in training mode, the largest of `eval_loops` in eval mode)."""
        batch, seq = idx.shape
        logits = torch.bmm(self.final_hidden(idx, loops), self.head)
        return logits.view(self.stack, batch, seq, self.cfg.vocab)

    def member_losses(self, idx: Tensor, targets: Tensor, ignore_index: int = -100, *, loops: Loops | None = None) -> Tensor:
        """Mean next-token cross-entropy per member `[K]` at the given loop count(s) (see `forward`)."""
        return member_cross_entropy(self(idx, loops), targets, ignore_index)

    def final_hidden(self, idx: Tensor, loops: Loops | None = None) -> Tensor:
        """The head's input `[K, B*T, d]` after T iterations of the core."""
        batch, seq = idx.shape
        plan = self._resolve_loops(loops, batch)
        gains = self._external_gains_by_layer_list()
        core = self._core_inputs(idx, gains)
        state = self.initial_state(core.inject, batch, seq, plan.seeds)
        if isinstance(plan.counts, int):
            state = self._run_core_uniform(state, core, plan.counts)
        else:
            state = self._run_core_per_sequence(state, core, plan.counts)
        return self._coda_hidden(state, core, gains)

    @torch.no_grad()
    def eval_losses(self, idx: Tensor, targets: Tensor, loops: Sequence[int] | None = None, *,
                    ignore_index: int = -100, reduction: str = "mean") -> dict[int, Tensor]:
        """{loop count: per-member loss `[K]`} at every count of `loops` (default `eval_loops`), in one pass
        without gradients: the core runs up to the largest count, the coda, head and loss after each.
        `reduction`: "mean" over the counted positions (fp32, as `member_losses`) or "sum" (fp64), so that
        an evaluation split into micro-batches adds up exactly."""
        counts = sorted(set(self.loops.eval_loops if loops is None else loops))
        if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
            raise ValueError(f"eval_losses: loop counts must be integers >= 1, got {loops!r}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"eval_losses: reduction must be 'mean' or 'sum', got {reduction!r}")
        batch, seq = idx.shape
        gains = self._external_gains_by_layer_list()
        core = self._core_inputs(idx, gains)
        state = self.initial_state(core.inject, batch, seq, None)
        counted = int((targets != ignore_index).sum())
        out: dict[int, Tensor] = {}
        done = 0
        for count in counts:
            for _ in range(count - done):
                state = self._core_step(state, core)
            done = count
            logits = torch.bmm(self._coda_hidden(state, core, gains), self.head).view(self.stack, batch, seq, self.cfg.vocab)
            loss = member_cross_entropy(logits, targets, ignore_index)
            out[count] = loss if reduction == "mean" else loss.double() * counted
        return out

    def initial_state(self, inject: Tensor, batch: int, seq: int, seeds: Tensor | None) -> Tensor:
        """h_0 `[K, B*T, d]` (see the module docstring): zeros, or truncated-normal draws from the
        sequences' `seeds` (`[B]`), or from `EVAL_STATE_SEED` for every sequence when None."""
        if self.loops.state_init == "zeros":
            return torch.zeros_like(inject)
        std, d = self.loops.embedding_std(self.cfg), self.cfg.width
        dtype = torch.float64 if inject.dtype == torch.float64 else torch.float32
        generator = torch.Generator(device=inject.device)
        if seeds is None:
            generator.manual_seed(EVAL_STATE_SEED)
            noise = init_draws.truncated_normal((1, seq, d), std, generator, dtype).expand(batch, seq, d)
        else:
            rows = []
            for value in seeds.tolist():
                generator.manual_seed(int(value))
                rows.append(init_draws.truncated_normal((seq, d), std, generator, dtype))
            noise = torch.stack(rows)
        return noise.reshape(1, batch * seq, d).to(inject.dtype).expand_as(inject)

    def _core_inputs(self, idx: Tensor, gains: Sequence[Mapping[str, Tensor]]) -> CoreInputs:
        """Embed, run the prelude (and its norm), and prepare what every core iteration reads."""
        seq = idx.shape[1]
        h = self.embed(idx)
        if self.embed_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.embed_gain.unsqueeze(1)
        table_dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        rope = rotary_tables(seq, self.cfg.head_dim, self.cfg.rope_base, h.device, table_dtype)
        values = self.value_lookups(idx)
        p, c = self.loops.prelude, self.loops.core
        for block, external in zip(self.prelude, gains[:p]):
            h = block(h, seq, rope, external, values.get(block.layer))
        if self.prelude_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.prelude_gain.unsqueeze(1)
        dt = self.inject_log_dt.exp()
        decay = torch.exp(-dt * self.inject_log_a.exp()).unsqueeze(1)  # [K, 1, d], in (0, 1)
        inject = dt.unsqueeze(1) * torch.bmm(h, self.inject_b)  # [K, B*T, d]: dt * (e @ B), once per forward
        return CoreInputs(inject, decay, seq, rope, gains[p : p + c], values)

    def _coda_hidden(self, state: Tensor, core: CoreInputs, gains: Sequence[Mapping[str, Tensor]]) -> Tensor:
        h = state
        for block, external in zip(self.coda, gains[self.loops.prelude + self.loops.core :]):
            h = block(h, core.seq, core.rope, external, core.values.get(block.layer))
        if self.final_gain is not None:
            h = rms_norm(h, self.cfg.norm_eps) * self.final_gain.unsqueeze(1)
        return h

    def _core_step(self, state: Tensor, core: CoreInputs) -> Tensor:
        h = torch.addcmul(core.inject, core.decay, state)  # u_t = exp(-dt A) * h_t + dt * (e @ B)
        for block, external in zip(self.core, core.gains):
            h = block(h, core.seq, core.rope, external, core.values.get(block.layer))
        return h

    def _run_core_uniform(self, state: Tensor, core: CoreInputs, count: int) -> Tensor:
        with_grad = min(count, self.loops.backprop_loops)
        with torch.no_grad():
            for _ in range(count - with_grad):
                state = self._core_step(state, core)
        for _ in range(with_grad):
            state = self._core_step(state, core)
        return state

    def _run_core_per_sequence(self, state: Tensor, core: CoreInputs, counts: Tensor) -> Tensor:
        with_grad = counts.clamp(max=self.loops.backprop_loops)  # k_i
        without = counts - with_grad  # n_i

        def per_token(c: Tensor) -> Tensor:  # [1, B*T, 1]: each token's sequence value
            return c.to(state.device).repeat_interleave(core.seq).view(1, -1, 1)

        active = per_token(without)
        with torch.no_grad():
            for t in range(int(without.max())):
                state = torch.where(active > t, self._core_step(state, core), state)
        active = per_token(with_grad)
        for t in range(int(with_grad.max())):
            state = torch.where(active > t, self._core_step(state, core), state)
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
