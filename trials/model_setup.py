"""The model a trial builds, checked against its data: the family entry of `model.family`
(`models.family`), the data kind it trains on, and the training recipe's defaults of the family's
options (DeiT's drop-path). No torch."""

from __future__ import annotations

from dataclasses import replace

from models.config import ModelConfig
from models.family import FamilySpec, families, family_names, get_family
from trials.config import DEIT_DROP_PATH, DataConfig, TrainConfig
from trials.errors import TrialInputError

IMAGE_SOURCES = ("images", "builtin_images")


def trial_family(model: ModelConfig, data: DataConfig) -> FamilySpec:
    """The family entry of `model.family`, which must train on `data`'s kind (tokens or images);
    TrialInputError naming the allowed families or the mismatch."""
    try:
        family = get_family(model.family)
    except ValueError:
        *head, last = family_names()
        raise TrialInputError(f"model.family {model.family!r}: expected {', '.join(head)} or {last}") from None
    if family.requires_image_data != (data.source in IMAGE_SOURCES):
        image_families = " / ".join(f.name for f in families() if f.requires_image_data)
        raise TrialInputError(f"data.source {data.source!r}: the {image_families} family trains on image data and only "
                              "it does")
    return family


def recipe_model(model: ModelConfig, train: TrainConfig) -> ModelConfig:
    """The model a trial builds: `model`, plus DeiT's drop-path (0.1) when the image recipe is `deit`,
    the family has the option and `model.extra` does not set it itself."""
    if train.vision is None or train.vision.recipe != "deit" or "drop_path" in model.extra:
        return model
    if not get_family(model.family).has_option("drop_path"):
        return model
    return replace(model, extra={**model.extra, "drop_path": DEIT_DROP_PATH})
