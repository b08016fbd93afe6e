"""`sweeper data prepare` and the prepared corpus it writes, on local text with a tokenizer trained
here: the manifest and token files hold exactly the tokenized documents (checked against the
tokenizers library directly); trials read them with a per-seed order and an exact, O(1) resume;
the output is the same for any number of workers and after a kill and a rerun; a killed prepare
leaves nothing a trial or the sweep schema accepts; bad input is one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from models import ModelConfig
from trials.config import DataConfig, DivergenceConfig, ScheduleConfig, TrainConfig
from trials.data import check_vocab, open_source
from trials.data.cache import in_val_split
from trials.data.permutation import IndexPermutation
from trials.data.prepare import PrepareSettings, prepare
from trials.data.prepared import MANIFEST, PROGRESS, PermutedWindowStream, PreparedTokenSource
from trials.errors import TrialInputError
from trials.run import run_trial
from trials.spec import StepReport, TrialSpec

tokenizers = pytest.importorskip("tokenizers")

WORDS = ("the cat dog sat ran on a mat log red blue big small fox jumps over lazy quick brown "
         "river stone tree leaf wind rain sun moon star sky").split()
N_DOCS = 400


def _documents() -> list[str]:
    rng = np.random.default_rng(7)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 40)))) + f" doc{i}." for i in range(N_DOCS)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A JSONL corpus and a BPE tokenizer.json trained on it (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("prepared")
    docs = _documents()
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"]))
    tok.add_special_tokens([f"<extra_id_{i}>" for i in range(10)])  # ids no text produces, as T5's 100 sentinels
    tok.save(str(root / "tokenizer.json"))
    return {"root": root, "jsonl": root / "docs.jsonl", "tokenizer": root / "tokenizer.json"}


def settings(corpus: dict[str, Path], out: Path, **kw: object) -> PrepareSettings:
    base: dict[str, object] = dict(out=out, source="jsonl", path=str(corpus["jsonl"]), tokenizer=str(corpus["tokenizer"]),
                                   val_fraction=0.1, chunk_docs=32, workers=1)
    base.update(kw)
    return PrepareSettings(**base)  # type: ignore[arg-type]


def expected_tokens(corpus: dict[str, Path]) -> dict[str, np.ndarray]:
    """The files' contents computed independently: each document's ids + EOS, in order, split by the hash rule."""
    tok = tokenizers.Tokenizer.from_file(str(corpus["tokenizer"]))
    eos = tok.token_to_id("</s>")
    out: dict[str, list[int]] = {"train": [], "val": []}
    for i, doc in enumerate(_documents()):
        split = "val" if in_val_split(f"docs.jsonl:{i}", 0.1) else "train"
        out[split] += tok.encode(doc, add_special_tokens=False).ids + [eos]
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def prepared(corpus: dict[str, Path]) -> Path:
    out = corpus["root"] / "out"
    manifest, done = prepare(settings(corpus, out))
    assert done == "prepared"
    return out


def test_manifest_and_files_hold_exactly_the_tokenized_documents(corpus: dict[str, Path], prepared: Path) -> None:
    manifest = json.loads((prepared / MANIFEST).read_text())
    tok = tokenizers.Tokenizer.from_file(str(corpus["tokenizer"]))
    want = expected_tokens(corpus)
    assert manifest["format"] == "layerrope-sweeper/tokens" and manifest["version"] == 1
    assert manifest["tokenizer"]["vocab"] == tok.get_vocab_size() - 10 and manifest["tokenizer"]["full_vocab"] == tok.get_vocab_size()
    assert manifest["tokenizer"]["eos"] == tok.token_to_id("</s>")
    assert manifest["dtype"] == "uint16" and manifest["max_token"] == max(int(want["train"].max()), int(want["val"].max()))
    for split in ("train", "val"):
        data = (prepared / manifest[split]["file"]).read_bytes()
        assert np.array_equal(np.frombuffer(data, dtype=np.uint16), want[split])
        assert manifest[split]["tokens"] == len(want[split]) and manifest[split]["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["train"]["documents"] + manifest["val"]["documents"] == N_DOCS and manifest["val"]["documents"] > 10
    assert manifest["source"]["kind"] == "jsonl" and manifest["source"]["validation"] == "hash split, val_fraction 0.1"
    assert manifest["fingerprint"].startswith("prepared:tok-")
    assert sorted(p.name for p in prepared.iterdir()) == ["manifest.json", "train.bin", "val.bin"]
    # The same settings again: nothing to do. The same tokens under another name: the same fingerprint.
    again, done = prepare(settings(corpus, prepared))
    assert done == "already" and again["fingerprint"] == manifest["fingerprint"]


def test_trial_reads_it_with_its_vocab_and_fingerprint(prepared: Path, stream_contract) -> None:
    src = open_source(DataConfig(source="tokens", path=str(prepared)))
    manifest = json.loads((prepared / MANIFEST).read_text())
    assert isinstance(src, PreparedTokenSource)
    assert src.vocab == manifest["tokenizer"]["vocab"] > manifest["max_token"] and src.fingerprint == manifest["fingerprint"]
    assert np.array_equal(np.asarray(src.val), np.fromfile(prepared / "val.bin", dtype=np.uint16))
    stream_contract(src, batch=4, seq_len=16)
    # The manifest itself, or the train file beside it, name the same corpus.
    for path in (prepared / MANIFEST, prepared / "train.bin"):
        assert open_source(DataConfig(source="tokens", path=str(path))).fingerprint == src.fingerprint
    with pytest.raises(TrialInputError, match=rf"model.vocab 256 is smaller than the data's vocabulary {src.vocab}"):
        check_vocab(256, src)
    # The model needs an output for every id text can produce, not for the sentinel ids (as T5's).
    check_vocab(manifest["tokenizer"]["full_vocab"] - 10, src)
    with pytest.raises(TrialInputError, match=r"^data.val_path: not used with a prepared corpus"):
        open_source(DataConfig(source="tokens", path=str(prepared), val_path=str(prepared / "val.bin")))


def _spec(path: Path, seed: int = 0, steps: int = 8) -> TrialSpec:
    return TrialSpec(
        model=ModelConfig(scheme="pre", width=32, depth=1, n_heads=1, vocab=320, seq_len=16),
        train=TrainConfig(steps=steps, batch_size=4, eval_every=4, eval_batches=2, checkpoint_every=4, report_every=1,
                          schedule=ScheduleConfig(warmup=1)),
        data=DataConfig(source="tokens", path=str(path)), lrs=[3e-3], seed=seed, point_ids=["p0"],
        divergence=DivergenceConfig(stall_margin=None),  # 8 steps learn little: the stall rule is tested elsewhere
    )


def test_a_trial_trains_on_it_and_resumes_bit_identically(prepared: Path, tmp_path: Path) -> None:
    """A trial stopped at step 4 and resumed ends with exactly the weights of an uninterrupted one."""
    from safetensors.torch import load_file

    fingerprint = json.loads((prepared / MANIFEST).read_text())["fingerprint"]
    straight = run_trial(_spec(prepared), checkpoint_dir=tmp_path / "a", export_dir=tmp_path / "a-w")
    assert straight[0].outcome == "ok" and straight[0].corpus == fingerprint
    reports: list[StepReport] = []
    run_trial(_spec(prepared), report=reports.append, checkpoint_dir=tmp_path / "b",
              should_stop=lambda: bool(reports) and reports[-1].step >= 4)
    state = json.loads(next((tmp_path / "b").glob("step-*/state.json")).read_text())
    assert state["data"] == {"kind": "permuted", "sequences": 16, "seed": state["data"]["seed"], "window": 17,
                             "windows": state["data"]["windows"]}
    resumed = run_trial(_spec(prepared), checkpoint_dir=tmp_path / "b", export_dir=tmp_path / "b-w")
    assert resumed[0].loss == straight[0].loss
    a, b = load_file(str(tmp_path / "a-w" / "0" / "model.safetensors")), load_file(str(tmp_path / "b-w" / "0" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_per_seed_order_is_a_permutation_stable_per_seed() -> None:
    tokens = np.arange(17 * 500 + 9, dtype=np.uint32)
    streams = {seed: PermutedWindowStream(tokens, 10, 16, seed, name="t") for seed in (0, 1)}
    n = streams[0].n_windows
    for stream in streams.values():
        starts = stream.starts(0, n)
        assert len(set((starts % 17).tolist())) == 1  # one offset per epoch
        assert sorted(((starts - starts[0] % 17) // 17).tolist()) == list(range(n))  # every window once
        assert not np.array_equal(stream.starts(n, n), starts)  # the next epoch: another order
    assert not np.array_equal(streams[0].starts(0, 50), streams[1].starts(0, 50))
    again = PermutedWindowStream(tokens, 10, 16, 0, name="t")
    assert all(np.array_equal(streams[0].next_batch(), again.next_batch()) for _ in range(3))
    batch = PermutedWindowStream(tokens, 10, 16, 0, name="t").next_batch()
    assert np.array_equal(batch, np.stack([tokens[s : s + 17] for s in streams[0].starts(0, 10)]).astype(np.int64))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 1000, 1024, 1025, 65_537])
def test_index_permutation_is_a_bijection(n: int) -> None:
    perm = IndexPermutation(n, [1, 2, 3])
    image = perm(np.arange(n))
    assert sorted(image.tolist()) == list(range(n))
    assert np.array_equal(perm(np.arange(n)[::-1]), image[::-1])  # a pure function of the index
    if n >= 1000:
        assert abs(np.corrcoef(np.arange(n), image)[0, 1]) < 0.1  # no trace of the input order
        assert not np.array_equal(IndexPermutation(n, [1, 2, 4])(np.arange(n)), image)


def test_resume_is_exact_and_constant_time(prepared: Path) -> None:
    src = open_source(DataConfig(source="tokens", path=str(prepared)))
    stream = src.train_stream(32, 16, 11)
    n_batches = 3 * stream.n_windows // 32 + 2  # three epochs and more
    batches = [stream.next_batch() for _ in range(n_batches)]
    for cut in (1, n_batches // 3, n_batches - 1):
        replay = src.train_stream(32, 16, 11)
        for _ in range(cut):
            replay.next_batch()
        resumed = src.train_stream(32, 16, 11)
        resumed.load_state(json.loads(json.dumps(replay.state())))
        assert all(np.array_equal(resumed.next_batch(), b) for b in batches[cut:])
    far = src.train_stream(32, 16, 11)
    far.load_state({**far.state(), "sequences": 10**12})
    started = time.perf_counter()
    far.next_batch()  # billions of epochs in: one batch's work, nothing replayed
    assert time.perf_counter() - started < 1.0
    with pytest.raises(TrialInputError, match="does not belong to this stream"):
        src.train_stream(32, 16, 12).load_state(stream.state())


def test_any_number_of_workers_writes_the_same_files(corpus: dict[str, Path], prepared: Path, tmp_path: Path) -> None:
    manifest, _ = prepare(settings(corpus, tmp_path / "w2", workers=2))
    assert manifest["workers"] == 2
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "w2" / name).read_bytes() == (prepared / name).read_bytes()
    assert manifest["fingerprint"] == json.loads((prepared / MANIFEST).read_text())["fingerprint"]


def test_limits_stop_at_whole_chunks(corpus: dict[str, Path], prepared: Path, tmp_path: Path) -> None:
    manifest, _ = prepare(settings(corpus, tmp_path / "cut", max_tokens=1000, val_tokens=50))
    full = np.fromfile(prepared / "train.bin", dtype=np.uint16)
    cut = np.fromfile(tmp_path / "cut" / "train.bin", dtype=np.uint16)
    assert 1000 <= len(cut) < len(full) and np.array_equal(cut, full[: len(cut)])  # a prefix, ending at a chunk's end
    assert 50 <= manifest["val"]["tokens"] < json.loads((prepared / MANIFEST).read_text())["val"]["tokens"]
    assert manifest["fingerprint"] != json.loads((prepared / MANIFEST).read_text())["fingerprint"]


def test_hf_dataset_streamed_or_not(corpus: dict[str, Path], tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    docs = _documents()
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": docs[:360]}),
                          "validation": datasets.Dataset.from_dict({"text": docs[360:]})}).save_to_disk(str(tmp_path / "ds"))
    tok = tokenizers.Tokenizer.from_file(str(corpus["tokenizer"]))
    eos = tok.token_to_id("</s>")
    want = [np.asarray([t for d in part for t in tok.encode(d, add_special_tokens=False).ids + [eos]]) for part in (docs[:360], docs[360:])]
    for streaming in (False, True):
        out = tmp_path / f"hf-{streaming}"
        manifest, _ = prepare(PrepareSettings(out=out, source="hf", dataset=str(tmp_path / "ds"), streaming=streaming,
                                              tokenizer=str(corpus["tokenizer"]), chunk_docs=50))
        assert np.array_equal(np.fromfile(out / "train.bin", dtype=np.uint16), want[0])
        assert np.array_equal(np.fromfile(out / "val.bin", dtype=np.uint16), want[1])
        assert manifest["source"]["validation"] == "separate" and manifest["train"]["documents"] == 360


# ---- interrupted prepares -------------------------------------------------------------------

_SLOW_PREPARE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from trials.data.prepare import PrepareSettings, prepare
    s = PrepareSettings(out=Path(sys.argv[1]), source=sys.argv[2], path=sys.argv[3], tokenizer=sys.argv[4], val_fraction=0.1,
                        chunk_docs=int(sys.argv[5]), checkpoint_s=0.0, workers=1)
    prepare(s, on_progress=lambda p: time.sleep(0.1))
""")


