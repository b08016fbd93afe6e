"""What a relaunch may change: new cells yes, settings that would mix incomparable results no."""

from __future__ import annotations

import os

from pathlib import Path

import pytest

from sweeper.run.sweep_dir import check_compatible, check_output_dir, manifest_for, save_yaml_copy
from sweeper.core.errors import UserError
from sweeper.search.planner import build_plan
from sweeper.spec.schema import validate_data
from sweeper.records.manifest import Manifest, write_manifest

BASE = {
    "name": "relaunch",
    "methods": ["pre", "post"],
    "model": {"width": 32, "heads": 2, "depths": [2, 4], "seq_len": 32},
    "train": {"steps": 20, "batch_size": 4},
}


def plan_for(tmp_path: Path, **changes):
    raw = {**BASE, **changes}
    return build_plan(validate_data(raw), output=str(tmp_path / "sweep"))


def launched(tmp_path: Path) -> Manifest:
    plan = plan_for(tmp_path)
    plan.sweep_dir.mkdir(parents=True)
    manifest = manifest_for(plan, None, "sqlite:///x")
    write_manifest(plan.sweep_dir, manifest)
    return manifest


def test_new_methods_depths_and_seeds_extend_the_sweep(tmp_path):
    manifest = launched(tmp_path)
    bigger = plan_for(tmp_path, methods=["pre", "post", "layerrope"],
                      model={**BASE["model"], "depths": [2, 4, 8]}, seeds=[0, 1])
    check_compatible(bigger, manifest)
    assert check_output_dir(bigger) == manifest
    merged = manifest_for(bigger, manifest, "sqlite:///x")
    assert len(merged.cells) == 3 * 3 * 2
    # LR policy, resources, concurrency and stack may change freely.
    check_compatible(plan_for(tmp_path, lr={"center": 1e-2, "max_points": 20}, resources={"cpu": 2},
                              concurrency=1, stack=1, retries=4), manifest)


@pytest.mark.parametrize("change, expected", [
    ({"train": {"steps": 30, "batch_size": 4}}, "train.steps: 20 → 30"),
    ({"train": {"steps": 20, "batch_size": 8}}, "train.batch_size: 4 → 8"),
    ({"data": {"source": "synthetic"}}, "data.source: 'builtin' → 'synthetic'"),
    ({"divergence": {"spike_factor": 3.0}}, "divergence.spike_factor: 1.5 → 3.0"),
    ({"model": {"width": 32, "heads": 2, "depths": [2, 4], "seq_len": 64}}, "model.seq_len: 32 → 64"),
])
def test_incompatible_changes_are_refused_with_the_difference(tmp_path, change, expected):
    manifest = launched(tmp_path)
    with pytest.raises(UserError) as info:
        check_compatible(plan_for(tmp_path, **change), manifest)
    lines = info.value.lines()
    assert "would mix incomparable results" in lines[0]
    assert any(expected in line and "4 cells" in line for line in lines[1:]), lines


def test_a_per_method_override_only_blocks_that_method(tmp_path):
    manifest = launched(tmp_path)
    changed = plan_for(tmp_path, methods=["pre", {"name": "post", "train": {"steps": 40}}])
    with pytest.raises(UserError) as info:
        check_compatible(changed, manifest)
    assert "2 cells (post/L2/s0, ...): train.steps: 20 → 40" in info.value.lines()[1]


def test_execution_settings_do_not_count(tmp_path):
    manifest = launched(tmp_path)
    check_compatible(plan_for(tmp_path, train={**BASE["train"], "report_every": 1, "checkpoint_every": 5,
                                               "threads": 2, "device": "cpu"}), manifest)


def test_an_unrelated_directory_is_never_used(tmp_path):
    plan = plan_for(tmp_path)
    plan.sweep_dir.mkdir()
    (plan.sweep_dir / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="is not a sweep directory"):
        check_output_dir(plan)
    (plan.sweep_dir / "notes.txt").unlink()
    assert check_output_dir(plan) is None  # an empty directory is fine


def test_yaml_copies_are_kept_per_change(tmp_path):
    src = tmp_path / "s.yaml"
    out = tmp_path / "dir"
    out.mkdir()
    src.write_text("a: 1\n")
    assert save_yaml_copy(out, src) == "sweep.yaml"
    assert save_yaml_copy(out, src) == "sweep.yaml"
    src.write_text("a: 2\n")
    assert save_yaml_copy(out, src) == "sweep.2.yaml"
    src.write_text("a: 3\n")
    assert save_yaml_copy(out, src) == "sweep.3.yaml"
    assert (out / "sweep.yaml").read_text() == "a: 1\n"


def test_one_driver_per_sweep_directory(tmp_path):
    from sweeper.run.sweep_dir import hold_driver_lock, release_driver_lock

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    first = hold_driver_lock(sweep)
    with pytest.raises(UserError, match=r"another `sweeper launch` is running this sweep \(pid \d+"):
        hold_driver_lock(sweep)
    release_driver_lock(first)
    assert (sweep / "driver.lock").read_text() == ""  # an ended driver's pid is not left behind
    second = hold_driver_lock(sweep)  # released: the next driver may run
    assert f"pid {os.getpid()}" in (sweep / "driver.lock").read_text()
    release_driver_lock(second)
