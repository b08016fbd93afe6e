"""Replay recorded LR grids through a sweep's own LR policy: how many runs it needs, and what it finds.

A *recorded table* holds final losses of real runs, several learning rates per group (for
StepLaw: one group per (N, D, batch size), up to 12 LRs on a √2 grid). Each group's lowest
loss is the exhaustive-search optimum. A *replay* starts a cell at a centre shifted by
`k` grid steps (of the table's own ratio) from that optimum and lets `decide` (the same
code the driver runs, with the sweep's bounds and caps) choose learning rates until the
cell is done. A proposed LR reads the recorded loss of the recorded LR within a relative
`tolerance`; an LR the table does not hold is a `failed` point (it costs a run and tells
nothing). Every proposal of a round finishes before the next decision, as in the driver,
whose decisions never depend on the order trials finish in.

Groups whose recorded optimum is the lowest or highest recorded LR are skipped (and
counted): nothing in the table says where their optimum is. Regret is the relative excess
of the cell's best loss over the group's recorded best, in percent; StepLaw treats every
run within 0.25% of the best as optimal (the near-optimal band).

Pure logic (polars for the table; neither Ray nor torch).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.core.grid import CellDecision, GridPoint, LRPolicy
from sweeper.core.ids import canonical
from sweeper.core.errors import UserError
from sweeper.search.bracketing import decide, initial_grid
from sweeper.search.recorded import DEFAULT_TOLERANCE, RecordedGroup, RecordedTable

NEAR_OPTIMAL_BAND = 0.25  # percent (StepLaw, DeepSeek LLM)
MAX_STEP_ERROR = 0.05  # a recorded LR may sit this fraction of a grid step off the lattice
# Several runs of one group at one LR: `min` treats the group as one cell whose configurations the
# search may pick from (the best run per LR), `mean` as seed repeats, `error` refuses the table.
DUPLICATE_RULES = ("min", "mean", "error")
DEFAULT_DUPLICATES = "min"
# A run without a finite loss (not finished, or stored as NaN): `error` refuses the table, `drop` leaves the
# run out (counted): the search then reads that LR as unrecorded, as it would any LR the table lacks.
MISSING_RULES = ("error", "drop")


@dataclass(frozen=True)
class ReplayOutcome:
    """One replay of one group from one starting shift."""

    key: tuple[Any, ...]
    shift: int
    points: int  # every proposed LR, recorded or not (each would have cost a run)
    unrecorded: int  # proposed LRs the table does not hold (failed points)
    status: str
    best_lr: float | None
    best_loss: float | None
    regret: float | None  # percent above the group's recorded best (None: no `ok` point)
    floor: int | None = None  # the clairvoyant floor from the same first grid (`floor_points`), when asked
    rounds: int = 0  # batches of proposals, each waiting for the one before: the search's latency

    def within(self, band: float) -> bool:
        return self.regret is not None and self.regret <= band + 1e-9


@dataclass(frozen=True)
class ReplaySummary:
    """The figures of one policy over every replay."""

    groups: int
    skipped_edge: int
    replays: int
    points_mean: float
    points_max: int
    rounds_mean: float  # batches of proposals per replay (latency: each waits for the one before)
    bracketed_fraction: float
    regret_mean: float | None
    regret_max: float | None
    within_band_fraction: float
    no_result: int  # replays that ended without any `ok` point
    unrecorded_points: int
    band: float
    exhaustive_points_mean: float  # recorded LRs per replayed group: what exhaustive search cost
    floor_points_mean: float | None = None  # the clairvoyant floor per replay (`floor_points`), when asked
    by_shift: tuple[dict[str, Any], ...] = ()
    outcomes: tuple[ReplayOutcome, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups, "skipped_edge": self.skipped_edge, "replays": self.replays,
            "points_per_group_mean": self.points_mean, "points_per_group_max": self.points_max,
            "rounds_per_group_mean": self.rounds_mean,
            "bracketed_fraction": self.bracketed_fraction, "regret_mean": self.regret_mean,
            "regret_max": self.regret_max, "within_band_fraction": self.within_band_fraction, "band": self.band,
            "no_result": self.no_result, "unrecorded_points": self.unrecorded_points,
            "exhaustive_points_mean": self.exhaustive_points_mean,
            **({} if self.floor_points_mean is None else {"floor_points_mean": self.floor_points_mean}),
            "by_shift": list(self.by_shift),
        }


# -- the table ----------------------------------------------------------------------------------------


def load_table(
    path: str | Path,
    group_columns: Sequence[str],
    lr_column: str = "lr",
    loss_column: str = "loss",
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    duplicates: str = DEFAULT_DUPLICATES,
    missing_loss: str = "error",
    **rules: Any,
) -> RecordedTable:
    """Read and check a recorded table (CSV, or Parquet by its suffix: `read_frame`). Raises UserError
    with one line per problem. `rules`: `table_from_frame`'s keyword options."""
    label = str(path)
    return table_from_frame(read_frame(path), group_columns, lr_column, loss_column, source=label,
                            tolerance=tolerance, duplicates=duplicates, missing_loss=missing_loss, **rules)


