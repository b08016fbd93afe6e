"""From a real store (StoreWriter) to the fits.json document: selection rules, contract keys, exactness."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sweeper.core.errors import UserError
from sweeper.analysis.fits.collect import collect
from sweeper.analysis.fits.report import FitOptions, build_report, to_jsonable

from .conftest import Truth, params_of

DEPTHS = [48, 64, 96, 128, 192, 256]
TRUTHS = {"pre": Truth(E=3.0, A=6.0, alpha=0.5, c=0.04, b=-0.5),
          "layerrope": Truth(E=3.0, A=9.0, alpha=0.7, c=0.06, b=-0.4)}
FAST = {"resamples": 300}

CONTRACT = {
    "top": {"version", "created", "x", "x_label", "n_definition", "c_definition", "methods", "ranking"},
    "method": {"loss_fit", "lr_fit", "compute_exponent", "sensitivity"},
    "loss_fit": {"E", "A", "alpha", "loglog_slope", "points", "curve", "holdout", "warnings", "trustworthy"},
    "lr_fit": {"coef", "exponent", "points", "curve", "targets", "warnings", "trustworthy"},
    "holdout": {"x", "actual", "predicted", "lo", "hi", "rel_error"},
    "sensitivity": {"size", "x", "value", "near_opt_lo", "near_opt_hi"},
    "ranking": {"method", "compute_exponent", "loss_at_largest"},
    "estimate": {"value", "lo", "hi"},
}


def report(sweep, **kwargs):
    include_edge = kwargs.pop("include_edge", False)
    results = collect(sweep, include_edge=include_edge)
    opts = FitOptions(include_edge=include_edge, **{**FAST, **kwargs})
    return to_jsonable(build_report(results, opts))


def test_document_has_every_contract_key_and_is_strict_json(make_sweep) -> None:
    doc = report(make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003), targets=(1024.0,))
    json.dumps(doc, allow_nan=False)
    assert CONTRACT["top"] <= doc.keys()
    assert doc["version"] == 1 and doc["x"] == "depth"
    for method in TRUTHS:
        m = doc["methods"][method]
        assert CONTRACT["method"] <= m.keys()
        assert CONTRACT["loss_fit"] <= m["loss_fit"].keys()
        assert CONTRACT["lr_fit"] <= m["lr_fit"].keys()
        assert CONTRACT["holdout"] <= m["loss_fit"]["holdout"].keys()
        for key in ("E", "A", "alpha", "loglog_slope"):
            assert CONTRACT["estimate"] <= m["loss_fit"][key].keys()
        assert CONTRACT["estimate"] <= m["compute_exponent"].keys()
        for row in m["sensitivity"]:
            assert CONTRACT["sensitivity"] <= row.keys()
        xs = [row[0] for row in m["loss_fit"]["curve"]]
        assert xs == sorted(xs) and 1024.0 in xs and 48.0 in xs
        assert all(len(row) == 4 and row[2] <= row[1] <= row[3] for row in m["loss_fit"]["curve"])
        assert m["lr_fit"]["targets"][0]["x"] == 1024.0
    for row in doc["ranking"]:
        assert CONTRACT["ranking"] <= row.keys()


def test_exact_sweep_recovers_every_truth(make_sweep) -> None:
    doc = report(make_sweep(truths=TRUTHS, depths=DEPTHS, on_optimum=True), targets=(1024.0,))
    for method, t in TRUTHS.items():
        m = doc["methods"][method]
        assert m["loss_fit"]["E"]["value"] == pytest.approx(t.E, rel=1e-9)
        assert m["loss_fit"]["A"]["value"] == pytest.approx(t.A, rel=1e-8)
        assert m["loss_fit"]["alpha"]["value"] == pytest.approx(t.alpha, rel=1e-9)
        assert m["lr_fit"]["exponent"]["value"] == pytest.approx(t.b, rel=1e-9)
        assert m["lr_fit"]["coef"]["value"] == pytest.approx(t.c, rel=1e-9)
        assert m["lr_fit"]["targets"][0]["lr"] == pytest.approx(t.c * 1024**t.b, rel=1e-9)
        held = m["loss_fit"]["holdout"]
        assert held["x"] == 256 and held["actual"] == pytest.approx(t.E + t.A * 256 ** -t.alpha)
        assert abs(held["rel_error"]) < 1e-9
        assert m["loss_fit"]["trustworthy"], m["loss_fit"]["warnings"]
    # at depth 256: layerrope 3 + 9·256^-0.7 ≈ 3.185 < pre 3 + 6·256^-0.5 = 3.375
    assert [r["method"] for r in doc["ranking"]] == ["layerrope", "pre"]
    assert doc["ranking"][0]["loss_at_largest"] == pytest.approx(3 + 9 * 256 ** -0.7)


def test_ranking_orders_methods_by_loss_at_the_largest_common_size(make_sweep) -> None:
    truths = {"a": Truth(E=3.0), "b": Truth(E=2.8), "c": Truth(E=3.1)}
    doc = report(make_sweep(truths=truths, depths=DEPTHS, on_optimum=True))
    assert [r["method"] for r in doc["ranking"]] == ["b", "a", "c"]
    assert doc["ranking"][0]["lowest_at_every_common_size"] is True
    assert doc["ranking"][0]["x_at_largest"] == 256


def test_edge_cells_are_excluded_by_default_and_included_on_request(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003, edge={("pre", 64)})
    doc = report(sweep)
    assert {"cell_id": "pre/L64/s0", "reason": doc["inputs"]["excluded"][0]["reason"]} in doc["inputs"]["excluded"]
    assert doc["inputs"]["excluded"][0]["reason"].startswith("edge")
    assert 64.0 not in [p[0] for p in doc["methods"]["pre"]["loss_fit"]["points"]]
    included = report(sweep, include_edge=True)
    assert 64.0 in [p[0] for p in included["methods"]["pre"]["loss_fit"]["points"]]
    assert any("edge cell(s) included" in w for w in included["warnings"])
    # an edge cell still has a sensitivity row (it finished), flagged at the edge
    row = next(r for r in doc["methods"]["pre"]["sensitivity"] if r["size"] == "L64")
    assert row["near_opt_at_edge"] is True


def test_diverged_cells_and_points_stay_out_of_loss_fits(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, on_optimum=True, all_diverged={("layerrope", 96)},
                       grid=(-2, -1, 0, 1, 2, 3, 4))  # +3, +4 are 8× and 16× LR*: diverged points
    doc = report(sweep)
    reasons = {e["cell_id"]: e["reason"] for e in doc["inputs"]["excluded"]}
    assert reasons["layerrope/L96/s0"] == "every finished point diverged"
    lf = doc["methods"]["layerrope"]["loss_fit"]
    assert 96.0 not in [p[0] for p in lf["points"]]
    assert lf["alpha"]["value"] == pytest.approx(0.7, rel=1e-9)  # the diverged points did not disturb the fit
    row = next(r for r in doc["methods"]["layerrope"]["sensitivity"] if r["size"] == "L96")
    assert row["value"] is None and row["n_diverged"] == 7
    row = next(r for r in doc["methods"]["pre"]["sensitivity"] if r["size"] == "L48")
    assert row["n_diverged"] == 1  # 16× LR* diverged; 8× is the threshold (exclusive)
    t = TRUTHS["pre"]
    base = t.E + t.A * 48 ** -t.alpha
    capped = [base + t.curvature * (k * math.log(2)) ** 2 for k in range(-2, 4)] + [math.log(32000)]
    assert row["value"] == pytest.approx(float(np.mean(capped)) - base, rel=1e-12)


def test_stalled_cells_and_points_stay_out_of_loss_fits_and_are_listed_as_failed(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, on_optimum=True, all_stalled={("layerrope", 192)},
                       all_diverged={("layerrope", 256)})
    doc = report(sweep)
    reasons = {e["cell_id"]: e["reason"] for e in doc["inputs"]["excluded"]}
    assert reasons["layerrope/L192/s0"].startswith("every finished point diverged or stalled")
    assert [(c["cell_id"], c["status"], c["n_stalled"]) for c in doc["inputs"]["failed"]] == [
        ("layerrope/L192/s0", "stalled", 5), ("layerrope/L256/s0", "diverged", 0)]
    lf = doc["methods"]["layerrope"]["loss_fit"]
    assert [p[0] for p in lf["points"]] == [48.0, 64.0, 96.0, 128.0]
    assert lf["alpha"]["value"] == pytest.approx(0.7, rel=1e-9)  # the stalled losses did not enter
    row = next(r for r in doc["methods"]["layerrope"]["sensitivity"] if r["size"] == "L192")
    # Stalled points count at the cap in the sensitivity (like diverged ones), but are counted apart (issue 33).
    assert row["n_diverged"] == 0 and row["n_stalled"] == 5 and row["n_lrs"] == 5 and row["n_distinct_lrs"] == 5


def test_seeds_are_averaged_and_their_spread_kept(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, seeds=(0, 1, 2), noise=0.01, on_optimum=True, eval_se=0.004)
    doc = report(sweep)
    size = doc["methods"]["pre"]["sizes"][0]
    assert size["seeds"] == [0, 1, 2] and len(size["loss_seeds"]) == 3
    assert size["loss"] == pytest.approx(float(np.mean(size["loss_seeds"])))
    assert size["loss_sd"] == pytest.approx(float(np.std(size["loss_seeds"], ddof=1)))
    assert size["loss_se"] == pytest.approx(size["loss_sd"] / math.sqrt(3))
    assert size["loss_se_seeds"] == [0.004] * 3 and size["loss_eval_se"] == pytest.approx(0.004 / math.sqrt(3))
    assert len(doc["methods"]["pre"]["loss_fit"]["points"]) == len(DEPTHS)


def test_params_and_compute_axes_state_their_definitions(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    by_params = report(sweep, x="params")
    assert "params_nonembed" in by_params["n_definition"]
    assert by_params["methods"]["pre"]["loss_fit"]["points"][0][0] == params_of(48)[1]
    total = report(sweep, x="params", n_def="total")
    assert total["methods"]["pre"]["loss_fit"]["points"][0][0] == params_of(48)[0]
    by_compute = report(sweep, x="compute")
    assert "flops_per_token × tokens" in by_compute["c_definition"]
    c48 = by_compute["methods"]["pre"]["loss_fit"]["points"][0][0]
    assert c48 == pytest.approx(params_of(48)[2] * 2_000_000)
    six_nd = report(sweep, x="compute", c_def="6nd")
    assert six_nd["methods"]["pre"]["loss_fit"]["points"][0][0] == pytest.approx(6 * params_of(48)[1] * 2_000_000)
    assert "attention not counted" in six_nd["c_definition"]


def test_a_single_size_reports_sensitivity_and_says_nothing_else_can_be_fitted(make_sweep) -> None:
    doc = report(make_sweep(truths=TRUTHS, depths=[64], noise=0.003), targets=(128.0,))
    assert any("only one size" in w for w in doc["warnings"])
    lf = doc["methods"]["pre"]["loss_fit"]
    assert lf["status"] == "insufficient" and lf["E"]["value"] is None and not lf["trustworthy"]
    assert doc["methods"]["pre"]["lr_fit"]["status"] == "insufficient"
    assert doc["methods"]["pre"]["compute_exponent"] is None
    assert doc["methods"]["pre"]["sensitivity"][0]["value"] is not None


def test_two_sizes_fit_no_form_with_e_and_give_an_interval_free_lr_law(make_sweep) -> None:
    doc = report(make_sweep(truths=TRUTHS, depths=[48, 96], on_optimum=True))
    lf, lr = doc["methods"]["pre"]["loss_fit"], doc["methods"]["pre"]["lr_fit"]
    assert lf["status"] == "insufficient" and any("needs at least 3 sizes" in w for w in lf["warnings"])
    assert lf["loglog_slope"]["value"] is not None and lf["loglog_slope"]["lo"] is None
    assert lr["exponent"]["value"] == pytest.approx(-0.5) and lr["exponent"]["lo"] is None
    assert not lr["trustworthy"]


def test_shared_e_recovers_a_common_floor_exactly(make_sweep) -> None:
    truths = {"a": Truth(E=3.0, A=6.0, alpha=0.5), "b": Truth(E=3.0, A=9.0, alpha=0.7),
              "c": Truth(E=3.0, A=4.0, alpha=0.4)}
    doc = report(make_sweep(truths=truths, depths=DEPTHS, on_optimum=True), shared_e=True)
    assert doc["e_model"] == "shared"
    assert doc["shared_e"]["loss"]["E"]["value"] == pytest.approx(3.0, rel=1e-9)
    for name, t in truths.items():
        lf = doc["methods"][name]["loss_fit"]
        assert lf["e_model"] == "shared"
        assert lf["alpha"]["value"] == pytest.approx(t.alpha, rel=1e-8)
        assert lf["A"]["value"] == pytest.approx(t.A, rel=1e-7)
        assert abs(lf["holdout"]["rel_error"]) < 1e-8
        assert "loss_fit_independent" in doc["methods"][name]


def test_nothing_to_fit_is_a_user_error(make_sweep) -> None:
    with pytest.raises(UserError, match="no bracketed cells"):
        collect(make_sweep("running", truths=TRUTHS, depths=[48], pending={("pre", 48), ("layerrope", 48)}))
    with pytest.raises(UserError, match="every cell diverged"):
        collect(make_sweep("diverged", truths=TRUTHS, depths=[48],
                           all_diverged={("pre", 48), ("layerrope", 48)}))
    with pytest.raises(UserError, match="--include-edge"):
        collect(make_sweep("edge", truths={"pre": Truth()}, depths=[48], edge={("pre", 48)}))
