"""A sweep's own tokenizer (`data.tokenizer_train`, trials.data.bpe): trained from the training documents only,
exactly the asked vocabulary with the end-of-document token, deterministic, trained once; the schema and the
plan accept a tokenizer file that the launch will train, and refuse a recipe that cannot train one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sweeper.cli import main
from sweeper.search.planner import build_plan, compat_of
from sweeper.spec.schema import load_sweep
from trials.config import DataConfig, DivergenceConfig, TokenizerTrainConfig, TrainConfig
from trials.data.bpe import EOS_TOKEN, ensure_tokenizer, train_bpe, training_documents
from trials.data.cache import in_val_split
from trials.errors import TrialInputError

WORDS = ("river stone light orbit garden engine signal harbor winter copper lattice meadow thunder "
         "quiet velvet amber falcon compass lantern mosaic").split()


def _corpus(tmp_path: Path, n_docs: int = 400) -> Path:
    """A JSONL corpus of generated sentences (every document distinct, so the hash split sends some to validation)."""
    lines = []
    for i in range(n_docs):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12)]
        lines.append(json.dumps({"text": f"Document {i}: " + " ".join(words) + f". The {i % 13} numbers 12{i} end."}))
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_documents_are_the_training_split_in_file_order(tmp_path: Path) -> None:
    path = _corpus(tmp_path)
    cfg = DataConfig(source="jsonl", path=str(path), val_fraction=0.2)
    got = list(training_documents(cfg, 10_000))
    rows = [json.loads(line)["text"] for line in path.read_text().splitlines()]
    expected = [text for i, text in enumerate(rows) if not in_val_split(f"corpus.jsonl:{i}", 0.2)]
    assert got == expected and 0 < len(got) < len(rows)  # the held-out documents are never trained on
    assert list(training_documents(cfg, 5)) == expected[:5]


def test_a_bpe_of_exactly_the_vocabulary_with_the_end_of_document_token(tmp_path: Path) -> None:
    cfg = DataConfig(source="jsonl", path=str(_corpus(tmp_path)), val_fraction=0.2)
    out = tmp_path / "tok" / "mine.json"
    tok = train_bpe(training_documents(cfg, 10_000), 300, out)
    assert tok.vocab == 300 and tok.eos == 0
    raw = json.loads(out.read_text())
    assert raw["added_tokens"][0]["content"] == EOS_TOKEN
    ids = tok.encode_batch(["river stone light, and unseen wörds ∑ 42"])[0]
    assert ids[-1] == 0 and int(ids.max()) < 300  # bytes cover any text: nothing unknown
    again = train_bpe(training_documents(cfg, 10_000), 300, tmp_path / "again.json")
    assert again.fingerprint == tok.fingerprint  # deterministic for the same documents
    with pytest.raises(TrialInputError, match="only .* ids, fewer than vocab 60000"):
        train_bpe(training_documents(cfg, 20), 60_000, tmp_path / "big.json")
    assert not (tmp_path / "big.json").exists() and not list(tmp_path.glob(".big.json.*"))


def test_trained_once_then_read(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    cfg = DataConfig(source="jsonl", path=str(_corpus(tmp_path)), tokenizer=str(out),
                     tokenizer_train=TokenizerTrainConfig(vocab=280, documents=300))
    first = ensure_tokenizer(cfg)
    assert first is not None and first.vocab == 280
    stamp = out.stat().st_mtime_ns
    assert ensure_tokenizer(cfg) is None and out.stat().st_mtime_ns == stamp  # the file exists: nothing trained


def test_the_recipe_is_not_part_of_a_cells_settings() -> None:
    plain = DataConfig(source="jsonl", path="x.jsonl", tokenizer="t.json")
    trained = plain.model_copy(update={"tokenizer_train": TokenizerTrainConfig()})
    args = (TrainConfig(steps=10), DivergenceConfig())
    from models import ModelConfig

    model = ModelConfig(scheme="pre", width=16, depth=1, n_heads=2, vocab=300, seq_len=16)
    assert compat_of(model, args[0], plain, args[1]) == compat_of(model, args[0], trained, args[1])


def _sweep(tmp_path: Path, data: dict) -> Path:
    doc = {"name": "tok", "methods": ["pre"], "model": {"depths": [1], "width": 16, "heads": 2, "seq_len": 16},
           "data": data, "train": {"steps": 4, "batch_size": 2}, "lr": {"grid": [1e-3]}, "seeds": [0]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_and_plan_a_tokenizer_the_launch_will_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = _corpus(tmp_path)
    target = tmp_path / "tokenizers" / "mine.json"
    data = {"source": "jsonl", "path": str(corpus), "tokenizer": str(target)}
    assert main(["validate", str(_sweep(tmp_path, data))]) == 2  # a missing file and no recipe
    assert "data.tokenizer: no such file" in capsys.readouterr().err
    recipe = {**data, "tokenizer_train": {"vocab": 290, "documents": 300}}
    path = _sweep(tmp_path, recipe)
    assert main(["validate", str(path)]) == 0
    plan = build_plan(load_sweep(path).config, base=tmp_path)
    assert plan.vocab == 290 and not target.exists()  # planned with the recipe's vocabulary, nothing trained

    from sweeper.run import sweep_dir

    lines: list[str] = []
    sweep_dir.train_tokenizer(plan, type("Console", (), {"print": staticmethod(lines.append)})())
    assert target.exists() and "byte-level BPE of 290 ids" in lines[0]
    assert build_plan(load_sweep(path).config, base=tmp_path).vocab == 290  # now read from the file


@pytest.mark.parametrize("change, field", [
    ({"source": "builtin", "path": None}, "data.tokenizer_train"),
    ({"tokenizer": "gpt2"}, "data.tokenizer_train"),
])
def test_a_recipe_that_cannot_train_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict,
                                               field: str) -> None:
    data = {"source": "jsonl", "path": str(_corpus(tmp_path)), "tokenizer": str(tmp_path / "t.json"),
            "tokenizer_train": {"vocab": 290, "documents": 10}, **change}
    data = {k: v for k, v in data.items() if v is not None}
    assert main(["validate", str(_sweep(tmp_path, data))]) == 2
    assert field in capsys.readouterr().err


def test_a_saved_hugging_face_dataset_gives_its_training_documents(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [json.loads(line)["text"] for line in _corpus(tmp_path, 200).read_text().splitlines()]
    datasets.Dataset.from_dict({"text": rows}).save_to_disk(str(tmp_path / "saved"))
    cfg = DataConfig(source="hf", dataset=str(tmp_path / "saved"), val_split=None, val_fraction=0.2, streaming=False)
    assert list(training_documents(cfg, 10_000)) == [t for t in rows if not in_val_split(t, 0.2)]
