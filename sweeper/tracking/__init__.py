"""Experiment trackers: a sweep mirrored into Weights & Biases, MLflow and TensorBoard.

`core` holds what a tracker receives and the fan-out (`Tracking`) the recorder feeds; one module per
tracker (`wandb_run`, `mlflow_run`, `tensorboard_run`) speaks its client library (each an optional
extra, imported only when a sweep's `tracking:` section or `sweeper track` asks for it); `backfill`
replays a stored sweep into them. Nothing here writes the ledger or the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from sweeper.spec.schema import TrackingSection
from sweeper.tracking.core import Tracker, Tracking

__all__ = ["Tracker", "Tracking", "open_trackers"]


def open_trackers(section: TrackingSection, sweep_dir: Path, sweep: str, warn: Callable[[str], None],
                  names: Iterable[str] | None = None) -> list[Tracker]:
    """The trackers `section` configures (only `names`, if given). One that cannot start (its extra
    missing, a server unreachable, bad credentials) is left out with a warning."""
    out: list[Tracker] = []
    for name in names if names is not None else section.names():
        settings = getattr(section, name)
        try:
            if name == "wandb":
                from sweeper.tracking.wandb_run import WandbTracker  # each tracker module imports its client

                out.append(WandbTracker(settings, sweep_dir))
            elif name == "mlflow":
                from sweeper.tracking.mlflow_run import MlflowTracker  # imports mlflow (its extra)

                out.append(MlflowTracker(settings, sweep_dir, sweep))
            elif name == "tensorboard":
                from sweeper.tracking.tensorboard_run import TensorboardTracker  # imports tensorboard (its extra)

                out.append(TensorboardTracker(settings, sweep_dir))
        except ModuleNotFoundError as exc:
            warn(f"tracking: {name} needs the {name} extra ({exc.name} not installed here): "
                 f"pip install 'layerrope-sweeper[{name}]'; the sweep goes on without it")
        except Exception as exc:  # a server that cannot be reached, bad credentials...: keep the sweep
            detail = (str(exc).strip().splitlines() or [""])[0][:300]
            warn(f"tracking: {name} could not start ({type(exc).__name__}: {detail}); the sweep goes on without it; "
                 f"`sweeper track DIR --to {name}` back-fills it later")
    return out
