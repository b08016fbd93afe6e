"""Session fixtures that run a real sweep once per test session, shared by pytest-xdist's workers."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str,
                     make: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """`make(folder)` run once per test session, whichever xdist worker asks first; the others wait for it
    and read what it returned (a JSON document) and the files it left in `folder`. (pytest-xdist's
    `xdist_group` would keep the tests on one worker instead, but it does nothing under pytest 9: checked
    with pytest-xdist 3.8.) A `make` that fails leaves nothing behind; the next worker that asks tries again."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, shared by its workers
    folder, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return json.loads(done.read_text())
        folder.mkdir()
        try:
            result = make(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        done.write_text(json.dumps(result))
        return result
