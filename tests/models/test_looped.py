"""The looped LM: shapes, truncated backprop through the last k iterations, per-sequence loop counts,
LayerRoPE depth indices independent of the loop iteration, every scheme, the stack dimension."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.families.looped import LoopSettings, count_looped, loop_settings
from models.layers import rms_norm, rotary_tables
from models.registry import scheme_names
from tests.helpers import perturb
from tests.models.small_looped import looped_config, make


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 48, (3, 9), generator=torch.Generator().manual_seed(7))


def reference_loss(model, idx, targets, count: int, k: int) -> torch.Tensor:
    """The looped forward written out in the test: T iterations of u = exp(-dt A) h + dt (e @ B) then the
    core, with the state detached after iteration T - k (so only the last k iterations carry gradients)."""
    p, c = model.loops.prelude, model.loops.core
    seq = idx.shape[1]
    h = model.embed(idx)
    rope = rotary_tables(seq, model.cfg.head_dim, model.cfg.rope_base, h.device, torch.float64)
    gains = list(model._external_gains_by_layer_list())
    for i in range(p):
        h = model.blocks[i](h, seq, rope, gains[i])
    dt = torch.exp(model.inject_log_dt)
    decay = torch.exp(-dt * torch.exp(model.inject_log_a))[:, None, :]
    inject = dt[:, None, :] * (h @ model.inject_b)
    state = torch.zeros_like(inject)
    for t in range(count):
        if t == count - k:
            state = state.detach()
        u = decay * state + inject
        for j in range(p, p + c):
            u = model.blocks[j](u, seq, rope, gains[j])
        state = u
    h = state
    for j in range(p + c, len(model.blocks)):
        h = model.blocks[j](h, seq, rope, gains[j])
    h = rms_norm(h, model.cfg.norm_eps) * model.final_gain[:, None, :]
    logits = (h @ model.head).view(model.stack, *idx.shape, -1).float()  # the model takes the loss in fp32
    return torch.stack([F.cross_entropy(logits[m].reshape(-1, logits.shape[-1]), targets.reshape(-1)) for m in range(model.stack)])


def grads(model) -> dict[str, torch.Tensor]:
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def test_shapes_and_eval_loop_count(tokens):
    cfg = looped_config("pre", eval_loops=5)
    model = make(cfg, stack=3)
    x, y = tokens[:, :-1], tokens[:, 1:]
    assert model(x, 4).shape == (3, 3, 8, cfg.vocab)
    assert model.member_losses(x, y, loops=4).shape == (3,)
    calls = []
    model.core[0].register_forward_pre_hook(lambda mod, args: calls.append(1))
    model.eval()
    with torch.no_grad():
        model(x)
    assert len(calls) == 5  # eval_loops iterations of the core, no sampling in eval mode
    model.train()
    calls.clear()
    model(x, 3)
    assert len(calls) == 3


@pytest.mark.parametrize(("count", "k"), [(6, 2), (3, 4), (5, 1), (4, 4)])
def test_gradients_flow_through_the_last_k_iterations_only(tokens, count, k):
    cfg = looped_config("layerrope", backprop_loops=k)
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=1)
    x, y = tokens[:, :-1], tokens[:, 1:]
    seen: list[tuple[bool, bool]] = []
    model.core[0].register_forward_pre_hook(lambda mod, args: seen.append((torch.is_grad_enabled(), args[0].requires_grad)))
    loss = model.member_losses(x, y, loops=count)
    with_grad = min(count, k)
    # the first T - k iterations run without autograd, the last k with it
    assert seen == [(False, False)] * (count - with_grad) + [(True, True)] * with_grad
    loss.sum().backward()
    got = grads(model)
    model.zero_grad()
    want_loss = reference_loss(model, x, y, count, k)
    want_loss.sum().backward()
    torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-7)
    for name, grad in grads(model).items():
        torch.testing.assert_close(got[name], grad, rtol=1e-6, atol=1e-9, msg=name)


def test_truncation_changes_the_gradient_but_not_the_loss(tokens):
    x, y = tokens[:, :-1], tokens[:, 1:]
    results = {}
    for k in (1, 4):
        model = perturb(make(looped_config("pre", backprop_loops=k), dtype=torch.float64), seed=2)
        loss = model.member_losses(x, y, loops=4)
        loss.sum().backward()
        results[k] = (loss.detach(), grads(model))
    torch.testing.assert_close(results[1][0], results[4][0])
    core_weight = "blocks.1.attn.qkv"
    assert not torch.allclose(results[1][1][core_weight], results[4][1][core_weight])
    # the prelude learns only through the injections of the last iterations, but it does learn
    assert results[1][1]["blocks.0.mlp.down"].abs().sum() > 0


def test_per_sequence_counts_equal_separate_runs(tokens):
    cfg = looped_config("peri", backprop_loops=2, loop_sampling="per_sequence")
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=3)
    x = tokens[:, :-1]
    counts = torch.tensor([1, 5, 3])
    logits = model(x, counts)
    (logits.sum(dim=(1, 2, 3)) * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum().backward()
    batched = grads(model)
    model.zero_grad()
    for i, count in enumerate(counts.tolist()):
        single = model(x[i : i + 1], count)
        torch.testing.assert_close(logits[:, i : i + 1], single, rtol=1e-10, atol=1e-10)
        (single.sum(dim=(1, 2, 3)) * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum().backward()
    for name, grad in grads(model).items():
        torch.testing.assert_close(batched[name], grad, rtol=1e-8, atol=1e-10, msg=name)


def test_layerrope_depth_index_is_the_position_in_the_network(tokens):
    cfg = looped_config("layerrope", prelude=2, core=3, coda=2)
    model = perturb(make(cfg, stack=2), seed=4)
    sites = model.site_gains.sites
    assert all(site.n_layers == 7 for site in sites.values())
    fresh = make(cfg, stack=2)
    for name, site in fresh.site_gains.sites.items():
        assert torch.all(site.b_mag == 0.0), name  # the magnitude slopes start at 0
        assert torch.all(site.b_rot == -0.5), name  # the rotation slopes keep beta_init
        assert torch.equal(site.log_depth, torch.log(torch.arange(1.0, 8.0, dtype=torch.float64)))
    seen: dict[int, list[dict[str, torch.Tensor]]] = {i: [] for i in range(7)}
    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(lambda mod, args, i=i: seen[i].append({k: v.detach().clone() for k, v in args[3].items()}))
    model(tokens[:, :-1], 4)
    expected = {name: site().detach() for name, site in sites.items()}  # [K, 7, d]
    for i in range(7):
        calls = seen[i]
        assert len(calls) == (4 if 2 <= i < 5 else 1)
        for call in calls:  # every iteration of the core sees its own position's gains, whatever the iteration
            for name, gain in call.items():
                torch.testing.assert_close(gain, expected[name][:, i], rtol=0, atol=0)
    assert model.layer_gains()["attn_in"].shape == (2, 7, 32)


def test_layerrope_slope_option_can_be_overridden():
    cfg = looped_config("layerrope")
    cfg = type(cfg)(**{**cfg.to_dict(), "scheme_options": {"mag_slope_init": -0.25}})
    model = make(cfg)
    assert all(float(s.b_mag.detach()) == -0.25 for s in model.site_gains.sites.values())


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_scheme_builds_trains_and_counts(scheme, tokens):
    cfg = looped_config(scheme)
    model = make(cfg, stack=2)
    loss = model.member_losses(tokens[:, :-1], tokens[:, 1:], loops=3)
    assert torch.isfinite(loss).all()
    loss.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert count_looped(cfg)["total"] == model.num_params()
    kinds = {s.name: s.kind for s in model.param_specs()}
    assert kinds["inject_b"] == "hidden" and kinds["inject_log_dt"] == kinds["inject_log_a"] == "scalar"


def test_stack_members_equal_separate_models(tokens):
    cfg = looped_config("lns")
    singles = [perturb(make(cfg, seed=k), seed=20 + k) for k in range(3)]
    stacked = make(cfg, stack=3)
    for k, single in enumerate(singles):
        stacked.load_member_state_dict(k, single.member_state_dict(0))
    x, y = tokens[:, :-1], tokens[:, 1:]
    losses = stacked.member_losses(x, y, loops=5)
    losses.sum().backward()
    for k, single in enumerate(singles):
        loss = single.member_losses(x, y, loops=5)
        loss.backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-6)
        for name, param in stacked.named_parameters():
            torch.testing.assert_close(param.grad[k], dict(single.named_parameters())[name].grad[0], rtol=1e-4, atol=1e-6)


def test_blocks_start_from_the_gpt_baseline_weights():
    from models.llama import LlamaLM

    cfg = looped_config("pre")
    looped = make(cfg, seed=5)
    gpt = LlamaLM(type(cfg)(**{**cfg.to_dict(), "family": "llama", "extra": {}}))
    gpt.init_weights(5)
    gpt_weights = dict(gpt.named_parameters())
    for name, param in looped.named_parameters():
        if name.startswith("inject_"):
            continue
        assert torch.equal(param, gpt_weights[name]), name
    decay = looped.injection()["decay"]
    torch.testing.assert_close(decay, torch.full_like(decay, torch.exp(torch.tensor(-1.0)).item()))


def test_training_loops_are_deterministic_poisson_draws():
    model = make(looped_config("pre", mean_loops=6, max_loops=12))
    draws = [model.training_loops(step, seed=3, batch_size=4) for step in range(4000)]
    assert draws[:50] == [model.training_loops(step, seed=3, batch_size=4) for step in range(50)]
    assert draws[:50] != [model.training_loops(step, seed=4, batch_size=4) for step in range(50)]
    assert min(draws) >= 1 and max(draws) <= 12
    mean, _ = LoopSettings(mean_loops=6, max_loops=12).expected_loops()
    assert abs(sum(draws) / len(draws) - mean) < 0.1
    per_seq = make(looped_config("pre", loop_sampling="per_sequence"))
    counts = per_seq.training_loops(0, seed=0, batch_size=5)
    assert counts.shape == (5,) and counts.dtype == torch.int64


def test_expected_loops_of_the_clipped_poisson():
    s = LoopSettings(mean_loops=8, max_loops=32, backprop_loops=4)
    mean, with_grad = s.expected_loops()
    assert mean == pytest.approx(8.0, abs=1e-3)  # clipping at 1 and 32 moves the mean by < 1e-3
    assert 3.9 < with_grad < 4.0
    assert LoopSettings(mean_loops=1, max_loops=1).expected_loops() == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize(("extra", "message"), [
    ({"prelude": 1, "core": 1, "coda": 1}, "depth is 4"),
    ({"backprop_loops": 5}, "between 1 and 4"),
    ({"loops": 8}, "unknown key"),
    ({"loop_sampling": "per_token"}, "per_batch"),
    ({"mean_loops": 0}, "mean_loops"),
    ({"core": 0, "prelude": 2}, "core"),
])
def test_bad_settings_are_one_line_errors(extra, message):
    cfg = looped_config("pre")
    cfg = type(cfg)(**{**cfg.to_dict(), "extra": {**cfg.extra, **extra}})
    with pytest.raises(ValueError, match=message):
        loop_settings(cfg)
