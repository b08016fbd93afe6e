"""`sweeper bench prior` (`sweeper.sim.prior`): the planner's prior on planted methods (a measurement tool)."""

from __future__ import annotations

import random
from pathlib import Path

from sweeper.core.grid import LRPolicy
from sweeper.cli import main
from sweeper.sim.prior import plant_method, simulate_method, steplaw_like

QUICKSTART = str(Path(__file__).resolve().parents[3] / "sweeps" / "quickstart.yaml")
DEPTHS = [48, 64, 96, 128, 192, 256, 384, 512]


def test_planted_methods_are_the_same_for_both_interval_kinds_and_cells_bracket():
    policy = LRPolicy(lo=1e-5, hi=0.1, center=3e-3, points=5, factor=2.0, max_points=10)
    methods = [plant_method(policy, DEPTHS, random.Random(3), exponent=-0.6, scatter=0.2, prior_error_steps=2.0,
                            landscape=steplaw_like) for _ in range(4)]
    again = [plant_method(policy, DEPTHS, random.Random(3), exponent=-0.6, scatter=0.2, prior_error_steps=2.0,
                          landscape=steplaw_like) for _ in range(4)]
    assert [m[0].optimum for m in methods] == [m[0].optimum for m in again]
    runs = {kind: [c for lands in methods for c in simulate_method(policy, DEPTHS, lands, kind, "1")]
            for kind in ("confidence", "prediction")}
    for cells in runs.values():
        assert all(c.optimum_found is not None for c in cells)  # every cell bracketed
        assert all(c.had_interval == (i % len(DEPTHS) >= 3) for i, c in enumerate(cells))  # 3+ smaller depths
        assert all(c.points >= 3 for c in cells)


def test_the_command_prints_both_interval_kinds(capsys):
    assert main(["bench", "prior", "--yaml", QUICKSTART, "--policy", "prior=extrapolate", "--replicates", "3"]) == 0
    out = capsys.readouterr().out
    assert "confidence" in out and "prediction" in out
    assert main(["bench", "prior", "--yaml", QUICKSTART, "--replicates", "2"]) == 0
    assert "none" in capsys.readouterr().out
