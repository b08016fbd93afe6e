"""The pool's clock (`sweeper.sim.clock`): the seconds the pool waits for the orchestration count at 1×, the
policy's own idling at the compression, in full. Busy logs written by the real writers (`Seat`, `DriverLog`)
with a hand-driven wall clock; no Ray."""

from __future__ import annotations

import pytest

from sweeper.sim.clock import LATENCY_CAP, LaunchClock, PoolClock, Training
from sweeper.sim.devices import BUSY_LOG, DriverLog, Seat, busy_figures, prepare, read_log, spans

HOUR = 3600.0  # the compression of these logs: a wall second is a simulated hour


class Pool:
    """A 2-GPU pool's busy log, written line by line by the driver's and the trials' real writers."""

    def __init__(self, tmp_path, gpus: int = 2) -> None:
        self.dir = tmp_path
        self.launch = prepare(tmp_path)
        self.root = tmp_path / "simulation"
        self.now = 0.0
        self.driver = DriverLog(self.root, self.launch, HOUR, gpus, clock=lambda: self.now)
        self.seats: dict[str, Seat] = {}

    def at(self, wall: float) -> Pool:
        self.now = wall
        return self

    def propose(self, trial: str, share: float) -> None:
        self.driver.proposed(trial, share)

    def start(self, trial: str, device: int, share: float) -> None:
        seat = Seat(self.root, trial, device, share, throughput=1.0, launch=self.launch, compression=HOUR,
                    clock=lambda: self.now, share=share)
        seat.join()
        self.seats[trial] = seat

    def end(self, trial: str) -> None:
        self.seats.pop(trial).leave()

    def done(self, trial: str) -> None:
        self.driver.ended(trial)

    def spans(self) -> list[tuple[int, float, float]]:
        return [(s.device, s.start, s.end) for s in spans(read_log(self.root / BUSY_LOG))]


def two_trials(tmp_path, next_proposed_at: float) -> Pool:
    """Trial a trains 10 simulated hours on GPU 0, then b 10 hours on GPU 1; b is proposed at
    `next_proposed_at` (wall) and starts at wall 20. Ray takes 2 wall seconds to start a, the driver
    half a second to process each end."""
    pool = Pool(tmp_path)
    pool.at(0.0).propose("a", 0.5)
    pool.at(2.0).start("a", 0, 0.5)
    pool.at(12.0).end("a")
    pool.at(12.5).done("a")
    pool.at(next_proposed_at).propose("b", 0.5)
    pool.at(20.0).start("b", 1, 0.5)
    pool.at(30.0).end("b")
    pool.at(30.5).done("b")
    return pool


def test_idle_with_nothing_proposed_counts_in_full_and_idle_with_a_trial_waiting_to_start_at_wall_speed(tmp_path):
    # The policy holds b back until wall 20 (it is proposed when it can start): the 7.5 wall seconds in which
    # both GPUs sit idle with nothing proposed are 7.5 simulated hours of idle pool, in full.
    held = two_trials(tmp_path / "held", next_proposed_at=20.0)
    latency = 2 + 0.5  # a's start, a's end processed: seconds of the pool waiting for the orchestration
    assert held.spans() == [(0, pytest.approx(2.0), pytest.approx(2.0 + 10 * HOUR)),
                            (1, pytest.approx(latency + 17.5 * HOUR), pytest.approx(latency + 27.5 * HOUR))]
    figures = busy_figures(held.dir, pool_gpus=2)
    total = latency + 27.5 * HOUR  # to the last trial's end
    assert figures["busy_log_hours"] == pytest.approx(total / HOUR)
    assert figures["gpu_busy_fraction_first_day"] == pytest.approx((10 + 6.5) / (2 * 24), rel=1e-3)  # a, b until 24 h
    assert figures["gpu_busy_fraction"] == pytest.approx(20 * HOUR / (2 * total))
    # The same sweep with b proposed as soon as a's end was processed: the 7.5 wall seconds until Ray starts
    # it are the orchestration's (a free GPU holds it), at 1×; the pool is busy all but seconds of 20 hours.
    queued = two_trials(tmp_path / "queued", next_proposed_at=12.5)
    assert queued.spans() == [(0, pytest.approx(2.0), pytest.approx(2.0 + 10 * HOUR)),
                              (1, pytest.approx(10.0 + 10 * HOUR), pytest.approx(10.0 + 20 * HOUR))]
    figures = busy_figures(queued.dir, pool_gpus=2)
    assert figures["busy_log_hours"] == pytest.approx((10.0 + 20 * HOUR) / HOUR)
    assert figures["gpu_busy_fraction"] == pytest.approx(20 * HOUR / (2 * (10.0 + 20 * HOUR)))
    assert figures["gpu_busy_fraction"] > 0.49  # one trial at a time on 2 GPUs: half, less the seconds


