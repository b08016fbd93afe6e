"""Simulated trials (`sweeper launch --simulate`): the planted surface, the trial loop, its clock."""

from __future__ import annotations

import json
import math

import pytest

from models.config import ModelConfig
from trials.config import TrainConfig
from sweeper.sim.trial import SimulatedCell, rate_of, simulate_trial
from trials.spec import TrialSpec
from sweeper.sim.surface import Surface, SurfaceMethod, final_loss

# as for the trials tests: one intra-op thread, a private corpus cache (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")


PRE = SurfaceMethod(E=2.0, A=1.0, alpha=0.5, lr_k=0.02, lr_b=-0.5, c=0.05, cliff=4.0)


def surface(**extra) -> Surface:
    return Surface.model_validate({"name": "t", "throughput": 1e9, "time_compression": 10.0, "noise": 0.0,
                                   "min_report_seconds": 0.0, "methods": {"pre": PRE.model_dump()}, **extra})


def test_the_planted_optimum_is_the_lowest_loss_and_above_the_cliff_runs_diverge():
    x = 4.0
    star = PRE.optimal_lr(x)
    assert star == pytest.approx(0.01)
    at = {f: final_loss(PRE, x, star * f, 0, 0.0, "pre") for f in (0.25, 0.5, 1.0, 2.0, 3.9, 4.1)}
    assert at[1.0] == pytest.approx(2.0 + 4 ** -0.5)
    assert min(v for v in at.values() if v is not None) == at[1.0]
    assert at[0.5] == pytest.approx(at[2.0]) and at[4.1] is None
    # The seed noise is fixed by the point: the same draw every time, another seed another draw.
    a = final_loss(PRE, x, star, 0, 0.01, "pre")
    assert a == final_loss(PRE, x, star, 0, 0.01, "pre") != final_loss(PRE, x, star, 1, 0.01, "pre")
    failing = PRE.model_copy(update={"fails_above": 2.0})
    assert final_loss(failing, 2.0, 0.014, 0, 0.0, "pre") is not None
    assert final_loss(failing, 4.0, star, 0, 0.0, "pre") is None
    stalling = PRE.model_copy(update={"stall_below": 0.1, "stall_loss": 5.0})
    assert final_loss(stalling, x, star * 0.05, 0, 0.0, "pre") == 5.0


def cell(steps: int = 100) -> SimulatedCell:
    return SimulatedCell(method="pre", x=4.0, steps=steps, tokens_per_step=64, flops_per_token=1e6, params=1000,
                         params_nonembed=500, vocab=256)


def spec(lrs: list[float], **train) -> TrialSpec:
    return TrialSpec(model=ModelConfig(width=32, depth=4, n_heads=2, vocab=256, seq_len=16),
                     train=TrainConfig(**{"steps": 100, "batch_size": 4, "report_every": 10, "eval_every": 50,
                                          "checkpoint_every": 40, **train}),
                     lrs=lrs, point_ids=[f"pre/L4/s0/lr={lr:g}" for lr in lrs])


def run(lrs, start=None, surf=None):
    reports, slept = [], []
    results = simulate_trial(spec(lrs), cell(), surf or surface(), {"CPU": 1.0, "GPU": 0.25},
                             report=lambda r, state: reports.append((r, state)), sleep=slept.append,
                             clock=lambda: 0.0, start=start)
    return results, reports, slept


def test_a_simulated_trial_reports_checkpoints_and_sleeps_its_flops():
    results, reports, slept = run([0.01, 0.005, 0.08])
    assert [r.outcome for r in results] == ["ok", "ok", "diverged"]
    assert results[0].loss == pytest.approx(2.5) and results[1].loss == pytest.approx(2.5 + 0.05 * math.log(2) ** 2)
    assert results[2].diverged_step == 5 and results[2].corpus.startswith("simulated:")
    steps = [r.step for r, _ in reports]
    assert steps == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100] and reports[-1][0].done
    assert [r.step for r, state in reports if state] == [40, 80]
    evaluated = [r.step for r, _ in reports if r.members[0].eval_loss is not None]
    assert evaluated == [50, 100]
    assert reports[1][0].members[2].state == "diverged"
    # Time: members still training x steps x tokens x FLOPs per token / (throughput x GPU share) / compression;
    # the diverged member stops costing once it has diverged (step 5: within the first interval).
    rate = 1e9 * 0.25
    assert rate_of(surface(), {"GPU": 0.25}) == rate
    expected = (3 * 10 + 2 * 90) * 64 * 1e6 / rate
    assert sum(slept) * 10.0 == pytest.approx(expected) and results[0].train_seconds == pytest.approx(expected)


