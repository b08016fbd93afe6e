"""`sweeper fit DIR`: power-law fits of a sweep's results, printed and stored as DIR/fits.json.

Per method: loss against x with an irreducible term and its log-log slope, the optimal-LR
law with predictions at `--to` targets, the compute exponent and LR sensitivity; then the
methods ranked; for a sweep with `eval.tasks: [lambada]`, LAMBADA's perplexity by method and size
beside the loss (measured, no law; not in fits.json: `sweeper optima --format json` has it per cell). Every estimate carries a bootstrap 95% interval, and fits that should not
be trusted say why. See `sweeper.analysis.fits` for the statistics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.commands.cliargs import add_format, add_wide
from sweeper.core.errors import UserError

if TYPE_CHECKING:  # the document's types load with `run` (start-up time)
    from sweeper.analysis.fits.document import ComputeExponent, CurveSection, EstimateValue, FitsDocument


def _size_arg(text: str) -> str:
    """A --to value, checked as a size now; what it means waits for the axis (see `resolve_targets`)."""
    from sweeper.analysis.fits.units import parse_size  # (see `run`)

    try:
        parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def resolve_targets(texts: list[str], axis: str, n_def: str, results: Any) -> tuple[list[float], list[str]]:
    """The --to values on the fit's axis, and one note per named size resolved.

    On `params`, a named size (`1.3B`, `350M`) is that model's own parameter count under `--n`
    (the sweep's count when the sweep trained that size, else the named configuration's), not the
    number its name rounds to: the 1.3B model has 1.21e9 non-embedding parameters. On a depth or loop
    axis a size suffix is an error: `--to 1.3B` there would be 1.3e9 blocks."""
    from models.counting import count_params  # no torch: counts from the configuration
    from models.named import named_configs
    from sweeper.analysis.fits.units import format_size, parse_size

    named = named_configs()
    out: list[float] = []
    notes: list[str] = []
    for text in texts:
        value = parse_size(text)
        has_suffix = text.strip()[-1:].isalpha()
        if axis == "depth" and has_suffix:
            what, unit = ("loop count", "loops") if results.loops_axis else ("block count", "blocks")
            raise UserError(f"--to {text}: a size suffix on a {'loop-count' if results.loops_axis else 'depth'} axis "
                            f"(that would be {value:.3g} {unit}); give a {what}, e.g. --to 1024, or fit on --x params")
        if axis == "params" and text.strip() in named:
            sweep_n = [s.scale.n_value(n_def) for s in results.sizes if s.size == text.strip()]
            if sweep_n and sweep_n[0]:
                n, where = sweep_n[0], "as the sweep trained it"
            else:
                counts = count_params(named[text.strip()])
                n, where = float(counts["nonembed" if n_def == "nonembed" else "total"]), "the named configuration"
            kind = "non-embedding" if n_def == "nonembed" else "total"
            notes.append(f"--to {text}: the {text.strip()} model's own N = {format_size(n)} ({n:.4g}) {kind} "
                         f"parameters ({where})")
            value = n
        out.append(value)
    return out, notes


def replaced_note(old: FitsDocument | None, new: FitsDocument) -> str | None:
    """What a rerun replaces in fits.json (targets, axis, options), or None when nothing the reader sees changes."""
    if old is None:
        return None
    from sweeper.analysis.fits.units import format_size  # (see `run`)

    changes = []
    if old.x != new.x:
        changes.append(f"x: {old.x} → {new.x}")
    if old.targets != new.targets:
        def show(ts: list[float]) -> str:
            return ", ".join(format_size(t) for t in ts) or "none"

        changes.append(f"targets: {show(old.targets)} → {show(new.targets)}")
    old_options, new_options = old.options.to_json(), new.options.to_json()  # every option, named or not
    for key in sorted(set(old_options) | set(new_options)):
        a, b = old_options.get(key), new_options.get(key)
        if a != b:
            changes.append(f"{key}: {a} → {b}")
    if old.e_model != new.e_model:
        changes.append(f"E: {old.e_model} → {new.e_model}")
    if old.inputs.lr_source != new.inputs.lr_source:
        changes.append(f"lr_source: {old.inputs.lr_source} → {new.inputs.lr_source}")
    return "; ".join(changes) if changes else None


def _resamples_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 200 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"{value}: use 200 to 100000 resamples (percentile intervals need a few hundred)")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fit",
        help="power-law fits with bootstrap intervals: loss vs scale, optimal LR vs size, compute exponents",
        description=(
            "Fit L = E + A·x^(-α) per method (α scan + non-negative least squares), the log-log slope, the "
            "optimal-LR power law and the compute exponent, each with bootstrap 95% intervals; a leave-largest-out "
            "check; LR sensitivity per method and size. Writes DIR/fits.json for the dashboards."
        ),
    )
    parser.add_argument("dir", help="the sweep directory (what `sweeper launch` wrote)")
    parser.add_argument("--x", choices=["depth", "params", "compute"], default=None,
                        help="the scale axis (default: the sweep's own: depth for a depth sweep, params for named sizes or a "
                             "width sweep, where depth does not vary and is refused)")
    parser.add_argument("--to", type=_size_arg, nargs="+", default=[], metavar="VALUE",
                        help="predict loss and optimal LR at these x values (1024, 350M, 1.3B, 2e9)")
    parser.add_argument("--n", dest="n_def", choices=["nonembed", "total"], default=None,
                        help="parameter count N for --x params and for 6ND compute (default: nonembed; an imported "
                             "sweep's x is its table's size column, read as total)")
    parser.add_argument("--compute", dest="c_def", choices=["flops", "6nd"], default="flops",
                        help="compute C: flops = flops_per_token × tokens (6·N_matmul + attention; default), "
                             "6nd = 6·N·D")
    parser.add_argument("--include-edge", action="store_true",
                        help="also fit cells whose best LR is at the edge of their grid (excluded by default)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="also fit sizes whose seeds did not all give a usable optimum (partial sizes, left out by "
                             "default), on their surviving seeds' mean")
    parser.add_argument("--unweighted", action="store_true",
                        help="every size counts alike in the loss fits (default: weighted by 1/SE² of its mean, "
                             "from the seeds' spread where a size has two or more)")
    parser.add_argument("--lr-source", choices=["interp", "grid"], default="interp",
                        help="optimal LR per cell: the interpolated optimum (default) or the grid best")
    parser.add_argument("--shared-e", action="store_true",
                        help="fit one irreducible loss E shared by every method (E and α trade off with few points)")
    parser.add_argument("--bootstrap", choices=["residual", "residual-raw", "cases"], default="residual",
                        help="resampling scheme (default residual: small-sample calibrated residual bootstrap)")
    parser.add_argument("--resamples", type=_resamples_arg, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap random seed (default 0: reproducible)")
    parser.add_argument("--lr-law", default=None, metavar="X1,X2",
                        help="also fit the optimal LR in two variables, log LR* = c + a·log X1 + b·log X2, with "
                             "bootstrap 95%% intervals on both exponents (cells resampled): on an import, two of its "
                             "group columns (e.g. N,D); on a trained sweep N (parameters) and D (tokens per point). "
                             "Refused when the two cannot be separated (e.g. a ladder at fixed tokens per parameter)")
    parser.add_argument("--holdout", choices=["largest"], default=None,
                        help="leave each method's largest size out, predict its optimal LR and loss from the smaller "
                             "ones with 95%% prediction intervals, and say whether the recorded values fall inside")
    add_format(parser)
    add_wide(parser)
    parser.add_argument("--no-write", action="store_true", help="do not write DIR/fits.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.analysis.fits.collect import collect
    from sweeper.analysis.fits.document import FITS, load_fits, write_fits
    from sweeper.analysis.fits.report import FitOptions, build_report

    started = time.perf_counter()
    root = Path(args.dir)
    results = collect(root, include_edge=args.include_edge, lr_source=args.lr_source,
                      allow_partial=args.allow_partial)
    args.n_def = args.n_def or imported_n_def(root)
    axis = args.x or results.default_x
    targets, notes = resolve_targets(args.to, axis, args.n_def, results)
    for note in notes:
        sys.stderr.write(f"{note}\n")
    opts = FitOptions(
        x=axis, n_def=args.n_def, c_def=args.c_def, targets=tuple(targets), resamples=args.resamples,
        seed=args.seed, scheme=args.bootstrap, include_edge=args.include_edge, lr_source=args.lr_source,
        shared_e=args.shared_e, allow_partial=args.allow_partial, weighted=not args.unweighted,
    )
    if axis == "depth" and not any(s.scale.depth for s in results.sizes):
        raise UserError(f"{root}: no depth recorded for the sweep's sizes; use --x params or --x compute")
    depths = {s.scale.depth for s in results.sizes}
    if axis == "depth" and len(depths) == 1 and len({s.size for s in results.sizes}) > 1 and not results.loops_axis:
        raise UserError(f"{root}: --x depth: every size of this sweep has {depths.pop()} blocks (its sizes differ in "
                        "width, not depth); fit on --x params or --x compute")
    doc = build_report(results, opts)
    add_laws(doc, args, root, results, axis)
    doc.elapsed_s = time.perf_counter() - started
    if not args.no_write:
        try:
            previous = load_fits(root)
        except UserError:
            previous = None  # an unreadable fits.json is simply replaced
        change = replaced_note(previous, doc)
        if change:  # the dashboards draw what fits.json holds: say what they will stop showing
            sys.stderr.write(f"replacing {root / FITS} ({change})\n")
        write_fits(root, doc)
    if args.json:
        json.dump(doc.to_json(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    render(doc, written=None if args.no_write else root / FITS, lr_label=lr_label_of(root), wide=args.wide)
    render_lambada(root, wide=args.wide)
    render_laws(doc, wide=args.wide)
    return 0


def add_laws(doc: FitsDocument, args: argparse.Namespace, root: Path, results: Any, axis: str) -> None:
    """`--lr-law` and `--holdout`: their sections of fits.json (`sweeper.analysis.fits.laws`)."""
    if args.lr_law is None and args.holdout is None:
        return
    from sweeper.analysis.fits.laws import holdout_section, law_holdout, lr_law_section, parse_law_names  # (see `run`)

    names = parse_law_names(args.lr_law) if args.lr_law is not None else None
    if names is not None:
        doc.lr_law = lr_law_section(root, results, names, n_def=args.n_def, resamples=args.resamples, seed=args.seed,
                                    lr_source=args.lr_source)
        if doc.lr_law.refused:
            raise UserError(f"{root}: --lr-law {args.lr_law}: {doc.lr_law.refused}")
    if args.holdout is not None:
        doc.holdout = holdout_section(results, axis, args.n_def, args.c_def, resamples=args.resamples,  # type: ignore[arg-type]
                                      seed=args.seed)
        if names is not None:
            doc.holdout.rows = doc.holdout.rows + law_holdout(root, results, names, n_def=args.n_def, resamples=args.resamples,
                                            seed=args.seed)


def render_laws(doc: FitsDocument, wide: bool = False) -> None:
    """The two-variable LR law and the leave-largest-out forecasts, when asked for (tables fitted to the terminal)."""
    from sweeper.records.layout import Col, Layout, print_layout  # (see `run`)
    from sweeper.records.table import make_console

    console = make_console()
    law = doc.lr_law
    if law is not None:
        table = Layout(f"Optimal LR in two variables: log LR* = c + a·log {' + b·log '.join(law.exponents)} "
                       f"(bootstrap: {law.bootstrap}, 95% intervals)", [
                           Col("over", keep=True, justify="left"), Col("cells", priority=2), Col("rows", priority=3),
                           *(Col(f"exponent of {n}", keep=True) for n in law.exponents), Col("c", priority=2),
                           Col("resid. sd (log)", priority=3, short="resid sd")])
        for fit in (law, law.near_optimal):
            if fit is None:
                continue
            table.add_row(str(fit.over), _g(fit.n_cells), _g(fit.n_rows),
                          *(f"{e.value:.3f} [{_g(e.ci[0], '.3f')}, {_g(e.ci[1], '.3f')}]" for e in fit.exponents.values()),
                          f"{fit.intercept:.3f}", _g(fit.residual_sd, ".3f"))
        print_layout(console, table, wide=wide)
        console.print(f"{law.choice}; variables: " + "; ".join(f"{n} = {w}" for n, w in law.variables.items()),
                      highlight=False, style="dim")
        for warning in law.warnings + (law.near_optimal.warnings if law.near_optimal else []):
            console.print(f"lr law: {warning}", highlight=False)
    hold = doc.holdout
    if hold is not None:
        table = Layout(f"Leave-largest-out forecasts ({hold.interval})", [
            Col("method", keep=True, justify="left"), Col("held out", keep=True, justify="left"),
            Col("from", priority=2), Col("optimal LR: predicted [95% PI] vs recorded", keep=True, justify="left",
                                         short="LR: predicted [PI] vs recorded"),
            Col("loss: predicted [95% PI] vs recorded", keep=True, justify="left",
                short="loss: predicted [PI] vs recorded")])
        for row in hold.rows:
            table.add_row(row.method, str(row.size), str(len(row.fitted_sizes)), _forecast(row.lr, ".3g"),
                          _forecast(row.loss, ".4f"))
        print_layout(console, table, wide=wide)
        for method, why in hold.skipped.items():
            console.print(f"holdout: {method}: {why}", highlight=False, style="dim")


def _forecast(value: Any, spec: str) -> str:
    if value is None or value.predicted is None:
        return "—"
    band = f" [{format(value.lo, spec)}, {format(value.hi, spec)}]" if value.lo is not None else " (no interval)"
    verdict = "" if value.inside is None else " inside" if value.inside else " OUTSIDE"
    return f"{format(value.predicted, spec)}{band} vs {format(value.recorded, spec)}{verdict}"


def imported_n_def(root: Path) -> str:
    """'total' for an imported sweep (its cells' params are the table's size column, as recorded), else 'nonembed'.
    Says so on stderr: an import's x is whatever column `sweeper import --size-column` chose."""
    from sweeper.records.manifest import read_manifest  # (see `run`)

    manifest = read_manifest(root)
    if not manifest.is_imported:
        return "nonembed"
    column = manifest.imported.size_column  # type: ignore[union-attr]
    if column is None:
        raise UserError(f"{root}: imported sweep without a size column (no group column of "
                        f"{manifest.imported.source} holds sizes): nothing to fit against; import it again with "  # type: ignore[union-attr]
                        "--size-column naming a numeric group column")
    sys.stderr.write(f"imported sweep: x = the table's size column {column!r} as recorded ({manifest.imported_label})\n")
    return "total"


