"""The README table is produced from the suite's JSON by tests/reliability/table.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("table.py")


def test_the_table_lists_every_group_in_order_with_its_figures(tmp_path):
    report = {"machine": {"cpus": 2, "python": "3.11", "load_average": [1.5, 1, 1]}, "tests": {
        "b": {"title": "Second", "does": "a | b", "order": 2, "figures": {"points_retrained": 0, "ok": True}},
        "a": {"title": "First", "does": "kills", "order": 1, "figures": {"kills_survived": 6, "ratio": 1.23456}},
    }}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    out = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[0] == "| test | what it does | measured |"
    assert rows[1].startswith("| First | kills | kills survived: **6**<br>ratio: **1.23**")
    assert rows[2].startswith("| Second | a \\| b | points retrained: **0**<br>ok: **yes**")
    assert "2 CPUs" in out and "load average at the end 1.5" in out
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
