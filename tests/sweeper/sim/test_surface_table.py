"""A simulated surface read from a recorded table (`table:` in a surface file): the StepLaw grids.

The expected losses are read here with the standard library's csv module, independently of the
product's reader (`sweeper.search.replay.load_table`, polars).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from models.config import ModelConfig
from sweeper.core.errors import UserError
from sweeper.sim.simulation import load_surface
from tests.sweeper.search.test_replay import STEPLAW
from trials.config import TrainConfig
from sweeper.sim.trial import SimulatedCell, simulate_trial
from trials.spec import TrialSpec

DENSE = STEPLAW / "dense_lr_bs_loss.csv"
pytestmark = pytest.mark.skipif(not DENSE.is_file(), reason=f"the StepLaw grids are not at {STEPLAW}")

# Two groups with 12 recorded learning rates each (N, D, batch size).
GROUPS = {1.0: (429260800, 8000000000, 2048), 2.0: (214663680, 100000000000, 512)}


def recorded(key: tuple[int, int, int]) -> list[tuple[float, float]]:
    """(lr, lowest loss) of one group, ascending: read with csv, not with the product's reader."""
    best: dict[float, float] = {}
    with DENSE.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if (int(row["N"]), int(row["D"]), int(row["bs"])) == key:
                lr, loss = float(row["lr"]), float(row["loss"])
                best[lr] = min(loss, best.get(lr, math.inf))
    return sorted(best.items())


def surface_file(tmp_path: Path, sizes: dict[float, tuple[int, int, int]], **extra: str) -> Path:
    lines = "\n".join(f"        {x:g}: {{N: {n}, D: {d}, bs: {bs}}}" for x, (n, d, bs) in sizes.items())
    options = "".join(f"      {k}: {v}\n" for k, v in extra.items())
    path = tmp_path / "steplaw.yaml"
    path.write_text(f"name: steplaw\nnoise: 0.0\nmin_report_seconds: 0.0\nmethods:\n  pre:\n    table:\n"
                    f"      file: {DENSE}\n{options}      sizes:\n{lines}\n")
    return path


def trial(surface, x: float, lrs: list[float]):
    cell = SimulatedCell(method="pre", x=x, steps=100, tokens_per_step=64, flops_per_token=1e6, params=1000,
                         params_nonembed=500, vocab=256)
    spec = TrialSpec(model=ModelConfig(width=32, depth=2, n_heads=2, vocab=256, seq_len=16),
                     train=TrainConfig(steps=100, batch_size=4, report_every=50, eval_every=100, checkpoint_every=100),
                     lrs=lrs, point_ids=[f"pre/L{x:g}/s0/lr={lr:g}" for lr in lrs])
    return simulate_trial(spec, cell, surface, {"CPU": 1.0}, report=lambda r, s: None, sleep=lambda s: None,
                          clock=lambda: 0.0)


def test_recorded_learning_rates_report_the_recorded_losses_and_others_interpolate_or_fail(tmp_path):
    surface = load_surface(surface_file(tmp_path, GROUPS))
    pre = surface.methods["pre"]
    assert not pre.planted
    for x, key in GROUPS.items():
        truth = recorded(key)
        grid = pre.table.grid(x)  # type: ignore[union-attr]
        assert [(a, b) for a, b in zip(grid.lrs, grid.losses)] == truth
        best_lr, best_loss = min(truth, key=lambda t: t[1])
        assert (pre.optimal_lr(x), pre.optimal_loss(x)) == (best_lr, best_loss)
    truth = recorded(GROUPS[1.0])
    (a, la), (b, lb) = truth[3], truth[4]
    middle = math.sqrt(a * b)  # halfway in ln lr: the mean of the two recorded losses
    below, above = truth[0][0] / 2, truth[-1][0] * 2
    results = trial(surface, 1.0, [a, middle, below, above])
    assert [r.outcome for r in results] == ["ok", "ok", "failed", "failed"]
    assert results[0].loss == la and results[1].loss == pytest.approx((la + lb) / 2)
    assert "outside the recorded range" in (results[2].reason or "") and results[2].steps == 0
    # The recorded table is part of what the surface's fingerprint covers.
    other = load_surface(surface_file(tmp_path, {1.0: GROUPS[2.0], 2.0: GROUPS[1.0]}))
    assert other.fingerprint() != surface.fingerprint()


def test_table_errors_name_the_field(tmp_path):
    with pytest.raises(UserError, match=r"methods.pre.table.sizes.1: no group with N=1, D=2, bs=3"):
        load_surface(surface_file(tmp_path, {1.0: (1, 2, 3)}))
    with pytest.raises(UserError, match=r"missing column lrate"):
        load_surface(surface_file(tmp_path, GROUPS, lr_column="lrate"))
    path = tmp_path / "mixed.yaml"
    path.write_text(f"name: m\nmethods:\n  pre: {{alpha: 0.5, table: {{file: {DENSE}, sizes: {{1: {{N: 1}}}}}}}}\n")
    with pytest.raises(UserError, match=r"mixed.yaml:3: methods.pre.*drop alpha"):
        load_surface(path)
    path.write_text("name: m\nmethods:\n  pre: {table: {file: nowhere.csv, sizes: {1: {N: 1}}}}\n")
    with pytest.raises(UserError, match=r"methods.pre.table.file: no such file"):
        load_surface(path)


def test_a_planted_surface_keeps_its_fingerprint_so_older_simulated_sweeps_resume():
    # The fingerprint of sweeps/surfaces/study.yaml before tables existed: a simulated sweep launched then
    # must still resume (its cells' compatibility and its points' corpus carry this value).
    from sweeper.sim.simulation import load_surface as load

    assert load("sweeps/surfaces/study.yaml").fingerprint() == "583037b32303a952"
