"""Experiment trackers with the real libraries, offline: a sweep driven through its recorder (no Ray) logs
live to W&B (WANDB_MODE offline, read back from the run files), MLflow (a file store, read back with
`mlflow.search_runs`) and TensorBoard (event files, read back with its EventAccumulator); a tracker that
fails warns once and the sweep and its store lose nothing; `sweeper track` back-fills, and running it
again adds no run and no curve value."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")

import mlflow  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.util.tensor_util import make_ndarray  # noqa: E402

from sweeper.cli import main  # noqa: E402
from sweeper.records.ledger import OptunaLedger, storage_url  # noqa: E402
from sweeper.records.durable import write_json_atomic  # noqa: E402
from sweeper.records.store import MANIFEST, StoreWriter, load_cells, load_curves, load_points  # noqa: E402
from sweeper.run.sweep_dir import manifest_for  # noqa: E402
from sweeper.run.launch import open_tracking  # noqa: E402
from sweeper.run.sweep_run import SweepRun  # noqa: E402
from sweeper.search.planner import build_plan  # noqa: E402
from sweeper.spec.schema import validate_data  # noqa: E402
from sweeper.tracking.core import stable_run_id  # noqa: E402
from tests.sweeper.run.test_sweep_run import drive  # noqa: E402
from tests.sweeper.tracking.wandb_files import read_runs  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the file store (MLflow's default is SQLite)


def _mlflow_runs(uri: str, experiment: str):
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    return mlflow.search_runs([exp.experiment_id])


def _tb_texts(folder: Path, tag: str) -> list[str]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [make_ndarray(e.tensor_proto).item().decode() for e in acc.Tensors(tag)]


def _tb_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """One cell swept to its bracket, logged live; TensorBoard's folder is blocked by a file (it fails)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    tmp = tmp_path_factory.mktemp("live")
    tb = tmp / "tb"
    tb.mkdir()
    (tb / "pre").write_text("a file where the cell's folder goes")
    uri = (tmp / "mlruns").as_uri()
    raw = {
        "name": "tracked", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
        "train": {"steps": 30, "batch_size": 4}, "lr": {"center": 3e-3, "points": 3, "refine": False}, "stack": 3,
        "tracking": {"wandb": {"project": "layerrope-test"}, "mlflow": {"tracking_uri": uri},
                     "tensorboard": {"dir": str(tb)}},
    }
    plan = build_plan(validate_data(raw), output=str(tmp / "sweep"))
    plan.sweep_dir.mkdir(parents=True)
    ledger = OptunaLedger(storage_url("sqlite", plan.sweep_dir))
    write_json_atomic(plan.sweep_dir / MANIFEST, manifest_for(plan, None, ledger.url).to_json())
    (plan.sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(raw))  # `sweeper track` reads its tracking section
    messages: list[str] = []
    tracking = open_tracking(plan, messages.append)
    assert tracking is not None and [t.name for t in tracking.trackers] == ["wandb", "mlflow", "tensorboard"]
    sweep = SweepRun(plan, ledger, StoreWriter(plan.sweep_dir),
                     concurrency=2, tracking=tracking)
    tracking.warn = sweep.messages.append
    sweep.load([])
    drive(sweep)
    tracking.close()
    mp.undo()
    return plan.sweep_dir, sweep.messages + messages, uri


