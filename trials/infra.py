"""Infrastructure faults: a trial's end that says nothing about its learning rates.

A learning rate's own outcome is what the trial reports (ok, diverged, stalled, a NaN loss) or a crash
of the training code (`failed`). Four kinds of end are the machine's instead, and the driver retries
them (`sweeper.run.book.CellBook.infra_fault`) rather than recording the learning rate as `failed`:

| kind | what | seen as |
|---|---|---|
| `oom` | the GPU (or Ray's host-memory monitor) ran out of memory | `torch.cuda.OutOfMemoryError`, a RuntimeError saying "out of memory", Ray's `OutOfMemoryError` |
| `storage` | the sweep's storage could not be written or read | an `OSError` from an upload or download to the storage (`StorageError`) |
| `lost` | the trial's process, actor or node went away | Ray's `ActorDiedError`, `NodeDiedError`, `WorkerCrashedError`, ... |
| `preempted` | the machine was taken back | SIGTERM, "preempted" |

The trial classifies what it raised itself (`kind_of_exception`: an out-of-memory or storage error
ends the trial with a fault report instead of a Tune retry of the same stack, which would run out of
memory again); the driver classifies the text of an error Tune reports after its own retries
(`kind_of_text`: a lost actor or node). No torch or Ray import at module level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KINDS = ("oom", "storage", "lost", "preempted")


class StorageError(OSError):
    """An upload to (or download from) the sweep's storage failed."""


@dataclass(frozen=True)
class InfraFault:
    """How a trial ended when the infrastructure ended it: the kind and the error's one line."""

    kind: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}

    @classmethod
    def from_dict(cls, d: Any) -> InfraFault | None:
        if not isinstance(d, dict) or d.get("kind") not in KINDS:
            return None
        return cls(str(d["kind"]), str(d.get("message") or "")[:500])


_OOM_TEXT = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|HIP out of memory|"
                       r"CUBLAS_STATUS_ALLOC_FAILED|out of memory", re.IGNORECASE)
_LOST_TEXT = re.compile(r"ActorDiedError|ActorUnavailableError|NodeDiedError|WorkerCrashedError|RayActorError|"
                        r"OwnerDiedError|ObjectLostError|The actor died|node .* (?:died|was terminated)")
_PREEMPTED_TEXT = re.compile(r"preempt|SIGTERM", re.IGNORECASE)


def _oom_exception(exc: BaseException) -> bool:
    try:
        import torch  # only when torch is loaded already (a trial): the driver never gets here with one
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and bool(re.search(r"out of memory", str(exc), re.IGNORECASE))


def kind_of_exception(exc: BaseException) -> str | None:
    """The infrastructure kind of an exception raised inside a trial, or None (the trial's own crash)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for e in chain:
        if isinstance(e, StorageError):
            return "storage"
        if _oom_exception(e):
            return "oom"
    return None


def kind_of_text(text: str | None) -> str | None:
    """The infrastructure kind of a trial's error text (the last line of its traceback), or None."""
    if not text:
        return None
    if "InfraFault" in text or "StorageError" in text:
        return "storage"
    if _OOM_TEXT.search(text):
        return "oom"
    if _LOST_TEXT.search(text):
        return "lost"
    if _PREEMPTED_TEXT.search(text):
        return "preempted"
    return None


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
