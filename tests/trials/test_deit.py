"""DeiT's recipe (`train.vision.recipe: deit`): every ingredient read back from the built pipeline (timm
and torchvision objects, the stream, the model), soft targets, the losses against timm's, determinism,
repeated augmentation, the bare install without the `images` extra, and a tiny full-recipe training run."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trials.config import DEIT_RECIPE, DataConfig, VisionConfig
from trials.data.images import ImageArrays, ImageBatchStream
from trials.deit import BatchMixer, ImageAugmenter, require_timm
from trials.run import run_trial
from trials.spec import TrialSpec
from trials.train import Trial
from trials.vision import ClassificationBatches

from tests.models.small_vit import tiny_spec_dict

ROOT = Path(__file__).resolve().parents[2]
timm = require_timm("the tests")
import timm.loss  # noqa: E402  # after require_timm, which makes torchvision importable next to a CPU torch
DEIT = VisionConfig(recipe="deit").resolved()


def pixels(n: int = 8, size: int = 16) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def arrays(n: int = 8, size: int = 16) -> ImageArrays:
    x = pixels(n, size)
    y = np.arange(n) % 4
    return ImageArrays.from_arrays(x, y, x[:2], y[:2], (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def tiny_spec(vision: dict | None, *, steps: int = 12, lrs: tuple[float, ...] = (2e-3,), extra: dict | None = None,
              **train: object) -> TrialSpec:
    return TrialSpec.from_dict(tiny_spec_dict(vision, steps=steps, lrs=lrs, extra=extra, **train))


def test_deit_resolves_to_the_tabulated_values_and_yaml_fields_override():
    assert DEIT.label_smoothing == 0.1 and (DEIT.mixup, DEIT.cutmix, DEIT.mix_prob, DEIT.switch_prob) == (0.8, 1.0, 1.0, 0.5)
    assert DEIT.crop and DEIT.crop_scale == (0.08, 1.0) and DEIT.crop_ratio == pytest.approx((3 / 4, 4 / 3))
    assert (DEIT.interpolation, DEIT.flip, DEIT.randaugment) == ("bicubic", 0.5, "rand-m9-mstd0.5-inc1")
    assert (DEIT.erasing, DEIT.erasing_mode, DEIT.erasing_count, DEIT.repeats) == (0.25, "pixel", 1, 3)
    off = VisionConfig().resolved()
    assert not off.augments and off.label_smoothing == 0 and off.repeats == 1
    tuned = VisionConfig(recipe="deit", mixup=0.0, randaugment=False, repeats=1).resolved()
    assert tuned.mixup == 0 and tuned.cutmix == 1.0 and tuned.randaugment is False and tuned.repeats == 1
    with pytest.raises(ValueError, match="randaugment"):
        VisionConfig(randaugment="autoaug-v0")


def test_every_deit_ingredient_is_on_in_the_built_trial():
    """Read back from the objects a `recipe: deit` trial trains with (timm / torchvision classes)."""
    trial = Trial(tiny_spec({"recipe": "deit"}))
    steps = {type(t).__name__: t for t in trial.stream.augmenter.transform.transforms}
    crop = steps["RandomResizedCropAndInterpolation"]
    assert crop.scale == (0.08, 1.0) and crop.ratio == pytest.approx((3 / 4, 4 / 3)) and crop.size == (16, 16)
    assert str(crop.interpolation).lower().endswith("bicubic")
    assert steps["RandomHorizontalFlip"].p == 0.5
    rand = steps["RandAugment"]
    assert rand.num_layers == 2 and len(rand.ops) == 15
    assert {op.magnitude for op in rand.ops} == {9} and {op.magnitude_std for op in rand.ops} == {0.5}
    assert any(op.name.endswith("Increasing") for op in rand.ops)  # inc1: the magnitude-increasing variants
    assert "ColorJitter" not in steps  # DeiT's color jitter is off under RandAugment
    mixer = trial.vision.mixer
    assert isinstance(mixer.erasing, timm.data.random_erasing.RandomErasing)
    assert (mixer.erasing.probability, mixer.erasing.mode, mixer.erasing.max_count) == (0.25, "pixel", 1)
    mix = mixer.mixup
    assert isinstance(mix, timm.data.Mixup) and mix.mode == "batch"
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.mix_prob, mix.switch_prob, mix.label_smoothing) == (0.8, 1.0, 1.0, 0.5, 0.1)
    assert trial.stream.stream.repeats == 3
    assert [b.drop_rate for b in trial.model.blocks] == pytest.approx([0.0, 0.1])  # drop-path 0.1 at the last block
    assert trial.model.image.init == "trunc_normal"
    explicit = Trial(tiny_spec({"recipe": "deit"}, extra={"drop_path": 0.0}))
    assert [b.drop_rate for b in explicit.model.blocks] == [0.0, 0.0]  # the YAML's model.extra wins


def test_mixed_targets_are_smoothed_distributions_that_sum_to_one():
    recipe = VisionConfig(recipe="deit", erasing=0.0).resolved()  # no erasing: the pixels tell mixup from cutmix
    mixer = BatchMixer(recipe, 4, (0.5,) * 3, (0.25,) * 3, torch.device("cpu"))
    images, labels = torch.from_numpy(pixels()).permute(0, 3, 1, 2), torch.from_numpy(arrays().train_y)
    plain = (images.float() / 255 - 0.5) / 0.25
    kinds = set()
    for step in range(30):
        x, y = mixer(images.clone(), labels, step)
        assert y.shape == (8, 4) and torch.isfinite(x).all()
        torch.testing.assert_close(y.sum(-1), torch.ones(8))
        assert float(y.min()) >= 0.1 / 4 - 1e-6  # smoothing leaves every class eps / classes
        own, other = torch.isclose(x[0], plain[0]), torch.isclose(x[0], plain[-1])
        kinds.add("cutmix" if bool((own | other).all()) else "mixup")
    assert kinds == {"cutmix", "mixup"}  # switch_prob 0.5: both happen


def test_losses_equal_timms_soft_target_and_label_smoothing_losses():
    from tests.models.small_vit import make, vit_config

    model = make(vit_config("pre", classes=4), stack=2, seed=1)
    images = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    mixed = timm.data.mixup.mixup_target(labels, 4, lam=0.7, smoothing=0.1)
    logits = model(images)
    soft = model.member_losses(images, mixed)
    smoothed = model.member_losses(images, labels, label_smoothing=0.1)
    for k in range(2):
        torch.testing.assert_close(soft[k], timm.loss.SoftTargetCrossEntropy()(logits[k], mixed))
        torch.testing.assert_close(smoothed[k], timm.loss.LabelSmoothingCrossEntropy(0.1)(logits[k], labels))
    batches = ClassificationBatches(arrays(), VisionConfig(label_smoothing=0.1).resolved(), 4, torch.device("cpu"), seed=0)
    _, ids = batches.train_inputs(pixels(), arrays().train_y, step=0)
    assert ids.dim() == 1 and batches.loss_options(ids) == {"label_smoothing": 0.1}  # smoothing without mixing


def test_augmentation_is_a_pure_function_of_the_step_and_leaves_the_global_generators_alone():
    augmenter = ImageAugmenter(DEIT, 16, 3, (0.5, 0.5, 0.5))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = (random.random(), np.random.rand(), torch.rand(()).item())
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    x1, x2, x3 = augmenter(pixels(), 11), augmenter(pixels(), 11), augmenter(pixels(), 12)
    assert (random.random(), np.random.rand(), torch.rand(()).item()) == before
    assert x1.dtype == torch.uint8 and x1.shape == (8, 3, 16, 16)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)


def test_repeated_augmentation_serves_each_image_three_times_in_a_row():
    a = arrays(n=30)
    stream = ImageBatchStream(a, 6, seed=1, prefetch=False, repeats=3)
    first = stream.indices(0, 30)
    assert stream.epoch_length == 30 and len(set(first.tolist())) == 10
    assert all(len(set(first[i : i + 3].tolist())) == 1 for i in range(0, 30, 3))
    assert not np.array_equal(stream.epoch_order(0), stream.epoch_order(1))
    with pytest.raises(Exception, match="does not belong"):
        ImageBatchStream(a, 6, seed=1, prefetch=False).load_state(stream.state())


def test_worker_processes_make_the_same_batches():
    spec = tiny_spec({"recipe": "deit"}, steps=4)
    inline, forked = Trial(spec), Trial(tiny_spec({"recipe": "deit", "workers": 2}, steps=4))
    for _ in range(3):
        (xa, ya), (xb, yb) = inline.stream.next_batch(), forked.stream.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert inline.stream.state() == forked.stream.state()


def test_full_deit_recipe_trains_and_resumes_exactly_on_the_builtin_images(tmp_path):
    spec = tiny_spec({"recipe": "deit"}, steps=12, lrs=(1e-3, 3e-3))
    full = run_trial(spec)
    assert [r.outcome for r in full] == ["ok", "ok"]
    assert all(r.loss is not None and np.isfinite(r.loss) for r in full)
    stopped = run_trial(spec, checkpoint_dir=tmp_path, should_stop=iter([False] * 7 + [True]).__next__)
    assert [r.outcome for r in stopped] == ["failed", "failed"]
    resumed = run_trial(spec, checkpoint_dir=tmp_path)
    for a, b in zip(full, resumed):
        assert a.loss == pytest.approx(b.loss, rel=1e-6) and a.accuracy == b.accuracy


def test_without_the_images_extra_plain_vits_train_and_deit_says_what_to_install(tmp_path):
    """A bare install: timm and torchvision cannot be imported (a meta-path block, as if not installed)."""
    script = f"""
