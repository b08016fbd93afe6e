"""Image classification batches for the ViT family: augmentation, mixup / cutmix, soft targets, metrics.

Everything is torch tensor maths on the trial's device (no torchvision): a batch of uint8 images
`[B, H, W, C]` becomes float `[B, C, H, W]` on [0, 1], then (training only, per `train.vision`):

1. random-resized-crop and horizontal flip, as one batched `grid_sample` (bilinear, border padding):
   per image an area fraction s ~ U(crop_scale) and a log-uniform aspect ratio r in crop_ratio give a
   box of relative width sqrt(s r) and height sqrt(s / r) (redrawn up to 10 times while it does not
   fit, then the whole image, as torchvision does), at a uniformly random position, resampled to the
   model's resolution; a flip mirrors the box. The box samples the stored image (already at the model's
   resolution), so a crop is an upsampling, not a crop of a larger original;
2. normalisation by the training set's per-channel mean and std;
3. mixup or cutmix for the whole batch with probability `mix_prob` (cutmix with probability
   `switch_prob` when both are on), pairing image i with image B-1-i; lambda ~ Beta(alpha, alpha);
   cutmix's box has area fraction 1 - lambda, is clipped at the border, and lambda is corrected to the
   box's actual area;
4. targets: class ids without mixing or smoothing, else soft targets
   `lambda * smooth(y) + (1 - lambda) * smooth(y_flipped)`, `smooth(y) = (1 - eps) onehot(y) + eps / classes`.

The random draws of step `s` come from a CPU `torch.Generator` seeded by (cell seed, data seed, s), and
the model's drop-path decisions from another seed of the same step (`drop_seed`), so a resumed trial
makes exactly the same draws. Evaluation: the held-out images without augmentation,
cross-entropy without smoothing, and top-1 accuracy; both are means over images.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from trials.config import VisionConfig
from trials.data.images import ImageArrays

MAX_CROP_TRIES = 10


def to_float_images(batch: Tensor) -> Tensor:
    """uint8 `[B, H, W, C]` -> float `[B, C, H, W]` on [0, 1]."""
    return batch.permute(0, 3, 1, 2).float().div_(255.0)


class ClassificationBatches:
    """Turns the image stream's uint8 batches into model inputs and targets (see the module docstring)."""

    def __init__(self, arrays: ImageArrays, recipe: VisionConfig | None, classes: int, device: torch.device, seed: int) -> None:
        self.recipe = recipe or VisionConfig()
        self.classes, self.device, self.seed = classes, device, seed
        channels = len(arrays.mean)
        self.mean = torch.tensor(arrays.mean, dtype=torch.float32, device=device).view(1, channels, 1, 1)
        self.std = torch.tensor(arrays.std, dtype=torch.float32, device=device).view(1, channels, 1, 1)

    def generator(self, step: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 1_000_003 + step * 7_919 + 0x5EED) % (2**63 - 1))

    def drop_seed(self, step: int) -> int:
        """The seed of step `step`'s drop-path decisions (distinct from the augmentation's)."""
        return (self.seed * 1_000_003 + step * 7_919 + 0xD20) % (2**63 - 1)

    def normalise(self, images: Tensor) -> Tensor:
        return (images - self.mean) / self.std

    def eval_inputs(self, images_u8: Tensor) -> Tensor:
        return self.normalise(to_float_images(images_u8.to(self.device)))

    def train_inputs(self, images_u8: Tensor, labels: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """(images `[B, C, H, W]`, targets: class ids `[B]` or probabilities `[B, classes]`) for step `step`."""
        r = self.recipe
        gen = self.generator(step)
        x = to_float_images(images_u8.to(self.device))
        labels = labels.to(self.device)
        if r.crop or r.flip > 0:
            x = crop_and_flip(x, gen, r.crop, r.crop_scale, r.crop_ratio, r.flip)
        x = self.normalise(x)
        lam, use_cutmix = mix_draw(gen, r.mixup, r.cutmix, r.mix_prob, r.switch_prob)
        if lam is not None and use_cutmix:
            x, lam = cutmix(x, lam, gen)
        elif lam is not None:
            x = lam * x + (1.0 - lam) * x.flip(0)
        if lam is None and r.label_smoothing == 0.0:
            return x, labels
        return x, soft_targets(labels, self.classes, r.label_smoothing, 1.0 if lam is None else lam)


def crop_boxes(n: int, gen: torch.Generator, scale: tuple[float, float], ratio: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """Relative (width, height) `[n]` of random-resized-crop boxes that fit in the image."""
    width, height = torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    pending = torch.ones(n, dtype=torch.bool)
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(MAX_CROP_TRIES):
        area = torch.empty(n, dtype=torch.float64).uniform_(scale[0], scale[1], generator=gen)
        aspect = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(log_lo, log_hi, generator=gen))
        w, h = torch.sqrt(area * aspect), torch.sqrt(area / aspect)
        fits = pending & (w <= 1.0) & (h <= 1.0)
        width, height = torch.where(fits, w, width), torch.where(fits, h, height)
        pending &= ~fits
    return width, height


def crop_and_flip(
    x: Tensor, gen: torch.Generator, crop: bool, scale: tuple[float, float], ratio: tuple[float, float], flip: float
) -> Tensor:
    """Random-resized-crop (when `crop`) and horizontal flip (probability `flip`) of `x` `[B, C, H, W]`."""
    n = x.shape[0]
    if crop:
        width, height = crop_boxes(n, gen, scale, ratio)
    else:
        width, height = torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    # box centre in normalised coordinates [-1, 1], uniform over the positions where the box fits
    cx = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * (1 - width)
    cy = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * (1 - height)
    mirror = torch.where(torch.rand(n, generator=gen, dtype=torch.float64) < flip, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3, dtype=torch.float64)
    theta[:, 0, 0], theta[:, 0, 2] = width * mirror, cx
    theta[:, 1, 1], theta[:, 1, 2] = height, cy
    grid = F.affine_grid(theta.to(device=x.device, dtype=x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def mix_draw(gen: torch.Generator, mixup: float, cutmix: float, mix_prob: float, switch_prob: float) -> tuple[float | None, bool]:
    """(lambda or None when this batch is not mixed, whether it is cutmix)."""
    if mixup <= 0 and cutmix <= 0:
        return None, False
    if float(torch.rand((), generator=gen, dtype=torch.float64)) >= mix_prob:
        return None, False
    use_cutmix = cutmix > 0 and (mixup <= 0 or float(torch.rand((), generator=gen, dtype=torch.float64)) < switch_prob)
    alpha = cutmix if use_cutmix else mixup
    # Beta(a, a) from two Gamma draws with the step's generator (torch's Beta sampler takes no generator).
    g1 = float(torch._standard_gamma(torch.tensor([alpha], dtype=torch.float64), generator=gen)[0])
    g2 = float(torch._standard_gamma(torch.tensor([alpha], dtype=torch.float64), generator=gen)[0])
    lam = g1 / (g1 + g2) if g1 + g2 > 0 else 0.5
    return lam, use_cutmix


def cutmix(x: Tensor, lam: float, gen: torch.Generator) -> tuple[Tensor, float]:
    """Paste a box of area fraction 1 - lam from the reversed batch; returns the images and the corrected lambda."""
    _, _, height, width = x.shape
    cut = math.sqrt(1.0 - lam)
    ch, cw = int(height * cut), int(width * cut)
    cy = int(torch.randint(0, height, (), generator=gen))
    cx = int(torch.randint(0, width, (), generator=gen))
    top, bottom = max(cy - ch // 2, 0), min(cy + ch // 2, height)
    left, right = max(cx - cw // 2, 0), min(cx + cw // 2, width)
    out = x.clone()
    out[:, :, top:bottom, left:right] = x.flip(0)[:, :, top:bottom, left:right]
    return out, 1.0 - (bottom - top) * (right - left) / (height * width)


def soft_targets(labels: Tensor, classes: int, smoothing: float, lam: float) -> Tensor:
    """`lam * smooth(y) + (1 - lam) * smooth(y reversed)`, `smooth(y) = (1 - eps) onehot(y) + eps / classes`."""
    off = smoothing / classes
    onehot = F.one_hot(labels, classes).float() * (1.0 - smoothing) + off
    return onehot if lam == 1.0 else lam * onehot + (1.0 - lam) * onehot.flip(0)


def top1_correct(logits: Tensor, labels: Tensor) -> Tensor:
    """Correct predictions per member `[K]` for logits `[K, B, classes]`."""
    return (logits.argmax(dim=-1) == labels.unsqueeze(0)).sum(dim=1).float()
