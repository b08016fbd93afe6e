"""The Optuna ledger: round trips through real storages, and optuna-dashboard reads it."""

from __future__ import annotations

import json
import sys
from wsgiref.util import setup_testing_defaults

import optuna
import pytest

from sweeper.records.ledger import OptunaLedger, storage_url
from sweeper.core.rows import CellFacts, PointRow
from sweeper.core.states import PointState

CELL = CellFacts(cell_id="pre/L2/s0", method="pre", size="L2", depth=2)


@pytest.fixture(params=["sqlite", "journal"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        return OptunaLedger(storage_url("sqlite", tmp_path))
    return OptunaLedger(f"journal:{tmp_path / 'ledger.log'}")


def queued(lr: float, tune_trial_id: str, attempt: int = 1, cell: CellFacts = CELL) -> PointRow:
    return PointRow(cell, lr, PointState.QUEUED, attempt=attempt, tune_trial_id=tune_trial_id)


def test_points_round_trip(ledger):
    attrs = {"method": "pre", "size": "L2", "depth": 2, "flops_per_token": float("inf")}
    bounds = (1e-6, 1.0)
    rows = {lr: queued(lr, "t1") for lr in (1e-3, 2e-3, 4e-3)}
    a, b, c = (ledger.open(row, bounds, attrs if lr == 1e-3 else {}) for lr, row in rows.items())
    d_row = queued(8e-3, "t2")
    d = ledger.open(d_row, bounds, {})
    ledger.start(d, d_row.evolve(state=PointState.RUNNING, started_at=123.0))
    ledger.report(a, 50, 3.5)
    ledger.report(a, 60, float("nan"))  # ignored, never stored as NaN
    ledger.finish(a, rows[1e-3].evolve(state=PointState.OK, objective=3.1, loss=3.1, init_loss=5.5,
                                       train_seconds=float("inf")))
    ledger.finish(b, rows[2e-3].evolve(state=PointState.DIVERGED, reason="loss NaN", diverged_step=12))
    ledger.finish(c, rows[4e-3].evolve(state=PointState.FAILED, reason="RuntimeError: boom"))

    fresh = OptunaLedger(ledger.url)  # another process reads it
    points = {e.row.point_id: e for e in fresh.load()}
    assert [e.row.state for e in points.values()] == ["ok", "diverged", "failed", "running"]
    ok = points["pre/L2/s0/lr=0.001"].row
    assert ok.objective == 3.1 and (ok.loss, ok.init_loss, ok.train_seconds) == (3.1, 5.5, 0.0)
    assert points["pre/L2/s0/lr=0.002"].row.reason == "loss NaN" and points["pre/L2/s0/lr=0.002"].row.diverged_step == 12
    running = points["pre/L2/s0/lr=0.008"]
    assert running.row.tune_trial_id == "t2" and running.entry == d and running.row.started_at == 123.0
    assert all(points[p].entry is None for p in points if p != "pre/L2/s0/lr=0.008")  # finished: never written again
    assert fresh.cells()["pre/L2/s0"] == {**attrs, "flops_per_token": None}  # JSON-safe: no inf stored
    stored = optuna.load_study(study_name="pre/L2/s0", storage=ledger.url).trials if ledger.url.startswith("sqlite") else []
    assert all(v == v for t in stored for v in t.intermediate_values.values())
    # A retried point gets a new entry; the newest one is the point.
    e = fresh.open(queued(4e-3, "t3", attempt=2), bounds, {})
    fresh.finish(e, queued(4e-3, "t3", attempt=2).evolve(state=PointState.OK, objective=3.3, loss=3.3))
    again = {e.row.point_id: e.row for e in OptunaLedger(ledger.url).load()}
    assert again["pre/L2/s0/lr=0.004"].state == "ok" and again["pre/L2/s0/lr=0.004"].attempt == 2


def test_a_stalled_point_round_trips_with_its_reason_and_loss(ledger):
    row = queued(2e-2, "t1")
    entry = ledger.open(row, (1e-6, 1.0), {"method": "pre", "size": "L2", "depth": 2})
    stalled = row.evolve(state=PointState.STALLED, loss=3.2457, loss_se=0.06, unigram_loss=3.2449,
                         loss_batches="[3.1,3.3]", reason="stalled: final eval loss 3.2457 is within 0.05 nats")
    ledger.finish(entry, stalled)
    [back] = OptunaLedger(ledger.url).load()
    assert back.row == stalled and back.row.state is PointState.STALLED and back.row.batch_losses() == [3.1, 3.3]
    if ledger.url.startswith("sqlite"):  # for Optuna it is pruned (no value), with its own reason
        [trial] = optuna.load_study(study_name="pre/L2/s0", storage=ledger.url).trials
        assert trial.state == optuna.trial.TrialState.PRUNED and trial.user_attrs["reason"].startswith("stalled:")
        assert trial.user_attrs["state"] == "stalled"


def test_the_ledger_is_an_ordinary_optuna_study(tmp_path):
    ledger = OptunaLedger(storage_url("sqlite", tmp_path))
    cell = CellFacts(cell_id="post/L4/s1", method="post", size="L4", seed=1)
    for lr, value in ((1e-3, 3.0), (2e-3, 2.5), (4e-3, 2.8)):
        row = queued(lr, "x", cell=cell)
        t = ledger.open(row, (1e-5, 0.1), {})
        ledger.finish(t, row.evolve(state=PointState.OK, objective=value, loss=value))
    study = optuna.load_study(study_name="post/L4/s1", storage=ledger.url)
    assert study.best_trial.params == {"lr": 2e-3}
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    frame = study.trials_dataframe()
    assert list(frame["params_lr"]) == [1e-3, 2e-3, 4e-3]


def test_optuna_dashboard_opens_the_ledger(tmp_path):
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    ledger = OptunaLedger(storage_url("sqlite", tmp_path))
    row = queued(3e-3, "x", cell=CellFacts(cell_id="layerrope/L8/s0", method="layerrope", size="L8"))
    t = ledger.open(row, (1e-5, 0.1), {"method": "layerrope"})
    ledger.report(t, 50, 3.2)
    ledger.finish(t, row.evolve(state=PointState.OK, objective=2.9, loss=2.9))
    app = optuna_dashboard.wsgi(optuna.storages.RDBStorage(ledger.url))

    def get(path: str) -> dict:
        status: list[str] = []
        env = {"PATH_INFO": path}
        setup_testing_defaults(env)
        env["wsgi.errors"] = sys.stderr
        body = b"".join(app(env, lambda s, h, exc_info=None: status.append(s)))
        assert status[0].startswith("200"), (path, status, body[:200])
        return json.loads(body)

    summaries = get("/api/studies")["study_summaries"]
    assert [s["study_name"] for s in summaries] == ["layerrope/L8/s0"]
    study = get(f"/api/studies/{summaries[0]['study_id']}")
    trial = study["trials"][0]
    assert trial["state"] == "Complete" and trial["values"] == [2.9]
    assert trial["params"][0]["name"] == "lr" and trial["params"][0]["param_internal_value"] == 3e-3
    assert trial["intermediate_values"] == [{"step": 50, "value": 3.2}]
