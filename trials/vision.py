"""Image classification batches for the ViT family: the training recipe's data side, and metrics.

A trial's recipe (`train.vision`, resolved by `VisionConfig.resolved()`: `recipe: deit` or every
ingredient off) decides what a training batch goes through:

- no augmentation: the views of the stored images (uint8 `[B, S, S, C]`: the evaluation view, see
  `trials.data.images`) become float `[B, C, S, S]` on [0, 1], normalised; targets are class ids. This
  path needs neither timm nor torchvision (the built-in image set trains with it on a bare install);
- any augmentation (crop, flip, RandAugment, random erasing, mixup / cutmix): DeiT's pipeline from
  timm and torchvision (`trials.deit`): the per-image stage in the stream (`AugmentedStream`), the
  batch stage (normalisation, random erasing, mixup / cutmix with label smoothing) on the device;
- label smoothing: inside mixup's soft targets when mixing is on; without mixing, torch's
  `cross_entropy(label_smoothing=eps)` in the model's loss (`loss_options`), the same number as
  timm's `LabelSmoothingCrossEntropy`;
- normalisation (`normalize`): ImageNet's mean and std (`imagenet`, DeiT's, timm's
  `IMAGENET_DEFAULT_MEAN` / `_STD`; one grey channel: their ITU-R 601 luminance mix), or the training
  images' own (`dataset`).

`open_image_data` assembles a trial's image side from its recipe: which cache sides to read
(`cache_sides`), the stream, the augmenter, the batch stage and the evaluation batches.

The model's drop-path decisions of step `s` come from their own seed (`drop_seed`), so a resumed trial
makes exactly the same draws. Evaluation: the held-out images without augmentation, cross-entropy
without smoothing, and top-1 accuracy; both are means over images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trials.config import VisionRecipe
from trials.data.images import ImageArrays, ImageBatchStream, ImageSource, eval_side
from trials.deit import AugmentedStream, BatchMixer, ImageAugmenter, step_seed
from trials.errors import TrialInputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LUMINANCE = (0.299, 0.587, 0.114)  # ITU-R 601, as `trials.data.images.to_grey`


def to_float_images(batch: Tensor) -> Tensor:
    """uint8 `[B, H, W, C]` -> float `[B, C, H, W]` on [0, 1]."""
    return batch.permute(0, 3, 1, 2).float().div_(255.0)


def normalisation(recipe: VisionRecipe, arrays: ImageArrays) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (mean, std) on [0, 1] that the recipe normalises with (see the module docstring)."""
    if recipe.normalize == "dataset":
        return tuple(arrays.mean), tuple(arrays.std)
    if arrays.channels == 3:
        return IMAGENET_MEAN, IMAGENET_STD
    return (sum(w * m for w, m in zip(LUMINANCE, IMAGENET_MEAN)),), (sum(w * s for w, s in zip(LUMINANCE, IMAGENET_STD)),)


def cache_sides(recipe: VisionRecipe, image_size: int) -> tuple[int, int]:
    """(training, evaluation) shorter sides of the cached images for a model at `image_size`: the
    evaluation resize `floor(image_size / crop_pct)`; with a random crop, training images at
    `cache_size` (default 8/7 of image_size: 256 for 224), else at the evaluation side (their view is
    then the evaluation view)."""
    val_side = eval_side(image_size, recipe.crop_pct)
    if not recipe.crop:
        return val_side, val_side
    train_side = recipe.cache_size if recipe.cache_size is not None else image_size * 8 // 7
    if train_side < image_size:
        raise TrialInputError(f"train.vision.cache_size: {train_side} is smaller than the model's image_size {image_size}; "
                              "the random-resized-crop samples the cached image")
    return train_side, val_side


