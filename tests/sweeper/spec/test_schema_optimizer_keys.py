"""`train.optimizer.kind: muon` with its settings and `train.schedule.cooldown` in sweep files, through
`sweeper validate` (in process: the same entry point the command line runs): accepted with their values,
refused with the key and the allowed values named, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.cli import main

SWEEP = """\
name: muon
output: {out}
methods: [pre, layerrope]
model: {{width: 32, heads: 2, depths: [2], seq_len: 32}}
train:
  steps: 20
  batch_size: 4
  optimizer: {optimizer}
  schedule: {schedule}
lr: {{center: 8e-3, points: 3}}
"""
PARCAE_OPTIMIZER = "{kind: muon, betas: [0.8, 0.95], eps: 1.0e-10, weight_decay: 0, muon: {weight_decay: 0.2}}"
WSD = "{warmup: 0, decay: linear, cooldown: 0.5, final_fraction: 0}"


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], optimizer: str = PARCAE_OPTIMIZER,
             schedule: str = WSD) -> tuple[int, str, str]:
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(out=tmp_path / "out", optimizer=optimizer, schedule=schedule))
    code = main(["validate", str(path), "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_parcae_recipe_is_accepted_with_its_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = validate(tmp_path, capsys)
    assert code == 0, err
    train = json.loads(out)["config"]["train"]
    assert train["optimizer"]["kind"] == "muon" and train["optimizer"]["betas"] == [0.8, 0.95]
    muon = train["optimizer"]["muon"]
    assert muon["weight_decay"] == 0.2 and muon["cautious"] and muon["weight_decay_schedule"] == "linear"
    assert muon["swept"] == "muon" and muon["adamw_lr_ratio"] == 1.0 and muon["momentum"] == 0.95
    assert train["schedule"] == {"warmup": 0.0, "decay": "linear", "final_fraction": 0.0, "cooldown": 0.5}
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("optimizer", "schedule", "needle"),
    [
        ("{kind: sgd}", WSD, "train.optimizer.kind: expected one of 'adamw' or 'muon' (got 'sgd')"),
        ("{kind: muon, muon: {swept: both}}", WSD, "train.optimizer.muon.swept: expected one of 'muon' or 'adamw'"),
        ("{kind: muon, muon: {lr: 0.01}}", WSD, "train.optimizer.muon.lr: unknown key 'lr' (allowed: adamw_lr_ratio,"),
        ("{kind: muon, muon: {other_lr: 1.0e-3, adamw_lr_ratio: 2}}", WSD, "train.optimizer.muon: adamw_lr_ratio (2.0)"),
        ("{kind: muon, muon: {ns_coefficients: [[1, 2, 3], [1, 2, 3]]}}", WSD, "one per iteration (ns_steps = 5); got 2"),
        (PARCAE_OPTIMIZER, "{decay: constant, cooldown: 0.5}", "train.schedule: cooldown: the decay over the last steps"),
        (PARCAE_OPTIMIZER, "{decay: linear, cooldown: -1}", "train.schedule.cooldown"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], optimizer: str,
                                                  schedule: str, needle: str) -> None:
    code, _, err = validate(tmp_path, capsys, optimizer, schedule)
    assert code == 2 and needle in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