def _kill_midway(out: Path, args: list[str]) -> None:
    """Start a slow prepare, SIGKILL it once it has checkpointed a few chunks."""
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_PREPARE, str(out), *args])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            progress = out / PROGRESS
            if progress.is_file() and json.loads(progress.read_text() or "{}").get("train_tokens", 0) > 300:
                break
            assert proc.poll() is None, "the prepare ended before it could be killed"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)


def test_a_killed_prepare_is_never_read_and_a_rerun_completes_it(corpus: dict[str, Path], prepared: Path, tmp_path: Path) -> None:
    from sweeper.core.errors import UserError
    from sweeper.spec.schema import load_sweep

    out = tmp_path / "killed"
    _kill_midway(out, ["jsonl", str(corpus["jsonl"]), str(corpus["tokenizer"]), "32"])
    assert not (out / MANIFEST).exists() and not (out / "train.bin").exists() and not (out / "val.bin").exists()
    with pytest.raises(TrialInputError, match=r"no manifest.json, so not a prepared token corpus; its `sweeper data prepare` "
                                              r"has not finished \(\d[\d,]* training tokens so far\): rerun the same command"):
        open_source(DataConfig(source="tokens", path=str(out)))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: s\nmethods: [pre]\nmodel: {{width: 32, depths: [1], vocab: 320}}\n"
                     f"data: {{source: tokens, path: {out}}}\ntrain: {{steps: 2}}\nlr: {{center: 0.001}}\n")
    with pytest.raises(UserError) as err:
        load_sweep(sweep)
    assert "data.path" in "\n".join(err.value.lines()) and "sweeper data prepare" in "\n".join(err.value.lines())
    # Rerun: it resumes from the checkpoint, and the files equal an uninterrupted prepare's.
    manifest, done = prepare(settings(corpus, out))
    assert done == "resumed"
    for name in ("train.bin", "val.bin"):
        assert (out / name).read_bytes() == (prepared / name).read_bytes()
    assert manifest["fingerprint"] == json.loads((prepared / MANIFEST).read_text())["fingerprint"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "train.bin", "val.bin"]


