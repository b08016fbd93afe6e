"""DeiT's batch recipe in torch ops: random-resized-crop and flip, mixup, cutmix, soft targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trials.config import VisionConfig
from trials.data.images import ImageArrays
from trials.vision import (
    ClassificationBatches,
    crop_and_flip,
    crop_boxes,
    cutmix,
    mix_draw,
    soft_targets,
)


def arrays(n: int = 8, size: int = 8) -> ImageArrays:
    x = np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    y = np.arange(n) % 4
    return ImageArrays(x, y, x[:2], y[:2], (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def test_no_recipe_gives_normalised_images_and_class_ids():
    a = arrays()
    maker = ClassificationBatches(a, None, 4, torch.device("cpu"), seed=0)
    x, y = maker.train_inputs(torch.from_numpy(a.train_x), torch.from_numpy(a.train_y), step=0)
    assert x.shape == (8, 3, 8, 8) and y.dtype == torch.int64
    want = (torch.from_numpy(a.train_x).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25
    torch.testing.assert_close(x, want)


def test_flip_without_crop_mirrors_exactly():
    x = torch.rand(4, 3, 8, 8)
    gen = torch.Generator().manual_seed(0)
    out = crop_and_flip(x, gen, crop=False, scale=(1, 1), ratio=(1, 1), flip=1.0)
    torch.testing.assert_close(out, x.flip(-1), rtol=0, atol=1e-6)
    same = crop_and_flip(x, gen, crop=False, scale=(1, 1), ratio=(1, 1), flip=0.0)
    torch.testing.assert_close(same, x, rtol=0, atol=1e-6)


def test_crop_boxes_fit_and_follow_the_scale_range():
    gen = torch.Generator().manual_seed(1)
    w, h = crop_boxes(20000, gen, (0.08, 1.0), (3 / 4, 4 / 3))
    assert torch.all((w > 0) & (w <= 1) & (h > 0) & (h <= 1))
    area = w * h
    assert 0.08 - 1e-9 <= float(area.min()) and float(area.max()) <= 1.0 + 1e-9
    ratio = w / h
    fitted = ~((w == 1) & (h == 1))
    assert torch.all((ratio[fitted] >= 3 / 4 - 1e-9) & (ratio[fitted] <= 4 / 3 + 1e-9))


def test_a_small_crop_is_an_upsampled_region():
    x = torch.zeros(1, 1, 16, 16)
    x[..., :8, :8] = 1.0  # the top-left quarter is bright
    gen = torch.Generator().manual_seed(3)
    outs = torch.cat([crop_and_flip(x, gen, crop=True, scale=(0.05, 0.06), ratio=(1, 1), flip=0.0) for _ in range(200)])
    means = outs.mean(dim=(1, 2, 3))
    assert (means > 0.99).any() and (means < 0.01).any()  # small boxes land wholly inside and wholly outside


def test_augmentation_is_a_pure_function_of_the_step():
    a = arrays()
    recipe = VisionConfig(crop=True, flip=0.5, mixup=0.8, cutmix=1.0, label_smoothing=0.1)
    maker = ClassificationBatches(a, recipe, 4, torch.device("cpu"), seed=3)
    images, labels = torch.from_numpy(a.train_x), torch.from_numpy(a.train_y)
    x1, y1 = maker.train_inputs(images, labels, step=7)
    x2, y2 = maker.train_inputs(images, labels, step=7)
    x3, _ = maker.train_inputs(images, labels, step=8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert y1.shape == (8, 4)
    torch.testing.assert_close(y1.sum(-1), torch.ones(8))
    assert float(y1.min()) >= 0.1 / 4 * 0.99  # smoothing leaves every class some mass


def test_mixup_and_cutmix_targets():
    labels = torch.tensor([0, 1, 2])
    onehot = soft_targets(labels, 3, 0.0, 1.0)
    assert torch.equal(onehot, torch.eye(3))
    mixed = soft_targets(labels, 3, 0.0, 0.7)
    torch.testing.assert_close(mixed[0], torch.tensor([0.7, 0.0, 0.3]))
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4)
    out, lam = cutmix(x, 0.75, torch.Generator().manual_seed(0))
    pasted = (out != x).float().mean().item()
    assert lam == pytest.approx(1.0 - pasted, abs=1e-6)  # lambda corrected to the box's real area
    assert mix_draw(torch.Generator(), 0.0, 0.0, 1.0, 0.5) == (None, False)
    lams = [mix_draw(torch.Generator().manual_seed(s), 0.8, 0.0, 1.0, 0.5) for s in range(400)]
    values = np.array([lam for lam, cut in lams])
    assert not any(cut for _, cut in lams) and abs(values.mean() - 0.5) < 0.05 and values.std() > 0.25  # Beta(0.8, 0.8)
    assert all(cut for _, cut in (mix_draw(torch.Generator().manual_seed(s), 0.0, 1.0, 1.0, 0.0) for s in range(20)))
    skipped = [mix_draw(torch.Generator().manual_seed(s), 0.8, 1.0, 0.0, 0.5)[0] for s in range(20)]
    assert skipped == [None] * 20  # mix_prob 0
