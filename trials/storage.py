"""The sweep's storage as a trial sees it: one pyarrow filesystem, resolved from a URI, that every node
of a cluster reaches (a local path on one machine; `s3://...`, `gs://...` or a shared mount on a cluster).

The driver hands a trial `{"uri": URI, "root": PATH}` (`sweeper.run.storage`): `uri` names the
filesystem as the user wrote it (query parameters such as `?endpoint_override=` included), `root`
the sweep's folder inside it. Credentials come from the usual environment variables of each node
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, `GOOGLE_APPLICATION_CREDENTIALS`...),
which pyarrow reads. Every failure of an upload or a download is a `trials.infra.StorageError`: an
infrastructure fault, retried by the driver, never a learning rate's result.

The trial's local scratch (`scratch_dir`) holds its checkpoints and exports before they go to the
storage; it is removed when the trial ends, and folders of trial processes that died are removed by
the next trial on the node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from trials.infra import StorageError

SCRATCH_ENV = "LAYERROPE_SWEEPER_SCRATCH"
_SCRATCH_PREFIX = "layerrope-trial-"


@lru_cache(maxsize=8)
def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) of a URI or a local path (made absolute)."""
    if "://" not in uri:
        uri = os.path.abspath(os.path.expanduser(uri))
    try:
        return _filesystem(uri)
    except Exception as exc:
        raise StorageError(f"storage {uri}: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class Storage:
    """The sweep's storage: `uri` names the filesystem, `root` the sweep's folder in it."""

    uri: str
    root: str

    @property
    def fs(self) -> pafs.FileSystem:
        return resolve(self.uri)[0]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *[p.strip("/") for p in parts if p]])

    def to_dict(self) -> dict[str, str]:
        return {"uri": self.uri, "root": self.root}

    @classmethod
    def from_dict(cls, d: Any) -> Storage | None:
        if not isinstance(d, dict) or not d.get("uri") or not d.get("root"):
            return None
        return cls(str(d["uri"]), str(d["root"]))

    # -- files and folders ---------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file (object stores make it visible at once; a local file goes by a rename)."""
        try:
            fs = self.fs
            parent = path.rsplit("/", 1)[0]
            fs.create_dir(parent, recursive=True)
            if isinstance(fs, pafs.LocalFileSystem):
                tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
                with fs.open_output_stream(tmp) as out:
                    out.write(data)
                fs.move(tmp, path)
            else:
                with fs.open_output_stream(path) as out:
                    out.write(data)
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot write {path} ({exc})") from exc

    def read_bytes(self, path: str) -> bytes | None:
        """A file's bytes, None when it does not exist."""
        try:
            fs = self.fs
            if fs.get_file_info(path).type != pafs.FileType.File:
                return None
            with fs.open_input_stream(path) as src:
                return bytes(src.read())
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot read {path} ({exc})") from exc

    def delete(self, path: str) -> None:
        """Delete a file or a folder (and what it holds); nothing when it does not exist."""
        try:
            fs = self.fs
            kind = fs.get_file_info(path).type
            if kind == pafs.FileType.Directory:
                fs.delete_dir(path)
            elif kind == pafs.FileType.File:
                fs.delete_file(path)
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot delete {path} ({exc})") from exc

    def upload(self, local: Path, path: str) -> None:
        """Copy a local folder to `path` in the storage."""
        try:
            self.fs.create_dir(path, recursive=True)
            pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot upload {local} to {path} ({exc})") from exc

    def download(self, path: str, local: Path) -> None:
        """Copy a folder of the storage to a local folder."""
        try:
            local.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(path, str(local), source_filesystem=self.fs, destination_filesystem=pafs.LocalFileSystem())
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot download {path} ({exc})") from exc

    def copy(self, path: str, target: str) -> None:
        """Copy a folder to another place in the storage (an object store copies on its side)."""
        try:
            self.fs.create_dir(target, recursive=True)
            pafs.copy_files(path, target, source_filesystem=self.fs, destination_filesystem=self.fs)
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot copy {path} to {target} ({exc})") from exc

    def listing(self, path: str) -> list[str]:
        """Every file under `path` (recursively), [] when it does not exist."""
        try:
            selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
            return sorted(i.path for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File)
        except OSError as exc:
            raise StorageError(f"storage {self.uri}: cannot list {path} ({exc})") from exc


# ----------------------------------------------------------------------------------------------
# Local scratch


def scratch_root(setting: str | None = None) -> Path:
    """The node's scratch folder: the sweep's `ray.scratch`, else $LAYERROPE_SWEEPER_SCRATCH, else the
    system's temporary folder."""
    return Path(setting or os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()).expanduser()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_scratch(root: Path) -> int:
    """Remove the scratch folders of trial processes of this node that died (a killed trial leaves its
    folder behind); returns how many."""
    removed = 0
    with contextlib.suppress(OSError):
        for folder in root.glob(f"{_SCRATCH_PREFIX}*"):
            pid = folder.name[len(_SCRATCH_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed


@contextlib.contextmanager
def scratch_dir(setting: str | None = None) -> Any:
    """A fresh scratch folder for one trial, removed when it ends (stale ones of dead trials first)."""
    root = scratch_root(setting)
    root.mkdir(parents=True, exist_ok=True)
    clean_stale_scratch(root)
    folder = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
