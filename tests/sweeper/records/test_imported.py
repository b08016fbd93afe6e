"""`sweeper import`: a hand-made table through every reader; bad tables refused with nothing written; an imported
directory never relaunched or repaired; and, when the recorded sweeps are beside the checkout, StepLaw's cells
bracketed exactly where the table has an interior minimum and Marin's one-sided optima, both computed here from
the CSVs independently of the tool."""

from __future__ import annotations

import json
import math
import threading
import urllib.request
from pathlib import Path

import polars as pl
import pytest

import sweeper
from sweeper.cli import main
from sweeper.records.imported import size_number
from sweeper.records.manifest import read_manifest

from tests.sweeper.search.test_replay_tables import MARIN, ROOT, STEPLAW, needs_marin, needs_steplaw

# Two methods (opt a, b) at three sizes; opt=a's smallest size has its best at the lowest LR (one-sided low), opt=b's
# largest at the highest (one-sided high); one NaN loss (diverged) beside a best makes a bracket; one duplicate LR.
ROWS = """opt,N,lr,loss,bs
a,1e6,0.001,3.10,1
a,1e6,0.002,3.20,1
a,1e6,0.004,3.40,1
a,2e6,0.001,3.00,1
a,2e6,0.002,2.90,1
a,2e6,0.004,2.95,1
a,4e6,0.0005,2.90,1
a,4e6,0.001,2.80,1
a,4e6,0.002,2.85,1
a,4e6,0.002,2.84,2
b,1e6,0.002,3.30,1
b,1e6,0.004,3.20,1
b,1e6,0.008,nan,1
b,2e6,0.002,3.10,1
b,2e6,0.004,3.05,1
b,2e6,0.008,3.07,1
b,4e6,0.001,3.00,1
b,4e6,0.002,2.95,1
b,4e6,0.004,2.90,1
"""


