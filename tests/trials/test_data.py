"""Every data source: determinism for a seed, exact resume from a saved position, held-out
batches independent of the seed, vocabulary and fingerprint, and the errors users meet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import check_vocab, open_source
from trials.data import builtin as builtin_mod
from trials.data.base import ArrayBatchStream, TokenSource, in_val_split
from trials.errors import TrialInputError


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(cache))
    return cache


def assert_stream_contract(source: TokenSource, batch: int = 3, seq_len: int = 16) -> None:
    """Same seed -> same batches; other seed -> other batches; state() + load_state() resumes exactly."""
    a, b, c = (source.train_stream(batch, seq_len, seed) for seed in (0, 0, 1))
    first = [a.next_batch() for _ in range(4)]
    assert all(x.shape == (batch, seq_len + 1) and x.dtype == np.int64 for x in first)
    assert all(np.array_equal(x, b.next_batch()) for x in first)
    assert not all(np.array_equal(x, c.next_batch()) for x in first)
    position = json.loads(json.dumps(a.state()))  # JSON round trip: the position is serialisable
    after = [a.next_batch() for _ in range(3)]
    resumed = source.train_stream(batch, seq_len, 0)
    resumed.load_state(position)
    assert all(np.array_equal(x, resumed.next_batch()) for x in after)
    assert all(int(x.max()) < source.vocab and int(x.min()) >= 0 for x in first + after)
    ev1, ev2 = source.eval_batches(2, batch, seq_len), source.eval_batches(2, batch, seq_len)
    assert len(ev1) == 2 and all(np.array_equal(x, y) for x, y in zip(ev1, ev2))
    assert ev1[0].shape == (batch, seq_len + 1)


def test_array_stream_visits_every_window_once_per_epoch() -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    stream = ArrayBatchStream(tokens, batch_size=1, seq_len=9, seed=3, name="t")
    n = stream.n_windows
    starts = stream.starts(0, n)
    assert len(set(starts.tolist())) == n  # a permutation of disjoint windows
    assert np.all(np.diff(np.sort(starts)) == 10)
    assert starts.min() >= 0 and starts.max() + 10 <= len(tokens)
    assert not np.array_equal(stream.starts(n, n), starts)  # the next epoch reshuffles


def test_builtin_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    src = open_source(DataConfig(source="builtin"))
    assert src.vocab == 256
    version = ".".join(map(str, sys.version_info[:3]))
    assert src.fingerprint.startswith(f"builtin:cpython-{version}:sha256-")
    assert len(src.train) > 1_000_000 and len(src.val) > 10_000
    assert_stream_contract(src)
    # The split is by file: the validation tokens are exactly the held-out files, NUL-separated.
    files = builtin_mod.stdlib_files(builtin_mod.stdlib_root())
    val = b"".join(p.read_bytes() + b"\x00" for rel, p in files if in_val_split(rel, 0.05))
    assert bytes(np.asarray(src.val)) == val
    assert len(src.train) + len(src.val) == sum(p.stat().st_size + 1 for _, p in files)
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


def test_synthetic_source_is_learnable_and_deterministic() -> None:
    src = open_source(DataConfig(source="synthetic", synthetic_vocab=32, synthetic_tokens=4096))
    assert src.vocab == 32 and src.fingerprint.startswith("synthetic:")
    assert_stream_contract(src)
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


def test_text_folder_bytes(tmp_path: Path) -> None:
    texts = _write_texts(tmp_path / "corpus")
    src = open_source(DataConfig(source="text", path=str(tmp_path / "corpus"), val_fraction=0.2))
    assert src.vocab == 256 and src.fingerprint.startswith("text:corpus:sha256-")
    assert_stream_contract(src, seq_len=8)
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


def test_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    rows = [{"text": f"row {i} " + "lorem ipsum dolor sit amet " * 4, "id": i} for i in range(60)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    src = open_source(DataConfig(source="jsonl", path=str(path), val_fraction=0.2))
    assert_stream_contract(src, seq_len=8)
    assert len(src.train) + len(src.val) == sum(len(r["text"]) + 1 for r in rows)
    with pytest.raises(TrialInputError, match=r"no string field 'body' \(fields: id, text\)"):
        open_source(DataConfig(source="jsonl", path=str(path), text_column="body"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(TrialInputError, match=r"bad.jsonl:2: not JSON"):
        open_source(DataConfig(source="jsonl", path=str(bad)))


def test_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"parquet document {i} " + "abc def " * (i % 9 + 2) for i in range(80)]
    pq.write_table(pa.table({"content": texts, "n": list(range(80))}), tmp_path / "part-0.parquet")
    src = open_source(DataConfig(source="parquet", path=str(tmp_path), text_column="content", val_fraction=0.25))
    assert_stream_contract(src, seq_len=8)
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
    assert not any(p.name.endswith(".tmp") for p in Path(os.environ["LAYERROPE_SWEEPER_CACHE"]).rglob("*"))


def test_pretokenized_binaries(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=20_000).astype(np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    src = open_source(DataConfig(source="tokens", path=str(tmp_path / "train.bin"), val_fraction=0.1))
    assert src.vocab == int(tokens.max()) + 1
    assert np.array_equal(np.asarray(src.val), tokens[-2000:])
    assert_stream_contract(src, seq_len=32)
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


# ---- Hugging Face datasets + tokenizers, all local --------------------------------------------

datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("hf")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 11)) for i in range(300)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>", "</s>"]))
    tok.save(str(root / "tokenizer.json"))
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"text": texts[:260]}), "validation": datasets.Dataset.from_dict({"text": texts[260:]})}
    ).save_to_disk(str(root / "dict"))
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(root / "single"))
    return {"tokenizer": root / "tokenizer.json", "dict": root / "dict", "single": root / "single"}


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_saved_dataset_with_local_tokenizer(hf_files: dict[str, Path], streaming: bool) -> None:
    cfg = DataConfig(source="hf", dataset=str(hf_files["dict"]), tokenizer=str(hf_files["tokenizer"]), streaming=streaming)
    src = open_source(cfg)
    assert src.vocab == tokenizers.Tokenizer.from_file(str(hf_files["tokenizer"])).get_vocab_size() > 12
    assert src.fingerprint.startswith(f"hf:{hf_files['dict']}:-:train:fp-") and ":split-validation" in src.fingerprint
    assert_stream_contract(src, batch=2, seq_len=12)
    # Documents are joined by the tokenizer's EOS token.
    eos = tokenizers.Tokenizer.from_file(str(hf_files["tokenizer"])).token_to_id("</s>")
    assert any((b == eos).any() for b in src.eval_batches(2, 2, 12))
    # The validation batches come from the validation split, in order.
    first_val = tokenizers.Tokenizer.from_file(str(hf_files["tokenizer"])).encode(
        datasets.load_from_disk(str(hf_files["dict"]))["validation"][0]["text"], add_special_tokens=False
    ).ids
    assert src.eval_batches(1, 1, 4)[0][0].tolist() == first_val[:5]


def test_hf_resume_across_epochs(hf_files: dict[str, Path]) -> None:
    src = open_source(DataConfig(source="hf", dataset=str(hf_files["dict"]), tokenizer=str(hf_files["tokenizer"]), streaming=False))
    stream = src.train_stream(8, 64, 5)
    for _ in range(12):  # more than one pass over ~2.6k training tokens
        stream.next_batch()
    state = stream.state()
    assert state["epoch"] >= 1
    nxt = stream.next_batch()
    again = src.train_stream(8, 64, 5)
    again.load_state(state)
    assert np.array_equal(again.next_batch(), nxt)


def test_hf_single_dataset_holds_out_by_document(hf_files: dict[str, Path]) -> None:
    src = open_source(DataConfig(source="hf", dataset=str(hf_files["single"]), tokenizer=str(hf_files["tokenizer"]), streaming=False, val_fraction=0.2))
    assert src.fingerprint.endswith(":holdout0.2")
    assert_stream_contract(src, batch=2, seq_len=12)


def test_hf_errors(hf_files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(TrialInputError, match=r"data.split: 'test' not in .* \(splits: train, validation\)"):
        open_source(DataConfig(source="hf", dataset=str(hf_files["dict"]), split="test"))
    with pytest.raises(TrialInputError, match=r"data.text_column: the dataset has no column 'body' \(columns: text\)"):
        open_source(DataConfig(source="hf", dataset=str(hf_files["dict"]), text_column="body", streaming=False))
    with pytest.raises(TrialInputError, match=r"data.tokenizer: .*nope.json: no such file"):
        open_source(DataConfig(source="hf", dataset=str(hf_files["dict"]), tokenizer=str(tmp_path / "nope.json")))


def _run_isolated(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )


def test_hf_offline_and_missing_extra_give_clear_errors() -> None:
    code = """
        from trials.config import DataConfig
        from trials.data import open_source
        from trials.errors import TrialInputError
        # The tokenizer is loaded before the text files are looked at: the path is never read.
        for cfg in (DataConfig(source="hf", dataset="allenai/c4", subset="en"),
                    DataConfig(source="text", path="unread.txt", tokenizer="google-t5/t5-small")):
            try:
                open_source(cfg)
            except TrialInputError as exc:
                print("ERR", exc.message)
    """
    offline = _run_isolated(code, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    lines = [line for line in offline.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 2, offline.stdout + offline.stderr
    assert "data.dataset: cannot open 'allenai/c4' (en) from the Hugging Face hub (offline?)" in lines[0]
    assert "save_to_disk" in lines[0]
    assert "data.tokenizer: could not load 'google-t5/t5-small' from the Hugging Face hub" in lines[1]
    # Without the optional extra installed: the same call names the extra to install.
    missing = _run_isolated("import sys; sys.modules['datasets'] = None; sys.modules['tokenizers'] = None\n" + textwrap.dedent(code))
    lines = [line for line in missing.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 2, missing.stdout + missing.stderr
    assert all("pip install 'layerrope-sweeper[hf]'" in line for line in lines)
    assert lines[0].startswith("ERR data.source 'hf' needs the `datasets` library")
