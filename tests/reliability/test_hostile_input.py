"""Item 5: hostile input through the real CLI: malformed sweep files for `validate` and `launch`,
and bad sweep directories for every command that takes one. Each must exit 2 with one `error:`
line per problem naming the field (or the file), no traceback, nothing created on disk, fast.

Every case runs through `sweeper.cli.main` in a fresh Python process, all the cases of a test in
one process (`cli_batch.py`: one interpreter start-up, not one per case), which must end without
having imported anything heavy (torch, Ray, polars...): nothing heavy may be needed before the
input is validated. A sample of the cases also runs as a user runs it, each `python -m sweeper.cli`
in its own process, end to end: exit code 2, no traceback, and its CPU time (user + system, from
wait4; load does not inflate it, the wall clock is only recorded) under 1.5 s, Python's start-up
included.
Builds on tests/sweeper/spec/test_schema_cli.py (the same kind of cases in-process, for speed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

GOOD = """\
name: hostile
methods: [pre]
model: {width: 32, heads: 2, depths: [1], seq_len: 32}
train: {steps: 10, batch_size: 4}
lr: {grid: [1e-3, 1e-2]}
"""


def good(**replace: str) -> bytes:
    text = GOOD
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def with_line(line: str) -> bytes:
    return (GOOD + line + "\n").encode()


BOMB = (b'a: &a ["x","x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
        b'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n'
        b'e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n'
        b'g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n')

# name -> (file content, text the error must contain: the field, or what is wrong with the file)
CASES: dict[str, tuple[bytes, str]] = {
    "empty file": (b"", "empty"),
    "only comments": (b"# nothing here\n   \n", "empty"),
    "binary (PNG header)": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "binary"),
    "not UTF-8 (latin-1)": (good(**{"name: hostile": "name: caf\xe9"}).replace("é".encode(), b"\xe9"), "UTF-8"),
    "UTF-16 with BOM": (GOOD.encode("utf-16"), "binary"),
    "NUL byte in a value": (good(**{"name: hostile": "name: host\x00ile"}), "binary"),
    "top level is a list": (b"- pre\n- post\n", "mapping"),
    "top level is a scalar": (b"just words\n", "mapping"),
    "duplicate top-level key": (with_line("name: again"), "name"),
    "duplicate nested key": (good(**{"steps: 10,": "steps: 10, steps: 20,"}), "duplicate key 'steps'"),
    "YAML alias bomb": (BOMB, "alias"),
    "deep flow nesting": (b"name: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nest"),
    "deep block nesting": (b"a:\n" + b"".join(b" " * (i + 1) + b"b:\n" for i in range(300)), "nest"),
    "python object tag": (with_line("description: !!python/object/apply:os.system ['touch /tmp/pwned']"), "tag"),
    "syntax error": (b"name: [unclosed\nmethods: pre\n", "invalid YAML"),
    "tab indentation": (b"name: x\nmodel:\n\twidth: 32\n", "invalid YAML"),
    "two documents": (GOOD.encode() + b"---\n" + GOOD.encode(), "document"),
    "file over 1 MB": (GOOD.encode() + b"# " + b"x" * 1_100_000 + b"\n", "at most"),
    "unknown top-level key": (with_line("method: [post]"), "method"),
    "unknown nested key": (good(**{"batch_size: 4": "batch_size: 4, stpes: 3"}), "train.stpes"),
    "unknown method": (good(**{"[pre]": "[pre, prenorm]"}), "methods[1]"),
    "wrong type: width": (good(**{"width: 32": "width: wide"}), "model.width"),
    "wrong type: methods": (good(**{"methods: [pre]": "methods: 3"}), "methods"),
    "true as a number": (good(**{"steps: 10": "steps: true"}), "train.steps"),
    "zero depth": (good(**{"depths: [1]": "depths: [0]"}), "model.depths[0]"),
    "negative depth": (good(**{"depths: [1]": "depths: [-4]"}), "model.depths[0]"),
    "absurd depth": (good(**{"depths: [1]": "depths: [100000000000]"}), "model.depths[0]"),
    "zero width": (good(**{"width: 32": "width: 0"}), "model.width"),
    "absurd width": (good(**{"width: 32": "width: 99999999"}), "model.width"),
    "heads do not divide width": (good(**{"heads: 2": "heads: 3"}), "heads"),
    "zero steps": (good(**{"steps: 10": "steps: 0"}), "train.steps"),
    "negative batch": (good(**{"batch_size: 4": "batch_size: -4"}), "train.batch_size"),
    "absurd steps (float)": (good(**{"steps: 10": "steps: 1e30"}), "train.steps"),
    "inverted LR bounds": (good(**{"lr: {grid: [1e-3, 1e-2]}": "lr: {center: 1e-3, bounds: [1e-1, 1e-5]}"}),
                           "lr.bounds"),
    "zero LR bound": (good(**{"lr: {grid: [1e-3, 1e-2]}": "lr: {center: 1e-3, bounds: [0, 1]}"}), "lr.bounds"),
    "negative LR in grid": (good(**{"[1e-3, 1e-2]": "[-1e-3, 1e-2]"}), "lr.grid"),
    "NaN LR centre": (good(**{"lr: {grid: [1e-3, 1e-2]}": "lr: {center: .nan}"}), "lr.center"),
    "infinite LR bound": (good(**{"lr: {grid: [1e-3, 1e-2]}": "lr: {center: 1e-3, bounds: [1e-6, .inf]}"}), "lr.bounds"),
    "NaN in resources": (with_line("resources: {cpu: .nan}"), "resources.cpu"),
    "negative GPU fraction": (with_line("resources: {gpu: -0.5}"), "resources.gpu"),
    "zero concurrency": (with_line("concurrency: 0"), "concurrency"),
    "negative retries": (with_line("retries: -1"), "retries"),
    "zero seeds": (with_line("seeds: 0"), "seeds"),
    "missing data file": (with_line("data: {source: text, path: /no/such/corpus.txt}"), "data.path"),
    "missing validation file": (with_line("data: {source: text, path: /etc/hostname, val_path: /no/val.txt}"),
                                "data.val_path"),
    "unknown data source": (with_line("data: {source: s3}"), "data.source"),
    "path traversal in name": (good(**{"name: hostile": "name: ../../etc"}), "name"),
    "missing required keys": (b"name: x\n", "methods"),
    "empty methods": (good(**{"methods: [pre]": "methods: []"}), "methods"),
    "ledger URL of another scheme": (with_line("ledger: ftp://example.org/x"), "ledger"),
}


def run_timed(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the CLI in a new process; returns it, its wall time and its CPU time (user + system)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # small: no deadlock before the wait below
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    result = subprocess.CompletedProcess(args, proc.returncode, out.decode(errors="replace"),
                                         err.decode(errors="replace"))
    return result, wall, usage.ru_utime + usage.ru_stime


BATCH = Path(__file__).with_name("cli_batch.py")


def run_batch(commands: list[list[str]], cwd: Path) -> tuple[list[subprocess.CompletedProcess[str]], list[str]]:
    """Every command through `sweeper.cli.main` in one fresh process (`cli_batch.py`); returns one
    result per command (a traceback that escaped `main` is appended to its stderr) and the heavy
    modules the process imported."""
    done = subprocess.run([sys.executable, str(BATCH)], input=json.dumps(commands), cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-4000:]
    batch = json.loads(done.stdout)
    results = [subprocess.CompletedProcess(r["args"], r["code"], r["out"], r["err"] + (r["traceback"] or ""))
               for r in batch["results"]]
    return results, batch["heavy_modules"]


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def file_problems(proc: subprocess.CompletedProcess[str], needle: str) -> list[str]:
    """What is wrong with how a malformed file was rejected (nothing: exit 2, one `error:` line per
    problem, naming `needle`, no traceback)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    problems = []
    if proc.returncode != 2:
        problems.append(f"exit {proc.returncode}")
    if "Traceback" in proc.stderr + proc.stdout:
        problems.append("traceback")
    if not lines or not all(ln.startswith("error: ") and len(ln) < 600 for ln in lines):
        problems.append(f"not one error line per problem: {lines[:3]}")
    if needle.lower() not in proc.stderr.lower():
        problems.append(f"does not name {needle!r}: {lines[:2]}")
    return problems


