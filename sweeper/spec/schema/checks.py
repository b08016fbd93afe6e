"""Checks beyond one section's own model: the raw document (non-finite numbers, YAML booleans where a
number is wanted), checks that span sections (a method's overrides merged, the data against the model,
resources against the sizes, units), each scheme's options at every depth, and files the sweep names
(`data_problems`). Each returns `Problem`s; `sweeper.spec.schema.load` gathers them all at once.

The model family's own rules come from its registry entry (`models.family`).
"""

from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from models.family import families, get_family
from models.registry import get_scheme, make_scheme
from sweeper.spec import catalog
from sweeper.spec.schema.fields import BYTE_VOCAB, MAX_VOCAB
from sweeper.spec.schema.messages import MissingFile, Problem, problems_from
from sweeper.spec.schema.sections import LRSection, MethodSpec, ModelSection
from sweeper.spec.schema.sweep import SweepConfig, deep_merge, json_schema, merge_train
from trials.config import TOKENIZER_TRAINABLE_SOURCES, DataConfig, DivergenceConfig, TrainConfig


def find_nonfinite(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        out.append(Problem(path, f"{value} is not allowed; give a finite number"))
    elif isinstance(value, dict):
        for k, v in value.items():
            find_nonfinite(v, (*path, str(k)), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            find_nonfinite(v, (*path, i), out)


def bools_for_numbers(raw: Any) -> list[Problem]:
    """YAML's true/false where the schema wants a number: pydantic's lax mode reads `true` as 1
    (`steps: true` trained one step, `batch_size: yes` used one sequence). Walks the raw document
    along the sweep's JSON schema, so every numeric field of every embedded section is covered."""
    schema = json_schema()
    defs = schema.get("$defs", {})

    def branches(node: dict[str, Any]) -> list[dict[str, Any]]:
        while "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        out = [node]
        for key in ("anyOf", "oneOf", "allOf"):
            out += [b for sub in node.get(key, []) for b in branches(sub)]
        return out

    def types(node: dict[str, Any]) -> set[str]:
        found: set[str] = set()
        for b in branches(node):
            t = b.get("type")
            found |= set(t) if isinstance(t, list) else ({t} if t else set())
            if "const" in b or "enum" in b:
                found |= {"boolean" if isinstance(v, bool) else "other" for v in b.get("enum", [b.get("const")])}
        return found

    problems: list[Problem] = []

    def walk(value: Any, node: dict[str, Any], path: tuple[str | int, ...]) -> None:
        if isinstance(value, bool):
            allowed = types(node)
            if allowed & {"integer", "number"} and "boolean" not in allowed:
                problems.append(Problem(path, f"expected a number (got {str(value).lower()})"))
            return
        for b in branches(node):
            if isinstance(value, dict) and (b.get("properties") or isinstance(b.get("additionalProperties"), dict)):
                for key, item in value.items():
                    child = b.get("properties", {}).get(key, b.get("additionalProperties"))
                    if isinstance(child, dict):
                        walk(item, child, (*path, str(key)))
            elif isinstance(value, list) and isinstance(b.get("items"), dict):
                for i, item in enumerate(value):
                    walk(item, b["items"], (*path, i))
            elif isinstance(value, list) and isinstance(b.get("prefixItems"), list):
                for i, (item, child) in enumerate(zip(value, b["prefixItems"])):
                    walk(item, child, (*path, i))

    walk(raw, schema, ())
    unique: dict[tuple[str | int, ...], Problem] = {}
    for problem in problems:  # one line per field even when several schema branches reach it
        unique.setdefault(problem.path, problem)
    return list(unique.values())


FILE_SOURCES = ("text", "jsonl", "parquet", "tokens", "images")
PREPARE_HINT = "; prepare it first with `sweeper data prepare` (the sweep file's comments give the command)"


def data_problems(data: DataConfig, base: Path) -> list[Problem]:
    out: list[Problem] = []
    if data.source in FILE_SOURCES and not data.path:
        out.append(Problem(("data", "path"), f"required for source {data.source!r} (a file, directory or glob)"))
    for key in ("path", "val_path"):
        value = getattr(data, key)
        if value and data.source in FILE_SOURCES:
            resolved = resolve_path(value, base)
            if not _exists(resolved):
                given = "" if resolved == value else f" (given as {value!r}, relative to the working directory)"
                hint = PREPARE_HINT if data.source == "tokens" and key == "path" else ""
                out.append(MissingFile(("data", key), f"no such file or directory: {resolved}{given}{hint}"))
            elif data.source == "tokens" and key == "path" and os.path.isdir(resolved) and not os.path.isfile(
                os.path.join(resolved, "manifest.json")
            ):
                out.append(MissingFile(("data", key), f"{resolved}: a folder without manifest.json, so not a prepared corpus "
                                   f"(or its `sweeper data prepare` has not finished){PREPARE_HINT}"))
    if data.eval_split != "val" and data.source != "builtin":
        out.append(Problem(("data", "eval_split"), f"{data.eval_split!r} is offered by the built-in corpus only (source "
                           f"{data.source!r} has one held-out set): leave it at 'val'"))
    if data.source == "builtin" and data.val_fraction >= 0.5:
        out.append(Problem(("data", "val_fraction"), f"{data.val_fraction:g}: the built-in corpus holds this share of its "
                           "units out twice (validation and test), so it must be below 0.5"))
    if data.source == "hf" and not data.dataset:
        out.append(Problem(("data", "dataset"), "required for source 'hf' (a Hugging Face dataset name)"))
    if data.tokenizer_train is not None:
        if not data.tokenizer or not looks_local(data.tokenizer) or not data.tokenizer.endswith(".json"):
            out.append(Problem(("data", "tokenizer_train"), "trains the tokenizer into data.tokenizer: give data.tokenizer "
                               "as a local .json path (e.g. ./tokenizers/mine.json)"))
        if data.source not in TOKENIZER_TRAINABLE_SOURCES:
            out.append(Problem(("data", "tokenizer_train"), f"trains on text; data.source {data.source!r} has none "
                               f"(allowed: {', '.join(TOKENIZER_TRAINABLE_SOURCES)})"))
    elif data.tokenizer and looks_local(data.tokenizer):
        resolved = resolve_path(data.tokenizer, base)
        if not os.path.exists(resolved):
            out.append(MissingFile(("data", "tokenizer"), f"no such file or directory: {resolved} (supply it, or add "
                                   f"data.tokenizer_train to have the launch train one there)"))
    return out


def partial_data(raw: Any) -> DataConfig | None:
    """The file-naming keys of a `data` section that failed validation, when they validate on their own."""
    if not isinstance(raw, dict):
        return None
    keys = ("source", "path", "val_path", "tokenizer", "dataset")
    subset = {k: raw[k] for k in keys if k in raw and isinstance(raw[k], str)}
    try:
        return DataConfig.model_validate(subset)
    except ValidationError:
        return None


def looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.endswith((".json", ".model"))


def _exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(path, recursive=True))
    return os.path.exists(path)


def resolve_path(value: str, base: Path) -> str:
    """Relative paths in a sweep file are relative to the working directory of the command."""
    expanded = os.path.expanduser(value)
    return expanded if os.path.isabs(expanded) else str((base / expanded).resolve())


_STORAGE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg2", "mysql", "mysql+pymysql", "oracle")


class Sections:
    """The top-level sections that validated on their own (cross-checks use only those)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def has(self, *names: str) -> bool:
        return all(n in self.values for n in names)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def valid_sections(raw: dict[str, Any], failed: set[str]) -> Sections:
    values: dict[str, Any] = {}
    for name, info in SweepConfig.model_fields.items():
        if name in failed:
            continue
        if name in raw:
            try:
                annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                values[name] = TypeAdapter(annotation).validate_python(raw[name])
            except ValidationError:
                continue
        elif not info.is_required():
            values[name] = info.get_default(call_default_factory=True)
    return Sections(values)


def cross_problems(sec: Sections, base: Path) -> list[Problem]:
    out: list[Problem] = []
    if sec.has("methods"):
        names = [m.name for m in sec.methods]
        for i, name in enumerate(names):
            if name in names[:i]:
                out.append(Problem(("methods", i, "name"), f"method {name!r} is listed twice; give variants distinct names"))
        for i, method in enumerate(sec.methods):
            for section, model in (("lr", LRSection), ("train", TrainConfig), ("divergence", DivergenceConfig)):
                patch = getattr(method, section)
                if not patch or not sec.has(section):
                    continue
                base_values = getattr(sec, section).model_dump(exclude_none=True)
                merged = merge_train(base_values, patch) if section == "train" else deep_merge(base_values, patch)
                try:
                    model.model_validate(merged)
                except ValidationError as exc:
                    out.extend(problems_from(exc, model, ("methods", i, section)))
    if sec.has("model", "train", "methods"):
        out.extend(_size_train_problems(sec.model, sec.train, sec.methods))
    if sec.has("data"):
        out.extend(data_problems(sec.data, base))
    if sec.has("eval"):
        out.extend(_eval_problems(sec, base))
    if sec.has("model"):
        out.extend(_shape_problems(sec.model))
        out.extend(_family_problems(sec.model))
    if sec.has("model", "methods"):
        out.extend(_scheme_problems(sec.methods, sec.model))
    if sec.has("model", "data"):
        data, model = sec.data, sec.model
        byte_level = data.tokenizer is None and data.source not in ("tokens", "hf", "images", "builtin_images")
        if isinstance(model.vocab, int) and byte_level and model.vocab < BYTE_VOCAB:
            out.append(Problem(("model", "vocab"), f"byte-level data needs vocab ≥ {BYTE_VOCAB} (got {model.vocab})"))
        if isinstance(model.vocab, int) and model.vocab > MAX_VOCAB:
            out.append(Problem(("model", "vocab"), f"must be ≤ {MAX_VOCAB} (got {model.vocab})"))
        if data.source == "tokens" and model.vocab == "auto":
            out.append(Problem(("model", "vocab"), "give the vocabulary size for pre-tokenized data (source 'tokens')"))
        image_data = data.source in ("images", "builtin_images")
        if get_family(model.family).requires_image_data and not image_data:
            out.append(Problem(("data", "source"), f"the {model.family} family trains on images or builtin_images "
                               f"(got {data.source!r})"))
        if not get_family(model.family).requires_image_data and image_data:
            image_families = " or ".join(f.name for f in families() if f.requires_image_data)
            out.append(Problem(("data", "source"), f"image data needs model.family: {image_families} (got {model.family!r})"))
    if sec.has("resources"):
        res = sec.resources
        if res.cpu == 0 and res.gpu == 0 and not res.custom:
            out.append(Problem(("resources",), "a trial must ask for some cpu, gpu or custom resource"))
        for i, rule in enumerate(res.by_size):
            if rule.gpu is not None and rule.gpu > 1 and rule.gpu != int(rule.gpu):
                out.append(Problem(("resources", "by_size", i, "gpu"), "a GPU count above 1 must be whole"))
            if not sec.has("model"):
                continue
            size_names = {s.name for s in sec.model.sizes or []}
            if rule.sizes is not None:
                unknown = [s for s in rule.sizes if s not in size_names]
                if unknown:
                    out.append(Problem(("resources", "by_size", i, "sizes"), f"not among model.sizes: {', '.join(unknown)}"))
            if rule.max_depth is not None and sec.model.depths is None:
                out.append(Problem(("resources", "by_size", i, "max_depth"), "only for a depth sweep (model.depths)"))
        if sec.has("train") and sec.train.device == "cuda" and res.gpu == 0 and not any((r.gpu or 0) > 0 for r in res.by_size):
            out.append(Problem(("train", "device"), "'cuda' needs resources.gpu > 0 (Ray hides GPUs from trials without)"))
    out.extend(_unit_problems(sec))
    if sec.has("ledger") and sec.ledger != "sqlite":
        scheme = sec.ledger.split(":", 1)[0].lower()
        if scheme != "journal" and scheme not in _STORAGE_SCHEMES:
            out.append(
                Problem(("ledger",), "expected 'sqlite', 'journal:PATH' or an Optuna storage URL such as "
                        f"postgresql://user@host/db (got {sec.ledger!r})")
            )
    if sec.has("ray"):
        address = sec.ray.address
        if address and not re.match(r"^(auto|ray://\S+|[A-Za-z0-9_.\-\[\]:]+:\d+)$", address):
            out.append(Problem(("ray", "address"), f"expected 'auto', HOST:PORT or ray://HOST:PORT (got {address!r})"))
        if address and (sec.ray.num_cpus or sec.ray.num_gpus is not None):
            out.append(Problem(("ray",), "num_cpus/num_gpus describe a local Ray; drop them when giving an address"))
    if sec.has("output") and sec.output is not None and not sec.output.strip():
        out.append(Problem(("output",), "must not be empty"))
    return out


def _size_train_problems(model: ModelSection, train: TrainConfig, methods: list[MethodSpec]) -> list[Problem]:
    """Each size's `train` overrides over every method's training settings, and `budget_params: label`
    (the count a named size's label states) at every size, read as the planner reads them."""
    out: list[Problem] = []
    base = train.model_dump(exclude_none=True)
    sizes = model.sizes or []
    for method in methods:
        merged_method = merge_train(base, method.train) if method.train else base
        for i, size in enumerate(sizes):
            merged = merge_train(merged_method, size.train) if size.train else merged_method
            try:
                resolved = TrainConfig.model_validate(merged)
            except ValidationError as exc:
                out.extend(problems_from(exc, TrainConfig, ("model", "sizes", i, "train")))
                return out  # one method's view is enough: the same patch
            if resolved.budget_params == "label" and resolved.tokens_per_param is not None:
                shape = catalog.named_sizes().get(size.name)
                if shape is None or shape.nominal_params is None:
                    out.append(Problem(("train", "budget_params"), f"label multiplies the parameter count a named "
                                       f"size's label states (parcae-140M: 140M); size {size.name!r} states none: give "
                                       "total or nonembed"))
                    return out
    if not sizes and train.budget_params == "label" and train.tokens_per_param is not None:
        out.append(Problem(("train", "budget_params"), "label multiplies the parameter count a named size's label "
                           "states; a depth or loop-count sweep has no named sizes: give total or nonembed"))
    return out


def _eval_problems(sec: Sections, base: Path) -> list[Problem]:
    """`eval.tasks` against the model family and the data (LAMBADA scores a language model through the
    tokenizer its ids come from), and the local files it names."""
    out: list[Problem] = []
    evaluation = sec.eval
    if not evaluation.tasks:
        return out
    if sec.has("model") and get_family(sec.model.family).data_kind != "tokens":
        out.append(Problem(("eval", "tasks"), f"{', '.join(evaluation.tasks)} score a language model; the "
                           f"{sec.model.family} family classifies images"))
    lambada = evaluation.lambada
    if "lambada" in evaluation.tasks:
        if sec.has("data") and sec.data.source == "tokens" and not (lambada.tokenizer or sec.data.tokenizer):
            out.append(Problem(("eval", "lambada", "tokenizer"), "pre-tokenized data (source 'tokens') does not say "
                               "which tokenizer made its ids: give it here or as data.tokenizer"))
        if lambada.source == "jsonl" and lambada.path and not os.path.exists(resolve_path(lambada.path, base)):
            out.append(MissingFile(("eval", "lambada", "path"), f"no such file: {resolve_path(lambada.path, base)}"))
        if lambada.tokenizer and looks_local(lambada.tokenizer) and not os.path.exists(resolve_path(lambada.tokenizer, base)):
            out.append(MissingFile(("eval", "lambada", "tokenizer"),
                                   f"no such file or directory: {resolve_path(lambada.tokenizer, base)}"))
    return out


def _scheme_problems(methods: list[MethodSpec], model: ModelSection) -> list[Problem]:
    """Each method's scheme options, read as the planner's scheme will read them: keys the scheme does not
    take (named where they are written, with the nearest allowed key), then values it refuses at some depth."""
    out: list[Problem] = []
    reported_model_keys: set[str] = set()
    for i, method in enumerate(methods):
        try:
            allowed = sorted(get_scheme(method.scheme_name).defaults)
        except ValueError:
            continue  # an unknown scheme is reported by MethodSpec
        unknown = False
        for key in method.scheme_options:
            if key not in allowed:
                unknown = True
                out.append(Problem(("methods", i, "scheme_options", key), _unknown_option(key, method.scheme_name, allowed)))
        for key in model.scheme_options:
            if key not in allowed and key not in method.scheme_options:
                unknown = True
                if key not in reported_model_keys:
                    reported_model_keys.add(key)
                    out.append(Problem(("model", "scheme_options", key),
                                       _unknown_option(key, method.scheme_name, allowed) + f" (method {method.name!r})"))
        if unknown:
            continue
        options = deep_merge(model.scheme_options, method.scheme_options)
        for depth in _depths_of(model):
            try:
                make_scheme(method.scheme_name, depth, options)
            except (ValueError, TypeError, KeyError) as exc:
                named = re.search(r"scheme_options\.(\w+)", str(exc))  # the option the scheme names, where it is written
                key = named.group(1) if named else None
                if key in method.scheme_options:
                    path: tuple[str | int, ...] = ("methods", i, "scheme_options", key)
                elif key in model.scheme_options:
                    path = ("model", "scheme_options", key)
                else:
                    path = ("methods", i, "scheme_options") if method.scheme_options else ("methods", i)
                out.append(Problem(path, f"at depth {depth}: {exc}"))
                break
    return out


def _unknown_option(key: str, scheme: str, allowed: list[str]) -> str:
    return (f"unknown option {key!r} for scheme {scheme!r}{catalog.suggest(key, allowed)} "
            f"(allowed: {', '.join(allowed) or 'none'})")


def _depths_of(model: ModelSection) -> list[int]:
    """The numbers of blocks the sweep's networks have (the planner's shapes, without counting)."""
    if model.depths is not None:
        return sorted(set(model.depths))
    if model.loops is not None:
        try:
            return sorted({get_family(model.family).axis_shape(model.extra, n)[0] for n in model.loops})
        except ValueError:
            return []  # reported by _family_problems
    return sorted({s.shape().depth for s in model.sizes or [] if s.shape().depth})


MAX_TOKENS_PER_PARAM = 100_000  # Chinchilla is 20; 4x Chinchilla 80
MAX_MEMORY_GB = 4096


def _unit_problems(sec: Sections) -> list[Problem]:
    """Numbers that are valid but almost surely in the wrong unit: a token budget below one step
    (`tokens: 1.5` meaning 1.5 billion), tokens per parameter in the millions, memory in bytes or MiB."""
    out: list[Problem] = []
    if sec.has("train", "model") and get_family(sec.model.family).data_kind == "tokens":  # (an image step counts images)
        per_step = sec.train.batch_size * sec.model.seq_len
        if sec.train.tokens is not None and sec.train.tokens < per_step:
            out.append(Problem(("train", "tokens"), f"{sec.train.tokens} tokens is less than one step ({per_step} tokens: "
                               "batch_size × seq_len); give a count of tokens, e.g. 1.5e9 for 1.5 billion"))
    if sec.has("train") and sec.train.tokens_per_param is not None and sec.train.tokens_per_param > MAX_TOKENS_PER_PARAM:
        out.append(Problem(("train", "tokens_per_param"), f"{sec.train.tokens_per_param:g} tokens per parameter "
                           f"(at most {MAX_TOKENS_PER_PARAM:g}; Chinchilla is 20): a token count given here? use "
                           "train.tokens"))
    if sec.has("resources"):
        rules = [(("resources", "memory_gb"), sec.resources.memory_gb)]
        rules += [(("resources", "by_size", i, "memory_gb"), r.memory_gb) for i, r in enumerate(sec.resources.by_size)]
        for path, value in rules:
            if value is not None and value > MAX_MEMORY_GB:
                out.append(Problem(path, f"{value:g} GiB per trial (at most {MAX_MEMORY_GB}); memory_gb is in GiB, "
                                   "not bytes or MiB"))
    return out


def _shape_problems(model: ModelSection) -> list[Problem]:
    if model.sizes is None:
        shapes = [(("model", "heads"), model.width, model.heads)]
    else:
        shapes = [(("model", "sizes", i), s.shape().width, s.shape().heads) for i, s in enumerate(model.sizes)]
    out = []
    for path, width, heads in shapes:
        if width % heads:
            out.append(Problem(path, f"width {width} is not divisible by heads {heads}"))
        elif (width // heads) % 2 and get_family(model.family).rotary:
            out.append(Problem(path, f"head size {width // heads} (width/heads) must be even for rotary embeddings"))
    return out


def _family_problems(model: ModelSection) -> list[Problem]:
    """Named sizes of another family, a depth sweep of the looped family, and the family's `extra` settings
    (read exactly as the models will read them)."""
    out: list[Problem] = []
    family = get_family(model.family)
    if family.size_axis != "depths" and model.depths is not None:
        return [Problem(("model", "depths"), f"the {family.name} family sweeps model.{family.size_axis} (loop counts) "
                        "or model.sizes, not depths")]
    depths: list[tuple[int, dict[str, Any]]] = []
    for i, size in enumerate(model.sizes or []):
        shape = size.shape()
        if shape.family and shape.family != model.family:
            out.append(Problem(("model", "sizes", i), f"{size.name!r} is a {shape.family} size; model.family is {model.family!r}"))
        else:
            depths.append((shape.depth, {**dict(shape.extra), **model.extra}))
    depths += [(depth, dict(model.extra)) for depth in model.depths or []]
    if model.loops is not None:
        depths.append((0, dict(model.extra)))
    for depth, extra in depths:
        try:
            family.validate_extra(extra, depth or None)  # read exactly as the models will read them
        except ValueError as exc:
            message = str(exc).removeprefix("model.extra").lstrip(".: ")
            out.append(Problem(("model", "extra"), message))
            break  # the settings are shared by the sizes: one message is enough
    return out
