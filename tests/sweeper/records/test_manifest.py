"""`manifest.json` as a typed document (`sweeper.records.manifest.Manifest`): manifests written by the
untyped writer before it (a real trained launch and a real simulated one, kept in tests/sweeper/records/data/)
read with every field, and write back byte for byte; keys a newer minor version adds are kept; a
damaged manifest is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.records.manifest import (
    MANIFEST,
    STORE_VERSION,
    CellEntry,
    Launch,
    Manifest,
    read_manifest,
    write_manifest,
)
from sweeper.records.table import unigram_line

DATA = Path(__file__).parent / "data"
# Written by `sweeper launch` before the manifest had a type (store version 3), cells cut to two:
TRAINED = DATA / "manifest-trained.json"  # sweeps/quickstart.yaml, trained on the built-in corpus
SIMULATED = DATA / "manifest-simulated.json"  # sweeps/depth.yaml --simulate sweeps/surfaces/study.yaml


def _dir(tmp_path: Path, text: str, name: str = "sweep") -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / MANIFEST).write_text(text)
    return root


def _as_the_writer_writes(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False, default=str)


@pytest.mark.parametrize("old", [TRAINED, SIMULATED], ids=["trained", "simulated"])
def test_a_manifest_the_untyped_writer_wrote_reads_and_writes_back_byte_for_byte(tmp_path: Path, old: Path) -> None:
    text = old.read_text()
    assert text == _as_the_writer_writes(json.loads(text))  # the fixture is the old writer's output
    manifest = read_manifest(_dir(tmp_path, text))
    out = tmp_path / "out"
    out.mkdir()
    write_manifest(out, manifest)
    assert (out / MANIFEST).read_text() == text
    assert manifest.to_json() == json.loads(text)


def test_the_fields_of_a_trained_sweeps_manifest() -> None:
    data = json.loads(TRAINED.read_text())
    manifest = Manifest.from_json(data)
    assert manifest.store_version == data["store_version"] and manifest.name == data["name"]
    assert manifest.corpus == data["corpus"] and manifest.ledger == data["ledger"]
    assert manifest.x == "depth" and not manifest.loop_axis and manifest.keep_weights == "best"
    assert not manifest.is_simulated and manifest.simulated_label is None
    assert manifest.unigram_entropy is not None
    assert manifest.unigram_entropy.nats == data["unigram_entropy"]["nats"]
    assert manifest.unigram_entropy.counted == data["unigram_entropy"]["counted"]
    assert unigram_line(manifest).startswith("data: unigram entropy ")  # type: ignore[union-attr]
    cid, entry = next(iter(data["cells"].items()))
    cell = manifest.cells[cid]
    assert (cell.method, cell.size, cell.depth, cell.seed) == (entry["method"], entry["size"], entry["depth"],
                                                                entry["seed"])
    assert cell.fingerprint == entry["fingerprint"] and cell.compat == entry["compat"]
    assert (cell.steps, cell.tokens, cell.x) == (entry["steps"], entry["tokens"], entry["x"])
    assert cell.facts(cid).params == entry["params"]
    launch = manifest.launches[-1]
    assert launch.yaml == "sweep.yaml" and launch.wall_seconds == data["launches"][-1]["wall_seconds"]
    assert launch.counts == data["launches"][-1]["counts"] and launch.simulation is None
    assert manifest.tune is not None and manifest.tune.index == data["tune"]["index"]


def test_the_fields_of_a_simulated_sweeps_manifest() -> None:
    data = json.loads(SIMULATED.read_text())
    manifest = Manifest.from_json(data)
    assert manifest.is_simulated and manifest.simulated is not None
    assert manifest.simulated.surface == "study" and manifest.simulated.pool == data["simulated"]["pool"]
    assert manifest.simulated_label == "SIMULATED (surface study): planted losses, no training"
    figures = manifest.launches[-1].simulation
    assert figures is not None
    assert figures.simulated_gpu_hours == data["launches"][-1]["simulation"]["simulated_gpu_hours"]
    assert figures.pool_gpus == data["launches"][-1]["simulation"]["pool_gpus"]
    assert manifest.unigram_entropy is None and manifest.has("unigram_entropy")


def test_keys_of_a_newer_minor_version_are_kept(tmp_path: Path) -> None:
    data = json.loads(TRAINED.read_text())
    data["recipes"] = {"pre": {"warmup": 0.1}}  # what a later version might add beside the ones it reads
    cid = next(iter(data["cells"]))
    data["cells"][cid]["recipe"] = "pre"
    data["launches"][-1]["host"] = {"gpus": 8}
    manifest = read_manifest(_dir(tmp_path, _as_the_writer_writes(data)))
    manifest.name = "renamed"
    manifest.add_launch(Launch(started=1.0, yaml="sweep.2.yaml", address=None, experiment="run-2", restored=False))
    out = tmp_path / "out"
    out.mkdir()
    write_manifest(out, manifest)
    written = json.loads((out / MANIFEST).read_text())
    assert written["recipes"] == {"pre": {"warmup": 0.1}} and written["cells"][cid]["recipe"] == "pre"
    assert written["launches"][-2]["host"] == {"gpus": 8} and written["name"] == "renamed"
    assert written["launches"][-1] == {"started": 1.0, "yaml": "sweep.2.yaml", "address": None,
                                       "experiment": "run-2", "restored": False}


def test_a_key_left_out_is_not_a_null_one() -> None:
    """`stall_margin`: left out when the methods' margins differ, null when the rule is off."""
    base = {"store_version": STORE_VERSION, "name": "m", "unigram_entropy": {"nats": 3.25, "counted": 1000,
                                                                              "exact": True, "kind": "tokens"}}
    left_out, off = Manifest.from_json(base), Manifest.from_json({**base, "stall_margin": None})
    assert not left_out.has("stall_margin") and off.has("stall_margin")
    assert "stall rule off" in unigram_line(off) and "stall" not in unigram_line(left_out)  # type: ignore[operator]
    assert "stall_margin" not in left_out.to_json() and off.to_json()["stall_margin"] is None
    off.unset("stall_margin")
    assert off.to_json() == left_out.to_json()
    assert Manifest(store_version=STORE_VERSION).to_json() == {"store_version": STORE_VERSION}


