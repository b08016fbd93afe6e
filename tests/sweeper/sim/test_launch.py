"""`sweeper launch --simulate`: the real controller, real Ray Tune, ledger and store, with simulated trials.

In the session's Ray (2 CPUs, no GPU: `ray_session`), so CPU-only cells; the virtual GPU pool and
its packing are measured by the benchmark commands in the README ("At the study's scale, simulated").
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.records.store import load_cells, read_manifest
from tests.sweeper.sim.planted import SWEEP, planted_surface

SURFACE = planted_surface("{table: {file: recorded.csv, sizes: {2: {size: 2}, 4: {size: 4}}}}")


def recorded_table() -> str:
    """post's recorded grids: a √2 grid from 0.0025, optimum 0.01 at size 2 (loss 3.1), 0.00707 at 4 (3.0)."""
    rows = ["size,lr,loss"]
    for size, best, floor in ((2, 0.01, 3.1), (4, 0.0025 * math.sqrt(2) ** 3, 3.0)):
        for k in range(9):
            lr = 0.0025 * math.sqrt(2) ** k
            rows.append(f"{size},{lr:.7g},{floor + 0.05 * math.log(lr / best) ** 2:.6f}")
    return "\n".join(rows) + "\n"


@pytest.mark.slow
def test_a_simulated_sweep_finds_the_planted_optima_and_is_marked_simulated(ray_session, tmp_path, capsys):
    sweep = tmp_path / "yaml.yaml"
    sweep.write_text(SWEEP.format(name="sim", out=tmp_path / "out"))
    surface = tmp_path / "surface.yaml"
    surface.write_text(SURFACE)
    (tmp_path / "recorded.csv").write_text(recorded_table())
    assert main(["launch", str(sweep), "--simulate", str(surface)]) == 0
    assert "SIMULATED on surface planted" in capsys.readouterr().out
    out = tmp_path / "out"
    cells = {row["cell_id"]: row for row in load_cells(out).to_dicts()}
    # Planted: lr* = 0.02·x^-0.5 (0.0141 at 2, 0.01 at 4: on the grid's √2 half steps), no noise.
    assert cells["pre/L2/s0"]["status"] == cells["pre/L4/s0"]["status"] == "bracketed"
    assert math.isclose(cells["pre/L2/s0"]["best_lr"], 0.0141421, rel_tol=1e-3)
    assert math.isclose(cells["pre/L4/s0"]["best_lr"], 0.01, rel_tol=1e-3)
    assert cells["pre/L4/s0"]["best_objective"] == pytest.approx(2.5)
    # post replays a recorded table: its recorded optima, found among the recorded learning rates.
    assert cells["post/L2/s0"]["status"] == cells["post/L4/s0"]["status"] == "bracketed"
    assert math.isclose(cells["post/L2/s0"]["best_lr"], 0.01, rel_tol=1e-3)
    assert math.isclose(cells["post/L4/s0"]["best_lr"], 0.00707107, rel_tol=1e-3)
    assert cells["post/L4/s0"]["best_objective"] == pytest.approx(3.0)
    manifest = read_manifest(out)
    assert manifest.simulated is not None and manifest.simulated.surface == "planted"
    assert manifest.corpus is not None and manifest.corpus.startswith("simulated:")
    # The launch's own costs are on record: reports received, Tune snapshots (one at least: the last).
    launch = manifest.launches[-1]
    assert launch.reports >= 4 and launch.tune_snapshots >= 1 and launch.driver_cpu_seconds > 0  # type: ignore[operator]
    # CPU trials have no busy log: the simulated hours are wall time x compression (1 here)
    assert launch.simulation is not None and 0 < launch.simulation.simulated_wall_hours * 3600 <= launch.wall_seconds
    # Marked wherever results are shown, and never mixed with trained results.
    assert main(["optima", str(out)]) == 0
    assert "SIMULATED" in capsys.readouterr().out
    assert main(["status", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["simulated"] is True
    assert main(["launch", str(sweep)]) == 2
    assert "simulated" in capsys.readouterr().err


def test_ray_failing_to_start_is_one_clear_line_and_exit_2(tmp_path):
    """A local Ray that cannot start (here: its temporary folder is a file; on an overloaded machine,
    its node timing out) ends the launch with one line naming Ray, exit 2, no traceback."""
    sweep = tmp_path / "yaml.yaml"
    sweep.write_text(SWEEP.format(name="sim", out=tmp_path / "out"))
    surface = tmp_path / "surface.yaml"
    surface.write_text(SURFACE)
    (tmp_path / "recorded.csv").write_text(recorded_table())
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = {**os.environ, "RAY_TMPDIR": str(blocker / "ray"), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-m", "sweeper.cli", "launch", str(sweep), "--simulate", str(surface)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Ray could not start on this machine" in done.stderr and "Traceback" not in done.stderr
    assert not list((tmp_path / "out").glob("store/points/*.parquet"))


GPU_SWEEP = """\
name: gpusim
output: {out}
methods: [pre, post]
model: {{width: 32, heads: 2, depths: [2, 4], seq_len: 16, vocab: 256}}
data: {{source: synthetic}}
train: {{steps: 400, batch_size: 4, report_every: 50, eval_every: 200, checkpoint_every: 1000}}
lr: {{center: 1.0e-2, points: 3, factor: 2.0, refine: false, bounds: [1.0e-5, 1.0], max_points: 6}}
resources: {{cpu: 1, gpu: 0.125, placement: {placement}}}
stack: 3
"""

GPU_SURFACE = """\
name: pool
pool: {gpus: 2, cpus: 64, gpu_memory_gb: 80}
throughput: 1.0e+9
sharing: {solo_speedup: 2.0}
time_compression: 100
min_report_seconds: 0.2
noise: 0.0
methods:
  pre:  {E: 2.0, A: 1.0, alpha: 0.5, lr_k: 0.02, lr_b: -0.5, c: 0.05, cliff: 4.0}
  post: {E: 2.1, A: 1.0, alpha: 0.4, lr_k: 0.02, lr_b: -0.4, c: 0.05, cliff: 4.0}
"""


@pytest.mark.slow  # two simulated sweeps, each starting its own Ray in a subprocess: ~50 s on two cores
def test_ray_packs_fractions_onto_one_gpu_and_spread_placement_uses_the_pool(tmp_path):
    """Real Ray on a virtual pool of 2 GPUs (its own, in a subprocess): four 0.125-GPU first trials land on
    one GPU as declared (Ray's best fit), on both with `placement: spread`; the busy log and `status
    --format json` report the pool's busy and compute fractions; the optima do not depend on the placement."""
    surface = tmp_path / "surface.yaml"
    surface.write_text(GPU_SURFACE)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    figures, optima = {}, {}
    for placement in ("pack", "spread"):
        out = tmp_path / placement
        sweep = tmp_path / f"{placement}.yaml"
        sweep.write_text(GPU_SWEEP.format(out=out, placement=placement))
        done = subprocess.run([sys.executable, "-m", "sweeper.cli", "launch", str(sweep), "--simulate", str(surface),
                               "--json"], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)["simulation"]
        status = json.loads(subprocess.run([sys.executable, "-m", "sweeper.cli", "status", str(out), "--format", "json"],
                                           capture_output=True, text=True, env=env, timeout=120).stdout)
        assert status["gpu_busy_fraction_first_day"] == pytest.approx(summary["gpu_busy_fraction_first_day"])
        events = [json.loads(line) for line in (out / "simulation" / "busy.jsonl").read_text().splitlines()]
        first_four = [e["device"] for e in events if e["event"] == "start"][:4]
        figures[placement] = (first_four, status)
        optima[placement] = {c["cell_id"]: c["best_lr"] for c in status["cells"]}
        assert not list((out / "simulation" / "devices").glob("*.json"))  # every trial left its GPU
    assert figures["pack"][0] == [0, 0, 0, 0]
    # spread: both GPUs among the first four (two leads; how many followers join which lead depends on when
    # Tune asks for each trial, which a loaded machine changes: measured 2+2 and 3+1)
    assert set(figures["spread"][0]) == {0, 1}
    pack, spread = figures["pack"][1], figures["spread"][1]
    assert 0 < pack["gpu_compute_fraction_first_day"] <= pack["gpu_busy_fraction_first_day"] <= 1
    assert spread["gpu_busy_fraction_first_day"] > pack["gpu_busy_fraction_first_day"]
    assert optima["pack"] == optima["spread"]
