"""The sweep's storage without Ray: the same `Storage` calls on a local folder and on a real S3-compatible
server (moto's, started here); the best weights kept from a remote storage; finished trials' checkpoints
deleted from S3; the unigram entropy published once by the driver and read by trials on "nodes" whose
caches are empty (processes of their own); a node's scratch cleaned; a trial's GPU memory share."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from sweeper.run.storage import remove_trial_checkpoints
from sweeper.run.weights import keep_best, kept_dir, kept_point
from tests.reliability.cluster import s3, s3_server
from trials.infra import StorageError
from trials.ray_entry import limit_gpu_memory, memory_fraction
from trials.storage import Storage, clean_stale_scratch, scratch_dir

BUCKET = "unit-bucket"


@pytest.fixture(scope="module")
def aws():
    with s3_server(BUCKET) as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # pyarrow reads the usual variables, as on a node
        try:
            yield env
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def stores(tmp_path: Path, aws: dict[str, str]) -> list[Storage]:
    return [Storage(str(tmp_path / "local"), str(tmp_path / "local" / "sweep")),
            Storage(f"s3://{BUCKET}/prefix", f"{BUCKET}/prefix/{tmp_path.name}")]


def member(folder: Path, point: str, payload: bytes) -> None:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(payload)
    (folder / "config.json").write_text(json.dumps({"point_id": point}))


def test_files_and_folders_on_a_local_path_and_on_s3(tmp_path, aws):
    for storage in stores(tmp_path, aws):
        storage.write_bytes(storage.path("a", "b.txt"), b"hello")
        assert storage.read_bytes(storage.path("a", "b.txt")) == b"hello"
        assert storage.read_bytes(storage.path("a", "missing")) is None
        src = tmp_path / f"up-{storage.is_local}"
        member(src / "0", "p/L1/s0/lr=0.01", b"weights")
        storage.upload(src, storage.path("up"))
        storage.copy(storage.path("up"), storage.path("copied"))
        assert storage.listing(storage.path("copied")) == [storage.path("copied", "0", "config.json"),
                                                           storage.path("copied", "0", "model.safetensors")]
        down = tmp_path / f"down-{storage.is_local}"
        storage.download(storage.path("copied"), down)
        assert (down / "0" / "model.safetensors").read_bytes() == b"weights"
        storage.delete(storage.path("up"))
        assert storage.listing(storage.path("up")) == []
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    with pytest.raises(StorageError, match="cannot write"):
        Storage(str(blocked), str(blocked / "sub")).write_bytes(str(blocked / "sub" / "m"), b"x")


def test_best_weights_kept_from_s3_and_checkpoints_deleted_there(tmp_path, aws):
    storage = stores(tmp_path, aws)[1]
    trial = tmp_path / "trial-out"
    member(trial / "0", "pre/L1/s0/lr=0.01", b"best")
    member(trial / "1", "pre/L1/s0/lr=0.02", b"other")
    staged = storage.path("staging", "pre_L1_s0", "t1")
    storage.upload(trial, staged)
    kept_remote = storage.path("weights", "pre_L1_s0")
    sweep_dir = tmp_path / "sweep"
    assert keep_best(sweep_dir, "pre/L1/s0", "pre/L1/s0/lr=0.01", storage, staged, staged=True,
                     kept_in_storage=kept_remote)
    assert kept_point(kept_dir(sweep_dir, "pre/L1/s0")) == "pre/L1/s0/lr=0.01"
    assert (kept_dir(sweep_dir, "pre/L1/s0") / "model.safetensors").read_bytes() == b"best"
    assert storage.read_bytes(f"{kept_remote}/model.safetensors") == b"best"
    assert storage.listing(staged) == []
    assert sorted(p.name for p in (sweep_dir / "weights").iterdir()) == ["pre_L1_s0"]  # no download folder left

    fs = s3(aws)
    trial_path = storage.path("run-1", "trial_x")
    for name in ("checkpoint_000001", "checkpoint_000002"):
        with fs.open_output_stream(f"{trial_path}/{name}/state.json") as out:
            out.write(b"{}")
    with fs.open_output_stream(f"{trial_path}/params.json") as out:
        out.write(b"{}")
    assert remove_trial_checkpoints(fs, trial_path) == 2
    left = [i.path for i in fs.get_file_info(pafs.FileSelector(trial_path, recursive=True))
            if i.type == pafs.FileType.File]
    assert left == [f"{trial_path}/params.json"]


def _trial_on_a_node(cache: str, shared: dict[str, str], log: str, queue: multiprocessing.Queue) -> None:
    os.environ["LAYERROPE_SWEEPER_CACHE"] = cache
    os.environ["LAYERROPE_SWEEPER_UNIGRAM_LOG"] = log
    from trials.config import DataConfig
    from trials.data import open_source
    from trials.data.cache import use_shared_cache

    use_shared_cache(Storage.from_dict(shared))  # what trials.ray_entry does for a sweep's trial
    queue.put(open_source(DataConfig(source="synthetic", synthetic_tokens=200_000)).unigram_entropy().nats)


def test_the_unigram_entropy_is_counted_once_and_read_by_every_node(tmp_path, aws, monkeypatch):
    from trials.config import DataConfig
    from trials.data import open_source
    from trials.data.unigram import publish

    log = tmp_path / "scans.jsonl"
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path / "driver-cache"))
    monkeypatch.setenv("LAYERROPE_SWEEPER_UNIGRAM_LOG", str(log))
    storage = stores(tmp_path, aws)[1]
    value = open_source(DataConfig(source="synthetic", synthetic_tokens=200_000)).unigram_entropy()  # the driver
    publish(storage, value, "exact")
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = ctx.Queue()
    nodes = [ctx.Process(target=_trial_on_a_node, args=(str(tmp_path / f"node-{i}"), storage.to_dict(), str(log), queue))
             for i in range(2)]
    for proc in nodes:  # two trials starting together, on nodes with empty caches
        proc.start()
    for proc in nodes:
        proc.join(120)
        assert proc.exitcode == 0
    assert [queue.get(timeout=5), queue.get(timeout=5)] == [value.nats, value.nats]
    scans = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["pid"] for s in scans] == [os.getpid()], "only the driver scanned the data"
    assert all(list((tmp_path / f"node-{i}" / "corpus").glob("unigram-*.json")) for i in range(2))


def test_scratch_is_removed_after_a_trial_and_after_a_dead_one(tmp_path):
    dead = multiprocessing.get_context("spawn").Process(target=int)
    dead.start()
    dead.join()
    stale = tmp_path / f"layerrope-trial-{dead.pid}-abc"
    stale.mkdir()
    (stale / "checkpoint").write_bytes(b"x")
    mine = tmp_path / f"layerrope-trial-{os.getpid()}-live"
    mine.mkdir()
    with scratch_dir(str(tmp_path)) as folder:
        assert folder.is_dir() and folder.parent == tmp_path
        assert not stale.exists() and mine.exists()  # a live process's folder stays
    assert not folder.exists()
    assert clean_stale_scratch(tmp_path) == 0


def test_a_trials_gpu_memory_share():
    assert memory_fraction(0.125) == 0.125 and memory_fraction(0.5) == 0.5
    assert memory_fraction(None) is None and memory_fraction(1.0) is None and memory_fraction(2.0) is None
    assert memory_fraction(0.0) is None
    assert limit_gpu_memory(0.25) is None  # no CUDA device here: nothing to enforce (the GPU suite checks it)
