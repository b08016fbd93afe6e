"""`launch --dry-run`'s cost plan: CPU-hours for CPU sweeps, GPU-hours from `sweeper bench` figures
where they exist (else a named assumption), and a wall-time estimate for the declared pool."""

from __future__ import annotations

import json
from dataclasses import replace
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.bench.cache import record
from sweeper.search import bench_cache
from sweeper.search.cost import cost_plan, shape_of
from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep

ROOT = Path(__file__).resolve().parents[3]

CPU_SWEEP = """name: c
methods: [pre, post]
model: {width: 32, heads: 2, depths: [2, 4], seq_len: 16}
train: {steps: 100, batch_size: 4}
lr: {center: 1.0e-3, points: 3}
resources: {cpu: 1}
stack: 3
concurrency: 2
"""


def plan_of(tmp_path: Path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return build_plan(load_sweep(path, need_data=False).config, base=tmp_path, source=path)


def test_a_cpu_sweep_is_costed_in_cpu_hours_and_its_wall_time_from_the_concurrency(tmp_path):
    plan = plan_of(tmp_path, CPU_SWEEP)
    costs = cost_plan(plan, [], cpu_throughput=1e9, pool=2)
    out = costs.to_dict()
    assert "initial_gpu_hours" not in out and out["unit"] == "CPU"
    flops = [c.flops_per_token * c.tokens_per_point for c in plan.cells]
    assert out["initial_cpu_hours"] == pytest.approx(sum(3 * f / 1e9 for f in flops) / 3600)
    # 4 cells, one 3-stack trial each, 2 at a time: the pool-bound wall time is half the summed trial time.
    assert out["wall_hours_pool_bound"] == pytest.approx(sum(3 * f / 1e9 for f in flops) / 2 / 3600)
    assert out["wall_hours_estimate"] >= out["wall_hours_chain_bound"]
    assert out["assumed_cells"] == 4 and "--device cpu" in out["bench_commands"][0]


def test_a_measured_rate_replaces_the_assumption_for_its_shape(tmp_path):
    plan = plan_of(tmp_path, CPU_SWEEP)
    cell = plan.cells[0]
    shape, mode = shape_of(cell)
    measured = bench_cache.Measurement(shape=shape, mode=mode, device_name="cpu:Fake CPU 9000", stack=3,
                                       model_flops_per_s=4e9, threads=1, measured_at=1.0, command="sweeper bench ...")
    cache = tmp_path / "bench.json"
    record(measured, cache)
    record(measured, cache)  # the same key replaces, never duplicates
    assert len(bench_cache.load(cache)) == 1
    costs = cost_plan(plan, bench_cache.load(cache), cpu_throughput=1e9, pool=2, cpu_model="cpu:Fake CPU 9000")
    first = costs.cells[0]
    assert first.measured is not None and first.trial_seconds == pytest.approx(3 * cell.flops_per_token
                                                                               * cell.tokens_per_point / 4e9)
    assert costs.to_dict()["measured_cells"] == 1 and costs.cells[1].measured is None
    # another CPU model, or an unknown one, does not take this machine's rate
    for other in ("cpu:Fake CPU 1000", None):
        assert cost_plan(plan, bench_cache.load(cache), cpu_throughput=1e9, pool=2, cpu_model=other).cells[0].measured is None
    # an entry of an older cache said only "cpu": an unknown device, never reused
    record(replace(measured, device_name="cpu"), cache)
    assert cost_plan(plan, bench_cache.load(cache)[1:], cpu_throughput=1e9, pool=2,
                     cpu_model="cpu:Fake CPU 9000").cells[0].measured is None
    assert bench_cache.cpu_model().startswith("cpu")


def test_a_rate_measured_on_an_h200_never_costs_an_h100s_trials():
    shape = bench_cache.Shape(scheme="pre", width=128, depth=48, heads=4, seq_len=256, vocab=32000, micro_batch=16)
    mode = bench_cache.Mode(device="cuda", dtype="bf16", compile=True)
    h200 = bench_cache.Measurement(shape=shape, mode=mode, device_name="NVIDIA H200", stack=3, model_flops_per_s=1e14,
                                   threads=None, measured_at=1.0, command="sweeper bench ...")
    assert bench_cache.lookup(shape, mode, 3, [h200], "NVIDIA H200") is h200
    assert bench_cache.lookup(shape, mode, 3, [h200], "NVIDIA H100 80GB HBM3") is None
    assert bench_cache.lookup(shape, mode, 3, [h200], None) is None


def test_depth_yaml_plans_gpu_hours_and_a_wall_time_on_the_declared_pool(tmp_path):
    env = {"LAYERROPE_SWEEPER_BENCH_CACHE": str(tmp_path / "none.json"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "sweeper.cli", "launch", "sweeps/depth.yaml", "--dry-run", "--json",
                           "--pool", "64"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    totals = json.loads(done.stdout)["totals"]
    assert totals["unit"] == "GPU" and totals["pool"] == 64 and "initial_cpu_hours" not in totals
    assert totals["initial_gpu_hours"] == pytest.approx(totals["initial_flops"] / 2e14 / 3600)
    # 64 GPUs hold every first trial at once: the chain of sizes (prior: extrapolate) bounds the wall time.
    assert totals["wall_hours_estimate"] == totals["wall_hours_chain_bound"] > totals["wall_hours_pool_bound"]
    assert totals["assumed_cells"] == 48 and "--device cuda --dtype bf16" in totals["bench_commands"][0]
