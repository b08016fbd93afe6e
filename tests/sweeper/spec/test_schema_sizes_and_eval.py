"""Three keys of the sweep file a published recipe needs, through `sweeper validate` and the planner: a size's
own `train` overrides (a per-size AdamW LR), `train.budget_params: label` (the count a named size's label
states) and the `eval` section (`tasks: [lambada]`). Accepted with their values; refused naming the key, exit 2,
nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.search.planner import build_plan
from sweeper.spec.schema import validate_data


def sweep(**changes: object) -> dict:
    raw: dict = {
        "name": "recipe", "methods": ["pre", {"name": "slow", "scheme": "pre", "train": {"batch_size": 2}}],
        "model": {"family": "llama", "sizes": ["58M", {"name": "130M", "train": {"optimizer": {"muon": {"adamw_lr_ratio": 0.75}}}}],
                  "seq_len": 32, "vocab": 256},
        "train": {"tokens_per_param": 80, "budget_params": "label", "batch_size": 4,
                  "optimizer": {"kind": "muon", "muon": {"adamw_lr_ratio": 1.0}}},
        "lr": {"fixed": 8e-3},
    }
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            raw[section] = {**raw[section], name: value}
        else:
            raw[section] = value
    return raw


def test_a_sizes_train_overrides_apply_to_its_cells_over_the_methods() -> None:
    plan = build_plan(validate_data(sweep()), output="/tmp/unused")
    cells = plan.by_id()
    assert cells["pre/58M/s0"].train.optimizer.muon.adamw_lr_ratio == 1.0
    assert cells["pre/130M/s0"].train.optimizer.muon.adamw_lr_ratio == 0.75
    slow = cells["slow/130M/s0"].train  # the method's override and the size's, both
    assert slow.batch_size == 2 and slow.optimizer.muon.adamw_lr_ratio == 0.75
    assert cells["pre/130M/s0"].fingerprint != cells["pre/58M/s0"].fingerprint


def test_label_budgets_are_the_ratio_times_the_count_the_label_states() -> None:
    cells = build_plan(validate_data(sweep()), output="/tmp/unused").by_id()
    for name, nominal in (("58M", 58e6), ("130M", 130e6)):
        cell = cells[f"pre/{name}/s0"]
        per_step = 4 * 32
        assert cell.train.tokens == 80 * nominal and cell.train.tokens_per_param is None
        assert cell.steps_per_point == -(-80 * nominal // per_step) and cell.tokens_per_point == cell.steps_per_point * per_step
        assert abs(cell.tokens_per_point / (80 * cell.params) - 1) > 0.01  # not the exact count's budget
    total = build_plan(validate_data(sweep(train__budget_params="total")), output="/tmp/unused").by_id()["pre/58M/s0"]
    assert total.tokens_per_point == -(-80 * total.params // 128) * 128


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (sweep(model={"family": "llama", "depths": [2], "seq_len": 32, "vocab": 256}),
         "train.budget_params: label multiplies the parameter count a named size's label states; a depth"),
        (sweep(model={"family": "llama", "sizes": [{"name": "mine", "width": 32, "depth": 2, "heads": 2}], "seq_len": 32,
                      "vocab": 256}), "size 'mine' states none: give total or nonembed"),
        (sweep(model={"family": "llama", "sizes": [{"name": "58M", "train": {"optimizer": {"muon": {"swept": "both"}}}}],
                      "seq_len": 32, "vocab": 256}), "model.sizes[0].train.optimizer.muon.swept: expected one of"),
        (sweep(model={"family": "llama", "sizes": [{"name": "58M", "train": {"batch_size": 0}}], "seq_len": 32,
                      "vocab": 256}), "model.sizes[0].train.batch_size"),
        (sweep(eval={"tasks": ["hellaswag"]}), "eval.tasks[0]: expected one of 'lambada' (got 'hellaswag')"),
        (sweep(eval={"tasks": ["lambada", "lambada"]}), "eval.tasks: each task once"),
        (sweep(eval={"tasks": ["lambada"], "lambada": {"source": "jsonl"}}), "eval.lambada: path: required for source"),
        (sweep(eval={"tasks": ["lambada"], "lambada": {"source": "jsonl", "path": "/no/such/lambada.jsonl"}}),
         "eval.lambada.path: no such file: /no/such/lambada.jsonl"),
        (sweep(eval={"tasks": ["lambada"]}, data={"source": "tokens", "path": "."}),
         "eval.lambada.tokenizer: pre-tokenized data (source 'tokens') does not say which tokenizer"),
        ({"name": "v", "methods": ["pre"], "model": {"family": "vit", "sizes": ["vit-tiny"]},
          "data": {"source": "builtin_images"}, "train": {"steps": 2}, "eval": {"tasks": ["lambada"]}},
         "eval.tasks: lambada score a language model; the vit family classifies images"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(raw: dict, needle: str) -> None:
    with pytest.raises(UserError) as err:
        validate_data(raw)
    assert needle in "\n".join(err.value.lines()), err.value.lines()


def test_validate_accepts_the_eval_section_and_launch_writes_nothing_on_a_refusal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lambada = tmp_path / "lambada.jsonl"
    lambada.write_text('{"text": "a b c"}\n')
    path = tmp_path / "sweep.yaml"
    path.write_text(f"""name: e
output: {tmp_path / 'out'}
methods: [pre]
model: {{width: 32, heads: 2, depths: [2], seq_len: 32}}
train: {{steps: 2, batch_size: 2}}
eval: {{tasks: [lambada], lambada: {{source: jsonl, path: {lambada}}}}}
""")
    assert main(["validate", str(path)]) == 0
    path.write_text(path.read_text().replace("tasks: [lambada]", "tasks: [piqa]"))
    assert main(["launch", str(path)]) == 2
    err = capsys.readouterr().err
    assert "eval.tasks[0]" in err and "Traceback" not in err and not (tmp_path / "out").exists()