PARQUET_SUFFIXES = (".parquet", ".pq")


def read_frame(path: str | Path) -> pl.DataFrame:
    """A table file as a frame: Parquet when its name ends in .parquet or .pq, else CSV (every row read
    before the column types are chosen). UserError (one line) when it is missing or does not read."""
    label = str(path)
    parquet = Path(path).suffix.lower() in PARQUET_SUFFIXES
    try:
        return pl.read_parquet(path) if parquet else pl.read_csv(path, infer_schema_length=None)
    except FileNotFoundError:
        raise UserError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{label}: a directory, not a table file") from None
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{label}: not a readable {'Parquet' if parquet else 'CSV'} table ({first})") from None


def table_from_frame(
    frame: pl.DataFrame,
    group_columns: Sequence[str],
    lr_column: str = "lr",
    loss_column: str = "loss",
    *,
    source: str = "table",
    tolerance: float = DEFAULT_TOLERANCE,
    duplicates: str = DEFAULT_DUPLICATES,
    missing_loss: str = "error",
    diverged: bool = False,
    diverged_above: float | None = None,
    require_grid: bool = True,
) -> RecordedTable:
    """Check a recorded table and split it into groups (see `load_table`).

    Several runs of one group at one learning rate (within `tolerance`) are resolved by
    `duplicates` (`DUPLICATE_RULES`): `min` keeps the lowest loss, `mean` averages them, `error`
    refuses the table, naming the columns that would tell the runs apart. Runs without a finite
    loss are refused, or left out and counted with `missing_loss="drop"` (`MISSING_RULES`).

    `diverged` (what `sweeper import` reads): a NaN or infinite loss is a diverged run instead, and so is
    a loss above `diverged_above`; both are kept as +inf, worse than any finite loss (`min` keeps a
    finite run over a diverged one, `mean` of runs one of which diverged is diverged). Only an empty
    loss is then missing. `require_grid=False` accepts learning rates off one geometric grid (the ratio
    is then the median step between neighbouring recorded LRs, 2 when no group holds two)."""
    if duplicates not in DUPLICATE_RULES:
        raise UserError(f"--duplicates {duplicates}: must be one of {', '.join(DUPLICATE_RULES)}")
    if missing_loss not in MISSING_RULES:
        raise UserError(f"--missing-loss {missing_loss}: must be one of {', '.join(MISSING_RULES)}")
    wanted = [*group_columns, lr_column, loss_column]
    missing = [c for c in dict.fromkeys(wanted) if c not in frame.columns]
    if missing:
        have = ", ".join(frame.columns[:20]) + (", ..." if len(frame.columns) > 20 else "")
        raise UserError(f"{source}: missing column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(missing)} (the table has: {have})")
    if not group_columns:
        raise UserError(f"{source}: name at least one group column (--group)")
    both = [c for c in (lr_column, loss_column) if c in group_columns]
    if both:
        raise UserError(f"{source}: --group {','.join(group_columns)}: {', '.join(both)} is the learning-rate or loss "
                        "column, not a group column")
    if frame.height == 0:
        raise UserError(f"{source}: the table has no rows")
    problems: list[str] = []
    lr = _numeric(frame, lr_column, source, problems)
    loss = _numeric(frame, loss_column, source, problems)
    if lr is not None:
        bad = [i for i, v in enumerate(lr) if v is None or not math.isfinite(v) or v <= 0]
        if bad:
            problems.append(f"{source}: column {lr_column}: {len(bad)} row{'s' if len(bad) > 1 else ''} with a missing, "
                            f"non-finite or non-positive learning rate (first: data row {bad[0] + 1}, value "
                            f"{_show(lr[bad[0]])}); learning rates must be positive")
    dropped: set[int] = set()
    if loss is not None and diverged:  # NaN, ±inf and losses above the threshold: diverged runs, kept as +inf
        loss = [v if v is None or (math.isfinite(v) and (diverged_above is None or v <= diverged_above))
                else math.inf for v in loss]
    unusable = (lambda v: v is None) if diverged else (lambda v: v is None or not math.isfinite(v))
    if loss is not None and missing_loss == "drop":
        dropped = {i for i, v in enumerate(loss) if unusable(v)}
    elif loss is not None:
        bad = [i for i, v in enumerate(loss) if unusable(v)]
        if bad:
            what = "an empty" if diverged else "a missing, NaN or infinite"
            problems.append(f"{source}: column {loss_column}: {len(bad)} row{'s' if len(bad) > 1 else ''} with "
                            f"{what} loss (first: data row {bad[0] + 1}, value {_show(loss[bad[0]])}); "
                            "drop those runs or record a finite loss")
    if problems:
        if len(problems) == 1:
            raise UserError(problems[0])
        raise UserError(f"{source}: {len(problems)} problems", details=problems)
    assert lr is not None and loss is not None
    keys = frame.select(list(group_columns)).rows()
    by_key: dict[tuple[Any, ...], list[tuple[float, float, int]]] = {}
    for i, key in enumerate(keys):
        if i in dropped:
            continue
        by_key.setdefault(tuple(key), []).append((float(lr[i]), float(loss[i]), i))  # type: ignore[arg-type]
    groups = []
    merged = 0
    for key, rows in by_key.items():
        rows.sort()
        runs: list[list[tuple[float, float, int]]] = []  # the runs at one learning rate
        for row in rows:
            if runs and math.log(row[0] / runs[-1][0][0]) <= math.log1p(tolerance):
                if duplicates == "error":
                    (a, _, i), (b, _, j) = runs[-1][0], row
                    raise UserError(_duplicate_message(frame, source, group_columns, key, lr_column, a, b, i, j))
                runs[-1].append(row)
                merged += 1
            else:
                runs.append([row])
        losses = [min(r[1] for r in same) if duplicates == "min" else statistics.fmean(r[1] for r in same)
                  for same in runs]
        groups.append(RecordedGroup(key=dict(zip(group_columns, key)), lrs=tuple(same[0][0] for same in runs),
                                    losses=tuple(losses)))
    if not groups:
        raise UserError(f"{source}: every run lacks a finite {loss_column}: nothing to replay")
    ratio = grid_ratio(groups, source=source) if require_grid else median_ratio(groups)
    return RecordedTable(source, tuple(group_columns), tuple(groups), ratio, frame.height, merged, len(dropped))


