"""MLflow: an experiment per sweep (default: the sweep's name), a parent run per cell (name the
cell id; its status and optimum as tags and metrics when the cell is done), a child run per point
(name the point id; its config as params, the curves as metrics with tokens as the step, its
outcome as tags and final metrics).

Needs the `mlflow` extra (MLflow's client, `mlflow-skinny`). MLflow chooses run ids, so a run is
found again by its tags (`sweeper.sweep`, `sweeper.key`: the point or cell id), and the tokens
already logged (`sweeper.tokens_logged`) keep a relaunch or a second back-fill from logging a curve
twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.spec.schema import MlflowTracking
from sweeper.tracking.core import PointRun, flat

MAX_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
MAX_PARAMS = 100  # params per log_batch call
MAX_PARAM_CHARS = 6000


def tracking_uri(settings: MlflowTracking, sweep_dir: Path) -> str:
    """The YAML's, else MLFLOW_TRACKING_URI, else a SQLite store in the sweep directory (MLflow's file
    store refuses to start unless MLFLOW_ALLOW_FILE_STORE is set)."""
    return (settings.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            or f"sqlite:///{(sweep_dir / 'mlflow.db').resolve()}")


class MlflowTracker:
    name = "mlflow"

    def __init__(self, settings: MlflowTracking, sweep_dir: Path, sweep: str) -> None:
        from mlflow.entities import Metric, Param, RunTag  # the mlflow extra, loaded only when a sweep asks for it
        from mlflow.tracking import MlflowClient

        self.Metric, self.Param, self.RunTag = Metric, Param, RunTag
        self.sweep = sweep
        self.client = MlflowClient(tracking_uri=tracking_uri(settings, sweep_dir))
        name = settings.experiment or sweep
        experiment = self.client.get_experiment_by_name(name)
        self.experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        self.runs: dict[str, str] = {}  # point or cell id -> run id
        self.logged: dict[str, float] = {}  # point id -> tokens logged so far
        self.finished: set[str] = set()
        self.statuses: dict[str, str] = {}  # cell id -> the status its parent run holds
        token = None
        while True:  # the runs of this sweep already there (an earlier launch or back-fill)
            page = self.client.search_runs([self.experiment_id], f"tags.`sweeper.sweep` = '{sweep}'",
                                           max_results=1000, page_token=token)
            for found in page:
                key = found.data.tags.get("sweeper.key")
                if key:
                    self.runs[key] = found.info.run_id
                    self.logged[key] = float(found.data.tags.get("sweeper.tokens_logged", -1))
                    if "sweeper.outcome" in found.data.tags:
                        self.finished.add(key)
                    if "sweeper.status" in found.data.tags:
                        self.statuses[key] = found.data.tags["sweeper.status"]
            token = page.token
            if not token:
                break

    def _tags(self, key: str, kind: str) -> dict[str, str]:
        return {"sweeper.sweep": self.sweep, "sweeper.key": key, "sweeper.kind": kind}

    def _cell_run(self, cell_id: str) -> str:
        if cell_id not in self.runs:
            run = self.client.create_run(self.experiment_id, run_name=cell_id, tags=self._tags(cell_id, "cell"))
            self.runs[cell_id] = run.info.run_id
        return self.runs[cell_id]

    def start(self, run: PointRun) -> None:
        if run.point_id in self.runs:
            if run.point_id in self.finished:  # a retried failed point runs again
                self.client.update_run(self.runs[run.point_id], status="RUNNING")
                self.finished.discard(run.point_id)
            return
        parent = self._cell_run(run.cell_id)
        created = self.client.create_run(self.experiment_id, run_name=run.point_id,
                                         tags={**self._tags(run.point_id, "point"), "mlflow.parentRunId": parent})
        self.runs[run.point_id] = created.info.run_id
        params = [self.Param(k, v[:MAX_PARAM_CHARS]) for k, v in flat(run.config).items()]
        for i in range(0, len(params), MAX_PARAMS):
            self.client.log_batch(created.info.run_id, params=params[i:i + MAX_PARAMS])

    def log(self, run: PointRun, curve: Sequence[Mapping[str, Any]]) -> None:
        run_id = self.runs[run.point_id]
        done = self.logged.get(run.point_id, -1.0)
        metrics = []
        for row in curve:
            tokens = int(row["tokens"])
            if tokens <= done:
                continue
            stamp = int(1000 * (row.get("time") or time.time()))
            metrics += [self.Metric(k, float(row[k]), stamp, tokens) for k in ("train_loss", "eval_loss")
                        if row.get(k) is not None]
            done = tokens
        for i in range(0, len(metrics), MAX_BATCH):
            self.client.log_batch(run_id, metrics=metrics[i:i + MAX_BATCH])
        if done > self.logged.get(run.point_id, -1.0):
            self.client.set_tag(run_id, "sweeper.tokens_logged", str(int(done)))
            self.logged[run.point_id] = done

    def finish(self, run: PointRun, outcome: Mapping[str, Any]) -> None:
        run_id = self.runs[run.point_id]
        stamp = int(1000 * time.time())
        step = int(outcome.get("tokens") or 0)
        metrics = [self.Metric(k, float(outcome[k]), stamp, step)
                   for k in ("objective", "loss", "accuracy", "init_loss", "train_seconds") if outcome.get(k) is not None]
        tags = [self.RunTag("sweeper.outcome", str(outcome["outcome"]))]
        if outcome.get("reason"):
            tags.append(self.RunTag("sweeper.reason", str(outcome["reason"])[:5000]))
        self.client.log_batch(run_id, metrics=metrics, tags=tags)
        self.client.set_terminated(run_id, "FAILED" if outcome["outcome"] == "failed" else "FINISHED")
        self.finished.add(run.point_id)

    def cell(self, sweep: str, cell_id: str, summary: Mapping[str, Any]) -> None:
        if self.statuses.get(cell_id) == summary["status"]:
            return
        run_id = self._cell_run(cell_id)
        stamp = int(1000 * time.time())
        metrics = [self.Metric(k, float(v), stamp, 0) for k, v in summary.items()
                   if k != "status" and v is not None]
        self.client.log_batch(run_id, metrics=metrics, tags=[self.RunTag("sweeper.status", str(summary["status"]))])
        self.client.set_terminated(run_id, "FINISHED")
        self.statuses[cell_id] = str(summary["status"])

    def close(self) -> None:
        pass  # every call above is written when it returns; an active point's run stays RUNNING until it ends
