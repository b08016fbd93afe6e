"""The frequency-only loss of every data source (unigram entropy; class-frequency entropy for images),
checked against counts made here independently (`collections.Counter`, `np.unique`) and planted
distributions; cached by the corpus fingerprint."""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import open_source, unigram_entropy
from trials.data.unigram import HF_SAMPLE_TOKENS, entropy_nats, estimated_tokens, miller_madow


def counter_entropy(values: object) -> float:
    counts = Counter(int(v) for v in values)  # type: ignore[attr-defined]
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values())


def test_entropy_of_planted_distributions() -> None:
    assert entropy_nats([5, 5]) == pytest.approx(math.log(2))
    assert entropy_nats([1] * 256) == pytest.approx(math.log(256))
    assert entropy_nats([3, 1, 0, 0]) == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert entropy_nats([7]) == 0.0
    with pytest.raises(ValueError):
        entropy_nats([0, 0])
    counts = np.array([10, 5, 0, 1])
    assert miller_madow(counts) == pytest.approx(entropy_nats(counts) + (3 - 1) / (2 * 16))


def test_token_file_exact_and_cached_by_fingerprint(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    # Planted: ids 0..9 with probabilities 1/2, 1/4, ... (a Zipf-like tail), 50,000 tokens.
    probs = np.array([2.0 ** -(i + 1) for i in range(10)])
    tokens = rng.choice(10, size=50_000, p=probs / probs.sum()).astype(np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    cfg = DataConfig(source="tokens", path=str(tmp_path / "train.bin"), val_fraction=0.1)
    found = unigram_entropy(cfg)
    assert found.exact and found.kind == "tokens" and found.counted == 45_000
    assert found.nats == pytest.approx(counter_entropy(tokens[:45_000]), rel=1e-12)
    assert found.fingerprint == open_source(cfg).fingerprint
    assert "exact, 45,000 training tokens" in found.describe()
    cached = list(Path(os.environ["LAYERROPE_SWEEPER_CACHE"]).rglob("unigram-*.json"))
    assert any(json.loads(p.read_text())["fingerprint"] == found.fingerprint for p in cached)
    # Other content, other fingerprint: computed again, not served from the cache.
    np.concatenate([tokens, np.full(5000, 3, dtype=np.uint16)]).tofile(tmp_path / "train.bin")
    again = unigram_entropy(cfg)
    assert again.fingerprint != found.fingerprint and again.counted == int(round(55_000 * 0.9))


def test_text_source_counts_the_training_documents(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    for i in range(30):
        (tmp_path / "corpus" / f"d{i}.txt").write_text(f"doc {i} " + "abcab " * (i + 1))
    src = open_source(DataConfig(source="text", path=str(tmp_path / "corpus"), val_fraction=0.2))
    found = src.unigram_entropy()
    assert found.counted == len(src.train) and found.nats == pytest.approx(counter_entropy(np.asarray(src.train)))


def test_builtin_corpus_exact() -> None:
    src = open_source(DataConfig(source="builtin"))
    found = src.unigram_entropy()
    _, counts = np.unique(np.asarray(src.train), return_counts=True)
    p = counts / counts.sum()
    assert found.exact and found.counted == len(src.train)
    assert found.nats == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert 2.5 < found.nats < 4.5  # source code: spaces and letters dominate; far below ln 256 = 5.55


def test_synthetic_source() -> None:
    src = open_source(DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096))
    assert src.unigram_entropy().nats == pytest.approx(counter_entropy(np.asarray(src.train)))


def test_sample_estimate_states_its_size() -> None:
    rng = np.random.default_rng(2)
    chunks = [rng.integers(0, 300, size=1000) for _ in range(20)]
    est = estimated_tokens("planted:uniform300", iter(chunks), 300, limit=5000)
    assert not est.exact and est.counted == 5000
    assert "estimated from the first 5,000 training tokens" in est.describe()
    first = np.concatenate(chunks)[:5000]
    assert est.nats == pytest.approx(miller_madow(np.bincount(first, minlength=300)))
    # The bias correction brings the estimate close to the true ln 300 (the plug-in falls short).
    assert abs(est.nats - math.log(300)) < abs(counter_entropy(first) - math.log(300))
    # Fewer tokens than the limit: every token counted, exact.
    whole = estimated_tokens("planted:short", iter(chunks[:2]), 300, limit=5000)
    assert whole.exact and whole.counted == 2000 and whole.nats == pytest.approx(counter_entropy(np.concatenate(chunks[:2])))


def test_hf_source_estimate(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("tokenizers")
    texts = [f"row {i} " + "x y z w " * (i % 7 + 1) for i in range(120)]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts[:100]}),
                          "validation": datasets.Dataset.from_dict({"text": texts[100:]})}).save_to_disk(str(tmp_path / "d"))
    src = open_source(DataConfig(source="hf", dataset=str(tmp_path / "d"), streaming=True))
    found = src.unigram_entropy()
    everything = np.concatenate([np.frombuffer(t.encode() + b"\x00", dtype=np.uint8) for t in texts[:100]])
    assert found.exact and found.counted == len(everything) < HF_SAMPLE_TOKENS  # small: every token counted
    assert found.nats == pytest.approx(counter_entropy(everything))


