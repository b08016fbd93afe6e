"""`sweeper replay` over several tables, tables with unfinished runs, and the clairvoyant floor.

Planted tables with figures worked out by hand; the real CLI for the table and JSON output and for bad
tables (exit 2, one line each); and, when the recorded sweeps are beside the checkout, StepLaw's and
Marin's tables: what qualifies, the floor, and the shipped policy against it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.core.grid import LRPolicy
from sweeper.search.replay import floor_points, replay, table_from_frame

ROOT = Path(__file__).resolve().parents[3]
R2 = math.sqrt(2)


def data_dir(name: str) -> Path:
    """A recorded data set: $<NAME>_DIR, else ../shared/data/<name> beside the checkout (or its worktree folder)."""
    if os.environ.get(f"{name.upper()}_DIR"):
        return Path(os.environ[f"{name.upper()}_DIR"])
    candidates = [base / "shared" / "data" / name for base in (ROOT.parent, ROOT.parent.parent)]
    return next((c for c in candidates if c.is_dir()), candidates[0])


STEPLAW, MARIN = data_dir("steplaw"), data_dir("marin")
needs_steplaw = pytest.mark.skipif(not (STEPLAW / "dense_lr_bs_loss.csv").is_file(),
                                   reason=f"the StepLaw grids are not on this machine ({STEPLAW})")
needs_marin = pytest.mark.skipif(not (MARIN / "marin_lr_ablations.csv").is_file(),
                                 reason=f"Marin's LR ablations are not on this machine ({MARIN})")

# One group on a √2 grid around 1e-3 (k = -3..3), its optimum at k = 0; only k = 0 lies within 0.25%
# (3.02 is 0.67% above 3.00).
LOSSES = [3.30, 3.12, 3.03, 3.00, 3.02, 3.10, 3.25]
PLANTED = {"g": ["a"] * 7, "lr": [round(1e-3 * R2**k, 7) for k in range(-3, 4)], "loss": LOSSES}
WIDE = dict(lo=1e-6, hi=1.0, factor=2.0, max_points=10)


def lattice(*ks: int) -> list[float]:
    return [1e-3 * R2**k for k in ks]


def test_the_floor_by_hand():
    (group,) = table_from_frame(pl.DataFrame(PLANTED), ["g"]).groups
    # Shift 0: {-2, 0, 2} is bracketed at 0 already.
    assert floor_points(group, lattice(-2, 0, 2)) == 3
    # Shift +1: {-1, 1, 3}: 1 (3.02) is bracketed but 0.67% off; one more point, k = 0, ends within.
    assert floor_points(group, lattice(-1, 1, 3)) == 4
    # Shift +2: {0, 2, 4}, 4 unrecorded (it still counts): 0 is best with nothing below; one point below.
    assert floor_points(group, lattice(0, 2, 4)) == 4
    # Shift -3: {-5 (unrecorded), -3, -1}: -1 is best at the top; 0 and a point above it are needed.
    assert floor_points(group, lattice(-5, -3, -1)) == 5
    # A wider band: at shift +1 the bracketed 1 (0.67% off) is within 1%: nothing more.
    assert floor_points(group, lattice(-1, 1, 3), band=1.0) == 3
    # Every policy from these grids uses at least the floor; the shipped kind of policy, by hand
    # (tests/sweeper/test_replay.py): shift +1 costs 4 with refine: vertex, 3 without (and misses the band).
    policy = LRPolicy(center=1e-3, points=3, refine=False, **WIDE)
    summary = replay(table_from_frame(pl.DataFrame(PLANTED), ["g"]), policy, range(-3, 4), floor=True)
    assert all(o.floor is not None and (o.points >= o.floor or not o.within(0.25)) for o in summary.outcomes)
    assert summary.floor_points_mean == pytest.approx(
        sum(floor_points(group, lattice(k - 2, k, k + 2)) for k in range(-3, 4)) / 7)
    assert [b["floor_points_mean"] for b in summary.by_shift] == [5, 4, 4, 3, 4, 4, 5]


def test_runs_without_a_loss_are_refused_or_left_out():
    rows = {"g": ["a"] * 5, "lr": [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2], "loss": ["3.3", "3.1", None, "nan", "3.4"]}
    with pytest.raises(UserError, match=r"2 rows with a missing, NaN or infinite loss \(first: data row 3"):
        table_from_frame(pl.DataFrame(rows), ["g"])
    table = table_from_frame(pl.DataFrame(rows), ["g"], missing_loss="drop")
    (group,) = table.groups
    assert table.dropped == 2 and group.lrs == (1e-3, 2e-3, 1.6e-2) and group.losses == (3.3, 3.1, 3.4)
    assert table.ratio == pytest.approx(2.0)  # the gap left by the dropped runs is a whole number of steps
    with pytest.raises(UserError, match="every run lacks a finite loss"):
        table_from_frame(pl.DataFrame({"g": ["a"], "lr": [1e-3], "loss": ["nan"]}), ["g"], missing_loss="drop")
    with pytest.raises(UserError, match="--missing-loss keep"):
        table_from_frame(pl.DataFrame(rows), ["g"], missing_loss="keep")


# -- the real command line --------------------------------------------------------------------------

YAML = ("name: s\nmethods: [pre]\nmodel: {width: 32, heads: 2, depths: [2], seq_len: 16}\n"
        "train: {steps: 10, batch_size: 2}\n"
        "lr: {center: 1.0e-3, points: 3, refine: false, bounds: [1.0e-6, 1.0], max_points: 10}\n")


def sweeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.fixture()
def two_tables(tmp_path):
    """The planted group as `a.csv` (group column g) and, with other column names, one unfinished run and a
    second group, as `b.csv` (group column model, columns rate and final)."""
    yaml = tmp_path / "s.yaml"
    yaml.write_text(YAML)
    pl.DataFrame(PLANTED).write_csv(tmp_path / "a.csv")
    pl.DataFrame({
        "model": ["x"] * 7 + ["y"] * 4,
        "rate": PLANTED["lr"] + [round(1e-3 * R2**k, 7) for k in (-1, 0, 1, 2)],
        "final": [str(v) for v in LOSSES] + ["3.2", "3.0", None, "3.1"],
    }).write_csv(tmp_path / "b.csv")
    return tmp_path


def test_several_tables_each_with_its_options(two_tables):
    a, b, yaml = str(two_tables / "a.csv"), str(two_tables / "b.csv"), str(two_tables / "s.yaml")
    done = sweeper("replay", "--yaml", yaml, "--shifts", "-2..2", "--floor", "--json", "--group", "g", "--table", a,
                   "--table", b, "--group", "model", "--lr-column", "rate", "--loss-column", "final",
                   "--missing-loss", "drop")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    first, second = doc["tables"]
    assert (first["table"], first["group_columns"], first["dropped_runs"]) == (a, ["g"], 0)
    assert (second["table"], second["group_columns"], second["dropped_runs"]) == (b, ["model"], 1)
    # b's group x is a's group: the same replays (3.6 points per replay, by hand in test_replay.py);
    # b's group y (-1, 0, 2 after the unfinished run at 1 is dropped) has its optimum inside: replayed too.
    assert first["points_per_group_mean"] == pytest.approx(3.6) and first["replays"] == 5
    assert (second["groups"], second["replays"]) == (2, 10)
    pooled = doc["combined"]["policies"][0]
    assert doc["combined"]["tables"] == 2 and pooled["replays"] == 15 and pooled["groups"] == 3
    assert pooled["points_per_group_mean"] == pytest.approx(
        (first["points_per_group_mean"] * 5 + second["points_per_group_mean"] * 10) / 15)
    assert pooled["within_band_fraction"] == pytest.approx(
        (first["within_band_fraction"] * 5 + second["within_band_fraction"] * 10) / 15)
    assert pooled["floor_points_mean"] == pytest.approx(
        (first["floor_points_mean"] * 5 + second["floor_points_mean"] * 10) / 15)
    # The table output: one block per table, then the pooled line.
    text = sweeper("replay", "--yaml", yaml, "--shifts", "-2..2", "--group", "g", "--table", a, "--table", b,
                   "--group", "model", "--lr-column", "rate", "--loss-column", "final", "--missing-loss", "drop")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("LR policies of") == 2 and "1 runs without a finite loss left out" in text.stdout
    assert "all 2 tables pooled: 15 replays (3 groups)" in text.stdout
    # One table, positional or --table: the single-table JSON as before (no "tables" key).
    for args in (("replay", a), ("replay", "--table", a)):
        single = json.loads(sweeper(*args, "--yaml", yaml, "--group", "g", "--shifts", "-2..2", "--json").stdout)
        assert "tables" not in single and single["replays"] == 5 and single["points_per_group_mean"] == 3.6


def test_bad_tables_exit_2_with_one_line_each(two_tables):
    a, b, yaml = str(two_tables / "a.csv"), str(two_tables / "b.csv"), str(two_tables / "s.yaml")
    # b read with a's column names (no model, rate or final given), and a missing file: two lines.
    done = sweeper("replay", "--yaml", yaml, "--group", "g", "--table", b, "--table", str(two_tables / "none.csv"),
                   "--table", a)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and not done.stdout and "Traceback" not in done.stderr
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), done.stderr
    assert "b.csv: missing columns g, lr, loss" in lines[0] and "none.csv: no such file" in lines[1]
    # b's unfinished run without --missing-loss drop: refused, naming its data row.
    done = sweeper("replay", "--yaml", yaml, "--table", b, "--group", "model", "--lr-column", "rate",
                   "--loss-column", "final")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "data row 10" in done.stderr
    # A table without group columns, and none at all.
    done = sweeper("replay", "--yaml", yaml, "--table", a)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "a.csv: --group" in done.stderr
    done = sweeper("replay", "--yaml", yaml, "--group", "g")
    assert done.returncode == 2 and "name a table" in done.stderr


# -- recorded sweeps beside the checkout ------------------------------------------------------------


def replay_doc(capsys, *args: str) -> dict:
    assert main(["replay", "--yaml", str(ROOT / "sweeps/depth.yaml"), "--json", "--floor", *args]) == 0
    return json.loads(capsys.readouterr().out)


@needs_steplaw
@pytest.mark.parametrize(("name", "group"), [("dense_lr_bs_loss.csv", "N,D,bs"), ("moe_lr_bs_loss.csv", "N,D,bs,Na"),
                                             ("moe_lr_bs_loss.csv", "N,D,bs")])
def test_the_shipped_policy_against_the_floor_on_steplaw(capsys, name, group):
    """Issue 32's target: a centre off by up to 3 steps costs <= 4.0 points per cell at >= 98% within 0.25%,
    with the centre right no worse than the 3-point search's 3.48 points and 100%. depth.yaml's 2-point first
    grid meets it (3.96 / 3.98 / 3.96 points), its brackets kept (>= 97.5% of replays end bracketed); the
    floor, the fewest points any search from the same first grid could use knowing the table, is 3.39-3.50."""
    doc = replay_doc(capsys, str(STEPLAW / name), "--group", group, "--shifts=-3..3")
    assert doc["within_band_fraction"] >= 0.98 and doc["points_per_group_mean"] <= 4.0
    assert doc["bracketed_fraction"] >= 0.975
    assert 3.35 <= doc["floor_points_mean"] <= 3.55 < doc["points_per_group_mean"]
    at_zero = replay_doc(capsys, str(STEPLAW / name), "--group", group, "--shifts=0")
    assert at_zero["points_per_group_mean"] <= 3.485 and at_zero["within_band_fraction"] == 1.0
    assert at_zero["bracketed_fraction"] == 1.0 and at_zero["floor_points_mean"] <= 3.13


@needs_marin
def test_marin_groups_that_qualify(capsys):
    """Marin's table through the replay's table options: 147 (optimizer, size, chinchilla) cells have a finished
    run, 30 of them an optimum with a recorded LR on each side; the rest are skipped, counted. Checked against the
    table directly."""
    doc = replay_doc(capsys, str(MARIN / "marin_lr_ablations.csv"), "--group", "optimizer,size,chinchilla",
                     "--missing-loss", "drop", "--shifts=-1..1")
    frame = pl.read_csv(MARIN / "marin_lr_ablations.csv", infer_schema_length=None).with_columns(
        pl.col("loss").cast(pl.Float64, strict=False)).filter(pl.col("loss").is_finite())
    interior = 0
    cells = frame.group_by(["optimizer", "size", "chinchilla"])
    for _, cell in cells:
        runs = cell.group_by("lr").agg(pl.col("loss").min()).sort("lr")  # duplicates: min, as the replay
        best = runs["loss"].arg_min()
        interior += 0 < best < runs.height - 1
    assert doc["dropped_runs"] == 20 and doc["grid_ratio"] == pytest.approx(2.0)
    assert doc["groups"] == interior == 30 and doc["groups"] + doc["skipped_edge"] == len(list(cells)) == 147
    assert doc["replays"] == 90 and doc["within_band_fraction"] == 1.0
    assert doc["floor_points_mean"] <= doc["points_per_group_mean"]