class ClassificationBatches:
    """Turns the image stream's batches into model inputs and targets (see the module docstring).
    `micro_batch`: `train.micro_batch`, the device batch that `mix_per: device` mixes apart."""

    def __init__(self, arrays: ImageArrays, recipe: VisionRecipe, classes: int, device: torch.device, seed: int,
                 micro_batch: int | None = None) -> None:
        self.recipe, self.classes, self.device, self.seed = recipe, classes, device, seed
        self.mean, self.std = normalisation(recipe, arrays)
        self.mixer = BatchMixer(recipe, classes, self.mean, self.std, device, micro_batch=micro_batch)

    def drop_seed(self, step: int) -> int:
        """The seed of step `step`'s drop-path decisions (distinct from the augmentation's)."""
        return step_seed(self.seed, step, 3)

    def eval_inputs(self, images_u8: Tensor) -> Tensor:
        x = to_float_images(images_u8.to(self.device))
        return (x - self.mixer.mean) / self.mixer.std

    def train_inputs(self, images: np.ndarray | Tensor, labels: np.ndarray | Tensor, step: int) -> tuple[Tensor, Tensor]:
        """(images `[B, C, H, W]`, targets: class ids `[B]` or probabilities `[B, classes]`) for step
        `step`. `images`: the views, uint8 `[B, S, S, C]`, or the augmented uint8 `[B, C, S, S]`."""
        x = torch.from_numpy(images) if isinstance(images, np.ndarray) else images
        y = torch.from_numpy(labels) if isinstance(labels, np.ndarray) else labels
        if isinstance(images, np.ndarray):  # not augmented: channels last as stored
            x = x.permute(0, 3, 1, 2)
        return self.mixer(x, y, step_seed(self.seed, step, 1))

    def loss_options(self, targets: Tensor) -> dict[str, Any]:
        """Keyword arguments of the model's loss: label smoothing for class-id targets (mixed targets
        carry it already)."""
        if targets.dim() == 1 and self.recipe.label_smoothing > 0:
            return {"label_smoothing": self.recipe.label_smoothing}
        return {}


def top1_correct(logits: Tensor, labels: Tensor) -> Tensor:
    """Correct predictions per member `[K]` for logits `[K, B, classes]`."""
    return (logits.argmax(dim=-1) == labels.unsqueeze(0)).sum(dim=1).float()


@dataclass
class ImageData:
    """A trial's image side: the training stream (augmented or not), the evaluation batches on the
    device (normalised inputs, class ids) and the batch stage."""

    stream: ImageBatchStream | AugmentedStream
    eval_data: list[tuple[Tensor, Tensor]]
    batches: ClassificationBatches


def open_image_data(source: ImageSource, recipe: VisionRecipe, *, image_size: int, channels: int, classes: int,
                    batch_size: int, eval_batches: int, seed: int, device: torch.device,
                    micro_batch: int | None = None) -> ImageData:
    """Everything a ViT trial reads, from its recipe (see the module docstring); a missing `images`
    extra fails here, before training."""
    train_side, _ = cache_sides(recipe, image_size)
    arrays = source.arrays(image_size, channels, crop_pct=recipe.crop_pct, train_side=train_side)
    batches = ClassificationBatches(arrays, recipe, classes, device, seed, micro_batch=micro_batch)
    stream: ImageBatchStream | AugmentedStream = ImageBatchStream(arrays, batch_size, seed, repeats=recipe.repeats)
    if recipe.crop or recipe.flip > 0 or recipe.randaugment:
        augmenter = ImageAugmenter(recipe, image_size, channels, batches.mean)
        augmenter.transform  # noqa: B018  # built now: a missing `images` extra fails before training
        stream = AugmentedStream(stream, augmenter, seed, recipe.workers)
    eval_data = [
        (batches.eval_inputs(torch.from_numpy(x)), torch.from_numpy(y).to(device))
        for x, y in source.eval_batches(eval_batches, batch_size, image_size, channels, crop_pct=recipe.crop_pct)
    ]
    return ImageData(stream, eval_data, batches)
