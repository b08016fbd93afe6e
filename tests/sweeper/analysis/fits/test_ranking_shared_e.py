"""The ranking by compute exponent uses a shared E by default, and says so."""

from __future__ import annotations

import json

from sweeper.cli import main
from tests.sweeper.analysis.fits.conftest import Truth


def test_ranking_exponents_share_e_by_default(make_sweep, capsys):
    root = make_sweep(truths={"pre": Truth(E=3.0, alpha=0.4), "layerrope": Truth(E=3.0, alpha=0.6)},
                      depths=[2, 4, 8, 16, 32], on_optimum=True)
    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "300"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["e_model"] == "per-method"  # each method's own fits keep their E
    assert "shared" in doc["ranking_note"]
    rows = {r["method"]: r for r in doc["ranking"]}
    assert {r["compute_exponent_e_model"] for r in rows.values()} == {"shared"}
    # the shared-E exponents, not the methods' own: the steeper method ranks first
    assert rows["layerrope"]["rank_by_compute_exponent"] == 1
    own = {m: doc["methods"][m]["compute_exponent"]["value"] for m in rows}
    assert any(abs(rows[m]["compute_exponent"] - own[m]) > 1e-9 for m in rows)
    assert main(["fit", str(root), "--no-write", "--resamples", "300"]) == 0
    assert "(shared E)" in capsys.readouterr().out


def test_one_method_ranks_with_its_own_exponent(make_sweep, capsys):
    root = make_sweep(truths={"pre": Truth()}, depths=[2, 4, 8, 16])
    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "300"]) == 0
    [row] = json.loads(capsys.readouterr().out)["ranking"]
    assert row["compute_exponent_e_model"] in ("per-method", None)
