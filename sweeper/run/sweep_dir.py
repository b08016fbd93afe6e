"""The sweep directory as a launch finds and leaves it: the checks before anything is written,
the manifest, the copies of the YAML, the lock, and the store opened (or rebuilt) for writing.

Layout: see `sweeper.records.store`. The manifest also keeps the data's unigram entropy (the
loss of predicting by token frequencies, what a `stalled` point did not beat; exact for local data,
an estimate from the trials for streamed data) and `divergence.stall_margin`. Checks first (`check_output_dir`, `check_corpus`): a
relaunch may add methods, sizes and seeds, never change the settings of a cell that has
results (per-cell fingerprints in the manifest), nor the corpus, nor the ledger. Then
`prepare` writes the manifest and the YAML copy, and `open_store` opens the store, rebuilt
from the ledger when it is damaged or written by store version 1 for a loop-count sweep.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any, TextIO

import polars as pl
import yaml

from sweeper.core.errors import UserError
from sweeper.records.durable import write_text_atomic
from sweeper.records.ledger import Ledger, LedgerEntry, storage_url
from sweeper.records.manifest import (
    STORE_VERSION,
    CellEntry,
    DataEntropy,
    Manifest,
    is_sweep_dir,
    read_manifest,
    write_manifest,
)
from sweeper.records.repair import rebuild_store
from sweeper.core.states import FINISHED_STATES
from sweeper.records.store import StoreWriter, load_cells, load_curves
from sweeper.search.planner import Plan, compat_diff, fingerprint_of
from trials.data import check_vocab, open_source
from trials.errors import TrialInputError

LOCAL_SOURCES = ("builtin", "text", "jsonl", "parquet", "tokens", "synthetic", "images", "builtin_images")


def preflight(plan: Plan) -> tuple[str | None, dict[str, Any] | None]:
    """Open a local corpus once in the driver: bad data (a too-small vocabulary, an empty folder)
    fails here with one line instead of in every trial, and the corpus fingerprint and its unigram
    entropy (exact; cached with the corpus) are known up front. Remote sources (`hf`) are left to
    the trials, which may be the only machines online: their estimate comes with the first result."""
    data = plan.cells[0].data if plan.cells else None
    if data is None or data.source not in LOCAL_SOURCES:
        return None, None
    try:
        source = open_source(data)
        check_vocab(plan.vocab, source)
        entropy = source.unigram_entropy().to_dict()
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    return source.fingerprint, entropy


def train_tokenizer(plan: Plan, console: Any) -> None:
    """Train the sweep's tokenizer where `data.tokenizer` names it when `data.tokenizer_train` asks for it and
    the file is missing (`trials.data.bpe`), before anything opens the data: once, in the driver."""
    data = plan.cells[0].data if plan.cells else None
    if data is None or data.tokenizer_train is None or data.tokenizer is None or Path(data.tokenizer).exists():
        return
    from trials.data.bpe import ensure_tokenizer  # needs `tokenizers`: only for a sweep that trains one

    recipe = data.tokenizer_train
    say = console.print if console is not None else print
    say(f"training the tokenizer: a byte-level BPE of {recipe.vocab:,} ids on the first "
                  f"{recipe.documents:,} training documents, into {data.tokenizer}")
    started = time.monotonic()
    try:
        tokenizer = ensure_tokenizer(data)
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    if tokenizer is not None:
        say(f"  trained in {time.monotonic() - started:.0f} s ({tokenizer.fingerprint})")


def check_output_dir(plan: Plan) -> Manifest | None:
    """The existing manifest, after checking that this plan may continue it; None for a new sweep."""
    path = plan.sweep_dir
    if not path.exists():
        return None
    if not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory; choose another output (--out)")
    if not is_sweep_dir(path):
        if any(not _left_before_the_manifest(p.name) for p in path.iterdir()):
            raise UserError(f"{path}: exists, is not empty and is not a sweep directory; choose another output (--out)")
        return None
    manifest = read_manifest(path)
    if manifest.is_imported:
        raise manifest.no_ledger(path, "nothing to relaunch, and recorded results are never mixed with trained "
                                 "ones; give another output (--out)")
    check_compatible(plan, manifest)
    return manifest


LOCK_FILE = "driver.lock"


def _left_before_the_manifest(name: str) -> bool:
    """What a launch killed before it wrote the first manifest may leave: the lock, and the
    temporary file of an atomic write (`sweeper.records.durable`). Such a directory is new."""
    return name == LOCK_FILE or (name.startswith(".") and name.endswith(".tmp"))


def check_compatible(plan: Plan, manifest: Manifest) -> None:
    """Refuse a relaunch whose cells would mix incompatible results."""
    problems: dict[str, list[str]] = {}
    for cell in plan.cells:
        old = manifest.cells.get(cell.cell_id)
        if old is not None and old.fingerprint != cell.fingerprint:
            diff = "; ".join(compat_diff(old.compat, cell.compat)[:4]) or "settings changed"
            problems.setdefault(diff, []).append(cell.cell_id)
    if problems:
        details = []
        for diff, cells in problems.items():
            which = cells[0] if len(cells) == 1 else f"{len(cells)} cells ({cells[0]}, ...)"
            details.append(f"{which}: {diff}")
        raise UserError(
            f"{plan.sweep_dir}: this YAML changes settings of cells that already have results, which would mix "
            "incomparable results; restore the settings, or give a new output directory (--out)",
            details=details,
        )
    url = manifest.ledger
    new_url = ledger_url(plan)
    if url and plan.config.ledger != "sqlite" and url != new_url:
        raise UserError(f"ledger: this sweep's ledger is {url}; the YAML names {new_url}")


def check_corpus(plan: Plan, manifest: Manifest | None, corpus: str | None) -> None:
    if corpus and manifest is not None and manifest.corpus and manifest.corpus != corpus:
        raise UserError(
            f"{plan.sweep_dir}: the corpus changed since this sweep started (fingerprint {manifest.corpus} "
            f"then, {corpus} now); results would not be comparable: restore the data or use a new output (--out)"
        )


def ledger_url(plan: Plan) -> str:
    return storage_url(plan.config.ledger, plan.sweep_dir)


def manifest_for(plan: Plan, old: Manifest | None, ledger: str) -> Manifest:
    """The manifest of this launch: the old one (a copy; keys it holds that this version does not name
    are kept) with this plan's cells and settings over it."""
    now = time.time()
    manifest = old.model_copy(deep=True) if old is not None else Manifest(store_version=STORE_VERSION)
    manifest.store_version = STORE_VERSION
    manifest.name = plan.config.name
    manifest.updated = now
    manifest.ledger = ledger
    manifest.setdefault("created", now)
    manifest.setdefault("corpus", None)
    cells = dict(manifest.cells)
    for cell in plan.cells:
        cells[cell.cell_id] = CellEntry(
            **cell.facts.attrs(), fingerprint=cell.fingerprint, compat=cell.compat, scheme=cell.scheme,
            x=cell.x, steps=cell.steps_per_point, tokens=cell.tokens_per_point,
        )
    manifest.cells = cells
    shared = {k: plan.cells[0].compat[k] for k in ("data", "divergence")} if plan.cells else {}
    manifest.compat_key = fingerprint_of(shared)
    manifest.x = plan.axis  # depth, loops or params: what the fits and dashboards put on the x axis
    manifest.keep_weights = plan.config.keep_weights  # `sweeper export` says why there are none
    margins = {cell.divergence.stall_margin for cell in plan.cells}
    if len(margins) == 1:  # the stall rule's margin (null: off); per cell in `compat` when methods differ
        manifest.stall_margin = margins.pop()
    else:
        manifest.unset("stall_margin")
    manifest.setdefault("unigram_entropy", None)
    return manifest


