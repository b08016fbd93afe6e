"""`resources.placement`: the GPU share a trial asks Ray for (`sweeper.search.placement`)."""

from __future__ import annotations

import pytest

from sweeper.search.placement import gpu_request, is_lead


def best_fit(requests: list[float], gpus: int) -> list[int]:
    """Ray's rule for fractional requests (checked against Ray 2.60 with fake GPUs, sweeper.sim.devices):
    the GPU with the least free share that still holds the request, the lowest index on a tie."""
    free = [1.0] * gpus
    placed = []
    for r in requests:
        fits = [g for g in range(gpus) if free[g] >= r - 1e-9]
        g = min(fits, key=lambda g: (free[g], g))
        free[g] -= r
        placed.append(g)
    return placed


def shares(wanted: int, gpus: int, declared: float = 0.125) -> list[float]:
    """The shares of `wanted` trials proposed one after another while all of them want to run."""
    out: list[float] = []
    for _ in range(wanted):
        out.append(gpu_request(declared, wanted, gpus, "spread", leads=sum(map(is_lead, out))))
    return out


def test_spread_gives_every_gpu_one_lead_and_packs_the_rest_beside_them():
    # depth.yaml's first day on 8 GPUs, prior_from 3: 18 trials of 0.125; declared, Ray puts them on 3 GPUs
    assert sorted(set(best_fit([0.125] * 18, 8))) == [0, 1, 2]
    spread = shares(18, 8)
    assert spread[:8] == [0.75] * 8 and spread[8:] == [0.125] * 10  # 8 leads (the longest trials), 10 followers
    placed = best_fit(spread, 8)
    assert sorted(set(placed)) == list(range(8)) and sorted(set(placed[:8])) == list(range(8))
    # 12 trials (prior_from 2): 8 leads of 0.875, 4 followers
    assert shares(12, 8) == [0.875] * 8 + [0.125] * 4 and sorted(set(best_fit(shares(12, 8), 8))) == list(range(8))


def test_spread_leaves_room_beside_a_lead_and_asks_the_declared_share_once_the_pool_is_full():
    # few trials: one per GPU, each leaving room for one declared trial beside it (never a whole GPU)
    assert gpu_request(0.125, 8, 8) == 0.875 and gpu_request(0.125, 1, 8) == 0.875
    assert gpu_request(0.25, 3, 8) == 0.75 and gpu_request(0.5, 3, 8) == 0.5  # a half-GPU cell is never a lead
    assert gpu_request(0.125, 12, 8, leads=8) == 0.125  # every GPU has its lead: follow
    assert gpu_request(0.125, 40, 8) == 0.125 and gpu_request(0.125, 500, 8) == 0.125  # a lead would be <= 1/2
    assert gpu_request(0.5, 20, 8) == 0.5 and gpu_request(0.25, 12, 8) == 0.75
    assert gpu_request(0.125, 18, 8) >= 0.125


def test_pack_whole_gpus_cpus_and_no_pool_keep_the_declared_share():
    assert gpu_request(0.125, 12, 8, "pack") == 0.125
    assert gpu_request(1.0, 2, 8) == 1.0 and gpu_request(2.0, 1, 8) == 2.0  # whole GPUs are Ray's to place
    assert gpu_request(0.0, 3, 8) == 0.0  # a CPU trial
    assert gpu_request(0.25, 3, 0.0) == 0.25  # a cluster without GPUs (the declared share is then refused by Ray)
    assert is_lead(0.75) and is_lead(1.0) and not is_lead(0.5) and not is_lead(2.0)
