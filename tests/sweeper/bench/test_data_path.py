"""`sweeper bench --data`: the data path's figures follow from its timings and sit beside the step's
tokens/s at the same shape; `--data-path` trains on (and measures) a prepared corpus, taking its
vocabulary. Speed itself is printed by the command, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sweeper.cli import main
from sweeper.bench.data_path import measure_data_path
from trials.config import DataConfig
from trials.data.prepare import PrepareSettings, prepare

# as for the trials tests: one intra-op thread, a private corpus cache (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_cache")


@pytest.fixture(scope="module")
def byte_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-data")
    (root / "docs").mkdir()
    for i in range(60):
        (root / "docs" / f"{i}.txt").write_text(f"document {i}: " + "some text to read back " * (20 + i))
    prepare(PrepareSettings(out=root / "corpus", source="text", path=str(root / "docs"), val_fraction=0.2))
    return root / "corpus"


def test_figures_follow_from_the_timings(byte_corpus: Path) -> None:
    d = measure_data_path(DataConfig(source="tokens", path=str(byte_corpus)), 4, 32, torch.device("cpu"), batches=10)
    assert d["tokens_per_batch"] == 4 * 32 and d["batches"] == 10
    assert d["read_collate_tokens_per_s"] == pytest.approx(4 * 32 / (d["read_collate_ms_per_batch"] / 1000))
    assert d["pipeline_tokens_per_s"] == pytest.approx(4 * 32 / (d["pipeline_ms_per_batch"] / 1000))
    assert d["host_to_device_tokens_per_s"] is None  # no device copy on the CPU
    assert d["source"].startswith(f"prepared corpus {byte_corpus}")


@pytest.mark.slow
def test_cli_compares_the_data_path_with_the_step(byte_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--width", "32", "--depth", "1", "--seq-len", "16", "--batch-size", "2", "--steps", "5", "--warmup", "1",
            "--threads", "1", "--data", "--data-path", str(byte_corpus)]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    d, run = result["data_path"], result["runs"]["stack"]
    assert result["settings"]["vocab"] == 256 and result["settings"]["data_path"] == str(byte_corpus)  # the corpus's (bytes)
    assert d["step_tokens_per_s"] == pytest.approx(2 * 16 / run["step_s_median"])
    assert d["headroom"] == pytest.approx(d["pipeline_tokens_per_s"] / d["step_tokens_per_s"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "whole path through the prefetcher" in out and "training step consumes" in out and "headroom" in out


def test_a_missing_corpus_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "sweeper.cli", "bench", "--data", "--data-path", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: --data-path: {tmp_path / 'none'}: no such file"]