def _numeric(frame: pl.DataFrame, column: str, source: str, problems: list[str]) -> list[float | None] | None:
    series = frame[column]
    if series.dtype.is_numeric():
        return [None if v is None else float(v) for v in series.to_list()]
    cast = series.cast(pl.Float64, strict=False)
    bad = [i for i, (raw, v) in enumerate(zip(series.to_list(), cast.to_list())) if raw is not None and v is None]
    if bad:
        problems.append(f"{source}: column {column}: {len(bad)} row{'s' if len(bad) > 1 else ''} not a number "
                        f"(first: data row {bad[0] + 1}, value {series[bad[0]]!r})")
        return None
    return [None if v is None else float(v) for v in cast.to_list()]


def _show(value: float | None) -> str:
    return "empty" if value is None else f"{value:g}"


def _duplicate_message(frame: pl.DataFrame, source: str, group_columns: Sequence[str], key: tuple[Any, ...],
                       lr_column: str, a: float, b: float, i: int, j: int) -> str:
    named = ", ".join(f"{c}={v}" for c, v in zip(group_columns, key))
    same = f"lr {a:g}" if a == b else f"lr {a:g} and {b:g}"
    i, j = sorted((i, j))
    return (f"{source}: group {named} holds two runs at {same} (data rows {i + 1} and {j + 1}): the --group columns "
            f"must identify one run per learning rate{_separating_hint(frame, group_columns, lr_column)}")


def _separating_hint(frame: pl.DataFrame, group_columns: Sequence[str], lr_column: str) -> str:
    """Columns that, added to --group, leave one run per (group, lr): fewest distinct values first."""
    keys = [*group_columns, lr_column]
    found = []
    for column in frame.columns:
        if column in keys:
            continue
        if frame.select([*keys, column]).n_unique() == frame.height:
            found.append((frame[column].n_unique(), column))
    if not found:
        return ""
    named = ", ".join(c for _, c in sorted(found)[:5])
    return f" (adding one of these columns to --group would: {named})"


