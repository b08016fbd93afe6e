"""Divergence rules (pure) and the LR schedule / budget arithmetic (pure)."""

from __future__ import annotations

import json
import math

import pytest

from trials.config import DivergenceConfig, ScaledPatience, ScheduleConfig, TrainConfig
from trials.divergence import DivergenceMonitor, patience_steps
from trials.schedule import LRSchedule, total_steps, warmup_steps


def run(monitor: DivergenceMonitor, curves: dict[int, list[float]]) -> list[tuple[int, int]]:
    """Feed per-step losses; return (member, step) in the order members diverged."""
    out = []
    for step in range(max(len(c) for c in curves.values())):
        losses = {m: c[step] for m, c in curves.items() if step < len(c)}
        out += [(m, step) for m in monitor.observe(step, losses)]
    return out


def healthy(n: int, start: float = 5.5, end: float = 2.0) -> list[float]:
    return [end + (start - end) * math.exp(-s / 10) for s in range(n)]


def test_healthy_run_never_diverges() -> None:
    mon = DivergenceMonitor(DivergenceConfig(), 1, warmup_steps=5, total_steps=300)
    assert run(mon, {0: healthy(300)}) == []
    assert mon.members[0].init_loss == pytest.approx(5.5) and mon.members[0].spikes == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_diverges_at_once_even_in_warmup(bad: float) -> None:
    mon = DivergenceMonitor(DivergenceConfig(), 2, warmup_steps=100, total_steps=1000)
    curve = healthy(10)
    curve[3] = bad
    assert run(mon, {0: healthy(10), 1: curve}) == [(1, 3)]
    assert mon.members[1].reason.startswith("non-finite: training loss is")
    assert mon.diverged == [False, True]


def test_explosion_diverges_at_once() -> None:
    mon = DivergenceMonitor(DivergenceConfig(explode_factor=3.0), 1, warmup_steps=100, total_steps=1000)
    assert run(mon, {0: [5.5, 9.0, 17.0, 4.0]}) == [(0, 2)]
    assert mon.members[0].reason.startswith("exploded: training loss 17 > 3 x initial loss 5.5")
    off = DivergenceMonitor(DivergenceConfig(explode_factor=None), 1, warmup_steps=100, total_steps=1000)
    assert run(off, {0: [5.5, 9.0, 17.0, 4.0]}) == []


def test_smoothed_loss_above_init_only_after_warmup() -> None:
    cfg = DivergenceConfig(ema=0.5, spike_patience=1000, explode_factor=None)
    stuck = [5.5] + [6.0] * 30  # never learns, sits above the initial loss
    mon = DivergenceMonitor(cfg, 1, warmup_steps=10)
    assert run(mon, {0: stuck}) == [(0, 10)]  # first step after warmup
    assert mon.members[0].reason.startswith("above-init: smoothed training loss")
    # The margin gives head-room.
    lenient = DivergenceMonitor(cfg.model_copy(update={"init_loss_margin": 1.0}), 1, warmup_steps=10)
    assert run(lenient, {0: stuck}) == []


def test_spike_recovered_within_patience_is_counted_not_diverged() -> None:
    cfg = DivergenceConfig(spike_factor=1.5, spike_patience=5, ema=0.9)
    curve = healthy(60)
    for s in range(40, 44):  # four steps at 3x the loss, then back
        curve[s] = 3 * curve[s]
    mon = DivergenceMonitor(cfg, 1, warmup_steps=5)
    assert run(mon, {0: curve}) == []
    assert mon.members[0].spikes == 1


def test_spike_not_recovered_within_patience_diverges() -> None:
    cfg = DivergenceConfig(spike_factor=1.5, spike_patience=5, ema=0.9, init_loss_margin=10.0)
    curve = healthy(40)[:30] + [4.5] * 10  # jumps from ~2.2 to 4.5 (< init) and stays
    mon = DivergenceMonitor(cfg, 1, warmup_steps=5)
    assert run(mon, {0: curve}) == [(0, 35)]
    assert mon.members[0].reason.startswith("spike: training loss 4.5 still > 1.5 x best smoothed loss")


def test_members_are_independent_and_verdicts_final() -> None:
    mon = DivergenceMonitor(DivergenceConfig(), 3, warmup_steps=0, total_steps=100)
    assert run(mon, {0: healthy(20), 1: [5.5, math.nan] + healthy(18), 2: healthy(20)}) == [(1, 1)]
    assert mon.members[1].diverged_step == 1  # later finite losses do not revive it
    assert mon.observe(20, {0: 1.0, 1: 1.0, 2: math.nan}) == [2]


