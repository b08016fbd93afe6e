"""Turn the reliability suite's figures into the README's reliability table (Markdown).

    RELIABILITY_REPORT=reliability.json python -m pytest tests/reliability
    python tests/reliability/table.py reliability.json            # prints the table
    python tests/reliability/table.py reliability.json -o table.md

The JSON is written by tests/reliability/conftest.py: one entry per test group with a title,
what it does, and the figures it measured. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _figures(figures: dict[str, Any]) -> str:
    parts = []
    for key, value in figures.items():
        if key == "faults" and isinstance(value, dict):  # numerical faults: one compact item per kind
            value = {kind: f"step {f['fault_step']} → diverged at {f['diverged_step']}, recorded within "
                           f"{f['steps_until_recorded']} steps" for kind, f in value.items()}
        if key == "cases" and isinstance(value, dict):
            value = {case: "refused (exit 2), store untouched" for case in value}
        parts.append(f"{key.replace('_', ' ')}: **{_value(value)}**")
    return "<br>".join(parts).replace("|", "\\|")


def table(report: dict[str, Any]) -> str:
    entries = sorted(report["tests"].values(), key=lambda e: e.get("order", 99))
    machine = report.get("machine", {})
    lines = [
        "| test | what it does | measured |",
        "|---|---|---|",
    ]
    for entry in entries:
        does = entry["does"].replace("|", "\\|")
        lines.append(f"| {entry['title']} | {does} | {_figures(entry['figures'])} |")
    load = machine.get("load_average")
    lines.append("")
    lines.append(f"Measured on {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}"
                 + (f", load average at the end {load[0]:.1f}" if load else "")
                 + "; produced by `python -m pytest tests/reliability` (see tests/reliability/table.py).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="the JSON file the suite wrote ($RELIABILITY_REPORT)")
    parser.add_argument("-o", "--output", help="write the table here instead of stdout")
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.report).read_text())
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: {args.report}: {exc}\n")
        return 2
    text = table(report)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