import sys
sys.modules["timm"] = None  # import timm -> ImportError, as on an install without the images extra
sys.modules["torchvision"] = None
sys.path.insert(0, {str(ROOT)!r})
from tests.models.small_vit import tiny_spec_dict
from trials.errors import TrialInputError
from trials.run import run_trial
from trials.spec import TrialSpec
results = run_trial(TrialSpec.from_dict(tiny_spec_dict(None, steps=4)))
assert [r.outcome for r in results] == ["ok"], results
print("plain ok")
try:
    run_trial(TrialSpec.from_dict(tiny_spec_dict({{"recipe": "deit"}}, steps=4)))
except TrialInputError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "LAYERROPE_SWEEPER_CACHE": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plain ok" in out.stdout
    assert "train.vision:" in out.stdout and "pip install" in out.stdout and "images" in out.stdout


def test_randaugment_at_full_magnitude_posterizes_to_black_as_in_deit():
    """timm's PosterizeIncreasing keeps 0 bits at magnitude 10 (reached with mstd 0.5): a black image with
    the Pillow DeiT used; Pillow 13 raises instead, hence the extra's `pillow<13`."""
    from PIL import Image

    op = timm.data.auto_augment.AugmentOp("PosterizeIncreasing", prob=1.0, magnitude=10)
    out = np.asarray(op(Image.fromarray(pixels()[0])))
    assert out.shape == (16, 16, 3) and out.max() == 0