def test_image_sources_give_the_chance_loss(tmp_path: Path) -> None:
    balanced = unigram_entropy(DataConfig(source="builtin_images", builtin_classes=4, builtin_per_class=50, val_fraction=0.2))
    src = open_source(DataConfig(source="builtin_images", builtin_classes=4, builtin_per_class=50, val_fraction=0.2))
    labels = src.arrays(8, 3).train_y  # the labels of the drawn images, decoded here
    assert balanced.kind == "classes" and balanced.counted == 160 and balanced.exact
    assert balanced.nats == pytest.approx(counter_entropy(labels))
    assert abs(balanced.nats - math.log(4)) < 0.01 and "chance" in balanced.describe()
    # Planted imbalance in an .npz: 3 classes with 60 / 30 / 10 training images.
    y = np.array([0] * 60 + [1] * 30 + [2] * 10)
    x = np.zeros((100, 4, 4, 3), dtype=np.uint8)
    np.savez(tmp_path / "a.npz", x=x, y=y, x_val=x[:5], y_val=y[:5])
    found = unigram_entropy(DataConfig(source="images", path=str(tmp_path / "a.npz")))
    assert found.nats == pytest.approx(-(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 0.1 * math.log(0.1)))


def test_unigram_entropy_needs_no_torch() -> None:
    import subprocess

    code = ("import sys; from trials.config import DataConfig; from trials.data import unigram_entropy; "
            "u = unigram_entropy(DataConfig(source='synthetic')); print(u.kind, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["tokens", "False"]


def test_frequency_only_loss_on_given_targets() -> None:
    from trials.data.unigram import UnigramEntropy

    u = UnigramEntropy(entropy_nats([3, 1]), 4, True, "tokens", "planted", np.array([3, 1]))
    # Half a count per id of a vocabulary of 3: p = (3.5, 1.5, 0.5) / 5.5.
    p = {0: 3.5 / 5.5, 1: 1.5 / 5.5, 2: 0.5 / 5.5}
    targets = np.array([0, 0, 1, 2])
    assert u.cross_entropy(targets, vocab=3) == pytest.approx(-sum(math.log(p[t]) for t in targets) / 4)
    # With many counts the smoothing vanishes: the loss on the training tokens themselves is their entropy.
    src = open_source(DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096))
    u = src.unigram_entropy()
    assert u.cross_entropy(np.asarray(src.train), 32) == pytest.approx(u.nats, abs=0.01)
    assert u.counts.sum() == u.counted == len(src.train)
