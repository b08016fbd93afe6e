"""The cell book alone: typed events in, changes and decisions out; no Ray, no ledger, no store, no clock."""

from __future__ import annotations

import math

import pytest

from sweeper.records.fold import current_points, summarize
from sweeper.core.rows import PointRow
from sweeper.core.states import CellStatus, PointState
from sweeper.run.book import CellBook, IllegalTransition, LedgerOp, PointEvent, transition
from sweeper.search.planner import build_plan
from sweeper.spec.schema import validate_data
from trials.spec import MemberReport, PointResult, StepReport

OPT = 0.01


def loss_at(lr: float) -> float:
    return 3.0 + 0.3 * math.log(lr / OPT) ** 2


def book(**overrides) -> CellBook:
    raw = {"name": "unit", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
           "train": {"steps": 30, "batch_size": 4}, "lr": {"center": 3e-3, "points": 3, "refine": False}, **overrides}
    return CellBook(build_plan(validate_data(raw), output="/tmp/unused").cells)


def final(rows: list[PointRow], *, diverge_above: float = 1.0, stall_above: float = 1.0, stalled_loss: float = 5.0,
          corpus: str = "c1") -> StepReport:
    """The last report of a trial: above `diverge_above` diverged, above `stall_above` stalled (at
    `stalled_loss`, which a test may set below every ok loss), else ok at `loss_at`."""
    members, results = [], []
    for r in rows:
        diverged, stalled = r.lr > diverge_above, diverge_above >= r.lr > stall_above
        outcome = "diverged" if diverged else "stalled" if stalled else "ok"
        loss = None if diverged else stalled_loss if stalled else loss_at(r.lr)
        reason = "loss NaN" if diverged else "stalled: learned nothing beyond token frequencies" if stalled else None
        members.append(MemberReport(r.lr, r.point_id, 4.0, loss, outcome, diverged_step=7 if diverged else None,
                                    reason=reason, eval_loss_se=None if diverged else 0.05))
        results.append(PointResult(r.point_id, r.lr, outcome, loss, loss if outcome == "ok" else None, None, 5.5,
                                   7 if diverged else None, reason, 30, 3840, 3.0, corpus, 1, 1, 1.0,
                                   loss_se=None if diverged else 0.05, unigram_entropy=5.2, unigram_loss=5.02,
                                   loss_batches=None if diverged else [loss - 0.1, loss + 0.1],
                                   loop_losses=None if diverged else {"1": loss + 1.0, "8": loss},
                                   lambada_ppl=None if diverged else math.exp(loss + 2.0)))
    return StepReport(30, 3840, 3.0, members, True, results=results)


def play(b: CellBook, cid: str, tid: str, k: int = 8, **kw) -> list:
    """Assign up to k queued points of `cid` to Tune trial `tid` and train them to the end."""
    changes = b.assign(cid, k, tid)
    rows = [c.row for c in changes]
    changes += b.start(tid, [r.point_id for r in rows], now=1.0)
    changes += b.report(tid, [r.point_id for r in rows], final([b.points[cid][r.point_id] for r in rows], **kw), now=2.0)
    return changes


def test_a_cell_is_bracketed_and_every_change_says_what_to_record():
    b = book()
    b.refresh("pre/L2/s0")
    assert b.queue["pre/L2/s0"] == [0.0015, 0.003, 0.006]
    changes = []
    n = 0
    while (cid := b.next_cell()) is not None:
        n += 1
        changes += play(b, cid, f"t{n}")
    assert b.all_done() and b.decisions["pre/L2/s0"].status == "bracketed"
    assert abs(math.log(b.decisions["pre/L2/s0"].best.lr / OPT)) <= math.log(2) / 2 + 1e-9
    points = b.points["pre/L2/s0"]
    assert {r.state for r in points.values()} == {PointState.OK}
    assert len(points) == len({r.lr for r in points.values()})  # never the same learning rate twice
    # Per point: assigned (a ledger entry), started, finished; the rows carry the numbers of the final report.
    for pid, row in points.items():
        ops = [c.ledger for c in changes if c.row.point_id == pid and c.ledger is not LedgerOp.NONE]
        assert ops == [LedgerOp.ASSIGN, LedgerOp.START, LedgerOp.FINISH]
        assert row.objective == pytest.approx(loss_at(row.lr)) and row.init_loss == 5.5 and row.attempt == 1
        assert row.finished_at == 2.0 and row.started_at == 1.0 and row.steps == 30
        assert row.loop_loss_map() == {1: pytest.approx(row.loss + 1.0), 8: pytest.approx(row.loss)}
        assert row.lambada_ppl == pytest.approx(math.exp(row.loss + 2.0))
    # The cell's row is the one every reader derives from the same points (the shared fold).
    [row] = b.cell_rows(now=5.0)
    policy = b.cells["pre/L2/s0"].policy
    [again] = summarize({"pre/L2/s0": row.cell}, current_points(points.values()), {"pre/L2/s0": policy}, 5.0)
    assert row == again and row.status is CellStatus.BRACKETED and row.n_points == len(points)


