"""LAMBADA's last-word perplexity (`trials.lambada`, `eval.tasks: [lambada]`), offline on small local files in
LAMBADA's format (a `text` field per passage).

The reference here is written from the definition, not from the module: the target is found on the text (the
characters after the last space, with that space), its tokens are the whole passage's tokens after the
context's, each is scored from a full forward pass of the model on the passage alone (`model(idx)`'s logits,
not the evaluation's target-rows-only head), and the perplexity is exp of the mean per-passage sum."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from models import ModelConfig, build_model
from trials.config import DataConfig, DivergenceConfig, EvalConfig, LambadaConfig, TrainConfig
from trials.data.tokenizer import ByteTokenizer
from trials.errors import TrialInputError
from trials.lambada import make_batches, open_lambada, perplexity, split_last_word, tokenize_passages
from trials.spec import TrialSpec
from trials.train import Trial

PASSAGES = [
    "the cat sat on the mat and looked at the dog",
    "she opened the door and saw her old friend john",
    "in the morning the sun rose over the quiet hills",
    "he said that the answer was always the same: forty-two",
    "after the long winter the river finally began to thaw",
]

LOOPED = ModelConfig(family="looped", width=32, depth=4, n_heads=2, vocab=256, seq_len=40, mlp_hidden=128,
                     extra={"prelude": 1, "core": 2, "coda": 1, "eval_loops": [1, 2, 4], "mean_loops": 2,
                            "max_loops": 4, "backprop_loops": 2, "value_embeddings": True, "qk_norm": True,
                            "mlp": "relu2", "tie_embeddings": True, "state_init": "like_weights"})
LLAMA = ModelConfig(scheme="layerrope", width=32, depth=2, n_heads=2, vocab=256, seq_len=40)


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: t}) + "\n" for t in texts))
    return path


def test_the_last_word_is_cut_at_the_last_space() -> None:
    assert split_last_word("a b c") == ("a b", " c")
    assert split_last_word("one two three.  \n") == ("one two", " three.")  # trailing whitespace first
    assert split_last_word("x, y: forty-two") == ("x, y:", " forty-two")  # punctuation stays with the word
    with pytest.raises(ValueError, match="space"):
        split_last_word("alone")


def test_byte_level_targets_are_the_bytes_of_space_and_word() -> None:
    [p] = tokenize_passages(["the end came"], ByteTokenizer(), seq_len=64)
    assert p.target == len(" came")
    assert p.tokens.tolist() == [0] + list(b"the end came")  # the end-of-document byte starts the passage
    [cut] = tokenize_passages(["the end came"], ByteTokenizer(), seq_len=6)  # at most seq_len inputs
    assert cut.tokens.tolist() == list(b"nd came") and cut.target == 5  # seq_len + 1 tokens


def reference_perplexity(model: torch.nn.Module, texts: list[str], seq_len: int) -> list[float]:
    """exp(mean over passages of the summed NLL of the last word's tokens), from full forward passes."""
    totals = torch.zeros(model.stack, dtype=torch.float64)
    for text in texts:
        cut = text.rstrip().rindex(" ")
        whole, context = text.rstrip().encode(), text.rstrip()[:cut].encode()
        ids = [0] + list(whole)  # byte-level: the end-of-document byte, then the passage
        target = len(whole) - len(context)
        ids = ids[-(seq_len + 1):]
        idx = torch.tensor([ids[:-1]])
        with torch.no_grad():
            logp = torch.log_softmax(model(idx).double(), dim=-1)[:, 0]  # [K, T, V]
        for t in range(len(ids) - 1 - target, len(ids) - 1):
            totals -= logp[:, t, ids[t + 1]]
    return [math.exp(v / len(texts)) for v in totals.tolist()]


def logs(values: list[float | None]) -> list[float]:
    return [math.log(v) for v in values if v is not None]


@pytest.mark.parametrize("cfg", [LLAMA, LOOPED], ids=["llama", "looped"])
def test_perplexity_equals_the_definition(cfg: ModelConfig) -> None:
    model = build_model(cfg, stack=2, seed=3).eval()
    with torch.no_grad():  # two different members: the per-member sums must not mix
        for p in model.parameters():
            p[1].mul_(1.5)
    long = " ".join(["word"] * 20) + " last"  # 105 bytes: truncated to the last 40 inputs
    texts = PASSAGES + [long]
    passages = tokenize_passages(texts, ByteTokenizer(), cfg.seq_len)
    got = perplexity(model, make_batches(passages, rows=4, seq_len=cfg.seq_len))  # 6 passages: a filled-up last chunk
    want = reference_perplexity(model, texts, cfg.seq_len)
    assert got[0] != pytest.approx(got[1], rel=1e-3)
    assert logs(got) == pytest.approx(logs(want), abs=1e-5)  # mean NLL per word, to float32's rounding


def test_batches_have_one_shape() -> None:
    passages = tokenize_passages(PASSAGES, ByteTokenizer(), seq_len=256)
    batches = make_batches(passages, rows=2, seq_len=256)
    assert {tuple(b.inputs.shape) for b in batches} == {(2, 64)}  # longest 55 inputs, padded to 64
    assert [b.passages for b in batches] == [2, 2, 1]
    assert sum(len(b.rows) for b in batches) == sum(p.target for p in passages)


def test_a_trial_scores_every_member_at_its_final_evaluation(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "lambada.jsonl", PASSAGES)
    evaluation = EvalConfig(tasks=("lambada",), lambada=LambadaConfig(source="jsonl", path=str(path)))
    train = TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=2, micro_batch=2)
    spec = TrialSpec(model=LOOPED, train=train, data=DataConfig(source="builtin"), lrs=[1e-3, 4e-3], seed=0,
                     eval=evaluation, divergence=DivergenceConfig(stall_margin=None))
    trial = Trial(spec)
    results = trial.run()
    trial.model.eval()
    want = reference_perplexity(trial.model, PASSAGES, LOOPED.seq_len)
    assert logs([r.lambada_ppl for r in results]) == pytest.approx(logs(want), abs=1e-5)
    assert results[0].lambada_ppl != pytest.approx(results[1].lambada_ppl, rel=1e-6)
    assert json.loads(json.dumps(results[0].to_dict()))["lambada_ppl"] == results[0].lambada_ppl
    # the spec carries the task through Ray's dict and back; without tasks its dict is what it was before
    assert TrialSpec.from_dict(spec.to_dict()).eval == evaluation
    assert "eval" not in TrialSpec(model=LOOPED, train=train, lrs=[1e-3]).to_dict()


