"""`sweeper doctor` on this machine (no Ray started): the done-when of issue 29's item 1, and its argument
errors. Every node of a cluster: tests/reliability/test_cluster_storage.py."""

from __future__ import annotations

import json
import subprocess
import sys

from sweeper.cli import main


def test_this_machine_is_ok_and_a_storage_under_a_file_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["doctor", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and len(doc["nodes"]) >= 1 and doc["problems"] == []
    node = doc["nodes"][0]
    assert node["storage_ok"] is True and node["gpus"] == [] and node["cpus"] >= 1 and node["disk_free_gb"] > 0
    assert not (tmp_path / "runs").exists()  # the marker and the folders it needed are gone

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["doctor", "--storage", str(blocker / "storage"), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["nodes"][0]["storage_ok"] is False
    assert len(doc["problems"]) == 1 and doc["problems"][0].startswith(f"storage {blocker / 'storage'}")

    assert main(["doctor", "--storage", str(blocker / "storage")]) == 1  # the table: each problem named
    assert "problem: storage" in capsys.readouterr().out


def test_a_sweep_files_data_and_bad_arguments(tmp_path, capsys):
    yaml = tmp_path / "s.yaml"
    yaml.write_text(f"name: s\noutput: {tmp_path / 's'}\nmethods: [pre]\nmodel: {{width: 32, heads: 2, depths: [1]}}\n"
                    f"train: {{steps: 20, batch_size: 4}}\ndata: {{source: text, path: {tmp_path / 'missing.txt'}}}\n")
    assert main(["doctor", "--yaml", str(yaml), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["storage"] == str((tmp_path / "s" / "ray").resolve())
    assert [p.split(":")[0] for p in doc["problems"]] == [f"data {tmp_path / 'missing.txt'}"]
    assert main(["doctor", "--address", "ray://head:10001"]) == 2
    assert "Ray Client (ray://) is not supported" in capsys.readouterr().err
    proc = subprocess.run([sys.executable, "-m", "sweeper.cli", "doctor", "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2


def test_the_local_check_does_not_import_ray(tmp_path):
    code = ("import sys; from sweeper.cli import main; rc = main(['doctor', '--storage', %r, '--format', 'json']); "
            "assert 'ray' not in sys.modules and 'torch' not in sys.modules, sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('ray', 'torch')); sys.exit(rc)") % str(tmp_path / "st")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