def prepare(plan: Plan, old: Manifest | None, corpus: str | None,
            entropy: dict[str, Any] | None = None) -> tuple[Manifest, str | None]:
    """Write the manifest and keep the YAML as launched; returns (manifest, the YAML copy's name).
    `entropy`: the data's unigram entropy as `trials.data.unigram.UnigramEntropy.to_dict()` gives it."""
    manifest = manifest_for(plan, old, ledger_url(plan))
    if corpus and not manifest.corpus:
        manifest.corpus = corpus
    manifest.overrides = list(plan.overrides)
    if entropy is not None:
        manifest.unigram_entropy = DataEntropy(**entropy)
    # The manifest first: it makes the folder a sweep directory, which a relaunch continues (a
    # folder holding only a YAML copy would be refused as someone else's).
    write_manifest(plan.sweep_dir, manifest)
    yaml_name = save_yaml_copy(plan.sweep_dir, plan.source, plan.overrides, plan.document)
    return manifest, yaml_name


def save_yaml_copy(sweep_dir: Path, source: Path | None, overrides: list[str] | None = None,
                   document: Any = None) -> str | None:
    """Keep the YAML as launched: sweep.yaml, then sweep.N.yaml whenever it changes. With command-line
    overrides the copy is the document they produced (launching the copy needs none), headed by them."""
    if source is None:
        return None
    text = source.read_text()
    if overrides:
        head = "".join(f"#   {o}\n" for o in overrides)
        text = (f"# {source.name} as launched with these overrides (already set below):\n{head}"
                + yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    copies = sorted(sweep_dir.glob("sweep*.yaml"), key=lambda p: _copy_index(p.name))
    if copies and copies[-1].read_text() == text:
        return copies[-1].name
    name = "sweep.yaml" if not copies else f"sweep.{_copy_index(copies[-1].name) + 1}.yaml"
    write_text_atomic(sweep_dir / name, text)
    return name


def _copy_index(name: str) -> int:
    parts = name.split(".")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 1


def open_store(plan: Plan, ledger: Ledger, old_manifest: Manifest | None, messages: list[str]) -> StoreWriter:
    """The store writer; a damaged store is set aside and rebuilt from the ledger, and so is a
    loop-count sweep's store of version 1 (its `depth` column held the loop count)."""
    sweep_dir = plan.sweep_dir
    facts = {cell.cell_id: cell.facts for cell in plan.cells}
    old_version = old_manifest.store_version if old_manifest is not None else STORE_VERSION
    if old_version < 2 and plan.axis == "loops" and (sweep_dir / "store").exists():
        moved = rebuild_store(sweep_dir, ledger, facts=facts, loop_axis=True)
        messages.append(f"store upgraded to version {STORE_VERSION} (rebuilt from the ledger; the old one is in {moved})")
        return StoreWriter(sweep_dir)
    try:
        writer = StoreWriter(sweep_dir)  # reads every point chunk
        load_curves(sweep_dir)  # and every curve chunk and the cells: a damaged one is found now, not by a reader
        load_cells(sweep_dir)
        return writer
    except UserError as exc:
        moved = rebuild_store(sweep_dir, ledger, facts=facts)
        messages.append(f"store was damaged ({exc.message.split(';')[0]}); rebuilt from the ledger, old copy in {moved}")
        return StoreWriter(sweep_dir)


def check_ledger_has_the_store(url: str, entries: list[LedgerEntry], store_points: pl.DataFrame) -> None:
    """Refuse to resume when the store holds finished points that the ledger does not: the ledger
    (the record, always written first) was replaced or damaged, and resuming would train those
    points again and overwrite their rows."""
    if not store_points.height:
        return
    known = {e.row.point_id: e.row for e in entries}
    finished = store_points.filter(pl.col("state").is_in([s.value for s in FINISHED_STATES]))
    missing = []
    for pid, state, attempt in finished.select("point_id", "state", "attempt").iter_rows():
        record = known.get(pid)
        # The ledger may be ahead of the store (a retry or re-run opened since: a higher attempt), never behind.
        if record is None or (record.state != state and record.attempt <= (attempt or 0)):
            missing.append(pid)
    if missing:
        raise UserError(
            f"{url}: the ledger has no record of {len(missing)} finished point(s) that the store holds "
            f"(e.g. {missing[0]}): it was replaced or damaged. Restore it from a backup, or launch into a new "
            "--out; the store is left as it is (sweeper status/optima still read it)"
        )


def hold_driver_lock(sweep_dir: Path) -> TextIO:
    """One driver per sweep directory: an exclusive lock, released by the kernel even on SIGKILL."""
    path = sweep_dir / LOCK_FILE
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(f"{sweep_dir}: another `sweeper launch` is running this sweep ({holder}); "
                        "watch it with `sweeper status` or stop it first") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    handle.flush()
    return handle


def release_driver_lock(handle: TextIO) -> None:
    """Empty the lock file before the kernel releases the lock, so it never names a driver that ended
    (a SIGKILLed driver leaves its pid, but the lock itself is free and the next launch takes it)."""
    try:
        handle.seek(0)
        handle.truncate()
        handle.flush()
    except OSError:
        pass  # a full disk must not hide the sweep's own outcome; the lock is released below either way
    handle.close()
