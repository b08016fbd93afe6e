"""The model a trial builds, from its family entry: unknown families and the wrong kind of data are
refused with a one-line TrialInputError, and DeiT's drop-path goes only to a family that has the option."""

from __future__ import annotations

import pytest

from models import named_config
from trials.config import DEIT_DROP_PATH, DataConfig, TrainConfig, VisionConfig
from trials.errors import TrialInputError
from trials.model_setup import recipe_model, trial_family

TOKENS, IMAGES = DataConfig(source="builtin"), DataConfig(source="builtin_images")


def test_each_family_with_its_kind_of_data():
    assert trial_family(named_config("micro"), TOKENS).name == "llama"
    assert trial_family(named_config("parcae-tiny"), TOKENS).samples_loops
    assert trial_family(named_config("vit-tiny"), IMAGES).requires_image_data


@pytest.mark.parametrize(("model", "data"), [("vit-tiny", TOKENS), ("micro", IMAGES), ("parcae-tiny", IMAGES)])
def test_the_wrong_kind_of_data_is_refused(model, data):
    with pytest.raises(TrialInputError, match=f"^data.source '{data.source}': the vit family trains on image data "
                                              "and only it does$"):
        trial_family(named_config(model), data)


def test_an_unknown_family_names_the_allowed_ones():
    with pytest.raises(TrialInputError, match=r"^model.family 'gpt': expected llama, looped or vit$"):
        trial_family(named_config("micro", family="gpt"), TOKENS)


def test_deit_recipe_sets_drop_path_only_where_the_family_has_it():
    deit, plain = TrainConfig(steps=1, vision=VisionConfig(recipe="deit")), TrainConfig(steps=1)
    vit = named_config("vit-tiny")
    assert recipe_model(vit, deit).extra["drop_path"] == DEIT_DROP_PATH
    assert recipe_model(vit, plain) is vit
    given = named_config("vit-tiny", extra={**vit.extra, "drop_path": 0.3})
    assert recipe_model(given, deit) is given
    llama = named_config("micro")
    assert recipe_model(llama, deit) is llama
