"""Each cell's best weights, kept in the sweep directory (`keep_weights: best`, the default).

A Tune trial writes every member's final weights when it finishes (`trials.train.Trial.export`:
`<i>/model.safetensors` + `config.json` naming the point) into a staging folder of its own. When
the trial has ended, the driver keeps the folder of the cell's current best point as
`DIR/weights/<cell>/` (replacing the previous best's) and deletes the rest of the staging folder.
With `export_weights: true` the trials write into `DIR/exports/` instead, which is kept whole
(for `sweeper gamma`); the best point's folder is copied from there.

Layout: `DIR/weights/<method>_<size>_s<seed>/{model.safetensors, config.json}`; `sweeper export`
reads it, `models.exported.load_exported` loads it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

WEIGHTS = "weights"
STAGING = ".staging"


def folder_name(cell_id: str) -> str:
    """`layerrope/L48/s0` -> `layerrope_L48_s0` (one folder per cell)."""
    return cell_id.replace("/", "_")


def staging_dir(sweep_dir: Path, cell_id: str, tune_trial_id: str) -> Path:
    return sweep_dir / WEIGHTS / STAGING / folder_name(cell_id) / tune_trial_id


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


def keep_best(sweep_dir: Path, cell_id: str, best_point_id: str | None, trial_dir: Path, *, staged: bool) -> bool:
    """Keep the best point's weights if `trial_dir` holds them; True when the kept weights changed.

    The new folder is copied beside the kept one and swapped in by renames, so a crash leaves
    either the old best or the new one (plus a stray `.new`/`.old` folder that the next swap clears)."""
    changed = False
    members = member_folders(trial_dir)
    target = kept_dir(sweep_dir, cell_id)
    if best_point_id in members and kept_point(target) != best_point_id:
        new, old = target.with_name(target.name + ".new"), target.with_name(target.name + ".old")
        for stray in (new, old):
            shutil.rmtree(stray, ignore_errors=True)
        shutil.copytree(members[best_point_id], new)
        if target.exists():
            target.rename(old)
        new.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        changed = True
    if staged:
        shutil.rmtree(trial_dir, ignore_errors=True)
        for parent in (trial_dir.parent, trial_dir.parent.parent):
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break
    return changed
