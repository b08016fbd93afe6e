"""What a point's learning rate is called (`sweeper.spec.lr_axis`): plain for AdamW, Muon's with AdamW tied by a
ratio (per size when it differs), AdamW's when it is the swept one, the other held fixed with `other_lr`."""

from __future__ import annotations

from sweeper.spec.lr_axis import lr_axis
from trials.config import MuonConfig, OptimizerConfig


def dump(**muon: object) -> dict:
    return OptimizerConfig(kind="muon", muon=MuonConfig(**muon)).model_dump(mode="json")


def test_adamw_keeps_the_plain_label() -> None:
    assert lr_axis([("L2", OptimizerConfig().model_dump(mode="json"))]) is None


def test_muon_labels() -> None:
    tied = lr_axis([("a", dump()), ("b", dump(adamw_lr_ratio=0.75)), ("c", dump())])
    assert tied is not None and tied.label == "Muon LR (AdamW = r × lr)"
    assert tied.note == "r = 1 at a, c; 0.75 at b" and tied.ratios == {"a": 1.0, "b": 0.75, "c": 1.0}
    one = lr_axis([("a", dump(adamw_lr_ratio=2)), ("b", dump(adamw_lr_ratio=2))])
    assert one is not None and one.note == "r = 2"
    adamw = lr_axis([("a", dump(swept="adamw"))])
    assert adamw is not None and adamw.label == "AdamW LR (Muon = lr / r)"
    held = lr_axis([("a", dump(other_lr=1e-3))])
    assert held is not None and held.label == "Muon LR (AdamW held at 0.001)" and held.note is None
    mixed = lr_axis([("a", dump()), ("a", OptimizerConfig().model_dump(mode="json"))])
    assert mixed is not None and mixed.label.endswith("; AdamW LR for the methods without Muon")