def lr_label_of(root: Path) -> tuple[str, str | None] | None:
    """The LR axis of a Muon sweep ('Muon LR (AdamW = r × lr)' and the ratio by size), from the manifest's cells;
    None for AdamW."""
    from sweeper.records.manifest import read_manifest  # (see `run`)
    from sweeper.spec.lr_axis import lr_axis

    cells = read_manifest(root).cells.values()
    axis = lr_axis((str(c.size), (c.compat.get("train") or {}).get("optimizer") or {}) for c in cells)
    return None if axis is None else (axis.label, axis.note)


def render_lambada(root: Path, wide: bool = False) -> None:
    """LAMBADA perplexity by method and size beside the loss (a sweep with `eval.tasks: [lambada]`), read from
    the store's points: no power law, the measured numbers of each cell's best point."""
    # start-up time: imported when used, not on every CLI start
    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.results import lambada_by_size
    from sweeper.records.table import make_console

    rows = lambada_by_size(root)
    if not rows:
        return
    sizes = list(dict.fromkeys(r["size"] for r in sorted(rows, key=lambda r: (r["params"] or 0, r["size"]))))
    table = Layout("LAMBADA perplexity by size (last word; the best point of each cell, geometric mean over "
                   "seeds) · loss", [Col("method", keep=True, justify="left"), *(Col(size, keep=True) for size in sizes)])
    by = {(r["method"], r["size"]): r for r in rows}
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for size in sizes:
            r = by.get((method, size))
            cells.append("—" if r is None else f"{r['lambada_ppl']:.4g} · {r['loss']:.4f}"
                         + (f" ({seeds(len(r['seeds']))})" if len(r["seeds"]) > 1 else ""))
        table.add_row(method, *cells)
    print_layout(make_console(), table, wide=wide)


