"""Training batches read ahead on a background thread, without changing which batch a step sees.

`Prefetcher(stream, depth, convert)` runs `stream.next_batch()` (reading a memory map, or
tokenizing documents for the `hf` source) and `convert(batch)` (on CUDA: a pinned host tensor,
so that the step's host-to-device copy can be `non_blocking`) on one daemon thread, at most
`depth` batches ahead, into a bounded queue. The training loop takes them in order.

- Deterministic: the thread is the only reader of the stream once it has started, and batches are
  taken in the order it produced them, so a step sees exactly the batch it would see without
  prefetching. `state()` is the position after the last batch *taken* (each queued batch carries the
  stream's position after it), not after the last one read ahead: a checkpoint resumes exactly.
- The thread starts on the first `next_batch()`, so `load_state()` right after construction (a
  resume) reads nothing twice; a later `load_state()` stops it, drops what it read ahead, and
  starts again from the new position.
- An exception in the thread (a missing file, a tokenizer error) is raised by the `next_batch()`
  that would have returned that batch: the same exception object, message and type.
- `close()` (also when the prefetcher is garbage-collected, and at interpreter exit: the thread is a
  daemon) stops the thread, waiting at most for the batch being read, and rewinds the stream to
  the last batch taken.
- `paused()`: a context in which the thread reads and converts nothing (entering waits for the batch
  being converted). A CUDA-graph capture runs inside it (`trials.engine.DeviceStep`): pinning host
  memory (`cudaHostAlloc`, the caching host allocator's event queries) from another thread while a
  graph is being captured can invalidate the capture. Which batches come, and in which order, does
  not change.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np

from trials.data.base import BatchStream

T = TypeVar("T")
DEFAULT_DEPTH = 2
_POLL_S = 0.05  # how often a thread blocked on a full queue checks for close()


class _Failure:
    """An exception raised while reading ahead, delivered in the batch's place."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _produce(stream: BatchStream, convert: Callable[[np.ndarray], Any], out: queue.Queue[Any], stop: threading.Event,
             gate: threading.Lock) -> None:
    """The thread's loop. It holds no reference to the Prefetcher, so that one can be collected. It reads
    and converts a batch only while holding `gate` (`Prefetcher.paused` holds it to keep the thread still)."""
    while not stop.is_set():
        with gate:
            if stop.is_set():
                return
            try:
                item: Any = (convert(stream.next_batch()), stream.state())
            except BaseException as exc:  # delivered to the training loop, which decides
                item = _Failure(exc)
        while not stop.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        if isinstance(item, _Failure):
            return


def _halt(stop: threading.Event, out: queue.Queue[Any], thread: threading.Thread) -> None:
    stop.set()
    while thread.is_alive():
        try:  # make room so that a blocked put() returns at once
            out.get_nowait()
        except queue.Empty:
            pass
        thread.join(_POLL_S)


class Prefetcher(Generic[T]):
    """`stream`'s batches, `convert`ed and read `depth` ahead on a background thread (see the module docstring)."""

    def __init__(self, stream: BatchStream, depth: int = DEFAULT_DEPTH,
                 convert: Callable[[np.ndarray], T] = lambda b: b) -> None:  # type: ignore[assignment,return-value]
        if depth < 1:
            raise ValueError(f"prefetch depth {depth}: must be >= 1")
        self.stream = stream
        self.depth = depth
        self.convert = convert
        self._state = stream.state()
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        self._failed: BaseException | None = None
        self._gate = threading.Lock()  # held by the thread while it reads and converts one batch

    def _start(self) -> None:
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(
            target=_produce, args=(self.stream, self.convert, self._queue, self._stop, self._gate), name="batch-prefetch",
            daemon=True
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _halt, self._stop, self._queue, self._thread)

    def next_batch(self) -> T:
        """The next batch, in the stream's order."""
        if self._failed is not None:
            raise self._failed
        if self._thread is None:
            self._start()
        item = self._queue.get()
        if isinstance(item, _Failure):
            self._failed = item.exc
            self.close()
            raise item.exc
        batch, self._state = item
        return batch  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Inside: the thread reads and converts nothing (entering waits for the batch in progress)."""
        with self._gate:
            yield

    def state(self) -> dict[str, Any]:
        """The stream's position after the last batch returned by `next_batch()`."""
        return dict(self._state)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from `state` (batches read ahead are dropped)."""
        self.close()
        self.stream.load_state(state)
        self._state = self.stream.state()
        self._failed = None

    def close(self) -> None:
        """Stop the thread and rewind the stream to the last batch taken (a later `next_batch()`
        starts a new thread from there: nothing read ahead is skipped)."""
        if self._finalizer is not None:
            self._finalizer()  # runs _halt once
            self._finalizer = None
            self._thread = None
            self.stream.load_state(self._state)