def grid_ratio(groups: Iterable[RecordedGroup], *, source: str = "table") -> float:
    """The ratio of the table's geometric LR grid: every step between neighbouring recorded LRs
    of a group is an integer power of it. Raises UserError when the LRs are not on such a grid."""
    steps = [math.log(b / a) for g in groups for a, b in zip(g.lrs, g.lrs[1:])]
    if not steps:
        raise UserError(f"{source}: no group holds two learning rates: nothing to replay")
    smallest = min(steps)
    base = statistics.median(s for s in steps if s < 1.5 * smallest)  # robust to rounded LRs
    multiples = [s / base for s in steps]
    worst = max(multiples, key=lambda m: abs(m - round(m)))
    if abs(worst - round(worst)) > MAX_STEP_ERROR:
        raise UserError(
            f"{source}: the learning rates are not on a geometric grid: a step of ×{math.exp(worst * base):.4g} "
            f"is not a whole power of the smallest step ×{math.exp(base):.4g}")
    whole = [round(m) for m in multiples]
    return math.exp(sum(steps) / sum(whole))  # the least-squares ratio through every step


def median_ratio(groups: Iterable[RecordedGroup]) -> float:
    """The median step between neighbouring recorded LRs of a group, on or off a geometric grid (2 when
    no group holds two learning rates)."""
    steps = [b / a for g in groups for a, b in zip(g.lrs, g.lrs[1:])]
    return float(statistics.median(steps)) if steps else 2.0


# -- replaying ----------------------------------------------------------------------------------------


def start_grid(policy: LRPolicy, centre: float) -> list[float]:
    """The first grid of a cell centred on `centre`, by the policy's own initial-grid logic.

    An explicit `grid` is moved as a whole so that its geometric centre sits on `centre`.
    """
    if policy.grid is None:
        return initial_grid(policy, center=centre)
    logs = [math.log(lr) for lr in policy.grid]
    move = centre / math.exp((min(logs) + max(logs)) / 2)
    moved = LRPolicy(**{**policy.__dict__, "grid": tuple(lr * move for lr in policy.grid)})
    return initial_grid(moved)


def floor_points(group: RecordedGroup, first: Sequence[float], *, band: float = NEAR_OPTIMAL_BAND,
                 tolerance: float = DEFAULT_TOLERANCE) -> int:
    """The fewest points any search starting from the grid `first` could use on this group, knowing the table:
    the first grid (every point counts, recorded or not) plus the fewest further recorded LRs after which the
    best point has a recorded neighbour on each side (so it is bracketed: the neighbours are worse) and lies
    within `band` percent of the group's recorded best. A lower bound for every policy that starts from this
    grid, whatever its rules (an unrecorded LR only costs); at most three further points, since the recorded
    best and its two neighbours always do."""
    gap = math.log1p(tolerance)
    have = {i for lr in first for i, rec in enumerate(group.lrs) if abs(math.log(lr / rec)) <= gap}
    rest = [i for i in range(len(group.lrs)) if i not in have]
    for extra in range(4):
        for chosen in itertools.combinations(rest, extra):
            tried = sorted(have.union(chosen))
            if len(tried) < 3:
                continue
            at = min(range(len(tried)), key=lambda j: (group.losses[tried[j]], group.lrs[tried[j]]))
            regret = 100.0 * (group.losses[tried[at]] - group.best_loss) / abs(group.best_loss)
            if 0 < at < len(tried) - 1 and regret <= band + 1e-9:
                return len(first) + extra
    raise ValueError("the recorded optimum is at the edge of its group: no bracket exists")  # replay skips those


