"""The Optuna ledger: round trips through real storages, and optuna-dashboard reads it."""

from __future__ import annotations

import json
import sys
from wsgiref.util import setup_testing_defaults

import optuna
import pytest

from sweeper.records.ledger import Ledger, storage_url


@pytest.fixture(params=["sqlite", "journal"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        return Ledger(storage_url("sqlite", tmp_path))
    return Ledger(f"journal:{tmp_path / 'ledger.log'}")


def test_points_round_trip(ledger):
    attrs = {"method": "pre", "size": "L2", "depth": 2}
    a = ledger.open_point("pre/L2/s0", "pre/L2/s0/lr=0.001", 1e-3, (1e-6, 1.0), attempt=1, tune_trial_id="t1",
                          cell_attrs=attrs)
    b = ledger.open_point("pre/L2/s0", "pre/L2/s0/lr=0.002", 2e-3, (1e-6, 1.0), attempt=1, tune_trial_id="t1")
    c = ledger.open_point("pre/L2/s0", "pre/L2/s0/lr=0.004", 4e-3, (1e-6, 1.0), attempt=1, tune_trial_id="t1")
    d = ledger.open_point("pre/L2/s0", "pre/L2/s0/lr=0.008", 8e-3, (1e-6, 1.0), attempt=1, tune_trial_id="t2")
    ledger.update(d, state="running")
    ledger.report(a, 50, 3.5)
    ledger.report(a, 60, float("nan"))  # ignored, never stored as NaN
    ledger.finish(a, "ok", 3.1, {"loss": 3.1, "init_loss": 5.5, "train_seconds": float("inf")})
    ledger.finish(b, "diverged", None, {"reason": "loss NaN", "diverged_step": 12})
    ledger.finish(c, "failed", None, {"reason": "RuntimeError: boom"})

    fresh = Ledger(ledger.url)  # another process reads it
    points = {p.point_id: p for p in fresh.load()["pre/L2/s0"]}
    assert [p.state for p in points.values()] == ["ok", "diverged", "failed", "running"]
    assert points["pre/L2/s0/lr=0.001"].objective == 3.1
    assert points["pre/L2/s0/lr=0.001"].metrics == {"loss": 3.1, "init_loss": 5.5, "train_seconds": None}
    assert points["pre/L2/s0/lr=0.002"].metrics["reason"] == "loss NaN"
    running = points["pre/L2/s0/lr=0.008"]
    assert running.tune_trial_id == "t2" and running.trial_id == d
    assert fresh.cells()["pre/L2/s0"] == attrs
    # A retried point gets a new trial; the newest one is the point.
    e = fresh.open_point("pre/L2/s0", "pre/L2/s0/lr=0.004", 4e-3, (1e-6, 1.0), attempt=2, tune_trial_id="t3")
    fresh.finish(e, "ok", 3.3, {"loss": 3.3})
    again = {p.point_id: p for p in Ledger(ledger.url).load()["pre/L2/s0"]}
    assert again["pre/L2/s0/lr=0.004"].state == "ok" and again["pre/L2/s0/lr=0.004"].attempt == 2


def test_the_ledger_is_an_ordinary_optuna_study(tmp_path):
    ledger = Ledger(storage_url("sqlite", tmp_path))
    for lr, value in ((1e-3, 3.0), (2e-3, 2.5), (4e-3, 2.8)):
        t = ledger.open_point("post/L4/s1", f"post/L4/s1/lr={lr:.6g}", lr, (1e-5, 0.1), attempt=1, tune_trial_id="x")
        ledger.finish(t, "ok", value, {"loss": value})
    study = optuna.load_study(study_name="post/L4/s1", storage=ledger.url)
    assert study.best_trial.params == {"lr": 2e-3}
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    frame = study.trials_dataframe()
    assert list(frame["params_lr"]) == [1e-3, 2e-3, 4e-3]


def test_optuna_dashboard_opens_the_ledger(tmp_path):
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    ledger = Ledger(storage_url("sqlite", tmp_path))
    t = ledger.open_point("layerrope/L8/s0", "layerrope/L8/s0/lr=0.003", 3e-3, (1e-5, 0.1), attempt=1,
                          tune_trial_id="x", cell_attrs={"method": "layerrope"})
    ledger.report(t, 50, 3.2)
    ledger.finish(t, "ok", 2.9, {"loss": 2.9})
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
