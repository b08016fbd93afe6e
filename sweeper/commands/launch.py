"""`sweeper launch SWEEP.yaml [KEY=VALUE ...] [--address ADDR] [--dry-run]`: run (or resume, or extend) a sweep.

`KEY=VALUE` overrides (`train.steps=400`) are set on the file before it is validated, and are
recorded in the sweep directory (its manifest and YAML copy): a relaunch without them applies the
recorded ones, so it resumes the same sweep; a relaunch that changes one is a change of settings,
refused like an edit of the file for cells that have results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format, add_out, add_overrides, add_wide, plural
from sweeper.core.errors import UserError

DEFAULT_THROUGHPUT = 2e14  # FLOP/s per GPU for --dry-run estimates: ~25% of an H100/H200's dense bf16 peak
DEFAULT_CPU_THROUGHPUT = 2e10  # FLOP/s per CPU core (sweeper.search.cost)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "launch",
        help="run a sweep (relaunch the same YAML to resume; add methods, sizes or seeds to extend it)",
        description=(
            "Run every cell's learning-rate sweep until its optimum is bracketed. Relaunching the same YAML "
            "resumes: finished points are never retrained and in-flight trials continue from their checkpoints."
        ),
    )
    parser.add_argument("file", help="the sweep YAML file")
    add_overrides(parser)
    parser.add_argument("--address",
                        help="join an existing Ray cluster: 'auto' or HOST:PORT (the head's GCS port, 6379), from the "
                             "head node or a machine inside the cluster's network; ray:// (Ray Client) is refused: "
                             "Ray Tune would run this sweep's recorder on the head. Every node's access to the "
                             "storage is checked first (sweeper doctor)")
    add_out(parser, "the sweep directory (default: the YAML's `output`, else runs/NAME)", aliases=("--output",),
            metavar="DIR")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (cells, grids, FLOPs, GPU-hours) and exit")
    parser.add_argument("--throughput", type=float, default=DEFAULT_THROUGHPUT,
                        help=f"FLOP/s per GPU that --dry-run assumes for shapes `sweeper bench` has not measured "
                             f"(default {DEFAULT_THROUGHPUT:.0e})")
    parser.add_argument("--cpu-throughput", type=float, default=DEFAULT_CPU_THROUGHPUT,
                        help=f"FLOP/s per CPU core that --dry-run assumes for CPU trials `sweeper bench` has not "
                             f"measured (default {DEFAULT_CPU_THROUGHPUT:.0e})")
    parser.add_argument("--pool", type=float, metavar="N",
                        help="--dry-run: the GPUs (CPUs for a CPU-only sweep) its wall-time estimate assumes (default: ray.num_gpus, else 8 GPUs "
                             "for a GPU sweep; ray.num_cpus, else 2 CPUs for a CPU sweep)")
    parser.add_argument("--retry-failed", action="store_true", help="run failed points again")
    parser.add_argument("--simulate", metavar="SURFACE.yaml",
                        help="run the real controller with simulated trials that report a planted loss surface on a "
                             "virtual GPU pool (sweeps/surfaces/study.yaml); the sweep directory is marked simulated")
    parser.add_argument("--virtual-gpus", type=int, metavar="N",
                        help="with --simulate: the virtual pool's GPU count (overrides the surface's pool.gpus)")
    parser.add_argument("--time-compression", type=float, metavar="X",
                        help="with --simulate: simulated seconds per wall second (overrides the surface's)")
    add_format(parser)
    add_wide(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.time()
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.spec.schema import load_sweep

    for flag, value in (("--throughput", args.throughput), ("--cpu-throughput", args.cpu_throughput),
                        ("--pool", args.pool)):
        if value is not None and not value > 0:
            raise UserError(f"{flag}: must be > 0 (got {value:g})")
    validated = load_sweep(args.file, need_data=not (args.dry_run or args.simulate), overrides=args.overrides)
    from sweeper.records.table import labelled, make_console  # a bad file is refused before these load
    from sweeper.search.planner import build_plan

    console = make_console(stderr=args.json)
    plan = build_plan(validated.config, output=args.out, source=Path(args.file))
    recorded = recorded_overrides(plan.sweep_dir)
    if recorded and not set(recorded) <= set(validated.overrides):
        from sweeper.spec.overrides import merge_texts  # (see above)

        merged = merge_texts(recorded, validated.overrides)
        kept = [o for o in merged if o not in validated.overrides]
        console.print(f"overrides recorded in {plan.sweep_dir} applied: {' '.join(kept)}", highlight=False)
        validated = load_sweep(args.file, need_data=not args.dry_run, overrides=merged)
        plan = build_plan(validated.config, output=args.out, source=Path(args.file))
    plan.overrides, plan.document = validated.overrides, validated.document
    for warning in validated.warnings:
        console.print(labelled("warning:", warning), highlight=False, soft_wrap=True)
    from sweeper.run.machine import checked_memory  # (see above)

    memory = checked_memory(plan)  # stack: auto refuses a cell that cannot fit one member
    if args.dry_run:
        return dry_run(plan, args.throughput, as_json=args.json, console=console, memory=memory,
                       cpu_throughput=args.cpu_throughput, pool=args.pool, wide=args.wide)
    from sweeper.run.launch import launch  # Ray, Optuna and the trial code: only to run the sweep

    simulation = None
    if args.simulate:
        # start-up time: imported when used, not on every CLI start
        from sweeper.sim.simulation import Simulation, load_surface

        surface = load_surface(args.simulate)
        if args.virtual_gpus is not None:
            if args.virtual_gpus < 1:
                raise UserError(f"--virtual-gpus: must be >= 1 (got {args.virtual_gpus})")
            surface.pool.gpus = args.virtual_gpus
        if args.time_compression is not None:
            if not args.time_compression > 0:
                raise UserError(f"--time-compression: must be > 0 (got {args.time_compression:g})")
            surface.time_compression = args.time_compression
        simulation = Simulation(surface, args.simulate)
    elif args.virtual_gpus is not None or args.time_compression is not None:
        raise UserError("--virtual-gpus and --time-compression go with --simulate SURFACE.yaml")

    # With --json, stdout carries the summary only: Ray's driver-side listener prints cluster events
    # ("(raylet) A worker died ...") to whatever sys.stdout is, which made the output unparseable
    # exactly when a trial process died. They go to stderr, beside the live display.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        summary = launch(plan, address=args.address, retry_failed=args.retry_failed, console=console, started=started,
                         simulation=simulation)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, default=str))
    else:
        print_summary(summary, console)
        if not summary.interrupted and plan.config.next:
            console.print(labelled("then:", plan.config.next.strip(), style="bold"), highlight=False)
    return 130 if summary.interrupted else 0


def recorded_overrides(sweep_dir: Path) -> list[str]:
    """The overrides an earlier launch recorded in the sweep directory's manifest (none for a new sweep)."""
    from sweeper.records.manifest import is_sweep_dir, read_manifest  # start-up time: for a launch only

    if not is_sweep_dir(sweep_dir):
        return []
    try:
        return list(read_manifest(sweep_dir).overrides)
    except UserError:
        return []  # launch itself reports an unreadable manifest