def test_hf_datasets_folder_offline(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "lambada"
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": PASSAGES})}).save_to_disk(str(folder))
    task = open_lambada(LambadaConfig(dataset=str(folder)), DataConfig(), seq_len=64, vocab=256, rows=2)
    jsonl = write_jsonl(tmp_path / "l.jsonl", PASSAGES)
    same = open_lambada(LambadaConfig(source="jsonl", path=str(jsonl)), DataConfig(), seq_len=64, vocab=256, rows=2)
    assert task.passages == same.passages == 5
    assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(task.batches, same.batches))
    limited = open_lambada(LambadaConfig(dataset=str(folder), limit=3), DataConfig(), seq_len=64, vocab=256, rows=2)
    assert limited.passages == 3


def test_inputs_a_user_can_fix_are_named(tmp_path: Path) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", PASSAGES[:2], field="sentence")
    with pytest.raises(TrialInputError, match=r"bad.jsonl:1: no text field 'text'"):
        open_lambada(LambadaConfig(source="jsonl", path=str(bad)), DataConfig(), seq_len=64, vocab=256, rows=2)
    good = write_jsonl(tmp_path / "good.jsonl", PASSAGES)
    with pytest.raises(TrialInputError, match="eval.lambada.tokenizer: pre-tokenized data"):
        open_lambada(LambadaConfig(source="jsonl", path=str(good)), DataConfig(source="tokens", path="x"),
                     seq_len=64, vocab=256, rows=2)
    with pytest.raises(TrialInputError, match="more than model.vocab 100"):
        open_lambada(LambadaConfig(source="jsonl", path=str(good)), DataConfig(), seq_len=64, vocab=100, rows=2)
    vit = ModelConfig(family="vit", depth=1, vocab=10, seq_len=17, width=16, n_heads=2,
                      extra={"image_size": 16, "patch_size": 4})
    spec = TrialSpec(model=vit, train=TrainConfig(steps=1, batch_size=2), data=DataConfig(source="builtin_images", builtin_classes=2, builtin_per_class=10),
                     eval=EvalConfig(tasks=("lambada",), lambada=LambadaConfig(source="jsonl", path=str(good))))
    with pytest.raises(TrialInputError, match="eval.tasks: lambada score a language model"):
        Trial(spec)
