"""The readers show what a Parcae sweep records beside the validation loss: `sweeper optima` (LAMBADA
perplexity and the loss at each loop count of each cell's best point, in the table, the JSON and the CSV;
`sweeper.open(DIR).optima()` the same), `sweeper fit` (LAMBADA by method and size beside the loss; the LR axis
of a Muon sweep named as Muon's, with the AdamW ratio by size) and the dashboard's status grid. A sweep without
them reads as before."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

import sweeper
from dashboards.data import load_sweep as load_dashboard
from dashboards.figures.status import status_grid
from sweeper.cli import main
from sweeper.core.rows import PointRow, encode_loop_losses
from sweeper.records.store import MANIFEST, StoreWriter, load_points
from tests.sweeper.analysis.fits.conftest import Truth, write_sweep

TRUTHS = {"pre": Truth(alpha=0.5, b=-0.5), "layerrope": Truth(E=2.9, alpha=0.5, b=-0.5)}
DEPTHS = [4, 8, 16]


def ppl_of(loss: float) -> float:
    return math.exp(loss + 1.0)


@pytest.fixture(scope="module")
def parcae_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sweep whose ok points carry a LAMBADA perplexity (e^(loss + 1)) and losses at 1, 2, 4, 8
    loops (the largest the loss), and whose manifest says Muon with AdamW at 0.75 x lr at depth 16."""
    root = write_sweep(tmp_path_factory.mktemp("readers") / "sweep", TRUTHS, DEPTHS, on_optimum=True)
    rows = [PointRow.from_columns(r) for r in load_points(root).iter_rows(named=True)]
    richer = [r.evolve(lambada_ppl=ppl_of(r.loss),
                       loop_losses=encode_loop_losses({1: r.loss + 0.3, 2: r.loss + 0.1, 4: r.loss + 0.02, 8: r.loss}))
              for r in rows if r.state.value == "ok"]
    StoreWriter(root).append_points(richer)
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["cells"] = {
        r.cell.cell_id: {"size": r.cell.size, "compat": {"train": {"optimizer": {
            "kind": "muon", "muon": {"swept": "muon", "adamw_lr_ratio": 0.75 if r.cell.size == "L16" else 1.0}}}}}
        for r in rows
    }
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_optima_shows_lambada_and_the_loss_per_loop_count(parcae_like: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = json.loads(run(capsys, "optima", str(parcae_like), "--format", "json"))["cells"]
    for cell in cells:
        assert cell["best_lambada_ppl"] == pytest.approx(ppl_of(cell["best_loss"]))
        losses = json.loads(cell["best_loop_losses"])
        assert list(losses) == ["1", "2", "4", "8"] and losses["8"] == pytest.approx(cell["best_loss"])
    assert sweeper.open(parcae_like).optima().to_dicts() == cells
    table = run(capsys, "optima", str(parcae_like), "--wide")  # every column
    assert "loss at T=1/2/4/8" in table and "LAMBADA ppl" in table
    first = cells[0]
    assert f"{ppl_of(first['best_loss']):.4g}" in table and f"{first['best_loss'] + 0.3:.3f}" in table
    rows = list(csv.DictReader(io.StringIO(run(capsys, "optima", str(parcae_like), "--format", "csv"))))
    assert float(rows[0]["best_lambada_ppl"]) == pytest.approx(first["best_lambada_ppl"])


def test_fit_tables_lambada_by_size_and_names_the_muon_lr(parcae_like: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "fit", str(parcae_like), "--resamples", "200", "--no-write")
    assert "Optimal Muon LR (AdamW = r × lr) vs depth" in out and "r = 1 at L4, L8; 0.75 at L16" in out
    assert "LAMBADA perplexity by size" in out
    cells = json.loads(run(capsys, "optima", str(parcae_like), "--format", "json"))["cells"]
    for cell in cells:
        assert f"{ppl_of(cell['best_loss']):.4g} · {cell['best_loss']:.4f}" in out
    doc = json.loads(run(capsys, "fit", str(parcae_like), "--resamples", "200", "--no-write", "--json"))
    assert "lambada" not in json.dumps(doc).lower()  # fits.json holds the fits alone


def test_the_status_grid_shows_lambada_beside_the_loss(parcae_like: Path) -> None:
    figure = status_grid(load_dashboard(parcae_like))
    heatmap = figure["data"][0]
    texts = [t for row in heatmap["text"] for t in row]
    hovers = [h for row in heatmap["customdata"] for h in row]
    cells = sweeper.open(parcae_like).optima().to_dicts()
    for cell in cells:
        assert any(f"ppl {cell['best_lambada_ppl']:.4g}" in t for t in texts)
        assert any(f"loss {cell['best_loss']:.4f}, LAMBADA ppl {cell['best_lambada_ppl']:.4g}" in h for h in hovers)


def test_a_sweep_without_them_reads_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_sweep(tmp_path / "plain", TRUTHS, DEPTHS, on_optimum=True)
    table = run(capsys, "optima", str(root))
    assert "LAMBADA" not in table and "loss at T=" not in table
    out = run(capsys, "fit", str(root), "--resamples", "200", "--no-write")
    assert "Optimal LR vs depth" in out and "LAMBADA" not in out
    texts = [t for row in status_grid(load_dashboard(root))["data"][0]["text"] for t in row]
    assert not any("ppl" in t for t in texts)
