"""Parcae's 32,768-id tokenizer path, offline: a `tokenizers` file of exactly 32,768 ids built here stands in
for Parcae's own (which users supply, sweeps/parcae-study.yaml says how), and the shipped recipe, with only the
data, the model's size and the budget overridden, trains a tiny looped model with Parcae's blocks for a few
steps on a local text file through it, evaluates it at several loop counts and scores LAMBADA with it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep
from trials.data import check_vocab, open_source
from trials.errors import TrialInputError
from trials.spec import TrialSpec
from trials.train import Trial

tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 32768
TINY = ("[{name: tiny-parcae, width: 32, depth: 3, heads: 2, mlp_hidden: 128}]")
EXTRA = ("{prelude: 1, core: 1, coda: 1, mlp: relu2, qk_norm: true, value_embeddings: true, tie_embeddings: true, "
         "init: scaled_zero_orthogonal, prelude_norm: true, state_init: like_weights, loop_sampling: per_sequence, "
         "eval_loops: [1, 2, 4], mean_loops: 2, max_loops: 4, backprop_loops: 2}")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A word-level tokenizer of 32,768 ids (unknown word 0, 32,766 words, the end-of-document token last), a
    text file that uses ids up to the last, and five passages in LAMBADA's JSONL form."""
    root = tmp_path_factory.mktemp("parcae-tok")
    words = [f"w{i:05d}" for i in range(VOCAB - 2)]
    vocab = {"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}, "</s>": VOCAB - 1}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    rng = random.Random(0)
    common = words[:40] + words[-8:]  # a small working vocabulary, the highest ids in it
    lines = [" ".join(rng.choice(common) for _ in range(rng.randint(8, 30))) for _ in range(500)]
    (root / "corpus.txt").write_text("\n".join(lines[:400]))
    (root / "val.txt").write_text("\n".join(lines[400:]))
    passages = [" ".join(rng.choice(common) for _ in range(12)) for _ in range(5)]
    (root / "lambada.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in passages))
    return {"tokenizer": root / "tokenizer.json", "corpus": root / "corpus.txt", "val": root / "val.txt",
            "lambada": root / "lambada.jsonl"}


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path_factory.getbasetemp() / "corpus-cache"))


def test_the_tokenizer_has_the_recipes_vocabulary(files: dict[str, Path]) -> None:
    source = open_source(load_sweep(ROOT / "sweeps" / "parcae-study.yaml", need_data=False, overrides=overrides(files))
                         .config.data)
    assert source.vocab == VOCAB
    check_vocab(VOCAB, source)
    with pytest.raises(TrialInputError, match="model.vocab 32000 is smaller than the data's vocabulary 32768"):
        check_vocab(32000, source)  # the ids reach 32,767: a 32,000-row model cannot read this data


def overrides(files: dict[str, Path]) -> list[str]:
    return [
        "data.source=text", f"data.path={files['corpus']}", f"data.tokenizer={files['tokenizer']}",
        f"data.val_path={files['val']}", f"model.sizes={TINY}", f"model.extra={EXTRA}", "model.seq_len=16",
        "train.tokens_per_param=null", "train.budget_params=total", "train.steps=12", "train.batch_size=4",
        "train.micro_batch=2", "train.eval_every=6", "train.eval_batches=2", "train.report_every=1",
        "train.device=cpu", "train.dtype=fp32", "train.compile=false", "resources.gpu=0", "resources.cpu=1",
        f"eval.lambada={{source: jsonl, path: {files['lambada']}}}",
    ]


def test_the_recipe_trains_a_tiny_looped_model_through_the_tokenizer(files: dict[str, Path]) -> None:
    validated = load_sweep(ROOT / "sweeps" / "parcae-study.yaml", overrides=overrides(files))  # validate passes
    plan = build_plan(validated.config, output="/tmp/unused")
    cell = plan.by_id()["layerrope/tiny-parcae/s0"]
    assert cell.model.vocab == VOCAB and cell.train.optimizer.kind == "muon" and cell.train.schedule.cooldown == 0.5
    spec = TrialSpec(model=cell.model, train=cell.train, data=cell.data, divergence=cell.divergence, eval=cell.eval,
                     lrs=[cell.policy.fixed, cell.policy.fixed / 2], seed=0)
    reports = []
    results = Trial(spec).run(report=reports.append)
    for result in results:  # stalled or not, 12 steps in (the unigram loss is 5 nats here: not the point)
        assert result.outcome in ("ok", "stalled") and result.loss is not None, (result.reason, result.init_loss)
        assert result.init_loss < math.log(VOCAB) + 0.5
        assert set(result.loop_losses or {}) == {"1", "2", "4"} and result.loop_losses["4"] == result.loss
        assert result.lambada_ppl is not None and 1 < result.lambada_ppl < VOCAB ** 2
    assert results[0].loss < results[0].init_loss - 1  # it learned from the text at the recipe's LR
    first, last = reports[0].members[0].train_loss, reports[-1].members[0].train_loss
    assert last < first
