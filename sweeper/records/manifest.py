"""`DIR/manifest.json`, the index of a sweep directory, as one typed document: `Manifest`.

What it holds: the store version (`STORE_VERSION`: the newest this reader understands; a newer one
is refused), the sweep's name, where its ledger is, the corpus fingerprint and the data's unigram
entropy, the compatibility key of the shared settings and, per cell, its facts, settings
fingerprint and recipe (`CellEntry`: what a relaunch may not change), the scaling axis, the
stall margin, the command-line overrides, the last Tune run (`TuneRun`), every launch with its
summary (`Launch`), for a simulated sweep its surface (`SimulatedEntry`) and, for a sweep read from a
table of recorded runs (`sweeper import`), where it came from (`ImportedEntry`).

`read_manifest` and `write_manifest` are its only reader and writer. The JSON is the one the
untyped writers wrote (same keys, same values: see `sweeper.records.document.Record`), so sweep
directories of earlier versions read, and a relaunch writes them back with nothing lost. Keys a
newer minor version added (same store version) are kept and written back rather than refused:
the store version is the compatibility contract, and a relaunch by this version must not strip
what a newer one recorded (the untyped writer, copying the dict, kept them too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field

from sweeper.core.errors import UserError
from sweeper.core.rows import CellFacts
from sweeper.records.document import DocumentError, Int, Number, Record
from sweeper.records.durable import write_json_atomic

MANIFEST = "manifest.json"
STORE_VERSION = 4  # 2: point and cell rows carry `loops`, and `depth` is always the number of blocks;
#                   3: the `stalled` state, `loss_se`, `unigram_loss`, `loss_batches`, `n_stalled`, `eval_loss_se`;
#                   4: `loop_losses`, `lambada_ppl` (see `sweeper.records.store`)


class CellEntry(Record):
    """One cell as the launch that planned it recorded it: its facts (`CellFacts.attrs`), the
    fingerprint of its settings and the settings (`compat`) a relaunch compares, its scale `x`, and
    the steps and tokens one point trains."""

    method: str | None = None
    family: str | None = None
    size: str | None = None
    depth: Int | None = None  # a loop-count sweep of store version 1: the loop count (no `loops` key)
    loops: Int | None = None
    width: Int | None = None
    seed: Int | None = None
    params: Int | None = None
    params_nonembed: Int | None = None
    flops_per_token: Number | None = None
    fingerprint: str | None = None
    compat: dict[str, Any] = Field(default_factory=dict)
    scheme: str | None = None
    x: Number | None = None
    steps: Int | None = None
    tokens: Int | None = None

    def facts(self, cell_id: str, *, loop_axis: bool = False) -> CellFacts:
        return CellFacts.from_attrs(cell_id, self.to_json(), loop_axis=loop_axis)


class DataEntropy(Record):
    """The data's frequency-only loss (`trials.data.unigram.UnigramEntropy.to_dict`, or a streamed
    source's estimate from the first final result)."""

    nats: Number | None = None
    counted: Int | None = None
    exact: bool | None = None
    kind: str | None = None  # "classes" for image labels
    fingerprint: str | None = None
    how: str | None = None


class TuneRun(Record):
    """The last Ray Tune run: where it lives and its name (`run-<index>`)."""

    storage: str | None = None
    experiment: str | None = None
    index: Int = 0


class SimulatedEntry(Record):
    """A simulated sweep's surface (`sweeper launch --simulate`)."""

    surface: str | None = None
    file: str | None = None
    fingerprint: str | None = None
    time_compression: Number | None = None
    pool: dict[str, Any] = Field(default_factory=dict)