def test_a_diverged_member_finishes_at_once_and_replayed_reports_change_nothing():
    b = book()
    b.refresh("pre/L2/s0")
    rows = [c.row for c in b.assign("pre/L2/s0", 3, "t1")]
    pids = [r.point_id for r in rows]
    members = [MemberReport(r.lr, r.point_id, 4.0, None, "running") for r in rows[:2]]
    members.append(MemberReport(rows[2].lr, pids[2], None, None, "diverged", diverged_step=7, reason="spike"))
    changes = b.report("t1", pids, StepReport(10, 100, 1.0, members, False), now=1.0)
    assert [c.ledger for c in changes if c.row.point_id == pids[2]] == [LedgerOp.START, LedgerOp.NONE, LedgerOp.FINISH]
    bad = b.points["pre/L2/s0"][pids[2]]
    assert bad.state is PointState.DIVERGED and bad.diverged_step == 7 and bad.reason == "spike"
    assert {b.points["pre/L2/s0"][p].state for p in pids[:2]} == {PointState.RUNNING}
    # Progress rows are stored where a point starts or is evaluated, curves at every report.
    mine = [c for c in changes if c.row.point_id == pids[0]]
    assert [(c.ledger, c.store, c.curve is not None) for c in mine] == [(LedgerOp.START, False, False),
                                                                         (LedgerOp.NONE, True, True)]
    assert b.report("t1", pids, StepReport(20, 200, 2.0, members, False), now=2.0)[-1].row.point_id == pids[1]
    assert b.points["pre/L2/s0"][pids[2]] == bad
    assert sum(b.ignored.values()) == 1 and "diverged point" in next(iter(b.ignored))


def run_to_the_end(b: CellBook, **kw) -> None:
    n = 0
    while (cid := b.next_cell()) is not None:
        n += 1
        play(b, cid, f"t{n}", **kw)


def test_a_stalled_point_counts_like_a_diverged_one():
    b = book()
    b.refresh("pre/L2/s0")
    # Above 0.004 every run stalls, at a loss below every ok loss: still never the optimum.
    first = play(b, "pre/L2/s0", "t0", stall_above=0.004, stalled_loss=1.0)
    curves = [c.curve.columns() for c in first if c.curve is not None]
    assert curves and all(c["eval_loss_se"] == 0.05 for c in curves)  # every evaluation keeps its SE
    run_to_the_end(b, stall_above=0.004, stalled_loss=1.0)
    d = b.decisions["pre/L2/s0"]
    points = b.points["pre/L2/s0"]
    stalled = [r for r in points.values() if r.state is PointState.STALLED]
    assert d.status == "bracketed" and d.best.lr <= 0.004 and stalled
    assert d.neighbours[1] is not None and d.neighbours[1].state == "stalled"  # a stalled run brackets from above
    for r in stalled:  # its loss, SE, baseline and batch losses are kept; its reason says why; no objective
        assert r.loss == 1.0 and r.loss_se == 0.05 and r.objective is None and r.reason.startswith("stalled:")
        assert r.unigram_loss == 5.02 and r.batch_losses() == [0.9, 1.1]
    [row] = b.cell_rows(now=3.0)
    assert row.n_stalled == len(stalled) and row.n_diverged == 0 and row.best_lr == d.best.lr


def test_a_cell_whose_every_point_stalls_or_diverges_says_so():
    stalls = book(lr={"center": 3e-3, "points": 3, "refine": False, "max_points": 5})
    stalls.refresh("pre/L2/s0")
    run_to_the_end(stalls, stall_above=1e-9)
    d = stalls.decisions["pre/L2/s0"]
    assert d.status is CellStatus.STALLED and d.status.learned_nothing and d.best is None
    assert d.reason.startswith("every point stalled, down to the trial cap") and len(stalls.points["pre/L2/s0"]) == 5
    mixed = book(lr={"center": 3e-3, "points": 3, "refine": False, "max_points": 4})
    mixed.refresh("pre/L2/s0")
    run_to_the_end(mixed, diverge_above=0.005, stall_above=1e-9)
    d = mixed.decisions["pre/L2/s0"]
    assert d.status is CellStatus.STALLED and d.reason.startswith("every point diverged or stalled")
    diverges = book(lr={"center": 3e-3, "points": 3, "refine": False, "max_points": 4})
    diverges.refresh("pre/L2/s0")
    run_to_the_end(diverges, diverge_above=1e-9)
    assert diverges.decisions["pre/L2/s0"].status is CellStatus.DIVERGED


