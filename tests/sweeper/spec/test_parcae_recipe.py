"""The shipped Parcae sweeps train Parcae's official recipe, value by value as the reference notes state it
(../shared/reference/schemes.md, "Training recipes in the references", the Parcae paragraph): the numbers are
read from that paragraph's text here (not written again in the test) and compared with every planned cell of
the four Parcae files, resolved as a trial receives them. Also: the per-size AdamW LR, the budgets of 80 x the
label, no placeholder, and what Parcae applies no weight decay to."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from models import build_model
from sweeper.cli import main
from sweeper.search.planner import Plan, build_plan
from sweeper.spec.schema import load_sweep
from trials.engine import make_optimizer, resolve_execution

ROOT = Path(__file__).resolve().parents[3]
SWEEPS = ROOT / "sweeps"
STUDY = ("parcae-study.yaml", "parcae-baseline-study.yaml")
SEARCH = ("parcae.yaml", "parcae-baseline.yaml")
REFERENCE_PLACES = (ROOT.parent / "shared" / "reference" / "schemes.md", ROOT.parents[1] / "shared" / "reference" /
                    "schemes.md", Path("/work/shared/reference/schemes.md"))


def reference_text() -> str:
    """The Parcae paragraph of schemes.md, on one line (skips when the notes are not on this machine)."""
    given = os.environ.get("LAYERROPE_REFERENCE")
    places = (Path(given),) if given else REFERENCE_PLACES
    path = next((p for p in places if p.is_file()), None)
    if path is None:
        pytest.skip(f"the reference notes (schemes.md) are not on this machine (looked in {', '.join(map(str, places))}; "
                    "set LAYERROPE_REFERENCE to the file)")
    text = path.read_text(encoding="utf-8")
    start = text.index("- Parcae (")
    end = text.index("- DeiT", start)
    return " ".join(text[start:end].split())


def number(pattern: str, text: str) -> list[float]:
    found = re.search(pattern, text)
    assert found is not None, f"the reference no longer says {pattern!r}"
    return [float(g.replace(",", "")) for g in found.groups()]


def official() -> dict[str, object]:
    """Every value of the recipe, read from the paragraph."""
    t = reference_text()
    adamw = re.search(r"AdamW LR ([\d.e-]+) \((\d+M), (\d+M)\) and ([\d.e-]+) \((\d+M)\)", t)
    assert adamw is not None
    tokens = re.search(r"tokens ([\d.]+)B / ([\d.]+)B / ([\d.]+)B for (\d+M) / (\d+M) / (\d+M)", t)
    assert tokens is not None
    splits = {m[0]: (int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in re.findall(r"(\d+M): (\d)/(\d)/(\d) at d(\d+)", t)}
    assert set(splits) == {"140M", "370M", "770M"}
    assert "no warmup, constant, then linear cooldown to 0" in t and "no weight decay on embeddings, norms and biases" in t
    assert "bf16 mixed precision; compiled" in t and "tied input/output embeddings" in t and "FineWeb-Edu" in t
    assert "QK-norm" in t and "no gate" in t and "a norm after the prelude" in t and "state initialised like a weight" in t
    assert "loop count per **sequence**" in t and '"scaled-zero" init with orthogonal matrices' in t
    return {
        "muon_lr": number(r"Muon LR ([\d.e-]+)", t)[0],
        "momentum": number(r"momentum ([\d.]+) \(Nesterov\)", t)[0],
        "muon_wd": number(r'weight decay ([\d.]+), "cautious" and decayed linearly to 0', t)[0],
        "adamw_lr": {adamw[2]: float(adamw[1]), adamw[3]: float(adamw[1]), adamw[5]: float(adamw[4])},
        "betas": tuple(number(r"betas \(([\d.]+), ([\d.]+)\)", t)),
        "eps": number(r"eps ([\d.e-]+), no weight decay", t)[0],
        "cooldown": number(r"over the last (\d+)% of steps", t)[0] / 100,
        "clip": number(r"gradient clip ([\d.]+)", t)[0],
        "batch": tuple(int(v) for v in number(r"batch (\d+) sequences × (\d+) tokens", t)),
        "tokens": {tokens[4 + i]: float(tokens[1 + i]) * 1e9 for i in range(3)},
        "per_param": number(r"\((\d+) per parameter\)", t)[0],
        "vocab": int(number(r"vocabulary ([\d,]+)", t)[0]),
        "norm_eps": number(r"RMSNorm \(eps ([\d.e-]+)\)", t)[0],
        "mlp_ratio": number(r"ReLU² MLP with (\d+)× width", t)[0],
        "eval_loops": tuple(int(v) for v in number(r"evaluated at (\d+), (\d+), (\d+) and (\d+) iterations", t)),
        "mean_loops": number(r"truncated Poisson of mean (\d+)", t)[0],
        "backprop": int(number(r"gradients through the last (\d+) iterations", t)[0]),
        "context": int(number(r"context (\d+)", t)[0]),
        "value_tables_140M": int(number(r"(\d+) tables at 140M", t)[0]),
        "splits": splits,
    }


def plan_of(name: str) -> Plan:
    return build_plan(load_sweep(SWEEPS / name, need_data=False).config, output="/tmp/unused")


def label(size: str) -> str:
    return size.removeprefix("parcae-").removesuffix("-gpt")


@pytest.mark.parametrize("name", STUDY + SEARCH)
def test_every_cell_trains_the_recipe_of_the_reference(name: str) -> None:
    ref = official()
    plan = plan_of(name)
    looped = plan.config.model.family == "looped"
    assert {c.size for c in plan.cells} == {f"parcae-{s}{'' if looped else '-gpt'}" for s in ("140M", "370M", "770M")}
    for cell in plan.cells:
        size, train, model, opt = label(cell.size), cell.train, cell.model, cell.train.optimizer
        muon = opt.muon
        # the optimizer: Muon's LR is the point's, AdamW's the tied ratio times it
        assert opt.kind == "muon" and muon.swept == "muon" and muon.other_lr is None
        muon_lr = cell.policy.fixed if cell.policy.fixed is not None else cell.policy.center
        assert muon_lr == ref["muon_lr"]
        assert muon.adamw_lr_ratio * muon_lr == pytest.approx(ref["adamw_lr"][size], rel=1e-12)
        assert (muon.momentum, muon.nesterov, muon.weight_decay) == (ref["momentum"], True, ref["muon_wd"])
        assert muon.cautious and muon.weight_decay_schedule == "linear"
        assert opt.betas == ref["betas"] and opt.eps == ref["eps"] and opt.weight_decay == 0.0
        assert opt.grad_clip == ref["clip"]
        # the schedule: no warmup, constant, linear to 0 over the last 50%
        s = train.schedule
        assert (s.warmup, s.decay, s.cooldown, s.final_fraction) == (0.0, "linear", ref["cooldown"], 0.0)
        assert train.dtype == "bf16" and train.compile
        # batch, context, budget (80 x the label: within 2%, here within one step)
        assert (train.batch_size, model.seq_len) == ref["batch"] and model.seq_len == ref["context"]
        assert ref["per_param"] * float(size.removesuffix("M")) * 1e6 == pytest.approx(ref["tokens"][size], rel=1e-9)
        per_step = train.batch_size * model.seq_len
        assert 0 <= cell.tokens_per_point - ref["tokens"][size] < per_step
        # the vocabulary and the blocks
        assert model.vocab == ref["vocab"] and model.norm_eps == ref["norm_eps"]
        extra = model.extra
        assert extra["mlp"] == "relu2" and model.mlp_hidden == ref["mlp_ratio"] * model.width
        assert extra["qk_norm"] and extra["value_embeddings"] and extra["tie_embeddings"]
        assert extra["init"] == "scaled_zero_orthogonal"
        prelude, core, coda, width = ref["splits"][size]
        assert model.width == width and model.depth == prelude + core + coda
        if looped:
            assert (extra["prelude"], extra["core"], extra["coda"]) == (prelude, core, coda)
            assert extra["prelude_norm"] and extra["state_init"] == "like_weights"
            assert extra["loop_sampling"] == "per_sequence" and tuple(extra["eval_loops"]) == ref["eval_loops"]
            assert extra.get("mean_loops", 8.0) == ref["mean_loops"] and extra.get("backprop_loops", 4) == ref["backprop"]
        else:
            assert not {"prelude", "eval_loops", "loop_sampling"} & set(extra)
        if size == "140M":
            assert math.ceil(model.depth / 2) == ref["value_tables_140M"]  # alternating positions, the last included
        # the data and the evaluations
        assert cell.data.dataset == "HuggingFaceFW/fineweb-edu" and cell.eval.tasks == ("lambada",)
        assert cell.eval.lambada.dataset == "EleutherAI/lambada_openai"


@pytest.mark.parametrize("name", STUDY + SEARCH)
def test_no_placeholder_and_the_source_is_named(name: str) -> None:
    text = (SWEEPS / name).read_text()
    assert "placeholder" not in text.lower()
    assert "sandyresearch/parcae" in text and "launch_configs/*.yaml" in text and "parcae_lm/configs/" in text


@pytest.mark.parametrize("name", STUDY + SEARCH)
def test_the_dry_run_plans_the_budgets_of_the_reference(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ref = official()
    assert main(["launch", str(SWEEPS / name), "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for cell in plan["cells"]:
        want = ref["tokens"][label(cell["size"])]
        assert abs(cell["tokens_per_point"] / want - 1) < 0.02, cell
    # the grids are Muon's LR; AdamW's is the ratio times it, by size
    axis = plan["totals"]["lr_axis"]
    assert axis["label"] == "Muon LR (AdamW = r × lr)"
    assert {label(s): r for s, r in axis["adamw_lr_ratio"].items()} == {
        s: v / ref["muon_lr"] for s, v in ref["adamw_lr"].items()}
    assert main(["launch", str(SWEEPS / name), "--dry-run"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "learning rates (initial grid): Muon LR (AdamW = r × lr), r = 1 at" in text and "; 0.75 at" in text


def test_the_search_variants_differ_from_the_study_files_by_their_lr_search_only() -> None:
    for study, search in zip(STUDY, SEARCH):
        a, b = plan_of(study), plan_of(search)
        cells = {c.cell_id: c for c in b.cells}
        for cell in a.cells:
            twin = cells[cell.cell_id]
            assert cell.compat == twin.compat and cell.eval == twin.eval and cell.tokens_per_point == twin.tokens_per_point


def test_parcae_decays_the_muon_matrices_only() -> None:
    """No weight decay on embeddings (the tied table, the value tables), norms and scalars: one optimizer step
    of the resolved 140M recipe (on a small model of the same blocks) with zero gradients moves exactly the
    matrices Muon updates (its cautious decay), and nothing AdamW holds."""
    cell = next(c for c in plan_of("parcae-study.yaml").cells if c.size == "parcae-140M")
    model_cfg = replace(cell.model, width=32, n_heads=2, vocab=64, seq_len=16, mlp_hidden=128)
    model = build_model(model_cfg, stack=1, seed=0)
    train = cell.train.model_copy(update={"device": "cpu", "compile": False, "dtype": "fp32"})
    opt = make_optimizer(model, [8e-3], train, resolve_execution(train, torch.device("cpu")), steps=10)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step(1.0)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    kinds = {s.name: s.kind for s in model.param_specs()}
    hidden = {n for n, k in kinds.items() if k == "hidden" and before[n].abs().sum() > 0}  # zero-init o, down stay 0
    assert moved == hidden and hidden
    assert {kinds[n] for n in kinds if n.startswith(("tok_emb", "value_embeds"))} == {"embedding"}
    assert "head" not in kinds  # tied: the head is the embedding table


def test_validate_passes_and_names_the_tokenizer_the_launch_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As shipped, validate passes: the tokenizer file is trained at launch when missing (data.tokenizer_train);
    without the recipe, validate names the file the user supplies; a supplied file is used as it is."""
    assert main(["validate", str(SWEEPS / "parcae-study.yaml")]) == 0
    assert main(["validate", str(SWEEPS / "parcae-study.yaml"), "data.tokenizer_train=null"]) == 2
    err = capsys.readouterr().err
    assert "data.tokenizer: no such file or directory" in err and "parcae-32768.json" in err
    tokenizer = tmp_path / "tok.json"
    tokenizer.write_text("{}")  # validate checks that the file is there; the trial reads it
    assert main(["validate", str(SWEEPS / "parcae-study.yaml"), f"data.tokenizer={tokenizer}",
                 "data.tokenizer_train=null"]) == 0