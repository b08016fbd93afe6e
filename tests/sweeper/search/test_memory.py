"""`stack: auto`'s memory model (`trials.footprint`, `sweeper.search.memory`): its terms, where the device's
memory comes from, measured peaks preferred to the formula, and the plan-time refusal of a cell that
cannot fit one member (naming the micro-batch that would). Pure: no torch, no Ray, no GPU."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.search.memory import (DEFAULT_GPU_BYTES, DeviceMemory, GiB, auto_stack, cell_shape, check_fits, device_memory, estimate,
                                   fitting_micro_batch)
from sweeper.core.errors import UserError
from sweeper.search.planner import build_plan
from sweeper.spec.schema import validate_data
from trials.footprint import (CUDA_CONTEXT_BYTES, FRAGMENTATION, MEASURED_HEADROOM, TrialShape, footprint, load_measured,
                              measured_key, record_measured, shape_key)

SWEEPS = Path(__file__).resolve().parents[3] / "sweeps"


def gpu_sweep(**train: object) -> dict:
    """depth.yaml's shape at depth 512 (width 128, 256 tokens per sequence, 32,100 words), bf16 on a GPU."""
    return {
        "name": "mem", "methods": ["pre"],
        "model": {"width": 128, "heads": 4, "depths": [512], "seq_len": 256, "vocab": 32100},
        "data": {"source": "synthetic", "synthetic_vocab": 32100},
        "train": {"steps": 10, "batch_size": 512, "device": "cuda", "dtype": "bf16", **train},
        "resources": {"cpu": 2, "gpu": 0.5},
        "stack": "auto",
    }


def cell_of(raw: dict, tmp_path: Path):
    return build_plan(validate_data(raw), output=str(tmp_path / "sweep")).cells[0]


def test_the_terms_of_a_gpu_trial_at_depth_512(tmp_path: Path) -> None:
    """Every term the issue names, checked with the numbers of depth.yaml's deepest cell (micro-batch 16)."""
    cell = cell_of(gpu_sweep(micro_batch=16), tmp_path)
    model = estimate(cell).model
    d, layers, tokens, vocab = 128, 512, 16 * 256, 32100
    assert model.per_member["weights_grads_adam"] == 16 * cell.params
    assert model.per_member["activations"] == 48 * d * tokens * layers  # 96 bytes in fp32, halved in bf16
    assert model.per_member["autocast_copies"] == 2 * (layers * (4 * d * d + 3 * d * cell.model.hidden) + d * vocab)
    assert model.per_member["loss"] == 6 * d * vocab + 4 * tokens * d  # the head's bf16 copy and fp32 gradient
    # the GPU chunk holds the K members' rows together (2^28 logits at most: its rows shrink as K grows)
    assert model.chunk(1) == 9 * tokens * vocab  # 4,096 rows of one member: 1.1 GiB
    assert model.chunk(3) == 9 * 2**28  # capped: 2.25 GiB, the "~2.2-2.5 GiB, not 1"
    assert model.context == CUDA_CONTEXT_BYTES == GiB
    held = 3 * sum(model.per_member.values()) + 9 * 2**28
    assert model.total(3) == pytest.approx(held * (1 + FRAGMENTATION) + GiB, abs=4)
    big = estimate(cell_of(gpu_sweep(micro_batch=512), tmp_path / "big")).model
    assert big.chunk(1) / GiB == pytest.approx(2.25, rel=0.01)


def test_a_muon_cell_counts_one_momentum_buffer_for_its_hidden_matrices(tmp_path: Path) -> None:
    """`cell_shape` gives the memory model Muon's parameters (the blocks' matrices, one buffer each instead of
    AdamW's two moments); an AdamW cell's shape is what it was (params_muon 0, the same measured-peak key)."""
    adamw = cell_of(gpu_sweep(micro_batch=16), tmp_path / "adamw")
    muon = cell_of(gpu_sweep(micro_batch=16, optimizer={"kind": "muon"}), tmp_path / "muon")
    d, layers = 128, 512
    assert cell_shape(adamw).params_muon == 0
    assert cell_shape(muon).params_muon == layers * (4 * d * d + 3 * d * muon.model.hidden)
    held = estimate(muon).model.per_member["weights_grads_adam"]
    assert held == 16 * muon.params - 4 * cell_shape(muon).params_muon < estimate(adamw).model.per_member["weights_grads_adam"]


