"""TensorBoard: event files under one log directory (default DIR/tensorboard), a folder per cell
(`<method>/<size>/s<seed>`: TensorBoard lists it as a run holding the cell's status and optimum) and a
sub-folder per point (`.../lr=<lr>`: its config as text, `train_loss` and `eval_loss` against tokens,
its outcome as text and final scalars).

Needs the `tensorboard` extra, whose event-file writer and protobufs write the files (no torch, no
TensorFlow: `sweeper track` starts fast). A relaunch or a second
back-fill writes a new event file into the same folder, which TensorBoard reads as the same run; a
small `.sweeper.json` in each folder (the tokens already logged, whether the point finished) keeps
them from repeating a value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.records.durable import write_json_atomic
from sweeper.spec.schema import TensorboardTracking
from sweeper.tracking.core import PointRun

MARK = ".sweeper.json"


def log_dir(settings: TensorboardTracking, sweep_dir: Path) -> Path:
    return Path(settings.dir) if settings.dir else sweep_dir / "tensorboard"


class EventWriter:
    """One run folder's event file: scalars and text summaries, as TensorBoard's scalar and text plugins read them."""

    def __init__(self, folder: Path) -> None:
        # The tensorboard extra, loaded only when a sweep asks for it.
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.metadata import create_summary_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from tensorboard.util.tensor_util import make_tensor_proto

        self.Event, self.Summary, self.text_metadata = Event, Summary, create_summary_metadata
        self.make_tensor_proto = make_tensor_proto
        folder.mkdir(parents=True, exist_ok=True)
        self.file = EventFileWriter(str(folder))

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        summary = self.Summary(value=[self.Summary.Value(tag=tag, simple_value=value)])
        self.file.add_event(self.Event(wall_time=walltime or time.time(), step=step, summary=summary))

    def add_text(self, tag: str, text: str, step: int) -> None:
        value = self.Summary.Value(tag=tag, metadata=self.text_metadata(display_name=tag, description=""),
                                   tensor=self.make_tensor_proto(text.encode()))
        self.file.add_event(self.Event(wall_time=time.time(), step=step, summary=self.Summary(value=[value])))

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorboardTracker:
    name = "tensorboard"

    def __init__(self, settings: TensorboardTracking, sweep_dir: Path) -> None:
        import tensorboard  # noqa: F401  (the extra: a missing one is found when the sweep starts, not mid-run)

        self.root = log_dir(settings, sweep_dir)
        self.writers: dict[str, Any] = {}  # point or cell id -> its open writer

    def _mark(self, key: str) -> dict[str, Any]:
        try:
            return json.loads((self.root / key / MARK).read_text())
        except (OSError, ValueError):
            return {}

    def _set_mark(self, key: str, **values: Any) -> None:
        write_json_atomic(self.root / key / MARK, {**self._mark(key), **values})

    def _writer(self, key: str) -> Any:
        if key not in self.writers:
            self.writers[key] = EventWriter(self.root / key)
        return self.writers[key]

    def start(self, run: PointRun) -> None:
        mark = self._mark(run.point_id)
        writer = self._writer(run.point_id)
        if not mark.get("started"):
            writer.add_text("config", "```\n" + json.dumps(run.config, indent=2, sort_keys=True, default=str) + "\n```", 0)
            writer.flush()
            self._set_mark(run.point_id, started=True)

    def log(self, run: PointRun, curve: Sequence[Mapping[str, Any]]) -> None:
        done = self._mark(run.point_id).get("tokens_logged", -1)
        writer = self._writer(run.point_id)
        last = done
        for row in curve:
            tokens = int(row["tokens"])
            if tokens <= done:
                continue
            for key in ("train_loss", "eval_loss"):
                if row.get(key) is not None:
                    writer.add_scalar(key, float(row[key]), tokens, walltime=row.get("time"))
            last = max(last, tokens)
        writer.flush()
        if last > done:
            self._set_mark(run.point_id, tokens_logged=last)

    def finish(self, run: PointRun, outcome: Mapping[str, Any]) -> None:
        if self._mark(run.point_id).get("finished") != outcome["outcome"]:
            writer = self._writer(run.point_id)
            step = int(outcome.get("tokens") or 0)
            for key in ("objective", "loss", "accuracy"):
                if outcome.get(key) is not None:
                    writer.add_scalar(f"final/{key}", float(outcome[key]), step)
            reason = f" ({outcome['reason']})" if outcome.get("reason") else ""
            writer.add_text("outcome", f"{outcome['outcome']}{reason}", step)
            writer.flush()
            self._set_mark(run.point_id, finished=outcome["outcome"])
        self._close(run.point_id)

    def cell(self, sweep: str, cell_id: str, summary: Mapping[str, Any]) -> None:
        if self._mark(cell_id).get("status") == summary["status"]:
            return
        writer = self._writer(cell_id)
        step = int(summary.get("n_points") or 0)
        for key in ("best_lr", "best_objective", "interp_lr", "interp_objective"):
            if summary.get(key) is not None:
                writer.add_scalar(f"cell/{key}", float(summary[key]), step)
        writer.add_text("status", str(summary["status"]), step)
        writer.flush()
        self._set_mark(cell_id, status=summary["status"])
        self._close(cell_id)

    def _close(self, key: str) -> None:
        writer = self.writers.pop(key, None)
        if writer is not None:
            writer.close()

    def close(self) -> None:
        for key in list(self.writers):
            self._close(key)
