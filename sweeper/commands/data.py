"""`sweeper data`: tokenize a corpus once, for every trial of a sweep to memory-map.

    sweeper data prepare OUT --source hf --dataset allenai/c4 --subset en --tokenizer google-t5/t5-base \\
        --max-tokens 9e9 --val-tokens 20e6 --workers 16
    sweeper data prepare OUT --source jsonl --path 'corpus/*.jsonl' --tokenizer tokenizer.json --workers 4
    sweeper data info OUT [--verify]

`prepare` reads a Hugging Face dataset (hub name, streamed unless --no-streaming, or a local folder)
or local text / JSONL / Parquet files, tokenizes them in --workers processes, and writes OUT/train.bin,
OUT/val.bin (flat token ids, documents separated by the end-of-document token) and OUT/manifest.json
(tokenizer, vocabulary, dtype, token and document counts, source, fingerprint). Validation: the
dataset's --val-split or --val-path when given, else a hash split of documents (--val-fraction).
Interrupted (Ctrl-C, a kill, a full disk), the same command resumes from the last checkpoint (at most
30 s of work lost); nothing is read as a corpus before manifest.json exists. A sweep reads the folder
with `data: {source: tokens, path: OUT}` and `model.vocab` at least the tokenizer's vocabulary.
`info` prints a manifest; --verify re-hashes the token files against it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format
from sweeper.core.errors import UserError

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_PROGRESS_TTY_S = 0.5
_PROGRESS_LOG_S = 30.0


def token_count(text: str) -> int:
    """A token count: `9000000000`, `9e9`, `9B`, `20M`, `1.5k`."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a token count such as 9e9, 9B or 20M")
    value = float(m.group(1)) * _SUFFIX[m.group(2)]
    if not math.isfinite(value) or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1 token")
    return int(value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be between 0 and 1 (exclusive)")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "data",
        help="tokenize a corpus once into a memory-mapped token folder (prepare), show one (info)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", parser_class=type(p))
    prep = sub.add_parser("prepare", help="tokenize a dataset or local files into OUT (resumes an interrupted run)")
    prep.add_argument("out", help="the folder to write (train.bin, val.bin, manifest.json)")
    prep.add_argument("--source", required=True, choices=["hf", "text", "jsonl", "parquet"], help="what to read")
    prep.add_argument("--path", help="text/jsonl/parquet: a file, a folder or a glob")
    prep.add_argument("--val-path", help="text/jsonl/parquet: validation files (default: a hash split, --val-fraction)")
    prep.add_argument("--dataset", help="hf: a hub name (allenai/c4) or a local dataset folder")
    prep.add_argument("--subset", help="hf: the configuration (en for C4)")
    prep.add_argument("--split", default="train", help="hf: the training split (default train)")
    prep.add_argument("--val-split", default="validation",
                      help="hf: the validation split (default validation; 'none', or a split the dataset lacks: a hash split)")
    prep.add_argument("--no-streaming", dest="streaming", action="store_false",
                      help="hf: download the dataset instead of streaming it")
    prep.add_argument("--text-column", default="text", help="jsonl/parquet/hf: the text field (default text)")
    prep.add_argument("--tokenizer", default=None,
                      help="a tokenizer.json, a folder with one, a hub name (google-t5/t5-base), or 'bytes' (default)")
    prep.add_argument("--val-fraction", type=_fraction, default=0.05,
                      help="hash split: the share of documents held out (default 0.05)")
    prep.add_argument("--max-tokens", type=token_count, help="stop after about this many training tokens (9e9, 9B)")
    prep.add_argument("--val-tokens", type=token_count, help="keep about this many validation tokens (20M)")
    prep.add_argument("--workers", type=_positive, default=max(1, min(8, os.cpu_count() or 1)),
                      help="tokenizer processes, one thread each (default: the CPUs, at most 8)")
    prep.add_argument("--overwrite", action="store_true", help="replace a corpus in OUT prepared with other settings")
    prep.add_argument("--restart", action="store_true", help="discard an unfinished prepare in OUT made with other settings")
    prep.add_argument("--quiet", action="store_true", help="no progress lines")
    add_format(prep)
    prep.set_defaults(func=run_prepare)
    info = sub.add_parser("info", help="print a prepared folder's manifest (and check its files)")
    info.add_argument("path", help="a prepared folder or its manifest.json")
    info.add_argument("--verify", action="store_true", help="re-hash the token files and compare with the manifest")
    add_format(info)
    info.set_defaults(func=run_info)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


_FIELDS = re.compile(r"^data\.(path|val_path|dataset|subset|split|val_split|text_column|tokenizer)\b")


def _user_error(exc: Any) -> UserError:
    """A trial-side error, with the YAML field it names (`data.text_column`) given as this command's option."""
    return UserError(_FIELDS.sub(lambda m: "--" + m.group(1).replace("_", "-"), exc.message))