def test_an_h200_holds_more_members_than_the_old_80_gib_guess(tmp_path: Path) -> None:
    cell = cell_of(gpu_sweep(micro_batch=16), tmp_path)
    h200 = device_memory(140.4)
    assert auto_stack(cell, 8, 8, None, 1, device=h200) > auto_stack(cell, 8, 8, None, 1)
    # half a GPU is half the device; each process pays its own context
    est = estimate(cell, device=h200)
    assert est.budget == pytest.approx(0.5 * 140.4 * GiB)
    k = est.fit()
    assert est.bytes(k) <= est.budget < est.bytes(k + 1)


def test_the_device_memory_comes_from_the_yaml_then_a_bench_measurement_then_this_gpu_then_the_default() -> None:
    measured = {"k": {"device_total_bytes": 150 * GiB, "device": "NVIDIA H200", "peaks": {"1": GiB}}}
    assert device_memory(96.0, measured, (40 * GiB, "A100")).total_bytes == 96 * GiB
    on_h200 = device_memory(None, measured, (150 * GiB, "NVIDIA H200"))
    assert on_h200.total_bytes == 150 * GiB and "sweeper bench" in on_h200.source and on_h200.model == "NVIDIA H200"
    assert device_memory(None, measured, model="NVIDIA H200").total_bytes == 150 * GiB  # resources.gpu_model
    # an H200's measurement is not this A100's, nor a GPU nobody named
    assert device_memory(None, measured, (40 * GiB, "A100")).total_bytes == 40 * GiB
    assert device_memory(None, measured).total_bytes == DEFAULT_GPU_BYTES
    assert device_memory(None, measured, (40 * GiB, "A100"), model="NVIDIA H100").total_bytes == DEFAULT_GPU_BYTES
    assert device_memory(None, {}, (40 * GiB, "A100")).total_bytes == 40 * GiB
    default = device_memory(None, {}, None)
    assert default.total_bytes == DEFAULT_GPU_BYTES and "resources.gpu_memory_gb" in default.source


H200 = DeviceMemory(140 * GiB, "test", "NVIDIA H200")


def test_measured_peaks_replace_the_formula(tmp_path: Path) -> None:
    cell = cell_of(gpu_sweep(micro_batch=16, compile=True), tmp_path)
    shape = cell_shape(cell)
    key = measured_key("NVIDIA H200", shape, "pre", True)
    assert key == f"NVIDIA H200|{shape_key(shape, 'pre', True)}"
    path = tmp_path / "peaks.json"
    record_measured(key, 2, 10 * GiB, device="NVIDIA H200", device_total_bytes=140 * GiB, describe="one", path=path)
    measured = load_measured(path)
    est = estimate(cell, device=H200, measured=measured)
    model = est.model
    # one stack size measured: the formula scaled by measured / predicted at that size
    assert est.source == "measured"
    assert est.bytes(2) == int(10 * GiB * (1 + MEASURED_HEADROOM))
    assert est.bytes(4) == int(model.total(4) * 10 * GiB / model.total(2) * (1 + MEASURED_HEADROOM))
    # two: the line through them (per member 3 GiB, per trial 4 GiB)
    record_measured(key, 4, 16 * GiB, device="NVIDIA H200", device_total_bytes=140 * GiB, describe="one", path=path)
    est = estimate(cell, device=H200, measured=load_measured(path))
    assert est.bytes(6) == int(22 * GiB * (1 + MEASURED_HEADROOM))
    # another shape (another micro-batch), or the same on a CPU, is not this measurement
    other = cell_of(gpu_sweep(micro_batch=8, compile=True), tmp_path / "other")
    assert estimate(other, device=H200, measured=load_measured(path)).source == "model"
    # nor the same shape on an H100, or on a GPU nobody named: the formula sizes those stacks
    h100 = DeviceMemory(80 * GiB, "test", "NVIDIA H100 80GB HBM3")
    assert estimate(cell, device=h100, measured=load_measured(path)).source == "model"
    assert estimate(cell, device=DeviceMemory(140 * GiB, "test"), measured=load_measured(path)).source == "model"
    # an entry of an older cache (keyed by the shape alone, whatever device it names) is an unknown device's
    record_measured(shape_key(shape, "pre", True), 2, GiB, device="NVIDIA H100 80GB HBM3",
                    device_total_bytes=80 * GiB, describe="old", path=path)
    assert estimate(cell, device=h100, measured=load_measured(path)).source == "model"
    assert json.loads(path.read_text())[key]["peaks"] == {"2": 10 * GiB, "4": 16 * GiB}


