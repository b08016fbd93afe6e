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


def test_fit_refuses_a_depth_axis_where_the_sizes_differ_in_width(make_sweep, tmp_path, capsys) -> None:
    """A width sweep (every size the same depth): `--x depth` would fit on one x; it says which axes work."""
    from sweeper.core.rows import CellRow, PointRow
    from sweeper.records.store import MANIFEST, StoreWriter, load_cells, load_points

    source = make_sweep(truths=TRUTHS, depths=[8, 16, 32, 64])
    root = tmp_path / "widths"
    root.mkdir()
    (root / MANIFEST).write_text((source / MANIFEST).read_text())
    writer = StoreWriter(root)
    writer.append_points([PointRow.from_columns({**r, "depth": 12}) for r in load_points(source).to_dicts()])
    writer.write_cells([CellRow.from_columns({**r, "depth": 12}) for r in load_cells(source).to_dicts()])
    assert main(["fit", str(root), "--x", "depth", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "every size of this sweep has 12 blocks" in err and "--x params or --x compute" in err
    assert main(["fit", str(root), "--x", "params", "--no-write", "--resamples", "200", "--json"]) == 0
