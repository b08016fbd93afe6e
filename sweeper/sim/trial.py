"""A simulated trial: reports a planted surface's losses on the clock of a real one, without training.

`sweeper launch SWEEP.yaml --simulate SURFACE.yaml` runs the real controller (Ray Tune, ledger,
store, resume) with this trainable in place of `trials.ray_entry.trainable`. A trial sleeps
each report interval's simulated duration (`sweeper.sim.surface`: FLOPs over its share of the
pool's throughput, over the time compression), reports `StepReport`s at the sweep's
`report_every` (intervals shorter than the surface's `min_report_seconds` of wall time are
coalesced into the next report; evaluations, checkpoints and the end always report),
checkpoints at `checkpoint_every` but no more often than every `min_report_seconds` of wall time
(a restored trial continues from its last checkpoint's step: a kill costs at most that much wall
time again) and ends with one `PointResult` per member. Losses and divergence steps depend on the
point alone, so a killed and resumed simulation ends with the results of an uninterrupted one.

`simulate_trial` is the loop, with the clock and the sink passed in (tested without Ray);
`simulated_trainable` is the Ray Tune function trainable around it. On a GPU of the virtual pool it
takes a seat on its device (`sweeper.sim.devices`) and lets its training time pass on the pool's
clock (`sweeper.sim.clock.Training`: the seconds the pool waits for the orchestration count as the
seconds they are, and those the trial spends in its reports are made up from its next intervals). A
trial whose members have all diverged stops, as a real one does. No torch.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trials.spec import MemberReport, PointResult, StepReport, TrialSpec
from sweeper.sim.clock import PoolClock, Training
from sweeper.sim.devices import BUSY_LOG, Seat, demand
from sweeper.sim.surface import Surface, SurfaceMethod, diverged_step, final_loss, loss_at


@dataclass(frozen=True)
class SimulatedCell:
    """What a simulated trial needs to know about its cell (the planner's figures)."""

    method: str
    x: float
    steps: int
    tokens_per_step: int
    flops_per_token: float
    params: int
    params_nonembed: int
    vocab: int
    gpu: float = 0.0  # the GPU fraction the cell declares (its trials' demand: `sweeper.sim.devices`)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rate_of(surface: Surface, resources: dict[str, float]) -> float:
    """Training FLOP/s of a trial holding these Ray resources."""
    gpu = float(resources.get("GPU") or 0.0)
    if gpu > 0:
        return surface.throughput * gpu
    return surface.cpu_throughput * max(1.0, float(resources.get("CPU") or 1.0))


def simulate_trial(spec: TrialSpec, cell: SimulatedCell, surface: Surface, resources: dict[str, float], *,
                   report: Callable[[StepReport, dict[str, Any] | None], None],
                   sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                   start: dict[str, Any] | None = None, rate: Callable[[], float] | None = None,
                   finishing: Callable[[], None] | None = None,
                   pause: Callable[[float], None] | None = None) -> list[PointResult]:
    """Run one simulated trial from `start` (a checkpoint's state, or the beginning); `report(r, state)`
    receives every report, with the state to checkpoint when one is due (else None). `rate`: the
    trial's FLOP/s, asked before every report interval (its device's load changes as trials come
    and go; default: its share of the pool, `rate_of`); `finishing`: called when the training is
    done, before the final report (the trial leaves its device); `pause(seconds)`: lets an interval's
    simulated training time pass (default: `sleep` of it over the time compression)."""
    method: SurfaceMethod = surface.methods[cell.method]
    n, lrs, ids = cell.steps, spec.lrs, spec.point_ids
    init = surface.init_loss or math.log(cell.vocab)
    finals = [final_loss(method, cell.x, lr, spec.seed, surface.noise, f"{cell.method}") for lr in lrs]
    outside = [method.outside_table(cell.x, lr) for lr in lrs]  # a table's unrecorded LRs: failed points
    valley = [method.valley_loss(cell.x, lr) for lr in lrs]
    broken = [None if f is not None or why else diverged_step(method, cell.x, lr, n)
              for f, lr, why in zip(finals, lrs, outside)]
    fixed_rate = rate_of(surface, resources)
    rate_now = rate or (lambda: fixed_rate)
    wait = pause or (lambda simulated: sleep(simulated / surface.time_compression))
    train = spec.train
    step = int((start or {}).get("step", 0))
    seconds = float((start or {}).get("sim_seconds", 0.0))
    last_report = last_checkpoint = clock()

    def members(at: int, evaluated: bool) -> list[MemberReport]:
        out = []
        for lr, pid, final, start_loss, gone, why in zip(lrs, ids, finals, valley, broken, outside):
            if why is not None:  # nothing to report until its result says it failed
                out.append(MemberReport(lr, pid, None, None, "running", reason=why))
                continue
            if gone is not None and at >= gone:
                out.append(MemberReport(lr, pid, None, None, "diverged", gone, "simulated: above the divergence cliff"))
                continue
            now = loss_at(final if final is not None else start_loss, init, at / n, surface.curve)
            state = "ok" if at >= n else "running"
            out.append(MemberReport(lr, pid, now, now if evaluated else None, state))
        return out

    while step < n:
        nxt = min(n, step + train.report_every)
        active = sum(1 for gone, why in zip(broken, outside) if why is None and (gone is None or gone > step))
        if not active:  # every member diverged (or is outside its table): a trial stops, as a real one does
            break
        duration = active * (nxt - step) * cell.tokens_per_step * cell.flops_per_token / rate_now()
        wait(duration)
        seconds += duration
        # at compression a checkpoint_every can be a fraction of a wall second: each costs a synchronous
        # round trip through Tune's storage, which the trial's training time cannot absorb
        crossed_checkpoint = (nxt // train.checkpoint_every > step // train.checkpoint_every
                              and clock() - last_checkpoint >= surface.min_report_seconds)
        evaluated = nxt // train.eval_every > step // train.eval_every or nxt == n
        step = nxt
        if step >= n:
            break
        if crossed_checkpoint or evaluated or clock() - last_report >= surface.min_report_seconds:
            state = {"step": step, "sim_seconds": seconds} if crossed_checkpoint else None
            report(StepReport(step, step * cell.tokens_per_step, seconds, members(step, evaluated), False), state)
            last_report = clock()
            if crossed_checkpoint:
                last_checkpoint = last_report
    if finishing is not None:
        finishing()
    results = []
    for lr, pid, final, gone, why in zip(lrs, ids, finals, broken, outside):
        if why is not None:
            results.append(PointResult(
                point_id=pid, lr=lr, outcome="failed", loss=None, objective=None, accuracy=None, init_loss=init,
                diverged_step=None, reason=why, steps=0, tokens=0, train_seconds=0.0,
                corpus=f"simulated:{surface.fingerprint()}", params=cell.params, params_nonembed=cell.params_nonembed,
                flops_per_token=cell.flops_per_token,
            ))
            continue
        ok = gone is None
        results.append(PointResult(
            point_id=pid, lr=lr, outcome="ok" if ok else "diverged", loss=final if ok else None,
            objective=final if ok else None, accuracy=None, init_loss=init, diverged_step=gone,
            reason=None if ok else "simulated: above the divergence cliff", steps=n if ok else int(gone or 0),
            tokens=(n if ok else int(gone or 0)) * cell.tokens_per_step, train_seconds=seconds,
            corpus=f"simulated:{surface.fingerprint()}", params=cell.params, params_nonembed=cell.params_nonembed,
            flops_per_token=cell.flops_per_token,
        ))
    last = n if step >= n else step
    report(StepReport(last, last * cell.tokens_per_step, seconds, members(last, True), True, results=results), None)
    return results


def simulated_trainable(config: dict[str, Any], simulation: dict[str, Any] | None = None) -> None:
    """The Ray Tune function trainable of `--simulate` (bound with `tune.with_parameters`)."""
    from ray import tune  # the Ray worker has it; this module stays importable without Ray

    assert simulation is not None, "bind the simulation with tune.with_parameters(simulated_trainable, simulation=...)"
    surface = Surface.model_validate(simulation["surface"])
    cell = SimulatedCell(**simulation["cells"][config["cell_id"]])
    spec = TrialSpec.from_dict(config["spec"])
    start = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads((Path(folder) / "state.json").read_text())

    def send(report: StepReport, state: dict[str, Any] | None) -> None:
        if state is None:
            tune.report(report.metrics())
            return
        folder = Path(tempfile.mkdtemp(prefix="sim-ckpt-"))
        try:
            (folder / "state.json").write_text(json.dumps(state))
            tune.report(report.metrics(), checkpoint=tune.Checkpoint.from_directory(str(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    resources = dict(config.get("resources") or {})
    seat = device_seat(simulation, cell, surface, resources, tune.get_context().get_trial_id())
    if seat is None:
        simulate_trial(spec, cell, surface, resources, report=send, start=start)
        return
    seat.join()
    training = Training(PoolClock(seat.root / BUSY_LOG, seat.launch, seat.compression))
    training.start()
    try:
        simulate_trial(spec, cell, surface, resources, report=send, start=start, rate=seat.rate,
                       finishing=seat.leave, pause=training.pause)
    finally:
        seat.leave()


def device_seat(simulation: dict[str, Any], cell: SimulatedCell, surface: Surface, resources: dict[str, float],
                trial_id: str | None) -> Seat | None:
    """The trial's seat on the GPU Ray gave it (None: a CPU trial, or a payload without a busy log)."""
    import ray  # as above

    clock = simulation.get("clock")
    if not clock or not float(resources.get("GPU") or 0.0) > 0:
        return None
    ids = ray.get_gpu_ids()
    if not ids:
        return None
    declared = cell.gpu or float(resources.get("GPU") or 0.0)
    return Seat(Path(clock["dir"]), str(trial_id or uuid.uuid4().hex), int(float(ids[0])),
                demand(declared, surface.sharing.solo_speedup), surface.throughput, int(clock["launch"]),
                float(surface.time_compression), share=float(resources.get("GPU") or 0.0))
