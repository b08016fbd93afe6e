"""From a validated sweep file to the list of cells: one per (method, size, seed).

A `Cell` carries everything one Tune trial of it needs (model, training, data and divergence
settings, its LR policy and Ray resources) plus what the reports need (parameter counts,
FLOPs per token, the planned tokens per point) and its *compatibility fingerprint*: the
settings that make two results comparable. A relaunch may add cells, but a cell whose
fingerprint changed would mix incompatible results, so the driver refuses it.

No torch and no Ray here (parameter counts come from `models.counting`, which reads
the configuration only).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from models.config import ModelConfig
from models.counting import count_params, flops_per_token
from models.family import get_family
from sweeper.core.errors import UserError
from sweeper.core.grid import LRPolicy
from sweeper.core.ids import cell_id, point_id, size_labels
from sweeper.core.rows import CellFacts
from sweeper.spec import catalog
from sweeper.spec.schema import BYTE_VOCAB, MethodSpec, SweepConfig, deep_merge, resolve_path
from trials.config import DataConfig, DivergenceConfig, EvalConfig, TrainConfig
from trials.data.tokenizer import load_tokenizer
from trials.errors import TrialInputError

# Training settings that change how fast a trial runs, not what it computes.
NON_RESULT_TRAIN_KEYS = ("device", "compile", "threads", "report_every", "checkpoint_every", "drop_diverged",
                         "fused_loss", "sync_every", "cuda_graphs", "micro_batch", "deterministic")


@dataclass(frozen=True)
class Cell:
    cell_id: str  # f"{method}/{size}/s{seed}" (sweeper.core.ids.CellId)
    method: str
    scheme: str
    family: str
    size: str  # "L48" for a depth, "T8" for a loop count, or the named size (sweeper.core.ids.size_labels)
    depth: int  # blocks of the network
    loops: int | None  # a loop-count sweep (model.loops): the cell's mean training and evaluation loop count
    width: int
    seed: int
    size_rank: int  # 0 for the smallest size of the sweep
    x: float  # the size on the fits' x axis: depth for a depth sweep, loop count for a loop sweep, parameters for a ladder
    model: ModelConfig
    train: TrainConfig
    data: DataConfig
    divergence: DivergenceConfig
    policy: LRPolicy
    prior: str
    resources: dict[str, float]  # Ray resources of one trial: {"CPU": .., "GPU": .., custom..}
    memory_gb: float | None
    params: int
    params_nonembed: int
    flops_per_token: float
    tokens_per_point: int
    steps_per_point: int
    compat: dict[str, Any] = field(repr=False)
    fingerprint: str = ""
    eval: EvalConfig = EvalConfig()  # evaluations at each trial's end (eval.tasks)

    def point_id(self, lr: float) -> str:
        return point_id(self.cell_id, lr)

    @property
    def facts(self) -> CellFacts:
        """What the cell's point and cell rows repeat about it."""
        return CellFacts(
            cell_id=self.cell_id, method=self.method, family=self.family, size=self.size, depth=self.depth,
            loops=self.loops, width=self.width, seed=self.seed, params=self.params,
            params_nonembed=self.params_nonembed, flops_per_token=self.flops_per_token,
        )

    def ledger_attrs(self) -> dict[str, Any]:
        """The cell's attributes in the ledger (readable in optuna-dashboard)."""
        return {**self.facts.attrs(), "scheme": self.scheme, "tokens_per_point": self.tokens_per_point,
                "fingerprint": self.fingerprint}


@dataclass
class Plan:
    config: SweepConfig
    sweep_dir: Path
    cells: list[Cell]
    vocab: int
    source: Path | None = None
    overrides: list[str] = field(default_factory=list)  # KEY=VALUE given on the command line, set on the file
    document: Any = None  # with overrides: the document they produced (the sweep directory's YAML copy)

    def by_id(self) -> dict[str, Cell]:
        return {c.cell_id: c for c in self.cells}

    @property
    def axis(self) -> str:
        """What the sizes of the sweep vary: `depth`, `loops` (a loop-count sweep) or `params`."""
        model = self.config.model
        return "depth" if model.depths is not None else "loops" if model.loops is not None else "params"