def print_summary(summary: Any, console: Any) -> None:
    from rich.text import Text  # (see `run`)

    from sweeper.records.table import counts_line, labelled

    done = sum(summary.counts.values())
    verb = "stopped" if summary.interrupted else "finished"
    console.print(Text.assemble((f"Sweep {verb}", "bold"),
                                f": {counts_line(summary.counts)} ({plural(done, 'cell')}) in "
                                f"{summary.sweep_dir}"))
    ratio = f"{summary.overhead_ratio:.2f}" if summary.overhead_ratio else "—"
    if summary.simulation:  # training seconds are simulated ones: the slot-time shares below would mix clocks
        per_trial = f"{summary.driver_cpu_seconds / summary.trials:.2f}" if summary.trials else "—"
        console.print(f"wall {summary.wall_seconds:.1f} s (Ray start {summary.ray_start_seconds:.1f} s), "
                      f"{summary.trials} trials, {summary.reports} reports; driver CPU {summary.driver_cpu_seconds:.1f} s "
                      f"({per_trial} s per trial), "
                      f"peak RSS {summary.driver_peak_rss_mb:.0f} MB", highlight=False)
    else:
        console.print(
            f"wall {summary.wall_seconds:.1f} s (Ray start {summary.ray_start_seconds:.1f} s) on {summary.slots} trial "
            f"slots; training {summary.train_seconds:.1f} s summed over {summary.trials} trials = "
            f"{100 * summary.utilisation:.0f}% of the slot-time (slots x wall); "
            f"overhead ratio wall / (summed training / slots) = {ratio}",
            highlight=False,
        )
    if summary.trial_alive_seconds and not summary.simulation:
        alive = summary.trial_alive_seconds / max(1e-9, summary.wall_seconds * summary.slots)
        console.print(
            f"trials were alive {summary.trial_alive_seconds:.1f} s = {100 * alive:.0f}% of the slot-time (the rest of "
            "their time: start-up, checkpoints, reports; the rest of the slot-time: Ray start, scheduling, idle slots)",
            highlight=False,
        )
    resumed = summary.resumed
    if any(resumed.get(k) for k in ("finished", "resumed", "rerun", "retried", "infra_retried")):
        console.print(
            f"from earlier launches: {resumed.get('finished', 0)} finished points kept, "
            f"{resumed.get('resumed', 0)} resumed from checkpoints, {resumed.get('rerun', 0)} re-run, "
            f"{resumed.get('retried', 0)} failed points retried, {resumed.get('infra_retried', 0)} infra_failed "
            "points retried",
            highlight=False,
        )
    faults = getattr(summary, "infra_faults", None) or {}
    if faults:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(faults.items()))
        console.print(f"infrastructure faults (retried, never a learning rate's result): {kinds}", highlight=False)
    if summary.counts.get("infra_failed"):
        console.print(f"{summary.counts['infra_failed']} cell(s) wait for points the infrastructure failed after "
                      "their retries; relaunch the same command to train them again", highlight=False)
    sim = summary.simulation
    if sim:
        util = sim.get("gpu_utilisation")
        sat = sim.get("gpu_utilisation_while_saturated")
        console.print(labelled(
            "SIMULATED",
            f"on surface {sim['surface']} (×{sim['time_compression']:g} time compression, "
            f"{sim['pool_gpus']:g} virtual GPUs): {sim['simulated_gpu_hours']:.4g} GPU-hours held over "
            f"{sim['simulated_wall_hours']:.4g} simulated hours; GPU-slot utilisation "
            f"{'—' if util is None else f'{100 * util:.1f}%'} overall, "
            f"{'—' if sat is None else f'{100 * sat:.1f}%'} while the open cells asked for the whole pool "
            f"({100 * (sim.get('saturated_fraction_of_wall') or 0):.0f}% of the time)", style="bold"),
            highlight=False,
        )
        if sim.get("gpu_busy_fraction_first_day") is not None:
            console.print(
                f"devices busy (a trial on the GPU): {100 * sim['gpu_busy_fraction_first_day']:.1f}% of the first "
                f"{sim['first_day_hours']:.3g} simulated hours, {100 * sim['gpu_busy_fraction']:.1f}% of "
                f"{sim['busy_log_hours']:.4g}; compute in use {100 * sim['gpu_compute_fraction_first_day']:.1f}% and "
                f"{100 * sim['gpu_compute_fraction']:.1f}% (sweeper.sim.devices)", highlight=False)
    failed = {k: v for k, v in summary.counts.items() if k in ("diverged", "stalled") and v}
    if failed:
        console.print(f"{sum(failed.values())} cell(s) found no usable learning rate (every point diverged or "
                      "stalled: learned nothing beyond token frequencies); `sweeper optima` lists them, the plots "
                      "mark them as failed", highlight=False)
    if summary.interrupted:
        console.print("relaunch the same command to resume")
    else:
        console.print(f"next: sweeper optima {summary.sweep_dir}", highlight=False)


