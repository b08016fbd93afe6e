"""Loading a sweep file: read the YAML, set the `KEY=VALUE` overrides, run every check, and return a
`Validated` config or raise one `UserError` naming every problem at once (`load_sweep`,
`validate_data`); warnings for extras this machine lacks."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweeper.core.errors import UserError
from sweeper.spec import overrides as overrides_
from sweeper.spec.overrides import Override
from sweeper.spec.schema.checks import (
    Sections,
    bools_for_numbers,
    cross_problems,
    data_problems,
    find_nonfinite,
    looks_local,
    partial_data,
    valid_sections,
)
from sweeper.spec.schema.messages import MissingFile, Problem, problems_from, relabel, show_value, user_error
from sweeper.spec.schema.sweep import SweepConfig
from sweeper.spec.yamlio import LoadedYaml, YamlProblem, load_file


@dataclass
class Validated:
    config: SweepConfig
    source: Path
    warnings: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # KEY=VALUE texts applied on top of the file
    document: Any = None  # the document validated: the file's, with the overrides set


# The module each tracker's extra installs (what `sweeper launch` warns about when it is missing).
TRACKER_MODULES = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}


def _warnings(cfg: SweepConfig) -> list[str]:
    out = []
    if cfg.data.source == "hf" or (cfg.data.tokenizer and not looks_local(cfg.data.tokenizer)):
        missing = [m for m in ("datasets", "tokenizers", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            out.append(
                f"data: needs the hf extra ({', '.join(missing)} not installed here): "
                "pip install 'layerrope-sweeper[hf]' on the machines that run trials"
            )
    for name in cfg.tracking.names():
        if importlib.util.find_spec(TRACKER_MODULES[name]) is None:
            out.append(f"tracking.{name}: needs the {name} extra ({TRACKER_MODULES[name]} not installed here): "
                       f"pip install 'layerrope-sweeper[{name}]' on the machine that runs `sweeper launch` "
                       "(without it the sweep runs and that tracker stays empty)")
    if cfg.ledger.startswith(("postgresql", "mysql")):
        driver = "psycopg2" if cfg.ledger.startswith("postgresql") else "pymysql"
        if importlib.util.find_spec(driver) is None:
            out.append(f"ledger: the {driver} driver is not installed here")
    return out


def validate_data(raw: Any, *, base: Path | None = None, lines: LoadedYaml | None = None) -> SweepConfig:
    """Validate a parsed sweep document; raises UserError with every problem at once."""
    return _validate(raw, base=base, lines=lines, need_data=True)[0]


def _validate(
    raw: Any, *, base: Path | None, lines: LoadedYaml | None, need_data: bool,
    overrides: list[Override] | None = None,
) -> tuple[SweepConfig, list[MissingFile]]:
    """The checks, and (when `need_data` is False) the data files found missing, set aside as warnings."""
    base = base or Path.cwd()
    problems: list[Problem] = []
    if raw is None:
        raise UserError("empty sweep; it needs at least `name`, `methods`, `model` and `train`")
    if not isinstance(raw, dict):
        raise UserError(f"the top level must be a mapping of keys (got a {type(raw).__name__})")
    bad_keys = [k for k in raw if not isinstance(k, str)]
    for k in bad_keys:
        problems.append(Problem((), f"keys must be text (got {show_value(k)})"))
    find_nonfinite(raw, (), problems)
    problems.extend(bools_for_numbers(raw))
    cfg: SweepConfig | None = None
    failed: set[str] = set()
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        seen = {p.path for p in problems}
        found = problems_from(exc, SweepConfig)
        problems.extend(p for p in found if p.path not in seen)
        failed = {str(p.path[0]) for p in found if p.path}
    sections = Sections(dict(cfg)) if cfg is not None else valid_sections(raw, failed)
    problems.extend(cross_problems(sections, base))
    if "data" in failed:  # a typo elsewhere in `data` must not hide a missing file until the next run
        partial = partial_data(raw.get("data"))
        if partial is not None:
            problems.extend(data_problems(partial, base))
    missing = [] if need_data else [p for p in problems if isinstance(p, MissingFile)]
    problems = [p for p in problems if p not in missing]
    if problems:
        if lines is not None:
            problems.sort(key=lambda p: lines.line_of(p.path) or 0)
        raise user_error(problems, lines, overrides=overrides)
    assert cfg is not None
    return cfg, missing


def load_sweep(path: str | os.PathLike[str], *, base: Path | None = None, need_data: bool = True,
               overrides: list[str] | tuple[str, ...] = ()) -> Validated:
    """Read, parse and validate a sweep file, with `KEY=VALUE` overrides set on top (`sweeper.spec.overrides`).

    `need_data=False` is for commands that never read the training data (launch --dry-run, replay,
    simulation, plots of a stored sweep): a data file missing on this machine is then a warning.
    """
    source = Path(path)
    label = str(path)
    try:
        loaded = load_file(source)
    except YamlProblem as exc:
        raise relabel(UserError(exc.message), label) from None
    given = overrides_.parse(list(overrides))
    document = overrides_.apply(loaded.data, given) if given else loaded.data
    try:
        cfg, missing = _validate(document, base=base, lines=loaded, need_data=need_data, overrides=given)
    except UserError as exc:
        raise relabel(exc, label) from None
    notes = [relabel(user_error([m], loaded, overrides=given), label).message + " (this command does not read the data)"
             for m in missing]
    return Validated(cfg, source, notes + _warnings(cfg), overrides=[o.text for o in given], document=document)
