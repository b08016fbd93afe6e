"""DeiT's image pipeline on a small image folder: the evaluation view (resize 256 bicubic, centre crop
224) against Pillow and timm, training crops taken from the whole image cached at shorter side 256,
ImageNet's normalisation, mixup / cutmix per device batch (micro-batch), and the cache rebuilt when its
format changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from trials.config import DataConfig, VisionConfig
from trials.data import open_source
from trials.data.cache import digest
from trials.data.images import STORE_FORMAT, ImageArrays, render_shapes
from trials.data.images_store import StoreKey
from trials.deit import BatchMixer, require_timm
from trials.errors import TrialInputError
from trials.vision import IMAGENET_MEAN, IMAGENET_STD, ClassificationBatches, cache_sides, open_image_data

timm = require_timm("the tests")
Image = pytest.importorskip("PIL.Image")
CPU = torch.device("cpu")
SIZES = {"a": [(300, 400), (333, 250)], "b": [(256, 256), (240, 600)]}  # (height, width): portrait, landscape, square


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path / "cache"))


def smooth_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A smooth random RGB image (a coarse grid upsampled) plus fine noise: every region differs."""
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height), Image.BILINEAR)
    return np.clip(np.asarray(coarse).astype(int) + rng.integers(-20, 21, (height, width, 3)), 0, 255).astype(np.uint8)


def make_folder(root: Path, sizes: dict[str, list[tuple[int, int]]], seed: int = 0) -> list[Path]:
    """PNG images under `root/<class>/`; returns the files in the source's order (class, then name)."""
    rng = np.random.default_rng(seed)
    files = []
    for name, shapes in sizes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i, (height, width) in enumerate(shapes):
            path = root / name / f"{i}.png"
            Image.fromarray(smooth_image(rng, height, width)).save(path)
            files.append(path)
    return files


def deit(**fields: object):
    return VisionConfig(recipe="deit", **fields).resolved()


def test_the_evaluation_view_is_resize_256_bicubic_then_centre_crop_224(tmp_path):
    make_folder(tmp_path / "train", SIZES, seed=1)
    files = make_folder(tmp_path / "val", SIZES, seed=2)
    source = open_source(DataConfig(source="images", path=str(tmp_path / "train"), val_path=str(tmp_path / "val")))
    assert cache_sides(deit(), 224) == (256, 256) and cache_sides(VisionConfig().resolved(), 224) == (224, 224)
    (x, y), = source.eval_batches(1, 8, 224, 3, crop_pct=0.875)
    assert x.shape == (4, 224, 224, 3) and x.dtype == np.uint8 and y.tolist() == [0, 0, 1, 1]
    evaluation = timm.data.create_transform(224, is_training=False, crop_pct=0.875, interpolation="bicubic", use_prefetcher=True)
    for i, path in enumerate(files):
        with Image.open(path) as im:
            im = im.convert("RGB")
            width, height = im.size
            short = min(width, height)
            new_w, new_h = (256, int(256 * height / width)) if width == short else (int(256 * width / height), 256)
            resized = im.resize((new_w, new_h), Image.BICUBIC)  # Pillow's bicubic, as torchvision's Resize on a PIL image
            left, top = round((new_w - 224) / 2), round((new_h - 224) / 2)
            expected = np.asarray(resized.crop((left, top, left + 224, top + 224)))
            assert np.array_equal(x[i], expected), path
            assert np.array_equal(x[i], evaluation(im).permute(1, 2, 0).numpy()), path  # timm's evaluation transform, as DeiT builds it
    # the evaluation inputs of a `recipe: deit` trial: those views, normalised with ImageNet's mean and std
    data = open_image_data(source, deit(), image_size=224, channels=3, classes=2, batch_size=8, eval_batches=1, seed=0, device=CPU)
    (inputs, labels), = data.eval_data
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    expected = (torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255 - mean) / std
    torch.testing.assert_close(inputs, expected)
    assert labels.tolist() == [0, 0, 1, 1]