def test_a_trial_gone_fails_requeues_or_keeps_its_points():
    b = book()
    b.refresh("pre/L2/s0")
    pids = [c.row.point_id for c in b.assign("pre/L2/s0", 3, "t1")]
    b.start("t1", pids, now=1.0)
    assert b.trial_gone("t1", pids, error=None, unrestorable=False, stopping=True, now=2.0) == []  # resumed next launch
    changes = b.trial_gone("t1", pids, error="ValueError: no checkpoint", unrestorable=True, stopping=False, now=2.0)
    assert {c.row.state for c in changes} == {PointState.QUEUED} and all(c.row.tune_trial_id is None for c in changes)
    assert sorted(b.queue["pre/L2/s0"]) == sorted(c.row.lr for c in changes)
    pids = [c.row.point_id for c in b.assign("pre/L2/s0", 3, "t2")]
    assert {b.points["pre/L2/s0"][p].attempt for p in pids} == {2}
    changes = b.trial_gone("t2", pids, error="RuntimeError: boom", unrestorable=False, stopping=False, now=3.0)
    assert {(c.row.state, c.row.reason, c.ledger) for c in changes} == {(PointState.FAILED, "RuntimeError: boom",
                                                                          LedgerOp.FINISH)}
    assert b.decisions["pre/L2/s0"].status == "failed" and b.next_cell() is None and b.all_done()


def test_a_point_needs_a_finite_objective_and_the_sweeps_corpus():
    b = book()
    b.refresh("pre/L2/s0")
    b.expected_corpus = "c1"
    rows = [c.row for c in b.assign("pre/L2/s0", 3, "t1")]
    b.report("t1", [r.point_id for r in rows], final(rows, corpus="c2"), now=1.0)
    assert {r.state for r in b.points["pre/L2/s0"].values()} == {PointState.FAILED}
    assert all("corpus changed" in r.reason for r in b.points["pre/L2/s0"].values())
    assert any("corpus changed" in note for note in b.notes)


def test_load_resumes_reruns_and_retries():
    first = book()
    first.refresh("pre/L2/s0")
    rows = [c.row for c in first.assign("pre/L2/s0", 2, "t1")]  # the third LR of the grid is only queued
    failed = first.trial_gone("t1", [rows[0].point_id], error="boom", unrestorable=False, stopping=False, now=1.0)
    ledger_rows = [failed[0].row, rows[1]]
    grid = first.plans["pre/L2/s0"]

    again = book()
    counts, changes = again.load(ledger_rows, recorded_plans={"pre/L2/s0": grid})
    assert counts.as_dict() == {"finished": 1, "resumed": 0, "rerun": 1, "retried": 0, "infra_retried": 0}
    assert sorted(again.queue["pre/L2/s0"]) == sorted(grid[1:])  # the re-run and the never-assigned rest
    claimed = book()
    counts, _ = claimed.load(ledger_rows, holders={rows[1].point_id: "t1"}, store_states={rows[1].point_id: "queued"})
    assert counts.resumed == 1 and claimed.held("t1", [rows[1].point_id]) == [rows[1]]
    retried = book()
    counts, changes = retried.load(ledger_rows, retry_failed=True)
    assert counts.retried == 1 and changes[0].row.state is PointState.QUEUED and changes[0].row.reason is None


def test_one_table_of_transitions():
    assert transition(PointState.QUEUED, PointEvent.START) is PointState.RUNNING
    assert transition(PointState.FAILED, PointEvent.RETRY) is PointState.QUEUED
    assert transition(PointState.RUNNING, PointEvent.STALL) is PointState.STALLED
    for state in (PointState.OK, PointState.DIVERGED, PointState.STALLED, PointState.FAILED):
        for event in (PointEvent.START, PointEvent.COMPLETE, PointEvent.STALL, PointEvent.REQUEUE, PointEvent.ASSIGN):
            with pytest.raises(IllegalTransition, match=f"a {state} point cannot {event.value}"):
                transition(state, event)


def test_a_prior_waits_for_smaller_sizes():
    b = book(model={"width": 32, "heads": 2, "depths": [2, 4, 8], "seq_len": 32},
             lr={"center": 3e-3, "points": 5, "refine": True, "prior": "extrapolate"})
    for cid in b.cells:
        b.refresh(cid)
    assert set(b.waiting) == {"pre/L8/s0"} and b.status("pre/L8/s0") is CellStatus.PENDING
    while (cid := b.next_cell()) is not None:
        play(b, cid, f"t-{cid}-{len(b.points[cid])}")
    assert not b.waiting and b.all_done()
    assert any("prior LR" in note for note in b.notes)