class ImportedEntry(Record):
    """Where an imported sweep's results came from (`sweeper import`): the table (its path as given and
    resolved, format, SHA-256 of its bytes, rows), the columns used, the rules applied to it, when, and
    each cell's group values (`groups`: cell id -> {column: value}, as the table holds them)."""

    source: str | None = None
    path: str | None = None  # resolved, absolute
    format: str | None = None  # csv or parquet
    sha256: str | None = None
    rows: Int | None = None
    group_columns: list[str] = Field(default_factory=list)
    lr_column: str | None = None
    loss_column: str | None = None
    size_column: str | None = None  # the fits' x (None: no numeric group column)
    method_columns: list[str] = Field(default_factory=list)  # the group columns that name a cell's method
    duplicates: str | None = None
    merged: Int | None = None
    missing_loss: str | None = None
    dropped: Int | None = None
    diverged_rule: str | None = None
    diverged_above: Number | None = None
    n_diverged: Int | None = None
    grid_ratio: Number | None = None
    on_grid: bool | None = None
    imported_at: Number | None = None  # unix seconds
    imported_date: str | None = None  # ISO 8601, UTC
    version: str | None = None  # layerrope-sweeper's
    groups: dict[str, dict[str, Any]] = Field(default_factory=dict)


class LaunchSimulation(SimulatedEntry):
    """A simulated launch's surface and how its virtual pool was used (`sweeper.sim.simulation.GpuProbe.figures`)."""

    pool_gpus: Number | None = None
    gpu_utilisation: Number | None = None
    gpu_utilisation_while_saturated: Number | None = None
    saturated_fraction_of_wall: Number | None = None
    peak_gpus_in_use: Number | None = None
    simulated_gpu_hours: Number | None = None
    simulated_wall_hours: Number | None = None
    gpu_busy_fraction_first_day: Number | None = None  # a trial on the device (`sweeper.sim.devices.busy_figures`)
    gpu_compute_fraction_first_day: Number | None = None
    first_day_hours: Number | None = None
    gpu_busy_fraction: Number | None = None
    gpu_compute_fraction: Number | None = None
    busy_log_hours: Number | None = None
    devices_used: Int | None = None


class Launch(Record):
    """One `sweeper launch`: when, with which YAML copy, which Tune run; when it ends, its summary
    (`sweeper.run.launch.LaunchSummary.to_dict`, less the messages) and the storage fault that
    stopped it, if one did."""

    started: Number | None = None
    yaml: str | None = None
    address: str | None = None
    experiment: str | None = None
    restored: bool | None = None
    wall_seconds: Number | None = None
    ray_start_seconds: Number | None = None
    train_seconds: Number | None = None
    slots: Int | None = None
    trials: Int | None = None
    points_finished: Int | None = None
    counts: dict[str, Any] = Field(default_factory=dict)
    resumed: dict[str, Any] = Field(default_factory=dict)
    interrupted: bool | None = None
    trial_alive_seconds: Number | None = None
    simulation: LaunchSimulation | None = None
    driver_cpu_seconds: Number | None = None
    driver_peak_rss_mb: Number | None = None
    reports: Int | None = None
    tune_snapshots: Int | None = None
    utilisation: Number | None = None
    overhead_ratio: Number | None = None
    wall_over_training: Number | None = None
    alive_fraction: Number | None = None
    driver_cpu_per_trial: Number | None = None
    driver_cpu_per_report: Number | None = None
    fault: str | None = None

    def update(self, values: dict[str, Any]) -> None:
        """Set these keys (the summary's; keys this type does not name are kept as they are)."""
        for key, value in values.items():
            setattr(self, key, value)