class _Reporter:
    """Progress lines on stderr: rewritten in place on a terminal, one every 30 s otherwise."""

    def __init__(self, max_tokens: int | None, quiet: bool) -> None:
        self.max_tokens, self.quiet = max_tokens, quiet
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.first: tuple[float, int] | None = None  # (time, tokens) at the first chunk written: the rate counts from there

    def __call__(self, progress: Any) -> None:
        now = time.monotonic()
        done = progress.tokens["train"] + progress.tokens["val"]
        if self.first is None:
            self.first = (now, done)
            self.last = now
            return
        if self.quiet or now - self.last < (_PROGRESS_TTY_S if self.tty else _PROGRESS_LOG_S):
            return
        self.last = now
        rate = (done - self.first[1]) / max(1e-9, now - self.first[0])
        line = (f"{progress.tokens['train']:,} train + {progress.tokens['val']:,} val tokens, "
                f"{sum(progress.documents.values()):,} documents, {rate:,.0f} tokens/s")
        if self.max_tokens:
            left = max(0, self.max_tokens - progress.tokens["train"])
            line += f", {100 * progress.tokens['train'] / self.max_tokens:.1f}% of {self.max_tokens:,}"
            if rate > 0:
                line += f", about {_duration(left / rate)} left"
        sys.stderr.write(("\r\033[K" + line) if self.tty else line + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty and self.last and not self.quiet:
            sys.stderr.write("\n")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def run_prepare(args: argparse.Namespace) -> int:
    # start-up time: imported when used, not on every CLI start
    from trials.data.prepare import PrepareSettings, prepare
    from trials.errors import TrialInputError

    local = args.source != "hf"
    for option, value, allowed in (("--path", args.path, local), ("--val-path", args.val_path, local),
                                   ("--dataset", args.dataset, not local), ("--subset", args.subset, not local)):
        if value is not None and not allowed:
            raise UserError(f"{option}: not used with --source {args.source}")
    settings = PrepareSettings(
        out=Path(os.path.expanduser(args.out)), source=args.source, path=args.path, val_path=args.val_path,
        text_column=args.text_column, dataset=args.dataset, subset=args.subset, split=args.split,
        val_split=None if str(args.val_split).lower() == "none" else args.val_split, streaming=args.streaming,
        tokenizer=args.tokenizer, val_fraction=args.val_fraction, max_tokens=args.max_tokens, val_tokens=args.val_tokens,
        workers=args.workers, overwrite=args.overwrite, restart=args.restart,
    )
    reporter = _Reporter(args.max_tokens, args.quiet)
    try:
        manifest, done = prepare(settings, on_progress=reporter)
    except TrialInputError as exc:
        raise _user_error(exc) from None
    finally:
        reporter.end()
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    notes = {"already": " (already prepared: nothing to do)", "resumed": " (resumed)", "finished": " (finished an interrupted run)"}
    _print_manifest(settings.out, manifest, note=notes.get(done, ""))
    return 0


def _print_manifest(folder: Path, m: dict[str, Any], note: str = "") -> None:
    train, val, tok = m["train"], m["val"], m["tokenizer"]
    docs = train["documents"] + val["documents"]
    size = sum((folder / m[s]["file"]).stat().st_size for s in ("train", "val")) if folder.is_dir() else 0
    print(f"{folder}: {train['tokens']:,} train + {val['tokens']:,} val tokens from {docs:,} documents, "
          f"{m['dtype']} ({size / 1e9:.2f} GB), {m['seconds']:.0f} s with {m['workers']} workers{note}")
    print(f"  tokenizer {tok['name']} (vocab {tok['vocab']}, end-of-document id {tok['eos']}), largest id in the files "
          f"{m['max_token']}; fingerprint {m['fingerprint']}")
    print(f"  use it with  data: {{source: tokens, path: {folder}}}  and  model.vocab >= {tok['vocab']}")


def run_info(args: argparse.Namespace) -> int:
    # start-up time: imported when used, not on every CLI start
    import hashlib

    from trials.data.prepared import prepared_manifest, read_manifest
    from trials.errors import TrialInputError

    path = Path(os.path.expanduser(args.path))
    manifest_path = prepared_manifest(path) or path
    try:
        m = read_manifest(manifest_path, "path")
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    folder = Path(m.pop("_folder"))
    m.pop("_fingerprint")
    if args.verify:
        for split in ("train", "val"):
            h = hashlib.sha256()
            with open(folder / m[split]["file"], "rb") as fh:
                while block := fh.read(1 << 24):
                    h.update(block)
            if h.hexdigest() != m[split]["sha256"]:
                raise UserError(f"{folder / m[split]['file']}: its SHA-256 differs from the manifest's: the file was changed; prepare it again")
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        _print_manifest(folder, m, note="; hashes verified" if args.verify else "")
    return 0