def test_the_bench_and_the_planner_give_one_shape_one_key(tmp_path: Path) -> None:
    """`sweeper bench --device cuda` records under the key the planner looks up for the same settings."""
    from sweeper.bench.trial import BenchSettings, trial_shape

    cell = cell_of(gpu_sweep(micro_batch=16, compile=True), tmp_path)
    bench = BenchSettings(method="pre", width=128, depth=512, heads=4, stack=3, compile=True, device="cuda", dtype="bf16",
                          seq_len=256, batch=512, vocab=32100, micro_batch=16)
    assert trial_shape(bench) == cell_shape(cell)
    assert shape_key(trial_shape(bench), bench.method, bench.compile) == shape_key(cell_shape(cell), "pre", True)


def test_evaluation_and_graphs_are_counted() -> None:
    base = dict(family="llama", params=10**7, params_matmul=9 * 10**6, width=128, layers=8, vocab=32000, seq_len=256,
                micro_sequences=16, bf16=True, cuda=True, fused_loss=True)
    eager, graphs = footprint(TrialShape(**base)), footprint(TrialShape(**base, cuda_graphs=True))
    # the pool keeps the step's working set reserved, and the eager evaluation comes beside it
    assert graphs.total(4) > eager.total(4)
    assert graphs.chunk(4) == int(eager.chunk(4) * 2.1)  # the pool's copy (x 1.1) and evaluation's
    # unfused, an evaluation of a ViT-sized head costs less than its training step: no extra term
    assert "eval_above_train" not in footprint(TrialShape(**{**base, "fused_loss": False})).per_member


def test_stack_auto_refuses_a_cell_that_cannot_fit_and_names_the_micro_batch_that_would(tmp_path: Path) -> None:
    cell = cell_of(gpu_sweep(), tmp_path)  # the whole 512-sequence batch at once: ~300 GiB of activations
    with pytest.raises(UserError) as err:
        check_fits([cell], device=device_memory(80.0))
    text = str(err.value)
    micro = fitting_micro_batch(cell, device=device_memory(80.0))
    assert micro is not None and f"train.micro_batch: {micro} would fit" in text and "L512 (pre)" in text
    # it is the largest divisor of the batch that fits
    assert estimate(cell, device=device_memory(80.0), micro_batch=micro).fit() >= 1
    assert estimate(cell, device=device_memory(80.0), micro_batch=2 * micro).fit() == 0
    check_fits([cell_of(gpu_sweep(micro_batch=micro), tmp_path / "fits")], device=device_memory(80.0))
    # a CPU cell alone on a host of 1 GiB cannot fit either
    cpu = replace(cell, resources={"CPU": 1.0})
    with pytest.raises(UserError, match="half the host"):
        check_fits([cpu], host_memory_bytes=GiB)


def test_launch_refuses_with_exit_2_at_planning_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = gpu_sweep()
    raw["resources"]["gpu_memory_gb"] = 80
    path = tmp_path / "big.yaml"
    path.write_text(json.dumps(raw))
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "cannot fit one member" in err and "train.micro_batch:" in err and "Traceback" not in err
    assert main(["validate", str(path)]) == 2  # validation is never laxer than launch's planning
    assert "cannot fit one member" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_ladder_yaml_plans_on_an_80_gib_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", str(SWEEPS / "ladder.yaml"), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    by_size = {c["size"]: c["stack_auto"] for c in plan["cells"]}
    assert set(by_size) == {"58M", "130M", "350M", "1.3B"}
    for size, stack in by_size.items():
        assert stack["stack"] >= 1 and stack["stack_bytes"] <= stack["budget_bytes"], size
