"""Weights & Biases: a run per point (id from the point id, name the point id, group the cell id,
job type `point`), the learning curves with tokens as W&B's step, the outcome in the run's summary;
a run per cell (job type `cell`, in the cell's group) holds the cell's status and optimum.

Needs the `wandb` extra. `mode: offline` writes under DIR/wandb (upload later with `wandb sync`);
a relaunch resumes a point's run (`resume="allow"` with the same id), and W&B keeps one value per
step, so curve rows sent again after a relaunch do not double the curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.spec.schema import WandbTracking
from sweeper.tracking.core import PointRun, stable_run_id


class WandbTracker:
    name = "wandb"

    def __init__(self, settings: WandbTracking, sweep_dir: Path) -> None:
        import wandb  # the wandb extra, loaded only when a sweep asks for it

        self.wandb = wandb
        self.settings = settings
        self.dir = sweep_dir
        self.runs: dict[str, Any] = {}  # point id -> its open wandb run

    def _init(self, run_id: str, name: str, group: str, job_type: str, config: Mapping[str, Any]) -> Any:
        return self.wandb.init(
            project=self.settings.project, entity=self.settings.entity, mode=self.settings.mode, dir=str(self.dir),
            id=run_id, name=name, group=group, job_type=job_type, config=dict(config), resume="allow",
            reinit="create_new",
            # console="off": the driver's terminal (the live table) is not the run's output to capture
            settings=self.wandb.Settings(silent=True, console="off", save_code=False, disable_git=True),
        )

    def start(self, run: PointRun) -> None:
        self.runs[run.point_id] = self._init(run.run_id, run.point_id, run.cell_id, "point", run.config)

    def log(self, run: PointRun, curve: Sequence[Mapping[str, Any]]) -> None:
        handle = self.runs[run.point_id]
        for row in curve:
            values = {k: row[k] for k in ("train_loss", "eval_loss") if row.get(k) is not None}
            if values:
                handle.log({**values, "tokens": row["tokens"]}, step=int(row["tokens"]))

    def finish(self, run: PointRun, outcome: Mapping[str, Any]) -> None:
        handle = self.runs.pop(run.point_id)
        handle.summary.update({k: v for k, v in outcome.items() if v is not None})
        handle.finish(exit_code=1 if outcome["outcome"] == "failed" else 0)

    def cell(self, sweep: str, cell_id: str, summary: Mapping[str, Any]) -> None:
        handle = self._init(stable_run_id(sweep, cell_id), f"{cell_id} (cell)", cell_id, "cell",
                            {"sweep": sweep, "cell_id": cell_id})
        handle.summary.update({k: v for k, v in summary.items() if v is not None})
        handle.finish()

    def close(self) -> None:
        for handle in self.runs.values():
            handle.finish()
        self.runs.clear()