def test_imagenet_normalisation_constants():
    assert IMAGENET_MEAN == (0.485, 0.456, 0.406) and IMAGENET_STD == (0.229, 0.224, 0.225)
    assert IMAGENET_MEAN == tuple(timm.data.IMAGENET_DEFAULT_MEAN) and IMAGENET_STD == tuple(timm.data.IMAGENET_DEFAULT_STD)
    x = np.zeros((4, 8, 8, 3), np.uint8)
    rgb = ImageArrays.from_arrays(x, np.arange(4), x, np.arange(4), (0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    assert ClassificationBatches(rgb, deit(), 4, CPU, 0).mean == IMAGENET_MEAN
    assert ClassificationBatches(rgb, deit(normalize="dataset"), 4, CPU, 0).std == (0.4, 0.5, 0.6)
    assert ClassificationBatches(rgb, VisionConfig().resolved(), 4, CPU, 0).mean == (0.1, 0.2, 0.3)  # recipe none: as before
    grey = ImageArrays.from_arrays(x[..., :1], np.arange(4), x[..., :1], np.arange(4))
    batches = ClassificationBatches(grey, deit(), 4, CPU, 0)
    assert batches.mean == pytest.approx((0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406,))
    assert batches.mixer.mean.shape == (1, 1, 1, 1)


def test_training_crops_come_from_the_whole_image_cached_at_shorter_side_256(tmp_path):
    """A red stripe at the left edge of wide images: the 224 centre crop of the 256-resized image (the
    view; what a 224 pre-cropped cache kept) never holds it, the random-resized-crops do."""
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            img = np.full((300, 480, 3), 120, np.uint8) + rng.integers(0, 30, (300, 480, 3), dtype=np.uint8)
            img[:, :30] = (255, 0, 0)
            Image.fromarray(img).save(tmp_path / name / f"{i}.png")
    source = open_source(DataConfig(source="images", path=str(tmp_path), val_path=str(tmp_path)))
    recipe = deit(flip=0.0, randaugment=False, erasing=0.0, mixup=0.0, cutmix=0.0, repeats=1, label_smoothing=0.0)
    data = open_image_data(source, recipe, image_size=224, channels=3, classes=2, batch_size=4, eval_batches=1, seed=0, device=CPU)
    arrays = data.stream.stream.arrays
    assert arrays.train.shapes.tolist() == [[256, 409]] * 4  # whole, aspect kept: 480 x 256 / 300 = 409.6
    whole = arrays.train.image(0)
    assert (whole[:, :20] == (255, 0, 0)).all()  # 30 x 256 / 300 = 25.6 columns of red (bicubic blurs the last)

    def red(images: np.ndarray) -> np.ndarray:  # [B, H, W, 3] -> red pixels per image
        r, g, b = (images[..., c].astype(int) for c in range(3))
        return ((r > 200) & (g < 60) & (b < 60)).sum(axis=(1, 2))

    assert red(arrays.train_view(range(4))).max() == 0  # the centre 224 view has no red
    crops = torch.cat([data.stream.next_batch()[0] for _ in range(10)])  # 40 crops
    assert crops.shape == (40, 3, 224, 224) and crops.dtype == torch.uint8
    assert (red(crops.permute(0, 2, 3, 1).numpy()) > 0).sum() >= 3  # P(a crop reaches the stripe) is about 0.3
    bigger = open_image_data(source, deit(cache_size=320, randaugment=False), image_size=224, channels=3, classes=2,
                             batch_size=4, eval_batches=1, seed=0, device=CPU)
    assert bigger.stream.stream.arrays.train.shapes.tolist() == [[320, 512]] * 4  # train.vision.cache_size
    with pytest.raises(TrialInputError, match="cache_size: 200 is smaller"):
        open_image_data(source, deit(cache_size=200), image_size=224, channels=3, classes=2, batch_size=4,
                        eval_batches=1, seed=0, device=CPU)


def mixing_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    images = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (8, 3, 6, 6), dtype=np.uint8))
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    plain = (images.float() / 255 - 0.5) / 0.25
    return images, labels, plain


def partners(out: torch.Tensor, plain: torch.Tensor) -> list[tuple[int, float] | None]:
    """For each mixed image, the image it was mixed with and the weight of its own: out[i] = lam *
    plain[i] + (1 - lam) * plain[j] holds exactly for the right j only. None where the weight is so
    close to 1 that the partner cannot be told."""
    found: list[tuple[int, float] | None] = []
    for i in range(len(out)):
        fits = []
        for j in range(len(out)):
            if j != i:
                a, b = (plain[i] - plain[j]).flatten(), (out[i] - plain[j]).flatten()
                lam = float(a @ b / (a @ a))
                fits.append((float((out[i] - (lam * plain[i] + (1 - lam) * plain[j])).abs().max()), j, lam))
        err, j, lam = min(fits)
        assert err < 1e-4, f"image {i} is no mix of two images"
        found.append(None if lam > 0.995 else (j, lam))
    return found