def seeds(n: int) -> str:
    """'1 seed', '3 seeds'."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _g(v: Any, spec: str = ".4g") -> str:
    return "—" if v is None else format(v, spec)


def _iv(est: EstimateValue | None, spec: str = ".4g") -> str:
    """'3.21 [3.18, 3.24]', or the value alone when there is no interval."""
    return (est.text(spec) if est is not None else None) or "—"


def _same_recipe(doc: FitsDocument) -> bool:
    """Every ranked method at its optimum, or every one at the same fixed recipe."""
    return len({str(r.recipe.to_json() if r.recipe is not None else None) for r in doc.ranking}) <= 1


def _exponent_cell(ce: ComputeExponent | None) -> Any:
    # start-up time: imported when used, not on every CLI start
    from rich.text import Text

    if ce is None:
        return "—"
    if ce.trustworthy:
        return _iv(ce, ".3g")
    return Text(_iv(ce, ".3g") + " (not trustworthy)", style="dim")


def _rank_exponent(doc: FitsDocument, row: Any) -> ComputeExponent | None:
    """The ranking's α_C of a method: the shared-E one the row holds (the default), else the method's own."""
    from sweeper.analysis.fits.document import ComputeExponent  # (see `run`)

    if row.compute_exponent_e_model == "shared" and row.compute_exponent is not None:
        return ComputeExponent(value=row.compute_exponent, lo=row.compute_exponent_lo, hi=row.compute_exponent_hi,
                               trustworthy=row.compute_exponent_trustworthy, e_model="shared")
    return doc.methods[row.method].compute_exponent


def _trust(section: CurveSection | None) -> Any:
    # start-up time: imported when used, not on every CLI start
    from rich.text import Text

    if section is None:
        return Text("—", style="dim")
    return Text("yes", style="green") if section.trustworthy else Text("NO", style="bold red")


def _points_table(doc: FitsDocument, x_name: str) -> Any:
    """The fitted points: per (method, size) the mean over seeds, the seeds' spread and the SEs."""
    # start-up time: imported when used, not on every CLI start
    from sweeper.analysis.fits.units import format_size
    from sweeper.records.layout import Col, Layout

    failed = doc.inputs.failed
    caption = None
    if failed:
        by: dict[tuple[str, str], list[str]] = {}
        for cell in failed:
            by.setdefault((cell.method, cell.size), []).append(f"s{cell.seed} {cell.status}")
        caption = "no usable learning rate (every point diverged or stalled): " + "; ".join(
            f"{m} {size} ({', '.join(v)})" for (m, size), v in sorted(by.items()))
    table = Layout("Fitted points: best loss, mean over seeds", [
        Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"), Col(x_name, priority=2),
        Col("loss", keep=True), Col("seeds", priority=2), Col("seeds' spread (sd)", priority=3, short="sd"),
        Col("SE of the mean", priority=3, short="SE"), Col("eval SE", priority=4),
        Col("per seed (± eval SE)", priority=5, justify="left", short="per seed"),
    ], caption=caption)
    for method, m in doc.methods.items():
        for row in m.sizes:
            per_seed = []
            for value, se in zip(row.loss_seeds, row.loss_se_seeds or [None] * len(row.loss_seeds)):
                per_seed.append(f"{value:.4f}" + (f" ± {se:.4f}" if se is not None else ""))
            size = row.size + (" (partial)" if row.partial else "")
            table.add_row(method, size, format_size(row.x) if row.x else "—", f"{row.loss:.4f}",
                          str(len(row.seeds)), _g(row.loss_sd, ".4f"), _g(row.loss_se, ".4f"),
                          _g(row.loss_eval_se, ".4f"), ", ".join(per_seed) + _missing_text(row.missing_seeds))
    _add_unfitted_partial_rows(table, doc)
    return table


