"""Every data source: determinism for a seed, exact resume from a saved position, held-out
batches independent of the seed, vocabulary and fingerprint, and the errors users meet."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import check_vocab, open_source
from trials.data import builtin as builtin_mod
from trials.data.base import ArrayBatchStream
from trials.errors import TrialInputError


def test_array_stream_visits_every_window_once_per_epoch() -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    stream = ArrayBatchStream(tokens, batch_size=1, seq_len=9, seed=3, name="t")
    n = stream.n_windows
    starts = stream.starts(0, n)
    assert len(set(starts.tolist())) == n  # a permutation of disjoint windows
    assert np.all(np.diff(np.sort(starts)) == 10)
    assert starts.min() >= 0 and starts.max() + 10 <= len(tokens)
    assert not np.array_equal(stream.starts(n, n), starts)  # the next epoch reshuffles


def test_builtin_corpus(monkeypatch: pytest.MonkeyPatch, stream_contract) -> None:
    src = open_source(DataConfig(source="builtin"))
    assert src.vocab == 256
    version = ".".join(map(str, sys.version_info[:3]))
    assert src.fingerprint.startswith(f"builtin:cpython-{version}:sha256-")
    assert len(src.train) > 1_000_000 and len(src.val) > 10_000
    stream_contract(src)
    # The split is by unit (tests/trials/data/test_builtin_split.py): the validation tokens are exactly the
    # held-out units' files, NUL-separated; training, validation and test hold every file but encodings/'.
    files = builtin_mod.stdlib_files(builtin_mod.stdlib_root())
    val = b"".join(p.read_bytes() + b"\x00" for rel, p in files if builtin_mod.split_side(rel, 0.05) == "val")
    assert bytes(np.asarray(src.val)) == val
    test = open_source(DataConfig(source="builtin", eval_split="test"))
    kept = [p for rel, p in files if not rel.startswith("encodings/")]
    assert len(src.train) + len(src.val) + len(test.val) == sum(p.stat().st_size + 1 for p in kept)
    # Reopening in a new process reads the cache: it neither re-reads nor re-hashes the stdlib.
    builtin_mod._opened.clear()
    with monkeypatch.context() as patched:
        patched.setattr(builtin_mod, "_build", lambda *a: pytest.fail("cache not used"))
        again = open_source(DataConfig(source="builtin"))
    assert again.fingerprint == src.fingerprint and np.array_equal(again.val, src.val)
    # Another split is another corpus: another fingerprint.
    other = open_source(DataConfig(source="builtin", val_fraction=0.1))
    assert other.fingerprint != src.fingerprint and len(other.val) > len(src.val)


def test_check_vocab() -> None:
    src = open_source(DataConfig(source="synthetic", synthetic_vocab=100))
    check_vocab(100, src)
    with pytest.raises(TrialInputError, match=r"model.vocab 64 is smaller than the data's vocabulary 100"):
        check_vocab(64, src)


def test_synthetic_source_is_learnable_and_deterministic(stream_contract) -> None:
    src = open_source(DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096))
    assert src.vocab == 32 and src.fingerprint.startswith("synthetic:")
    stream_contract(src)
    # Each token has at most four successors: far below the uniform entropy.
    pairs = {(int(a), int(b)) for a, b in zip(src.train[:-1], src.train[1:])}
    assert len(pairs) <= 4 * 32
    seeded = open_source(DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096, seed=1))
    assert seeded.fingerprint != src.fingerprint


def _write_texts(folder: Path, n: int = 40) -> list[str]:
    folder.mkdir()
    texts = [f"file {i}: " + "the quick brown fox jumps over the lazy dog. " * (3 + i % 5) for i in range(n)]
    for i, t in enumerate(texts):
        (folder / f"doc{i:03d}.txt").write_text(t)
    return texts


def test_text_folder_bytes(tmp_path: Path, stream_contract) -> None:
    texts = _write_texts(tmp_path / "corpus")
    src = open_source(DataConfig(source="text", path=str(tmp_path / "corpus"), val_fraction=0.2))
    assert src.vocab == 256 and src.fingerprint.startswith("text:corpus:sha256-")
    stream_contract(src, seq_len=8)
    total = sum(len(t.encode()) + 1 for t in texts)
    assert len(src.train) + len(src.val) == total and len(src.val) > 0
    # A changed file is another corpus.
    (tmp_path / "corpus" / "doc000.txt").write_text("changed")
    assert open_source(DataConfig(source="text", path=str(tmp_path / "corpus"), val_fraction=0.2)).fingerprint != src.fingerprint


def test_text_glob_with_val_path(tmp_path: Path) -> None:
    _write_texts(tmp_path / "train")
    (tmp_path / "val.txt").write_text("held out text " * 50)
    src = open_source(DataConfig(source="text", path=str(tmp_path / "train" / "*.txt"), val_path=str(tmp_path / "val.txt")))
    assert bytes(np.asarray(src.val)) == b"held out text " * 50 + b"\x00"
    assert src.fingerprint.endswith(":valfile")


def test_jsonl(tmp_path: Path, stream_contract) -> None:
    path = tmp_path / "data.jsonl"
    rows = [{"text": f"row {i} " + "lorem ipsum dolor sit amet " * 4, "id": i} for i in range(60)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    src = open_source(DataConfig(source="jsonl", path=str(path), val_fraction=0.2))
    stream_contract(src, seq_len=8)
    assert len(src.train) + len(src.val) == sum(len(r["text"]) + 1 for r in rows)
    with pytest.raises(TrialInputError, match=r"no string field 'body' \(fields: id, text\)"):
        open_source(DataConfig(source="jsonl", path=str(path), text_column="body"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(TrialInputError, match=r"bad.jsonl:2: not JSON"):
        open_source(DataConfig(source="jsonl", path=str(bad)))


def test_parquet(tmp_path: Path, stream_contract) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"parquet document {i} " + "abc def " * (i % 9 + 2) for i in range(80)]
    pq.write_table(pa.table({"content": texts, "n": list(range(80))}), tmp_path / "part-0.parquet")
    src = open_source(DataConfig(source="parquet", path=str(tmp_path), text_column="content", val_fraction=0.25))
    stream_contract(src, seq_len=8)
    assert len(src.train) + len(src.val) == sum(len(t) + 1 for t in texts)
    with pytest.raises(TrialInputError, match=r"no column 'text' \(columns: content, n\)"):
        open_source(DataConfig(source="parquet", path=str(tmp_path)))


def test_missing_paths_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(TrialInputError, match=r"^data.path: .*nope: no such file or folder"):
        open_source(DataConfig(source="text", path=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrialInputError, match=r"matches no jsonl files"):
        open_source(DataConfig(source="jsonl", path=str(tmp_path / "empty")))
    with pytest.raises(TrialInputError, match=r"^data.path: required"):
        open_source(DataConfig(source="tokens"))
    (tmp_path / "one.txt").write_text("a single document cannot be split by document")
    with pytest.raises(TrialInputError, match=r"no (validation|training) tokens \(1 documents; give data.val_path"):
        open_source(DataConfig(source="text", path=str(tmp_path / "one.txt")))
    assert [p for p in Path(os.environ["LAYERROPE_SWEEPER_CACHE"]).rglob("*") if p.name.endswith(".tmp")] == []


def test_pretokenized_binaries(tmp_path: Path, stream_contract) -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=20_000).astype(np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    src = open_source(DataConfig(source="tokens", path=str(tmp_path / "train.bin"), val_fraction=0.1))
    assert src.vocab == int(tokens.max()) + 1
    assert np.array_equal(np.asarray(src.val), tokens[-2000:])
    stream_contract(src, seq_len=32)
    big = rng.integers(0, 100_000, size=5000).astype(np.uint32)
    big.tofile(tmp_path / "t32.bin")
    val = np.arange(300, dtype=np.uint32)
    val.tofile(tmp_path / "v32.bin")
    src32 = open_source(DataConfig(source="tokens", path=str(tmp_path / "t32.bin"), val_path=str(tmp_path / "v32.bin"), token_dtype="uint32"))
    assert src32.vocab == int(big.max()) + 1 and np.array_equal(np.asarray(src32.val), val)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(TrialInputError, match=r"3 bytes is not a whole number of uint16 tokens"):
        open_source(DataConfig(source="tokens", path=str(tmp_path / "odd.bin")))


def test_too_short_for_seq_len(tmp_path: Path) -> None:
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "tiny.bin")
    src = open_source(DataConfig(source="tokens", path=str(tmp_path / "tiny.bin"), val_fraction=0.5))
    with pytest.raises(TrialInputError, match=r"fewer than one sequence of 129"):
        src.train_stream(2, 128, 0)
