"""`train.compile: true` (regional compilation + compiled optimizer step) against the eager path, on the
CPU with inductor. Compilation costs tens of seconds on two cores, so everything compiled is in this
one module, at the smallest sizes, and each compiled configuration is built once.

CUDA-only checks (bf16 autocast, deferred reads without a host sync, the CUDA-graph step) are at the
end; they skip without a GPU."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from models import ModelConfig
from trials.config import DataConfig, DivergenceConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from trials.spec import TrialSpec
from trials.train import Trial

pytestmark = pytest.mark.slow  # inductor compiles: tens of seconds on two cores

SYNTH = DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192)
CUDA = torch.cuda.is_available()

# A few steps learn little beyond frequencies: the stall rule (tests/trials/test_stall_and_noise.py) is off here.
NO_STALL = DivergenceConfig(stall_margin=None)


def spec(depth: int = 2, lrs: tuple[float, ...] = (2e-3, 2e-2), **train: object) -> TrialSpec:
    recipe = {"steps": 10, "batch_size": 4, "eval_every": 10, "eval_batches": 2, "report_every": 1,
                  "schedule": ScheduleConfig(warmup=3), "optimizer": OptimizerConfig(grad_clip=1.0)}
    recipe.update(train)
    model = ModelConfig(scheme="layerrope", width=32, depth=depth, n_heads=2, vocab=48, seq_len=16)
    return TrialSpec(model=model, train=TrainConfig(**recipe), data=SYNTH, lrs=list(lrs), seed=3,  # type: ignore[arg-type]
                     divergence=NO_STALL)


def train_losses(trial: Trial, graphs_seen: list[int] | None = None) -> list[list[float | None]]:
    """Every step's training loss per member (report_every=1), then the final evaluation losses. `graphs_seen`:
    the number of graphs Dynamo has compiled, read at each training step's report (steps 1 to steps-1; the last
    report comes after the final evaluation)."""
    reports = []

    def report(r) -> None:
        reports.append(r)
        if graphs_seen is not None and not r.done:
            graphs_seen.append(graphs())

    results = trial.run(report=report)
    return [[m.train_loss for m in r.members] for r in reports] + [[r.loss for r in results]]


def graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


def test_compiled_trial_matches_eager_one_graph_per_block_kind_and_no_recompiles() -> None:
    """One compiled run of a depth-6 model against the eager one, step by step, counting Dynamo's graphs at every
    step: one graph for the 6 blocks (regional compilation: compile work does not grow with depth) and one for the
    optimizer update, from the first step on; the LR changes at every step (warmup, then cosine) and nothing
    recompiles, since LRs and bias corrections are tensors."""
    eager = train_losses(Trial(spec(depth=6)))
    torch._dynamo.reset()
    counters.clear()
    seen: list[int] = []
    fast = train_losses(Trial(spec(depth=6, compile=True)), seen)
    assert len(seen) == 9 and seen == [2] * 9, seen
    assert counters["stats"]["calls_captured"] > 0
    assert len(eager) == len(fast) == 11
    for step, (a, b) in enumerate(zip(eager, fast)):
        assert b == pytest.approx(a, abs=2e-5, rel=1e-5), step
    torch._dynamo.reset()


def test_compiled_deferred_divergence_and_drop() -> None:
    """Compiled, reading losses every 4 steps, with a member that diverges and is dropped (the stack
    shrinks and the compiled block serves the smaller stack): same verdicts, losses within rounding."""
    lrs = (2e-3, 60.0, 2e-2)
    eager = Trial(spec(lrs=lrs))
    eager_results = eager.run()
    fast = Trial(spec(lrs=lrs, compile=True, sync_every=4))
    fast_results = fast.run()
    assert [r.outcome for r in fast_results] == [r.outcome for r in eager_results] == ["ok", "diverged", "ok"]
    assert fast_results[1].diverged_step == eager_results[1].diverged_step
    assert fast_results[1].reason == eager_results[1].reason
    assert len(fast.slots) == 2  # dropped from the stack
    for a, b in zip(eager_results, fast_results):
        if a.loss is not None:
            assert b.loss == pytest.approx(a.loss, abs=2e-5)
    torch._dynamo.reset()


MUON = OptimizerConfig(kind="muon", betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0, grad_clip=1.0)
WSD = ScheduleConfig(warmup=0, decay="linear", cooldown=0.5, final_fraction=0.0)


@pytest.mark.slow  # two compilations of the Muon step: ~35 CPU-s
def test_compiled_muon_matches_eager_and_never_recompiles() -> None:
    """Muon + AdamW compiled (FlatStackedMuon's update, batched Newton-Schulz included, as one graph): the LR
    schedule and the weight decay's schedule move at every step of the cooldown without recompiling, and the
    run matches the eager one to rounding that bfloat16 Newton-Schulz amplifies (losses: measured 2.1e-4)."""
    eager = train_losses(Trial(spec(optimizer=MUON, schedule=WSD)))
    torch._dynamo.reset()
    counters.clear()
    seen: list[int] = []
    fast = train_losses(Trial(spec(compile=True, optimizer=MUON, schedule=WSD)), seen)
    assert len(seen) == 9 and seen == [2] * 9, seen  # the blocks' graph and the optimizer's, from the first step
    for step, (a, b) in enumerate(zip(eager, fast)):
        assert b == pytest.approx(a, abs=2e-3), step
    torch._dynamo.reset()


# ---- CUDA (skipped without a GPU) -------------------------------------------------------------------


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_deferred_step_never_synchronizes() -> None:
    trial = Trial(spec(device="cuda", dtype="bf16", sync_every=8))
    batch = torch.from_numpy(trial.stream.next_batch()).to("cuda")
    inputs, targets = batch[:, :-1], batch[:, 1:]
    assert trial.device_step is not None
    trial.device_step.run(inputs, targets, {}, 1.0)  # first call: allocations, cuBLAS set-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            trial.device_step.run(inputs, targets, {}, 0.5)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("options", [{}, {"compile": True}, {"cuda_graphs": True}, {"compile": True, "cuda_graphs": True}],
                         ids=["deferred", "compiled", "graph", "compiled-graph"])
def test_cuda_bf16_paths_match_eager(options: dict) -> None:
    """bf16 autocast on CUDA: every fast path against the eager per-step path (bf16 rounding tolerance),
    including a member that diverges, so that the graph is re-captured for the smaller stack."""
    lrs = (2e-3, 60.0, 2e-2)
    eager = Trial(spec(lrs=lrs, device="cuda", dtype="bf16", sync_every=1)).run()
    fast = Trial(spec(lrs=lrs, device="cuda", dtype="bf16", **options)).run()
    assert [r.outcome for r in fast] == [r.outcome for r in eager] == ["ok", "diverged", "ok"]
    assert fast[1].diverged_step == eager[1].diverged_step
    for a, b in zip(eager, fast):
        if a.loss is not None:
            assert b.loss == pytest.approx(a.loss, abs=2e-2)
    torch._dynamo.reset()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_graph_replays_equal_eager_deferred_steps() -> None:
    """In fp32 the captured graph computes what the same steps compute without it (up to cuBLAS choosing
    other kernels under capture)."""
    plain = Trial(spec(device="cuda", dtype="fp32", sync_every=5))
    graphed = Trial(spec(device="cuda", dtype="fp32", sync_every=5, cuda_graphs=True))
    a, b = train_losses(plain), train_losses(graphed)
    assert graphed.device_step is not None and graphed.device_step._graph is not None
    for x, y in zip(a, b):
        assert y == pytest.approx(x, abs=1e-4)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("options", [{}, {"compile": True}, {"cuda_graphs": True}, {"compile": True, "cuda_graphs": True}],
                         ids=["deferred", "compiled", "graph", "compiled-graph"])
def test_cuda_muon_paths_match_eager(options: dict) -> None:
    """Muon + AdamW with a WSD schedule on CUDA (bf16 autocast): every fast path against the eager per-step path,
    with a member that diverges (the flat Muon buffers and the graph are rebuilt for the smaller stack)."""
    lrs = (2e-3, 80.0, 2e-2)
    recipe = {"optimizer": MUON, "schedule": WSD, "device": "cuda", "dtype": "bf16"}
    eager = Trial(spec(lrs=lrs, sync_every=1, **recipe)).run()
    fast = Trial(spec(lrs=lrs, **recipe, **options)).run()
    assert [r.outcome for r in fast] == [r.outcome for r in eager] == ["ok", "diverged", "ok"]
    assert fast[1].diverged_step == eager[1].diverged_step
    for a, b in zip(eager, fast):
        if a.loss is not None:
            assert b.loss == pytest.approx(a.loss, abs=2e-2)
    torch._dynamo.reset()