def test_mixup_per_device_batch_mixes_only_within_each_micro_batch():
    images, labels, plain = mixing_batch()
    recipe = deit(erasing=0.0, cutmix=0.0)  # mixup alone, every batch (mix_prob 1)
    per_device = BatchMixer(recipe, 4, (0.5,) * 3, (0.25,) * 3, CPU, micro_batch=4)
    assert per_device.groups(8) == [(0, 4), (4, 8)]
    told = 0
    for seed in range(4):
        out, targets = per_device(images.clone(), labels, seed)
        for i, pair in enumerate(partners(out, plain)):
            if pair is None:
                continue
            told += 1
            j, lam = pair
            assert j == (i // 4) * 4 + 3 - i % 4  # paired inside its micro-batch of 4 (timm pairs a batch with its reverse)
            own = timm.data.mixup.mixup_target(labels[[i, j]], 4, lam=lam, smoothing=0.1)[0]  # the targets: the same weights
            torch.testing.assert_close(targets[i], own, atol=1e-4, rtol=0)
        lam0, lam1 = (float(targets[c, labels[c]] - targets[c + 3, labels[c]]) for c in (0, 4))
        assert lam0 != pytest.approx(lam1, abs=1e-3)  # each device batch draws its own weight
    assert told >= 16
    whole = BatchMixer(deit(erasing=0.0, cutmix=0.0, mix_per="batch"), 4, (0.5,) * 3, (0.25,) * 3, CPU, micro_batch=4)
    alone = BatchMixer(recipe, 4, (0.5,) * 3, (0.25,) * 3, CPU)  # no micro-batches: the device batch is the batch
    for mixer in (whole, alone):
        pairs = [p for seed in range(2) for p in enumerate(partners(mixer(images.clone(), labels, seed)[0], plain))]
        assert all(p is None or p[0] == 7 - i for i, p in pairs) and sum(p is not None for _, p in pairs) >= 8


def test_cutmix_per_device_batch_pastes_only_from_the_same_micro_batch():
    images, labels, plain = mixing_batch()
    mixer = BatchMixer(deit(erasing=0.0, mixup=0.0), 4, (0.5,) * 3, (0.25,) * 3, CPU, micro_batch=4)
    pasted = 0
    for seed in range(5):
        out, _ = mixer(images.clone(), labels, seed)
        for i in range(8):
            partner = (i // 4) * 4 + 3 - i % 4
            own, other = torch.isclose(out[i], plain[i]), torch.isclose(out[i], plain[partner])
            assert bool((own | other).all())  # every pixel its own or its micro-batch partner's
            pasted += int((other & ~own).any())
    assert pasted > 0


def test_an_odd_device_batch_is_a_clear_error():
    images, labels, _ = mixing_batch()
    mixer = BatchMixer(deit(erasing=0.0), 4, (0.5,) * 3, (0.25,) * 3, CPU, micro_batch=3)
    with pytest.raises(TrialInputError, match=r"train.micro_batch: .*even.*device batches of 3 images"):
        mixer(images, labels, 0)
    x = ImageArrays.from_arrays(np.zeros((8, 16, 16, 3), np.uint8), labels.numpy(), np.zeros((2, 16, 16, 3), np.uint8), labels[:2].numpy())
    assert ClassificationBatches(x, deit(), 4, CPU, 0, micro_batch=4).mixer.micro_batch == 4
    assert ClassificationBatches(x, deit(mix_per="batch"), 4, CPU, 0, micro_batch=4).mixer.micro_batch is None


def test_the_cache_is_rebuilt_when_its_format_or_files_do_not_match(tmp_path, capsys):
    make_folder(tmp_path / "imgs", {"a": [(20, 30), (30, 20)], "b": [(24, 24), (18, 40)]}, seed=5)
    cfg = DataConfig(source="images", path=str(tmp_path / "imgs"), val_path=str(tmp_path / "imgs"))
    first = open_source(cfg)
    views = first.arrays(16, 3, crop_pct=0.875).train_view(range(4))
    key = StoreKey("folder", first.signature, "train", 18, 3, "pil-bicubic")
    folder = key.folder()
    old_name = f"folder-{digest(first.signature, 16, 3)}"  # where format 1 kept 16 px crops of both splits
    assert folder.name != old_name and json.loads((folder / "meta.json").read_text())["format"] == STORE_FORMAT == 2
    # a format-1 cache in the folder (224-style pre-cropped squares, one meta for both splits): rebuilt, not read
    for name in ("x.u8", "shapes.npy", "y.npy"):
        (folder / name).unlink()
    (folder / "train_x.u8").write_bytes(bytes(4 * 16 * 16 * 3))
    (folder / "meta.json").write_text(json.dumps({"train": 4, "val": 4, "mean": [0.5] * 3, "std": [0.2] * 3, "image_size": 16, "channels": 3}))
    capsys.readouterr()
    again = open_source(cfg).arrays(16, 3, crop_pct=0.875)
    assert "rebuilding (format 1, not 2" in capsys.readouterr().err
    assert np.array_equal(again.train_view(range(4)), views) and not (folder / "train_x.u8").exists()
    assert json.loads((folder / "meta.json").read_text())["format"] == 2
    # a truncated image file: rebuilt
    with open(folder / "x.u8", "r+b") as fh:
        fh.truncate(100)
    assert np.array_equal(open_source(cfg).arrays(16, 3, crop_pct=0.875).train_view(range(4)), views)
    assert "do not match" in capsys.readouterr().err
    # an intact cache is read as it is, silently
    open_source(cfg).arrays(16, 3, crop_pct=0.875)
    assert capsys.readouterr().err == ""


def test_recipe_none_reads_the_same_builtin_images_as_before():
    """Format 1 drew the built-in set at the model's resolution and served it as it was: so does the view
    at `crop_pct` 1 (the quickstart's numbers do not move)."""
    source = open_source(DataConfig(source="builtin_images", builtin_classes=4, builtin_per_class=20))
    rng = source._rng()
    labels = source._labels(rng)
    drawn = render_shapes(labels, 16, rng)
    arrays = source.arrays(16, 3)
    cut = len(arrays.train_y)
    assert np.array_equal(arrays.train_view(range(cut)), drawn[:cut])
    assert np.array_equal(arrays.val_view(0, len(arrays.val_y)), drawn[cut:])
    sample = drawn[:cut].astype(np.float64) / 255
    assert arrays.mean == pytest.approx(tuple(sample.mean(axis=(0, 1, 2))), abs=1e-12)
    assert arrays.std == pytest.approx(tuple(sample.std(axis=(0, 1, 2))), abs=1e-12)


def test_mix_group_mixes_each_group_apart_like_a_gpu_of_a_multi_gpu_run():
    """`mix_group: 4` on a batch of 12: three groups of 4, each mixed with a partner inside its own
    group (the images of another group never enter it)."""
    from trials.config import VisionConfig
    from trials.deit import BatchMixer

    recipe = VisionConfig(recipe="deit", mix_group=4, cutmix=0.0, erasing=0.0).resolved()
    mixer = BatchMixer(recipe, classes=12, mean=(0.5,), std=(0.25,), device=torch.device("cpu"))
    assert mixer.groups(12) == [(0, 4), (4, 8), (8, 12)]
    images = torch.arange(12, dtype=torch.uint8).view(12, 1, 1, 1).expand(12, 1, 2, 2).contiguous() * 20
    labels = torch.arange(12)
    _, targets = mixer(images, labels, seed=3)
    smoothing, size = recipe.label_smoothing, 4
    inside = size * ((1 - smoothing) + smoothing * size / 12)  # label smoothing alone reaches other groups' classes
    for start, stop in mixer.groups(12):
        assert float(targets[start:stop, start:stop].sum()) == pytest.approx(inside, abs=1e-5)
    assert len({round(float(targets[g, g]), 6) for g in (0, 4, 8)}) == 3  # each group draws its own weight
    with pytest.raises(Exception, match="mix_group"):
        BatchMixer(VisionConfig(recipe="deit", mix_group=3).resolved(), classes=12, mean=(0.5,), std=(0.25,),
                   device=torch.device("cpu"))(images, labels, seed=0)