def test_a_resumed_trial_continues_from_its_checkpoint_and_ends_with_the_same_results():
    whole, reports, _ = run([0.01, 0.02])
    state = next(s for _, s in reports if s)  # the step-40 checkpoint
    resumed, later, slept = run([0.01, 0.02], start=state)
    assert [r.to_dict() for r in resumed] == [r.to_dict() for r in whole]
    assert later[0][0].step == 50 and len(slept) == 6


def test_a_trial_whose_members_all_diverged_stops_there_as_a_real_one_does():
    results, reports, slept = run([0.08, 0.1])  # both above the cliff (4 x lr* = 0.04): diverged in the first 10 steps
    assert [r.outcome for r in results] == ["diverged", "diverged"]
    assert all(r.diverged_step is not None and r.diverged_step <= 10 for r in results)
    assert [(r.step, r.done) for r, _ in reports] == [(10, False), (10, True)]  # one interval, then its end
    assert len(slept) == 1


def test_reports_closer_than_min_report_seconds_are_coalesced_and_checkpoints_too():
    """Each 10-step interval takes 10 wall seconds; at most one report per 45 s, but evaluations and the end
    always report, and a checkpoint is written when 45 s have passed since the last one."""
    wall = [0.0]
    reports = []

    def sleep(seconds: float) -> None:
        wall[0] += 10.0

    simulate_trial(spec([0.01]), cell(), surface(min_report_seconds=45.0), {"CPU": 1.0},
                   report=lambda r, s: reports.append((r.step, s is not None)), sleep=sleep, clock=lambda: wall[0])
    # step 40's checkpoint comes 40 s after the start: coalesced; step 80's, 80 s after: written
    assert reports == [(50, False), (80, True), (100, False)]


def test_surface_file_errors_name_the_file_and_line(tmp_path):
    from sweeper.core.errors import UserError
    from sweeper.sim.simulation import load_surface

    bad = tmp_path / "s.yaml"
    bad.write_text("name: s\nmethods:\n  pre: {E: 2.0, A: 1.0, alpha: 0.5, lr_k: 0.02, lr_b: -0.5, clif: 3}\n")
    with pytest.raises(UserError, match=r"s.yaml:3: methods.pre.clif"):
        load_surface(bad)
    with pytest.raises(UserError, match="no such file"):
        load_surface(tmp_path / "none.yaml")
    assert load_surface("sweeps/surfaces/study.yaml").methods.keys() == {"pre", "post", "peri", "lns", "deepnet",
                                                                         "layerrope"}