def test_grey_images_go_through_every_randaugment_op():
    """One channel: the fill colour of RandAugment's geometric ops must be one value, not three."""
    grey = np.random.default_rng(1).integers(0, 256, (32, 16, 16, 1), dtype=np.uint8)
    augmenter = ImageAugmenter(DEIT, 16, 1, (0.5,))
    for step in range(10):  # 10 x 32 images x 2 ops of 15: every op, with near certainty
        assert augmenter(grey, step).shape == (32, 1, 16, 16)


def test_a_deit_trial_reads_the_pipeline_its_recipe_names():
    """The trial opens its images through the recipe: DeiT's reads the larger training cache, evaluates
    on the resize-then-centre-crop view and normalises with ImageNet's statistics; `none` keeps the
    dataset's statistics and the pre-cropped training images."""
    from trials.vision import IMAGENET_MEAN

    trial = Trial(tiny_spec({"recipe": "deit"}))
    assert trial.vision.mean == IMAGENET_MEAN and trial.vision.mixer.micro_batch is None
    assert trial.stream.stream.whole and trial.stream.stream.arrays.train.shapes[0].tolist() == [18, 18]
    assert trial.eval_data[0][0].shape[-2:] == (16, 16)
    plain = Trial(tiny_spec(None))
    assert not plain.stream.whole and plain.stream.arrays.train.shapes[0].tolist() == [16, 16]
    assert plain.vision.mean == plain.stream.arrays.mean