def test_an_interrupted_streaming_prepare_resumes_from_the_dataset_state(corpus: dict[str, Path], tmp_path: Path) -> None:
    """Ctrl-C in the middle of a streamed dataset: the rerun continues from `IterableDataset.state_dict()`."""
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": _documents()}).save_to_disk(str(tmp_path / "ds"))

    def run(out: Path, **kw: object) -> tuple[dict[str, object], str]:
        return prepare(PrepareSettings(out=out, source="hf", dataset=str(tmp_path / "ds"), tokenizer=str(corpus["tokenizer"]),
                                       val_fraction=0.1, chunk_docs=16), **kw)  # type: ignore[arg-type]

    straight, _ = run(tmp_path / "straight")

    def interrupt(progress: object) -> None:
        if progress.tokens["train"] > 2000:  # type: ignore[attr-defined]
            raise KeyboardInterrupt

    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        run(out, on_progress=interrupt)
    progress = json.loads((out / PROGRESS).read_text())
    assert progress["position"]["state"] is not None and 2000 < progress["train_tokens"] < straight["train"]["tokens"]  # type: ignore[index]
    manifest, done = run(out)
    assert done == "resumed" and manifest["fingerprint"] == straight["fingerprint"]
    assert (out / "train.bin").read_bytes() == (tmp_path / "straight" / "train.bin").read_bytes()


