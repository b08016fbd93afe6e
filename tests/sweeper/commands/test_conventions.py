"""Issue 18 through the real CLI, in-process: validation in one round (and never laxer than launch's
planning), one output convention across commands, and KEY=VALUE overrides recorded in the sweep directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sweeper.cli import main
from sweeper.run import sweep_dir
from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep

BASE = """\
name: conv
output: {out}
methods:
  - pre
  - {{name: lr-b0, scheme: layerrope, scheme_options: {{beta_init: 0.5}}}}
model: {{width: 32, heads: 2, depths: [1, 2], seq_len: 32}}
train: {{steps: 20, batch_size: 4}}
lr: {{center: 3e-3, points: 3}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def base(tmp_path: Path, **replace: str) -> str:
    text = BASE.format(out=tmp_path / "out")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_reports_scheme_options_typos_and_missing_files_in_one_round(tmp_path, capsys):
    text = base(tmp_path, **{"{beta_init: 0.5}": "{beta: 0, bsae: 10}",
                             "methods:": "data: {source: text, path: /no/such/corpus.txt, text_colum: body}\nmethods:"})
    path = write(tmp_path, text)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == f"error: {path}: 4 problems"
    assert f"error: {path}:6: methods[1].scheme_options.beta: unknown option 'beta' for scheme 'layerrope'; did you mean 'beta_init'?" in err
    assert f"{path}:6: methods[1].scheme_options.bsae: unknown option 'bsae'" in err
    assert f"{path}:3: data.text_colum: unknown key 'text_colum'; did you mean 'text_column'?" in err
    assert f"{path}:3: data.path: no such file or directory: /no/such/corpus.txt" in err
    assert not (tmp_path / "out").exists()


def test_model_level_scheme_options_are_checked_against_every_method(tmp_path, capsys):
    text = base(tmp_path, **{"seq_len: 32}": "seq_len: 32, scheme_options: {beta_init: 0.5}}"})
    code, _, err = run(capsys, "validate", str(write(tmp_path, text)))
    assert code == 2  # `pre` takes no beta_init: the planner would refuse every pre cell
    assert "model.scheme_options.beta_init: unknown option 'beta_init' for scheme 'pre'" in err
    assert "(method 'pre')" in err


# Mutations of a good file. Each either fails `validate`, or passes both `validate` and `launch --dry-run`:
# no file passes validation and is then refused by launch's planning.
MUTATIONS = {
    "good": {},
    "unknown scheme option": {"{beta_init: 0.5}": "{beta: 0}"},
    "scheme option of another scheme": {"- pre": "- {name: pre, scheme_options: {beta_init: 1}}"},
    "model-level option": {"seq_len: 32}": "seq_len: 32, scheme_options: {write_gains: false}}"},
    "option value of a wrong type": {"{beta_init: 0.5}": "{beta_init: [1, 2]}"},
    "write gains off": {"{beta_init: 0.5}": "{write_gains: false}"},
    "deepnet": {"- pre": "- deepnet"},
    "named sizes": {"depths: [1, 2]": "sizes: [{name: tiny, width: 32, depth: 2, heads: 2}]"},
    "per-method train": {"- pre": "- {name: pre, train: {steps: 0}}"},
    "odd head size": {"heads: 2": "heads: 32"},
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_nothing_passes_validate_and_then_fails_launch_planning(tmp_path, capsys, case):
    path = write(tmp_path, base(tmp_path, **MUTATIONS[case]))
    validated, _, verr = run(capsys, "validate", str(path))
    planned, _, lerr = run(capsys, "launch", str(path), "--dry-run", "--format", "json")
    assert validated in (0, 2) and planned in (0, 2), (verr, lerr)
    if validated == 0:
        assert planned == 0, f"validate passed but launch --dry-run refused: {lerr}"
    else:
        assert all(line.startswith("error: ") for line in verr.splitlines()), verr
    if case == "good":
        assert validated == 0


def test_format_json_and_its_alias_agree_everywhere(tmp_path, capsys):
    path = write(tmp_path, base(tmp_path))
    for argv in (["validate", str(path)], ["launch", str(path), "--dry-run"], ["models"]):
        code_a, json_a, _ = run(capsys, *argv, "--format", "json")
        code_b, json_b, _ = run(capsys, *argv, "--json")
        assert code_a == code_b == 0
        assert json.loads(json_a) == json.loads(json_b)


def test_an_unknown_flag_prints_the_subcommands_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(tmp_path / "x.yaml"), "--no-such-flag"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("usage: sweeper validate ")
    assert "unrecognized arguments: --no-such-flag" in err


def test_old_flag_spellings_still_work(tmp_path, capsys):
    target = tmp_path / "schema.json"
    assert run(capsys, "schema", "--output", str(target))[0] == 0
    assert json.loads(target.read_text())["title"]
    assert run(capsys, "schema", "--out", str(tmp_path / "b.json"))[0] == 0
    path = write(tmp_path, base(tmp_path))
    code, out, _ = run(capsys, "launch", str(path), "--dry-run", "--json", "--output", str(tmp_path / "elsewhere"))
    assert code == 0 and json.loads(out)["totals"]["sweep_dir"] == str(tmp_path / "elsewhere")


def test_overrides_are_validated_like_the_file_and_errors_name_them(tmp_path, capsys):
    path = write(tmp_path, base(tmp_path))
    code, out, _ = run(capsys, "validate", str(path), "train.steps=7", "lr.center=1e-3", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["config"]["train"]["steps"] == 7 and doc["config"]["lr"]["center"] == 1e-3
    assert doc["overrides"] == ["train.steps=7", "lr.center=1e-3"]
    code, _, err = run(capsys, "validate", str(path), "train.stpes=7", "methods[1].scheme_options.beta_init=high")
    assert code == 2
    assert "override 'train.stpes=7': train.stpes: unknown key 'stpes'; did you mean 'steps'?" in err
    assert "override 'methods[1].scheme_options.beta_init=high'" in err
    code, _, err = run(capsys, "validate", str(path), "methods[9].lr.points=3")
    assert code == 2 and "override 'methods[9].lr.points=3': methods[9]: no such list item" in err
    code, _, err = run(capsys, "validate", str(path), "train.steps")
    assert code == 2 and "expected KEY=VALUE" in err


def test_overrides_set_a_string_method_entry_and_follow_options(tmp_path, capsys):
    path = write(tmp_path, base(tmp_path))
    code, out, _ = run(capsys, "launch", str(path), "--dry-run", "--json", "methods[0].lr.points=4")
    assert code == 0
    cells = json.loads(out)["cells"]
    assert {len(c["initial_grid"]) for c in cells if c["method"] == "pre"} == {4}
    assert {len(c["initial_grid"]) for c in cells if c["method"] == "lr-b0"} == {3}


def test_overrides_are_recorded_and_a_relaunch_without_them_resumes_the_same_sweep(tmp_path, capsys):
    path = write(tmp_path, base(tmp_path))
    validated = load_sweep(path, overrides=["train.steps=7"])
    plan = build_plan(validated.config, source=path)
    plan.overrides, plan.document = validated.overrides, validated.document
    plan.sweep_dir.mkdir(parents=True)
    manifest, copy_name = sweep_dir.prepare(plan, None, None)  # what a launch writes before it trains
    assert manifest.overrides == ["train.steps=7"]
    copy = (plan.sweep_dir / copy_name).read_text()
    assert copy.startswith("# sweep.yaml as launched with these overrides") and "train.steps=7" in copy
    assert yaml.safe_load(copy)["train"]["steps"] == 7  # the copy launches the same sweep on its own

    # A relaunch without the override applies the recorded one (the plan is the same sweep's) ...
    code, out, err = run(capsys, "launch", str(path), "--dry-run", "--json")
    assert code == 0 and "overrides recorded in" in err and "train.steps=7" in err
    assert {c["steps_per_point"] for c in json.loads(out)["cells"]} == {7}
    # ... and one that changes it is a change of settings, refused for cells with results.
    changed = load_sweep(path, overrides=["train.steps=9"])
    replan = build_plan(changed.config, source=path)
    with pytest.raises(Exception) as refused:
        sweep_dir.check_output_dir(replan)
    assert "train.steps: 7 → 9" in "\n".join(refused.value.lines())


def test_trial_takes_the_same_override_syntax(tmp_path, capsys):
    from sweeper.commands.parser import build_parser
    from sweeper.commands.trial import build_configs

    args = build_parser().parse_args(["trial", "--method", "pre", "--depth", "1", "--lr", "1e-3",
                                      "train.eval_every=7", "divergence.spike_patience=9"])
    _, train, _, divergence = build_configs(args)
    assert train.eval_every == 7 and divergence.spike_patience == 9
    code, _, err = run(capsys, "trial", "--method", "pre", "--depth", "1", "--lr", "1e-3", "lr.center=1")
    assert code == 2 and "override 'lr.center=1': expected SECTION.KEY=VALUE" in err


@pytest.mark.parametrize("replace, message", [
    ({"steps: 20,": "tokens: 1.5,"}, "train.tokens: expected a whole number (got 1.5)"),
    ({"steps: 20,": "tokens: 15,"}, "train.tokens: 15 tokens is less than one step (128 tokens: batch_size × seq_len)"),
    ({"steps: 20,": "tokens_per_param: 2e9,"}, "train.tokens_per_param: 2e+09 tokens per parameter"),
    ({"lr: {": "resources: {memory_gb: 8e9}\nlr: {"}, "resources.memory_gb: 8e+09 GiB per trial"),
])
def test_unit_mix_ups_are_named(tmp_path, capsys, replace, message):
    code, _, err = run(capsys, "validate", str(write(tmp_path, base(tmp_path, **replace))))
    assert code == 2 and message in err, err
