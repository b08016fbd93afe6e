"""`sweeper trial`: train one cell at one or several learning rates in the foreground.

    sweeper trial --method layerrope --depth 8 --width 64 --lr 1e-3 --lr 3e-2 --lr 3

The learning rates are trained side by side as one stacked model (same initial weights, same
batches), with a live progress bar (per-LR training loss, tokens/s, ETA), then a table of final
evaluation losses (± their standard error over the eval batches) and outcomes: `ok`, `diverged`,
or `stalled` when the final loss is not `divergence.stall_margin` nats below the loss of predicting
every token by its training frequency on the same eval batches (the header shows it, and the data's
unigram entropy). Defaults suit the built-in corpus (the interpreter's stdlib
sources, byte-level, vocab 256): sequences of 128 tokens, 8 per step, 200 steps, warmup 5% then
cosine to 10%, AdamW (0.9, 0.95), weight decay 0.1, clipping 1.0, evaluation every 50 steps on
4 held-out batches. Anything else: `--data KEY=VALUE`, `--train KEY=VALUE`, `--model KEY=VALUE`,
`--divergence KEY=VALUE` with the keys of the sweep YAML (`--train optimizer.weight_decay=0`).
Ctrl-C stops after the current step (with `--checkpoint-dir` a rerun resumes); a second Ctrl-C aborts.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import signal
import time
from typing import Any

from sweeper.commands.cliargs import add_format, add_overrides, add_wide
from sweeper.core.errors import UserError

DEFAULT_STEPS = 200
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH = 8
OVERRIDE_SECTIONS = ("train", "model", "data", "divergence")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trial",
        help="train one cell (method, depth, width) at one or several learning rates, in the foreground",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_overrides(p)  # SECTION.KEY=VALUE: the same syntax as launch's, for train., model., data., divergence.
    p.add_argument("--method", required=True, help="normalization scheme (see `sweeper models`)")
    p.add_argument("--depth", required=True, type=int, help="number of blocks L")
    p.add_argument("--width", type=int, default=64, help="model width d (default 64)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default: width / 32, at least 1)")
    p.add_argument("--lr", required=True, type=float, action="append", help="peak learning rate; repeat for several")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, help=f"optimizer steps (default {DEFAULT_STEPS})")
    budget.add_argument("--tokens", type=int, help="training tokens per learning rate")
    budget.add_argument("--tokens-per-param", type=float, help="training tokens per parameter (80 = 4x Chinchilla)")
    p.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN, help=f"tokens per sequence (default {DEFAULT_SEQ_LEN})")
    p.add_argument("--batch-size", "--batch", dest="batch", type=int, default=DEFAULT_BATCH, help=f"sequences per step (default {DEFAULT_BATCH})")
    p.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                   help="data setting, e.g. source=jsonl, path=corpus.jsonl, tokenizer=tok.json (default: the built-in corpus);"
                        " a bare word is the source")
    p.add_argument("--train", action="append", default=[], metavar="KEY=VALUE", help="training setting, e.g. eval_every=20")
    p.add_argument("--model", action="append", default=[], metavar="KEY=VALUE", help="model setting, e.g. init_std=0.01")
    p.add_argument("--divergence", action="append", default=[], metavar="KEY=VALUE", help="divergence setting, e.g. spike_patience=20")
    p.add_argument("--seed", type=int, default=0, help="cell seed: initial weights and data order (default 0)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--checkpoint-dir", help="checkpoint here and resume from here")
    p.add_argument("--out", "--export-dir", dest="export_dir", metavar="DIR",
                   help="write each LR's final weights here (<i>/model.safetensors + config.json)")
    add_format(p)
    add_wide(p)
    p.set_defaults(func=run)


# ---- argument parsing helpers (no torch) --------------------------------------------------------


def _parse_pairs(items: list[str], section: str, *, bare_key: str | None = None) -> dict[str, Any]:
    """`a=1`, `b.c=x` -> {"a": 1, "b": {"c": "x"}}; values read as YAML scalars."""
    # start-up time: imported when used, not on every CLI start
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            if bare_key is None:
                raise UserError(f"--{section} {item!r}: expected KEY=VALUE")
            key, raw = bare_key, item
        else:
            key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else None
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--{section} {item!r}: {part} is not a section")
        node[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _validation_error(section: str, exc: Any) -> UserError:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in (section, *err["loc"]))
        lines.append(f"{where}: {err['msg']}" + (f" (got {err['input']!r})" if "input" in err and err["type"] != "missing" else ""))
    return UserError(lines[0], details=lines[1:])


def build_configs(args: argparse.Namespace) -> tuple[dict[str, Any], Any, Any, Any]:
    """(model fields, TrainConfig, DataConfig, DivergenceConfig) from the arguments, without torch.

    `model fields["vocab"]` is 0 unless given: the data's vocabulary fills it in."""
    # start-up time: imported when used, not on every CLI start
    from pydantic import ValidationError

    from models.config import ModelConfig
    from models.registry import scheme_names
    from trials.config import DataConfig, DivergenceConfig, TrainConfig

    for override in getattr(args, "overrides", []):  # `train.eval_every=20` is `--train eval_every=20`
        section, dot, rest = override.partition(".")
        if not dot or section not in OVERRIDE_SECTIONS or "=" not in rest:
            raise UserError(f"override {override!r}: expected SECTION.KEY=VALUE with SECTION one of "
                            f"{', '.join(OVERRIDE_SECTIONS)} (e.g. train.eval_every=20)")
        getattr(args, section).append(rest)
    names = scheme_names()
    if args.method not in names:
        near = difflib.get_close_matches(args.method, names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UserError(f"--method {args.method!r}: unknown scheme{hint} (available: {', '.join(names)})")
    for flag, value in (("--depth", args.depth), ("--width", args.width), ("--seq-len", args.seq_len), ("--batch-size", args.batch)):
        if value < 1:
            raise UserError(f"{flag} {value}: must be >= 1")
    bad = [lr for lr in args.lr if not (math.isfinite(lr) and lr > 0)]
    if bad:
        raise UserError(f"--lr {bad[0]}: a learning rate must be a finite number > 0")
    if len(set(args.lr)) != len(args.lr):
        raise UserError("--lr: the same learning rate is given twice")
    heads = args.heads if args.heads is not None else max(1, args.width // 32)
    if args.width % heads or (args.width // heads) % 2:
        raise UserError(f"--heads {heads}: the width {args.width} must split into heads of an even size")

    train: dict[str, Any] = {"batch_size": args.batch, "eval_every": 50, "eval_batches": 4}
    if args.tokens is not None:
        train["tokens"] = args.tokens
    elif args.tokens_per_param is not None:
        train["tokens_per_param"] = args.tokens_per_param
    else:
        train["steps"] = args.steps if args.steps is not None else DEFAULT_STEPS
    if args.threads is not None:
        train["threads"] = args.threads
    train["device"] = args.device
    extra_train = _parse_pairs(args.train, "train")
    for budget_key in ("steps", "tokens", "tokens_per_param"):
        if budget_key in extra_train:
            train = {k: v for k, v in train.items() if k not in ("steps", "tokens", "tokens_per_param")}
    train = _merge(train, extra_train)
    if "steps" in train and "report_every" not in train:
        train["report_every"] = max(1, int(train["steps"]) // 100) if isinstance(train["steps"], int) else 10
    try:
        train_cfg = TrainConfig.model_validate(train)
    except ValidationError as exc:
        raise _validation_error("train", exc) from None
    try:
        data_cfg = DataConfig.model_validate(_parse_pairs(args.data, "data", bare_key="source"))
    except ValidationError as exc:
        raise _validation_error("data", exc) from None
    try:
        div_cfg = DivergenceConfig.model_validate(_parse_pairs(args.divergence, "divergence"))
    except ValidationError as exc:
        raise _validation_error("divergence", exc) from None
    model_fields = {"family": "llama", "scheme": args.method, "width": args.width, "depth": args.depth, "n_heads": heads,
                    "seq_len": args.seq_len, "vocab": 0}
    model_fields.update(_parse_pairs(args.model, "model"))
    known = set(ModelConfig.__dataclass_fields__)
    unknown = sorted(set(model_fields) - known)
    if unknown:
        raise UserError(f"--model {unknown[0]}: unknown key (allowed: {', '.join(sorted(known))})")
    return model_fields, train_cfg, data_cfg, div_cfg


# ---- the command --------------------------------------------------------------------------------


def _fmt_loss(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def run(args: argparse.Namespace) -> int:
    model_fields, train_cfg, data_cfg, div_cfg = build_configs(args)

    # start-up time: imported when used, not on every CLI start
    from models.config import ModelConfig
    from trials.data import open_source
    from trials.errors import TrialInputError
    from trials.spec import TrialSpec

    try:
        source = open_source(data_cfg)
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    if model_fields.get("vocab") in (0, None):
        model_fields["vocab"] = source.vocab
    try:
        model_cfg = ModelConfig(**model_fields)
        # start-up time: imported when used, not on every CLI start
        from models.llama import validate_llama_config

        validate_llama_config(model_cfg)
    except (TypeError, ValueError) as exc:
        raise UserError(f"--model: {exc}") from None
    spec = TrialSpec(model=model_cfg, train=train_cfg, data=data_cfg, divergence=div_cfg, lrs=list(args.lr), seed=args.seed)
    return _train(args, spec, source)


def _train(args: argparse.Namespace, spec: Any, source: Any) -> int:
    # start-up time: imported when used, not on every CLI start
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.text import Text

    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import make_console
    from trials.errors import TrialInputError
    from trials.train import Trial

    console = make_console(stderr=args.json)
    stop = {"requested": False}

    def on_sigint(signum: int, frame: Any) -> None:
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    started = time.perf_counter()
    try:
        try:
            trial = Trial(spec)
        except TrialInputError as exc:
            raise UserError(exc.message) from None
        k = spec.stack
        header = (
            f"{spec.model.scheme} L{spec.model.depth} d{spec.model.width}: {trial.params:,} params/member, "
            f"{k} LR{'s' if k > 1 else ''} stacked, {trial.steps} steps x {trial.tokens_per_step} tokens, "
            f"{'bf16' if trial.autocast is not None else 'fp32'} on {trial.device.type}"
        )
        if not args.json:
            console.print(header)
            console.print(Text.assemble(f"data: {source.description} ", (source.fingerprint, "dim")))
            if trial.unigram is not None:
                console.print(f"{trial.unigram.describe()}; a run is stalled unless its final eval loss is "
                              f"{spec.divergence.stall_margin:g} nats (divergence.stall_margin) below "
                              f"{trial.unigram_loss:.4f}, the frequency-only loss on the eval batches")
        progress = Progress(
            TextColumn("step", style="bold"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[losses]}"),
            TextColumn("{task.fields[speed]}"), TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(),
            console=console, disable=args.json, transient=False,
        )

        def report(r: Any) -> None:
            parts = []
            for m in r.members:
                label = f"{m.lr:.3g}"
                if m.state == "diverged":
                    parts.append(f"{label}: [red]diverged@{m.diverged_step}[/red]")
                else:
                    parts.append(f"{label}: {_fmt_loss(m.train_loss)}")
            speed = f"{r.tokens / r.train_seconds:,.0f} tok/s" if r.train_seconds > 0 else ""
            progress.update(task, completed=r.step, losses=" ".join(parts), speed=speed)

        with progress:
            task = progress.add_task("train", total=trial.steps, losses="", speed="")
            results = trial.run(
                report=report, checkpoint_dir=args.checkpoint_dir, export_dir=args.export_dir,
                should_stop=lambda: stop["requested"],
            )
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    finally:
        signal.signal(signal.SIGINT, previous)
    wall = time.perf_counter() - started
    seconds = results[0].train_seconds if results else 0.0
    tokens_per_s = trial.step * trial.tokens_per_step / seconds if seconds > 0 else 0.0

    if args.json:
        doc = {
            "spec": spec.to_dict(), "results": [r.to_dict() for r in results],
            "unigram_entropy": trial.unigram.to_dict() if trial.unigram is not None else None,
            "unigram_loss": trial.unigram_loss, "wall_seconds": wall,
            "train_seconds": seconds, "tokens_per_second": tokens_per_s, "stopped": trial.stopped,
        }
        print(json.dumps(doc, indent=2))
        return 130 if trial.stopped else 0

    table = Layout(None, [Col("lr", keep=True), Col("outcome", keep=True, justify="left"),
                          Col("final eval loss", keep=True), Col("init loss", priority=2), Col("steps", priority=2),
                          Col("note", priority=3, justify="left")])
    best = min((r.loss for r in results if r.loss is not None and r.outcome == "ok"), default=None)
    for r in results:
        style = {"ok": "green", "diverged": "red", "stalled": "magenta", "failed": "yellow"}[r.outcome]
        loss = _fmt_loss(r.loss) + (f" ± {r.loss_se:.4f}" if r.loss is not None and r.loss_se is not None else "")
        loss += " *" if r.outcome == "ok" and r.loss == best and len(results) > 1 else ""
        table.add_row(f"{r.lr:.4g}", Text(r.outcome, style=style), loss, _fmt_loss(r.init_loss), str(r.steps),
                      r.reason or "")
    print_layout(console, table, wide=args.wide)
    console.print(Text.assemble(
        f"{trial.step} steps, {trial.step * trial.tokens_per_step:,} tokens per LR in {seconds:.1f} s of training "
        f"({tokens_per_s:,.0f} tokens/s), {wall:.1f} s wall", ("  (stopped; rerun to resume)" if trial.stopped else "", "yellow")
    ))
    return 130 if trial.stopped else 0

