"""Item 3: numerical faults. A 4-cell sweep runs once cleanly; then again with a fault injected
into each cell's optimum of the clean run (`trials.faults`: NaN loss, +Inf loss, an
overflowing gradient, a 10x loss spike), inside a stack of four learning rates.

Each faulted point is recorded `diverged` within one report interval, never becomes its cell's
optimum, and never enters a fit; the members that share its stack are unaffected (their
objectives equal the clean run's to float rounding: the stack is rebuilt without the diverged
member, which changes the batched matmul shapes, not the maths).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from sweeper.cli import main
from sweeper.records.store import load_curves, load_points

from .conftest import cli_cmd, objectives, optima_json, write_sweep

pytestmark = pytest.mark.slow

REPORT_EVERY = 10
NUM_SWEEP = dict(methods="[pre, post]", depths="[1, 2]", steps=40, stack=4, concurrency=2,
                 lr="{grid: [3e-3, 1e-2, 3e-2, 6e-2], max_points: 8}")
FAULTS = {  # cell -> (kind, step)
    "pre/L1/s0": ("nan", 12),
    "pre/L2/s0": ("inf", 17),
    "post/L1/s0": ("explode", 23),  # the overflow reaches the weights in the update: the next step's loss is NaN
    "post/L2/s0": ("spike", 5),
}


@pytest.fixture(scope="module")
def clean(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("numerical-clean")
    assert main(["launch", str(write_sweep(folder, "numerical", **NUM_SWEEP)), "--json"]) == 0
    return folder / "numerical"


def fit_inputs(sweep: Path) -> dict:
    proc = subprocess.run(cli_cmd("fit", str(sweep), "--json", "--resamples", "200"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_nan_inf_exploding_and_spiking_optima_are_diverged_and_never_used(ray_session, tmp_path, clean, fault_plan,
                                                                         figures, capsys):
    clean_optima = {row["cell_id"]: row for row in optima_json(clean)["cells"]}
    targets = {cid: f"{cid}/lr={clean_optima[cid]['best_lr']:.6g}" for cid in FAULTS}
    fault_plan([{"point": targets[cid], "step": step, "kind": kind} for cid, (kind, step) in FAULTS.items()])
    assert main(["launch", str(write_sweep(tmp_path, "numerical", **NUM_SWEEP)), "--json"]) == 0
    capsys.readouterr()
    sweep = tmp_path / "numerical"
    points = load_points(sweep)
    rows = {r["point_id"]: r for r in points.to_dicts()}
    curves = load_curves(sweep)

    recorded = {}
    for cid, (kind, step) in FAULTS.items():
        row = rows[targets[cid]]
        assert row["state"] == "diverged", row
        assert row["objective"] is None and row["loss"] is None
        expected = step + 1 if kind == "explode" else step
        assert row["diverged_step"] == expected, row
        reason = "exploded" if kind == "spike" else "non-finite"
        assert row["reason"].startswith(reason), row["reason"]
        # Recorded within one report interval: the last progress row of the point comes at most one
        # report after the fault, and nothing after it.
        last_step = curves.filter(pl.col("point_id") == targets[cid])["step"].max() or 0
        assert last_step <= step + REPORT_EVERY, (cid, last_step)
        recorded[kind] = {"fault_step": step, "diverged_step": row["diverged_step"],
                          "steps_until_recorded": max(0, last_step - step) if last_step else REPORT_EVERY,
                          "reason": row["reason"]}

    # Never a cell's optimum; the cells still finish (the diverged point bounds the bracket).
    optima = {row["cell_id"]: row for row in optima_json(sweep)["cells"]}
    for cid in FAULTS:
        best = optima[cid]
        assert best["best_lr"] is not None and targets[cid] != f"{cid}/lr={best['best_lr']:.6g}"
        assert rows[f"{cid}/lr={best['best_lr']:.6g}"]["state"] == "ok"
        assert best["status"] in ("bracketed", "edge") and best["n_diverged"] >= 1

    # Never in a fit: every loss and LR a fit uses is an ok point's (the cell's best ok objective).
    fits = fit_inputs(sweep)
    ok_objectives = {r["objective"] for r in rows.values() if r["state"] == "ok"}
    used = []
    for method, fit in fits["methods"].items():
        for x, loss in (fit.get("loss_fit") or {}).get("points") or []:
            used.append(loss)
            assert loss in ok_objectives, (method, x, loss)
    cells_best = {cid: optima[cid]["best_loss"] for cid in FAULTS}
    assert sorted(used) == sorted(cells_best.values()), (used, cells_best)

    # The other members of each faulted stack are unaffected (to float rounding).
    mine, theirs = objectives(sweep), objectives(clean)
    stack_mates = [p for p in mine if p in theirs and mine[p] is not None and theirs[p] is not None
                   and p.rsplit("/lr=", 1)[0] in FAULTS and p not in targets.values()]
    diffs = [abs(mine[p] - theirs[p]) / abs(theirs[p]) for p in stack_mates]
    assert stack_mates and max(diffs) < 1e-5, max(diffs)

    figures.record(
        "numerical_faults", order=3, title="Numerical faults",
        does=("a fault injected into each cell's clean-run optimum, inside a stack of 4 LRs: NaN loss, +Inf loss, "
              "overflowing gradient, 10x loss spike; then `sweeper optima` and `sweeper fit`"),
        faults=recorded,
        faulted_points_diverged=f"{sum(rows[t]['state'] == 'diverged' for t in targets.values())} of {len(targets)}",
        max_steps_from_fault_to_record=max(r["steps_until_recorded"] for r in recorded.values()),
        report_every=REPORT_EVERY,
        diverged_points_as_cell_optimum=0,
        diverged_points_in_fit=0,
        fit_points=len(used),
        stack_mates_compared=len(stack_mates),
        stack_mates_max_relative_difference=max(diffs),
    )
