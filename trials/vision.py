"""Image classification batches for the ViT family: the training recipe's data side, and metrics.

A trial's recipe (`train.vision`, resolved by `VisionConfig.resolved()`: `recipe: deit` or every
ingredient off) decides what a training batch goes through:

- no augmentation: the stored uint8 images `[B, H, W, C]` become float `[B, C, H, W]` on [0, 1],
  normalised by the training set's per-channel mean and std; targets are class ids. This path needs
  neither timm nor torchvision (the built-in image set trains with it on a bare install);
- any augmentation (crop, flip, RandAugment, random erasing, mixup / cutmix): DeiT's pipeline from
  timm and torchvision (`trials.deit`): the per-image stage in the stream (`AugmentedStream`), the
  batch stage (normalisation, random erasing, mixup / cutmix with label smoothing) on the device;
- label smoothing: inside mixup's soft targets when mixing is on; without mixing, torch's
  `cross_entropy(label_smoothing=eps)` in the model's loss (`loss_options`), the same number as
  timm's `LabelSmoothingCrossEntropy`.

The model's drop-path decisions of step `s` come from their own seed (`drop_seed`), so a resumed trial
makes exactly the same draws. Evaluation: the held-out images without augmentation, cross-entropy
without smoothing, and top-1 accuracy; both are means over images.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from trials.config import VisionRecipe
from trials.data.images import ImageArrays
from trials.deit import BatchMixer, step_seed


def to_float_images(batch: Tensor) -> Tensor:
    """uint8 `[B, H, W, C]` -> float `[B, C, H, W]` on [0, 1]."""
    return batch.permute(0, 3, 1, 2).float().div_(255.0)


class ClassificationBatches:
    """Turns the image stream's batches into model inputs and targets (see the module docstring)."""

    def __init__(self, arrays: ImageArrays, recipe: VisionRecipe, classes: int, device: torch.device, seed: int) -> None:
        self.recipe, self.classes, self.device, self.seed = recipe, classes, device, seed
        self.mixer = BatchMixer(recipe, classes, arrays.mean, arrays.std, device)

    def drop_seed(self, step: int) -> int:
        """The seed of step `step`'s drop-path decisions (distinct from the augmentation's)."""
        return step_seed(self.seed, step, 3)

    def eval_inputs(self, images_u8: Tensor) -> Tensor:
        x = to_float_images(images_u8.to(self.device))
        return (x - self.mixer.mean) / self.mixer.std

    def train_inputs(self, images: np.ndarray | Tensor, labels: np.ndarray | Tensor, step: int) -> tuple[Tensor, Tensor]:
        """(images `[B, C, H, W]`, targets: class ids `[B]` or probabilities `[B, classes]`) for step
        `step`. `images`: the stored uint8 `[B, H, W, C]`, or the augmented uint8 `[B, C, H, W]`."""
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
