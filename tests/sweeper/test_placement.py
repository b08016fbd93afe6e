"""`resources.placement`: the GPU share a trial asks Ray for (`sweeper.search.placement`)."""

from __future__ import annotations

import pytest

from sweeper.search.placement import gpu_request


def test_spread_asks_for_a_larger_share_while_few_trials_want_the_pool():
    # depth.yaml's first day on 8 GPUs: 12 trials of 0.125 would share 2 GPUs; asking 1/2 puts 2 on a GPU
    assert gpu_request(0.125, 12, 8) == 0.5
    assert gpu_request(0.125, 8, 8) == 1.0 and gpu_request(0.125, 1, 8) == 1.0  # one trial, one GPU
    assert gpu_request(0.125, 18, 8) == pytest.approx(0.3333)  # rounded down to Ray's 1e-4: three sum to < 1
    assert 3 * gpu_request(0.125, 18, 8) <= 1.0
    assert gpu_request(0.125, 64, 8) == 0.125 and gpu_request(0.125, 500, 8) == 0.125  # never below the declared
    assert gpu_request(0.5, 20, 8) == 0.5


def test_pack_whole_gpus_cpus_and_no_pool_keep_the_declared_share():
    assert gpu_request(0.125, 12, 8, "pack") == 0.125
    assert gpu_request(1.0, 2, 8) == 1.0 and gpu_request(2.0, 1, 8) == 2.0  # whole GPUs are Ray's to place
    assert gpu_request(0.0, 3, 8) == 0.0  # a CPU trial
    assert gpu_request(0.25, 3, 0.0) == 0.25  # a cluster without GPUs (the declared share is then refused by Ray)
