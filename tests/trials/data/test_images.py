"""Image sources: the built-in procedural set, image folders (PPM without Pillow, PNG with it), .npz
arrays; the stream's order and resume; errors a user can act on."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import open_source
from trials.data.images import (
    BuiltinImages,
    ImageBatchStream,
    read_netpbm,
    render_shapes,
    resize_square,
)
from trials.errors import TrialInputError


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path / "cache"))


def train_views(a) -> np.ndarray:
    return a.train_view(range(len(a.train_y)))


def val_views(a) -> np.ndarray:
    return a.val_view(0, len(a.val_y))


def write_ppm(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width, channels = img.shape
    magic = b"P6" if channels == 3 else b"P5"
    path.write_bytes(magic + b"\n# a comment\n" + f"{width} {height}\n255\n".encode() + img.tobytes())


def test_builtin_images_are_deterministic_balanced_and_split():
    cfg = DataConfig(source="builtin_images", builtin_classes=6, builtin_per_class=50, val_fraction=0.1)
    source = open_source(cfg)
    assert source.vocab == 6 and source.class_names[:3] == ("disk", "square", "triangle")
    a = source.arrays(16, 3)
    assert train_views(a).shape == (270, 16, 16, 3) and val_views(a).shape == (30, 16, 16, 3) and train_views(a).dtype == np.uint8
    assert np.bincount(np.concatenate([a.train_y, a.val_y])).tolist() == [50] * 6
    again = BuiltinImages(6, 50, 0, 0.1).arrays(16, 3)
    assert np.array_equal(train_views(a), train_views(again)) and np.array_equal(a.val_y, again.val_y)
    other = BuiltinImages(6, 50, 1, 0.1)
    assert not np.array_equal(train_views(other.arrays(16, 3)), train_views(a)) and other.fingerprint != source.fingerprint
    grey = source.arrays(16, 1)
    assert train_views(grey).shape == (270, 16, 16, 1) and len(grey.mean) == 1
    assert all(0.05 < s < 0.5 for s in a.std)


def test_every_class_draws_a_different_picture():
    labels = np.arange(10)
    means = [render_shapes(np.full(64, c), 32, np.random.default_rng(0)).astype(float).std(axis=(1, 2, 3)).mean()
             for c in labels]
    assert len({round(m, 3) for m in means}) == 10  # no two classes render identically
    with pytest.raises(TrialInputError, match="builtin_classes"):
        BuiltinImages(11, 10, 0, 0.1)


def test_stream_order_is_seeded_and_resumes_exactly():
    source = open_source(DataConfig(source="builtin_images", builtin_classes=3, builtin_per_class=20))
    stream = source.train_stream(8, seed=5, image_size=8, channels=3)
    batches = [stream.next_batch() for _ in range(9)]  # 72 images: crosses an epoch of 57
    assert len({tuple(y) for _, y in batches}) > 1
    first_epoch = np.concatenate([stream.indices(0, 57)])
    assert sorted(first_epoch.tolist()) == list(range(57))  # an epoch visits every image once
    resumed = source.train_stream(8, seed=5, image_size=8, channels=3)
    stream2 = source.train_stream(8, seed=5, image_size=8, channels=3)
    for _ in range(4):
        stream2.next_batch()
    resumed.load_state(stream2.state())
    for x, y in batches[4:]:
        rx, ry = resumed.next_batch()
        assert np.array_equal(rx, x) and np.array_equal(ry, y)
    with pytest.raises(TrialInputError, match="does not belong"):
        source.train_stream(8, seed=6, image_size=8, channels=3).load_state(stream2.state())
    plain = ImageBatchStream(source.arrays(8, 3), 8, seed=5, prefetch=False)  # prefetching never changes a batch
    for x, y in batches:
        px, py = plain.next_batch()
        assert np.array_equal(px, x) and np.array_equal(py, y)
    evals = source.eval_batches(2, 2, 8, 3)
    assert [len(y) for _, y in evals] == [2, 1]  # 3 validation images: all of them, in order


def test_folder_of_ppm_images_with_hash_split_and_cache(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    for c, name in enumerate(["cat", "dog", "eel"]):
        for i in range(12):
            write_ppm(root / name / f"sub/{i}.ppm", rng.integers(0, 256, (10 + c, 14, 3), dtype=np.uint8))
    (root / "notes").mkdir()  # a folder without images is not a class
    cfg = DataConfig(source="images", path=str(root), val_fraction=0.25)
    source = open_source(cfg)
    assert source.vocab == 3 and source.class_names == ("cat", "dog", "eel")
    a = source.arrays(8, 3)
    assert len(a.train_y) + len(a.val_y) == 36 and len(a.val_y) > 0
    assert train_views(a).shape[1:] == (8, 8, 3)
    caches = sorted((tmp_path / "cache" / "images").iterdir())
    assert len(caches) == 2 and all((cache / "meta.json").is_file() for cache in caches)  # one per split
    b = open_source(cfg).arrays(8, 3)  # a second opening reads the cache
    assert isinstance(b.train.data, np.memmap) and np.array_equal(train_views(b), train_views(a))
    # the fingerprint follows the content, not the resolution
    assert open_source(cfg).fingerprint == source.fingerprint
    write_ppm(root / "cat" / "extra.ppm", np.zeros((4, 4, 3), np.uint8))
    assert open_source(cfg).fingerprint != source.fingerprint


def test_folder_with_separate_validation_folder(tmp_path):
    for split, count in (("train", 4), ("val", 2)):
        for name in ("a", "b"):
            for i in range(count):
                write_ppm(tmp_path / split / name / f"{i}.pgm", np.full((6, 6, 1), 40 * i, np.uint8))
    source = open_source(DataConfig(source="images", path=str(tmp_path / "train"), val_path=str(tmp_path / "val")))
    a = source.arrays(6, 3)
    assert (len(a.train_y), len(a.val_y)) == (8, 4)
    assert train_views(a).shape[-1] == 3  # grey files served as RGB when the model wants 3 channels
    with pytest.raises(TrialInputError, match="not among"):
        (tmp_path / "val" / "zzz").mkdir()
        write_ppm(tmp_path / "val" / "zzz" / "0.ppm", np.zeros((2, 2, 3), np.uint8))
        open_source(DataConfig(source="images", path=str(tmp_path / "train"), val_path=str(tmp_path / "val")))


def test_png_folder_with_pillow_and_a_clear_error_without(tmp_path, monkeypatch):
    image_module = pytest.importorskip("PIL.Image")
    for name in ("x", "y"):
        for i in range(3):
            (tmp_path / name).mkdir(exist_ok=True)
            image_module.fromarray(np.full((5, 7, 3), 30 * i, np.uint8)).save(tmp_path / name / f"{i}.png")
    cfg = DataConfig(source="images", path=str(tmp_path), val_fraction=0.4)
    a = open_source(cfg).arrays(4, 3)
    assert len(a.train_y) + len(a.val_y) == 6
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path / "other-cache"))
    with pytest.raises(TrialInputError, match="needs Pillow.*pip install pillow"):
        open_source(cfg).arrays(4, 3)


def test_npz_layouts_and_validation(tmp_path):
    rng = np.random.default_rng(1)
    nchw = rng.random((40, 3, 12, 12)).astype(np.float32)
    labels = np.arange(40) % 4
    np.savez(tmp_path / "a.npz", x=nchw, y=labels)
    source = open_source(DataConfig(source="images", path=str(tmp_path / "a.npz"), val_fraction=0.2))
    a = source.arrays(12, 3)
    assert source.vocab == 4 and train_views(a).dtype == np.uint8 and len(a.train_y) + len(a.val_y) == 40
    np.savez(tmp_path / "b.npz", images=(nchw * 255).astype(np.uint8).transpose(0, 2, 3, 1), labels=labels,
             x_val=np.zeros((5, 12, 12, 3), np.uint8), y_val=np.arange(5) % 4)
    b = open_source(DataConfig(source="images", path=str(tmp_path / "b.npz"))).arrays(6, 1)
    assert train_views(b).shape == (40, 6, 6, 1) and val_views(b).shape == (5, 6, 6, 1)
    np.savez(tmp_path / "bad.npz", x=nchw * 3, y=labels)
    with pytest.raises(TrialInputError, match=r"\[0, 1\]"):
        open_source(DataConfig(source="images", path=str(tmp_path / "bad.npz")))
    np.savez(tmp_path / "nolabels.npz", x=nchw)
    with pytest.raises(TrialInputError, match="no array named y or labels"):
        open_source(DataConfig(source="images", path=str(tmp_path / "nolabels.npz")))


def test_path_errors(tmp_path):
    with pytest.raises(TrialInputError, match="no such file"):
        open_source(DataConfig(source="images", path=str(tmp_path / "missing")))
    (tmp_path / "one" / "only").mkdir(parents=True)
    write_ppm(tmp_path / "one" / "only" / "0.ppm", np.zeros((2, 2, 3), np.uint8))
    with pytest.raises(TrialInputError, match="at least two class subfolders"):
        open_source(DataConfig(source="images", path=str(tmp_path / "one")))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(TrialInputError, match="folder .* or an .npz"):
        open_source(DataConfig(source="images", path=str(tmp_path / "f.txt")))


def test_netpbm_reader_and_resize():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "a.ppm"
        write_ppm(path, img)
        assert np.array_equal(read_netpbm(path), img)
    wide = np.zeros((1, 4, 8, 3), np.uint8)
    wide[:, :, 2:6] = 200  # the centre square survives the centre crop
    out = resize_square(wide, 4)
    assert out.shape == (1, 4, 4, 3) and np.all(out == 200)