class Manifest(Record):
    """`manifest.json` (see the module docstring). Keys the writers may leave out read as None
    (`has` tells a key left out from a null one: `stall_margin` is left out when the methods'
    margins differ, null when the stall rule is off)."""

    store_version: Int
    name: str | None = None
    created: Number | None = None
    updated: Number | None = None
    ledger: str | None = None  # the ledger's storage URL
    corpus: str | None = None  # the corpus fingerprint (`simulated:<surface>` for a simulation)
    unigram_entropy: DataEntropy | None = None
    cells: dict[str, CellEntry] = Field(default_factory=dict)
    compat_key: str | None = None
    x: str | None = None  # depth, loops, params, or size (an import's size column): the fits' and dashboards' x axis
    keep_weights: str | None = None
    stall_margin: Number | None = None
    overrides: list[str] = Field(default_factory=list)
    tune: TuneRun | None = None
    launches: list[Launch] = Field(default_factory=list)
    simulated: SimulatedEntry | None = None
    imported: ImportedEntry | None = None

    def name_or(self, sweep_dir: str | os.PathLike[str]) -> str:
        """The sweep's name, or the directory's when the manifest names none."""
        return self.name or Path(sweep_dir).name

    @property
    def is_simulated(self) -> bool:
        return self.simulated is not None and bool(self.simulated.to_json())

    @property
    def is_imported(self) -> bool:
        """Recorded runs read from a table by `sweeper import`: nothing to relaunch, no ledger, no weights."""
        return self.imported is not None and bool(self.imported.to_json())

    @property
    def imported_label(self) -> str | None:
        """'IMPORTED from TABLE: recorded runs, not trained here' for an imported sweep, else None."""
        if not self.is_imported:
            return None
        return f"IMPORTED from {self.imported.source}: recorded runs, not trained here"  # type: ignore[union-attr]

    def no_ledger(self, sweep_dir: str | os.PathLike[str], what: str) -> UserError:
        """The one line every command that needs a ledger, trained weights or a relaunch says on an imported
        sweep: `what` says what cannot be done, and what to do instead."""
        source = self.imported.source if self.imported is not None else "a table"
        return UserError(f"{sweep_dir}: imported sweep: no ledger: {what} (its results were read from {source} by "
                         "`sweeper import`)")

    @property
    def loop_axis(self) -> bool:
        """A loop-count sweep (its cells' scale is the loop count)."""
        return self.x == "loops"

    @property
    def simulated_label(self) -> str | None:
        """'SIMULATED (surface NAME): planted losses, no training' for a sweep run with `--simulate`, else None.
        Every reader that shows results shows it (status, optima, dashboard header, plots)."""
        if not self.is_simulated:
            return None
        return f"SIMULATED (surface {self.simulated.surface}): planted losses, no training"  # type: ignore[union-attr]

    def add_launch(self, launch: Launch) -> Launch:
        self.launches = [*self.launches, launch]
        return launch


def is_sweep_dir(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def sweeps_in(folder: Path) -> list[str]:
    """The sweep directories directly inside `folder` (`runs/`), by name."""
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and is_sweep_dir(p))
    except OSError:
        return []


def _did_you_mean(path: Path) -> str:
    """'; did you mean runs/depth-laptop?' for a mistyped sweep directory (the closest sweep beside it)."""
    import difflib  # only on this error

    parent = path.parent if str(path.parent) else Path(".")
    close = difflib.get_close_matches(path.name, sweeps_in(parent) if parent.is_dir() else [], n=1, cutoff=0.6)
    return f"; did you mean {parent / close[0]}?" if close else ""


def read_manifest(sweep_dir: str | os.PathLike[str]) -> Manifest:
    """The manifest of a sweep directory, or a UserError (one line) saying what is wrong with the path."""
    path = Path(sweep_dir)
    if not path.exists():
        raise UserError(f"{path}: no such directory{_did_you_mean(path)}")
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (give the sweep's output directory)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        inside = sweeps_in(path)
        if inside:
            shown = ", ".join(inside[:12]) + (f" and {len(inside) - 12} more" if len(inside) > 12 else "")
            raise UserError(f"{path}: a folder of sweeps, not a sweep; give one of them: {shown} "
                            f"(e.g. {path / inside[0]})")
        raise UserError(f"{path}: not a sweep directory (no {MANIFEST}; launch a sweep with `sweeper launch SWEEP.yaml`)")
    try:
        data = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{manifest_path}: unreadable manifest ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{manifest_path}: unreadable manifest (not a JSON object)")
    version = data.get("store_version")  # before the types: a newer version may have changed them
    if not isinstance(version, int):
        raise UserError(f"{manifest_path}: no store_version; not written by layerrope-sweeper")
    if version > STORE_VERSION:
        raise UserError(
            f"{manifest_path}: store version {version} was written by a newer layerrope-sweeper "
            f"(this one reads up to {STORE_VERSION}); upgrade with `pip install -U layerrope-sweeper`"
        )
    try:
        return Manifest.from_json(data)
    except DocumentError as exc:
        raise UserError(f"{manifest_path}: unreadable manifest ({exc})") from None


def write_manifest(sweep_dir: str | os.PathLike[str], manifest: Manifest) -> None:
    """Write the manifest whole or not at all (`sweeper.records.durable`)."""
    write_json_atomic(Path(sweep_dir) / MANIFEST, manifest.to_json())
