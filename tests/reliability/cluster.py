"""A two-raylet Ray cluster and an S3-compatible server (moto's server mode) started by a test on this
machine, each in process groups of its own that the test stops exactly (never `ray stop`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_groups(groups: list[int]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and any(_alive(g) for g in groups):
            time.sleep(0.2)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


@contextmanager
def s3_server(bucket: str) -> Iterator[dict[str, str]]:
    """moto's S3 server on a free port with `bucket` created; yields the environment every process that
    talks to it needs (the usual AWS variables: pyarrow, Ray Tune and the sweeper read them)."""
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
               "AWS_EC2_METADATA_DISABLED": "true"}
        s3(env, create=True).create_dir(bucket)
        yield env
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a stateless test server: nothing to shut down cleanly
        except ProcessLookupError:
            pass
        proc.wait(30)


def s3(env: dict[str, str], create: bool = False) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], access_key=env["AWS_ACCESS_KEY_ID"],
                             secret_key=env["AWS_SECRET_ACCESS_KEY"], region=env["AWS_DEFAULT_REGION"],
                             allow_bucket_creation=create)


def listing(fs: pafs.FileSystem, path: str) -> list[str]:
    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
                  if i.type == pafs.FileType.File)


@contextmanager
def two_nodes(env: dict[str, str], second_env: dict[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """A head (1 CPU) and a second raylet (2 CPUs, custom resource `second_node`), started with `env`
    (the second also with `second_env`); yields (GCS address, Ray's temp dir)."""
    temp_dir = Path("/tmp") / f"rcs-{os.getpid()}"  # short: Ray's socket paths are length-limited
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    groups: list[int] = []

    def start(args: list[str], node_env: dict[str, str]) -> None:
        proc = subprocess.Popen(args, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        groups.append(proc.pid)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]

    try:
        start([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
               f"--temp-dir={temp_dir}", "--disable-usage-stats"], env)
        start([ray_bin, "start", f"--address=127.0.0.1:{port}", "--num-cpus=2", '--resources={"second_node": 4}'],
              {**env, **(second_env or {})})
        yield f"127.0.0.1:{port}", temp_dir
    finally:
        stop_groups(groups)


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process (from `ps`, no extra dependency)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3:
            table[int(parts[0])] = (int(parts[1]), parts[2])
    return table


def ancestors(pid: int, table: dict[int, tuple[int, str]]) -> list[int]:
    chain = []
    while pid in table and pid > 1 and len(chain) < 50:
        pid = table[pid][0]
        chain.append(pid)
    return chain


def raylets(temp_dir: Path) -> dict[int, str]:
    """pid -> command line of the raylets of the cluster whose temp dir is `temp_dir` (not another test's Ray)."""
    return {pid: cmd for pid, (_, cmd) in processes().items() if "raylet/raylet" in cmd and str(temp_dir) in cmd}


def place_trials(placed: dict[int, int], nodes: dict[int, str]) -> None:
    """Record in `placed` each running trial actor (Tune's function trainable) -> the raylet of `nodes` that
    started it."""
    table = processes()
    for pid, (_, cmd) in table.items():
        if cmd.startswith("ray::ImplicitFunc") and pid not in placed:
            ours = [a for a in ancestors(pid, table) if a in nodes]
            if ours:
                placed[pid] = ours[0]