def _missing_text(missing: Any) -> str:
    """'; s1 stalled' for each seed of a partial size with no usable optimum."""
    return "".join(f"; s{int(m.seed)} {m.status}" for m in missing)


def _add_unfitted_partial_rows(table: Any, doc: FitsDocument) -> None:
    """Partial sizes left out of the fits (no --allow-partial): rows marked "(partial, not fitted)", with their surviving seeds."""
    from sweeper.analysis.fits.units import format_size  # (see `run`)

    for p in doc.inputs.partial:
        if p.fitted:
            continue
        per_seed = ", ".join(f"{v:.4f}" for v in p.loss_seeds if v is not None)
        table.add_row(p.method, f"{p.size} (partial, not fitted)", format_size(p.x) if p.x else "—",
                      _g(p.loss, ".4f"), str(len(p.seeds)), "", "", "", per_seed + _missing_text(p.missing_seeds))
    if any(not p.fitted for p in doc.inputs.partial):
        note = ("partial: some seed of the size gave no usable optimum; the surviving seeds' mean is not the size's, "
                "so it is left out of the fits (--allow-partial fits it)")
        table.caption = note if not table.caption else f"{table.caption}\n{note}"


def _lr_trust(doc: FitsDocument, method: str) -> Any:
    """The LR law's trust, and how many of its points fell back to the grid best where the interpolated optimum
    was asked for (a neighbour diverged or stalled, or the cell's best is at an edge)."""
    from rich.text import Text  # (see `_trust`)

    m = doc.methods[method]
    trust = _trust(m.lr_fit)
    sources = [src for row in m.sizes for src in row.lr_source]
    grid = sum(src == "grid" for src in sources)
    if doc.inputs.lr_source == "interp" and grid:
        return Text.assemble(trust, f" (grid LR at {grid} of {len(sources)})")
    return trust