def test_numbers_keep_their_json_type() -> None:
    entry = CellEntry.from_json({"x": 48, "flops_per_token": 1.5e9, "depth": 48})
    assert entry.to_json() == {"x": 48, "flops_per_token": 1.5e9, "depth": 48}
    assert json.dumps(entry.to_json()) == '{"depth": 48, "flops_per_token": 1500000000.0, "x": 48}'


DAMAGED = {
    "cells as a list": ({"cells": []}, "cells: "),
    "a step count as text": ({"cells": {"pre/L4/s0": {"steps": "300"}}}, "cells.pre/L4/s0.steps: must be an integer"),
    "a launch that is not an object": ({"launches": [3]}, "launches.0: "),
    "a name that is a number": ({"name": 7}, "name: "),
}


@pytest.mark.parametrize("case", DAMAGED, ids=list(DAMAGED))
def test_a_damaged_manifest_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    change, where = DAMAGED[case]
    root = _dir(tmp_path, json.dumps({"store_version": STORE_VERSION, "name": "d", **change}))
    with pytest.raises(UserError) as err:
        read_manifest(root)
    assert err.value.message.startswith(f"{root / MANIFEST}: unreadable manifest ({where}")
    capsys.readouterr()
    assert main(["status", str(root)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"error: {err.value.message}"]


def test_a_manifest_that_is_not_an_object(tmp_path: Path) -> None:
    root = _dir(tmp_path, "[1, 2]")
    with pytest.raises(UserError, match=r"unreadable manifest \(not a JSON object\)"):
        read_manifest(root)
    # checked before the types: a foreign file, and a newer version whose types may have changed
    with pytest.raises(UserError, match="no store_version; not written by layerrope-sweeper"):
        read_manifest(_dir(tmp_path, json.dumps({"cells": []}), "foreign"))
    with pytest.raises(UserError, match=f"store version {STORE_VERSION + 1} was written by a newer layerrope-sweeper"):
        read_manifest(_dir(tmp_path, json.dumps({"store_version": STORE_VERSION + 1, "cells": []}), "newer"))
