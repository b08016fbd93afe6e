"""fits.json as a typed document (`sweeper.analysis.fits.document.FitsDocument`): what `sweeper fit` builds
reads back to the same document; a fits.json the untyped writer wrote (tests/sweeper/analysis/fits/data/fits-v1.json: a
real `sweeper fit --to 1024` of a two-seed sweep with edge, diverged and stalled cells, curves thinned)
reads with every section and writes back byte for byte; the dashboards' sparse synthetic one reads; a
damaged one is one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.analysis.fits.collect import collect
from sweeper.analysis.fits.document import FITS, FitsDocument, load_fits, write_fits
from sweeper.analysis.fits.report import FitOptions, build_report
from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep

from .conftest import Truth

OLD = Path(__file__).parent / "data" / "fits-v1.json"
TRUTHS = {"pre": Truth(E=3.0, A=6.0, alpha=0.5), "layerrope": Truth(E=3.0, A=9.0, alpha=0.7, c=0.06, b=-0.4)}


def _text(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False, default=str)  # the durable writer's JSON


@pytest.mark.parametrize("shared_e", [False, True], ids=["per-method E", "shared E"])
def test_a_built_document_round_trips(make_sweep, tmp_path: Path, shared_e: bool) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[48, 64, 96, 128, 192], seeds=(0, 1), noise=0.002)
    doc = build_report(collect(sweep), FitOptions(targets=(1024.0,), resamples=200, shared_e=shared_e))
    data = doc.to_json()
    assert json.loads(_text(data)) == data  # plain JSON: no numpy scalar, no NaN
    again = FitsDocument.from_json(json.loads(_text(data)))
    assert again.to_json() == data and again == doc
    write_fits(tmp_path, doc)
    assert (tmp_path / FITS).read_text() == _text(data)
    assert load_fits(tmp_path) == doc
    # the sections as attributes, as the readers use them
    pre = doc.methods["pre"]
    assert pre.loss_fit.alpha.value == pytest.approx(0.5, abs=0.1) and pre.loss_fit.alpha.has_interval
    (target,) = pre.loss_fit.targets
    assert target.x == 1024.0 and target.value == target.loss and target.beyond_largest == 1024.0 / 192
    assert pre.lr_fit is not None and pre.lr_fit.targets[0].value == pre.lr_fit.targets[0].lr
    assert [r.rank for r in doc.ranked()] == list(range(1, len(doc.ranking) + 1))
    if shared_e:
        assert doc.shared_e is not None and doc.shared_e.loss is not None and pre.loss_fit.e_model == "shared"
        assert pre.loss_fit_independent is not None and "loss_fit_independent" in data["methods"]["pre"]
    else:
        assert doc.shared_e is None and "loss_fit_independent" not in data["methods"]["pre"]
        assert pre.compute_fit is not None and "curve" not in data["methods"]["pre"]["compute_fit"]


def test_a_fits_json_the_untyped_writer_wrote_reads_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    text = OLD.read_text()
    assert text == _text(json.loads(text))
    (tmp_path / FITS).write_text(text)
    doc = load_fits(tmp_path)
    assert doc is not None
    out = tmp_path / "out"
    out.mkdir()
    write_fits(out, doc)
    assert (out / FITS).read_text() == text
    data = json.loads(text)
    pre = doc.methods["pre"]
    assert pre.loss_fit.E.value == data["methods"]["pre"]["loss_fit"]["E"]["value"]
    assert pre.loss_fit.holdout is not None
    assert pre.loss_fit.holdout.rel_error == data["methods"]["pre"]["loss_fit"]["holdout"]["rel_error"]
    assert pre.loss_fit.optimizer == data["methods"]["pre"]["loss_fit"]["optimizer"]
    assert pre.sizes[0].loss_seeds == data["methods"]["pre"]["sizes"][0]["loss_seeds"]
    assert pre.sensitivity[0].near_opt_lo == data["methods"]["pre"]["sensitivity"][0]["near_opt_lo"]
    assert pre.compute_exponent is not None
    assert pre.compute_exponent.value == data["methods"]["pre"]["compute_exponent"]["value"]
    assert [c.status for c in doc.inputs.failed] == [c["status"] for c in data["inputs"]["failed"]]
    assert [e.cell_id for e in doc.inputs.excluded] == [e["cell_id"] for e in data["inputs"]["excluded"]]
    assert doc.targets == [1024.0] and doc.options.resamples == 500 and doc.elapsed_s == data["elapsed_s"]


def test_the_dashboards_synthetic_document_reads(tmp_path: Path) -> None:
    """Written with fewer keys than `sweeper fit` writes (no inputs, options, sizes...): they read as
    defaults and are not written back."""
    sweep = SyntheticSweep(tmp_path / "s", SyntheticSpec(methods=("pre", "post"), depths=(4, 8, 16), seeds=(0,)))
    sweep.finish()
    written = sweep.write_fits()
    doc = load_fits(tmp_path / "s")
    assert doc == written and doc is not None
    assert doc.inputs.excluded == [] and doc.options.resamples is None and doc.methods["pre"].sizes == []
    assert "inputs" not in json.loads((tmp_path / "s" / FITS).read_text())
    assert doc.methods["pre"].loss_fit.trusted == doc.methods["pre"].loss_fit.trustworthy


DAMAGED = {
    "methods as a list": ('{"version": 1, "methods": []}', "methods: "),
    "an estimate as text": ('{"methods": {"pre": {"loss_fit": {"alpha": {"value": "0.5"}}}}}',
                            "methods.pre.loss_fit.alpha.value: must be a number"),
    "not an object": ("[]", "not a JSON object"),
    "not JSON": ('{"version": 1', "Expecting"),
}


@pytest.mark.parametrize("case", DAMAGED, ids=list(DAMAGED))
def test_a_damaged_fits_json_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         case: str) -> None:
    text, where = DAMAGED[case]
    sweep = SyntheticSweep(tmp_path / "s", SyntheticSpec(methods=("pre",), depths=(4, 8), seeds=(0,)))
    sweep.finish()
    (tmp_path / "s" / FITS).write_text(text)
    with pytest.raises(UserError) as err:
        load_fits(tmp_path / "s")
    message = err.value.message
    assert message.startswith(f"{tmp_path / 's' / FITS}: unreadable fits ({where}")
    assert message.endswith(f"rerun `sweeper fit {tmp_path / 's'}`") and "\n" not in message
    capsys.readouterr()
    assert main(["plots", str(tmp_path / "s"), "--out", str(tmp_path / "plots"), "--file-types", "html"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {message}"]
    assert not (tmp_path / "plots").exists()
