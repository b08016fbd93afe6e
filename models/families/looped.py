"""The looped latent LM family (`family: looped`, Parcae-style; the network is `models.looped`): its
settings, exact parameter counts and training FLOPs per token (no torch), and its entry.

Settings (`model.extra` keys and defaults, `LoopSettings`; the decoder's block options of
`models.families.llama` too: mlp, qk_norm, value_embeddings, tie_embeddings, init):

    prelude: 2, core: 2, coda: 2   distinct blocks (their sum must equal `depth`)
    mean_loops: 8                  rate of the Poisson that draws the training loop count T
    max_loops: 32                  T = min(max(Poisson(mean_loops), 1), max_loops)
    backprop_loops: 4              k: gradients flow through the last min(T, k) iterations only (1..4)
    eval_loops: 8                  T at evaluation: a count, or a list of counts (e.g. [1, 2, 4, 8]) at which
                                   `LoopedLM.eval_losses` evaluates; eval mode runs the largest
    loop_sampling: per_batch       per_batch: one T for the whole batch; per_sequence: one T per sequence
    inject_dt: 1.0, inject_a: 1.0  initial step size dt and decay rate A of the re-injection
    prelude_norm: false            an RMSNorm (with its own gain) on the prelude's output, before the injection
    state_init: zeros              zeros: h_0 = 0; like_weights: h_0 drawn like a weight (`models.looped`)

The loop count is Parcae's "truncated Poisson" (its `poisson-truncated-full`): T ~ Poisson(mean_loops)
raised to 1 when it is 0, and the last min(T, k) iterations carry gradients. Its mean is
mean_loops + P(T=0) (8.000335 at 8); the upper clip at `max_loops` only bounds a step's compute (at rate 8
and 32 it moves a mass of 3e-11).

Counting (P prelude, C core, Q coda blocks, width d, vocabulary V, sequence T), with the decoder's
conventions (`models.families.llama`: multiply-add = 2 FLOPs, backward = 2 x forward, attention over the
full T x T matrix):

- parameters: the decoder's with depth P + C + Q (its block options included), plus the re-injection `B`
  (d^2), `dt` and `A` (d each) and the prelude norm's gain (d, with `prelude_norm`); `nonembed` includes
  them. A looped model and its non-looped baseline of depth P + C + Q with the same block options differ by
  exactly d^2 + 2d (+ d with the prelude norm).
- training FLOPs per token, with n = 4 d^2 + m one block's matrices (m = 3 d h SwiGLU, 2 d h ReLU^2), E[T]
  the mean training loop count and E[min(T, k)] the mean number of iterations that carry gradients
  (k = backprop_loops; both expectations over the clipped Poisson of `LoopSettings.loop_pmf`):

      6 [(P + Q) n + d V + d^2] + 2 C n (E[T] + 2 E[min(T, k)])
      + 12 (P + Q) T d + 4 C T d (E[T] + 2 E[min(T, k)])

  (the first T - k iterations run forward only: 2 FLOPs per parameter; the last k forward and
  backward: 6). These are the model's FLOPs: with `per_sequence` a batch runs as many iterations as its
  longest sequence (the others wait, masked), so the executed compute is higher. Evaluation cost (at
  `eval_loops`) is not training compute and is not counted.

The size axis of a loop-count sweep (`model.loops`) is the mean training loop count: each cell keeps the
blocks of `extra` and trains and evaluates at its own count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from models.config import ModelConfig
from models.families.llama import DecoderOptions, count_decoder
from models.family import FamilySpec, check_keys, read_bool, read_choice, read_float, read_int, register_family

LoopSampling = Literal["per_batch", "per_sequence"]
StateInit = Literal["zeros", "like_weights"]
SAMPLINGS = ("per_batch", "per_sequence")
STATE_INITS = ("zeros", "like_weights")
MAX_BACKPROP_LOOPS = 4


@dataclass(frozen=True)
class LoopSettings(DecoderOptions):
    family: ClassVar[str] = "looped"

    prelude: int = 2
    core: int = 2
    coda: int = 2
    mean_loops: float = 8.0
    max_loops: int = 32
    backprop_loops: int = 4
    eval_loops: tuple[int, ...] = (8,)
    loop_sampling: LoopSampling = "per_batch"
    inject_dt: float = 1.0
    inject_a: float = 1.0
    prelude_norm: bool = False
    state_init: StateInit = "zeros"

    @property
    def blocks(self) -> int:
        return self.prelude + self.core + self.coda

    @property
    def eval_count(self) -> int:
        """The loop count of eval mode (and of a sweep's validation loss): the largest of `eval_loops`."""
        return max(self.eval_loops)

    def section(self, layer: int) -> str:
        """'prelude', 'core' or 'coda' for block `layer` (1-based position in the network)."""
        if layer <= self.prelude:
            return "prelude"
        return "core" if layer <= self.prelude + self.core else "coda"

    def loop_pmf(self) -> list[float]:
        """P(T = t) for t = 0..max_loops of the clipped Poisson (index 0 is always 0)."""
        lam = self.mean_loops
        pmf = [math.exp(-lam + t * math.log(lam) - math.lgamma(t + 1)) for t in range(self.max_loops + 1)]
        below = pmf[0]  # T = 0 is clipped up to 1
        above = max(0.0, 1.0 - sum(pmf))  # the tail beyond max_loops is clipped down to it
        pmf[0] = 0.0
        pmf[1] += below
        pmf[self.max_loops] += above
        return pmf

    def expected_loops(self) -> tuple[float, float]:
        """(E[T], E[min(T, k)]) of the training loop count: forward and backward core passes per step."""
        pmf = self.loop_pmf()
        mean = sum(t * p for t, p in enumerate(pmf))
        with_grad = sum(min(t, self.backprop_loops) * p for t, p in enumerate(pmf))
        return mean, with_grad

    @classmethod
    def read(cls, extra: Mapping[str, Any], depth: int | None = None) -> LoopSettings:
        """The settings in `extra`, their blocks checked against `depth` (None: the blocks they give)."""
        family = cls.family
        if depth is None:
            depth = looped_depth(extra)
        check_keys(family, extra, cls.keys())
        d = cls()
        prelude = read_int(family, extra, "prelude", d.prelude, 0)
        core = read_int(family, extra, "core", d.core, 1)
        coda = read_int(family, extra, "coda", d.coda, 0)
        if prelude + core + coda != depth:
            raise ValueError(
                f"model.extra: prelude + core + coda = {prelude}+{core}+{coda} = {prelude + core + coda} blocks, "
                f"but depth is {depth} (depth counts the distinct blocks of the looped model)"
            )
        max_loops = read_int(family, extra, "max_loops", d.max_loops, 1)
        settings = cls(
            prelude=prelude, core=core, coda=coda,
            mean_loops=read_float(family, extra, "mean_loops", d.mean_loops, hi=float(max_loops)),
            max_loops=max_loops,
            backprop_loops=read_int(family, extra, "backprop_loops", d.backprop_loops, 1),
            eval_loops=read_loop_counts(family, extra, "eval_loops", d.eval_loops),
            loop_sampling=read_choice(family, extra, "loop_sampling", d.loop_sampling, SAMPLINGS),  # type: ignore[arg-type]
            inject_dt=read_float(family, extra, "inject_dt", d.inject_dt),
            inject_a=read_float(family, extra, "inject_a", d.inject_a),
            prelude_norm=read_bool(family, extra, "prelude_norm", d.prelude_norm),
            state_init=read_choice(family, extra, "state_init", d.state_init, STATE_INITS),  # type: ignore[arg-type]
            **cls.read_blocks(extra),
        )
        if settings.backprop_loops > MAX_BACKPROP_LOOPS:
            raise ValueError(
                f"model.extra.backprop_loops must be between 1 and {MAX_BACKPROP_LOOPS}, got {settings.backprop_loops}")
        return settings


def read_loop_counts(family: str, extra: Mapping[str, Any], key: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """A loop count >= 1 or a non-empty list of them, as a sorted tuple without repeats."""
    value = extra.get(key, default)
    values = [value] if isinstance(value, int) else value
    ok = isinstance(values, (list, tuple)) and len(values) > 0
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
    if not ok:
        raise ValueError(
            f"model.extra.{key} for the {family} family must be a loop count >= 1 or a list of them, got {value!r}")
    return tuple(sorted(set(values)))


def looped_depth(extra: Mapping[str, Any]) -> int:
    """prelude + core + coda of a looped model's `extra` (the number of distinct blocks)."""
    d, family = LoopSettings(), LoopSettings.family
    return (read_int(family, extra, "prelude", d.prelude, 0) + read_int(family, extra, "core", d.core, 1)
            + read_int(family, extra, "coda", d.coda, 0))


def loop_settings(cfg: ModelConfig) -> LoopSettings:
    """The looped family's settings from `cfg.extra` (ValueError naming the key when one is wrong)."""
    return LoopSettings.read(cfg.extra, cfg.depth)


def loop_count_shape(extra: Mapping[str, Any], loops: int) -> tuple[int, dict[str, Any]]:
    """(blocks, extra) of a loop-count sweep's cell at mean loop count `loops`: trained and evaluated at it."""
    return looped_depth(extra), {"max_loops": max(32, loops), **extra, "mean_loops": loops, "eval_loops": loops}


def count_looped(cfg: ModelConfig) -> dict[str, int]:
    loops = loop_settings(cfg)  # validates the split against depth
    base = count_decoder(cfg)
    d = cfg.width
    own = d * d + 2 * d + d * int(loops.prelude_norm)  # B, dt, A and the prelude norm's gain
    return {
        "total": base["total"] + own,
        "nonembed": base["nonembed"] + own,
        "embedding": base["embedding"],
        "head": base["head"],
        "matmul": base["matmul"] + d * d,
        "hidden": base["hidden"] + d * d,  # the re-injection B is a hidden matrix (Muon's)
    }


def flops_looped(cfg: ModelConfig, seq_len: int | None = None) -> float:
    s = loop_settings(cfg)
    d, seq = cfg.width, cfg.seq_len if seq_len is None else seq_len
    block = 4 * d * d + s.mlp_matrices(cfg)
    mean_loops, grad_loops = s.expected_loops()
    core_passes = mean_loops + 2.0 * grad_loops  # forward passes + backward passes (2x each)
    outer = s.prelude + s.coda
    matmul = 6.0 * (outer * block + d * cfg.vocab + d * d) + 2.0 * s.core * block * core_passes
    attention = 12.0 * outer * seq * d + 4.0 * s.core * seq * d * core_passes
    return float(matmul + attention)


def activation_layers(cfg: ModelConfig) -> int:
    """The prelude and coda once, the core once per iteration that gradients flow through (at most
    `backprop_loops`: earlier iterations run without gradients and keep nothing; with per-sequence counts
    the batch's gradient iterations are aligned, so there are never more)."""
    loop = loop_settings(cfg)
    return loop.prelude + loop.coda + loop.core * min(loop.backprop_loops, loop.max_loops)


def loop_hidden(cfg: ModelConfig) -> int:
    return loop_settings(cfg).hidden(cfg)


def eval_loop_counts(cfg: ModelConfig) -> tuple[int, ...]:
    """The loop counts of `eval_loops`, sorted: a trial's evaluation reports a loss at each (`LoopedLM.eval_losses`)."""
    return loop_settings(cfg).eval_loops


def blocks_label(cfg: ModelConfig) -> str:
    """P/C/Q: the prelude, core and coda blocks."""
    extra, d = cfg.extra, LoopSettings()
    return f"{extra.get('prelude', d.prelude)}/{extra.get('core', d.core)}/{extra.get('coda', d.coda)}"


LOOPED = register_family(FamilySpec(
    name="looped",
    summary="looped latent LM (Parcae): prelude, a core applied T times with re-injection, coda",
    network="models.looped:LoopedLM",
    options=LoopSettings,
    count_params=count_looped,
    flops_per_token=flops_looped,
    size_axis="loops",
    axis_shape=loop_count_shape,
    # LayerRoPE's magnitude slopes start at 0 (schemes.md)
    scheme_defaults={"mag_slope_init": 0.0},
    activation_layers=activation_layers,
    mlp_hidden=loop_hidden,
    blocks_label=blocks_label,
    eval_loop_counts=eval_loop_counts,
    samples_loops=True,
))
