"""The WSD / trapezoid schedule (`schedule.cooldown`) at its corners, and the config dumps that keep existing
sweeps' fingerprints and checkpoint resume keys as they were. Pure Python."""

from __future__ import annotations

import math

import pytest

from trials.config import OptimizerConfig, ScheduleConfig, TrainConfig
from trials.schedule import LRSchedule


def test_parcae_wsd_corners() -> None:
    """No warmup, constant, linear cooldown to 0 over the last 50% of 1000 steps."""
    s = LRSchedule.from_config(ScheduleConfig(warmup=0, decay="linear", cooldown=0.5, final_fraction=0.0), 1000)
    assert s.warmup == 0 and s.cooldown == 500 and s.decay_start == 500
    assert s.factor(0) == 1.0  # first step: the peak, no warmup
    assert s.factor(499) == 1.0 and s.factor(500) == 1.0  # the last constant step, the start of the cooldown
    assert s.factor(501) == pytest.approx(1 - 1 / 499)
    assert s.factor(750) == pytest.approx(1 - 250 / 499)
    assert s.factor(999) == 0.0  # last step: final_fraction


def test_wsd_with_warmup_steps_cosine_cooldown_and_a_floor() -> None:
    s = LRSchedule.from_config(ScheduleConfig(warmup=10, decay="cosine", cooldown=40, final_fraction=0.1), 100)
    assert [s.factor(i) for i in (0, 9)] == pytest.approx([0.1, 1.0])  # warmup (step + 1) / 10
    assert all(s.factor(i) == 1.0 for i in range(10, 61))  # constant until the cooldown starts at step 60
    assert s.factor(80) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 20 / 39)))
    assert s.factor(99) == pytest.approx(0.1)
    # A cooldown longer than what follows the warmup starts where the warmup ends.
    long = LRSchedule.from_config(ScheduleConfig(warmup=10, decay="linear", cooldown=0.95, final_fraction=0.0), 100)
    assert long.decay_start == 10 and long.factor(10) == 1.0 and long.factor(99) == 0.0


def test_without_cooldown_the_decay_spans_everything_after_warmup() -> None:
    plain = ScheduleConfig(warmup=5, decay="linear", final_fraction=0.0)
    s = LRSchedule.from_config(plain, 26)
    assert s.cooldown is None and s.decay_start == 5
    assert [s.factor(i) for i in (4, 5, 15, 25)] == pytest.approx([1.0, 1.0, 0.5, 0.0])


def test_cooldown_needs_a_decay() -> None:
    with pytest.raises(ValueError, match="cooldown: the decay over the last steps needs decay: linear or cosine"):
        ScheduleConfig(decay="constant", cooldown=0.5)
    with pytest.raises(ValueError, match="cooldown"):
        ScheduleConfig(cooldown=0)


def test_adamw_and_plain_schedules_dump_as_before() -> None:
    """Cell fingerprints and checkpoint resume keys hash these dumps: the new keys appear only when used."""
    dump = TrainConfig(steps=10).model_dump(mode="json")
    assert dump["optimizer"] == {"betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0}
    assert dump["schedule"] == {"warmup": 0.05, "decay": "cosine", "final_fraction": 0.1}
    muon = TrainConfig(steps=10, optimizer=OptimizerConfig(kind="muon"),
                       schedule=ScheduleConfig(cooldown=0.5)).model_dump(mode="json")
    assert muon["optimizer"]["kind"] == "muon" and muon["optimizer"]["muon"]["weight_decay"] == 0.2
    assert muon["schedule"]["cooldown"] == 0.5
    assert TrainConfig.model_validate(muon).model_dump(mode="json") == muon  # round trip
