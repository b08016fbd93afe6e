"""The ledger of record: an Optuna storage with one study per cell and one trial per LR point.

Optuna gives a durable, concurrent-reader store with a UI (`optuna-dashboard
sqlite:///DIR/ledger.db`) and any backend a cluster offers (SQLite by default, PostgreSQL
or MySQL by URL, a journal file). The driver is its only writer; it drives the storage
directly (no sampler: the bracketing policy picks the learning rates).

Mapping
- study `cell_id` (e.g. `layerrope/L48/s0`), direction minimize, user attrs describing the cell;
- trial per point: param `lr` (log-float), user attrs `point_id`, `state`, `attempt`,
  `tune_trial_id`, `started_at` (once it runs) and `metrics` (every final number);
  intermediate values = eval losses;
- states: RUNNING = queued or running (see the `state` attr), COMPLETE = ok (value = the
  objective), PRUNED = diverged, FAIL = failed (attr `reason`). A point retried after a
  failure gets a new trial; the newest trial of a point_id is the point.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEDGER_FILE = "ledger.db"


def storage_url(setting: str, sweep_dir: Path) -> str:
    """The Optuna storage URL for the YAML's `ledger` setting."""
    if setting == "sqlite":
        return f"sqlite:///{(sweep_dir / LEDGER_FILE).resolve()}"
    return setting


@dataclass
class LedgerPoint:
    point_id: str
    cell_id: str
    lr: float
    state: str  # queued | running | ok | diverged | failed
    trial_id: int  # the Optuna storage's trial id (-1 for finished points: they are never written again)
    number: int
    attempt: int = 0
    tune_trial_id: str | None = None
    objective: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def _clean(value: Any) -> Any:
    """JSON-safe user attrs: NaN/inf become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Ledger:
    """Opens its storage lazily (Ray Tune pickles objects that reach its callbacks)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._storage: Any = None
        self._study_ids: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "_storage": None, "_study_ids": {}}

    @property
    def storage(self) -> Any:
        if self._storage is None:
            self._storage = open_storage(self.url)
        return self._storage

    # -- writing ------------------------------------------------------------------------------
    def study_id(self, cell_id: str, attrs: dict[str, Any] | None = None) -> int:
        import optuna

        if cell_id in self._study_ids:
            return self._study_ids[cell_id]
        try:
            sid = self.storage.get_study_id_from_name(cell_id)
        except KeyError:
            try:
                sid = self.storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], study_name=cell_id)
            except optuna.exceptions.DuplicatedStudyError:
                sid = self.storage.get_study_id_from_name(cell_id)
            for key, value in (attrs or {}).items():
                self.storage.set_study_user_attr(sid, key, _clean(value))
        self._study_ids[cell_id] = sid
        return sid

    def open_point(self, cell_id: str, point_id: str, lr: float, bounds: tuple[float, float], *,
                   attempt: int, tune_trial_id: str, cell_attrs: dict[str, Any] | None = None) -> int:
        """A new RUNNING trial for a point; returns its storage trial id."""
        from optuna.distributions import FloatDistribution
        from optuna.trial import TrialState, create_trial

        sid = self.study_id(cell_id, cell_attrs)
        lo, hi = min(bounds[0], lr), max(bounds[1], lr)
        template = create_trial(
            state=TrialState.RUNNING,
            params={"lr": lr},
            distributions={"lr": FloatDistribution(lo, hi, log=True)},
            user_attrs={"point_id": point_id, "state": "queued", "attempt": attempt, "tune_trial_id": tune_trial_id},
        )
        return int(self.storage.create_new_trial(sid, template_trial=template))

    def update(self, trial_id: int, **attrs: Any) -> None:
        for key, value in attrs.items():
            self.storage.set_trial_user_attr(trial_id, key, _clean(value))

    def report(self, trial_id: int, step: int, value: float) -> None:
        if math.isfinite(value):
            self.storage.set_trial_intermediate_value(trial_id, step, value)

    def finish(self, trial_id: int, state: str, objective: float | None, metrics: dict[str, Any]) -> None:
        """Record a finished point: ok → COMPLETE(objective), diverged → PRUNED, failed → FAIL."""
        from optuna.trial import TrialState

        extra = {"reason": metrics["reason"]} if metrics.get("reason") else {}
        self.update(trial_id, state=state, metrics=metrics, **extra)
        if state == "ok" and objective is not None and math.isfinite(objective):
            self.storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [float(objective)])
        elif state == "diverged":
            self.storage.set_trial_state_values(trial_id, TrialState.PRUNED)
        else:
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    # -- reading ------------------------------------------------------------------------------
    def cells(self) -> dict[str, dict[str, Any]]:
        """Every cell in the ledger with its study user attrs."""
        return {s.study_name: dict(s.user_attrs) for s in self.storage.get_all_studies()}

    def load(self) -> dict[str, list[LedgerPoint]]:
        """The current trial of every point, by cell."""
        from optuna.trial import TrialState

        out: dict[str, list[LedgerPoint]] = {}
        for study in self.storage.get_all_studies():
            sid = self.storage.get_study_id_from_name(study.study_name)
            self._study_ids[study.study_name] = sid
            latest: dict[str, LedgerPoint] = {}
            for t in self.storage.get_all_trials(sid, deepcopy=False):
                pid = t.user_attrs.get("point_id")
                if pid is None or "lr" not in t.params:
                    continue
                if t.state == TrialState.COMPLETE:
                    state = "ok"
                elif t.state == TrialState.PRUNED:
                    state = "diverged"
                elif t.state == TrialState.FAIL:
                    state = "failed"
                elif t.state == TrialState.RUNNING:
                    state = t.user_attrs.get("state", "running")
                    state = state if state in ("queued", "running") else "running"
                else:
                    continue
                point = LedgerPoint(
                    point_id=pid, cell_id=study.study_name, lr=float(t.params["lr"]), state=state,
                    trial_id=-1, number=t.number, attempt=int(t.user_attrs.get("attempt", 0)),
                    tune_trial_id=t.user_attrs.get("tune_trial_id"),
                    objective=t.value if t.state == TrialState.COMPLETE else None,
                    # A point still running has no metrics yet; its start time resumes with it.
                    metrics=dict(t.user_attrs.get("metrics") or {"started_at": t.user_attrs.get("started_at")}),
                )
                previous = latest.get(pid)
                if previous is None or point.number > previous.number:
                    latest[pid] = point
            for point in latest.values():
                if point.state in ("queued", "running"):  # the driver updates only these
                    point.trial_id = self.storage.get_trial_id_from_study_id_trial_number(sid, point.number)
            out[study.study_name] = sorted(latest.values(), key=lambda p: p.lr)
        return out


def open_storage(url: str) -> Any:
    """An Optuna storage for a URL: RDB (sqlite/postgresql/mysql) or `journal:PATH`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(os.path.expanduser(url[len("journal:"):])))
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": lock_timeout()}}
    return optuna.storages.RDBStorage(url, **kwargs)


LOCK_TIMEOUT_ENV = "LAYERROPE_SWEEPER_LEDGER_TIMEOUT"


def lock_timeout() -> float:
    """Seconds a SQLite ledger write waits for another process's lock before it fails (default 60;
    `LAYERROPE_SWEEPER_LEDGER_TIMEOUT` changes it, e.g. longer on a slow network filesystem)."""
    try:
        return max(0.0, float(os.environ.get(LOCK_TIMEOUT_ENV, "60")))
    except ValueError:
        return 60.0
