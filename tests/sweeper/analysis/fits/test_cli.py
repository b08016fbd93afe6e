"""`sweeper fit` as a user runs it: a subprocess on a real store, output, fits.json, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .conftest import Truth

TRUTHS = {"pre": Truth(E=3.0, A=6.0, alpha=0.5), "layerrope": Truth(E=2.9, A=8.0, alpha=0.6, c=0.05)}
DEPTHS = [48, 64, 96, 128, 192, 256]


def sweeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", "fit", *args], capture_output=True, text=True, check=False,
                          timeout=120)


def test_fit_prints_tables_with_intervals_and_writes_fits_json(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    out = sweeper(str(sweep), "--to", "1024", "512", "--resamples", "500", "--wide")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for heading in ("Loss vs depth", "Optimal LR vs depth", "Predictions at the --to targets", "Methods ranked",
                    "LR sensitivity"):
        assert heading in text
    assert "held-out" in text and "256:" in text  # the leave-largest-out prediction, with its interval
    target_rows = [line for line in text.splitlines() if re.search(r"│\s+1024 │", line)]
    assert len(target_rows) == 2 and all(line.count("[") == 3 for line in target_rows)
    doc = json.loads((sweep / "fits.json").read_text())
    assert doc["targets"] == [1024.0, 512.0]
    assert doc["methods"]["pre"]["loss_fit"]["holdout"]["x"] == 256
    assert "wrote" in text


def test_fit_states_the_seeds_spread_and_se_of_each_point_and_the_failed_sizes(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[48, 64, 96, 128], seeds=(0, 1), noise=0.01, eval_se=0.004,
                       all_stalled={("layerrope", 128)})
    out = sweeper(str(sweep), "--resamples", "200", "--wide")
    assert out.returncode == 0, out.stderr
    doc = json.loads((sweep / "fits.json").read_text())
    text = " ".join(out.stdout.split())
    assert "Fitted points: best loss, mean over seeds" in text and "seeds' spread (sd)" in text
    row = doc["methods"]["pre"]["sizes"][0]
    a, b = row["loss_seeds"]
    assert f"{row['loss_sd']:.4f}" in text and f"{a:.4f} ± 0.0040, {b:.4f} ± 0.0040" in text
    assert "no usable learning rate (every point diverged or stalled): layerrope L128 (s0 stalled, s1 stalled)" in text


def test_json_output_is_the_stored_document(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    out = sweeper(str(sweep), "--json", "--resamples", "300", "--x", "params", "--shared-e")
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed == json.loads((sweep / "fits.json").read_text())
    assert printed["x"] == "params" and printed["e_model"] == "shared"


def test_no_write_leaves_the_directory_alone(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    out = sweeper(str(sweep), "--no-write", "--resamples", "200")
    assert out.returncode == 0, out.stderr
    assert not (sweep / "fits.json").exists()


def test_single_size_sweep_explains_instead_of_fitting(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[64], noise=0.003)
    out = sweeper(str(sweep), "--resamples", "200")
    assert out.returncode == 0, out.stderr
    assert "only one size" in out.stdout
    assert "needs at least 3 sizes" in out.stdout


def _exit_2(args: list[str], message: str, sweep: Path | None = None) -> None:
    out = sweeper(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    if sweep is not None:
        assert not (sweep / "fits.json").exists()


def test_missing_directory(tmp_path: Path) -> None:
    _exit_2([str(tmp_path / "nope")], "no such directory")


def test_not_a_sweep_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    _exit_2([str(tmp_path / "plain")], "not a sweep directory", tmp_path / "plain")


def test_sweep_without_finished_cells(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[48, 64], pending={(m, d) for m in TRUTHS for d in (48, 64)})
    _exit_2([str(sweep)], "no bracketed cells to fit (4 running)", sweep)


def test_sweep_where_everything_diverged(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=[48, 64], all_diverged={(m, d) for m in TRUTHS for d in (48, 64)})
    _exit_2([str(sweep)], "every cell diverged", sweep)


def test_bad_arguments(make_sweep) -> None:
    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS)
    _exit_2([str(sweep), "--to", "1.3X"], "is not a size", sweep)
    _exit_2([str(sweep), "--resamples", "10"], "use 200 to 100000 resamples", sweep)
    _exit_2([str(sweep), "--x", "width"], "invalid choice", sweep)


def test_fits_import_neither_torch_nor_ray() -> None:
    code = ("import sys, sweeper.analysis.fits.collect, sweeper.analysis.fits.report, sweeper.analysis.fits.shared, sweeper.commands.fit; "
            "from sweeper.stats.lrlaw import predict_optimal_lr; "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


# Issue 18 item 5 and issue 16 item 4, in-process (sweeper.cli.main) for speed.


def test_a_size_suffix_on_a_depth_axis_is_refused(make_sweep, capsys) -> None:
    from sweeper.cli import main

    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    assert main(["fit", str(sweep), "--to", "1.3B", "--resamples", "200"]) == 2
    err = capsys.readouterr().err
    assert "--to 1.3B: a size suffix on a depth axis (that would be 1.3e+09 blocks); give a block count" in err
    assert not (sweep / "fits.json").exists()


def test_a_named_size_resolves_to_its_own_parameter_count(make_sweep, capsys) -> None:
    from sweeper.cli import main

    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    for n_def, lo, hi in (("nonembed", 1.20e9, 1.22e9), ("total", 1.33e9, 1.35e9)):  # the 1.3B model: 1.21e9 / 1.34e9
        assert main(["fit", str(sweep), "--x", "params", "--n", n_def, "--to", "1.3B", "2e9", "--resamples", "200",
                     "--json"]) == 0
        out = capsys.readouterr()
        targets = json.loads(out.out)["targets"]
        assert lo < targets[0] < hi and targets[1] == 2e9, (n_def, targets)
        assert "--to 1.3B: the 1.3B model's own N" in out.err


def test_a_rerun_says_what_it_replaces(make_sweep, capsys) -> None:
    from sweeper.cli import main

    sweep = make_sweep(truths=TRUTHS, depths=DEPTHS, noise=0.003)
    assert main(["fit", str(sweep), "--to", "1024", "--resamples", "200", "--json"]) == 0
    assert "replacing" not in capsys.readouterr().err  # nothing to replace yet
    assert main(["fit", str(sweep), "--resamples", "300", "--json"]) == 0
    err = capsys.readouterr().err
    assert f"replacing {sweep / 'fits.json'} (targets: 1024 → none; resamples: 200 → 300)" in err
    assert json.loads((sweep / "fits.json").read_text())["targets"] == []