def _prediction_trust(loss: CurveSection | None, lr: CurveSection | None) -> Any:
    """'yes', or 'NO: loss fit, LR law' naming the fits behind a prediction that are not to be trusted (their
    reasons are printed below the tables)."""
    from rich.text import Text  # (see `_trust`)

    doubtful = [name for name, section in (("loss fit", loss), ("LR law", lr))
                if section is not None and not section.trustworthy]
    if not doubtful:
        return Text("yes", style="green")
    return Text(f"NO: {', '.join(doubtful)}", style="bold red")


def render(doc: FitsDocument, written: Path | None, lr_label: tuple[str, str | None] | None = None,
           wide: bool = False) -> None:
    """The fits as tables fitted to the terminal: loss fits, predictions, LR laws, ranking, sensitivity, then
    every warning. `lr_label`: what a point's LR is when it is not plainly the LR (Muon), and the ratio's note."""
    # start-up time: imported when used, not on every CLI start
    from rich.text import Text

    from sweeper.analysis.fits.report import LOOPS_LABEL
    from sweeper.analysis.fits.units import format_size
    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import labelled, make_console

    console = make_console()
    x_name = "loop count" if doc.x_label == LOOPS_LABEL else str(doc.x)  # a loop-count sweep fits on `depth` = T
    console.print(Text.assemble((str(doc.sweep), "bold"),
                                f": fits against {doc.x_label} · {doc.e_model} E · "
                                f"{doc.options.resamples} bootstrap resamples ({doc.options.bootstrap}) for E, A, "
                                "α and the held-out check, 95% intervals"))
    console.print(doc.inputs.rule, style="dim")
    if x_name == "params" or doc.methods:
        console.print(doc.n_definition, style="dim")
    console.print(doc.c_definition, style="dim")
    if doc.inputs.excluded:
        reasons: dict[str, int] = {}
        for item in doc.inputs.excluded:
            key = item.reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        console.print("excluded cells: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())), style="dim")

    loss = Layout(f"Loss vs {x_name}: L = E + A·x^(-α)", [
        Col("method", keep=True, justify="left"), Col("n", priority=2), Col("E", keep=True), Col("A", priority=4),
        Col("α", keep=True), Col("log-log slope", priority=3, short="slope"),
        Col(f"held-out {x_name}: predicted vs actual", priority=3, short="held-out"), Col("trust", keep=True),
    ])
    for method, m in doc.methods.items():
        lf = m.loss_fit
        ho = lf.holdout
        held = "—"
        if ho is not None:
            held = (f"{format_size(ho.x)}: {ho.predicted:.4g} [{_g(ho.lo)}, {_g(ho.hi)}] vs "
                    f"{ho.actual:.4g} ({ho.rel_error:+.2%})")
        loss.add_row(method, str(lf.n_points), _iv(lf.E), _iv(lf.A), _iv(lf.alpha, ".3g"),
                     _iv(lf.loglog_slope, ".3g"), held, _trust(lf))
    print_layout(console, loss, wide=wide)
    print_layout(console, _points_table(doc, x_name), wide=wide)

    lr_name = lr_label[0] if lr_label else "LR"
    lr = Layout(f"Optimal {lr_name} vs {x_name}: LR* = c·x^b (intervals: calibrated residual bootstrap of the "
                "log-log fit, whatever --bootstrap says)", [
                    Col("method", keep=True, justify="left"), Col("n", priority=2), Col("exponent b", keep=True),
                    Col("c", priority=3), Col("trust", keep=True)],
                caption=lr_label[1] if lr_label and lr_label[1] else None)
    for method, m in doc.methods.items():
        law = m.lr_fit
        if law is None:  # a fixed recipe: no optimum was searched
            lrs = ", ".join(f"{v:.3g}" for v in m.recipe.lrs)
            lr.add_row(method, "—", f"fixed recipe (lr {lrs}): no LR law", "", "")
            continue
        lr.add_row(method, str(law.n_points), _iv(law.exponent, ".3g"), _iv(law.coef, ".3g"), _lr_trust(doc, method))
    print_layout(console, lr, wide=wide)
    if doc.inputs.lr_source == "interp" and any(src == "grid" for m in doc.methods.values() for row in m.sizes
                                                for src in row.lr_source):
        console.print("grid LR at k of n: where a cell had no interpolated optimum (not bracketed, or a neighbour "
                      "of its best diverged or stalled), its grid best is the law's point", style="dim")

    if doc.targets:
        pred = Layout("Predictions at the --to targets", [
            Col("method", keep=True, justify="left"), Col(x_name, keep=True),
            Col("loss, E + A·x^(-α)", keep=True, short="loss"), Col("loss, pure power law", priority=3,
                                                                     short="power law"),
            Col("optimal LR", keep=True), Col("trust", keep=True, justify="left")],
            caption="trust NO: the fit behind the prediction is not to be trusted; its warnings are below")
        for method, m in doc.methods.items():
            losses = {t.x: t for t in m.loss_fit.targets}
            plain = {t.x: t for t in (m.loss_fit.loglog.targets if m.loss_fit.loglog is not None else [])}
            lrs = {t.x: t for t in (m.lr_fit.targets if m.lr_fit is not None else [])}
            for target in doc.targets:
                lt, pt, rt = losses.get(target), plain.get(target), lrs.get(target)
                pred.add_row(
                    method, format_size(target),
                    _iv(lt.estimate) if lt else "— (no fit)",
                    _iv(pt.estimate) if pt else "— (no fit)",
                    _iv(rt.estimate, ".3g") if rt else "— (no LR law)",
                    _prediction_trust(m.loss_fit if lt else None, m.lr_fit if rt else None),
                )
        print_layout(console, pred, wide=wide)

    if doc.ranking:
        shared = any(r.compute_exponent_e_model == "shared" for r in doc.ranking)
        rank = Layout("Methods ranked by loss at the largest common size", [
            Col("#", keep=True), Col("method", keep=True, justify="left"), Col("loss", keep=True),
            Col("at", priority=2), Col("compute exponent α_C" + (" (shared E)" if shared else ""), priority=3, short="α_C"),
            Col("lowest at every size", priority=2, short="lowest everywhere")],
            caption=doc.ranking_note if shared and doc.ranking_note else None)
        for r in doc.ranking:
            ce = _rank_exponent(doc, r)
            rank.add_row(str(r.rank), r.method, f"{r.loss_at_largest:.4f}",
                         format_size(r.x_at_largest) + ("" if r.comparable else " (own largest)"
                                                        if r.recipe is None or _same_recipe(doc) else
                                                        " (other recipe: not comparable)"),
                         _exponent_cell(ce), "yes" if r.lowest_at_every_common_size else "no")
        print_layout(console, rank, wide=wide)

    sens = Layout("LR sensitivity (Wortsman: mean capped loss over swept LRs − best) and near-optimal LRs (≤0.25%); "
                  "points summed over seeds", [
                      Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"),
                      Col("seeds", priority=3), Col("sensitivity", keep=True), Col("on common LRs", priority=3,
                                                                                    short="common"),
                      Col("near-optimal LR range", priority=2, short="near-opt LRs"),
                      Col("distinct LRs", priority=2, short="LRs"), Col("points", priority=2, short="pts"),
                      Col("diverged", priority=2, short="div"), Col("stalled", priority=2, short="stall")])
    for method, m in doc.methods.items():
        for row in m.sensitivity:
            near = "—"
            if row.near_opt_lo is not None:
                near = f"{row.near_opt_lo:.3g} – {row.near_opt_hi:.3g}" + (" (edge)" if row.near_opt_at_edge else "")
            sens.add_row(method, row.size, str(len(row.seeds)), _g(row.value), _g(row.value_common), near,
                         _g(row.n_distinct_lrs, "d"), str(row.n_lrs), str(row.n_diverged), _g(row.n_stalled, "d"))
    print_layout(console, sens, wide=wide)

    for warning in doc.warnings:
        console.print(labelled("warning:", warning))
    for method, m in doc.methods.items():
        for label, section in (("loss fit", m.loss_fit), ("lr fit", m.lr_fit), ("compute fit", m.compute_fit)):
            for warning in section.warnings if section is not None else []:
                console.print(labelled(f"{method} {label}:", warning))
    tail = f"fitted in {doc.elapsed_s:.2f} s"
    if written:
        tail += f"; wrote {written}"
    console.print(tail, style="dim")
