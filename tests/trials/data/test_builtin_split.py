"""The built-in corpus's held-out sides: split by unit (a top-level module or package, a test module with the
module it tests), `encodings/` left out, validation and test disjoint from training and from each other, the same
every time, and `data.eval_split` choosing which side a trial evaluates on (another fingerprint for each)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import trials.data.builtin as builtin_mod
from trials.config import DataConfig
from trials.data import open_source
from trials.data.builtin import split_side, split_unit, stdlib_files, stdlib_root
from trials.errors import TrialInputError

FILES = stdlib_files(stdlib_root())


def test_units_are_top_level_modules_and_packages_with_their_tests() -> None:
    assert split_unit("json/decoder.py") == split_unit("json/__init__.py") == "json"
    assert split_unit("os.py") == "os"
    assert split_unit("test/test_json/test_decode.py") == "json"  # a module's tests go with it
    assert split_unit("test/test_os.py") == "os"
    assert split_unit("test/support/__init__.py") == "test/support"
    assert split_unit("idlelib/idle_test/test_run.py") == "idlelib"


def test_every_file_of_a_unit_is_on_one_side_and_no_codec_table_is_held_out() -> None:
    sides_of: dict[str, set[str | None]] = defaultdict(set)
    for rel, _ in FILES:
        sides_of[split_unit(rel)].add(split_side(rel, 0.05))
    assert all(len(sides) == 1 for sides in sides_of.values())
    assert sides_of["encodings"] == {None}  # generated codec tables: on no side
    found = {side for sides in sides_of.values() for side in sides}
    assert found == {"train", "val", "test", None}
    # Deterministic: a unit's side is a function of its name (and the fraction) alone.
    assert all(split_side(rel, 0.05) == split_side(rel, 0.05) for rel, _ in FILES)
    assert split_side("json/decoder.py", 0.05) == split_side("json/a_new_file.py", 0.05)


def test_the_three_sides_are_the_files_of_their_units_and_disjoint() -> None:
    src = open_source(DataConfig(source="builtin"))
    test = open_source(DataConfig(source="builtin", eval_split="test"))
    expected = {side: b"".join(p.read_bytes() + b"\x00" for rel, p in FILES if split_side(rel, 0.05) == side)
                for side in ("train", "val", "test")}
    assert bytes(np.asarray(src.train)) == expected["train"] == bytes(np.asarray(test.train))  # the same training data
    assert bytes(np.asarray(src.val)) == expected["val"]
    assert bytes(np.asarray(test.val)) == expected["test"]
    held = {side: {rel for rel, _ in FILES if split_side(rel, 0.05) == side} for side in ("train", "val", "test")}
    assert not held["train"] & held["val"] and not held["train"] & held["test"] and not held["val"] & held["test"]
    assert not any(rel.startswith("encodings/") for rel in held["val"] | held["test"] | held["train"])
    total = sum(len(v) for v in expected.values())
    assert 0.02 < len(expected["val"]) / total < 0.12 and 0.02 < len(expected["test"]) / total < 0.12
    # Each side is its own corpus: the fingerprints differ and name the side evaluated.
    assert src.fingerprint.endswith(":eval-val") and test.fingerprint.endswith(":eval-test")
    assert src.fingerprint.rsplit(":", 1)[0] == test.fingerprint.rsplit(":", 1)[0]
    assert ":units1-val0.05:" in src.fingerprint


def test_a_cache_entry_of_the_by_file_split_is_not_reused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry written by the earlier by-file rule (same interpreter, same fraction) sits in the cache: the
    new rule has another key, so it builds its own entry and never reads the old tokens."""
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path))
    builtin_mod.forget_opened()
    root = stdlib_root()
    signature = [(rel, st.st_size, st.st_mtime_ns) for rel, path in FILES for st in [path.stat()]]
    old = tmp_path / "corpus" / f"builtin-{builtin_mod.digest(builtin_mod.python_version(), str(root), 0.05, signature)}"
    old.mkdir(parents=True)
    (old / "train.bin").write_bytes(b"old train")
    (old / "val.bin").write_bytes(b"old val")
    (old / "meta.json").write_text('{"fingerprint": "builtin:old:val0.05", "files": 1, "train_tokens": 9, "val_tokens": 7}')
    src = open_source(DataConfig(source="builtin"))
    builtin_mod.forget_opened()
    assert ":units1-" in src.fingerprint and len(src.val) > 10_000
    folders = {p.name for p in (tmp_path / "corpus").iterdir()}
    assert old.name in folders and len(folders) == 2  # a new entry beside the old one
    assert (old / "val.bin").read_bytes() == b"old val"  # the old entry untouched, never read as this corpus


def test_bad_eval_split_settings_are_refused() -> None:
    with pytest.raises(TrialInputError, match="data.eval_split: 'test' is offered by the built-in corpus only"):
        open_source(DataConfig(source="synthetic", eval_split="test"))
    with pytest.raises(TrialInputError, match="data.val_fraction 0.5: .* below 0.5"):
        open_source(DataConfig(source="builtin", val_fraction=0.5))
    with pytest.raises(ValueError, match="eval_split"):
        DataConfig(source="builtin", eval_split="train")  # type: ignore[arg-type]