def write_table(tmp_path: Path, text: str = ROWS, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cli_json(capsys, *args: str) -> dict:
    capsys.readouterr()
    assert main([*args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def imported(tmp_path: Path, capsys, *extra: str) -> Path:
    out = tmp_path / "sweep"
    doc = cli_json(capsys, "import", str(write_table(tmp_path)), "--group", "opt,N", "--duplicates", "min",
                   "--out", str(out), *extra)
    assert doc["cells"] == 6 and doc["points"] == 18 and doc["diverged_points"] == 1 and doc["merged_runs"] == 1
    return out


def test_size_numbers():
    assert size_number("130m") == 1.3e8 and size_number("1.2B") == 1.2e9 and size_number(2e6) == 2e6
    assert size_number("adamw") is None and size_number(-1) is None and size_number(True) is None


def test_every_reader_reads_an_import(tmp_path, capsys):
    out = imported(tmp_path, capsys)
    manifest = read_manifest(out)
    assert manifest.is_imported and manifest.x == "params" and not (out / "ledger.db").exists()
    entry = manifest.imported
    assert entry.size_column == "N" and entry.method_columns == ["opt"] and entry.duplicates == "min"
    assert len(entry.sha256) == 64 and entry.rows == 19 and entry.grid_ratio == pytest.approx(2.0)
    assert entry.groups["opt=a/1e6/s0"] == {"opt": "a", "N": 1e6}

    rows = {r["cell_id"]: r for r in cli_json(capsys, "optima", str(out))["cells"]}
    assert {k: r["status"] for k, r in rows.items()} == {
        "opt=a/1e6/s0": "edge", "opt=a/2e6/s0": "bracketed", "opt=a/4e6/s0": "bracketed",
        "opt=b/1e6/s0": "bracketed", "opt=b/2e6/s0": "bracketed", "opt=b/4e6/s0": "edge"}
    assert rows["opt=a/4e6/s0"]["best_loss"] == 2.80 and rows["opt=a/4e6/s0"]["high_gap"] == pytest.approx(0.04)
    assert rows["opt=b/1e6/s0"]["high_state"] == "diverged" and rows["opt=b/1e6/s0"]["n_diverged"] == 1
    assert rows["opt=a/1e6/s0"]["edge"] == "low" and rows["opt=b/4e6/s0"]["edge"] == "high"
    assert all(r["n_running"] == 0 for r in rows.values())

    capsys.readouterr()
    assert main(["optima", str(out), "--wide"]) == 0  # every column: the neighbour gaps drop first when narrow
    table = capsys.readouterr().out
    assert "IMPORTED from" in table and "low edge · high +0.1000" in table and "high diverged" in table
    assert main(["optima", str(out), "--edges", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("opt=a/1e6/s0,opt=a,1e6,0,low,0.001,3.1,0.001,0.004,3,")
    audit = cli_json(capsys, "optima", str(out), "--edges")
    assert [(e["cell_id"], e["side"], e["next_lrs"]) for e in audit["edges"]] == [
        ("opt=a/1e6/s0", "low", [0.0005]), ("opt=b/4e6/s0", "high", [0.008])]

    fits = cli_json(capsys, "fit", str(out), "--include-edge", "--no-write")
    assert set(fits["methods"]) == {"opt=a", "opt=b"}
    assert [s["x"] for s in fits["methods"]["opt=a"]["sizes"]] == [1e6, 2e6, 4e6]

    lead = cli_json(capsys, "compare", str(out), "--methods", "opt=a,opt=b", "--include-edge")
    leads = {c["size"]: c["mean"] for c in lead["comparisons"]}
    # opt=a against opt=b, grid-best losses: 1e6 3.10 vs 3.20, 2e6 2.90 vs 3.05, 4e6 2.80 vs 2.90
    assert leads == pytest.approx({"1e6": -0.10, "2e6": -0.15, "4e6": -0.10}) and lead["x"] == "params"

    opened = sweeper.open(out)
    assert opened.optima().height == 6 and opened.points().height == 18 and opened.manifest.is_imported
    assert opened.optima().filter(pl.col("edge").is_not_null())["cell_id"].to_list() == ["opt=a/1e6/s0", "opt=b/4e6/s0"]

    plots = cli_json(capsys, "plots", str(out), "--out", str(tmp_path / "plots"), "--file-types", "html")
    assert plots and (tmp_path / "plots").is_dir()

    from dashboards.server import make_server

    server = make_server(str(out), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(server.url + "api/update", timeout=30) as reply:
            update = json.loads(reply.read())
        assert update["error"] is None and update["summary"]["cells"] == {"bracketed": 4, "edge": 2}
        assert "IMPORTED" in update["sweep"]["name"] and set(update["figures"]) >= {"loss_vs_lr", "optimal_lr"}
    finally:
        server.shutdown()
        server.server_close()


def test_an_import_is_never_relaunched_or_repaired(tmp_path, capsys):
    out = imported(tmp_path, capsys)
    capsys.readouterr()
    assert main(["status", str(out), "--repair"]) == 2
    assert "imported sweep: no ledger" in capsys.readouterr().err
    code = main(["launch", str(ROOT / "sweeps" / "quickstart.yaml"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "imported sweep: no ledger" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("text", "args", "says"), [
    (ROWS, ["--group", "opt,N"], "holds two runs at lr 0.002"),  # duplicates: error (the default)
    (ROWS, ["--group", "opt,size"], "missing column size"),
    (ROWS.replace("3.10", "x3"), ["--group", "opt,N"], "not a number"),
    (ROWS, ["--group", "opt,N", "--duplicates", "min", "--size-column", "opt"], "--size-column opt"),
    (ROWS, ["--group", "opt,lr"], "lr is the learning-rate or loss column"),
])
def test_bad_tables_exit_2_and_write_nothing(tmp_path, capsys, text, args, says):
    out = tmp_path / "sweep"
    capsys.readouterr()
    assert main(["import", str(write_table(tmp_path, text)), "--out", str(out), *args]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def test_a_non_empty_out_is_refused(tmp_path, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["import", str(write_table(tmp_path)), "--group", "opt,N", "--duplicates", "min", "--out", str(out)]) == 2
    assert "not an empty directory" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_an_import_without_a_size_column_reads_but_does_not_fit(tmp_path, capsys):
    out = tmp_path / "sizeless"
    doc = cli_json(capsys, "import", str(write_table(tmp_path)), "--group", "opt", "--duplicates", "min",
                   "--out", str(out))
    assert doc["size_column"] is None and doc["cells"] == 2
    assert [c["cell_id"] for c in cli_json(capsys, "optima", str(out))["cells"]] == ["opt=a/all/s0", "opt=b/all/s0"]
    assert main(["fit", str(out), "--no-write"]) == 2
    assert "without a size column" in capsys.readouterr().err


def test_parquet_and_a_divergence_threshold(tmp_path, capsys):
    frame = pl.read_csv(write_table(tmp_path), infer_schema_length=None)
    frame.write_parquet(tmp_path / "runs.parquet")
    out = tmp_path / "pq"
    doc = cli_json(capsys, "import", str(tmp_path / "runs.parquet"), "--group", "opt,N", "--duplicates", "min",
                   "--diverged-above", "3.25", "--out", str(out))
    assert doc["diverged_points"] == 3  # the NaN, 3.30 and 3.40
    assert read_manifest(out).imported.format == "parquet"


def interior_minima(frame: pl.DataFrame, group: list[str]) -> dict[tuple, bool]:
    """Per group: whether the min-over-duplicates loss has its minimum strictly inside the LRs tried (NaN and
    losses above `above`: worse than any finite loss)."""
    out = {}
    for key, cell in frame.group_by(group):
        runs = cell.group_by("lr").agg(pl.col("loss").min()).sort("lr")
        losses = [v if v is not None and math.isfinite(v) else math.inf for v in runs["loss"].to_list()]
        if all(math.isinf(v) for v in losses):
            continue
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        out[tuple(key)] = 0 < best < len(losses) - 1
    return out


@needs_steplaw
def test_steplaw_bracketed_exactly_at_interior_minima(tmp_path, capsys):
    table = STEPLAW / "dense_lr_bs_loss.csv"
    out = tmp_path / "steplaw"
    cli_json(capsys, "import", str(table), "--group", "N,D", "--duplicates", "min", "--out", str(out))
    cells = cli_json(capsys, "optima", str(out))["cells"]
    groups = read_manifest(out).imported.groups
    truth = interior_minima(pl.read_csv(table, infer_schema_length=None), ["N", "D"])
    assert len(cells) == len(truth) == 17
    found = {(groups[c["cell_id"]]["N"], groups[c["cell_id"]]["D"]): c["status"] for c in cells}
    assert found == {k: "bracketed" if inside else "edge" for k, inside in truth.items()}


@needs_marin
def test_marin_one_sided_optima_against_the_table(tmp_path, capsys):
    table = MARIN / "marin_lr_ablations.csv"
    out = tmp_path / "marin"
    cli_json(capsys, "import", str(table), "--group", "optimizer,size,chinchilla", "--duplicates", "min",
             "--missing-loss", "drop", "--out", str(out))
    audit = cli_json(capsys, "optima", str(out), "--edges")
    groups = read_manifest(out).imported.groups
    frame = pl.read_csv(table, infer_schema_length=None).with_columns(pl.col("loss").cast(pl.Float64, strict=False))
    truth = interior_minima(frame.filter(pl.col("loss").is_not_null()), ["optimizer", "size", "chinchilla"])
    one_sided = {k for k, inside in truth.items() if not inside}
    listed = {tuple(groups[e["cell_id"]][c] for c in ("optimizer", "size", "chinchilla")) for e in audit["edges"]}
    assert listed == one_sided and len(listed) == 117 and audit["cells_with_optimum"] == len(truth) == 147
    sides = {e["side"] for e in audit["edges"]}
    assert sides <= {"low", "high", "both"}


def test_holdout_largest_on_an_import(tmp_path, capsys):
    """opt=a at the grid best: LR 0.001, 0.002 at N 1e6, 2e6 (a line of slope 1) predicts 0.004 at 4e6, where 0.001 was
    recorded; losses 3.10, 2.90 predict 2.90²/3.10 there (a pure power law through two points: no interval)."""
    out = imported(tmp_path, capsys)
    doc = cli_json(capsys, "fit", str(out), "--holdout", "largest", "--include-edge", "--lr-source", "grid",
                   "--no-write")
    rows = {r["method"]: r for r in doc["holdout"]["rows"]}
    a = rows["opt=a"]
    assert a["size"] == "4e6" and a["fitted_sizes"] == ["1e6", "2e6"] and a["x"] == 4e6
    assert a["lr"]["predicted"] == pytest.approx(0.004) and a["lr"]["recorded"] == pytest.approx(0.001)
    assert a["lr"]["lo"] is None and a["lr"]["inside"] is None
    assert a["loss"]["predicted"] == pytest.approx(2.90**2 / 3.10) and a["loss"]["recorded"] == pytest.approx(2.80)
    assert "prediction interval" in doc["holdout"]["interval"]


def test_a_ladder_at_fixed_tokens_per_parameter_refuses_the_two_variable_law(tmp_path, capsys):
    lines = ["N,D,lr,loss"]
    for n in (1e6, 2e6, 4e6, 8e6):
        for lr, loss in ((0.001, 3.1), (0.002, 3.0), (0.004, 3.2)):
            lines.append(f"{n:g},{20 * n:g},{lr},{loss - math.log(n) / 100}")
    out = tmp_path / "ladder"
    cli_json(capsys, "import", str(write_table(tmp_path, "\n".join(lines) + "\n")), "--group", "N,D", "--out", str(out))
    capsys.readouterr()
    assert main(["fit", str(out), "--lr-law", "N,D", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "collinear" in err and "one-variable law" in err and err.count("error:") == 1
    assert main(["fit", str(out), "--lr-law", "N,bs", "--no-write"]) == 2
    assert "bs not among the import's group columns" in capsys.readouterr().err


@needs_steplaw
def test_the_two_variable_law_on_steplaw_covers_the_published_medians(tmp_path, capsys):
    out = tmp_path / "steplaw"
    cli_json(capsys, "import", str(STEPLAW / "dense_lr_bs_loss.csv"), "--group", "N,D", "--duplicates", "min",
             "--out", str(out))
    law = cli_json(capsys, "fit", str(out), "--lr-law", "N,D")["lr_law"]
    assert law["n_cells"] == 16 and law["over"] == "optima" and "near_optimal" in law["choice"]
    for fit in (law, law["near_optimal"]):
        n, d = fit["exponents"]["N"], fit["exponents"]["D"]
        assert n["ci"][0] < -0.712 < n["ci"][1] and d["ci"][0] < 0.307 < d["ci"][1]
        assert n["value"] < 0 < d["value"]
    assert law["near_optimal"]["n_rows"] > law["n_rows"]
    assert json.loads((out / "fits.json").read_text())["lr_law"]["exponents"]["N"]["value"] == law["exponents"]["N"]["value"]


def test_export_says_an_import_has_no_weights(tmp_path, capsys):
    out = imported(tmp_path, capsys)
    capsys.readouterr()
    assert main(["export", str(out), "--out", str(tmp_path / "exported")]) == 2
    assert "imported sweep: no ledger: no trained weights" in capsys.readouterr().err
    assert not (tmp_path / "exported").exists()