def test_live_logging(live: tuple[Path, list[str], str]) -> None:
    root, messages, uri = live
    points = load_points(root)
    curves = load_curves(root)
    (cell,) = load_cells(root).to_dicts()
    assert cell["status"] == "bracketed" and points.height >= 3
    assert curves.height and (points["state"] == "ok").all()  # the store has everything: the tracker failure cost nothing

    failures = [m for m in messages if m.startswith("tracking:")]
    assert len(failures) == 1 and "tensorboard failed" in failures[0], messages  # once, naming the tracker

    # W&B: a run per point (stable id), named by the point, grouped by cell; curves against tokens; outcome
    runs = read_runs(root)
    assert set(runs) == {stable_run_id("tracked", pid) for pid in points["point_id"]} | {
        stable_run_id("tracked", cell["cell_id"])}
    for row in points.iter_rows(named=True):
        (run,) = runs[stable_run_id("tracked", row["point_id"])]
        assert run.name == row["point_id"] and run.group == row["cell_id"] and run.job_type == "point"
        assert run.config["lr"] == row["lr"] and run.config["method"] == "pre" and run.config["seed"] == 0
        assert run.config["recipe"]["train"]["steps"] == 30  # the sweep's recipe
        mine = curves.filter(pl.col("point_id") == row["point_id"]).sort("tokens")
        logged = [(h["_step"], h["train_loss"]) for h in run.history if "train_loss" in h]
        assert logged == list(zip(mine["tokens"], mine["train_loss"]))
        assert run.summary["outcome"] == "ok" and run.summary["objective"] == row["objective"]
    (cell_run,) = runs[stable_run_id("tracked", cell["cell_id"])]
    assert cell_run.job_type == "cell" and cell_run.group == cell["cell_id"]
    assert cell_run.summary["status"] == "bracketed" and cell_run.summary["interp_lr"] == cell["interp_lr"]

    # MLflow: a parent run per cell, a child per point with its metrics and outcome
    found = _mlflow_runs(uri, "tracked")
    parent = found[found["tags.sweeper.kind"] == "cell"]
    children = found[found["tags.sweeper.kind"] == "point"]
    assert list(parent["tags.mlflow.runName"]) == [cell["cell_id"]]
    assert parent["tags.sweeper.status"].item() == "bracketed" and parent["metrics.best_lr"].item() == cell["best_lr"]
    assert set(children["tags.mlflow.parentRunId"]) == set(parent["run_id"])
    assert sorted(children["tags.mlflow.runName"]) == sorted(points["point_id"])
    by_name = {r["tags.mlflow.runName"]: r for _, r in children.iterrows()}
    for row in points.iter_rows(named=True):
        r = by_name[row["point_id"]]
        assert r["metrics.objective"] == row["objective"] and r["tags.sweeper.outcome"] == "ok"
        assert r["params.lr"] == str(row["lr"]) and r["status"] == "FINISHED"


def test_backfill_fills_a_failed_tracker_and_never_duplicates(live: tuple[Path, list[str], str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root, _, uri = live
    points = load_points(root)
    curves = load_curves(root)
    before_wandb = {k: len(v) for k, v in read_runs(root).items()}
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    first = points["point_id"][0]
    run_id = _mlflow_runs(uri, "tracked").set_index("tags.mlflow.runName").loc[first, "run_id"]
    history = len(client.get_metric_history(run_id, "train_loss"))

    logdir = root / "tb-backfill"
    for _ in range(2):
        assert main(["track", str(root), "--to", "tensorboard", "--logdir", str(logdir), "--to", "mlflow"]) == 0
    out = capsys.readouterr().out
    assert "to tensorboard, mlflow" in out

    for row in points.iter_rows(named=True):  # TensorBoard: the point's folder under its cell's, each value once
        mine = curves.filter(pl.col("point_id") == row["point_id"]).sort("tokens")
        assert _tb_scalars(logdir / row["point_id"], "train_loss") == [
            (t, pytest.approx(v, rel=1e-6)) for t, v in zip(mine["tokens"], mine["train_loss"])]
        assert _tb_scalars(logdir / row["point_id"], "final/objective") == [
            (row["tokens"], pytest.approx(row["objective"], rel=1e-6))]
        assert _tb_texts(logdir / row["point_id"], "outcome") == ["ok"]
        assert f'"lr": {row["lr"]}' in _tb_texts(logdir / row["point_id"], "config")[0]
    cell = load_cells(root).row(0, named=True)  # the cell's folder holds its status and optimum
    assert _tb_texts(logdir / cell["cell_id"], "status") == ["bracketed"]
    assert _tb_scalars(logdir / cell["cell_id"], "cell/best_lr") == [(cell["n_points"], pytest.approx(cell["best_lr"]))]

    found = _mlflow_runs(uri, "tracked")  # MLflow: the same runs, no value logged twice
    assert len(found) == points.height + 1
    assert len(client.get_metric_history(run_id, "train_loss")) == history

    assert main(["track", str(root), "--to", "wandb"]) == 0  # W&B: the same run ids (a new offline file each)
    after = read_runs(root)
    assert set(after) == set(before_wandb)
