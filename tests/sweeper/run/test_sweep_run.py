"""A launch's running sweep (cell book, Tune-trial bookkeeping, recorder), driven directly (no Ray)
with a real SQLite ledger and a real store; and the store's repair from the ledger."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest

from sweeper.cli import main
from sweeper.records.durable import write_json_atomic
from sweeper.records.ledger import OptunaLedger, storage_url
from sweeper.records.store import MANIFEST, load_cells, load_curves, load_points
from sweeper.run.sweep_dir import manifest_for
from sweeper.run.sweep_run import SWEEP_DONE, SweepRun
from tests.sweeper.run.driving import end, make_sweep, member, next_config, report, result

OPT = 0.01  # true optimum of the synthetic loss


def loss_at(lr: float) -> float:
    return 3.0 + 0.3 * math.log(lr / OPT) ** 2


def make_state(tmp_path: Path, **overrides) -> SweepRun:
    raw = {
        "name": "unit",
        "methods": ["pre", "post"],
        "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
        "train": {"steps": 30, "batch_size": 4},
        "lr": {"center": 3e-3, "points": 3, "refine": False},
        "stack": 3,
    }
    raw.update(overrides)
    return make_sweep(tmp_path, raw, concurrency=2)


def run_trial(state: SweepRun, tid: str, config: dict, *, diverge_above: float = 1.0, corpus: str = "c1",
              loss=None) -> None:
    """Play a whole trial: start, one progress report, a final report."""
    spec = config["spec"]
    depth = spec["model"]["depth"]
    loss_at = (lambda lr: loss(depth, lr)) if loss else globals()["loss_at"]
    pids, lrs = spec["point_ids"], spec["lrs"]
    state.on_trial_start(tid, pids)
    report(state, tid, pids, {"step": 10, "tokens": 1280, "train_seconds": 1.0, "done": False,
                              "members": [member(p, lr) for p, lr in zip(pids, lrs)]})
    final = []
    results = []
    for p, lr in zip(pids, lrs):
        if lr > diverge_above:
            final.append(member(p, lr, "diverged", diverged_step=12, reason="loss NaN"))
            results.append(result(p, lr, "diverged", corpus=corpus, init_loss=5.5, diverged_step=12, steps=12))
        else:
            final.append(member(p, lr, "ok", eval_loss=loss_at(lr)))
            results.append(result(p, lr, "ok", loss=loss_at(lr), objective=loss_at(lr), corpus=corpus, init_loss=5.5,
                                  steps=30, tokens=3840))
    last = {"step": 30, "tokens": 3840, "train_seconds": 3.0, "done": True, "members": final, "results": results}
    report(state, tid, pids, last)
    end(state, tid, pids, last, None)


def drive(state: SweepRun, **kw) -> list[dict]:
    configs = []
    n = 0
    while True:
        n += 1
        config = next_config(state, f"t{n}")
        if config is SWEEP_DONE:
            return configs
        assert config is not None, "nothing queued although the sweep is not finished"
        configs.append(config)
        run_trial(state, f"t{n}", config, **kw)


def test_cells_are_bracketed_and_recorded_in_ledger_and_store(tmp_path):
    state = make_state(tmp_path)
    state.load([])
    configs = drive(state)
    assert all(state.book.decisions[c].status == "bracketed" for c in state.cells)
    # The initial grids went as stacks of 3; extensions follow; never the same LR twice per cell.
    assert len(configs[0]["spec"]["lrs"]) == 3
    for cid in state.cells:
        lrs = [lr for c in configs if c["cell_id"] == cid for lr in c["spec"]["lrs"]]
        assert len(lrs) == len(set(lrs))
        best = state.book.decisions[cid].best
        assert abs(math.log(best.lr / OPT)) <= math.log(2) / 2 + 1e-9
        assert state.book.decisions[cid].interp_lr == pytest.approx(OPT, rel=1e-6)
    state.flush(force=True)
    sweep_dir = state.plan.sweep_dir
    points = load_points(sweep_dir)
    assert set(points["state"]) == {"ok"}
    assert points.height == sum(len(c["spec"]["lrs"]) for c in configs)
    cells = load_cells(sweep_dir)
    assert set(cells["status"]) == {"bracketed"}
    assert load_curves(sweep_dir).height == 2 * points.height
    # The ledger: one study per cell, one COMPLETE trial per point, values = objectives.
    storage = storage_url("sqlite", sweep_dir)
    for cid in state.cells:
        study = optuna.load_study(study_name=cid, storage=storage)
        assert len(study.trials) == len(state.book.points[cid])
        for t in study.trials:
            assert t.state == optuna.trial.TrialState.COMPLETE
            assert t.value == pytest.approx(loss_at(t.params["lr"]))
            assert t.user_attrs["metrics"]["corpus"] == "c1"
        assert study.best_trial.params["lr"] == state.book.decisions[cid].best.lr
        assert study.user_attrs["method"] == cid.split("/")[0]


def test_prior_extrapolate_centres_deeper_cells_on_the_lr_law(tmp_path):
    def loss(depth, lr):  # optimum 0.02 / depth
        return 3.0 + 0.3 * math.log(lr * depth / 0.02) ** 2

    state = make_state(tmp_path, methods=["pre"], model={"width": 32, "heads": 2, "depths": [2, 4, 8, 16],
                                                          "seq_len": 32},
                       lr={"center": 3e-3, "points": 5, "refine": True, "prior": "extrapolate"}, stack=8)
    state.load([])
    assert set(state.book.waiting) == {"pre/L8/s0", "pre/L16/s0"}  # L2 and L4 have no law to wait for
    configs = drive(state, loss=loss)
    first = {}
    for c in configs:
        first.setdefault(c["cell_id"], c["spec"]["lrs"])
    assert list(first)[2:] == ["pre/L8/s0", "pre/L16/s0"]
    assert first["pre/L4/s0"] == first["pre/L2/s0"]  # the YAML's grid
    # Two smaller sizes: the YAML's 5 points re-centred on the law's prediction 0.02 / 8 (no interval yet).
    assert len(first["pre/L8/s0"]) == 5 and first["pre/L8/s0"][2] == pytest.approx(0.0025, rel=0.05)
    # Three: an interval, and a narrower grid around 0.02 / 16.
    assert 3 <= len(first["pre/L16/s0"]) < 5
    assert min(first["pre/L16/s0"], key=lambda lr: abs(math.log(lr / 0.00125))) == pytest.approx(0.00125, rel=0.1)
    assert all(state.book.decisions[c].status == "bracketed" for c in state.cells)
    assert any("prior LR" in m for m in state.messages)


def test_divergence_mid_trial_finishes_that_point_at_once(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    config = next_config(state, "t1")
    pids, lrs = config["spec"]["point_ids"], config["spec"]["lrs"]
    state.on_trial_start("t1", pids)
    members = [member(pids[0], lrs[0]), member(pids[1], lrs[1]),
               member(pids[2], lrs[2], "diverged", diverged_step=7, reason="loss above the initial loss")]
    report(state, "t1", pids, {"step": 10, "tokens": 1, "train_seconds": 1.0, "done": False, "members": members})
    rec = state.book.points["pre/L2/s0"][pids[2]]
    assert rec.state == "diverged" and rec.diverged_step == 7 and rec.reason == "loss above the initial loss"
    study = optuna.load_study(study_name="pre/L2/s0", storage=state.ledger.url)
    assert [t.state.name for t in study.trials].count("PRUNED") == 1
    # The other members keep running; a later report about the diverged one is ignored.
    assert state.book.points["pre/L2/s0"][pids[0]].state == "running"
    report(state, "t1", pids, {"step": 20, "tokens": 2, "train_seconds": 2.0, "done": False,
                                 "members": [member(p, lr) for p, lr in zip(pids, lrs)]})
    assert rec.state == "diverged"


def test_a_failing_trial_fails_its_points_and_the_cell_moves_on(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    state.on_trial_start("t1", pids)
    # the training code's own crash (an infrastructure fault is retried instead: tests/sweeper/run)
    end(state, "t1", pids, None, "trials.faults.InjectedFault: injected fault at step 3")
    recs = [state.book.points["pre/L2/s0"][p] for p in pids]
    assert {r.state for r in recs} == {"failed"}
    assert recs[0].reason == "trials.faults.InjectedFault: injected fault at step 3"
    assert state.book.decisions["pre/L2/s0"].status == "failed"
    assert next_config(state, "t2") is SWEEP_DONE  # failed points are never retried within a launch


def test_stopping_leaves_points_active_and_a_relaunch_reruns_them(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    state.on_trial_start("t1", pids)
    state.stopping = True
    end(state, "t1", pids, {"done": False}, None)
    assert {state.book.points["pre/L2/s0"][p].state for p in pids} == {"running"}
    assert next_config(state, "t2") is None
    state.flush(force=True)

    # Relaunch with nothing to restore: the stale points are queued again, same ledger trials, attempt 2.
    again = make_state(tmp_path, methods=["pre"])
    counts = again.load(again.ledger.load())
    assert counts["rerun"] == 3
    config = next_config(again, "t9")
    assert sorted(config["spec"]["point_ids"]) == sorted(pids)
    assert {again.book.points["pre/L2/s0"][p].attempt for p in pids} == {2}
    study = optuna.load_study(study_name="pre/L2/s0", storage=again.ledger.url)
    assert len(study.trials) == 3


def test_relaunch_never_retrains_finished_points_and_resumes_claimed_ones(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    first = next_config(state, "t1")
    run_trial(state, "t1", first)
    second = next_config(state, "t2")  # an extension, still running when the driver dies
    state.on_trial_start("t2", second["spec"]["point_ids"])
    state.flush(force=True)
    finished = set(first["spec"]["point_ids"])

    again = make_state(tmp_path, methods=["pre"])
    counts = again.load(again.ledger.load(), {"t2": second["spec"]["point_ids"]})
    assert counts == {"finished": 3, "resumed": len(second["spec"]["point_ids"]), "rerun": 0, "retried": 0, "infra_retried": 0}
    assert next_config(again, "t3") is None  # nothing to start: the restored trial holds the queued work
    assert not again.should_stop("t2", second["spec"]["point_ids"])
    assert again.should_stop("t1", first["spec"]["point_ids"])  # a restored trial of finished points
    # A replayed report of a finished point changes nothing.
    pid = first["spec"]["point_ids"][0]
    before = again.book.points["pre/L2/s0"][pid].objective
    report(again, "t1", [pid], {"step": 30, "done": True, "members": [member(pid, 1e-3, "ok", eval_loss=9.9)]})
    assert again.book.points["pre/L2/s0"][pid].objective == before
    run_trial(again, "t2", second)
    configs = drive(again)
    trained = {p for c in configs for p in c["spec"]["point_ids"]}
    assert not trained & finished
    assert again.book.decisions["pre/L2/s0"].status == "bracketed"


def test_a_changed_corpus_fails_the_point(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    state.expected_corpus = "c1"
    config = next_config(state, "t1")
    run_trial(state, "t1", config, corpus="c2")
    recs = list(state.book.points["pre/L2/s0"].values())
    assert {r.state for r in recs} == {"failed"}
    assert "corpus changed" in recs[0].reason


def test_concurrency_is_enforced_by_the_state(tmp_path):
    state = make_state(tmp_path, stack=1)  # concurrency 2 (make_state)
    state.load([])
    assert next_config(state, "t1") and next_config(state, "t2")
    assert next_config(state, "t3") is None  # two trials live, points still queued
    pids = state.trials.points["t1"]
    state.on_trial_start("t1", pids)
    end(state, "t1", pids, None, "boom")
    assert next_config(state, "t3") is not None


def test_stack_size_and_training_time_accounting(tmp_path):
    state = make_state(tmp_path, methods=["pre"], stack=2)
    state.load([])
    config = next_config(state, "t1")
    assert len(config["spec"]["lrs"]) == 2
    assert config["resources"] == {"CPU": 1.0}
    run_trial(state, "t1", config)
    assert state.stats.train_seconds == pytest.approx(3.0)
    # A restored trial's time from before this launch is not counted.
    state.trials.restored.add("old")
    state.trials.reporting("old", 100.0, now=0.0)
    state.trials.reporting("old", 104.0, now=0.0)
    assert state.stats.train_seconds == pytest.approx(7.0)


# -- a damaged store is reported, never read short, and rebuilt from the ledger --------------------------


def finished_sweep(tmp_path):
    state = make_state(tmp_path)
    state.load([])
    drive(state)
    state.flush(force=True)
    sweep = state.plan.sweep_dir
    (sweep / "sweep.yaml").write_text(json.dumps({
        "name": "unit", "methods": ["pre", "post"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
        "train": {"steps": 30, "batch_size": 4}, "lr": {"center": 3e-3, "points": 3, "refine": False}}))
    write_json_atomic(sweep / MANIFEST, manifest_for(state.plan, None, state.ledger.url).to_json())
    return sweep


def test_status_repair_rebuilds_the_store_from_the_ledger(tmp_path, capsys):
    sweep = finished_sweep(tmp_path)
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    before = json.loads(capsys.readouterr().out)
    chunk = sorted((sweep / "store" / "points").glob("*.parquet"))[0]
    chunk.write_bytes(b"PAR1 this is not parquet")
    for command in (["status", str(sweep)], ["optima", str(sweep)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "damaged store chunk" in err and "--repair" in err and "Traceback" not in err
    assert main(["status", str(sweep), "--repair"]) == 0
    assert "rebuilt" in capsys.readouterr().out
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    after = json.loads(capsys.readouterr().out)
    keys = ("cell_id", "status", "best_lr", "best_objective", "interp_lr", "n_points", "n_diverged")
    assert [{k: r[k] for k in keys} for r in after["cells"]] == [{k: r[k] for k in keys} for r in before["cells"]]
    assert list(sweep.glob("store.damaged-*")), "the damaged store is kept aside, not deleted"
    # Every ledger point has exactly one row in the rebuilt store.
    ledger_points = len(OptunaLedger(f"sqlite:///{sweep / 'ledger.db'}").load())
    assert load_points(sweep).height == ledger_points


def test_status_repair_of_a_loop_count_sweep_finds_each_cells_lr_policy(tmp_path, capsys):
    """Cells of a `model.loops` sweep (size labels T<loops>) get their LR policy from the YAML copy: without
    it (an open policy refines bracketed cells) the rebuilt cells would read `running`, not `bracketed`."""
    raw = {"name": "loops", "methods": ["pre"], "data": {"source": "synthetic"},
           "model": {"family": "looped", "width": 32, "heads": 2, "loops": [1, 4], "seq_len": 16,
                     "extra": {"prelude": 1, "core": 2, "coda": 1, "backprop_loops": 1}},
           "train": {"steps": 30, "batch_size": 4}, "lr": {"center": 3e-3, "points": 3, "refine": False}, "stack": 3}
    state = make_sweep(tmp_path, raw)
    assert sorted(state.cells) == ["pre/T1/s0", "pre/T4/s0"]
    state.load([])
    drive(state)
    state.flush(force=True)
    sweep = state.plan.sweep_dir
    (sweep / "sweep.yaml").write_text(json.dumps(raw))
    write_json_atomic(sweep / MANIFEST, manifest_for(state.plan, None, state.ledger.url).to_json())
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    before = json.loads(capsys.readouterr().out)["cells"]
    assert {r["status"] for r in before} == {"bracketed"}
    assert main(["status", str(sweep), "--repair"]) == 0
    capsys.readouterr()
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cells"] == before
    cells = load_cells(sweep)
    assert set(cells["status"]) == {"bracketed"}
    assert dict(zip(cells["size"], cells["loops"])) == {"T1": 1, "T4": 4} and set(cells["depth"]) == {4}
    assert set(load_points(sweep)["loops"]) == {1, 4}


def test_failed_points_are_retried_only_when_asked(tmp_path):
    state = make_state(tmp_path, methods=["pre"])
    state.load([])
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    state.on_trial_start("t1", pids)
    end(state, "t1", pids, None, "OSError: disk full")
    state.flush(force=True)

    kept = make_state(tmp_path, methods=["pre"])
    assert kept.load(kept.ledger.load())["finished"] == 3
    assert next_config(kept, "t2") is SWEEP_DONE

    retried = make_state(tmp_path, methods=["pre"])
    counts = retried.load(retried.ledger.load(), retry_failed=True)
    assert counts["retried"] == 3
    config = next_config(retried, "t3")
    assert sorted(config["spec"]["point_ids"]) == sorted(pids)
    assert {retried.book.points["pre/L2/s0"][p].attempt for p in pids} == {2}


def test_the_driver_explores_what_decide_alone_explores_with_the_new_lr_options(tmp_path):
    """The driver (cell book, stacks, ledger, store) and `decide` run on its own agree LR for LR, with
    the options of the shipped sweeps (refine: vertex, vertex_first, failed_neighbour: half_step)."""
    from sweeper.core.grid import GridPoint
    from sweeper.search.bracketing import decide

    def loss(depth, lr):  # asymmetric and sharper than a parabola; optimum 0.03 / depth
        u = math.log(lr * depth / 0.03)
        return 3.0 + (0.05 if u < 0 else 0.12) * abs(u) ** 1.5

    lr_section = {"center": 3e-3, "points": 3, "refine": "vertex", "vertex_first": True,
                  "failed_neighbour": "half_step", "max_points": 10}
    state = make_state(tmp_path, methods=["pre"], model={"width": 32, "heads": 2, "depths": [2, 3, 5],
                                                          "seq_len": 32}, lr=lr_section, stack=8)
    state.load([])
    configs = drive(state, loss=loss, diverge_above=0.02)
    for cid, cell in state.cells.items():
        driven = sorted(lr for c in configs if c["cell_id"] == cid for lr in c["spec"]["lrs"])
        points: list[GridPoint] = []
        while not (d := decide(points, cell.policy)).done:
            points += [GridPoint(lr, "diverged") if lr > 0.02 else GridPoint(lr, "ok", loss(cell.depth, lr))
                       for lr in d.next_lrs]
        assert driven == sorted(p.lr for p in points)
        assert state.book.decisions[cid].status == d.status == "bracketed"
        assert 3 <= len(driven) < cell.policy.max_points


def test_spread_placement_asks_ray_for_larger_shares_while_few_trials_want_the_pool(tmp_path):
    """Two cells of 0.125-GPU trials on an 8-GPU pool: each trial asks for a lead share (Ray would stack them
    on one GPU); `placement: pack` asks for the declared share; the LRs trained are the same either way."""
    configs = {}
    for placement in ("spread", "pack"):
        state = make_state(tmp_path / placement, resources={"cpu": 1, "gpu": 0.125, "placement": placement})
        state.pool_gpus = 8.0
        state.load([])
        first, second = next_config(state, "t1"), next_config(state, "t2")
        configs[placement] = (first, second)
    spread, pack = configs["spread"], configs["pack"]
    assert [c["resources"]["GPU"] for c in spread] == [0.875, 0.875]
    assert [c["resources"]["GPU"] for c in pack] == [0.125, 0.125]
    assert [c["spec"]["lrs"] for c in spread] == [c["spec"]["lrs"] for c in pack]
    assert spread[0]["resources"]["CPU"] == 1.0


def test_the_driver_logs_each_gpu_trial_it_proposes_and_each_end_it_processed(tmp_path):
    """A simulation's busy log hears of every proposal (with the share asked of Ray) and every processed end
    (`sweeper.sim.clock` reads them to tell the pool's waits for the orchestration)."""
    from sweeper.sim.devices import BUSY_LOG, DriverLog, read_log

    state = make_state(tmp_path, resources={"cpu": 1, "gpu": 0.125, "placement": "spread"})
    state.pool_gpus = 8.0
    root = tmp_path / "simulation"
    root.mkdir()
    state.watcher = DriverLog(root, launch=0, compression=4000.0, gpus=8.0)
    state.load([])
    first, second = next_config(state, "t1"), next_config(state, "t2")
    run_trial(state, "t1", first)
    lines = [(e["event"], e["trial"], e.get("share"), e.get("gpus")) for e in read_log(root / BUSY_LOG)]
    assert lines == [("proposed", "t1", first["resources"]["GPU"], 8), ("proposed", "t2", second["resources"]["GPU"], 8),
                     ("done", "t1", None, None)]
    assert first["resources"]["GPU"] == 0.875
