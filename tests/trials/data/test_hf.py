"""The Hugging Face data path (datasets + tokenizers), all on local files: a dataset written
with `save_to_disk` and a tokenizer trained here; offline and missing-extra errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from trials.config import DataConfig
from trials.data import open_source
from trials.errors import TrialInputError

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
def test_hf_saved_dataset_with_local_tokenizer(hf_files: dict[str, Path], streaming: bool, stream_contract) -> None:
    cfg = DataConfig(source="hf", dataset=str(hf_files["dict"]), tokenizer=str(hf_files["tokenizer"]), streaming=streaming)
    src = open_source(cfg)
    assert src.vocab == tokenizers.Tokenizer.from_file(str(hf_files["tokenizer"])).get_vocab_size() > 12
    assert src.fingerprint.startswith(f"hf:{hf_files['dict']}:-:train:fp-") and ":split-validation" in src.fingerprint
    stream_contract(src, batch=2, seq_len=12)
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


def test_hf_single_dataset_holds_out_by_document(hf_files: dict[str, Path], stream_contract) -> None:
    src = open_source(DataConfig(source="hf", dataset=str(hf_files["single"]), tokenizer=str(hf_files["tokenizer"]), streaming=False, val_fraction=0.2))
    assert src.fingerprint.endswith(":holdout0.2")
    stream_contract(src, batch=2, seq_len=12)


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


def test_trailing_sentinel_ids_are_not_part_of_the_text_vocabulary(tmp_path: Path) -> None:
    """As the T5 tokenizer: pieces, then special sentinels only span corruption uses (32,000 + 100 in T5)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from trials.data.tokenizer import load_tokenizer

    words = "alpha beta gamma delta epsilon zeta".split()
    texts = [" ".join(words[(i + j) % 6] for j in range(6)) for i in range(50)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "</s>", "<unk>"]))
    pieces = tok.get_vocab_size()
    tok.add_special_tokens([f"<extra_id_{i}>" for i in range(3)])
    tok.save(str(tmp_path / "t5like.json"))
    t5like = load_tokenizer(str(tmp_path / "t5like.json"))
    assert (t5like.full_vocab, t5like.vocab) == (pieces + 3, pieces) and t5like.eos == 1
    ids = t5like.encode_batch(["alpha <extra_id_1> beta"])[0]
    assert ids.max() < pieces and ids[-1] == 1 and len(ids) == 3  # the literal sentinel is dropped, EOS kept
    assert t5like.fingerprint.endswith(f"-text{pieces}")
    # A trailing special token that is the EOS (GPT-2's <|endoftext|>) stays in the vocabulary.
    gpt = Tokenizer(models.BPE(unk_token="<unk>"))
    gpt.pre_tokenizer = pre_tokenizers.Whitespace()
    gpt.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>"]))
    gpt.add_special_tokens(["<|endoftext|>"])
    gpt.save(str(tmp_path / "gptlike.json"))
    gptlike = load_tokenizer(str(tmp_path / "gptlike.json"))
    assert gptlike.vocab == gptlike.full_vocab == gptlike.eos + 1 and "-text" not in gptlike.fingerprint
