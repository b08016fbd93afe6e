"""What `sweeper optima` and `sweeper status` read from a store: best loss ± SE, brackets within
noise, stalled points and cells, the data's unigram entropy from the manifest. A real store
(StoreWriter), the real fold and bracketing; no Ray."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from sweeper.cli import main
from sweeper.records.fold import current_points, summarize
from sweeper.records.noise import closest_neighbour, difference
from sweeper.records.results import optima
from sweeper.core.rows import CellFacts, PointRow, encode_batches
from sweeper.records.store import MANIFEST, STORE_VERSION, StoreWriter
from sweeper.core.grid import LRPolicy

PRE = CellFacts(cell_id="pre/L2/s0", method="pre", size="L2", depth=2, seed=0)
POST = CellFacts(cell_id="post/L32/s0", method="post", size="L32", depth=32, seed=0)
LAYERROPE = CellFacts(cell_id="layerrope/L2/s0", method="layerrope", size="L2", depth=2, seed=0)
POLICY = LRPolicy(lo=1e-3, hi=0.1, max_points=3, refine=False)
UNIGRAM = {"nats": 3.2509, "counted": 30460934, "exact": True, "kind": "tokens", "fingerprint": "c1"}


def finished(cell: CellFacts, lr: float, batches: list[float], state: str = "ok") -> PointRow:
    loss = statistics.fmean(batches)
    se = statistics.stdev(batches) / math.sqrt(len(batches))
    return PointRow(cell, lr, state, objective=loss if state == "ok" else None, loss=loss, loss_se=se,
                    loss_batches=encode_batches(batches), unigram_loss=3.245, steps=300, tokens=1000,
                    reason="stalled: final eval loss within 0.05 nats of the unigram loss" if state == "stalled" else None)


def sweep_dir(tmp_path):
    # pre: the best (0.01) and its upper neighbour differ by 0.004 with batch differences of 0.004 ± 0.008:
    # within noise; its lower neighbour is 0.2 worse. Every batch shares a large common offset (the
    # batches' own difficulty), which a paired SE removes and an unpaired one does not.
    offsets = [0.3, -0.2, 0.1, -0.4, 0.2, 0.0, -0.1, 0.1]
    wiggle = [0.012, -0.004, 0.01, -0.006, 0.008, 0.0, 0.002, 0.01]
    rows = [finished(PRE, 0.005, [2.3 + o for o in offsets]),
            finished(PRE, 0.01, [2.1 + o for o in offsets]),
            finished(PRE, 0.02, [2.1 + o + w for o, w in zip(offsets, wiggle)])]
    # layerrope: neighbours 0.1 worse on every batch: clearly above noise.
    rows += [finished(LAYERROPE, lr, [2.0 + d + o + 0.01 * (i % 2) for i, o in enumerate(offsets)])
             for lr, d in ((0.005, 0.1), (0.01, 0.0), (0.02, 0.1))]
    # post at depth 32: every point stalled, at the loss of predicting by byte frequencies
    rows += [finished(POST, lr, [3.246 + o for o in offsets], "stalled") for lr in (0.005, 0.01, 0.02)]
    root = tmp_path / "sweep"
    root.mkdir()
    (root / MANIFEST).write_text(json.dumps({"store_version": STORE_VERSION, "name": "unit", "x": "depth",
                                             "unigram_entropy": UNIGRAM, "stall_margin": 0.05}))
    writer = StoreWriter(root)
    writer.append_points(rows)
    facts = {c.cell_id: c for c in (PRE, POST, LAYERROPE)}
    writer.write_cells(summarize(facts, current_points(rows), {cid: POLICY for cid in facts}, now=1.0))
    return root, rows


def test_the_se_of_a_difference_is_paired_over_the_same_batches(tmp_path):
    _, rows = sweep_dir(tmp_path)
    best, upper = rows[1], rows[2]
    d = difference(best, upper)
    per_batch = [b - a for a, b in zip(best.batch_losses(), upper.batch_losses())]
    assert d.paired and d.difference == pytest.approx(statistics.fmean(per_batch), abs=1e-9)
    assert d.se == pytest.approx(statistics.stdev(per_batch) / math.sqrt(8), rel=1e-6)
    assert d.se < best.loss_se / 10  # the batches' common difficulty cancels
    assert d.within_noise  # 0.004 < 2 × 0.0023
    unpaired = difference(best.evolve(loss_batches=None), upper)
    assert not unpaired.paired and unpaired.se == pytest.approx(math.hypot(best.loss_se, upper.loss_se))
    assert closest_neighbour(rows[:3], best) == d  # of the two ok neighbours, the nearer in SEs


def test_optima_report_best_loss_se_noise_and_stalled_cells(tmp_path):
    root, rows = sweep_dir(tmp_path)
    by_cell = {r["cell_id"]: r for r in optima(root)}
    pre = by_cell["pre/L2/s0"]
    assert pre["status"] == "bracketed" and pre["best_lr"] == 0.01
    assert pre["best_loss"] == pytest.approx(2.1) and pre["best_loss_se"] == pytest.approx(rows[1].loss_se)
    assert pre["within_noise"] is True and pre["neighbour_lr"] == 0.02 and pre["neighbour_gap_paired"] is True
    rope = by_cell["layerrope/L2/s0"]
    assert rope["status"] == "bracketed" and rope["within_noise"] is False
    assert rope["neighbour_gap"] == pytest.approx(0.1)
    post = by_cell["post/L32/s0"]
    assert post["status"] == "stalled" and post["n_stalled"] == 3 and post["best_lr"] is None
    assert post["within_noise"] is None
    # a stalled cell keeps its loss (the lowest of its stalled points), never as an optimum
    assert post["stalled_loss"] == pytest.approx(min(p.loss for p in rows if p.cell.cell_id == "post/L32/s0"))
    assert post["best_loss"] is None and post["noise"] is None


def test_optima_and_status_print_them(tmp_path, capsys):
    root, _ = sweep_dir(tmp_path)
    assert main(["optima", str(root)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "all stalled" in text and "(1.6 eval SE) within noise" in text and "the cell found no usable learning rate" in text
    assert "2.1000 ± 0.0" in text and "+0.1000" in text
    assert "(stalled)" in text and "best loss ± eval SE" in text
    assert "stalled: trained to the end without beating the loss of predicting by token frequencies" in text
    assert main(["status", str(root)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "data: unigram entropy 3.2509 nats (exact, 30,460,934 training tokens)" in text
    assert "1 stalled" in text and "stall" in text
    assert main(["status", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unigram_entropy"] == UNIGRAM and {c["cell_id"]: c["n_stalled"] for c in doc["cells"]}["post/L32/s0"] == 3


def test_a_launch_writes_the_datas_unigram_entropy_and_stall_margin_into_the_manifest(tmp_path, capsys):
    from sweeper.run.sweep_dir import preflight, prepare
    from sweeper.search.planner import build_plan
    from sweeper.spec.schema import validate_data
    from trials.data import open_source

    data = {"source": "synthetic", "synthetic_vocab": 32, "synthetic_tokens": 4096}
    raw = {"name": "unit", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
           "data": data, "train": {"steps": 30, "batch_size": 4}, "divergence": {"stall_margin": 0.07}}
    plan = build_plan(validate_data(raw), output=str(tmp_path / "sweep"))
    corpus, entropy = preflight(plan)
    expected = open_source(plan.cells[0].data).unigram_entropy()
    assert corpus == expected.fingerprint and entropy == expected.to_dict() and entropy["exact"] is True
    plan.sweep_dir.mkdir()
    manifest, _ = prepare(plan, None, corpus, entropy)
    stored = json.loads((plan.sweep_dir / MANIFEST).read_text())
    assert stored["unigram_entropy"] == manifest.to_json()["unigram_entropy"] == entropy and stored["stall_margin"] == 0.07
    assert main(["status", str(plan.sweep_dir)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"data: unigram entropy {expected.nats:.4f} nats (exact, {expected.counted:,} training tokens)" in text
    assert "stalled unless its final eval loss is 0.07 nats below" in text
