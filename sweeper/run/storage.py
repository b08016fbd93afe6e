"""The sweep's storage: one URI for everything a node writes.

`ray.storage` in the YAML (or `--storage`) names a pyarrow filesystem URI — a local path on one
machine; `s3://bucket/path`, `gs://bucket/path` or a path on a shared mount on a cluster — and the
sweep's folder is `<storage>/<name>`; without it, `DIR/ray` on the driver's disk. In that folder:

    run-N/                 Ray Tune's runs: experiment state, each trial's results and checkpoints
                           (the newest `KEEP_CHECKPOINTS` per trial; all deleted once its points finished)
    staging/<cell>/<trial>/  a trial's best member's final weights, until the driver keeps them
    weights/<cell>/        each cell's best weights (a remote storage only; a local one keeps them in DIR/weights)
    exports/<cell>/<trial>/  every member's final weights with `export_weights: true`
    cache/                 figures computed once per sweep and read by every node (the unigram entropy)
    .doctor/               markers `sweeper doctor` writes, reads back and deletes

The ledger and the store are the driver's and stay in the sweep directory on its disk (with the kept
weights, which the driver copies there for `sweeper export` and `sweeper gamma`). Credentials come from
the usual environment variables of every node (pyarrow reads them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from sweeper.core.errors import UserError
from sweeper.search.planner import Plan
from trials.data import open_source
from trials.data.unigram import publish
from trials.infra import StorageError
from trials.storage import Storage, resolve

LOCAL_SOURCES = ("builtin", "text", "jsonl", "parquet", "tokens", "synthetic")  # token sources the driver reads


def storage_uri(plan: Plan, override: str | None = None) -> str:
    """The storage URI a launch writes to: `--storage`, else `ray.storage`, else `DIR/ray`."""
    return override or plan.config.ray.storage or str(plan.sweep_dir.resolve() / "ray")


def sweep_storage(plan: Plan, override: str | None = None) -> Storage:
    """The sweep's folder in its storage (`<storage>/<name>`, or `DIR/ray` by default)."""
    uri = storage_uri(plan, override)
    try:
        _, base = resolve(uri)
    except StorageError as exc:
        raise UserError(f"ray.storage: {exc}; expected a local path or a pyarrow URI (s3://bucket/path, "
                        "gs://bucket/path, file:///path)") from None
    explicit = override or plan.config.ray.storage
    return Storage(uri, f"{base.rstrip('/')}/{plan.config.name}" if explicit else base)


def tune_identity(plan: Plan, override: str | None = None) -> str:
    """How the manifest names the Tune storage of a sweep (the string earlier versions recorded)."""
    storage = override or plan.config.ray.storage
    return f"{storage.rstrip('/')}/{plan.config.name}" if storage else str(plan.sweep_dir / "ray")


def publish_caches(storage: Storage, plan: Plan) -> str | None:
    """Compute (or read from this machine's cache) the data's exact unigram entropy once, on the driver,
    and put it in the storage, where every trial reads it instead of scanning the training file. Returns
    a message when the storage refused it (trials then count on their own; the numbers are the same)."""
    data = plan.cells[0].data if plan.cells else None
    if data is None or data.source not in LOCAL_SOURCES:
        return None
    if all(cell.divergence.stall_margin is None for cell in plan.cells):
        return None  # no trial asks for it
    value = open_source(data).unigram_entropy()
    if value.kind != "tokens" or not value.exact:
        return None
    try:
        publish(storage, value, "exact")
    except StorageError as exc:
        return f"the unigram entropy could not be shared through the storage ({exc}); every node counts its own"
    return None


def staging_path(storage: Storage, folder: str, tune_trial_id: str) -> str:
    return storage.path("staging", folder, tune_trial_id)


def exports_path(storage: Storage, folder: str, tune_trial_id: str) -> str:
    return storage.path("exports", folder, tune_trial_id)


def kept_path(storage: Storage, folder: str) -> str:
    return storage.path("weights", folder)


def remove_trial_checkpoints(fs: pafs.FileSystem, trial_path: str) -> int:
    """Delete every `checkpoint_*` folder of a finished Tune trial, on any filesystem; returns how many."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(trial_path, allow_not_found=True))
    except OSError:
        return 0
    removed = 0
    for info in infos:
        if info.type == pafs.FileType.Directory and info.base_name.startswith("checkpoint_"):
            try:
                fs.delete_dir(info.path)
                removed += 1
            except OSError:
                pass  # the next finished trial's clean-up, or the storage's lifecycle rules, get it
    return removed


def download_dir(storage: Storage, path: str, local: Path) -> None:
    storage.download(path, local)


def describe(storage: Storage) -> dict[str, Any]:
    return {"uri": storage.uri, "root": storage.root, "local": storage.is_local}
