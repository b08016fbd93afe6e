"""`sweeper fit`'s LR-sensitivity counts say what they count (issue 33): diverged and stalled apart, equal to
`sweeper optima`'s per-cell counts summed over seeds; `LRs` distinct learning rates, `points` summed over seeds."""

from __future__ import annotations

import json

import pytest

from sweeper.cli import main

from .conftest import Truth

TRUTHS = {"pre": Truth(E=3.0, A=6.0, alpha=0.5), "post": Truth(E=3.1, A=6.5, alpha=0.45, c=0.02)}


def test_fit_counts_diverged_and_stalled_apart_as_optima_does(make_sweep, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[8, 16, 32, 64], seeds=(0, 1), noise=0.01,
                       all_stalled={("post", 64)}, all_diverged={("post", 32)}, grid=(-2, -1, 0, 1, 2, 3, 4))
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert main(["fit", str(sweep), "--format", "json", "--resamples", "200", "--no-write"]) == 0
    doc = json.loads(capsys.readouterr().out)
    summed: dict[tuple[str, str], dict[str, int]] = {}
    for c in cells:
        s = summed.setdefault((c["method"], c["size"]), {"n_diverged": 0, "n_stalled": 0, "n_points": 0})
        for key in s:
            s[key] += c[key]
    seen = 0
    for method, m in doc["methods"].items():
        for row in m["sensitivity"]:
            want = summed[(method, row["size"])]
            assert (row["n_diverged"], row["n_stalled"], row["n_lrs"]) == (
                want["n_diverged"], want["n_stalled"], want["n_points"]), (method, row["size"])
            assert row["n_distinct_lrs"] == 7  # both seeds swept the same seven learning rates
            seen += 1
    assert seen == 8
    stalled = next(r for r in doc["methods"]["post"]["sensitivity"] if r["size"] == "L64")
    assert stalled["n_stalled"] > 0 and stalled["n_diverged"] < stalled["n_lrs"]  # stalled ones are not "diverged"
    assert any(r["n_diverged"] for m in doc["methods"].values() for r in m["sensitivity"])
    # The table: "points summed over seeds" in its title; yes/no for the ranking's booleans.
    assert main(["fit", str(sweep), "--resamples", "200", "--no-write", "--wide"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "points summed over seeds" in text and "distinct LRs" in text and "stalled" in text
