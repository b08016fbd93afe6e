"""`sweeper compare`: paired leads per size with Student-t intervals, against an independent computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

import sweeper
from sweeper.analysis.compare import compare, compare_rows
from sweeper.cli import main
from sweeper.core.errors import UserError
from tests.sweeper.analysis.fits.conftest import Truth, write_sweep

TRUTHS = {"pre": Truth(E=3.1), "layerrope": Truth(E=3.0)}


def independent(optima_cells: list[dict], a: str, b: str) -> dict[str, dict]:
    """The t-interval per size from `sweeper optima --format json`'s cells, with scipy alone."""
    by = {(c["method"], c["size"], c["seed"]): c for c in optima_cells}
    out = {}
    for size in sorted({c["size"] for c in optima_cells}):
        seeds = sorted({s for (m, z, s) in by if z == size})
        leads = [by[(a, size, s)]["best_objective"] - by[(b, size, s)]["best_objective"] for s in seeds
                 if by[(a, size, s)]["status"] == by[(b, size, s)]["status"] == "bracketed"]
        n = len(leads)
        ci = None
        if n >= 2:
            ci = stats.t.interval(0.95, n - 1, loc=np.mean(leads), scale=stats.sem(leads))
        out[size] = {"leads": leads, "mean": float(np.mean(leads)) if leads else None, "ci": ci, "df": max(n - 1, 0)}
    return out


def test_compare_matches_scipy_from_optima_json(tmp_path, capsys):
    root = write_sweep(tmp_path / "s", TRUTHS, [2, 4, 8], seeds=(0, 1, 2), noise=0.02, rng_seed=3)
    assert main(["optima", str(root), "--format", "json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert main(["compare", str(root), "--methods", "pre,layerrope", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = independent(cells, "pre", "layerrope")
    assert [c["size"] for c in got["comparisons"]] == ["L2", "L4", "L8"]
    for c in got["comparisons"]:
        w = want[c["size"]]
        assert [s["lead"] for s in c["per_seed"]] == pytest.approx(w["leads"], abs=1e-12)
        assert [s["seed"] for s in c["per_seed"]] == [0, 1, 2]
        assert c["mean"] == pytest.approx(w["mean"]) and c["df"] == 2 and c["n_seeds"] == 3
        assert c["ci"] == pytest.approx(list(w["ci"]), abs=1e-12)
        assert c["significant"] == (w["ci"][0] > 0 or w["ci"][1] < 0)
        assert c["missing_seeds"] == []
    # the planted lead is 0.1 with seed noise 0.02: every interval holds it
    assert all(c["ci"][0] < 0.1 < c["ci"][1] for c in got["comparisons"])
    # the same from Python
    api = sweeper.open(root).compare("pre", "layerrope").to_json()
    assert api["comparisons"] == got["comparisons"]


def test_a_stalled_seed_is_left_out_and_named(tmp_path):
    root = write_sweep(tmp_path / "s", TRUTHS, [2, 4], seeds=(0, 1, 2), noise=0.02, stalled_seeds={("pre", 4, 1)})
    result = compare(root, "pre", "layerrope")
    l4 = next(c for c in result.sizes if c.size == "L4")
    assert [s.seed for s in l4.per_seed] == [0, 2] and l4.df == 1
    assert [m.seed for m in l4.missing] == [1] and "pre: stalled" in l4.missing[0].reason
    assert l4.to_json("depth")["missing_seeds"] == [1]
    # df 1: the interval is mean ± 12.71·sd/√2
    leads = [s.lead for s in l4.per_seed]
    half = 12.7062047 * float(np.std(leads, ddof=1)) / math.sqrt(2)
    assert l4.ci == pytest.approx((np.mean(leads) - half, np.mean(leads) + half), rel=1e-6)


def test_one_seed_has_no_interval_and_no_claim(tmp_path, capsys):
    root = write_sweep(tmp_path / "s", TRUTHS, [2, 4], seeds=(0,))
    assert main(["compare", str(root), "--methods", "pre,layerrope", "--json"]) == 0
    for c in json.loads(capsys.readouterr().out)["comparisons"]:
        assert c["df"] == 0 and c["ci"] is None and c["significant"] is None and c["n_seeds"] == 1
        assert c["mean"] == pytest.approx(0.1)
    assert main(["compare", str(root), "--methods", "pre,layerrope"]) == 0
    assert "no interval (1 seed)" in capsys.readouterr().out


@pytest.mark.parametrize("methods, message", [
    ("pre,nope", "no method 'nope'"), ("pre", "give two methods"), ("pre,pre", "two different methods"),
])
def test_bad_methods_exit_2(tmp_path, capsys, methods, message):
    root = write_sweep(tmp_path / "s", TRUTHS, [2, 4])
    assert main(["compare", str(root), "--methods", methods]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_not_a_sweep_exits_2(tmp_path, capsys):
    assert main(["compare", str(tmp_path), "--methods", "pre,layerrope"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_rows_unknown_method_is_a_user_error():
    with pytest.raises(UserError, match="no method"):
        compare_rows([], "a", "b")


def test_x_params_reports_each_methods_parameter_count(tmp_path, capsys):
    root = write_sweep(tmp_path / "s", TRUTHS, [2, 4], seeds=(0, 1), noise=0.02)
    assert main(["compare", str(root), "--methods", "pre,layerrope", "--x", "params", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["x"] == "params"
    rows = {r["size"]: r for r in sweeper.open(root).optima().to_dicts()}
    for c in got["comparisons"]:
        assert c["x_axis"] == "params" and c["x"] == rows[c["size"]]["params"]