def test_state_round_trips_through_json() -> None:
    cfg = DivergenceConfig(spike_factor=1.5, spike_patience=5)
    curve = healthy(40)[:30] + [4.5] * 10
    whole = DivergenceMonitor(cfg, 1, warmup_steps=5)
    expected = run(whole, {0: curve})
    first = DivergenceMonitor(cfg, 1, warmup_steps=5)
    for s in range(32):
        first.observe(s, {0: curve[s]})
    resumed = DivergenceMonitor(cfg, 1, warmup_steps=5)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got = [(m, s) for s in range(32, 40) for m in resumed.observe(s, {0: curve[s]})]
    assert got == expected and resumed.members[0].reason == whole.members[0].reason


def test_spike_patience_is_a_share_of_the_run_with_a_floor_and_a_cap() -> None:
    default = DivergenceConfig().spike_patience
    assert default == ScaledPatience(fraction=0.02, min=50)
    assert [patience_steps(default, n) for n in (200, 10_890, 375_300, 818_000)] == [50, 218, 7506, 16_360]
    assert patience_steps(200, 818_000) == 200  # an integer stays a fixed number of steps
    capped = DivergenceConfig.model_validate({"spike_patience": {"fraction": 0.01, "min": 20, "max": 1000}}).spike_patience
    assert [patience_steps(capped, n) for n in (100, 50_000, 818_000)] == [20, 500, 1000]
    percent = DivergenceConfig.model_validate({"spike_patience": "0.5%"}).spike_patience
    assert percent == ScaledPatience(fraction=0.005) and patience_steps(percent, 100_000) == 500
    with pytest.raises(ValueError, match="spike_patience"):
        DivergenceConfig.model_validate({"spike_patience": "lots%"})
    with pytest.raises(ValueError, match="steps \\(an integer\\), a share of the run"):
        DivergenceConfig.model_validate({"spike_patience": "abc"})
    assert DivergenceConfig.model_validate({"spike_patience": "200"}).spike_patience == 200
    with pytest.raises(ValueError):
        DivergenceConfig.model_validate({"spike_patience": {"fraction": 0.01, "min": 100, "max": 10}})
    with pytest.raises(ValueError):
        DivergenceConfig.model_validate({"spike_patience": 0})
    with pytest.raises(ValueError, match="total steps"):
        DivergenceMonitor(DivergenceConfig(), 1, warmup_steps=0)
    dumped = DivergenceConfig.model_validate({"spike_patience": "2%"}).model_dump(mode="json")
    assert DivergenceConfig.model_validate(dumped) == DivergenceConfig()  # specs round-trip through JSON


def test_a_long_run_outlasts_a_spike_that_a_short_run_would_not() -> None:
    """A spike of 80 steps: diverged in a 2,000-step run (patience 50), recovered in a 20,000-step run (400)."""
    curve = healthy(300)
    for s in range(150, 230):
        curve[s] = 2.5 * curve[s]
    short = DivergenceMonitor(DivergenceConfig(), 1, warmup_steps=5, total_steps=2000)
    assert run(short, {0: curve}) == [(0, 200)]
    assert "(patience 50 steps)" in short.members[0].reason
    long = DivergenceMonitor(DivergenceConfig(), 1, warmup_steps=5, total_steps=20_000)
    assert run(long, {0: curve}) == [] and long.members[0].spikes == 1


# ---- schedule and budget ---------------------------------------------------------------------


def test_warmup_then_cosine_to_final_fraction() -> None:
    sched = LRSchedule.from_config(ScheduleConfig(warmup=0.1, decay="cosine", final_fraction=0.1), 100)
    assert sched.warmup == 10
    assert [sched.factor(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert sched.factor(10) == pytest.approx(1.0)
    assert sched.factor(99) == pytest.approx(0.1)
    mid = 10 + (99 - 10) / 2
    assert sched.factor(int(mid)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)))
    factors = [sched.factor(s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(factors, factors[1:]))


def test_linear_and_constant_decay_and_step_warmup() -> None:
    lin = LRSchedule.from_config(ScheduleConfig(warmup=5, decay="linear", final_fraction=0.0), 25)
    assert lin.warmup == 5 and lin.factor(5) == 1.0 and lin.factor(24) == pytest.approx(0.0)
    assert lin.factor(15) == pytest.approx(0.5, abs=0.03)
    const = LRSchedule.from_config(ScheduleConfig(warmup=0, decay="constant"), 10)
    assert [const.factor(s) for s in range(10)] == [1.0] * 10
    assert warmup_steps(ScheduleConfig(warmup=500), 100) == 100


def test_budget_in_steps_tokens_or_tokens_per_param() -> None:
    assert total_steps(TrainConfig(steps=7), seq_len=64, params=10**6) == 7
    assert total_steps(TrainConfig(tokens=1000, batch_size=4), seq_len=64, params=1) == 4  # ceil(1000 / 256)
    assert total_steps(TrainConfig(tokens_per_param=80, batch_size=8), seq_len=128, params=10_000) == 782
