"""`sweeper replay`: recorded LR grids replayed through a sweep's LR policy.

Planted tables with figures worked out by hand; bad tables through the real CLI (exit 2, one
line each); and, when the StepLaw grids are on this machine, the goal of issue 15 for the
shipped policy of `sweeps/depth.yaml` and `sweeps/ladder.yaml`.
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

from sweeper.core.grid import LRPolicy
from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.commands.replay import parse_shifts
from sweeper.search.replay import replay, replay_group, table_from_frame

ROOT = Path(__file__).resolve().parents[3]


def steplaw_dir() -> Path:
    """The StepLaw grids: $STEPLAW_DIR, else ../shared/data/steplaw beside the checkout (or its worktree folder)."""
    if os.environ.get("STEPLAW_DIR"):
        return Path(os.environ["STEPLAW_DIR"])
    candidates = [base / "shared" / "data" / "steplaw" for base in (ROOT.parent, ROOT.parent.parent)]
    return next((c for c in candidates if c.is_dir()), candidates[0])


STEPLAW = steplaw_dir()

R2 = math.sqrt(2)
# One interior group on a √2 grid around 1e-3 (k = -3..3), the optimum at k = 0, and one group
# whose optimum is its lowest recorded LR (skipped and counted).
PLANTED = {
    "g": ["a"] * 7 + ["b"] * 4,
    "lr": [round(1e-3 * R2**k, 7) for k in range(-3, 4)] + [round(1e-3 * R2**k, 7) for k in range(-1, 3)],
    "loss": [3.30, 3.12, 3.03, 3.00, 3.02, 3.10, 3.25] + [3.0, 3.1, 3.2, 3.3],
}
WIDE = dict(lo=1e-6, hi=1.0, factor=2.0, max_points=10)


def planted_table():
    return table_from_frame(pl.DataFrame(PLANTED), ["g"], source="planted.csv")


def test_planted_table_replayed_by_hand():
    table = planted_table()
    assert table.ratio == pytest.approx(R2, rel=1e-4)  # recorded LRs are rounded
    group = next(g for g in table.groups if g.values == ("a",))
    policy = LRPolicy(center=1e-3, points=3, refine=False, **WIDE)
    # k is the grid index of the centre; the initial grid is k-2, k, k+2 (factor 2 = two √2 steps).
    # Expected (points, unrecorded, regret in %); a regret of 0.02 / 3.00 = 2/3 %.
    expected = {
        -2: (4, 1, 0.0),  # {-4 (unrecorded: failed), -2, 0}: best 0 at the top: extend to 2 (3.10)
        -1: (4, 0, 2 / 3),  # {-3, -1, 1}: best 1 (3.02) at the top: extend to 3 (3.25)
        0: (3, 0, 0.0),  # {-2, 0, 2}: bracketed at once
        1: (3, 0, 2 / 3),  # {-1, 1, 3}: best 1 between -1 and 3: bracketed one √2 step off
        2: (4, 1, 0.0),  # {0, 2, 4 (unrecorded)}: best 0 at the bottom: extend to -2 (3.12)
    }
    for shift, (points, unrecorded, regret) in expected.items():
        out = replay_group(group, policy, 1e-3 * R2**shift, shift=shift)
        assert (out.points, out.unrecorded, out.status) == (points, unrecorded, "bracketed"), shift
        assert out.regret == pytest.approx(regret, abs=1e-9), shift

    summary = replay(table, policy, range(-2, 3))
    assert (summary.groups, summary.skipped_edge, summary.replays) == (1, 1, 5)
    assert summary.points_mean == pytest.approx(18 / 5) and summary.points_max == 4
    assert summary.bracketed_fraction == 1.0
    assert summary.regret_mean == pytest.approx(2 * (2 / 3) / 5)
    assert summary.regret_max == pytest.approx(2 / 3)
    assert summary.within_band_fraction == pytest.approx(3 / 5)
    assert summary.unrecorded_points == 2
    assert summary.exhaustive_points_mean == 7


def test_refining_toward_the_vertex_finds_the_recorded_optimum():
    group = next(g for g in planted_table().groups if g.values == ("a",))
    # Shift +1 again: {-1, 1, 3} = 3.03, 3.02, 3.25. The parabola through them (x in √2 steps):
    # d1 = -0.005, d2 = 0.115, a = 0.03, vertex at x = 0.0833: 0.92 half steps below the best
    # point, more than vertex_offset 0.5, so one half step down: k = 0 (3.00), bracketed.
    policy = LRPolicy(center=1e-3, points=3, refine="vertex", **WIDE)
    out = replay_group(group, policy, 1e-3 * R2, shift=1)
    assert (out.points, out.status, out.regret) == (4, "bracketed", 0.0)
    assert out.best_lr == pytest.approx(1e-3, rel=1e-3)
    # With the threshold above 0.92 half steps it does not refine.
    far = LRPolicy(center=1e-3, points=3, refine="vertex", vertex_offset=0.95, **WIDE)
    assert replay_group(group, far, 1e-3 * R2, shift=1).points == 3
    # Both half steps (the old refine) cost one more point for the same answer.
    both = replay_group(group, LRPolicy(center=1e-3, points=3, refine=True, **WIDE), 1e-3 * R2, shift=1)
    assert (both.points, both.regret) == (5, 0.0)


def test_a_half_step_past_a_failed_neighbour():
    group = next(g for g in planted_table().groups if g.values == ("a",))
    # Shift +3: {1, 3, 5}: 5 is unrecorded; best 1 (3.02) has 3 above and nothing below: extend to -1.
    # Shift -3 with the recorded grid ending at k = -3: {-5, -3, -1}: -5 unrecorded, best -1 at the top,
    # extend to 1 (3.02), then 3 (3.25): bracketed at 1 with 5 points.
    skip = LRPolicy(center=1e-3, points=3, refine=False, **WIDE)
    assert replay_group(group, skip, 1e-3 * R2**-3, shift=-3).points == 5
    # Shift +2 with a table missing k = -2: {0, 2, 4}: 4 fails, best 0 needs a lower neighbour:
    # `skip` walks to -2 (missing: failed), then -4 (missing), ... down to the trial cap: edge.
    holes = pl.DataFrame({"g": ["a"] * 5, "lr": [round(1e-3 * R2**k, 7) for k in (-3, -1, 0, 1, 2)],
                          "loss": [3.30, 3.03, 3.00, 3.02, 3.10]})
    g2 = table_from_frame(holes, ["g"]).groups[0]
    walked = replay_group(g2, skip, 1e-3 * R2**2, shift=2)
    assert walked.status == "edge" and walked.points == skip.max_points
    # `half_step` walks to -2 (failed), then tries -1 (between 0 and the failed -2) rather than -4:
    # bracketed with 5 points, two of them unrecorded (4 and -2).
    half = LRPolicy(center=1e-3, points=3, refine=False, failed_neighbour="half_step", **WIDE)
    out = replay_group(g2, half, 1e-3 * R2**2, shift=2)
    assert (out.points, out.unrecorded, out.status, out.regret) == (5, 2, "bracketed", 0.0)


def test_parse_shifts():
    assert parse_shifts("-3..3") == [-3, -2, -1, 0, 1, 2, 3]
    assert parse_shifts("2,-2,0") == [-2, 0, 2]
    with pytest.raises(ValueError):
        parse_shifts("3..-3")
    with pytest.raises(ValueError):
        parse_shifts("a..b")


def test_duplicate_runs_name_the_columns_that_separate_them():
    frame = pl.DataFrame({"N": [1, 1, 1, 1], "model": ["x", "y", "x", "y"], "lr": [1e-3, 1e-3, 2e-3, 2e-3],
                          "loss": [3.0, 3.1, 3.2, 3.3]})
    with pytest.raises(UserError, match=r"two runs at lr 0.001 .*--group.*model"):
        table_from_frame(frame, ["N"], duplicates="error")
    assert len(table_from_frame(frame, ["N", "model"], duplicates="error").groups) == 2


def test_duplicate_runs_at_one_lr_keep_the_lowest_loss_or_average():
    frame = pl.DataFrame({"N": [1, 1, 1, 1, 1], "lr": [1e-3, 1e-3, 2e-3, 2.002e-3, 4e-3],
                          "loss": [3.0, 3.1, 3.3, 3.2, 3.5]})
    (group,) = table_from_frame(frame, ["N"]).groups  # default: min
    assert group.lrs == (1e-3, 2e-3, 4e-3) and group.losses == (3.0, 3.2, 3.5)
    (group,) = table_from_frame(frame, ["N"], duplicates="mean").groups
    assert group.losses == pytest.approx((3.05, 3.25, 3.5))
    assert table_from_frame(frame, ["N"]).merged == 2
    with pytest.raises(UserError, match="--duplicates sideways"):
        table_from_frame(frame, ["N"], duplicates="sideways")


# -- the real command line --------------------------------------------------------------------------


def write_csv(path: Path, rows: dict) -> Path:
    pl.DataFrame(rows).write_csv(path)
    return path


def sweeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_cli_replays_a_planted_table_as_json(tmp_path):
    table = write_csv(tmp_path / "t.csv", PLANTED)
    yaml = tmp_path / "s.yaml"
    yaml.write_text(
        "name: s\nmethods: [pre]\nmodel: {width: 32, heads: 2, depths: [2], seq_len: 16}\n"
        "train: {steps: 10, batch_size: 2}\n"
        "lr: {center: 1.0e-3, points: 3, refine: false, bounds: [1.0e-6, 1.0], max_points: 10}\n"
    )
    done = sweeper("replay", str(table), "--yaml", str(yaml), "--group", "g", "--shifts", "-2..2", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    for key in ("points_per_group_mean", "bracketed_fraction", "regret_mean", "regret_max", "within_band_fraction",
                "replays"):
        assert key in doc
    assert doc["replays"] == 5 and doc["points_per_group_mean"] == pytest.approx(3.6)
    assert doc["within_band_fraction"] == pytest.approx(0.6) and doc["skipped_edge"] == 1
    # --policy overrides the sweep's lr section for this replay.
    done = sweeper("replay", str(table), "--yaml", str(yaml), "--group", "g", "--shifts", "1", "--json",
                   "--policy", "refine=vertex")
    assert json.loads(done.stdout)["points_per_group_mean"] == 4
    done = sweeper("replay", str(table), "--yaml", str(yaml), "--group", "g", "--policy", "refine=sideways")
    assert done.returncode == 2 and "--policy: refine" in done.stderr
    text = sweeper("replay", str(table), "--yaml", str(yaml), "--group", "g")
    assert text.returncode == 0 and "1 groups skipped" in text.stdout


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ({"g": ["a", "a"], "rate": [1e-3, 2e-3], "loss": [3.0, 3.1]}, "missing column lr"),
        ({"g": ["a", "a", "a"], "lr": [1e-3, 0.0, 2e-3], "loss": [3.0, 3.1, 3.2]}, "non-positive learning rate"),
        ({"g": ["a", "a", "a"], "lr": [1e-3, -2e-3, 4e-3], "loss": [3.0, 3.1, 3.2]}, "non-positive learning rate"),
        ({"g": ["a", "a", "a"], "lr": [1e-3, 2e-3, 4e-3], "loss": [3.0, float("nan"), 3.2]}, "NaN"),
        ({"g": ["a", "a", "a"], "lr": [1e-3, 2e-3, 5e-3], "loss": [3.0, 2.9, 3.2]}, "not on a geometric grid"),
        ({"g": ["a", "a", "a"], "lr": [1e-3, 1e-3, 2e-3], "loss": [3.0, 2.9, 3.2]}, "two runs at lr"),
    ],
)
def test_bad_tables_exit_2_with_one_line_each(tmp_path, rows, needle):
    table = write_csv(tmp_path / "bad.csv", rows)
    done = sweeper("replay", str(table), "--yaml", "sweeps/quickstart.yaml", "--group", "g", "--duplicates", "error")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not done.stdout


def test_several_problems_are_listed_one_per_line(tmp_path):
    table = write_csv(tmp_path / "bad.csv", {"g": ["a", "a"], "lr": [0.0, 1e-3], "loss": [float("nan"), 3.0]})
    done = sweeper("replay", str(table), "--yaml", "sweeps/quickstart.yaml", "--group", "g")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 3 and "2 problems" in lines[0]
    missing = sweeper("replay", str(tmp_path / "none.csv"), "--yaml", "sweeps/quickstart.yaml", "--group", "g")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    shifts = sweeper("replay", str(table), "--yaml", "sweeps/quickstart.yaml", "--group", "g", "--shifts", "3..-3")
    assert shifts.returncode == 2 and "--shifts" in shifts.stderr


# -- StepLaw's recorded grids -----------------------------------------------------------------------

needs_steplaw = pytest.mark.skipif(not (STEPLAW / "dense_lr_bs_loss.csv").is_file(),
                                   reason=f"the StepLaw grids are not on this machine ({STEPLAW})")
SETS = {"dense": ("dense_lr_bs_loss.csv", "N,D,bs"), "moe": ("moe_lr_bs_loss.csv", "N,D,bs,Na"),
        "moe-by-n-d-bs": ("moe_lr_bs_loss.csv", "N,D,bs")}


# depth.yaml's options added since issue 15, off for reproducing its figures
NO_FAILED_POINT_RULES = ("refine_min_gain=0", "pair_fallback=false", "failed_side_last=false", "close_after_failures=0")


def replay_json(capsys, set_name: str, yaml: str, *policy: str) -> dict:
    name, group = SETS[set_name]
    args = ["replay", str(STEPLAW / name), "--yaml", yaml, "--group", group, "--shifts", "-3..3", "--json"]
    for item in policy:
        args += ["--policy", item]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@needs_steplaw
@pytest.mark.parametrize("set_name", ["dense", "moe", "moe-by-n-d-bs"])
@pytest.mark.parametrize("yaml", ["sweeps/depth.yaml", "sweeps/ladder.yaml"])
def test_shipped_policy_meets_the_goal_on_steplaw(capsys, set_name, yaml):
    doc = replay_json(capsys, set_name, str(ROOT / yaml))
    assert doc["replays"] == 7 * doc["groups"] and doc["groups"] >= 50
    assert doc["points_per_group_mean"] <= 4.5
    assert doc["within_band_fraction"] >= 0.98
    assert doc["bracketed_fraction"] >= 0.97


@needs_steplaw
def test_the_issue_baseline_is_reproduced(capsys):
    # Issue 15's table, dense set: factor 2, 5 points, both half steps (the former depth.yaml):
    # 7.25 points per group, 100% within 0.25%; 3 points without refinement: 4.05, 95%.
    old = ("points=5", "refine=true", "vertex_first=false", "failed_neighbour=skip", *NO_FAILED_POINT_RULES)
    doc = replay_json(capsys, "dense", str(ROOT / "sweeps/depth.yaml"), *old)
    assert doc["points_per_group_mean"] == pytest.approx(7.25, abs=0.1) and doc["within_band_fraction"] == 1.0
    doc = replay_json(capsys, "dense", str(ROOT / "sweeps/depth.yaml"), *old, "points=3", "refine=false")
    assert doc["points_per_group_mean"] == pytest.approx(4.05, abs=0.1)
    assert doc["within_band_fraction"] == pytest.approx(0.95, abs=0.01)


@needs_steplaw
def test_the_issue_moe_baseline_is_reproduced_grouped_by_n_d_bs(capsys):
    # Issue 15's MoE figures (98%, 98%, 89% within 0.25%) come from --group N,D,bs, where 20 groups
    # hold two MoE configurations at every LR: the default `--duplicates min` keeps the better run.
    old = ("points=5", "refine=true", "vertex_first=false", "failed_neighbour=skip", *NO_FAILED_POINT_RULES)
    doc = replay_json(capsys, "moe-by-n-d-bs", str(ROOT / "sweeps/depth.yaml"), *old)
    assert doc["merged_runs"] == 180 and doc["within_band_fraction"] == pytest.approx(0.98, abs=0.005)
    doc = replay_json(capsys, "moe-by-n-d-bs", str(ROOT / "sweeps/depth.yaml"), *old, "points=3", "refine=false")
    assert doc["within_band_fraction"] == pytest.approx(0.89, abs=0.005)


@needs_steplaw
def test_moe_grouped_by_n_d_bs_alone_mixes_two_models():
    done = sweeper("replay", str(STEPLAW / "moe_lr_bs_loss.csv"), "--yaml", "sweeps/depth.yaml", "--group", "N,D,bs",
                   "--duplicates", "error")
    assert done.returncode == 2 and "two runs at lr" in done.stderr and "Na" in done.stderr
