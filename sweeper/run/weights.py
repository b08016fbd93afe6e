"""Each cell's best weights, kept in the sweep directory (`keep_weights: best`, the default).

A Tune trial writes its best member's final weights when it finishes (`trials.train.Trial.export`:
`<i>/model.safetensors` + `config.json` naming the point) into a staging folder of its own in the
sweep's storage (`sweeper.run.storage`: `staging/<cell>/<trial>/`; every node reaches it). When the
trial has ended, the driver keeps the folder of the cell's current best point as `DIR/weights/<cell>/`
(replacing the previous best's; on a remote storage also as `weights/<cell>/` there) and deletes the
staging folder. With `export_weights: true` the trials write every member into `exports/<cell>/<trial>/`
of the storage instead, which the driver copies whole to `DIR/exports/` (for `sweeper gamma`); the best
point's folder is kept from there.

Layout: `DIR/weights/<method>_<size>_s<seed>/{model.safetensors, config.json}`; `sweeper export`
reads it, `models.exported.load_exported` loads it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from trials.storage import Storage

WEIGHTS = "weights"


def folder_name(cell_id: str) -> str:
    """`layerrope/L48/s0` -> `layerrope_L48_s0` (one folder per cell)."""
    return cell_id.replace("/", "_")


def kept_dir(sweep_dir: Path, cell_id: str) -> Path:
    return sweep_dir / WEIGHTS / folder_name(cell_id)


def kept_point(folder: Path) -> str | None:
    """The point whose weights `folder` holds (its config.json), or None."""
    try:
        return str(json.loads((folder / "config.json").read_text()).get("point_id") or "") or None
    except (OSError, ValueError):
        return None


def member_folders(trial_dir: Path) -> dict[str, Path]:
    """point_id -> member folder, for every complete member export under a trial's folder."""
    out: dict[str, Path] = {}
    if not trial_dir.is_dir():
        return out
    for member in sorted(trial_dir.iterdir()):
        point = kept_point(member)
        if point and (member / "model.safetensors").is_file():
            out[point] = member
    return out


def stored_members(storage: Storage, trial_path: str) -> dict[str, str]:
    """point_id -> member folder in the storage, for every complete member export under a trial's folder."""
    files = storage.listing(trial_path)
    out: dict[str, str] = {}
    for path in files:
        folder, _, name = path.rpartition("/")
        if name != "config.json" or f"{folder}/model.safetensors" not in files:
            continue
        try:
            point = json.loads(storage.read_bytes(path) or b"{}").get("point_id")
        except ValueError:
            continue
        if point:
            out[str(point)] = folder
    return out


def _swap_in(source: Path, target: Path) -> None:
    """Copy `source` beside `target` and swap it in by renames: a crash leaves either the old folder or
    the new one (plus a stray `.new`/`.old` folder that the next swap clears)."""
    new, old = target.with_name(target.name + ".new"), target.with_name(target.name + ".old")
    for stray in (new, old):
        shutil.rmtree(stray, ignore_errors=True)
    shutil.copytree(source, new)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def keep_best(sweep_dir: Path, cell_id: str, best_point_id: str | None, storage: Storage, trial_path: str, *,
              staged: bool, kept_in_storage: str | None = None) -> bool:
    """Keep the best point's weights if the trial's folder in the storage holds them; True when the kept
    weights changed. `kept_in_storage`: also keep them there (a remote storage). `staged`: delete the
    trial's folder afterwards (exports are kept)."""
    changed = False
    members = stored_members(storage, trial_path)
    target = kept_dir(sweep_dir, cell_id)
    if best_point_id in members and kept_point(target) != best_point_id:
        if storage.is_local:
            _swap_in(Path(members[best_point_id]), target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
                storage.download(members[best_point_id], Path(tmp) / "member")
                _swap_in(Path(tmp) / "member", target)
            if kept_in_storage is not None:
                storage.delete(kept_in_storage)
                storage.copy(members[best_point_id], kept_in_storage)
        changed = True
    if staged:
        storage.delete(trial_path)
        if storage.is_local:
            for parent in (Path(trial_path).parent, Path(trial_path).parent.parent):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
    return changed


def collect(storage: Storage, path: str, target: Path) -> None:
    """Move a trial's exported folder from the storage into the sweep directory (a rename when both are on
    this machine's filesystem, else a copy and a delete)."""
    if not storage.listing(path):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if storage.is_local:
        try:
            shutil.rmtree(target, ignore_errors=True)
            Path(path).rename(target)
            return
        except OSError:
            pass  # another filesystem: copy
    storage.download(path, target)
    storage.delete(path)
