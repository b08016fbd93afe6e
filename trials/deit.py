"""DeiT's data recipe for the ViT family, from the libraries made for it (the `images` extra).

Each ingredient comes from timm (which builds on torchvision), called as DeiT's training script calls it:

| ingredient | where it runs | from |
|---|---|---|
| random-resized-crop (bicubic), horizontal flip, RandAugment | per image, PIL, on the CPU (`workers` processes) | `timm.data.create_transform(is_training=True, use_prefetcher=True)`: `RandomResizedCropAndInterpolation`, `torchvision.transforms.RandomHorizontalFlip`, `timm.data.auto_augment.rand_augment_transform` |
| normalisation, random erasing | per batch, on the trial's device | ImageNet's mean / std (`normalize: imagenet`), `timm.data.random_erasing.RandomErasing(device=...)` (timm's prefetcher order: after normalisation) |
| mixup / cutmix with label smoothing | per device batch, on the trial's device | `timm.data.Mixup(mode="batch", label_smoothing=...)` called on each device batch (`mix_per: device`: each micro-batch, see `BatchMixer`): soft targets that sum to 1 |
| soft-target cross-entropy | the model's loss | `F.cross_entropy` on probabilities: the same number as `timm.loss.SoftTargetCrossEntropy` (tests check it) |
| repeated augmentation | the image order | `timm.data.distributed_sampler.RepeatAugSampler(num_replicas=1)`, one replica (so a batch holds each image `repeats` times, as DeiT's global batch does across its GPUs) |

Determinism: every random draw of a step comes from Python's, NumPy's and torch's generators seeded
by (cell seed, step) inside `seeded()`, which restores the process's own states afterwards; a batch is
therefore a pure function of its step, whichever worker made it, and a resumed trial sees the same
augmentations. With `crop` the random-resized-crop samples the whole training image as cached
(`trials.data.images`: shorter side `cache_size`, 256 for a 224 px model, aspect ratio kept), not the
full-size original DeiT reads, so a small crop is upsampled from fewer pixels than DeiT's.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trials.config import VisionRecipe
from trials.data.base import seed_words
from trials.errors import TrialInputError

IMAGES_EXTRA_HINT = 'install the images extra: pip install torch==2.13.0 -e ".[images]"'


_TORCHVISION_OPS: Any = None  # the stand-in op schemas, kept alive for the process (see _import_timm)


def _import_timm() -> Any:
    """`import timm.data`, working around a torchvision packaging bug: PyPI's torchvision wheels are
    CUDA builds whose compiled ops cannot load next to a CPU-only torch (the README's CPU install),
    and torchvision then fails on import, registering a fake kernel for its missing `nms` / `qnms` ops
    (pytorch/vision#9085). timm and DeiT's recipe use none of torchvision's compiled ops, only its
    Python transforms: when exactly that failure happens, the two op schemas are declared (without a
    kernel: calling them still fails) and the import is retried."""
    global _TORCHVISION_OPS
    import sys

    try:
        import timm.data  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::nms does not exist" not in str(exc) or _TORCHVISION_OPS is not None:
            raise
        for name in [m for m in sys.modules if m.split(".")[0] in ("torchvision", "timm")]:
            del sys.modules[name]
        _TORCHVISION_OPS = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            _TORCHVISION_OPS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import timm.data  # noqa: F401
    import timm

    return timm


def require_timm(what: str) -> Any:
    """The `timm` module, or a TrialInputError naming the ingredient that needs it."""
    try:
        return _import_timm()
    except ImportError as exc:
        raise TrialInputError(f"train.vision: {what} comes from timm and torchvision, which are not installed ({exc}); {IMAGES_EXTRA_HINT}") from None


def step_seed(seed: int, step: int, stream: int) -> int:
    """A 63-bit seed for `stream` (0: images, 1: batch stage) of step `step`."""
    return int(np.random.SeedSequence(seed_words(seed, step, stream)).generate_state(2, dtype=np.uint64)[0] >> 1)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's global generators (the ones timm and torchvision draw from)
    with `seed`, and give the process its own states back afterwards."""
    py_state, np_state = random.getstate(), np.random.get_state()
    devices = [torch.device(device).index or 0] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


class ImageAugmenter:
    """The per-image stage (crop, flip, RandAugment): images -> uint8 `[B, C, S, S]`.

    With `crop` it takes the whole stored images (a list of uint8 `[h, w, C]`, `whole_images`) and
    crops them; without, the views (uint8 `[B, S, S, C]`). `mean` is RandAugment's fill colour (the
    normalisation's mean, as timm's `create_transform` is given). Picklable and free of device state,
    so that worker processes can run it."""

    def __init__(self, recipe: VisionRecipe, image_size: int, channels: int, mean: tuple[float, ...]) -> None:
        self.recipe, self.image_size, self.channels = recipe, image_size, channels
        self.mean = tuple(float(m) for m in mean)  # one value per channel: RandAugment fills with it
        self._transform: Any = None

    @property
    def whole_images(self) -> bool:
        """Whether the stage wants the whole stored images (the random-resized-crop samples them)."""
        return self.recipe.crop

    @property
    def transform(self) -> Any:
        """timm's training transform in prefetcher mode (ends in a uint8 tensor; normalisation and erasing
        run on the device)."""
        if self._transform is None:
            timm = require_timm("random-resized-crop / flip / RandAugment")
            r = self.recipe
            # crop off: a crop of the whole view (square, at the model's size), i.e. none
            scale, ratio = (r.crop_scale, r.crop_ratio) if r.crop else ((1.0, 1.0), (1.0, 1.0))
            self._transform = timm.data.create_transform(
                input_size=self.image_size, is_training=True, scale=scale, ratio=ratio, hflip=r.flip,
                color_jitter=None, auto_augment=r.randaugment or None, interpolation=r.interpolation,
                mean=self.mean, use_prefetcher=True,
            )
        return self._transform

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_transform": None}

    def __call__(self, images: np.ndarray | list[np.ndarray], seed: int) -> Tensor:
        from PIL import Image  # the images extra (Pillow); needed only when augmenting

        out = torch.empty((len(images), self.channels, self.image_size, self.image_size), dtype=torch.uint8)
        transform = self.transform
        with seeded(seed):
            for i, image in enumerate(images):
                pil = Image.fromarray(image[..., 0] if self.channels == 1 else image)  # L or RGB
                out[i] = transform(pil)
        return out


class BatchMixer:
    """The per-batch stage on the device: normalisation, random erasing, mixup / cutmix and the targets.

    Mixup / cutmix act on each *device batch* apart (`mix_per: device`, DeiT's: each GPU mixes its own
    images, with its own mixing weight and its own choice of mixup or cutmix). One device here: a device
    batch is what the device processes in one forward pass, the micro-batch of `micro_batch` images
    (`train.micro_batch`: the same consecutive slices as the gradient accumulation, `trials.engine`),
    or the whole batch without micro-batches (the ViT family refuses `train.micro_batch` today, its
    drop-path masks being drawn per batch: its device batch is the whole batch), or groups of `mix_group`
    images when a multi-GPU run is reproduced on one device. The members of a stack see the same images, mixed once:
    the stack is one device batch for each of them. `mix_per: batch` mixes the whole batch at once."""

    def __init__(self, recipe: VisionRecipe, classes: int, mean: tuple[float, ...], std: tuple[float, ...],
                 device: torch.device, micro_batch: int | None = None) -> None:
        self.recipe, self.classes, self.device = recipe, classes, device
        self.micro_batch = micro_batch if recipe.mix_per == "device" else None
        self.group = (recipe.mix_group or self.micro_batch) if recipe.mix_per == "device" else None
        channels = len(mean)
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).view(1, channels, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=device).view(1, channels, 1, 1)
        self.erasing: Any = None
        self.mixup: Any = None
        if recipe.erasing > 0:
            timm = require_timm("random erasing")
            self.erasing = timm.data.random_erasing.RandomErasing(
                recipe.erasing, mode=recipe.erasing_mode, max_count=recipe.erasing_count, device=str(device)
            )
        if recipe.mixing:
            timm = require_timm("mixup / cutmix")
            self.mixup = timm.data.Mixup(
                mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, prob=recipe.mix_prob,
                switch_prob=recipe.switch_prob, mode="batch", label_smoothing=recipe.label_smoothing,
                num_classes=classes,
            )

    def groups(self, batch: int) -> list[tuple[int, int]]:
        """The (start, stop) slices of the batch that are mixed apart: the device batches."""
        step = self.group or batch
        return [(start, min(batch, start + step)) for start in range(0, batch, step)]

    def __call__(self, images: Tensor, labels: Tensor, seed: int) -> tuple[Tensor, Tensor]:
        """uint8 `[B, C, H, W]` and class ids `[B]` -> (normalised, erased, mixed images; targets: class
        ids, or class probabilities `[B, classes]` when mixing)."""
        x = (images.to(self.device, non_blocking=True).float().div_(255.0) - self.mean) / self.std
        labels = labels.to(self.device)
        with seeded(seed, self.device):
            if self.erasing is not None:
                x = self.erasing(x)
            if self.mixup is not None:
                groups = self.groups(x.shape[0])
                odd = sorted({stop - start for start, stop in groups if (stop - start) % 2})
                if odd:
                    field = ("train.vision.mix_group" if self.recipe.mix_group else
                             "train.micro_batch" if len(groups) > 1 else "train.batch_size")
                    raise TrialInputError(f"{field}: mixup / cutmix pair the images of each device batch; give an even "
                                          f"size (device batches of {', '.join(map(str, odd))} images)")
                targets = [self.mixup(x[start:stop], labels[start:stop])[1] for start, stop in groups]  # mixes x in place
                return x, torch.cat(targets)
        return x, labels


@lru_cache(maxsize=4)
def repeated_order(seed: int, epoch: int, n: int, repeats: int) -> np.ndarray:
    """Image indices of one epoch under repeated augmentation: timm's RepeatAugSampler (one replica)
    with its epoch seed mixed from (seed, epoch)."""
    timm = require_timm("repeated augmentation")
    sampler = timm.data.distributed_sampler.RepeatAugSampler(range(n), num_replicas=1, rank=0, shuffle=True, num_repeats=repeats)
    sampler.set_epoch(step_seed(seed, epoch, 2))
    return np.fromiter(iter(sampler), dtype=np.int64, count=len(sampler))


class _StepBatches(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item `step`: the augmented training batch of that step (for a DataLoader's worker processes)."""

    def __init__(self, stream: Any, augmenter: ImageAugmenter, seed: int) -> None:
        self.stream, self.augmenter, self.seed = stream, augmenter, seed

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, step: int) -> tuple[Tensor, Tensor]:
        images, labels = self.stream.read(step * self.stream.batch_size)
        return self.augmenter(images, step_seed(self.seed, step, 0)), torch.from_numpy(labels)


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)  # each worker is one core of the trial's CPU share


class AugmentedStream:
    """The training image stream with the per-image stage applied: `next_batch()` gives uint8
    `[B, C, S, S]` images and int64 labels; `state()` / `load_state()` are the underlying stream's. The
    stream serves what the augmenter takes: whole images with a random crop, else the views.

    With `workers` > 0 a DataLoader's worker processes (forked: they share the memory-mapped images)
    make the next batches ahead of the training step; a batch is a pure function of its step either way."""

    def __init__(self, stream: Any, augmenter: ImageAugmenter, seed: int, workers: int) -> None:
        self.stream, self.augmenter, self.seed, self.workers = stream, augmenter, seed, workers
        stream.serve_whole(augmenter.whole_images)  # the random-resized-crop samples the whole stored image
        self._batches: Iterator[tuple[Tensor, Tensor]] | None = None

    @property
    def step(self) -> int:
        return self.stream.position // self.stream.batch_size

    def next_batch(self) -> tuple[Tensor, Tensor]:
        if self.workers == 0:
            step = self.step
            images, labels = self.stream.next_batch()
            return self.augmenter(images, step_seed(self.seed, step, 0)), torch.from_numpy(labels)
        if self._batches is None:
            loader = torch.utils.data.DataLoader(
                _StepBatches(self.stream, self.augmenter, self.seed), batch_size=None,
                sampler=range(self.step, 2**62), num_workers=self.workers, prefetch_factor=2,
                multiprocessing_context="fork", worker_init_fn=_worker_init,
            )
            self._batches = iter(loader)
        batch = next(self._batches)
        self.stream.position += self.stream.batch_size
        return batch

    def state(self) -> dict[str, Any]:
        return self.stream.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.stream.load_state(state)
        self._batches = None  # the workers restart at the restored step