def test_concurrency_auto_lets_ray_pack_mixed_fractions():
    from sweeper.core.errors import UserError
    from sweeper.run.tune_session import auto_concurrency

    pool = {"CPU": 1024.0, "GPU": 8.0}
    cells = [{"CPU": 2.0, "GPU": 0.125}, {"CPU": 2.0, "GPU": 0.25}, {"CPU": 2.0, "GPU": 0.5}]
    assert auto_concurrency(cells, pool) == 64  # the 0.125-GPU cells could fill the pool; Ray admits what fits
    assert auto_concurrency([{"CPU": 1.0}], {"CPU": 2.0}) == 2
    assert auto_concurrency([{"CPU": 1.0, "GPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}], {"CPU": 8.0, "GPU": 2.0}) == 2
    with pytest.raises(UserError, match="asks for"):
        auto_concurrency([{"CPU": 1.0, "GPU": 4.0}], {"CPU": 8.0, "GPU": 2.0})


def test_gpu_probe_integrates_the_gpus_held():
    from sweeper.sim.simulation import GpuProbe

    probe = GpuProbe(pool_gpus=8.0)
    probe.sample(0.0, 8.0, 10.0)  # saturated, all held
    probe.sample(10.0, 6.0, 9.0)  # saturated, 6 of 8 held
    probe.sample(20.0, 2.0, 2.0)  # too few cells open
    probe.sample(30.0, 0.0, 0.0)
    figures = probe.figures(compression=360.0)
    assert figures["gpu_utilisation"] == pytest.approx((80 + 60 + 20) / (8 * 30))
    assert figures["gpu_utilisation_while_saturated"] == pytest.approx(140 / 160)
    assert figures["simulated_gpu_hours"] == pytest.approx(160 * 360 / 3600)


def test_a_device_shared_by_trials_time_slices_and_a_lone_trial_runs_at_its_demand():
    from sweeper.sim.devices import demand, shared_rate

    # solo_speedup 1 (the default): a 0.125-GPU trial gets an eighth of the device, alone or packed.
    assert demand(0.125, 1.0) == 0.125 and shared_rate(8.0, 0.125, 8 * 0.125) == pytest.approx(1.0)
    # 2: alone it runs at a quarter; four share a device without slowing; eight packed run at an eighth.
    assert demand(0.125, 2.0) == 0.25 and shared_rate(8.0, 0.25, 0.25) == pytest.approx(2.0)
    assert shared_rate(8.0, 0.25, 4 * 0.25) == pytest.approx(2.0)
    assert shared_rate(8.0, 0.25, 8 * 0.25) == pytest.approx(1.0)
    assert demand(0.5, 4.0) == 1.0  # never more than the whole device


def seat(root, trial, device, demand_, clock):
    from sweeper.sim.devices import Seat

    return Seat(root, trial, device, demand_, throughput=8.0, launch=0, compression=100.0, clock=clock)


def test_seats_give_each_trial_its_devices_load_and_a_gone_trial_stops_counting(tmp_path):
    from sweeper.sim.devices import STALE_SECONDS, device_load, prepare

    now = [1000.0]
    assert prepare(tmp_path) == 0
    root = tmp_path / "simulation"
    a, b, c = (seat(root, t, d, 0.5, lambda: now[0]) for t, d in (("a", 0), ("b", 0), ("c", 1)))
    for s in (a, b, c):
        s.join()
    assert device_load(root, 0, now[0]) == 1.0 and device_load(root, 1, now[0]) == 0.5
    assert a.rate() == pytest.approx(4.0)  # 0.5 of the device: its turns and b's fill it exactly
    third = seat(root, "d", 0, 0.5, lambda: now[0])
    third.join()
    assert a.rate() == pytest.approx(8.0 * 0.5 / 1.5)  # three on device 0: each slowed by the third
    third.leave()
    assert a.rate() == pytest.approx(4.0)
    now[0] += STALE_SECONDS + 1  # b and c stop refreshing (killed); a's rate() refreshes a's own seat
    assert a.rate() == pytest.approx(4.0) and device_load(root, 0, now[0]) == 0.5
    # the next launch clears what the killed one left and logs under the next index
    assert prepare(tmp_path) == 1 and not list((root / "devices").glob("*.json"))


def test_busy_and_compute_fractions_over_the_first_day_follow_the_logged_spans(tmp_path):
    """Two launches of one sweep on 2 devices at 3600x (a wall second is a simulated hour): the
    second launch's clock continues where the first stopped; a trial the kill cut off ends with its launch."""
    from sweeper.sim.devices import BUSY_LOG, busy_figures, read_log, spans

    def line(launch, wall, trial, device, demand_, event):
        return json.dumps({"launch": launch, "compression": 3600.0, "wall": wall, "trial": trial, "device": device,
                           "demand": demand_, "event": event})

    root = tmp_path / "simulation"
    root.mkdir()
    (root / BUSY_LOG).write_text("\n".join([
        line(0, 100.0, "a", 0, 0.25, "start"), line(0, 100.0, "b", 0, 0.25, "start"),
        line(0, 110.0, "a", 0, 0.25, "end"),
        line(0, 120.0, "c", 1, 0.5, "start"),  # then the kill
        # launch 1, much later in wall time: its clock starts at simulated hour 20
        line(1, 5000.0, "b", 0, 0.25, "start"), line(1, 5010.0, "b", 0, 0.25, "end"),
        line(1, 5010.0, "d", 1, 1.0, "start"), line(1, 5030.0, "d", 1, 1.0, "end"),
    ]) + "\n")
    got = sorted((s.device, s.start / 3600, s.end / 3600) for s in spans(read_log(root / BUSY_LOG)))
    # b and c of launch 0 never ended: they end with their launch's last event (wall 120: hour 20)
    assert got == [(0, 0.0, 10.0), (0, 0.0, 20.0), (0, 20.0, 30.0), (1, 20.0, 20.0), (1, 30.0, 50.0)]
    figures = busy_figures(tmp_path, pool_gpus=2)
    # first 24 h: device 0 busy 0-24 (24 h), device 1 busy 20-20 (0) ... and 30-50 beyond the day
    assert figures["gpu_busy_fraction_first_day"] == pytest.approx(24 / 48)
    # compute: device 0 holds 0.5 for 10 h, then 0.25 until 24 h
    assert figures["gpu_compute_fraction_first_day"] == pytest.approx((0.5 * 10 + 0.25 * 14) / 48)
    assert figures["busy_log_hours"] == pytest.approx(50.0)
    assert figures["gpu_busy_fraction"] == pytest.approx((30 + 20) / 100)
    assert figures["gpu_compute_fraction"] == pytest.approx((0.5 * 10 + 0.25 * 10 + 0.25 * 10 + 1.0 * 20) / 100)
