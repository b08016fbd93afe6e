"""The seeds' noise beside the evaluation noise in `optima`: which one decides "within noise", and says so."""

from __future__ import annotations

import statistics

import pytest

from sweeper.records.seed_noise import add_seed_noise


def row(seed: int, best_lr: float, best: float, neighbour_lr: float | None, gap: float | None, method: str = "pre"):
    return {"cell_id": f"{method}/L2/s{seed}", "method": method, "size": "L2", "seed": seed, "best_lr": best_lr,
            "best_loss": best, "neighbour_lr": neighbour_lr, "neighbour_gap": gap, "neighbour_gap_se": 0.001,
            "within_noise": False}


def test_seeds_that_trained_both_lrs_decide_within_noise():
    # three seeds trained 1e-3 and 2e-3; their differences 0.01, 0.05, -0.02: sd 0.0351
    losses = {"pre/L2/s0": {1e-3: 3.00, 2e-3: 3.01}, "pre/L2/s1": {1e-3: 3.10, 2e-3: 3.15},
              "pre/L2/s2": {1e-3: 3.07, 2e-3: 3.05}}
    rows = [row(0, 1e-3, 3.00, 2e-3, 0.01), row(1, 1e-3, 3.10, 2e-3, 0.05), row(2, 2e-3, 3.05, 1e-3, 0.02)]
    add_seed_noise(rows, losses)
    sd = statistics.stdev([0.01, 0.05, -0.02])
    assert rows[0]["seed_sd_gap"] == pytest.approx(sd) and rows[0]["n_seeds_gap"] == 3
    assert rows[0]["noise"] == "seeds" and rows[0]["within_noise"] is True  # 0.01 < 2 × 0.035, though 10 eval SEs
    assert rows[0]["seed_sd_best_loss"] == pytest.approx(statistics.stdev([3.00, 3.10, 3.05]))
    assert rows[0]["seed_sd_at_best_lr"] == pytest.approx(statistics.stdev([3.00, 3.10, 3.07]))
    assert rows[0]["seed_sd_at_neighbour_lr"] == pytest.approx(statistics.stdev([3.01, 3.15, 3.05]))
    assert rows[2]["seed_sd_gap"] == pytest.approx(sd)  # the same two LRs, the other way round: the same spread


def test_one_seed_keeps_the_paired_evaluation_se():
    rows = [row(0, 1e-3, 3.0, 2e-3, 0.01)]
    rows[0]["within_noise"] = True  # as the paired evaluation SE decided it
    add_seed_noise(rows, {"pre/L2/s0": {1e-3: 3.0, 2e-3: 3.01}})
    assert rows[0]["noise"] == "eval" and rows[0]["within_noise"] is True
    assert rows[0]["seed_sd_best_loss"] is None and rows[0]["seed_sd_gap"] is None and rows[0]["n_seeds_gap"] == 1


def test_seeds_that_did_not_train_both_lrs_fall_back_to_eval():
    losses = {"pre/L2/s0": {1e-3: 3.0, 2e-3: 3.01}, "pre/L2/s1": {4e-3: 3.1, 8e-3: 3.2}}
    rows = [row(0, 1e-3, 3.0, 2e-3, 0.01), row(1, 4e-3, 3.1, 8e-3, 0.1)]
    add_seed_noise(rows, losses)
    assert [r["noise"] for r in rows] == ["eval", "eval"]
    assert rows[0]["seed_sd_best_loss"] == pytest.approx(statistics.stdev([3.0, 3.1]))  # measured all the same
    assert rows[0]["seed_sd_at_best_lr"] is None  # one seed trained 1e-3


def test_no_neighbour_no_noise_claim():
    rows = [row(0, 1e-3, 3.0, None, None), row(1, 1e-3, 3.1, None, None)]
    add_seed_noise(rows, {})
    assert [r["noise"] for r in rows] == [None, None]