def test_a_trial_waiting_for_room_waits_on_the_compressed_clock_and_for_start_up_at_wall_speed(tmp_path):
    """One GPU, held whole by a; b is proposed while a trains (no room: capacity, which a real pool waits
    for too); once a's end is processed b fits, and Ray's 3 wall seconds to start it count as 3 seconds."""
    pool = Pool(tmp_path, gpus=1)
    pool.at(0.0).propose("a", 1.0)
    pool.at(1.0).start("a", 0, 1.0)
    pool.at(2.0).propose("b", 0.5)
    pool.at(6.0).end("a")
    pool.at(6.2).done("a")
    pool.at(9.2).start("b", 0, 0.5)
    pool.at(10.2).end("b")
    pool.at(10.2).done("b")
    assert pool.spans() == [(0, pytest.approx(1.0), pytest.approx(1.0 + 5 * HOUR)),
                            (0, pytest.approx(4.2 + 5 * HOUR), pytest.approx(4.2 + 6 * HOUR))]


def test_a_trial_the_driver_stops_leaves_after_its_end_was_processed_and_holds_nothing(tmp_path):
    """Every point of a trains diverged early: the driver processes its end and Tune stops it, so its seat's
    end line comes after the driver's; nothing is left waiting for the driver."""
    pool = Pool(tmp_path, gpus=1)
    pool.at(0.0).propose("a", 1.0)
    pool.at(0.0).start("a", 0, 1.0)
    pool.at(1.0).done("a")
    pool.at(1.01).end("a")
    pool.at(11.01).propose("b", 1.0)  # the policy proposes the next trial 10 wall seconds later
    pool.at(11.01).start("b", 0, 1.0)
    pool.at(12.01).end("b")
    assert pool.spans() == [(0, 0.0, pytest.approx(1.01 * HOUR)), (0, pytest.approx(11.01 * HOUR),
                                                                    pytest.approx(12.01 * HOUR))]


def test_a_wait_counts_at_wall_speed_for_at_most_the_cap_and_old_logs_read_as_before():
    clock = LaunchClock(HOUR)
    clock.feed({"wall": 0.0, "trial": "x", "event": "proposed", "share": 0.25, "gpus": 1})  # never starts
    assert clock.frozen(1.0) and clock.at(LATENCY_CAP) == pytest.approx(LATENCY_CAP)
    assert not clock.frozen(LATENCY_CAP + 1)
    assert clock.at(LATENCY_CAP + 2) == pytest.approx(LATENCY_CAP + 2 * HOUR)
    # a log without the driver's lines (written before the pool's clock): wall time x compression
    old = LaunchClock(HOUR)
    assert old.feed({"wall": 5.0, "trial": "a", "device": 0, "demand": 0.25, "event": "start"}) == 0.0
    assert old.feed({"wall": 7.0, "trial": "a", "device": 0, "demand": 0.25, "event": "end"}) == 2 * HOUR


def test_a_trial_reads_the_clock_live_and_makes_up_the_time_its_reports_took(tmp_path):
    """`PoolClock` tails the log as a trial does; `Training` schedules each interval from the last deadline."""
    pool = Pool(tmp_path, gpus=1)
    pool.at(0.0).propose("a", 1.0)
    pool.at(1.0).start("a", 0, 1.0)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        pool.now += seconds

    clock = PoolClock(pool.root / BUSY_LOG, pool.launch, HOUR, wall=lambda: pool.now, sleep=sleep)
    assert clock.now() == pytest.approx(1.0)  # the second Ray took to start a, at 1x
    training = Training(clock)
    training.start()
    training.pause(2 * HOUR)
    assert pool.now == pytest.approx(3.0) and slept == [pytest.approx(2.0)]
    pool.now += 0.5  # the trial's report: half a wall second in Tune's round trip
    training.pause(2 * HOUR)  # its next two hours end two hours after the first two did, not 2.5
    assert pool.now == pytest.approx(5.0) and clock.now() == pytest.approx(1.0 + 4 * HOUR)
    # another trial proposed to a pool without room: no wait for the orchestration, the clock runs on
    pool.at(5.0).propose("b", 0.5)
    training.pause(1 * HOUR)
    assert pool.now == pytest.approx(6.0)
    # a trial waiting to start while a device has room holds the clock at 1x: a trial's hour takes longer
    pool.end("a")
    pool.done("a")  # processed at once; now b fits
    pool.start("c", 0, 0.25)  # a restored trial (never proposed) taking a quarter: b still fits beside it
    training = Training(clock)
    training.start()

    def start_b_at_8(seconds: float) -> None:
        sleep(seconds)
        if pool.now >= 8.0 and "b" not in pool.seats:
            pool.start("b", 0, 0.5)

    clock.sleep = start_b_at_8
    training.pause(1 * HOUR)
    # Ray took 2 wall seconds to start b: 2 simulated seconds of c's hour, the rest compressed
    assert pool.now == pytest.approx(8.0 + (HOUR - 2.0) / HOUR, abs=0.06)