def sweep_dir_for(cfg: SweepConfig, output: str | None = None, base: Path | None = None) -> Path:
    base = base or Path.cwd()
    chosen = output or cfg.output or os.path.join("runs", cfg.name)
    return Path(resolve_path(chosen, base))


def resolved_data(data: DataConfig, base: Path) -> DataConfig:
    """The data section with local paths made absolute (trials run in other directories)."""
    updates: dict[str, Any] = {}
    for key in ("path", "val_path"):
        value = getattr(data, key)
        if value:
            updates[key] = resolve_path(value, base)
    if data.tokenizer and data.tokenizer.startswith((".", "/", "~")):
        updates["tokenizer"] = resolve_path(data.tokenizer, base)
    return data.model_copy(update=updates) if updates else data


def resolved_eval(evaluation: EvalConfig, base: Path) -> EvalConfig:
    """The evaluations with LAMBADA's local file and tokenizer paths made absolute (trials run elsewhere)."""
    lambada, updates = evaluation.lambada, {}
    if lambada.path:
        updates["path"] = resolve_path(lambada.path, base)
    if lambada.tokenizer and lambada.tokenizer.startswith((".", "/", "~")):
        updates["tokenizer"] = resolve_path(lambada.tokenizer, base)
    return evaluation.model_copy(update={"lambada": lambada.model_copy(update=updates)}) if updates else evaluation


def resolve_vocab(cfg: SweepConfig, data: DataConfig) -> int:
    """The model vocabulary: the YAML's, or the data's when `auto`."""
    if isinstance(cfg.model.vocab, int):
        return cfg.model.vocab
    if data.source == "synthetic":
        return data.synthetic_vocab
    if data.source in ("images", "builtin_images"):  # the ViT's outputs: the number of classes
        from trials.data.images import class_count  # the image data code (numpy): for ViT sweeps only

        try:
            return class_count(data)
        except TrialInputError as exc:
            raise UserError(exc.message) from None
    if data.tokenizer is None and data.source in ("builtin", "text", "jsonl", "parquet"):
        return BYTE_VOCAB
    if data.tokenizer_train is not None and not Path(data.tokenizer).expanduser().exists():  # type: ignore[arg-type]
        return data.tokenizer_train.vocab  # the launch trains it with exactly this many ids
    try:
        return int(load_tokenizer(data.tokenizer).vocab)
    except Exception as exc:
        raise UserError(f"data.tokenizer {data.tokenizer!r}: cannot load it to find model.vocab ({exc})") from None


def _shapes(cfg: SweepConfig) -> list[tuple[str, int, int, int, int | None, dict[str, Any]]]:
    """(size label, depth, width, heads, mlp_hidden, family extra) for every size of the sweep.

    A named size brings its family settings (the looped split, the ViT's image and patch sizes), which
    the YAML's `model.extra` overrides; a loop-count sweep sets the mean training and the evaluation
    loop counts of each cell."""
    m = cfg.model
    if m.depths is not None:
        return [(label, d, m.width, m.heads, m.mlp_hidden, dict(m.extra))
                for label, d in zip(size_labels(depths=m.depths), m.depths)]
    if m.loops is not None:
        family, loop_shapes = get_family(m.family), []
        for label, n in zip(size_labels(loops=m.loops), m.loops):
            blocks, extra = family.axis_shape(m.extra, n)  # the blocks of `extra`, trained and evaluated at n loops
            loop_shapes.append((label, blocks, m.width, m.heads, m.mlp_hidden, extra))
        return loop_shapes
    out = []
    for size in m.sizes or []:
        shape = size.shape()
        out.append((size.name, shape.depth, shape.width, shape.heads, shape.mlp_hidden or size.mlp_hidden,
                    {**dict(shape.extra), **m.extra}))
    return out


