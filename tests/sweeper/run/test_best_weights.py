"""Each cell keeps its best point's weights (driven without Ray, real store and ledger, real
safetensors), `sweeper export` writes them out, and `models.exported.load_exported` loads them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from models.build import build_model
from models.config import ModelConfig
from models.exported import load_exported
from sweeper.cli import main
from sweeper.records.durable import write_json_atomic
from sweeper.run.sweep_dir import manifest_for
from sweeper.run.sweep_run import SWEEP_DONE, SweepRun
from sweeper.run.weights import kept_dir, kept_point
from tests.sweeper.run.driving import end, make_sweep, member, next_config, report, result

OPT = 0.01


def loss_at(lr: float) -> float:
    return 3.0 + 0.3 * math.log(lr / OPT) ** 2


def make_state(tmp_path: Path, **overrides) -> SweepRun:
    raw = {"name": "best", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 16},
           "train": {"steps": 30, "batch_size": 4}, "lr": {"center": 1e-3, "points": 3, "refine": False}, "stack": 3}
    raw.update(overrides)
    state = make_sweep(tmp_path, raw, concurrency=1)
    write_json_atomic(state.plan.sweep_dir / "manifest.json", manifest_for(state.plan, None, "sqlite").to_json())
    state.load([])
    return state


_BASE: dict[str, dict[str, torch.Tensor]] = {}


def planted(cfg: ModelConfig, lr: float) -> dict[str, torch.Tensor]:
    """A member's weights that say which LR they belong to: the seed-0 network, its head scaled by lr."""
    key = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    if key not in _BASE:
        _BASE[key] = build_model(cfg, stack=1, seed=0).member_state_dict(0)
    weights = dict(_BASE[key])
    weights["head"] = weights["head"] * lr
    return weights


def export_like_a_trial(config: dict, cfg: ModelConfig) -> None:
    """What `trials.train.Trial.export` writes for every member when a trial finishes."""
    spec = config["spec"]
    for i, (pid, lr) in enumerate(zip(spec["point_ids"], spec["lrs"])):
        folder = Path(config["export_dir"]) / str(i)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in planted(cfg, lr).items()}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({"format": "layerrope-sweeper", "model": cfg.to_dict(), "lr": lr,
                                                        "point_id": pid, "loss": loss_at(lr), "steps": 30, "seed": 0}))


def play(state: SweepRun, tid: str, config: dict) -> None:
    spec = config["spec"]
    pids, lrs = spec["point_ids"], spec["lrs"]
    state.on_trial_start(tid, pids)
    final = [member(p, lr, "ok", eval_loss=loss_at(lr)) for p, lr in zip(pids, lrs)]
    results = [result(p, lr, "ok", loss=loss_at(lr), objective=loss_at(lr), steps=30, tokens=30 * 64)
               for p, lr in zip(pids, lrs)]
    last = {"step": 30, "tokens": 30 * 64, "train_seconds": 1.0, "done": True, "members": final, "results": results}
    if config.get("export_dir"):
        export_like_a_trial(config, state.cells[config["cell_id"]].model)
    report(state, tid, pids, last)
    end(state, tid, pids, last, None)


def test_each_cell_keeps_its_current_best_and_export_loads_it(tmp_path, capsys):
    state = make_state(tmp_path)
    sweep_dir = state.plan.sweep_dir
    (cid,) = state.cells
    kept_after_each_trial = []
    n = 0
    while (config := next_config(state, f"t{n}")) is not SWEEP_DONE:
        assert config is not None
        # staged in the sweep's storage (default DIR/ray), which every node reaches (sweeper.run.storage)
        assert config["export_dir"].startswith(str(sweep_dir.resolve() / "ray" / "staging"))
        assert config["export_members"] == "best"  # a trial writes its best ok member only (tests/trials: the real export)
        play(state, f"t{n}", config)
        kept_after_each_trial.append(kept_point(kept_dir(sweep_dir, cid)))
        n += 1
    best = state.cells[cid].point_id(state.book.decisions[cid].best.lr)
    assert n >= 2 and kept_after_each_trial[-1] == best
    # the grid starts below the optimum (1e-3 vs 0.01): each extension found a new best, which replaced the old;
    # the last trial (beyond the optimum) found none, and the kept weights stayed
    lrs = [float(p.rsplit("=", 1)[1]) for p in kept_after_each_trial]
    assert lrs == sorted(lrs) and len(set(lrs)) >= 3 and lrs[-1] == lrs[-2]
    assert sorted(p.name for p in (sweep_dir / "weights").iterdir()) == ["pre_L2_s0"]
    assert not (sweep_dir / "ray" / "staging").exists()  # staging cleared

    out = tmp_path / "exported"
    assert main(["export", str(sweep_dir), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["point_id"] for c in doc["cells"]] == [best]
    model, info = load_exported(doc["cells"][0]["folder"])
    cfg = state.cells[cid].model
    expected = planted(cfg, info["lr"])
    for name, value in model.member_state_dict(0).items():
        torch.testing.assert_close(value, expected[name])
    tokens = torch.randint(0, cfg.vocab, (2, 16))
    with torch.no_grad():
        logits = model(tokens)
    assert logits.shape == (1, 2, 16, cfg.vocab) and torch.isfinite(logits).all()


def test_export_picks_cells_and_names_unknown_ones(tmp_path, capsys):
    state = make_state(tmp_path, methods=["pre", "post"])
    n = 0
    while (config := next_config(state, f"t{n}")) is not SWEEP_DONE:
        play(state, f"t{n}", config)
        n += 1
    sweep_dir = state.plan.sweep_dir
    assert main(["export", str(sweep_dir), "--cell", "post/*", "--out", str(tmp_path / "o"), "--format", "json"]) == 0
    assert [c["cell_id"] for c in json.loads(capsys.readouterr().out)["cells"]] == ["post/L2/s0"]
    assert main(["export", str(sweep_dir), "--cell", "pre/L3/s0", "--out", str(tmp_path / "p")]) == 2
    assert "--cell pre/L3/s0: no such cell" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_keep_weights_none_writes_nothing(tmp_path, capsys):
    state = make_state(tmp_path, keep_weights="none")
    config = next_config(state, "t0")
    assert "export_dir" not in config
    play(state, "t0", config)
    assert not (state.plan.sweep_dir / "weights").exists()
    assert main(["export", str(state.plan.sweep_dir), "--out", str(tmp_path / "o")]) == 2
    assert "launched with keep_weights: none" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["keep_weights: all", "keep_weights: yes"])
def test_keep_weights_is_validated(tmp_path, capsys, bad):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: a\nmethods: [pre]\nmodel: {{depths: [2]}}\ntrain: {{steps: 1}}\n{bad}\n")
    assert main(["validate", str(path)]) == 2
    assert f"{path}:5: keep_weights: expected one of 'best' or 'none'" in capsys.readouterr().err