def test_a_seeds_prior_comes_from_its_own_smaller_sizes_so_timing_never_changes_it():
    """A size of seed 1 opens on seed 1's smaller sizes alone: whether seed 0's cells finished
    first, or never ran, its first grid and every later decision are the same (a prior pooled over
    whichever seeds happened to be done would make the search depend on the order trials finish)."""
    def run(seed0_first: bool) -> tuple[list[str], dict[str, list[float]]]:
        b = book(model={"width": 32, "heads": 2, "depths": [2, 4, 8, 16], "seq_len": 32}, seeds=[0, 1],
                 lr={"center": 3e-3, "points": 3, "refine": True, "prior": "extrapolate"})
        for cid in b.cells:
            b.refresh(cid)
        n = 0
        for seed in ([0, 1] if seed0_first else [1]):
            while ready := [cid for cid, q in b.queue.items() if q and cid.endswith(f"/s{seed}")]:
                n += 1
                play(b, ready[0], f"t{n}")
        seed1 = [note for note in b.notes if "/s1:" in note]
        return seed1, {cid: sorted(r.lr for r in pts.values()) for cid, pts in b.points.items() if cid.endswith("/s1")}

    notes_alone, points_alone = run(seed0_first=False)
    notes_after, points_after = run(seed0_first=True)
    assert any(note.startswith("pre/L16/s1: prior LR") and "from 3 smaller sizes" in note for note in notes_alone)
    assert notes_after == notes_alone and points_after == points_alone


def test_prior_from_three_starts_the_first_three_sizes_at_once_and_the_rest_on_their_law():
    """`lr.prior_from: 3`: a size with fewer than three smaller sizes does not wait (the YAML's
    grid), so the third size starts with the first two; the fourth waits for all three and gets a grid
    from their law. Every first grid is still a function of finished results alone."""
    def first_grids(prior_from: int) -> tuple[set[str], dict[str, list[float]]]:
        b = book(model={"width": 32, "heads": 2, "depths": [2, 4, 8, 16], "seq_len": 32},
                 lr={"center": 3e-3, "points": 3, "refine": True, "prior": "extrapolate", "prior_from": prior_from})
        for cid in b.cells:
            b.refresh(cid)
        waiting = set(b.waiting)
        grids: dict[str, list[float]] = {}
        while (cid := b.next_cell()) is not None:
            grids.setdefault(cid, sorted(b.queue[cid]))
            play(b, cid, f"t-{cid}-{len(b.points[cid])}")
        assert not b.waiting and b.all_done()
        return waiting, grids

    waiting, grids = first_grids(3)
    assert waiting == {"pre/L16/s0"}
    assert grids["pre/L8/s0"] == grids["pre/L2/s0"] == [0.0015, 0.003, 0.006]  # the YAML's grid, at once
    waiting2, grids2 = first_grids(2)
    assert waiting2 == {"pre/L8/s0", "pre/L16/s0"}  # before: the third size waited for the first two
    assert grids2["pre/L8/s0"] != grids2["pre/L2/s0"]  # ... and started re-centred on their two-size law


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_with_prior_from_three_the_order_the_first_sizes_finish_in_changes_no_grid(order):
    """The first three sizes run side by side under `prior_from: 3`, so they finish in any order; the
    deeper sizes still open on exactly their three optima (the fourth cannot start before them), so every cell
    explores the same learning rates whichever finished first."""
    def explored(order: tuple[int, ...]) -> dict[str, list[float]]:
        b = book(model={"width": 32, "heads": 2, "depths": [2, 4, 8, 16, 32], "seq_len": 32},
                 lr={"center": 3e-3, "points": 3, "refine": True, "prior": "extrapolate", "prior_from": 3})
        for cid in b.cells:
            b.refresh(cid)
        first = ["pre/L2/s0", "pre/L4/s0", "pre/L8/s0"]
        n = 0
        while any(b.queue[c] for c in first):  # the first three sizes, round by round, in `order`
            for i in order:
                if b.queue[first[i]]:
                    n += 1
                    play(b, first[i], f"t{n}")
        while (cid := b.next_cell()) is not None:
            n += 1
            play(b, cid, f"t{n}")
        assert b.all_done()
        return {cid: sorted(r.lr for r in pts.values()) for cid, pts in b.points.items()}

    assert explored(order) == explored((0, 1, 2))
