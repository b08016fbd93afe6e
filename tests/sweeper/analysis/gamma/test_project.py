"""This project's exported checkpoints: gains come from the real model's `layer_gains()`.

The exports are written as the trials contract describes (`export_dir/<i>/config.json` with
`"format": "layerrope-sweeper"` + `model.safetensors` of one member's state dict).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models import ModelConfig, build_model
from sweeper.core.errors import UserError
from sweeper.analysis.gamma.checkpoints import read_checkpoint
from sweeper.analysis.gamma.report import analyze

DEPTH, WIDTH = 12, 32


def _config(scheme: str, **options) -> ModelConfig:
    return ModelConfig(scheme=scheme, width=WIDTH, depth=DEPTH, n_heads=2, vocab=32, seq_len=8, scheme_options=options)


def _export(folder: Path, cfg: ModelConfig, state: dict[str, torch.Tensor], lr: float = 1e-3) -> Path:
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    meta = {"format": "layerrope-sweeper", "model": cfg.to_dict(), "lr": lr, "point_id": f"lr={lr:g}", "outcome": "ok"}
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


def test_layerrope_gains_go_through_the_model(planted, tmp_path: Path) -> None:
    cfg = _config("layerrope")
    model = build_model(cfg, stack=1, seed=0)
    state = model.member_state_dict(0)
    rng = np.random.default_rng(0)
    planted_scalars = {"attn_in": -0.2, "attn_out": 0.1, "mlp_in": -0.37, "mlp_out": 0.25}
    gammas = {}
    for site, b_mag in planted_scalars.items():
        p = f"site_gains.sites.{site}."
        gammas[site] = 1.0 + 0.2 * rng.standard_normal(WIDTH)
        state[p + "gamma"] = torch.tensor(gammas[site], dtype=torch.float32)
        state[p + "a_mag"] = torch.tensor(0.1)
        state[p + "b_mag"] = torch.tensor(b_mag)
        state[p + "a_rot"] = torch.tensor(0.3)
        state[p + "b_rot"] = torch.tensor(0.8)
    (model_gains,) = read_checkpoint(_export(tmp_path / "lr", cfg, state))
    assert model_gains.source == "layerrope-sweeper" and model_gains.name == "layerrope L12 lr=0.001"
    assert set(model_gains.sites) == set(planted_scalars)
    for site, b_mag in planted_scalars.items():
        expected = planted.layerrope(gammas[site].astype(np.float32).astype(np.float64), DEPTH, 0.1, b_mag, 0.3, 0.8)
        np.testing.assert_allclose(model_gains.sites[site].gains, expected, rtol=1e-4, atol=1e-5)
    results = analyze([model_gains], "all")["models"][0]["sites"]
    for site, b_mag in planted_scalars.items():
        assert results[site]["schedule"]["b"] == pytest.approx(b_mag, abs=1e-5)
        assert results[site]["schedule"]["r2"] == pytest.approx(1.0, abs=1e-6)


def test_pre_norm_per_layer_gains_and_lns_factor(planted, tmp_path: Path) -> None:
    rising = planted.gains("rising", DEPTH, WIDTH)
    cfg = _config("pre")
    state = build_model(cfg, stack=1, seed=0).member_state_dict(0)
    for i in range(DEPTH):
        state[f"blocks.{i}.gains.mlp_in"] = torch.tensor(rising[i], dtype=torch.float32)
    (pre,) = read_checkpoint(_export(tmp_path / "pre", cfg, state))
    np.testing.assert_allclose(pre.sites["mlp_in"].gains, rising, rtol=1e-6)

    # LNS: the effective input gain carries the fixed 1/sqrt(l) factor on top of the (unit) gain
    cfg = _config("lns")
    (lns,) = read_checkpoint(_export(tmp_path / "lns", cfg, build_model(cfg, stack=1, seed=0).member_state_dict(0)))
    schedule = analyze([lns])["models"][0]["sites"]["mlp_in"]["schedule"]
    assert schedule["b"] == pytest.approx(-0.5, abs=1e-6) and schedule["r2"] == pytest.approx(1.0, abs=1e-9)


def test_mixln_sites_keep_only_their_layers(tmp_path: Path) -> None:
    cfg = _config("mixln")
    (mix,) = read_checkpoint(_export(tmp_path / "mix", cfg, build_model(cfg, stack=1, seed=0).member_state_dict(0)))
    post_layers = round(0.25 * DEPTH)
    assert mix.sites["mlp_out"].depth.tolist() == list(range(1, post_layers + 1))
    assert mix.sites["mlp_in"].depth.tolist() == list(range(post_layers + 1, DEPTH + 1))
    assert not any(np.isnan(s.gains).any() for s in mix.sites.values())


def test_a_folder_of_exports_reads_every_member(tmp_path: Path) -> None:
    cfg = _config("pre")
    state = build_model(cfg, stack=1, seed=0).member_state_dict(0)
    for i, lr in enumerate((1e-3, 3e-3)):
        _export(tmp_path / "export" / str(i), cfg, state, lr=lr)
    models = read_checkpoint(tmp_path / "export")
    assert [m.name for m in models] == ["pre L12 lr=0.001", "pre L12 lr=0.003"]
    assert models[1].meta["lr"] == 3e-3


def test_weights_that_do_not_fit_the_config(tmp_path: Path) -> None:
    cfg = _config("pre")
    state = build_model(cfg, stack=1, seed=0).member_state_dict(0)
    state.pop("head")
    with pytest.raises(UserError, match="do not fit the model"):
        read_checkpoint(_export(tmp_path / "bad", cfg, state))
    bad = tmp_path / "badcfg"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"format": "layerrope-sweeper", "model": {"depth": 2, "bogus": 1}}))
    save_file({"x": torch.ones(1)}, str(bad / "model.safetensors"))
    with pytest.raises(UserError, match="not a valid ModelConfig"):
        read_checkpoint(bad)


def test_layerrope_at_initialisation_has_its_init_schedule(tmp_path: Path) -> None:
    cfg = _config("layerrope", beta_init=-0.5)
    (init,) = read_checkpoint(_export(tmp_path / "init", cfg, build_model(cfg, stack=1, seed=0).member_state_dict(0)))
    site = analyze([init])["models"][0]["sites"]["mlp_in"]
    assert site["schedule"]["b"] == pytest.approx(-0.5, abs=1e-6)
    assert site["magnitude"]["rms"][0] == pytest.approx(1.0, abs=1e-6)
    assert math.isclose(site["direction"]["cosine"][0][0], 1.0, abs_tol=1e-9)


def test_sweep_exports_are_found_and_best_keeps_each_cells_best_member(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for scheme in ("pre", "layerrope"):
        cfg = _config(scheme)
        state = build_model(cfg, stack=1, seed=0).member_state_dict(0)
        for trial, members in (("t1", ((1e-3, 3.1, "ok"), (3e-3, 2.9, "ok"))), ("t2", ((1e-2, None, "diverged"),))):
            for i, (lr, loss, outcome) in enumerate(members):
                folder = _export(sweep / "exports" / f"{scheme}_L12_s0" / trial / str(i), cfg, state, lr=lr)
                meta = json.loads((folder / "config.json").read_text())
                meta.update(point_id=f"{scheme}/L12/s0/lr={lr:g}", loss=loss, outcome=outcome)
                (folder / "config.json").write_text(json.dumps(meta))
    (sweep / "manifest.json").write_text("{}")
    every = read_checkpoint(sweep)
    assert len(every) == 6
    assert [m.name for m in every if m.name.startswith("pre")] == ["pre/L12/s0/lr=0.001", "pre/L12/s0/lr=0.003", "pre/L12/s0/lr=0.01"]
    diverged = next(m for m in every if m.name == "pre/L12/s0/lr=0.01")
    assert any("diverged" in n for n in diverged.notes)
    best = read_checkpoint(sweep / "exports", best=True)
    assert [m.name for m in best] == ["layerrope/L12/s0/lr=0.003", "pre/L12/s0/lr=0.003"]


def test_trial_checkpoint_folder_points_to_the_exports(tmp_path: Path) -> None:
    step = tmp_path / "ckpt" / "step-000000200"
    step.mkdir(parents=True)
    for name in ("model.safetensors", "optimizer.safetensors"):
        save_file({"x": torch.ones(1)}, str(step / name))
    (step / "state.json").write_text("{}")
    for folder in (step, tmp_path / "ckpt"):
        with pytest.raises(UserError, match="trial checkpoint"):
            read_checkpoint(folder)