# Also run each in its own process, as a user runs them: the costliest files to read (an alias bomb,
# deep nesting, 1 MB) and one a validation of the data section rejects.
FILES_IN_OWN_PROCESS = ("YAML alias bomb", "deep flow nesting", "file over 1 MB", "missing data file")


@pytest.mark.slow
def test_malformed_sweep_files_are_rejected_cleanly(tmp_path, figures):
    work = tmp_path / "work"  # the working directory: a default output (runs/NAME) would appear here
    work.mkdir()
    files = {}
    for i, (name, (content, _)) in enumerate(CASES.items()):
        files[name] = tmp_path / f"case{i:02d}.yaml"
        files[name].write_bytes(content)
    before = listing(tmp_path)
    cases = [(name, command) for name in files for command in ("validate", "launch")]
    results, heavy = run_batch([[command, str(files[name])] for name, command in cases], work)
    failures = [(name, command, problems) for (name, command), proc in zip(cases, results)
                if (problems := file_problems(proc, CASES[name][1]))]
    assert not heavy, f"rejecting malformed files imported {heavy}"

    walls, cpus = [], []
    for name in FILES_IN_OWN_PROCESS:
        for command in ("validate", "launch"):
            proc, wall, cpu = run_timed([command, str(files[name])], work)
            walls.append(wall)
            cpus.append(cpu)
            problems = file_problems(proc, CASES[name][1])
            if cpu >= 1.5:  # typically 0.4-0.6 s; importing torch alone costs about 2.5 s
                problems.append(f"{cpu:.2f} s of CPU")
            if problems:
                failures.append((name, f"{command} (own process)", problems))
    assert listing(tmp_path) == before, "a rejected file must create nothing"
    assert not failures, failures

    n = len(CASES)
    figures.record(
        "hostile_files", order=9, title="Hostile sweep files",
        does=(f"{n} malformed sweep files (types, unknown keys/methods, zero/negative/absurd sizes, bad LR bounds, "
              "NaN/Inf, missing data, duplicate keys, empty, binary, UTF-16, alias bomb, deep nesting, 1 MB...) "
              "through `sweeper validate` and `sweeper launch`, all in one fresh process (no heavy import), "
              f"{len(FILES_IN_OWN_PROCESS)} of them also each in a new process"),
        rejected_cleanly=f"{2 * n - len(failures)} of {2 * n} ({n} files x 2 commands)",
        heavy_modules_imported=len(heavy),
        max_wall_seconds_own_process=round(max(walls), 3),
        median_wall_seconds_own_process=round(sorted(walls)[len(walls) // 2], 3),
        max_cpu_seconds_own_process=round(max(cpus), 3),
        files_created=0,
    )


def _sweep_dirs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Bad DIR arguments: name -> (path, text the error must contain)."""
    missing = tmp_path / "does-not-exist"
    empty = tmp_path / "empty"
    empty.mkdir()
    file = tmp_path / "a-file"
    file.write_text("not a directory\n")
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "manifest.json").write_text(json.dumps({"store_version": 999, "name": "future"}))
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "manifest.json").write_bytes(b"\x00\xff{not json")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text(json.dumps({"hello": "world"}))
    return {
        "missing directory": (missing, "no such directory"),
        "a file, not a directory": (file, "not a directory"),
        "a directory that is not a sweep": (empty, "not a sweep directory"),
        "a store from a newer version": (newer, "newer layerrope-sweeper"),
        "an unreadable manifest": (garbage, "unreadable manifest"),
        "a manifest of something else": (foreign, "store_version"),
    }


NEW_SWEEP_PLACES = ("missing directory", "a directory that is not a sweep")
COMMANDS = {
    "status": ["status", "{dir}"],
    "status --json": ["status", "{dir}", "--json"],
    "status --repair": ["status", "{dir}", "--repair"],
    "optima": ["optima", "{dir}"],
    "fit": ["fit", "{dir}"],
    "dashboard": ["dashboard", "{dir}", "--port", "0"],
    "plots": ["plots", "{dir}", "--out", "{out}"],
    "launch --output": ["launch", "{yaml}", "--output", "{dir}"],
}


# Also run in their own processes, as a user runs them (one command per kind of bad directory).
DIRS_IN_OWN_PROCESS = (("missing directory", "status --json"), ("a file, not a directory", "plots"),
                       ("a directory that is not a sweep", "dashboard"), ("a store from a newer version", "fit"),
                       ("an unreadable manifest", "launch --output"), ("a manifest of something else", "optima"))


def dir_problem(proc: subprocess.CompletedProcess[str], needle: str) -> bool:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return (proc.returncode != 2 or "Traceback" in proc.stderr or len(lines) != 1
            or not lines[0].startswith("error: ") or needle not in lines[0])


@pytest.mark.slow
def test_bad_sweep_directories_for_every_command(tmp_path, figures):
    dirs = _sweep_dirs(tmp_path)
    yaml = tmp_path / "good.yaml"
    yaml.write_text(GOOD)
    work = tmp_path / "work"
    work.mkdir()
    before = {name: (listing(path) if path.is_dir() else None, path.exists()) for name, (path, _) in dirs.items()}
    cases = [(dname, cname) for dname in dirs for cname in COMMANDS
             if not (cname == "launch --output" and dname in NEW_SWEEP_PLACES)]  # where a new sweep starts
    assert set(DIRS_IN_OWN_PROCESS) <= set(cases)

    def args(dname: str, cname: str) -> list[str]:
        return [a.format(dir=dirs[dname][0], out=tmp_path / "plots-out", yaml=yaml) for a in COMMANDS[cname]]

    results, heavy = run_batch([args(*case) for case in cases], work)
    failures = [(dname, cname, proc.returncode, proc.stderr.splitlines()[:3])
                for (dname, cname), proc in zip(cases, results) if dir_problem(proc, dirs[dname][1])]
    walls = []
    for dname, cname in DIRS_IN_OWN_PROCESS:
        proc, wall, _ = run_timed(args(dname, cname), work)
        walls.append(wall)
        if dir_problem(proc, dirs[dname][1]):
            failures.append((dname, f"{cname} (own process)", proc.returncode, proc.stderr.splitlines()[:3]))
    assert not failures, failures
    after = {name: (listing(path) if path.is_dir() else None, path.exists()) for name, (path, _) in dirs.items()}
    assert after == before, "nothing may be created in or beside a rejected directory"
    assert not (tmp_path / "plots-out").exists() and not listing(work)
    total = len(cases)
    figures.record(
        "hostile_dirs", order=10, title="Bad sweep directories",
        does=(f"{len(dirs)} bad DIR arguments (missing, a file, not a sweep, newer store version, unreadable or "
              f"foreign manifest) x {len(COMMANDS)} commands that take DIR, in one fresh process; "
              f"{len(DIRS_IN_OWN_PROCESS)} of them also each in a new process"),
        rejected_cleanly=f"{total - len(failures)} of {total}",
        heavy_modules_imported=heavy,
        max_wall_seconds_own_process=round(max(walls), 3),
    )
