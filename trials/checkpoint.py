"""Trial checkpoints: tensors in safetensors files, everything else in one JSON file.

Layout of a checkpoint folder `ROOT/step-000000200/`:

    model.safetensors      the stacked model's state dict (members still in the stack)
    optimizer.safetensors  AdamW moments and per-member LRs
    extra.safetensors      RNG states and the last weights of members dropped after diverging
    state.json             step, schedule position, data position, divergence state, metrics

A checkpoint is written into a hidden temporary folder, every file fsynced, then renamed into
place: a folder named `step-*` is always complete, and the newest one is the checkpoint.
Older ones are deleted after the rename, so a crash at any moment leaves a usable checkpoint.

Crash points (a test seam, off unless set): `LAYERROPE_SWEEPER_CHECKPOINT_CRASH=N:WRITE`
SIGKILLs the process right after WRITE (one of `WRITES`: each file, the rename into place, the
pruning of older checkpoints) of the N-th checkpoint this process saves; tests that stay in
one process use `arm_crash` (an action instead of the kill).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{9})$")
GROUPS = ("model", "optimizer", "extra")
WRITES = (*GROUPS, "state", "rename", "prune")
CRASH_ENV = "LAYERROPE_SWEEPER_CHECKPOINT_CRASH"


class _CrashPoints:
    """Which write of which checkpoint ends the process (see the module docstring)."""

    def __init__(self) -> None:
        self.saved = 0  # checkpoints started by this process
        self.armed: tuple[int, str, Callable[[], None]] | None = None

    def target(self) -> tuple[int, str, Callable[[], None]] | None:
        if self.armed is not None:
            return self.armed
        text = os.environ.get(CRASH_ENV)
        if not text:
            return None
        n, _, write = text.partition(":")
        if not n.isdigit() or write not in WRITES:
            raise ValueError(f"{CRASH_ENV}={text!r}: expected N:WRITE with WRITE one of {', '.join(WRITES)}")
        return int(n), write, lambda: os.kill(os.getpid(), signal.SIGKILL)

    def after(self, write: str) -> None:
        target = self.target()
        if target is not None and target[0] == self.saved and target[1] == write:
            target[2]()


_CRASH = _CrashPoints()


def arm_crash(n: int, write: str, action: Callable[[], None]) -> None:
    """Run `action` right after `write` of the `n`-th checkpoint saved from now on (tests)."""
    if write not in WRITES:
        raise ValueError(f"write must be one of {WRITES}, not {write!r}")
    _CRASH.saved, _CRASH.armed = 0, (n, write, action)


def disarm_crash() -> None:
    _CRASH.saved, _CRASH.armed = 0, None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _plain(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors wants contiguous CPU tensors that share no storage.
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def save_checkpoint(root: Path, step: int, tensors: dict[str, dict[str, torch.Tensor]], state: dict[str, Any]) -> Path:
    """Write checkpoint `step` under `root` atomically; return its folder."""
    root.mkdir(parents=True, exist_ok=True)
    _CRASH.saved += 1
    final = root / f"step-{step:09d}"
    tmp = root / f".tmp-step-{step:09d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for group in GROUPS:
        path = tmp / f"{group}.safetensors"
        save_file(_plain(tensors.get(group, {})), str(path))
        _fsync_file(path)
        _CRASH.after(group)
    with open(tmp / "state.json", "w") as fh:
        json.dump({"version": VERSION, **state}, fh, allow_nan=True)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp)
    _CRASH.after("state")
    if final.exists():  # the same step written again (e.g. the end coincides with a periodic save)
        old = root / f".old-step-{step:09d}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    _CRASH.after("rename")
    for other in list_checkpoints(root):
        if other != final:
            shutil.rmtree(other, ignore_errors=True)
    _CRASH.after("prune")
    for debris in root.glob(".*-step-*"):  # temporary folders of an earlier writer that crashed
        if debris.is_dir():
            shutil.rmtree(debris, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoint folders under `root`, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name))


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under `root`, or `root` itself if it is one (a copied folder)."""
    if (root / "state.json").is_file() and (root / "model.safetensors").is_file():
        return root
    found = list_checkpoints(root)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    state = json.loads((path / "state.json").read_text())
    if state.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {state.get('version')} (this build reads {VERSION})")
    tensors = {group: load_file(str(path / f"{group}.safetensors")) for group in GROUPS}
    return tensors, state
