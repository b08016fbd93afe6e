"""The records every part of the sweeper shares: ids, states, point and cell rows, and the store's
tables made from them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper.core.ids import CellId, PointId, canonical, cell_of, point_id, size_labels
from sweeper.core.rows import CELL_COLUMNS, CURVE_COLUMNS, POINT_COLUMNS, CellFacts, CellRow, CurvePoint, PointRow
from sweeper.core.states import ACTIVE_STATES, FINISHED_STATES, CellStatus, PointState
from sweeper.records.store import CELLS_SCHEMA, CURVES_SCHEMA, POINTS_SCHEMA, StoreWriter, load_cells, load_points
from sweeper.core.grid import CellDecision, GridPoint

CELL = CellFacts(cell_id="pre/T4/s1", method="pre", family="looped", size="T4", depth=4, loops=4, width=32, seed=1)
names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.+\-]{0,20}", fullmatch=True)


@given(method=names, size=names, seed=st.integers(0, 10**6), lr=st.floats(1e-12, 1e3))
def test_ids_round_trip(method, size, seed, lr):
    cell = CellId(method, size, seed)
    assert CellId.parse(str(cell)) == cell
    point = PointId.parse(point_id(str(cell), lr))
    assert point == PointId(cell, lr) and point.lr == canonical(lr) and cell_of(str(point)) == str(cell)
    assert str(point) == f"{method}/{size}/s{seed}/lr={lr:.6g}"


def test_size_labels_cover_every_axis():
    assert size_labels(depths=[1, 48]) == ["L1", "L48"]
    assert size_labels(loops=[1, 16]) == ["T1", "T16"]
    assert size_labels(sizes=["130M", "1.3B"]) == ["130M", "1.3B"]
    for bad in ("pre/L2", "pre/L2/seed0", "/L2/s0", "pre/L2/s0/lr=x"):
        with pytest.raises(ValueError):
            PointId.parse(bad) if "lr=" in bad else CellId.parse(bad)


def test_states_answer_what_they_mean():
    assert set(ACTIVE_STATES) == {"queued", "running"}
    assert set(FINISHED_STATES) == {"ok", "diverged", "stalled", "failed", "infra_failed"}
    assert [s for s in PointState if s.retried_on_relaunch] == [PointState.INFRA_FAILED]
    assert [s for s in PointState if s.counts_as_diverged] == [PointState.DIVERGED, PointState.STALLED]
    assert {s for s in CellStatus if s.learned_nothing} == {CellStatus.DIVERGED, CellStatus.STALLED}
    assert {s for s in CellStatus if not s.is_done} == {CellStatus.PENDING, CellStatus.RUNNING}
    assert f"{PointState.OK}" == "ok" and PointState("ok") is PointState.OK and "ok" in FINISHED_STATES


def test_a_point_row_validates_and_normalises():
    row = PointRow(CELL, 0.0100000001, "ok", objective=3.0, loss=float("nan"), train_seconds=float("inf"),
                   steps=None, diverged_step="7")
    assert row.lr == 0.01 and row.state is PointState.OK and row.point_id == "pre/T4/s1/lr=0.01"
    assert row.loss is None and row.train_seconds == 0.0 and row.steps == 0 and row.diverged_step == 7
    with pytest.raises(ValueError, match="only an ok point has an objective"):
        PointRow(CELL, 0.01, "diverged", objective=3.0)
    with pytest.raises(ValueError):
        PointRow(CELL, 0.01, "stuck")
    with pytest.raises(ValueError, match="learning rate"):
        PointRow(CELL, -1.0)
    assert row.grid_point() == GridPoint(0.01, "ok", 3.0)


def test_the_ledgers_metrics_and_the_stores_columns_are_projections_of_the_row():
    row = PointRow(CELL, 3e-3, "diverged", attempt=2, tune_trial_id="t9", init_loss=5.5, diverged_step=12,
                   reason="loss NaN", steps=12, tokens=96, train_seconds=1.5, started_at=10.0, finished_at=11.0,
                   corpus="c1")
    back = PointRow.from_ledger(CELL, row.lr, row.state, attempt=2, tune_trial_id="t9", objective=None,
                                metrics=row.metrics())
    assert back == row
    assert PointRow.from_columns(row.columns()) == row
    assert list(row.columns()) == [c.name for c in POINT_COLUMNS] == list(POINTS_SCHEMA)[1:]
    cell = CellRow.of(CELL, [row], CellDecision("diverged"), now=12.0)
    assert list(cell.columns()) == [c.name for c in CELL_COLUMNS] == list(CELLS_SCHEMA)
    assert CellRow.from_columns(cell.columns()) == cell and cell.n_diverged == 1 and cell.n_points == 1
    curve = CurvePoint(row, 10, 80, 4.0, math.nan, 10.5)
    assert list(curve.columns()) == [c.name for c in CURVE_COLUMNS] == list(CURVES_SCHEMA)
    assert curve.columns()["eval_loss"] is None


def test_rows_go_through_the_store_unchanged(tmp_path):
    rows = [PointRow(CELL, 1e-3, "queued", attempt=1, tune_trial_id="t1"),
            PointRow(CELL, 1e-3, "ok", attempt=1, tune_trial_id="t1", objective=3.2, loss=3.2, finished_at=5.0)]
    writer = StoreWriter(tmp_path)
    writer.append_points(rows)
    writer.write_cells([CellRow.of(CELL, rows[1:], CellDecision("edge"), now=6.0)])
    stored = load_points(tmp_path)
    assert stored.height == 1 and PointRow.from_columns(stored.row(0, named=True)) == rows[1]
    assert CellRow.from_columns(load_cells(tmp_path).row(0, named=True)).status is CellStatus.EDGE


def test_loop_losses_and_lambada_go_through_ledger_and_store_and_older_stores_read_them_as_null(tmp_path):
    from sweeper.core.rows import encode_loop_losses
    import polars as pl
    from sweeper.records.durable import write_parquet_atomic

    losses = encode_loop_losses({"8": 3.25, "1": 3.5, "2": 3.375, "4": 3.3125})
    assert losses == '{"1":3.5,"2":3.375,"4":3.3125,"8":3.25}'  # counts ascending, as numbers
    row = PointRow(CELL, 1e-3, "ok", attempt=1, objective=3.25, loss=3.25, loop_losses=losses, lambada_ppl=41.5)
    assert row.loop_loss_map() == {1: 3.5, 2: 3.375, 4: 3.3125, 8: 3.25}
    back = PointRow.from_ledger(CELL, row.lr, row.state, attempt=1, tune_trial_id=None, objective=3.25,
                                metrics=row.metrics())
    assert back == row and PointRow.from_columns(row.columns()) == row
    assert PointRow(CELL, 1e-3, "ok", objective=3.0, lambada_ppl=math.inf).lambada_ppl is None
    writer = StoreWriter(tmp_path)
    writer.append_points([row])
    assert PointRow.from_columns(load_points(tmp_path).row(0, named=True)) == row
    # a chunk written by store version 3 has neither column: its rows read them as null
    old = pl.DataFrame([{"seq": 9, **row.columns()}]).drop("loop_losses", "lambada_ppl")
    write_parquet_atomic(old.to_arrow(), tmp_path / "store" / "points" / f"{99:012d}.parquet")
    stored = load_points(tmp_path)
    last = PointRow.from_columns(stored.row(stored.height - 1, named=True))
    assert last.loop_losses is None and last.lambada_ppl is None and last.loss == 3.25
