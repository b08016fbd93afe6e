"""Compile caches that cannot fail a trial (`trials.compiled`): one process trains 6 configurations in a
row with `compile: true`, as a reused Ray actor does: a stack shrinking from 8 members to 1 by drops, then
another scheme at another depth, shrinking too. Dynamo is never reset between them (nor before: whatever
earlier tests compiled in this process stays). With one shared cache per code object the optimizer's
`fullgraph` update raised `FailOnRecompileLimitHit` at the 9th layout (Dynamo's default limit, 8) and the
blocks ran eagerly past theirs.

Six are enough to catch that bug: each optimizer layout is one cache entry under a limit of
`OPTIMIZER_RECOMPILE_LIMIT` (4), so with the private copies removed (`private_copy` returning its
argument) this test fails at the 5th configuration (measured: `FailOnRecompileLimitHit` on the first
step of layerrope/L2/K2). Each configuration compiles new graphs (~15 s of two cores with a cold
inductor cache), so the test trains no more of them than that needs, plus one.

The counter: the profiler's "Torch-Compiled Region" events of one training step, which only compiled code
records. A step of a depth-L model must show L compiled block calls and one compiled optimizer update; an
evaluation, L compiled block calls."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from torch.profiler import ProfilerActivity, profile

from models import ModelConfig
from trials.config import DataConfig, TrainConfig
from trials.spec import TrialSpec
from trials.train import Trial

pytestmark = pytest.mark.slow  # six configurations compiled: about a minute and a half on two cores

SYNTH = DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096)

# (scheme, depth, stack sizes the trial goes through: the first at build, the others by drops)
TRIALS = [
    ("pre", 1, [8, 4, 2, 1]),
    ("layerrope", 2, [2, 1]),
]


def compiled_regions(fn: Callable[[], None]) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("Torch-Compiled Region"))


def make_trial(scheme: str, depth: int, stack: int) -> Trial:
    model = ModelConfig(scheme=scheme, width=16, depth=depth, n_heads=2, vocab=32, seq_len=8)
    train = TrainConfig(steps=100, batch_size=2, eval_every=100, eval_batches=1, compile=True)
    lrs = [1e-3 * (1 + i) for i in range(stack)]
    return Trial(TrialSpec(model=model, train=train, data=SYNTH, lrs=lrs, seed=0))


def drop_to(trial: Trial, stack: int) -> None:
    """Mark members diverged until `stack` remain, then let the trial drop them (the real rebuild)."""
    for m in trial.slots[stack:]:
        trial.monitor.force(m, trial.step, "dropped by the test")
    trial.drop_diverged()
    assert len(trial.slots) == stack


def test_six_configurations_in_one_process_all_run_compiled() -> None:
    seen = []
    started = time.perf_counter()
    for scheme, depth, stacks in TRIALS:
        trial = make_trial(scheme, depth, stacks[0])
        for stack in stacks:
            if stack != len(trial.slots):
                drop_to(trial, stack)
            trial.train_step()  # compiles this configuration's graphs
            trial.step += 1
            regions = compiled_regions(lambda: trial.train_step())
            trial.step += 1
            seen.append((scheme, depth, stack, regions))
            assert regions == depth + 1, seen  # every block and the optimizer update ran compiled
    assert len(seen) == 6
    assert compiled_regions(trial.evaluate) == 2  # the last trial's depth-2 blocks, no gradients
    print(f"6 configurations in {time.perf_counter() - started:.1f} s")
