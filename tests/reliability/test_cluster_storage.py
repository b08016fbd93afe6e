"""Issue 29 on one machine: a two-raylet Ray cluster whose nodes and driver share nothing but an
S3-compatible server (moto's, started here), the sweep's storage (`ray.storage: s3://...`).

- `sweeper doctor --address` checks both nodes: each writes, reads back and deletes a marker in the bucket;
- `sweeper launch --address` trains on the second node (every trial process was started by its raylet,
  none by the head's): Tune's runs and results, the trials' checkpoints,
  the best weights and the unigram cache all land in the bucket (listed while it runs and after);
  finished trials' checkpoints are deleted from it;
- a trial SIGKILLed mid-run on the second node resumes from its checkpoint in the bucket (the step it
  resumed at is read from its curve), an injected CUDA out-of-memory error ends as a retry (then ok),
  never `failed` at that learning rate;
- the unigram entropy is counted once for the sweep (by the driver; the trials read it from the bucket:
  each node has a cache of its own here);
- the optima equal those of an uninterrupted run on the same cluster.
Plus, on the session's one-node Ray: `launch --address` refuses a storage no node can write (exit 1), and
`ray://` is refused with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from sweeper.records.store import load_curves, load_points

from .cluster import listing, place_trials, raylets, s3, s3_server, two_nodes
from .conftest import Driver, cli_cmd, fired, ledger_trials, objectives, optima_cells, wait_for

pytestmark = pytest.mark.slow

BUCKET = "sweeps-bucket"
SWEEP = """\
name: {name}
output: {out}
methods: [pre]
model: {{width: 32, heads: 2, depths: [1], seq_len: 32}}
train: {{steps: 60, batch_size: 8, eval_every: 20, eval_batches: 2, report_every: 10, checkpoint_every: 10,
        schedule: {{warmup: 0.1}}}}
