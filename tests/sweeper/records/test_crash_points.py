"""The crash points' seam in-process: writes counted by kind, and the pause that holds a writer at a
known write until a test lets it go (`LAYERROPE_SWEEPER_PAUSE_AT`); the storage-fault test uses it on
a real driver (tests/reliability/test_storage_faults.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeper.records import crash_points
from sweeper.records.crash_points import PAUSED_FILE, RESUME_FILE, durable_write


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    yield
    crash_points.disarm()


def write_in_thread(kinds: list[str], done: list[str]) -> threading.Thread:
    def run() -> None:
        for kind in kinds:
            with durable_write(kind):
                done.append(f"{kind} written")
            done.append(f"{kind} returned")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_for_file(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path.name}"
        time.sleep(0.01)
    return path.read_text()


@pytest.mark.parametrize(("when", "held"), [
    ("before", []),  # held before the second `a`: its write has not happened
    ("after", ["a written"]),  # held after it: written, not yet returned
])
def test_a_pause_holds_the_writer_at_the_nth_write_of_a_kind_until_resumed(tmp_path, when, held):
    crash_points.arm(pause_at="a#2", pause_when=when, pause_dir=tmp_path)
    done: list[str] = []
    thread = write_in_thread(["a", "b", "a", "b"], done)
    assert wait_for_file(tmp_path / PAUSED_FILE).split("\t")[:2] == ["3", "a"]  # the 3rd write, the 2nd `a`
    time.sleep(0.2)
    assert thread.is_alive()
    assert done == ["a written", "a returned", "b written", "b returned", *held]
    (tmp_path / RESUME_FILE).touch()
    thread.join(10)
    assert not thread.is_alive()
    assert done[-4:] == ["a written", "a returned", "b written", "b returned"]
    assert crash_points.writes() == 4


def test_the_pause_is_armed_from_the_environment_and_needs_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(crash_points.PAUSE_AT_ENV, "2:before")
    monkeypatch.setenv(crash_points.PAUSE_DIR_ENV, str(tmp_path / "handshake"))
    crash_points.arm_from_env()
    done: list[str] = []
    thread = write_in_thread(["x", "y"], done)
    assert wait_for_file(tmp_path / "handshake" / PAUSED_FILE).startswith("2\ty\t")
    assert done == ["x written", "x returned"]
    (tmp_path / "handshake" / RESUME_FILE).touch()
    thread.join(10)
    assert done[-1] == "y returned"

    monkeypatch.delenv(crash_points.PAUSE_DIR_ENV)
    with pytest.raises(ValueError, match=crash_points.PAUSE_DIR_ENV):
        crash_points.arm_from_env()
    monkeypatch.setenv(crash_points.PAUSE_AT_ENV, "ledger:open#0")
    with pytest.raises(ValueError, match=crash_points.PAUSE_AT_ENV):
        crash_points.arm_from_env()
