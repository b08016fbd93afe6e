"""Compile caches that cannot fail a trial (`trials.compiled`): one process trains 5 configurations in a
row with `compile: true`, as a reused Ray actor does: a stack shrinking from 8 members to 1 by drops, then
another scheme at another depth. Dynamo is never reset between them (nor before: whatever
earlier tests compiled in this process stays). With one shared cache per code object the optimizer's
`fullgraph` update raised `FailOnRecompileLimitHit` at the 9th layout (Dynamo's default limit, 8) and the
blocks ran eagerly past theirs.

Five are enough to catch that bug: each optimizer layout is one cache entry under a limit of
`OPTIMIZER_RECOMPILE_LIMIT` (4), so with the private copies removed (`private_copy` returning its
argument) this test fails at the 5th configuration (measured: `FailOnRecompileLimitHit` on the first
step of layerrope/L2/K2). Each configuration compiles new graphs (~15 s of two cores with a cold
inductor cache), so the test trains no more of them than that needs: the 5th is the one that fails.

The counter: the profiler's "Torch-Compiled Region" events of one training step, which only compiled code
records. A step of a depth-L model must show L compiled block calls and one compiled optimizer update; an
evaluation, L compiled block calls."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torch.profiler import ProfilerActivity, profile

from models import ModelConfig
from trials.compiled import BLOCK_ENTRIES_BOUND, BLOCK_RECOMPILE_LIMIT
from trials.config import DataConfig, EvalConfig, LambadaConfig, OptimizerConfig, TrainConfig
from trials.spec import TrialSpec
from trials.train import Trial

pytestmark = pytest.mark.slow  # five configurations compiled: over a minute on two cores

SYNTH = DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096)

# (scheme, depth, stack sizes the trial goes through: the first at build, the others by drops)
TRIALS = [
    ("pre", 1, [8, 4, 2, 1]),
    ("layerrope", 2, [2]),
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


def test_five_configurations_in_one_process_all_run_compiled() -> None:
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
    assert len(seen) == 5
    assert compiled_regions(trial.evaluate) == 2  # the last trial's depth-2 blocks, no gradients
    print(f"5 configurations in {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_a_parcae_trial_stays_within_the_block_entries_bound(tmp_path: Path) -> None:
    """Every case the bound of `trials.compiled` counts, in one compiled trial of a looped model with Parcae's
    blocks: blocks with and without a value table, Mix-LN's two wirings, a micro-batch with a smaller last chunk
    (batch 4 in micro-batches of 3), training with and without gradients (the no-grad loops), the evaluation at
    four loop counts and LAMBADA's padded chunk. The block's cache stays within the bound (and far under the
    limit), and LAMBADA's forward passes run compiled."""
    path = tmp_path / "lambada.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in (
        "the cat sat on the mat and looked at the dog", "she opened the door and saw her old friend john",
        "in the morning the sun rose over the quiet hills")))
    model = ModelConfig(family="looped", scheme="mixln", width=32, depth=4, n_heads=2, vocab=256, seq_len=32,
                        mlp_hidden=128, norm_eps=1e-5,
                        extra={"prelude": 1, "core": 2, "coda": 1, "eval_loops": [1, 2, 4, 8], "mean_loops": 3,
                               "max_loops": 8, "backprop_loops": 2, "value_embeddings": True, "qk_norm": True,
                               "mlp": "relu2", "tie_embeddings": True, "init": "scaled_zero_orthogonal",
                               "prelude_norm": True, "state_init": "like_weights", "loop_sampling": "per_sequence"})
    train = TrainConfig(steps=4, batch_size=4, micro_batch=3, eval_every=2, eval_batches=2, compile=True,
                        optimizer=OptimizerConfig(kind="muon"))
    spec = TrialSpec(model=model, train=train, data=DataConfig(source="builtin"), lrs=[1e-3, 3e-3], seed=0,
                     eval=EvalConfig(tasks=("lambada",), lambada=LambadaConfig(source="jsonl", path=str(path))))
    trial = Trial(spec)
    results = trial.run()
    assert all(r.lambada_ppl is not None and r.loop_losses for r in results)
    code = trial.model.blocks[0].forward.__func__._torchdynamo_orig_callable.__code__
    entries = len(_debug_get_cache_entry_list(code))
    assert 8 <= entries <= BLOCK_ENTRIES_BOUND < BLOCK_RECOMPILE_LIMIT, entries
    trial.model.eval()
    calls = 1 + 2 * 8 + 1  # prelude, the core at the largest eval count, coda: one padded chunk of 3 passages
    assert compiled_regions(lambda: trial.tasks.lambada_perplexity(trial.model, trial._autocast)) == calls
