"""Shared settings for the trials tests.

- Tiny models run fastest on one intra-op thread (and do not fight other processes for the cores).
- Corpora are cached in a folder private to the test session, never in the user's ~/.cache.
- `stream_contract(source)`: the checks every data source must pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from trials.data.base import TokenSource


@pytest.fixture(autouse=True)
def trial_settings(one_torch_thread: None, private_cache: Path) -> None:
    """One intra-op thread and a private corpus cache (both in tests/conftest.py) for every test here."""


def check_stream_contract(source: TokenSource, batch: int = 3, seq_len: int = 16) -> None:
    """Same seed -> same batches; other seed -> other batches; state() + load_state() resumes exactly;
    ids within the vocabulary; evaluation batches fixed."""
    a, b, c = (source.train_stream(batch, seq_len, seed) for seed in (0, 0, 1))
    first = [a.next_batch() for _ in range(4)]
    assert all(x.shape == (batch, seq_len + 1) and x.dtype == np.int64 for x in first)
    assert all(np.array_equal(x, b.next_batch()) for x in first)
    assert not all(np.array_equal(x, c.next_batch()) for x in first)
    position = json.loads(json.dumps(a.state()))  # JSON round trip: the position is serialisable
    after = [a.next_batch() for _ in range(3)]
    resumed = source.train_stream(batch, seq_len, 0)
    resumed.load_state(position)
    assert all(np.array_equal(x, resumed.next_batch()) for x in after)
    assert all(int(x.max()) < source.vocab and int(x.min()) >= 0 for x in first + after)
    ev1, ev2 = source.eval_batches(2, batch, seq_len), source.eval_batches(2, batch, seq_len)
    assert len(ev1) == 2 and all(np.array_equal(x, y) for x, y in zip(ev1, ev2))
    assert ev1[0].shape == (batch, seq_len + 1)


@pytest.fixture
def stream_contract() -> Callable[..., None]:
    return check_stream_contract
