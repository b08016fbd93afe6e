"""The prefetcher: the batches and positions a training loop sees are exactly those of the plain
stream; resume from its position is exact; a failure in the thread reaches the loop with its own
type and message; the thread stops when closed or dropped, and nothing read ahead is skipped."""

from __future__ import annotations

import gc
import json
import threading
import time
from typing import Any

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import open_source
from trials.data.base import ArrayBatchStream, BatchStream
from trials.data.prefetch import Prefetcher
from trials.errors import TrialInputError


def _threads() -> int:
    return sum(t.name == "batch-prefetch" and t.is_alive() for t in threading.enumerate())


def _source() -> Any:
    return open_source(DataConfig(source="synthetic", synthetic_vocab=50, synthetic_tokens=8192))


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_same_batches_and_positions_as_without_prefetch(depth: int) -> None:
    src = _source()
    plain = src.train_stream(4, 16, 3)
    ahead = Prefetcher(src.train_stream(4, 16, 3), depth=depth)
    for _ in range(40):  # several epochs of this small corpus
        assert np.array_equal(ahead.next_batch(), plain.next_batch())
        assert ahead.state() == plain.state()  # the position after the batch taken, not after the ones read ahead
    ahead.close()


def test_resume_from_its_position_is_exact() -> None:
    src = _source()
    straight = src.train_stream(4, 16, 3)
    want = [straight.next_batch() for _ in range(12)]
    first = Prefetcher(src.train_stream(4, 16, 3))
    for _ in range(5):
        first.next_batch()
    time.sleep(0.05)  # let the thread run ahead
    saved = json.loads(json.dumps(first.state()))
    first.close()
    resumed = Prefetcher(src.train_stream(4, 16, 3))
    resumed.load_state(saved)  # before the first batch, as a trial restores a checkpoint
    assert all(np.array_equal(resumed.next_batch(), b) for b in want[5:])
    # load_state while running: what was read ahead is dropped
    resumed.load_state(saved)
    assert np.array_equal(resumed.next_batch(), want[5])
    resumed.close()


def test_close_then_continue_skips_nothing() -> None:
    src = _source()
    plain = src.train_stream(4, 16, 9)
    ahead = Prefetcher(src.train_stream(4, 16, 9), depth=3)
    for _ in range(3):
        assert np.array_equal(ahead.next_batch(), plain.next_batch())
    time.sleep(0.05)
    ahead.close()
    for _ in range(3):
        assert np.array_equal(ahead.next_batch(), plain.next_batch())
    ahead.close()


class _Failing(BatchStream):
    """Batches 0, 1, then the error a real source raises for a file that went away."""

    def __init__(self) -> None:
        self.position = 0

    def next_batch(self) -> np.ndarray:
        if self.position == 2:
            raise TrialInputError("data.path: /gone/train.bin: no such file")
        self.position += 1
        return np.full((2, 3), self.position, dtype=np.int64)

    def state(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


def test_an_error_in_the_thread_reaches_the_loop_with_its_message() -> None:
    before = _threads()
    ahead = Prefetcher(_Failing(), depth=4)
    assert ahead.next_batch()[0, 0] == 1 and ahead.next_batch()[0, 0] == 2
    with pytest.raises(TrialInputError, match=r"^data.path: /gone/train.bin: no such file$"):
        ahead.next_batch()
    assert ahead.state() == {"position": 2}
    with pytest.raises(TrialInputError):  # it stays failed
        ahead.next_batch()
    assert _threads() == before


def test_the_thread_stops_when_closed_or_dropped() -> None:
    before = _threads()
    tokens = np.arange(5000, dtype=np.uint16)
    ahead = Prefetcher(ArrayBatchStream(tokens, 2, 8, 0, name="t"), depth=2)
    ahead.next_batch()
    time.sleep(0.05)  # the queue is full: the thread waits on it
    assert _threads() == before + 1
    ahead.close()
    assert _threads() == before
    dropped = Prefetcher(ArrayBatchStream(tokens, 2, 8, 0, name="t"), depth=2)
    dropped.next_batch()
    del dropped
    gc.collect()
    deadline = time.monotonic() + 5
    while _threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _threads() == before


def test_a_trial_reads_through_the_prefetcher_and_leaves_no_thread() -> None:
    from models import ModelConfig
    from trials.config import DivergenceConfig, TrainConfig
    from trials.run import run_trial
    from trials.spec import TrialSpec
    from trials.train import Trial

    spec = TrialSpec(model=ModelConfig(scheme="pre", width=32, depth=1, n_heads=1, vocab=50, seq_len=16),
                     train=TrainConfig(steps=3, batch_size=2, eval_every=3, eval_batches=1),
                     data=DataConfig(source="synthetic", synthetic_vocab=50, synthetic_tokens=8192), lrs=[1e-3], seed=0,
                     divergence=DivergenceConfig(stall_margin=None))  # 3 steps learn nothing: no stall rule here
    assert isinstance(Trial(spec).stream, Prefetcher)
    gc.collect()
    before = _threads()
    assert run_trial(spec)[0].outcome == "ok"
    assert _threads() == before


class _Counting(BatchStream):
    """A stream that counts its reads."""

    def __init__(self, inner: BatchStream) -> None:
        self.inner, self.reads = inner, 0

    def next_batch(self) -> np.ndarray:
        self.reads += 1
        return self.inner.next_batch()

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.inner.load_state(state)


def test_paused_keeps_the_thread_off_the_stream_and_changes_no_batch() -> None:
    """A CUDA-graph capture runs inside `paused()`: entering waits for the batch being converted, and
    no batch is read or converted (pinned) until it exits; the batches are those of the plain stream."""
    tokens = np.arange(50_000, dtype=np.uint16)
    converting = threading.Event()

    def slow(batch: np.ndarray) -> np.ndarray:
        converting.set()
        time.sleep(0.02)
        converting.clear()
        return batch

    counted = _Counting(ArrayBatchStream(tokens, 2, 8, 0, name="t"))
    ahead = Prefetcher(counted, depth=1000, convert=slow)
    got = [ahead.next_batch()]
    converting.wait(1.0)
    with ahead.paused():
        assert not converting.is_set()  # the batch in progress was finished first
        reads = counted.reads
        time.sleep(0.2)  # ten conversions' time: none starts
        assert counted.reads == reads and not converting.is_set()
    deadline = time.monotonic() + 5
    while counted.reads == reads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counted.reads > reads  # it reads on after the pause
    got += [ahead.next_batch() for _ in range(20)]
    ahead.close()
    plain = ArrayBatchStream(tokens, 2, 8, 0, name="t")
    assert all(np.array_equal(a, plain.next_batch()) for a in got)
    with Prefetcher(ArrayBatchStream(tokens, 2, 8, 0, name="t")).paused():
        pass  # before its thread starts: nothing to wait for