divergence: {{stall_margin: 0.0}}  # the stall rule on: every trial needs the data's unigram entropy
lr: {{grid: [3e-3, 1e-2, 3e-2], max_points: 6}}
resources: {{cpu: 1, custom: {{second_node: 1}}}}
concurrency: 2
stack: 1
retries: 1
infra_retries: 2
infra_backoff: 1
ray: {{storage: "s3://{bucket}/sweeps"}}
"""
CELL = "pre/L1/s0"
HUNG, OOM = f"{CELL}/lr=0.01", f"{CELL}/lr=0.003"


def write(folder: Path, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name, out=folder / name, bucket=BUCKET))
    return path


def test_a_sweep_on_two_nodes_keeps_everything_in_s3(tmp_path, fault_plan, drivers, figures):
    log, scans = tmp_path / "fired.jsonl", tmp_path / "unigram-scans.jsonl"
    with s3_server(BUCKET) as aws:
        base = {**os.environ, **aws, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                "LAYERROPE_SWEEPER_UNIGRAM_LOG": str(scans)}
        head = {**base, "LAYERROPE_SWEEPER_CACHE": str(tmp_path / "cache-head")}
        second = {"LAYERROPE_SWEEPER_CACHE": str(tmp_path / "cache-second"),
                  "LAYERROPE_SWEEPER_SCRATCH": str(tmp_path / "scratch-second")}
        driver_env = {**aws, "RAY_AUTH_MODE": "token", "LAYERROPE_SWEEPER_CACHE": str(tmp_path / "cache-driver"),
                      "LAYERROPE_SWEEPER_UNIGRAM_LOG": str(scans)}
        fs = s3(aws)
        with two_nodes(head, second) as (address, temp_dir):
            nodes = raylets(temp_dir)
            assert len(nodes) == 2, nodes
            second_raylet = next(pid for pid, cmd in nodes.items() if "second_node" in cmd)
            started = time.time()
            doctor = subprocess.run(cli_cmd("doctor", "--address", address, "--storage", f"s3://{BUCKET}/sweeps",
                                            "--format", "json"), capture_output=True, text=True, timeout=300,
                                    env={**os.environ, **driver_env})
            doctor_seconds = time.time() - started
            assert doctor.returncode == 0, doctor.stderr[-3000:]
            report = json.loads(doctor.stdout)
            assert report["ok"] and len(report["nodes"]) == 2 and all(n["storage_ok"] for n in report["nodes"])
            assert not listing(fs, f"{BUCKET}/sweeps/.doctor")  # the markers were deleted

            fault_plan([{"point": HUNG, "step": 25, "kind": "hang", "once": str(tmp_path / "hang.once"), "log": str(log)},
                        {"point": OOM, "step": 15, "kind": "oom", "once": str(tmp_path / "oom.once"), "log": str(log)}])
            yaml = write(tmp_path, "s3sweep")
            driver = Driver(yaml, address, tmp_path / "logs", env=driver_env)
            drivers.append(driver)
            seen: set[str] = set()
            placed: dict[int, int] = {}  # trial process -> the raylet that started it
            killed_at = None
            deadline = time.time() + 900  # a driver that stops making progress fails the test, never hangs the suite
            while driver.running:
                assert time.time() < deadline, f"the sweep did not finish in 900 s; logs in {tmp_path / 'logs'}"
                seen.update(listing(fs, f"{BUCKET}/sweeps/s3sweep"))
                place_trials(placed, nodes)
                hang = [f for f in fired(log) if f["kind"] == "hang"]
                if hang and killed_at is None:
                    os.kill(hang[0]["pid"], signal.SIGKILL)
                    killed_at = time.time()
                time.sleep(0.3)
            summary = driver.summary()
            after = listing(fs, f"{BUCKET}/sweeps/s3sweep")
            kept_config = f"{BUCKET}/sweeps/s3sweep/weights/{CELL.replace('/', '_')}/config.json"
            kept = json.loads(fs.open_input_stream(kept_config).read()) if kept_config in after else {}

            # the uninterrupted reference, on the same cluster and storage
            fault_plan([])
            reference = Driver(write(tmp_path, "s3ref"), address, tmp_path / "logs", env=driver_env)
            drivers.append(reference)
            reference.summary()

    sweep = tmp_path / "s3sweep"
    assert summary["counts"] == {"bracketed": 1}, summary
    # the trials were pinned to the second node (its custom resource): the head's raylet started none
    assert placed, "no trial process was seen"
    assert set(placed.values()) == {second_raylet}, placed
    assert summary["storage"] == f"s3://{BUCKET}/sweeps"
    points = load_points(sweep).sort("seq").group_by("point_id").last()
    state = dict(zip(points["point_id"].to_list(), points["state"].to_list()))

    # everything a node writes is in the bucket: checkpoints (while trials ran), Tune's run state and results,
    # the best weights, the shared cache; finished trials' checkpoints are gone from it afterwards
    root = f"{BUCKET}/sweeps/s3sweep"
    checkpoints = sorted({p.split("/checkpoint_")[0] + "/checkpoint_" + p.split("/checkpoint_")[1].split("/")[0]
                          for p in seen if "/checkpoint_" in p})
    assert checkpoints and all(p.startswith(f"{root}/run-1/trial_") for p in checkpoints)
    assert not [p for p in after if "/checkpoint_" in p]
    assert any(p.startswith(f"{root}/run-1/experiment_state") for p in after)
    assert any(p.startswith(f"{root}/run-1/trial_") for p in after)
    cell_folder = CELL.replace("/", "_")
    assert {f"{root}/weights/{cell_folder}/model.safetensors", f"{root}/weights/{cell_folder}/config.json"} <= set(after)
    best = optima_cells(sweep)[0]
    assert kept["point_id"] == f"{CELL}/lr={best['best_lr']:.6g}"
    assert (sweep / "weights" / cell_folder / "model.safetensors").is_file()  # the driver's copy for `export`
    assert not [p for p in after if "/staging/" in p]
    assert [p for p in after if p.startswith(f"{root}/cache/unigram-") and p.endswith(".json")]

    # the killed trial resumed from its checkpoint (every 10 steps; killed at step 25), not from step 0
    assert killed_at is not None
    curve = load_curves(sweep, point_ids=[HUNG])
    resumed = curve.filter(pl.col("time") > killed_at)
    assert resumed.height and resumed["step"].min() > 20, resumed
    assert state[HUNG] != "failed" and state[HUNG] != "infra_failed"

    # the injected CUDA out-of-memory error: retried, never failed at that learning rate
    assert [f["point"] for f in fired(log) if f["kind"] == "oom"] == [OOM]
    assert state[OOM] in ("ok", "diverged", "stalled")
    assert summary["infra_faults"] == {"oom": 1}
    assert all(t["state"] != "FAIL" for t in ledger_trials(sweep))
    retried = load_curves(sweep, point_ids=[OOM])
    assert sorted(retried["attempt"].unique().to_list()) == [1, 2]  # a new trial after the fault, from step 0
    assert retried.filter(pl.col("attempt") == 1)["step"].max() <= 15

    # the data's unigram entropy was counted once for the sweep: by the driver; the trials read it
    counted = [json.loads(line) for line in scans.read_text().splitlines()] if scans.exists() else []
    assert [c["pid"] for c in counted] == [driver.proc.pid], counted
    assert list((tmp_path / "cache-second" / "corpus").glob("unigram-*.json"))  # read from the bucket

    # the optima equal the uninterrupted run's
    mine, ref = optima_cells(sweep)[0], optima_cells(tmp_path / "s3ref")[0]
    assert (mine["status"], mine["best_lr"]) == (ref["status"], ref["best_lr"])
    ours, theirs = objectives(sweep), objectives(tmp_path / "s3ref")
    assert ours[HUNG] == theirs[HUNG]  # resumed from its checkpoint: bit-identical
    assert ours[OOM] == pytest.approx(theirs[OOM], abs=2e-3)  # retried alone at half the micro-batch

    figures.record(
        "cluster_storage", order=14, title="Cluster: S3 storage on two raylets",
        does=("a head and a second raylet sharing only a moto S3 server: doctor, a sweep on the second node with a "
              "trial SIGKILLed mid-run and an injected CUDA out-of-memory error, against an uninterrupted run"),
        doctor_nodes=len(report["nodes"]), doctor_seconds=round(doctor_seconds, 1),
        checkpoints_seen_in_bucket=len(checkpoints), killed_trial_resumed_from_step=int(resumed["step"].min()) - 10,
        oom_state=state[OOM], unigram_scans=len(counted), optima_equal=True,
    )


def test_launch_refuses_a_storage_no_node_can_write_and_ray_client(ray_session, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    yaml = tmp_path / "bad.yaml"
    yaml.write_text(SWEEP.format(name="bad", out=tmp_path / "bad", bucket=BUCKET)
                    .replace(f's3://{BUCKET}/sweeps', str(blocker / "storage"))
                    .replace("{cpu: 1, custom: {second_node: 1}}", "{cpu: 1}"))
    proc = subprocess.run(cli_cmd("launch", str(yaml), "--address", ray_session), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "storage" in lines[0] and "cannot write" in lines[0], proc.stderr[-2000:]
    assert load_points(tmp_path / "bad").height == 0  # refused before any point was assigned

    client = subprocess.run(cli_cmd("launch", str(yaml), "--address", "ray://127.0.0.1:10001"), capture_output=True,
                            text=True, timeout=120)
    assert client.returncode == 2 and "Ray Client (ray://) is not supported" in client.stderr
    assert "--address HOST:6379" in client.stderr
