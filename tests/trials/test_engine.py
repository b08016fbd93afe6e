"""The fast execution paths agree with the reference ones (no compilation here; see test_compile.py):
the flat AdamW against StackedAdamW, the fused head + loss against the model's own, and deferred
loss reads against reading every step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models import ModelConfig, build_model
from trials.config import DataConfig, DivergenceConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from trials.flat_optim import FlatStackedAdamW
from trials.fused_loss import LinearCrossEntropy, member_losses
from trials.optim import StackedAdamW
from trials.run import run_trial
from trials.spec import TrialSpec
from trials.train import Trial

SYNTH = DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192)


def tiny(scheme: str = "layerrope", **kw: object) -> ModelConfig:
    base = {"scheme": scheme, "width": 32, "depth": 2, "n_heads": 2, "vocab": 48, "seq_len": 16}
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["layerrope", "completep"])
def test_flat_adamw_matches_stacked_adamw(scheme: str) -> None:
    options = {"alpha": 0.5, "base_depth": 8} if scheme == "completep" else {}
    cfg = tiny(scheme, depth=3, scheme_options=options)
    lrs = [1e-3, 5e-3, 2e-2]
    ref, fast = build_model(cfg, stack=3, seed=1), build_model(cfg, stack=3, seed=1)
    kw = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 0.5}
    ref_opt = StackedAdamW(ref.param_specs(), lrs, **kw)
    fast_opt = FlatStackedAdamW(fast.param_specs(), lrs, **kw)
    assert len(fast_opt.groups) < len(list(fast.parameters()))  # grouped, whatever the depth
    masked_before = None
    gen = torch.Generator().manual_seed(0)
    for step, factor in enumerate([0.25, 0.5, 1.0, 0.7, 0.3]):
        x = torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1), generator=gen)
        active = torch.tensor([True, step != 2, True])  # member 1 masked at step 2
        if step == 2:
            masked_before = fast.member_state_dict(1), {k: v[1].clone() for k, v in fast_opt.state_tensors().items()}
        for model, opt in ((ref, ref_opt), (fast, fast_opt)):
            losses = model.member_losses(x[:, :-1], x[:, 1:])
            losses.sum().backward()
            opt.step(factor, active=active)
            opt.zero_grad()
        if step == 2:  # a masked member keeps parameters and moments exactly
            weights, moments = masked_before
            assert all(torch.equal(v, fast.member_state_dict(1)[k]) for k, v in weights.items())
            assert all(torch.equal(v, fast_opt.state_tensors()[k][1]) for k, v in moments.items())
    for (name, p), q in zip(ref.named_parameters(), fast.parameters()):
        torch.testing.assert_close(q, p, atol=2e-6, rtol=1e-5, msg=name)
    ref_state, fast_state = ref_opt.state_tensors(), fast_opt.state_tensors()
    assert ref_state.keys() == fast_state.keys()  # checkpoints interchangeable
    for key, value in ref_state.items():
        torch.testing.assert_close(fast_state[key], value, atol=1e-7, rtol=1e-5, msg=key)


def test_flat_adamw_parameters_are_views_and_survive_compaction() -> None:
    cfg = tiny("pre")
    model = build_model(cfg, stack=3, seed=2)
    opt = FlatStackedAdamW(model.param_specs(), [1e-3, 2e-3, 3e-3], weight_decay=0.1)
    qkv = model.blocks[0].attn.qkv
    group = next(g for g in opt.groups if "blocks.0.attn.qkv" in g.names)
    assert qkv.untyped_storage().data_ptr() == group.params.untyped_storage().data_ptr()
    assert qkv.grad is not None and qkv.grad.untyped_storage().data_ptr() == group.grads.untyped_storage().data_ptr()
    x = torch.randint(0, cfg.vocab, (2, cfg.seq_len + 1))
    model.member_losses(x[:, :-1], x[:, 1:]).sum().backward()  # accumulates into the group buffer
    assert group.grads.abs().sum() > 0
    opt.step(1.0)
    moments = {k: v[2].clone() for k, v in opt.state_tensors().items() if k != "lrs"}
    small = build_model(cfg, stack=1, seed=2)
    small.load_member_state_dict(0, model.member_state_dict(2))
    opt.compact([2], small.param_specs())
    assert opt.lrs.tolist() == pytest.approx([3e-3])
    assert all(torch.equal(opt.state_tensors()[k][0], v) for k, v in moments.items())


@pytest.mark.parametrize("k", [1, 3])
def test_fused_loss_matches_the_models_loss_and_gradients(k: int) -> None:
    cfg = tiny("pre", vocab=300)
    ref, fused = build_model(cfg, stack=k, seed=1), build_model(cfg, stack=k, seed=1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1), generator=gen)
    targets = x[:, 1:].clone()
    targets[0, :5] = -100  # ignored positions
    weights = torch.linspace(0.5, 2.0, k)
    want = ref.member_losses(x[:, :-1], targets)
    (want * weights).sum().backward()
    got = member_losses(fused, x[:, :-1], targets)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-7, rtol=1e-5, msg=name)
    with torch.no_grad():  # evaluation: no gradients computed or kept
        torch.testing.assert_close(member_losses(fused, x[:, :-1], targets), want.detach(), atol=1e-6, rtol=1e-6)


def test_fused_loss_does_not_depend_on_the_chunking() -> None:
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(2, 50, 8, generator=gen, requires_grad=True)
    head = torch.randn(2, 8, 30, generator=gen, requires_grad=True)
    targets = torch.randint(0, 30, (50,), generator=gen)
    one = LinearCrossEntropy.apply(h, head, targets, -100, 1000)
    grads_one = torch.autograd.grad(one.sum(), (h, head))
    many = LinearCrossEntropy.apply(h, head, targets, -100, 7)  # 8 chunks, the last one short
    grads_many = torch.autograd.grad(many.sum(), (h, head))
    torch.testing.assert_close(many, one)
    for a, b in zip(grads_many, grads_one):
        torch.testing.assert_close(a, b)


# A few steps learn little beyond frequencies: the stall rule (tests/trials/test_stall_and_noise.py) is off here.
NO_STALL = DivergenceConfig(stall_margin=None)

def spec(lrs: list[float], divergence: DivergenceConfig | None = None, **train: object) -> TrialSpec:
    recipe = {"steps": 24, "batch_size": 4, "eval_every": 12, "eval_batches": 2, "report_every": 6,
                  "schedule": ScheduleConfig(warmup=3), "optimizer": OptimizerConfig(grad_clip=1.0)}
    recipe.update(train)
    return TrialSpec(model=tiny(), train=TrainConfig(**recipe), data=SYNTH, lrs=lrs, seed=3,  # type: ignore[arg-type]
                     divergence=divergence or NO_STALL)


def outcome(results: list) -> list[tuple]:
    return [(r.outcome, r.loss, r.diverged_step, r.reason, r.steps) for r in results]


@pytest.mark.parametrize("drop", [True, False], ids=["dropped", "masked"])
def test_deferred_reads_give_the_same_results(drop: bool) -> None:
    """Reading the losses every 5 steps instead of every 2: the same verdicts at the same steps and
    bit-identical losses of the other members; an exploded member stops updating at the same step
    (instant rules run on the device), so even its weights are the same."""
    lrs = [2e-3, 60.0, 2e-2]
    runs = {}
    for every in (2, 5):
        trial = Trial(spec(lrs, drop_diverged=drop, sync_every=every))
        runs[every] = (outcome(trial.run()), trial)
    assert runs[2][0] == runs[5][0]
    assert [o[0] for o in runs[2][0]] == ["ok", "diverged", "ok"]
    assert runs[2][0][1][3].startswith(("exploded", "non-finite"))
    for m in range(3):
        a, b = runs[2][1].member_weights(m), runs[5][1].member_weights(m)
        assert all(torch.equal(a[n], b[n]) for n in a), m


def test_deferred_reads_apply_smoothed_rules_on_the_host_with_the_same_verdicts() -> None:
    """With the instant rules off, a member that goes above its initial loss is caught by the smoothed
    rule; its step and reason do not depend on how often the losses are read."""
    rules = DivergenceConfig(explode_factor=None, spike_patience=3, stall_margin=None)
    results = {every: outcome(run_trial(spec([2e-3, 3.0], rules, sync_every=every))) for every in (2, 6)}
    assert results[2] == results[6]
    assert results[2][0][0] == "ok" and results[2][1][0] == "diverged"
    assert results[2][1][3].startswith("above-init")  # not an instant rule: found on the host, late


def test_deferred_reads_agree_with_per_step_reads() -> None:
    """Deferred (flat optimizer) against the reference path (StackedAdamW, a read every step)."""
    lrs = [2e-3, 60.0, 2e-2]
    eager, deferred = run_trial(spec(lrs)), run_trial(spec(lrs, sync_every=4))
    for a, b in zip(outcome(eager), outcome(deferred)):
        assert a[0] == b[0] and a[2:] == b[2:]
        assert (a[1] is None and b[1] is None) or a[1] == pytest.approx(b[1], abs=1e-5)


def test_deferred_resume_is_exact(tmp_path: Path) -> None:
    lrs = [2e-3, 60.0, 2e-2]
    full = run_trial(spec(lrs, sync_every=4, checkpoint_every=10))
    stopped = {"n": 0}

    def stop_after_12() -> bool:
        stopped["n"] += 1
        return stopped["n"] > 12

    run_trial(spec(lrs, sync_every=4, checkpoint_every=10), checkpoint_dir=tmp_path, should_stop=stop_after_12)
    resumed = run_trial(spec(lrs, sync_every=4, checkpoint_every=10), checkpoint_dir=tmp_path)
    assert outcome(resumed) == outcome(full)


def test_cuda_graphs_need_cuda() -> None:
    from trials.errors import TrialInputError

    with pytest.raises(TrialInputError, match="cuda_graphs"):
        Trial(spec([1e-3], device="cpu", cuda_graphs=True))


@pytest.mark.parametrize("every", [1, 5], ids=["per-step", "deferred"])
def test_micro_batches_accumulate_the_whole_batch(every: int) -> None:
    """Gradients accumulated over micro-batches of 3 + 1 sequences equal the whole batch's to rounding."""
    lrs = [2e-3, 60.0, 2e-2]
    whole, micro = run_trial(spec(lrs, sync_every=every)), run_trial(spec(lrs, sync_every=every, micro_batch=3))
    for a, b in zip(outcome(whole), outcome(micro)):
        assert a[0] == b[0] and a[2:] == b[2:]
        assert (a[1] is None and b[1] is None) or a[1] == pytest.approx(b[1], abs=1e-5)


