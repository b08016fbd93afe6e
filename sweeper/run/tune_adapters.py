"""Ray Tune adapters: a Searcher, a Stopper and a driver-side Callback over one `SweepState`.

They are deliberately thin: the Searcher asks the state for the next stack of learning
rates (`suggest` returns a trial config, None to wait, or FINISHED), the Callback feeds it
every report and trial end (the single writer of ledger and store), and the Stopper ends
trials whose points are all finished already (a restored trial replaying finished work).

Tune pickles these objects into its experiment state and unpickles them on restore, so
they hold no state of their own: they reach the sweep through `active()`, which the
driver sets before `Tuner.fit()`. One sweep runs per driver process.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from sweeper.run.state import FINISHED, SweepState

_ACTIVE: SweepState | None = None
_HOOKS: list[Any] = []  # called with the state after every Tune loop step (the live display)


def activate(state: SweepState | None, hooks: list[Any] | None = None) -> None:
    global _ACTIVE
    _ACTIVE = state
    _HOOKS[:] = list(hooks or [])


def active() -> SweepState:
    if _ACTIVE is None:
        raise RuntimeError("no sweep is active in this process (sweeper.run.tune_adapters.activate was not called)")
    return _ACTIVE


def _stop_on_storage_fault(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a Tune hook; a storage fault (disk full, ledger locked) stops the sweep the way Ctrl-C
    does — Tune saves the experiment, in-flight trials stay resumable — instead of crashing the
    driver with a traceback. Any other exception propagates."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            from sweeper.records.storage_errors import is_storage_error

            if _ACTIVE is None or not is_storage_error(exc):
                raise
            if _ACTIVE.record_fault(exc):
                os.kill(os.getpid(), signal.SIGINT)  # Tune's own graceful stop (the driver maps SIGTERM the same way)
            return None

    return guarded


def point_ids(config: dict[str, Any] | None) -> list[str]:
    spec = (config or {}).get("spec") or {}
    return list(spec.get("point_ids") or [])


class SweepSearcher(Searcher):
    """Suggests stacks of one cell's learning rates until every cell is done."""

    def __init__(self) -> None:
        super().__init__(metric=None, mode=None)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True

    @_stop_on_storage_fault
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        result = active().next_stack(trial_id)
        return Searcher.FINISHED if result == FINISHED else result

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Outcomes are recorded by `SweepRecorder` (it sees the trial's config and error text)."""

    def save(self, checkpoint_path: str) -> None:
        # The queue lives in the ledger and is rebuilt by the driver on every launch.
        Path(checkpoint_path).write_text(json.dumps({"searcher": "layerrope-sweeper", "version": 1}))

    def restore(self, checkpoint_path: str) -> None:
        return None


class SweepStopper(Stopper):
    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return active().should_stop(trial_id, point_ids(result.get("config")))

    def stop_all(self) -> bool:
        return False


def _error_text(trial: Any) -> str:
    """The last line of the trial's traceback (the exception), for the point's `reason`."""
    path = getattr(trial, "error_file", None)
    text = ""
    if path and os.path.exists(path):
        try:
            lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
            text = lines[-1] if lines else ""
        except OSError:
            text = ""
    return (text or "the trial raised an error (see Ray's logs)")[:500]


class SweepRecorder(Callback):
    """The driver-side writer: every trial event goes to the sweep state."""

    @_stop_on_storage_fault
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        active().on_trial_start(trial.trial_id, point_ids(trial.config))

    @_stop_on_storage_fault
    def on_trial_restore(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        active().on_trial_start(trial.trial_id, point_ids(trial.config))

    @_stop_on_storage_fault
    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        active().on_result(trial.trial_id, point_ids(trial.config), result)

    @_stop_on_storage_fault
    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        state = active()
        pids = point_ids(trial.config)
        state.on_trial_end(trial.trial_id, pids, trial.last_result, None)
        if not state.should_stop(trial.trial_id, pids) or state.stopping:
            return
        # Every point of the trial is finished: its checkpoints (model and optimizer state of the
        # whole stack) can only waste disk from now on.
        remove_checkpoints(trial)

    @_stop_on_storage_fault
    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        state = active()
        before = state.fault
        state.on_trial_end(trial.trial_id, point_ids(trial.config), trial.last_result, _error_text(trial))
        if before is None and state.fault is not None:  # the trial died of a full disk: stop like Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    @_stop_on_storage_fault
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        state = active()
        state.flush()
        for hook in _HOOKS:
            hook(state)

    @_stop_on_storage_fault
    def on_experiment_end(self, trials: list, **info: Any) -> None:
        active().flush(force=True)


def remove_checkpoints(trial: Any) -> None:
    """Delete a finished trial's checkpoints when they live on a local filesystem."""
    try:
        import pyarrow.fs

        local = isinstance(trial.storage.storage_filesystem, pyarrow.fs.LocalFileSystem)
        trial_dir = trial.path
    except Exception:
        return
    if not local or not trial_dir or not os.path.isdir(trial_dir):
        return  # remote storage (a URI) keeps them; its lifecycle rules can expire them
    for name in os.listdir(trial_dir):
        if name.startswith("checkpoint_"):
            shutil.rmtree(os.path.join(trial_dir, name), ignore_errors=True)


def trial_resources(config: dict[str, Any]) -> Any:
    """Ray resources of one trial, from its config (they may depend on depth or size)."""
    from ray.tune import PlacementGroupFactory

    return PlacementGroupFactory([dict(config.get("resources") or {"CPU": 1.0})])


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"
