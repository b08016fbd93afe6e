"""The live model reads only new chunks yet ends with exactly what the store holds, and
each poll sends only the traces that changed since the client's revision."""

from __future__ import annotations

import json

import polars as pl

from dashboards import figures
from dashboards.data import Filters
from dashboards.live import Dashboard, LiveModel
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
from sweeper.records.store import load_curves, load_points

SMALL = SyntheticSpec(
    methods=("pre", "layerrope"), depths=(4, 8), seeds=(0, 1), lrs_per_cell=4, steps=60, report_every=10
)


def poll(dash: Dashboard, since: int = 0, epoch: str | None = None, filters: Filters = Filters()) -> dict:
    body, _ = dash.update(since, epoch if epoch is not None else dash.model.epoch, filters)
    return json.loads(body)


def assert_model_matches_store(model: LiveModel) -> None:
    expected = load_points(model.root).sort("point_id")
    assert model.points.sort("point_id").equals(expected)
    curves = load_curves(model.root)
    curves = curves.filter(pl.col("attempt") == pl.col("attempt").max().over("point_id"))
    cols = ["point_id", "attempt", "step", "train_loss"]
    mine = pl.concat([f.select(cols) for f in model.curves.values()]).sort("point_id", "step")
    assert mine.equals(curves.select(cols).sort("point_id", "step"))


def test_incremental_reads_through_compactions_equal_a_full_read(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.writer.COMPACT_AT = 3  # compact every few chunks: merged files repeat rows already read
    model = LiveModel(sweep.root, min_interval=0.0)
    cursors = []
    for step in range(1, 13):
        sweep.advance(step / 12)
        assert model.refresh()
        cursors.append(model.cursor)
        assert_model_matches_store(model)
    assert not model.refresh()  # nothing new: nothing changed
    assert [c.curves for c in cursors] == sorted(c.curves for c in cursors)
    names = [p.name for p in (sweep.root / "store" / "curves").iterdir()]
    assert any("-" in n for n in names)  # compaction did happen


def test_a_retried_point_shows_only_its_latest_attempt(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.advance(0.5)
    model = LiveModel(sweep.root, min_interval=0.0)
    model.refresh()
    row = load_curves(sweep.root).row(0, named=True)
    retry = [{**row, "attempt": 2, "step": s, "tokens": s * 100, "train_loss": 9.0 - s / 100, "eval_loss": None}
             for s in (0, 10)]  # fmt: skip
    sweep.writer.append_curves(retry)
    model.refresh()
    group = model.curves[(row["method"], row["size"])]
    mine = group.filter(pl.col("point_id") == row["point_id"])
    assert mine["attempt"].to_list() == [2, 2] and mine["step"].to_list() == [0, 10]
    assert_model_matches_store(model)


def test_polls_send_everything_first_then_only_what_changed(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.advance(0.3)
    dash = Dashboard(sweep.root, min_interval=0.0)
    full = poll(dash, 0)
    assert full["full"] and set(full["figures"]) == set(figures.FIGURES)
    for name, part in full["figures"].items():
        assert part["layout"]["uirevision"]
        assert set(part["order"]) == set(part["traces"])
    rev = full["rev"]

    idle = poll(dash, rev)
    assert idle["figures"] == {} and idle["rev"] == rev and not idle["full"]

    sweep.advance(0.35)
    update = poll(dash, rev)
    assert update["rev"] > rev and update["figures"]
    sent = sum(len(p.get("traces", {})) for p in update["figures"].values())
    total = sum(len(p["order"]) for p in full["figures"].values())
    assert 0 < sent < total  # only the changed traces travel
    assert len(json.dumps(update)) < len(json.dumps(full))
    # the client's merge of full + update equals a fresh full answer
    merged = {
        n: {"order": p["order"], "traces": dict(p["traces"]), "layout": p["layout"]} for n, p in full["figures"].items()
    }
    for name, part in update["figures"].items():
        merged[name]["traces"].update(part.get("traces", {}))
        merged[name]["order"] = part.get("order", merged[name]["order"])
        merged[name]["layout"] = part.get("layout", merged[name]["layout"])
    fresh = poll(Dashboard(sweep.root, min_interval=0.0), 0)
    for name, part in fresh["figures"].items():
        assert merged[name]["order"] == part["order"], name
        assert [merged[name]["traces"][u] for u in part["order"]] == [part["traces"][u] for u in part["order"]], name
        assert merged[name]["layout"] == part["layout"], name


def test_another_epoch_or_an_old_revision_gets_a_full_answer(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.advance(0.3)
    dash = Dashboard(sweep.root, min_interval=0.0)
    first = poll(dash, 0)
    restarted = poll(dash, first["rev"], epoch="0123abcd")  # a client of a previous server process
    assert restarted["full"] and set(restarted["figures"]) == set(figures.FIGURES)


def test_filters_are_views_of_their_own(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.advance(0.6)
    dash = Dashboard(sweep.root, min_interval=0.0)
    only = poll(dash, 0, filters=Filters(methods=frozenset({"layerrope"}), seeds=frozenset({1})))
    lines = [t for t in only["figures"]["loss_vs_lr"]["traces"].values() if t.get("mode") == "lines+markers"]
    assert lines and all(t["meta"][0] == "layerrope" for t in lines)
    assert only["options"]["methods"] == [
        {"name": "layerrope", "colour": "#D55E00"},
        {"name": "pre", "colour": "#0072B2"},
    ]
    cells = [
        c
        for t in only["figures"]["loss_vs_lr"]["traces"].values()
        if t.get("name") == "best grid point"
        for c in t["customdata"]
    ]
    assert cells and all(c[1] == 1 for c in cells)  # seed 1 only
    everything = poll(dash, 0)
    assert len(everything["figures"]["loss_vs_lr"]["order"]) > len(only["figures"]["loss_vs_lr"]["order"])


def test_a_damaged_chunk_is_reported_and_the_last_good_state_kept(tmp_path):
    sweep = SyntheticSweep(tmp_path / "s", SMALL)
    sweep.advance(0.3)
    dash = Dashboard(sweep.root, min_interval=0.0)
    good = poll(dash, 0)
    (sweep.root / "store" / "points" / "000000009999.parquet").write_bytes(b"not parquet at all")
    bad = poll(dash, good["rev"])
    assert "damaged store chunk" in bad["error"] and "000000009999" in bad["error"]
    assert bad["summary"] == good["summary"] and bad["figures"] == {}
    (sweep.root / "store" / "points" / "000000009999.parquet").unlink()
    assert poll(dash, good["rev"])["error"] is None


def test_a_sweep_with_no_results_yet_shows_empty_figures_then_fills_in(tmp_path):
    from sweeper.records.durable import write_json_atomic
    from sweeper.records.store import MANIFEST, STORE_VERSION

    root = tmp_path / "s"
    root.mkdir()
    write_json_atomic(
        root / MANIFEST, {"store_version": STORE_VERSION, "name": "fresh"}
    )  # launched, nothing stored yet
    dash = Dashboard(root, min_interval=0.0)
    empty = poll(dash, 0)
    assert empty["error"] is None and empty["summary"]["n_points"] == 0
    notes = [a["text"] for p in empty["figures"].values() for a in p["layout"].get("annotations", [])]
    assert "No results yet" in notes and "No learning curve yet" in notes
    sweep = SyntheticSweep(root, SMALL)  # the driver starts writing
    sweep.advance(0.5)
    filled = poll(dash, empty["rev"])
    assert filled["summary"]["n_points"] == len(sweep.points)
    assert filled["figures"]["loss_vs_lr"]["traces"]