def _resources(cfg: SweepConfig, size: str, depth: int) -> tuple[dict[str, float], float | None]:
    res = cfg.resources
    cpu, gpu, memory_gb, custom = res.cpu, res.gpu, res.memory_gb, dict(res.custom)
    for rule in res.by_size:
        matches = (rule.max_depth is not None and cfg.model.depths is not None and depth <= rule.max_depth) or (
            rule.sizes is not None and size in rule.sizes
        )
        if matches:
            cpu = rule.cpu if rule.cpu is not None else cpu
            gpu = rule.gpu if rule.gpu is not None else gpu
            memory_gb = rule.memory_gb if rule.memory_gb is not None else memory_gb
            if rule.custom is not None:
                custom.update(rule.custom)
            break
    out: dict[str, float] = {"CPU": float(cpu)}
    if gpu:
        out["GPU"] = float(gpu)
    if memory_gb:
        out["memory"] = float(memory_gb) * 2**30
    out.update({k: float(v) for k, v in custom.items()})
    return out, memory_gb


def _tokens(train: TrainConfig, model: ModelConfig, counts: dict[str, int]) -> tuple[int, int]:
    """(tokens, steps) of one point: the trial's budget rule (whole steps, rounded up)."""
    per_step = train.batch_size * model.seq_len
    if train.steps is not None:
        steps = train.steps
    elif train.tokens is not None:
        steps = math.ceil(train.tokens / per_step)
    else:
        assert train.tokens_per_param is not None
        n = counts["nonembed"] if train.budget_params == "nonembed" else counts["total"]
        steps = math.ceil(train.tokens_per_param * n / per_step)
    return steps * per_step, steps


def compat_of(model: ModelConfig, train: TrainConfig, data: DataConfig, divergence: DivergenceConfig,
              evaluation: EvalConfig | None = None) -> dict[str, Any]:
    """The settings two results of one cell must share to be comparable (the evaluations only when a sweep
    asks for some: without, a cell's fingerprint is what it was before `eval` existed)."""
    train_dump = train.model_dump(mode="json")
    for key in NON_RESULT_TRAIN_KEYS:
        train_dump.pop(key, None)
    out = {
        "model": json.loads(json.dumps(model.to_dict(), default=str)),
        "train": train_dump,
        # the tokenizer's own id is the corpus's; `eval_split: val` (the default) is what every cell did before
        # the key existed, so it stays out and older sweeps keep their fingerprints
        "data": data.model_dump(mode="json", exclude={"tokenizer_train"} | ({"eval_split"} if data.eval_split == "val" else set())),
        "divergence": divergence.model_dump(mode="json"),
    }
    if evaluation is not None and evaluation.tasks:
        out["eval"] = evaluation.model_dump(mode="json")
    return out


def label_budget(train: TrainConfig, size: str) -> TrainConfig:
    """`budget_params: label` made concrete for one size: `tokens_per_param` x the count its name states,
    as `train.tokens` (UserError for a size whose name states none)."""
    if train.budget_params != "label" or train.tokens_per_param is None:
        return train
    named = catalog.named_sizes().get(size)
    nominal = named.nominal_params if named is not None else None
    if nominal is None:
        raise UserError(f"train.budget_params: label multiplies the parameter count a named size's label states "
                        f"(parcae-140M: 140M); size {size!r} states none: give budget_params total or nonembed")
    return train.model_copy(update={"tokens": round(train.tokens_per_param * nominal), "tokens_per_param": None})


def fingerprint_of(compat: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(compat, sort_keys=True).encode()).hexdigest()[:16]


