"""Every sweep YAML shipped in sweeps/ validates as it stands (the README tells users to launch
them), and the ones that need local data (ImageNet, a prepared C4 token corpus, Parcae's own tokenizer)
say exactly which path is missing, and for a token corpus how to prepare it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.core.errors import UserError
from sweeper.spec.schema import load_sweep

SWEEPS = Path(__file__).resolve().parents[3] / "sweeps"
NEEDS_LOCAL_DATA = {"vit.yaml": "/data/imagenet/train", "vit-study.yaml": "/data/imagenet/train", "depth.yaml": "/data/c4-en-t5-9B", "ladder.yaml": "/data/c4-en-t5-110B"}
PREPARED = {"depth.yaml", "ladder.yaml"}  # token corpora made by `sweeper data prepare` (the command is in the file)
# Parcae's own 32,768-id tokenizer, which users supply (the files say how): relative to the working directory
NEEDS_TOKENIZER = {name: "tokenizers/parcae-32768.json" for name in
                   ("parcae.yaml", "parcae-study.yaml", "parcae-baseline.yaml", "parcae-baseline-study.yaml")}


def test_the_sweeps_folder_holds_the_documented_sweeps():
    names = {p.name for p in SWEEPS.glob("*.yaml")}
    assert {"quickstart.yaml", "quickstart-vit.yaml", "depth.yaml", "ladder.yaml", "parcae.yaml", "vit.yaml",
            "depth-laptop.yaml", "parcae-study.yaml", "parcae-baseline-study.yaml", "vit-study.yaml"} <= names


def test_the_quickstart_says_what_to_run_next_for_a_depth_result():
    """Printed when the quickstart finishes: the laptop depth study, and how long it takes."""
    text = load_sweep(SWEEPS / "quickstart.yaml").config.next
    assert "sweeper launch sweeps/depth-laptop.yaml" in text and "minutes on 2 CPU cores" in text
    laptop = load_sweep(SWEEPS / "depth-laptop.yaml").config
    assert [m.name for m in laptop.methods] == ["pre", "post", "layerrope"] and len(laptop.seeds) >= 2
    assert max(laptop.model.depths) >= 16 * min(laptop.model.depths) and laptop.data.source == "builtin"


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_sweep_validates(path: Path):
    tokenizer = NEEDS_TOKENIZER.get(path.name)
    if tokenizer:  # Parcae's tokenizer: trained at launch when missing (data.tokenizer_train), so validate passes
        cfg = load_sweep(path).config
        assert cfg.data.tokenizer == "./" + tokenizer and cfg.data.tokenizer_train is not None
        assert cfg.data.tokenizer_train.vocab == cfg.model.vocab == 32768
        assert "Parcae trains its own byte-level BPE of 32,768 ids" in path.read_text()
        return
    missing = NEEDS_LOCAL_DATA.get(path.name)
    if missing and not Path(missing).exists():
        with pytest.raises(UserError) as err:
            load_sweep(path)
        text = "\n".join(err.value.lines())
        assert missing in text and "data.path" in text
        if path.name in PREPARED:
            assert "prepare it first with `sweeper data prepare`" in text
            assert f"sweeper data prepare {missing} --source hf --dataset allenai/c4" in path.read_text()
        return
    validated = load_sweep(path)
    cfg = validated.config
    assert cfg.name == path.stem
    assert cfg.methods and (cfg.model.depths or cfg.model.sizes or getattr(cfg.model, "loops", None))


@pytest.mark.parametrize("name", sorted(NEEDS_LOCAL_DATA))
def test_commands_that_never_read_the_data_plan_without_it(name: str):
    """`launch --dry-run`, `replay` and `status --repair` load the sweep with need_data=False: a data
    path missing here (the corpus lives on the cluster) is a warning naming it, not an error."""
    missing = NEEDS_LOCAL_DATA[name]
    if Path(missing).exists():
        pytest.skip(f"{missing} exists on this machine")
    validated = load_sweep(SWEEPS / name, need_data=False)
    assert validated.config.name == Path(name).stem
    assert any(missing in w and "data.path" in w and "does not read the data" in w for w in validated.warnings)


def test_a_dry_run_of_depth_yaml_plans_without_its_corpus(capsys):
    from sweeper.cli import main

    if Path(NEEDS_LOCAL_DATA["depth.yaml"]).exists():
        pytest.skip("the corpus exists on this machine")
    assert main(["launch", str(SWEEPS / "depth.yaml"), "--dry-run", "--json"]) == 0
    assert main(["validate", str(SWEEPS / "depth.yaml")]) == 2
    assert "data.path" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["parcae-study.yaml", "parcae-baseline-study.yaml", "vit-study.yaml"])
def test_the_study_variants_train_their_swept_twins_recipe_at_one_learning_rate(name: str):
    """"As in the study": the swept file's recipe, Pre-Norm against +LayerRoPE, one fixed LR for every cell."""
    study = load_sweep(SWEEPS / name, need_data=False).config
    swept = load_sweep(SWEEPS / name.replace("-study", ""), need_data=False).config
    assert study.methods and [m.name for m in study.methods] == ["pre", "layerrope"]
    assert study.lr.fixed is not None and study.lr.prior == "fixed"
    assert study.train == swept.train and study.model == swept.model and study.data == swept.data
    assert study.divergence == swept.divergence and study.resources == swept.resources
    if name == "vit-study.yaml":
        assert study.lr.fixed == 5e-4 * study.train.batch_size / 512  # DeiT's rule
    policy = study.lr.to_policy()
    assert policy.fixed == study.lr.fixed and policy.max_points == 1