def replay_group(
    group: RecordedGroup,
    policy: LRPolicy,
    centre: float,
    *,
    shift: int = 0,
    tolerance: float = DEFAULT_TOLERANCE,
    floor_band: float | None = None,
) -> ReplayOutcome:
    """Run one cell on a recorded group, starting from a grid around `centre` (and, with `floor_band`, the
    clairvoyant floor from the same grid for that band: `floor_points`)."""
    points: list[GridPoint] = []
    grid = start_grid(policy, centre)
    decision: CellDecision | None = None
    rounds = 0
    for _ in range(policy.max_points + 1):
        decision = decide(points, policy, initial=grid if not points else None)
        if decision.done or not decision.next_lrs:
            break
        rounds += 1
        for lr in decision.next_lrs:
            loss = group.loss_at(lr, tolerance)
            points.append(GridPoint(lr, "failed") if loss is None else GridPoint(lr, "ok", loss))
    assert decision is not None and decision.done, f"the cell did not finish: {decision}"
    best = decision.best
    regret = None
    if best is not None and best.objective is not None:
        regret = 100.0 * (best.objective - group.best_loss) / abs(group.best_loss)
    return ReplayOutcome(
        key=group.values, shift=shift, points=len(points), unrecorded=sum(p.state == "failed" for p in points),
        status=decision.status, best_lr=best.lr if best else None, best_loss=best.objective if best else None,
        regret=regret,
        floor=None if floor_band is None else floor_points(group, grid, band=floor_band, tolerance=tolerance),
        rounds=rounds,
    )


def replay(
    table: RecordedTable,
    policy: LRPolicy,
    shifts: Sequence[int],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    band: float = NEAR_OPTIMAL_BAND,
    floor: bool = False,
) -> ReplaySummary:
    """Replay every group whose recorded optimum is interior, once per starting shift (with `floor`, each
    replay's clairvoyant floor too: `floor_points`)."""
    usable = [g for g in table.groups if not g.optimum_on_edge]
    outcomes = [
        replay_group(g, policy, canonical(g.best_lr * table.ratio**k), shift=k, tolerance=tolerance,
                     floor_band=band if floor else None)
        for g in usable for k in shifts
    ]
    exhaustive = sum(len(g.lrs) for g in usable) / len(usable) if usable else 0.0
    return summarise(outcomes, groups=len(usable), skipped_edge=len(table.groups) - len(usable), band=band,
                     exhaustive_points_mean=exhaustive)


def combine(summaries: Sequence[ReplaySummary]) -> ReplaySummary:
    """The figures of several replays (one per table) pooled: every replay of every table counts once;
    the exhaustive cost is the mean over every replayed group."""
    groups = sum(s.groups for s in summaries)
    exhaustive = sum(s.exhaustive_points_mean * s.groups for s in summaries) / groups if groups else 0.0
    return summarise([o for s in summaries for o in s.outcomes], groups=groups,
                     skipped_edge=sum(s.skipped_edge for s in summaries),
                     band=summaries[0].band if summaries else NEAR_OPTIMAL_BAND, exhaustive_points_mean=exhaustive)


def summarise(outcomes: Sequence[ReplayOutcome], *, groups: int, skipped_edge: int,
              band: float = NEAR_OPTIMAL_BAND, exhaustive_points_mean: float = 0.0) -> ReplaySummary:
    n = len(outcomes)
    regrets = [o.regret for o in outcomes if o.regret is not None]
    floors = n > 0 and all(o.floor is not None for o in outcomes)
    by_shift = []
    for k in sorted({o.shift for o in outcomes}):
        mine = [o for o in outcomes if o.shift == k]
        by_shift.append({
            "shift": k, "replays": len(mine), "points_mean": sum(o.points for o in mine) / len(mine),
            "within_band_fraction": sum(o.within(band) for o in mine) / len(mine),
            "rounds_mean": sum(o.rounds for o in mine) / len(mine),
            **({"floor_points_mean": sum(o.floor or 0 for o in mine) / len(mine)} if floors else {}),
        })
    return ReplaySummary(
        groups=groups, skipped_edge=skipped_edge, replays=n,
        points_mean=sum(o.points for o in outcomes) / n if n else 0.0,
        points_max=max((o.points for o in outcomes), default=0),
        rounds_mean=sum(o.rounds for o in outcomes) / n if n else 0.0,
        bracketed_fraction=sum(o.status == "bracketed" for o in outcomes) / n if n else 0.0,
        regret_mean=sum(regrets) / len(regrets) if regrets else None,
        regret_max=max(regrets) if regrets else None,
        within_band_fraction=sum(o.within(band) for o in outcomes) / n if n else 0.0,
        no_result=n - len(regrets), unrecorded_points=sum(o.unrecorded for o in outcomes), band=band,
        exhaustive_points_mean=exhaustive_points_mean,
        floor_points_mean=sum(o.floor or 0 for o in outcomes) / n if floors else None,
        by_shift=tuple(by_shift), outcomes=tuple(outcomes),
    )