def test_a_graph_capture_is_thread_local_with_the_prefetcher_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CPU can check of the capture (the capture itself needs a GPU: tests/trials/test_compile.py's
    CUDA tests and `sweeper bench --suite gpu`): the trainer hands the step its prefetcher's `paused`,
    and `_capture` enters it around the whole capture, which runs in thread-local mode."""
    import contextlib
    from types import SimpleNamespace

    import trials.engine as engine
    from trials.data.prefetch import Prefetcher

    trial = Trial(spec([1e-3, 2e-3], sync_every=4))
    assert trial.device_step is not None and isinstance(trial.stream, Prefetcher)
    assert trial.device_step.quiet == trial.stream.paused

    events: list[str] = []

    @contextlib.contextmanager
    def quiet():  # type: ignore[no-untyped-def]
        events.append("paused")
        yield
        events.append("resumed")

    @contextlib.contextmanager
    def graph(g: object, **kwargs: object):  # type: ignore[no-untyped-def]
        events.append(f"capture {kwargs}")
        yield
        events.append("captured")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: SimpleNamespace())
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: events.append("synchronize"))
    step = engine.DeviceStep(lambda *a, **k: torch.zeros(1), SimpleNamespace(lrs=torch.zeros(1), k=1), None, None,
                             graphs=True)
    step.quiet = quiet
    monkeypatch.setattr(step, "_body", lambda *a: events.append("body") or torch.zeros(1))
    step._capture(torch.zeros(2, 3), torch.zeros(2, 3))
    assert engine.GRAPH_CAPTURE_MODE == "thread_local"
    assert events == ["paused", "synchronize", "capture {'capture_error_mode': 'thread_local'}", "body", "captured",
                      "resumed"]