def test_killed_between_manifest_and_rename(corpus: dict[str, Path], prepared: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest is written before the token files get their names: a kill in between leaves a
    folder a trial refuses (a listed file is missing), and a rerun only renames."""
    import trials.data.prepare as prep

    real_replace = os.replace

    def killed(src: object, dst: object) -> None:
        if str(src).endswith(".partial"):
            raise KeyboardInterrupt  # the kill, as the first token file is renamed
        real_replace(src, dst)  # type: ignore[arg-type]

    out = tmp_path / "late"
    with monkeypatch.context() as m:
        m.setattr(prep.os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            prepare(settings(corpus, out))
    assert (out / MANIFEST).exists() and not (out / "train.bin").exists()
    with pytest.raises(TrialInputError, match=r"train.bin: missing .*has not finished"):
        open_source(DataConfig(source="tokens", path=str(out)))
    manifest, done = prepare(settings(corpus, out))
    assert done == "finished" and (out / "train.bin").read_bytes() == (prepared / "train.bin").read_bytes()


def test_a_changed_token_file_is_refused(corpus: dict[str, Path], prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("manifest.json", "train.bin", "val.bin"):
        (copy / name).write_bytes((prepared / name).read_bytes())
    with open(copy / "train.bin", "ab") as fh:
        fh.write(b"\x00\x00")
    with pytest.raises(TrialInputError, match=r"train.bin: \d+ bytes, but .* lists \d+ uint16 tokens"):
        open_source(DataConfig(source="tokens", path=str(copy)))
    # Preparing it again with the same settings says what is wrong; --overwrite prepares it again.
    with pytest.raises(TrialInputError, match=r"lists \d+ uint16 tokens.*; pass --overwrite to prepare it again"):
        prepare(settings(corpus, copy))
    manifest, done = prepare(settings(corpus, copy, overwrite=True))
    assert done == "prepared" and (copy / "train.bin").read_bytes() == (prepared / "train.bin").read_bytes()


# ---- the command line ------------------------------------------------------------------------


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", "data", *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd)


def test_cli_prepares_resumes_and_shows(corpus: dict[str, Path], prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    base = ["prepare", str(out), "--source", "jsonl", "--path", str(corpus["jsonl"]), "--tokenizer", str(corpus["tokenizer"]),
            "--val-fraction", "0.1", "--workers", "1"]
    proc = _cli(*base)
    assert proc.returncode == 0, proc.stderr
    assert "train +" in proc.stdout and "use it with  data: {source: tokens" in proc.stdout
    again = _cli(*base)
    assert again.returncode == 0 and "already prepared" in again.stdout
    info = _cli("info", str(out), "--verify", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["train"]["tokens"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--source", "jsonl"], "--path: required for --source jsonl"),
    (["--source", "jsonl", "--path", "nope.jsonl"], "--path: nope.jsonl: no such file or folder"),
    (["--source", "jsonl", "--path", "{jsonl}", "--text-column", "body"], "--text-column: {jsonl}:1: no string field 'body'"),
    (["--source", "jsonl", "--path", "{jsonl}", "--tokenizer", "{jsonl}"], "--tokenizer: {jsonl}: not a tokenizers JSON file"),
    (["--source", "hf", "--path", "{jsonl}"], "--path: not used with --source hf"),
    (["--source", "jsonl", "--path", "{jsonl}", "--workers", "0"], "argument --workers: 0: must be >= 1"),
    (["--source", "jsonl", "--path", "{jsonl}", "--max-tokens", "lots"], "argument --max-tokens: 'lots': expected a token count"),
    (["--source", "jsonl", "--path", "{jsonl}", "--val-fraction", "0.2"], "already holds a prepared corpus made with other settings"),
])
def test_bad_input_is_one_line_and_exit_2(corpus: dict[str, Path], prepared: Path, tmp_path: Path, args: list[str],
                                          message: str) -> None:
    out = prepared if "already holds" in message else tmp_path / "never"
    fill = {"jsonl": str(corpus["jsonl"])}
    proc = _cli("prepare", str(out), *(a.format(**fill) for a in args), "--tokenizer" if "--tokenizer" not in args else "--quiet",
                *([str(corpus["tokenizer"])] if "--tokenizer" not in args else []), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message.format(**fill) in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "never").exists()  # nothing written


def test_the_sweep_checks_its_vocab_and_records_its_fingerprint(prepared: Path, tmp_path: Path) -> None:
    """Launch opens the corpus once: its fingerprint is the sweep's corpus fingerprint, and a model.vocab
    that misses some of its ids is one clear error before any trial starts."""
    from sweeper.run.launch import preflight_data
    from sweeper.core.errors import UserError
    from sweeper.search.planner import build_plan
    from sweeper.spec.schema import load_sweep

    manifest = json.loads((prepared / MANIFEST).read_text())
    for vocab in (320, 100):
        sweep = tmp_path / f"sweep{vocab}.yaml"
        sweep.write_text(f"name: s\nmethods: [pre]\nmodel: {{width: 32, depths: [1], vocab: {vocab}}}\n"
                         f"data: {{source: tokens, path: {prepared}}}\ntrain: {{steps: 2}}\nlr: {{center: 0.001}}\n")
        plan = build_plan(load_sweep(sweep).config, output=str(tmp_path / f"out{vocab}"), base=tmp_path)
        if vocab == 320:
            assert preflight_data(plan) == manifest["fingerprint"]
        else:
            with pytest.raises(UserError, match=rf"model.vocab 100 is smaller than the data's vocabulary {manifest['tokenizer']['vocab']} "
                                                rf"\(prepared corpus {prepared}"):
                preflight_data(plan)
