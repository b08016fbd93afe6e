"""What one node of a cluster can do for a sweep (`sweeper doctor`, and `sweeper launch --address` before
its first trial): write and read back a marker in the sweep's storage, see the data a sweep file names,
write its cache and scratch folders; and what it has: GPUs (name, memory), CPUs, free disk.

`probe` runs on the node (a Ray task pinned to it, or in this process for the local machine) and
returns a plain dict; `report` turns the nodes' dicts into the doctor's answer: `ok`, the nodes, and one
line per problem (a storage problem says "storage"). No Ray and no torch here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trials.data.cache import cache_root
from trials.infra import StorageError
from trials.storage import Storage, scratch_root

GiB = 2**30
MARKER_DIR = ".doctor"


def gpus() -> list[dict[str, Any]]:
    """This machine's GPUs (name, memory in GiB): from `nvidia-smi`, else from torch where an NVIDIA driver
    is loaded; [] without one."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        try:
            out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        found = []
        for line in out.strip().splitlines():
            name, _, memory = line.rpartition(",")
            try:
                found.append({"name": name.strip(), "memory_gb": round(float(memory) / 1024, 1)})
            except ValueError:
                continue
        return found
    if not os.path.exists("/proc/driver/nvidia"):
        return []  # no driver: importing torch (seconds) would find nothing
    try:
        import torch  # only where a driver is loaded but nvidia-smi is missing

        return [{"name": torch.cuda.get_device_name(i),
                 "memory_gb": round(torch.cuda.get_device_properties(i).total_memory / GiB, 1)}
                for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def check_storage(storage: Storage, node: str) -> str | None:
    """Write a marker in the storage, read it back and delete it; None when all of that worked, else why not."""
    token = uuid.uuid4().hex
    path = storage.path(MARKER_DIR, f"{node}-{token}")
    created = [] if not storage.is_local else [p for p in (Path(storage.root),) if not p.exists()]
    try:
        storage.write_bytes(path, token.encode())
        back = storage.read_bytes(path)
        storage.delete(path)
    except StorageError as exc:
        return str(exc)
    if storage.is_local:
        for folder in (Path(storage.path(MARKER_DIR)), *created):
            try:
                folder.rmdir()  # only when empty: another node may be writing beside
            except OSError:
                pass
    if back != token.encode():
        return f"storage {storage.uri}: the marker read back differs from the one written ({path})"
    return None


def _writable(folder: Path) -> str | None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".doctor-{uuid.uuid4().hex}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def probe(storage: dict[str, str] | None, scratch: str | None, data_paths: list[str], node: str) -> dict[str, Any]:
    """Everything `sweeper doctor` asks of one node, run on that node."""
    out: dict[str, Any] = {"node": node, "hostname": socket.gethostname(), "cpus": os.cpu_count(), "gpus": gpus()}
    where = Storage.from_dict(storage)
    out["storage_ok"] = None
    if where is not None:
        error = check_storage(where, node)
        out["storage_ok"] = error is None
        out["storage_error"] = error
    folder = scratch_root(scratch)
    out["scratch"] = str(folder)
    out["scratch_error"] = _writable(folder)
    try:
        out["disk_free_gb"] = round(shutil.disk_usage(folder).free / 1e9, 1)
    except OSError:
        out["disk_free_gb"] = None
    cache = cache_root()
    out["cache"] = str(cache)
    out["cache_error"] = _writable(cache)
    out["data"] = {path: os.access(path, os.R_OK) for path in data_paths}
    return out


@dataclass
class Report:
    """The doctor's answer: every node's dict and the problems (one line each)."""

    nodes: list[dict[str, Any]]
    storage: str | None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def storage_problems(self) -> list[str]:
        return [p for p in self.problems if p.startswith("storage")]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "storage": self.storage, "nodes": self.nodes, "problems": list(self.problems)}


def report(nodes: list[dict[str, Any]], storage: Storage | None, missing: list[str] | None = None) -> Report:
    """The problems of the nodes' answers (`missing`: nodes that did not answer, each with why)."""
    problems: list[str] = list(missing or [])
    for n in nodes:
        name = n.get("node")
        if n.get("storage_ok") is False:
            error = str(n.get("storage_error") or "").removeprefix(f"storage {storage.uri if storage else ''}: ")
            problems.append(f"storage {storage.uri if storage else ''}: node {name} cannot write, read back and delete "
                            f"a marker ({error})")
        if n.get("scratch_error"):
            problems.append(f"scratch {n.get('scratch')}: node {name} cannot write there: {n['scratch_error']}")
        if n.get("cache_error"):
            problems.append(f"cache {n.get('cache')}: node {name} cannot write there: {n['cache_error']}")
        for path, seen in (n.get("data") or {}).items():
            if not seen:
                problems.append(f"data {path}: node {name} cannot read it (copy the prepared corpus to the same path "
                                "on every node, or put it on a shared filesystem)")
    return Report(nodes, storage.uri if storage else None, problems)


def check_local(storage: Storage | None, scratch: str | None, data_paths: list[str]) -> Report:
    """This machine, in this process (no Ray: nothing to fan out)."""
    return report([probe(storage.to_dict() if storage else None, scratch, data_paths, socket.gethostname())], storage)
