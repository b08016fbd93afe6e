"""Storage faults: the ledger or the results store cannot be written or read right now.

A full disk, a file-size limit, a read-only filesystem, a SQLite ledger locked by another
process: the environment, not the user's input and not a bug. The driver turns such an error
into a clean stop — the path Ctrl-C takes, so in-flight trials stay resumable — and one line
saying what happened; nothing finished is lost, because the ledger is written before the
store and a failed write leaves the previous state. Everything else keeps its traceback.

`StorageFault` exits with code 1 (fix the environment and run the same command again);
a damaged file is a `UserError` (exit 2) naming it and the repair.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections.abc import Iterator

from sweeper.core.errors import UserError

DISK_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EFBIG: "file size limit exceeded", errno.EROFS: "read-only file system",
               errno.EIO: "input/output error"}


class StorageFault(UserError):
    """The sweep directory cannot be written now (disk full, ledger locked...). Exit code 1."""

    exit_code = 1


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


LOCK_TIMEOUT_ENV = "LAYERROPE_SWEEPER_LEDGER_TIMEOUT"


def lock_timeout() -> float:
    """Seconds a SQLite ledger write waits for another process's lock before it fails (default 60;
    `LAYERROPE_SWEEPER_LEDGER_TIMEOUT` changes it, e.g. longer on a slow network filesystem)."""
    try:
        return max(0.0, float(os.environ.get(LOCK_TIMEOUT_ENV, "60")))
    except ValueError:
        return 60.0


def _sqlite_message(exc: BaseException) -> str | None:
    for e in _chain(exc):
        if isinstance(e, sqlite3.Error):
            return str(e)
        orig = getattr(e, "orig", None)  # sqlalchemy wraps the DB-API error
        if isinstance(orig, sqlite3.Error):
            return str(orig)
    return None


def _disk_error(exc: BaseException) -> OSError | None:
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return e
    return None


def is_transient(exc: BaseException) -> bool:
    """A full or read-only disk, a size limit, or a locked ledger."""
    sqlite = _sqlite_message(exc) or ""
    return _disk_error(exc) is not None or "locked" in sqlite or "disk is full" in sqlite


_DISK_TEXT = re.compile(r"\[Errno (28|122|27|30)\]|No space left on device|Disk quota exceeded|File too large|"
                        r"Read-only file system|database or disk is full")


def is_transient_text(error: str | None) -> bool:
    """A trial's error text (the last line of its traceback) that says a disk was full or read-only:
    the trial did nothing wrong (its checkpoint could not be written)."""
    return bool(error) and _DISK_TEXT.search(error) is not None


def is_storage_error(exc: BaseException) -> bool:
    """Anything the ledger or the store raised because of the files under them."""
    return is_transient(exc) or _sqlite_message(exc) is not None


def describe(exc: BaseException, ledger: str | None = None) -> str:
    """One line: what failed and what to do."""
    where = f"ledger {ledger}" if ledger else "the ledger"
    disk = _disk_error(exc)
    if disk is not None:
        path = disk.filename or "the sweep directory"
        return f"{path}: {DISK_ERRNOS[disk.errno]}"
    sqlite = _sqlite_message(exc)
    if sqlite is not None:
        if "locked" in sqlite:
            return (f"{where}: locked by another process for more than {lock_timeout():g} s "
                    f"({LOCK_TIMEOUT_ENV} sets how long to wait)")
        if "disk is full" in sqlite:
            return f"{where}: the disk is full (sqlite: {sqlite})"
        return f"{where}: damaged or unreadable (sqlite: {sqlite})"
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def as_user_error(exc: BaseException, ledger: str | None = None, *, what: str = "") -> UserError:
    """A StorageFault (exit 1) for a transient cause, a UserError (exit 2) for a damaged file."""
    line = describe(exc, ledger) + (f"; {what}" if what else "")
    return StorageFault(line) if is_transient(exc) else UserError(line)