def build_plan(cfg: SweepConfig, *, output: str | None = None, base: Path | None = None,
               source: Path | None = None) -> Plan:
    base = base or Path.cwd()
    data = resolved_data(cfg.data, base)
    evaluation = resolved_eval(cfg.eval, base)
    vocab = resolve_vocab(cfg, data)
    shapes = _shapes(cfg)
    cells: list[Cell] = []
    problems: list[str] = []  # every cell that cannot be planned, reported together
    for method in cfg.methods:
        policy_section = cfg.lr_for(method)
        policy = policy_section.to_policy()
        divergence = cfg.divergence_for(method)
        for rank, (size, depth, width, heads, mlp_hidden, extra) in enumerate(shapes):
            model = _model_config(cfg, method, depth=depth, width=width, heads=heads, mlp_hidden=mlp_hidden, vocab=vocab,
                                  extra=extra)
            try:
                train = label_budget(cfg.train_for(method, size), size)
                counts = count_params(model)
                fpt = flops_per_token(model)
            except (ValueError, KeyError, UserError) as exc:
                where = f"{source}: " if source else ""
                problems.append(f"{where}methods: {method.name} at size {size}: {getattr(exc, 'message', exc)}")
                continue
            tokens, steps = _tokens(train, model, counts)
            resources, memory_gb = _resources(cfg, size, depth)
            compat = compat_of(model, train, data, divergence, evaluation)
            loops = cfg.model.loops[rank] if cfg.model.loops is not None else None
            for seed in cfg.seeds:
                cells.append(
                    Cell(
                        cell_id=cell_id(method.name, size, seed), method=method.name, scheme=method.scheme_name,
                        family=cfg.model.family, size=size, depth=depth, loops=loops, width=width,
                        seed=seed, size_rank=rank,
                        x=float(depth if cfg.model.depths is not None else loops if loops is not None else counts["total"]),
                        model=model, train=train, data=data, divergence=divergence, policy=policy,
                        prior=policy_section.prior, resources=resources, memory_gb=memory_gb,
                        params=counts["total"], params_nonembed=counts["nonembed"], flops_per_token=fpt,
                        tokens_per_point=tokens, steps_per_point=steps, compat=compat,
                        fingerprint=fingerprint_of(compat), eval=evaluation,
                    )
                )
    if problems:
        raise UserError(problems[0]) if len(problems) == 1 else UserError(f"{len(problems)} problems", details=problems)
    # size_rank by actual size (a ladder may be listed in any order)
    order = sorted({(c.x, c.size) for c in cells})
    rank = {size: i for i, (_, size) in enumerate(order)}
    cells = [replace(c, size_rank=rank[c.size]) for c in cells]
    return Plan(cfg, sweep_dir_for(cfg, output, base), cells, vocab, source)


def _model_config(cfg: SweepConfig, method: MethodSpec, *, depth: int, width: int, heads: int,
                  mlp_hidden: int | None, vocab: int, extra: dict[str, Any] | None = None) -> ModelConfig:
    m = cfg.model
    extra = dict(m.extra) if extra is None else extra
    model = ModelConfig(
        family=m.family, scheme=method.scheme_name, width=width, depth=depth, n_heads=heads, vocab=vocab,
        seq_len=m.seq_len, init_std=m.init_std, norm_eps=m.norm_eps, mlp_hidden=mlp_hidden, rope_base=m.rope_base,
        scheme_options=deep_merge(m.scheme_options, method.scheme_options), extra=extra,
    )
    # the tokens of one sample: `model.seq_len` for an LM, a ViT's patches and class token
    return replace(model, seq_len=get_family(m.family).tokens_per_sample(model))


def compat_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """'train.steps: 300 → 400' lines for every setting that differs."""
    out = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}.{key}" if prefix else key
        a, b = old.get(key, "(unset)"), new.get(key, "(unset)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += compat_diff(a, b, path)
        elif a != b:
            out.append(f"{path}: {a!r} → {b!r}")
    return out

