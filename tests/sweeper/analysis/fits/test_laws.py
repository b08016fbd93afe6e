"""`sweeper fit --lr-law` and `--holdout largest` on a trained-like sweep (the synthetic one): its tokens per point do not
vary with size, so the two-variable law is refused in one line; each method's largest depth is forecast from the
three smaller ones with prediction intervals."""

from __future__ import annotations

import json

import pytest

from sweeper.cli import main
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("laws") / "sweep"
    SyntheticSweep(root, SyntheticSpec(methods=("pre", "post"), depths=(4, 8, 16, 32), steps=40)).advance(1.0)
    return root


def test_a_sweep_at_fixed_tokens_refuses_the_two_variable_law(sweep, capsys):
    assert main(["fit", str(sweep), "--lr-law", "N,D", "--x", "params", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "D barely varies" in err and "one-variable law" in err
    assert main(["fit", str(sweep), "--lr-law", "N,bs", "--no-write"]) == 2
    assert "a trained sweep's variables are N" in capsys.readouterr().err


def test_holdout_largest_on_a_trained_sweep(sweep, capsys):
    capsys.readouterr()
    assert main(["fit", str(sweep), "--holdout", "largest", "--no-write", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["holdout"]["rows"]
    assert rows and all(r["x"] == max(s["x"] for s in doc["methods"][r["method"]]["sizes"]) for r in rows)
    for r in rows:
        lr = r["lr"]
        assert len(r["fitted_sizes"]) == lr["n_fitted"] >= 2
        if lr["lo"] is not None:
            assert lr["lo"] < lr["predicted"] < lr["hi"] and lr["inside"] == (lr["lo"] <= lr["recorded"] <= lr["hi"])
