"""The looped model's Parcae options: the prelude norm, the weight-like state init (deterministic draws,
the same under micro-batching), per-sequence truncated-Poisson loop counts run as Parcae runs them (never
more than k iterations with gradients), evaluation at several loop counts, the block options inside the
loop, and a tiny model with every option learning with the project's AdamW."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.families.looped import LoopSettings, count_looped, loop_settings
from models.layers import rms_norm, rotary_tables
from models.looped import EVAL_STATE_SEED
from models.named import PARCAE_BLOCKS, PARCAE_LOOPS
from models.registry import scheme_names
from tests.helpers import perturb
from tests.models.small_looped import looped_config, make


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 48, (3, 9), generator=torch.Generator().manual_seed(7))

PARCAE = {**PARCAE_BLOCKS, **PARCAE_LOOPS}


def grads(model) -> dict[str, torch.Tensor]:
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def reference_loss(model, idx, targets, count: int, state: torch.Tensor) -> torch.Tensor:
    """The looped forward written out: prelude, its norm, T iterations from `state` (the last k with
    gradients), coda, tied head; value embeddings added to the values of their blocks."""
    p, c, k = model.loops.prelude, model.loops.core, model.loops.backprop_loops
    seq = idx.shape[1]
    values = model.value_lookups(idx)
    h = model.embed(idx)
    rope = rotary_tables(seq, model.cfg.head_dim, model.cfg.rope_base, h.device, torch.float64)
    blocks = model.blocks
    for i in range(p):
        h = blocks[i](h, seq, rope, {}, values.get(i + 1))
    h = rms_norm(h, model.cfg.norm_eps) * model.prelude_gain[:, None, :]
    dt = torch.exp(model.inject_log_dt)
    decay = torch.exp(-dt * torch.exp(model.inject_log_a))[:, None, :]
    inject = dt[:, None, :] * (h @ model.inject_b)
    for t in range(count):
        if t == count - min(count, k):
            state = state.detach()
        u = decay * state + inject
        for j in range(p, p + c):
            u = blocks[j](u, seq, rope, {}, values.get(j + 1))
        state = u
    h = state
    for j in range(p + c, len(blocks)):
        h = blocks[j](h, seq, rope, {}, values.get(j + 1))
    h = rms_norm(h, model.cfg.norm_eps) * model.final_gain[:, None, :]
    logits = (h @ model.tok_emb.transpose(1, 2)).view(model.stack, *idx.shape, -1).float()
    return torch.stack([F.cross_entropy(logits[m].reshape(-1, logits.shape[-1]), targets.reshape(-1)) for m in range(model.stack)])


def test_prelude_norm_state_init_and_value_embeddings_in_the_loop(tokens):
    cfg = looped_config("pre", prelude=1, core=2, coda=2, **{**PARCAE, "backprop_loops": 2})
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=1)
    x, y = tokens[:, :-1], tokens[:, 1:]
    assert sorted(model.value_embeds) == ["1", "3", "5"]  # a core block (3) looks its table up once, adds it every iteration
    plan = model.training_loops(step=4, seed=2, batch_size=3)
    plan[:, 0] = 5  # one count for the batch, with the state seeds of the plan
    loss = model.member_losses(x, y, loops=plan)
    loss.sum().backward()
    got = grads(model)
    model.zero_grad()
    state = model.initial_state(torch.zeros(2, x.numel(), 32, dtype=torch.float64), 3, 8, plan[:, 1])
    want = reference_loss(model, x, y, 5, state)
    want.sum().backward()
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-7)  # the loss is taken in fp32
    for name, grad in grads(model).items():
        torch.testing.assert_close(got[name], grad, rtol=1e-6, atol=1e-9, msg=name)
    assert got["prelude_gain"].abs().sum() > 0 and count_looped(cfg)["total"] == model.num_params()


def test_weight_like_state_is_a_deterministic_truncated_normal(tokens):
    cfg = looped_config("pre", width=64, state_init="like_weights")
    model = make(cfg, stack=2)
    s = 0.02  # the token embedding's std under the normal init (init_std)
    plan = model.training_loops(step=7, seed=1, batch_size=4)
    assert plan.shape == (4, 2) and torch.equal(plan, model.training_loops(step=7, seed=1, batch_size=4))
    assert not torch.equal(plan[:, 1], model.training_loops(step=8, seed=1, batch_size=4)[:, 1])
    inject = torch.zeros(2, 4 * 50, 64)
    state = model.initial_state(inject, 4, 50, plan[:, 1])
    assert state.shape == inject.shape and torch.equal(state[0], state[1])  # the same for every member
    assert state.abs().max() <= 3 * s and state.std().item() == pytest.approx(0.9866 * s, rel=0.05)
    assert torch.equal(state, model.initial_state(inject, 4, 50, plan[:, 1]))  # a function of the seeds
    rows = state[0].view(4, 50, 64)
    assert not torch.equal(rows[0], rows[1])  # every sequence its own draw
    again = model.initial_state(inject[:, :100], 2, 50, plan[2:, 1])  # a micro-batch of the last two sequences
    torch.testing.assert_close(again[0].view(2, 50, 64), rows[2:], rtol=0, atol=0)
    fixed = model.initial_state(inject, 4, 50, None).view(2, 4, 50, 64)  # no seeds: EVAL_STATE_SEED, every sequence
    assert torch.equal(fixed[:, 0], fixed[:, 3])
    gen = torch.Generator().manual_seed(EVAL_STATE_SEED)
    want = torch.nn.init.trunc_normal_(torch.empty(1, 50, 64), 0.0, s, -3 * s, 3 * s, generator=gen)
    torch.testing.assert_close(fixed[0, 0], want[0], rtol=0, atol=0)
    zeros = make(looped_config("pre"))
    assert zeros.training_loops(7, 1, 4) == make(looped_config("pre")).training_loops(7, 1, 4)  # an int: today's draw
    assert torch.count_nonzero(zeros.initial_state(inject, 4, 50, None)) == 0


def test_micro_batches_see_the_draws_of_the_whole_batch():
    from trials.engine import accumulate  # the trainer's micro-batching: slices [B, 2] plans with the batch

    cfg = looped_config("layerrope", **PARCAE)
    idx = torch.randint(0, 48, (4, 9), generator=torch.Generator().manual_seed(3))
    x, y = idx[:, :-1], idx[:, 1:]
    whole, split = (perturb(make(cfg, stack=2, dtype=torch.float64), seed=4) for _ in range(2))
    plan = whole.training_loops(step=3, seed=5, batch_size=4)
    assert len(set(plan[:, 0].tolist())) > 1  # per-sequence counts
    losses = whole.member_losses(x, y, loops=plan)
    losses.sum().backward()
    micro = accumulate(split.member_losses, x, y, {"loops": plan}, 2, contextlib.nullcontext)
    torch.testing.assert_close(micro, losses.detach(), rtol=1e-6, atol=1e-7)  # the loss is taken in fp32
    for (name, a), (_, b) in zip(whole.named_parameters(), split.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-6, atol=1e-9, msg=name)


def test_per_sequence_counts_keep_at_most_k_iterations_with_gradients(tokens):
    cfg = looped_config("peri", backprop_loops=2, loop_sampling="per_sequence", **PARCAE_BLOCKS)
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=3)
    x = tokens[:, :-1]
    counts = torch.tensor([1, 7, 3])
    seen: list[bool] = []
    model.core[0].register_forward_pre_hook(lambda mod, args: seen.append(torch.is_grad_enabled()))
    logits = model(x, counts)
    # Parcae's alignment: max(T_i - k_i) = 5 iterations without gradients, then max(min(T_i, k)) = 2 with them
    assert seen == [False] * 5 + [True] * 2
    weights = torch.tensor([1.0, 2.0], dtype=torch.float64)
    (logits.sum(dim=(1, 2, 3)) * weights).sum().backward()
    batched = grads(model)
    model.zero_grad()
    for i, count in enumerate(counts.tolist()):  # each sequence as if alone, at its own count
        single = model(x[i : i + 1], count)
        torch.testing.assert_close(logits[:, i : i + 1], single, rtol=1e-10, atol=1e-10)
        (single.sum(dim=(1, 2, 3)) * weights).sum().backward()
    for name, grad in grads(model).items():
        torch.testing.assert_close(batched[name], grad, rtol=1e-8, atol=1e-10, msg=name)


def test_per_sequence_counts_are_parcaes_truncated_poisson():
    """T = max(Poisson(8), 1) per sequence (clipped at max_loops 32, a mass of 3e-11), k_i = min(T_i, 4)."""
    model = make(looped_config("pre", loop_sampling="per_sequence"))
    draws = np.concatenate([model.training_loops(step, seed=9, batch_size=64).numpy() for step in range(400)])
    pmf = np.array(LoopSettings().loop_pmf())
    lam = 8.0
    poisson = np.array([math.exp(-lam) * lam**t / math.factorial(t) for t in range(33)])
    assert pmf[1] == pytest.approx(poisson[0] + poisson[1], rel=1e-12) and pmf[0] == 0.0
    assert np.allclose(pmf[2:32], poisson[2:32], rtol=1e-12, atol=0) and pmf[32] < poisson[32] + 1e-10
    mean, with_grad = LoopSettings().expected_loops()
    assert mean == pytest.approx(8 + math.exp(-8), abs=1e-9)
    observed = np.bincount(draws, minlength=33)[:33] / len(draws)
    assert 0.5 * np.abs(observed - pmf).sum() < 0.02  # total variation, 25,600 draws
    assert draws.mean() == pytest.approx(mean, abs=0.06) and draws.min() >= 1
    assert np.minimum(draws, 4).mean() == pytest.approx(with_grad, abs=0.02)


def test_eval_losses_at_several_loop_counts(tokens):
    cfg = looped_config("lns", **PARCAE)
    model = perturb(make(cfg, stack=2), seed=6).eval()
    x, y = tokens[:, :-1], tokens[:, 1:].clone()
    y[0, :2] = -100
    got = model.eval_losses(x, y)
    assert list(got) == [1, 2, 4, 8]
    for count, loss in got.items():  # the same as a forward at that count (the eval state draw)
        torch.testing.assert_close(loss, model.member_losses(x, y, loops=count).detach(), rtol=1e-6, atol=1e-7)
    assert not torch.equal(got[1], got[8])
    torch.testing.assert_close(model.member_losses(x, y).detach(), got[8])  # eval mode runs the largest count
    sums = model.eval_losses(x, y, [8, 3], reduction="sum")
    assert list(sums) == [3, 8] and sums[8].dtype == torch.float64
    torch.testing.assert_close(sums[8], got[8].double() * int((y != -100).sum()))
    with pytest.raises(ValueError, match="integers >= 1"):
        model.eval_losses(x, y, [0, 2])
    with pytest.raises(ValueError, match="reduction"):
        model.eval_losses(x, y, reduction="max")


@pytest.mark.parametrize(("extra", "message"), [
    ({"eval_loops": []}, "eval_loops .* a loop count >= 1 or a list of them"),
    ({"eval_loops": [2, 0]}, "eval_loops"),
    ({"eval_loops": True}, "eval_loops"),
    ({"state_init": "random"}, "state_init .* must be one of zeros, like_weights"),
    ({"prelude_norm": "on"}, "prelude_norm .* must be true or false"),
    ({"mlp": "gelu"}, "model.extra.mlp for the looped family"),
])
def test_bad_loop_options_are_one_line_errors(extra, message):
    cfg = looped_config("pre", **extra)
    with pytest.raises(ValueError, match=message):
        loop_settings(cfg)
    assert loop_settings(looped_config("pre", eval_loops=[8, 2, 2, 4])).eval_loops == (2, 4, 8)
    assert loop_settings(looped_config("pre", eval_loops=5)).eval_count == 5


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_scheme_builds_and_counts_with_every_option(scheme, tokens):
    if scheme == "scaled_init":  # its only init multiplier acts on the projections the init sets to zero
        with pytest.raises(ValueError, match="scaled_init"):
            make(looped_config(scheme, **PARCAE))
        return
    cfg = looped_config(scheme, **PARCAE)
    model = make(cfg, stack=2)
    loss = model.member_losses(tokens[:, :-1], tokens[:, 1:], loops=model.training_loops(0, 0, 3))
    loss.sum().backward()
    assert torch.isfinite(loss).all() and all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert count_looped(cfg)["total"] == model.num_params()
    b = model.inject_b[0]
    s = math.sqrt(2 / (5 * 32))
    torch.testing.assert_close(b.T @ b, s * s * 32 * torch.eye(32), rtol=0, atol=1e-5)  # B: scaled orthogonal


def test_stack_members_equal_separate_models_with_every_option(tokens):
    cfg = looped_config("layerrope", **PARCAE)
    singles = [perturb(make(cfg, seed=k), seed=40 + k) for k in range(2)]
    stacked = make(cfg, stack=2)
    for k, single in enumerate(singles):
        stacked.load_member_state_dict(k, single.member_state_dict(0))
    x, y = tokens[:, :-1], tokens[:, 1:]
    plan = stacked.training_loops(1, 2, 3)
    losses = stacked.member_losses(x, y, loops=plan)
    losses.sum().backward()
    for k, single in enumerate(singles):
        loss = single.member_losses(x, y, loops=plan)
        loss.backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-6)
        params = dict(single.named_parameters())
        for name, param in stacked.named_parameters():
            torch.testing.assert_close(param.grad[k], params[name].grad[0], rtol=1e-4, atol=1e-6, msg=name)


def test_a_tiny_parcae_model_learns_with_the_stacked_adamw():
    from trials.optim import StackedAdamW

    cfg = looped_config("pre", width=32, vocab=32, seq_len=16, **{**PARCAE, "mean_loops": 3, "max_loops": 6,
                                                                   "backprop_loops": 2, "eval_loops": [1, 3]})
    model = make(cfg, stack=2, seed=0)
    gen = torch.Generator().manual_seed(0)
    batch = torch.randint(0, 32, (8, 17), generator=gen)
    x, y = batch[:, :-1], batch[:, 1:]
    optimizer = StackedAdamW(model.param_specs(), [3e-3, 1e-2], betas=(0.8, 0.95), eps=1e-10)
    history = []
    for step in range(20):
        losses = model.member_losses(x, y, loops=model.training_loops(step, 0, 8))
        losses.sum().backward()
        optimizer.step()
        for p in model.parameters():
            p.grad = None
        history.append(losses.detach())
    assert torch.isfinite(history[-1]).all()
    assert (history[-1] < history[0] - 0.3).all(), f"{history[0].tolist()} -> {history[-1].tolist()}"
    model.eval()
    at = model.eval_losses(x, y)
    assert list(at) == [1, 3] and all(torch.isfinite(v).all() for v in at.values())


def test_the_trainer_runs_every_option_micro_batched_and_resumes_exactly(tmp_path):
    """The trial's own loop (`trials.run`): the [B, 2] plans of `training_loops` sliced by micro-batches,
    the state draws a function of (seed, step), so a resumed trial retraces the uninterrupted one."""
    from trials.run import run_trial
    from trials.spec import TrialSpec

    spec = TrialSpec.from_dict({
        "model": {"family": "looped", "scheme": "layerrope", "width": 32, "depth": 4, "n_heads": 2, "vocab": 64,
                  "seq_len": 16, "extra": {"prelude": 1, "core": 2, "coda": 1, **PARCAE, "mean_loops": 3,
                                           "backprop_loops": 2, "max_loops": 8, "eval_loops": [1, 3]}},
        "train": {"steps": 20, "batch_size": 8, "micro_batch": 4, "eval_every": 10, "eval_batches": 2,
                  "checkpoint_every": 10},
        "data": {"source": "synthetic"},
        "divergence": {"stall_margin": None},
        "lrs": [3e-3, 1e-2],
    })
    full = run_trial(spec)
    assert [r.outcome for r in full] == ["ok", "ok"] and all(r.loss < r.init_loss for r in full)
    stopped = run_trial(spec, checkpoint_dir=tmp_path, should_stop=iter([False] * 12 + [True]).__next__)
    assert {r.outcome for r in stopped} == {"failed"}
    resumed = run_trial(spec, checkpoint_dir=tmp_path)
    for a, b in zip(full, resumed):
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
