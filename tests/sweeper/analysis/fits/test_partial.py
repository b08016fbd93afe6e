"""A size whose seeds did not all give a usable optimum is partial: marked, and left out of the fit unless
--allow-partial."""

from __future__ import annotations

import json

from sweeper.analysis.fits.collect import collect
from sweeper.cli import main
from tests.sweeper.analysis.fits.conftest import Truth

TRUTHS = {"pre": Truth(E=3.1), "layerrope": Truth(E=3.0)}
DEPTHS = [2, 4, 8, 16, 32]


def test_a_size_with_a_stalled_seed_is_partial_and_left_out(make_sweep, capsys):
    root = make_sweep(truths=TRUTHS, depths=DEPTHS, seeds=(0, 1), noise=0.02, stalled_seeds={("pre", 8, 1)})
    results = collect(root)
    assert [s.size for s in results.sizes if s.method == "pre"] == ["L16", "L2", "L32", "L4"]
    [partial] = results.partial
    assert (partial.method, partial.size, partial.seeds) == ("pre", "L8", [0])
    assert [(m["seed"], m["status"]) for m in partial.missing] == [(1, "stalled")]

    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "200"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pre = doc["methods"]["pre"]
    assert [r["size"] for r in pre["sizes"]] == ["L2", "L4", "L16", "L32"]
    assert all(r["partial"] is False for r in pre["sizes"])
    assert pre["loss_fit"]["n_points"] == 4 and 8.0 not in [p[0] for p in pre["loss_fit"]["points"]]
    [row] = doc["inputs"]["partial"]
    assert row["method"] == "pre" and row["size"] == "L8" and row["fitted"] is False and row["seeds"] == [0]
    assert row["missing_seeds"][0]["seed"] == 1 and row["missing_seeds"][0]["status"] == "stalled"
    assert doc["inputs"]["allow_partial"] is False
    assert any(e["cell_id"] == "pre/L8/s0" and e["reason"].startswith("partial size") for e in doc["inputs"]["excluded"])
    assert doc["methods"]["layerrope"]["loss_fit"]["n_points"] == 5  # the other method keeps every size

    assert main(["fit", str(root), "--no-write", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "L8 (partial, not fitted)" in out and "s1 stalled" in out


def test_allow_partial_fits_the_surviving_seeds_and_marks_them(make_sweep, capsys):
    root = make_sweep(truths=TRUTHS, depths=DEPTHS, seeds=(0, 1), noise=0.02, stalled_seeds={("pre", 8, 1)})
    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "200", "--allow-partial"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pre = doc["methods"]["pre"]
    l8 = next(r for r in pre["sizes"] if r["size"] == "L8")
    assert l8["partial"] is True and l8["seeds"] == [0] and l8["missing_seeds"][0]["seed"] == 1
    assert pre["loss_fit"]["n_points"] == 5
    assert doc["inputs"]["partial"][0]["fitted"] is True and doc["inputs"]["allow_partial"] is True
    assert any("partial size(s) fitted" in w for w in doc["warnings"])


def test_every_seed_failing_is_not_partial(make_sweep):
    """A size where no seed has an optimum is a failed size (listed as such), not a partial one."""
    root = make_sweep(truths=TRUTHS, depths=DEPTHS, seeds=(0, 1), all_stalled={("pre", 8)})
    results = collect(root)
    assert results.partial == []
    assert {f["cell_id"] for f in results.failed} == {"pre/L8/s0", "pre/L8/s1"}
