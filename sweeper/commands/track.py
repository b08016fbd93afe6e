"""`sweeper track DIR --to wandb|mlflow|tensorboard`: back-fill experiment trackers from a sweep's store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.core.errors import UserError

if TYPE_CHECKING:
    from sweeper.records.manifest import Manifest

TRACKERS = ("wandb", "mlflow", "tensorboard")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "track",
        help="send a finished or running sweep to W&B, MLflow or TensorBoard (from its store)",
        description=(
            "Log every point of a stored sweep to experiment trackers: a run per point (its curves against "
            "tokens, its outcome), grouped by cell (the cell's status and optimum). Settings come from the "
            "sweep's `tracking:` section, overridden by the options here. Run ids derive from point ids: "
            "running it again, or after a launch that logged live, adds no second run."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--to", action="append", required=True, choices=TRACKERS, metavar="TRACKER",
                        help="wandb, mlflow or tensorboard (repeat for several)")
    parser.add_argument("--project", help="W&B project (default: the YAML's, else the sweep's name)")
    parser.add_argument("--entity", help="W&B entity")
    parser.add_argument("--mode", choices=("online", "offline", "disabled"), help="W&B mode (default: WANDB_MODE)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the YAML's, MLFLOW_TRACKING_URI, "
                                               "else sqlite:///DIR/mlflow.db)")
    parser.add_argument("--experiment", help="MLflow experiment (default: the YAML's, else the sweep's name)")
    parser.add_argument("--logdir", help="TensorBoard log directory (default: the YAML's, else DIR/tensorboard)")
    parser.add_argument("--json", action="store_true", help="print what was sent as JSON")
    parser.set_defaults(func=run)


def settings_for(sweep_dir: Path, manifest: Manifest, args: argparse.Namespace) -> Any:
    """The `tracking:` section of the sweep's last YAML copy, with the command's options over it."""
    import yaml  # (see `run`)
    from pydantic import ValidationError

    from sweeper.spec.schema import TrackingSection

    names = [launch.yaml for launch in manifest.launches if launch.yaml] or ["sweep.yaml"]
    raw: dict[str, Any] = {}
    path = sweep_dir / names[-1]
    if path.is_file():
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UserError(f"{path}: unreadable ({exc})") from None
        raw = dict(doc.get("tracking") or {}) if isinstance(doc, dict) else {}
    name = manifest.name_or(sweep_dir)
    overrides = {
        "wandb": {"project": args.project, "entity": args.entity, "mode": args.mode},
        "mlflow": {"tracking_uri": args.tracking_uri, "experiment": args.experiment},
        "tensorboard": {"dir": args.logdir},
    }
    for tracker in args.to:
        section = dict(raw.get(tracker) or {})
        section.update({k: v for k, v in overrides[tracker].items() if v is not None})
        if tracker == "wandb":
            section.setdefault("project", name)
        raw[tracker] = section
    try:
        return TrackingSection.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path}: tracking.{where}: {first['msg']}") from None


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.records.manifest import read_manifest
    from sweeper.records.table import labelled, make_console
    from sweeper.tracking import open_trackers
    from sweeper.tracking.backfill import backfill

    root = Path(args.dir)
    manifest = read_manifest(root)
    section = settings_for(root, manifest, args)
    console = make_console(stderr=args.json)
    warnings: list[str] = []

    def warn(text: str) -> None:
        warnings.append(text)
        console.print(labelled("warning:", text), soft_wrap=True)

    names = list(dict.fromkeys(args.to))
    trackers = open_trackers(section, root, manifest.name_or(root), warn, names)
    summary = backfill(root, trackers, warn) if trackers else {"trackers": [], "failed": {}}
    failed = sorted(set(names) - set(summary["trackers"])) + sorted(summary["failed"])
    if args.json:
        print(json.dumps({**summary, "warnings": warnings}, indent=2, default=str))
    elif trackers:
        sent = [t for t in summary["trackers"] if t not in summary["failed"]]
        if sent:
            console.print(f"sent {summary['points']} points ({summary['curve_rows']} curve rows) and "
                          f"{summary['cells_done']} done cells of {summary['sweep']} to {', '.join(sent)}",
                          highlight=False)
    return 1 if failed else 0