def dry_run(plan: Any, throughput: float, *, as_json: bool, console: Any, memory: Any = None,
            cpu_throughput: float = DEFAULT_CPU_THROUGHPUT, pool: float | None = None, wide: bool = False) -> int:
    from dataclasses import replace  # (see `run`)

    from rich.text import Text

    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import labelled
    from sweeper.records.throughput import sweep_state
    from sweeper.search import bench_cache
    from sweeper.search.cost import cost_plan
    from sweeper.search.memory import describe
    from sweeper.spec.lr_axis import lr_axis

    device, measured_peaks, host = memory if memory is not None else (None, None, _host_memory())
    gpu_model = device.model if device is not None else plan.config.resources.gpu_model
    if gpu_model is None and any(c.resources.get("GPU") for c in plan.cells):
        from sweeper.run.machine import local_gpu  # (see `run`): nvidia-smi, for GPU sweeps only

        gpu_model = (local_gpu() or (0, None))[1]
    state = sweep_state(plan.sweep_dir)  # a directory with results: what is done, and its own measured rates

    def swept(method: str, size: str) -> tuple[float, str] | None:
        found = state.rate_for(method, size) if state is not None else None
        return (found[0].flops_per_s, found[1]) if found is not None else None

    every = cost_plan(plan, bench_cache.load(), gpu_throughput=throughput, cpu_throughput=cpu_throughput, pool=pool,
                      host_memory=host, device=device, measured=measured_peaks, gpu_model=gpu_model,
                      cpu_model=bench_cache.cpu_model(), swept=swept)
    done = {c.cell.cell_id for c in every.cells if state is not None and state.done(c.cell.cell_id)}
    costs = replace(every, cells=[c for c in every.cells if c.cell.cell_id not in done])  # what a launch would run
    rows = []
    for c in costs.cells:
        cell, grid = c.cell, c.grid
        stack = None
        if memory is not None:
            stack = describe(cell, min(plan.config.max_stack, cell.policy.max_points), device=device,
                             host_memory_bytes=host, measured=measured_peaks)
        rows.append({
            "cell_id": cell.cell_id, "method": cell.method, "size": cell.size, "seed": cell.seed, "depth": cell.depth,
            "loops": cell.loops, "width": cell.width, "params": cell.params, "params_nonembed": cell.params_nonembed,
            "tokens_per_point": cell.tokens_per_point, "steps_per_point": cell.steps_per_point,
            "flops_per_point": cell.flops_per_token * cell.tokens_per_point, "initial_grid": grid,
            "max_points": cell.policy.max_points, "resources": cell.resources, "prior": cell.prior,
            "stack": c.stack, "stack_auto": stack, "fixed_lr": cell.policy.fixed, "trial_hours": c.trial_seconds / 3600,
            "throughput": "sweep" if c.swept else "measured" if c.measured else "assumed",
            "status": state.statuses.get(cell.cell_id) if state is not None else None,
            "sweep_flops_per_trial_s": (swept(cell.method, cell.size) or (None,))[0] if c.swept else None,
        })
    initial = sum(r["flops_per_point"] * len(r["initial_grid"]) for r in rows)
    cap = sum(r["flops_per_point"] * r["max_points"] for r in rows)
    cost = costs.to_dict()
    totals = {
        "cells": len(rows), "initial_points": sum(len(r["initial_grid"]) for r in rows),
        "initial_flops": initial, "cap_flops": cap, "throughput_flops_per_gpu": throughput,
        "sweep_dir": str(plan.sweep_dir), "stack": plan.config.stack, "concurrency": plan.config.concurrency, **cost,
        "done_cells": len(done), "new_cells": sum(state is None or r["cell_id"] not in state.statuses for r in rows),
        "done_points": state.points if state is not None else 0,
    }
    if "initial_gpu_hours" in cost:  # the cap, at the same rates as the initial grids
        totals["cap_gpu_hours"] = cost["initial_gpu_hours"] * cap / initial if initial else 0.0
    if "initial_cpu_hours" in cost:
        totals["cap_cpu_hours"] = cost["initial_cpu_hours"] * cap / initial if initial else 0.0
    axis = lr_axis((c.size, c.train.optimizer.model_dump(mode="json")) for c in plan.cells)
    if axis is not None:  # Muon: which LR the grids are (an AdamW sweep's plan is what it was)
        totals["lr_axis"] = {"label": axis.label, "note": axis.note, "adamw_lr_ratio": axis.ratios}
    if as_json:
        print(json.dumps({"cells": rows, "done": sorted(done), "totals": totals}, indent=2, default=str))
        return 0
    if state is not None and not rows:
        cells = f"all {plural(len(done), 'cell')} of this plan are" if len(done) > 1 else "the plan's one cell is"
        console.print(Text(f"{plan.config.name}: nothing left to run: {cells} finished in {plan.sweep_dir} "
                           f"({plural(state.points, 'point')} trained); a launch would change nothing. "
                           f"See `sweeper optima {plan.sweep_dir}`", style="bold"))
        return 0
    if state is not None:  # an existing sweep: what it holds, and what a launch would add
        new = totals["new_cells"]
        console.print(f"{plan.sweep_dir} already holds {plural(len(done), 'finished cell')} of this plan ({state.points} points "
                      f"trained); a launch would run the {len(rows)} below: {len(rows) - new} to continue, {new} new",
                      highlight=False)
        if new and len(state.statuses) and all(state.done(cid) for cid in state.statuses):
            console.print(labelled("warning:", f"a launch would extend the finished sweep in {plan.sweep_dir} with "
                                               f"{plural(new, 'new cell')} (the settings or overrides add them); --out DIR starts a "
                                               "separate sweep"), highlight=False)
    title = "plan of what a launch would add" if state is not None else "plan"
    table = Layout(f"{plan.config.name}: {title} (dry run, nothing is written)", [
        Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"), Col("seeds", keep=True),
        Col("params", priority=2), Col("tokens/pt", priority=3), Col("steps", priority=4), Col("FLOPs/pt", priority=3),
        Col("initial grid", priority=1, justify="left", short="grid"),
        Col("stack: auto" if memory is not None else "stack", priority=4), Col("trial h", keep=True),
        Col("resources", priority=5, justify="left")])
    seen = set()
    for r in rows:
        key = (r["method"], r["size"])
        if key in seen:
            continue
        seen.add(key)
        seeds = [x["seed"] for x in rows if (x["method"], x["size"]) == key]
        grid = r["initial_grid"]
        prior = " *" if r["prior"] == "extrapolate" else ""
        table.add_row(
            r["method"], r["size"], ",".join(map(str, seeds)), _si(r["params"]), _si(r["tokens_per_point"]),
            str(r["steps_per_point"]), f"{r['flops_per_point']:.3g}",
            (f"fixed {grid[0]:.3g}" if r["fixed_lr"] is not None else
             f"{len(grid)} × {grid[0]:.3g}–{grid[-1]:.3g}{prior}") if grid else "—",
            _stack_auto(r["stack_auto"]) if r["stack_auto"] is not None else str(r["stack"]),
            f"{r['trial_hours']:.3g}" + {"measured": "", "sweep": "‡"}.get(r["throughput"], "†"),
            ", ".join(f"{k}={_resource(k, v)}" for k, v in r["resources"].items()),
        )
    print_layout(console, table, wide=wide)
    if axis is not None:
        console.print(f"learning rates (initial grid): {axis.label}" + (f", {axis.note}" if axis.note else ""),
                      highlight=False)
    parts = []
    if "initial_gpu_hours" in cost:
        parts.append(f"{cost['initial_gpu_hours']:.3g} GPU-hours")
    if "initial_cpu_hours" in cost:
        parts.append(f"{cost['initial_cpu_hours']:.3g} CPU-hours")
    capped = [f"{totals[k]:.3g} {u}-hours" for k, u in (("cap_gpu_hours", "GPU"), ("cap_cpu_hours", "CPU")) if k in totals]
    console.print(
        f"{totals['cells']} cells, {totals['initial_points']} points in the initial grids: {initial:.3g} training FLOPs "
        f"= {' + '.join(parts)}; at most {cap:.3g} FLOPs ({' + '.join(capped)}) if every cell reached its trial cap",
        highlight=False,
    )
    unit = "GPUs" if costs.unit == "GPU" else "CPUs"
    console.print(
        f"estimated wall time of the initial grids on {costs.pool:g} {unit} (concurrency: {plan.config.concurrency}, "
        f"stack: {plan.config.stack}): {cost['wall_hours_estimate']:.3g} h (pool-bound {cost['wall_hours_pool_bound']:.3g} h, "
        f"chain-bound {cost['wall_hours_chain_bound']:.3g} h); each extension or refinement round adds about one "
        "trial per open cell (--pool N for another pool)",
        highlight=False,
    )
    measured = costs.measured_cells()
    if measured < len(costs.cells):
        rates = []
        if any(c.gpu > 0 and c.measured is None and c.swept is None for c in costs.cells):
            rates.append(f"{throughput:.3g} FLOP/s per GPU (--throughput)")
        if any(c.gpu == 0 and c.measured is None and c.swept is None for c in costs.cells):
            rates.append(f"{cpu_throughput:.3g} FLOP/s per CPU core (--cpu-throughput)")
        commands = costs.missing_commands()
        console.print(
            f"† {len(costs.cells) - measured} of {len(costs.cells)} cells at an assumed {' and '.join(rates)}: no "
            f"`sweeper bench` figure for their shape on this device model; measure with e.g. `{commands[0]}`"
            + (f" ({len(commands)} shapes)" if len(commands) > 1 else ""),
            highlight=False,
        )
    elif not costs.swept_cells():
        console.print(f"rates measured by `sweeper bench` for every cell ({bench_cache.cache_path()})", highlight=False)
    swept_cells = [c for c in costs.cells if c.swept]
    if swept_cells:
        values = sorted({float(f"{swept(c.cell.method, c.cell.size)[0]:.2g}") for c in swept_cells})  # type: ignore[index]
        span = f"{values[0]:.2g}" if len(values) == 1 else f"{values[0]:.2g} to {values[-1]:.2g}"
        console.print(f"‡ {len(swept_cells)} of {len(costs.cells)} cells at the rate this sweep's own trials measured "
                      f"({span} FLOP/s per trial; `--format json` has each); a new size takes its method's rate over "
                      "the other sizes",
                      highlight=False)
    if any(r["prior"] == "extrapolate" for r in rows):
        console.print("* prior: extrapolate: a size starts once its seed's smaller sizes are done (or three of them), on a "
                      "grid centred on the LR they predict (narrower when the prediction is tight)", highlight=False)
    console.print(f"stack: {plan.config.stack}, concurrency: {plan.config.concurrency}; output: {plan.sweep_dir}",
                  highlight=False)
    if memory is not None and any(c.resources.get("GPU") for c in plan.cells):
        console.print(f"stack: auto plans with {memory[0].describe()}; its column: the members of one trial, and "
                      "their GiB (the model's, or measured by sweeper bench) of the trial's budget", highlight=False)
    return 0


def _stack_auto(s: dict[str, Any]) -> str:
    mark = "" if s["source"] == "model" else " (measured)"
    return f"{s['stack']}: {s['stack_bytes'] / 2**30:.3g} of {s['budget_bytes'] / 2**30:.3g} GiB{mark}"


def _host_memory() -> int | None:
    # start-up time: imported when used, not on every CLI start
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _si(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(int(n))


def _resource(key: str, value: float) -> str:
    return f"{value / 2**30:.3g}GiB" if key == "memory" else f"{value:g}"
