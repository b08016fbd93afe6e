"""`sweeper compare` on a real two-seed sweep: its leads and t-intervals are those computed independently
from `sweeper optima --format json` with scipy (df = 1)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from sweeper.cli import main

pytestmark = pytest.mark.slow


def test_compare_on_a_two_seed_sweep_matches_scipy_from_optima(two_seed_sweep, capsys):
    assert main(["optima", str(two_seed_sweep), "--format", "json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert main(["compare", str(two_seed_sweep), "--methods", "pre,layerrope", "--format", "json"]) == 0
    got = {c["size"]: c for c in json.loads(capsys.readouterr().out)["comparisons"]}
    assert set(got) == {"L1"}
    by = {(c["method"], c["size"], c["seed"]): c for c in cells}
    usable = ("bracketed", "fixed")
    with_interval = 0
    for size, c in got.items():
        both = [s for s in (0, 1) if by[("pre", size, s)]["status"] in usable
                and by[("layerrope", size, s)]["status"] in usable]
        leads = [by[("pre", size, s)]["best_objective"] - by[("layerrope", size, s)]["best_objective"] for s in both]
        assert [s["seed"] for s in c["per_seed"]] == both
        assert [s["lead"] for s in c["per_seed"]] == pytest.approx(leads, abs=1e-12)
        assert sorted(c["missing_seeds"]) == [s for s in (0, 1) if s not in both]
        assert c["n_seeds"] == len(both) and c["df"] == max(len(both) - 1, 0)
        if len(both) == 2:
            with_interval += 1
            lo, hi = stats.t.interval(0.95, 1, loc=np.mean(leads), scale=stats.sem(leads))
            assert c["df"] == 1 and c["ci"] == pytest.approx([lo, hi], abs=1e-12)
            assert c["significant"] == bool(lo > 0 or hi < 0)
        else:
            assert c["ci"] is None and c["significant"] is None
    assert with_interval >= 1, got  # the quickstart's cells bracket: at least one size has both seeds
