"""Trial configuration: data source, training recipe and divergence rules.

Pure pydantic models with no torch import, so that the sweep schema (`sweeper.spec.schema`)
embeds them directly and validation stays fast. Every model forbids unknown keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


TOKENIZER_TRAINABLE_SOURCES = ("hf", "text", "jsonl", "parquet")  # the sources with text to train a tokenizer on


class TokenizerTrainConfig(StrictModel):
    """A byte-level BPE tokenizer the launch trains at `data.tokenizer` (a local `.json` path) when that file
    is missing: `vocab` ids (the end-of-document token included) from the first `documents` training documents
    of the data (`trials.data.bpe`). Parcae's recipe: its own 32,768-id BPE on FineWeb-Edu."""

    vocab: Annotated[int, Field(ge=260, le=65536)] = 32768
    documents: PositiveInt = 200_000


class DataConfig(StrictModel):
    """Where tokens come from.

    - `builtin`: the running interpreter's standard-library sources, byte-level tokens (vocab 256),
      split by top-level module or package into train, validation and test (`eval_split`).
    - `text` / `jsonl` / `parquet`: local files (`path`: a file, a directory or a glob), byte-level
      tokens unless `tokenizer` is given; `text_column` for JSONL/Parquet.
    - `tokens`: a pre-tokenized binary file of `token_dtype` integers (`path`), optional `val_path`.
    - `hf`: a Hugging Face dataset (`dataset`, `subset`, `split`, `streaming`), needs the `hf` extra.
    - `synthetic`: a tiny deterministic source for tests.
    - `images` (ViT): `path` an image folder (class per subfolder) or an `.npz` with `x`, `y`;
      `builtin_images` a small generated image set that needs no download.
    """

    source: Literal["builtin", "text", "jsonl", "parquet", "tokens", "hf", "synthetic", "images", "builtin_images"] = "builtin"
    path: str | None = None
    val_path: str | None = None
    text_column: str = "text"
    token_dtype: Literal["uint16", "uint32"] = "uint16"
    tokenizer: str | None = None  # None: byte-level (vocab 256); else a local path or a hub name (needs `hf`)
    tokenizer_train: TokenizerTrainConfig | None = None  # train `tokenizer` at launch when its file is missing
    dataset: str | None = None
    subset: str | None = None
    split: str = "train"
    val_split: str | None = "validation"
    streaming: bool = True
    val_fraction: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05  # held-out share (`builtin`: of its units, for validation and again for test: < 0.5)
    # `builtin`: the held-out side evaluated. `val` chooses the LR and reports the loss; `test` is a third,
    # disjoint side for a final number at LRs already chosen (never used by the search).
    eval_split: Literal["val", "test"] = "val"
    seed: int = 0
    shuffle_buffer: PositiveInt = 10_000  # `hf` streaming: documents in the shuffle buffer
    synthetic_vocab: Annotated[int, Field(ge=2, le=65536)] = 64  # `synthetic`: alphabet size
    synthetic_tokens: Annotated[int, Field(ge=1024)] = 65_536  # `synthetic`: tokens generated (train + val)
    builtin_classes: Annotated[int, Field(ge=2, le=10)] = 10  # `builtin_images`: classes (shapes and textures)
    builtin_per_class: Annotated[int, Field(ge=10, le=1_000_000)] = 1000  # `builtin_images`: images per class (train + val)


NSTriple = tuple[float, float, float]


class MuonConfig(StrictModel):
    """Muon's settings (`train.optimizer.kind: muon`; `trials.muon`). Defaults: Parcae's official recipe.

    Muon updates the 2-D hidden weight matrices (the `hidden` parameters of `param_specs()`); every other
    parameter (embeddings, head, norms, gains, biases, LayerRoPE scalars) is updated by AdamW with
    `train.optimizer`'s `betas`, `eps` and `weight_decay`.

    - `momentum` / `nesterov`: torch.optim.Muon's momentum (an EMA of the gradients) and Nesterov look-ahead;
    - `ns_steps`, `ns_coefficients`: the Newton-Schulz orthogonalisation: `torch` (torch.optim.Muon's quintic
      (3.4445, -4.775, 2.0315) at every iteration), or a list of `[a, b, c]` triples, one per iteration (a
      list of one triple: that triple at every iteration), e.g. Polar-Express coefficients;
    - `weight_decay`: decoupled decay of the matrices (`p *= 1 - lr * wd`, torch.optim.Muon's form);
      `cautious`: only where the update and the parameter agree in sign; `weight_decay_schedule: linear`
      scales it by `1 - step / steps` (to 0 at the end of training), `constant` keeps it;
    - `adjust_lr`: the shape-based LR scale of torch.optim.Muon (`original`: sqrt(max(1, fan_out / fan_in));
      `match_rms_adamw`: 0.2 sqrt(max(fan_out, fan_in)); `none`);
    - `swept`: which LR a point's `lr` is (`muon` or `adamw`); the other is tied to it by `adamw_lr_ratio`
      (AdamW LR = ratio x Muon LR), or held at `other_lr` when that is given (the swept one is searched alone).
    """

    momentum: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.95
    nesterov: bool = True
    ns_steps: Annotated[int, Field(ge=1, le=20)] = 5
    ns_coefficients: Literal["torch"] | Annotated[tuple[NSTriple, ...], Field(min_length=1)] = "torch"
    weight_decay: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.2
    cautious: bool = True
    weight_decay_schedule: Literal["constant", "linear"] = "linear"
    adjust_lr: Literal["original", "match_rms_adamw", "none"] = "original"
    swept: Literal["muon", "adamw"] = "muon"
    adamw_lr_ratio: PositiveFloat = 1.0
    other_lr: PositiveFloat | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "MuonConfig":
        coefficients = self.ns_coefficients
        if not isinstance(coefficients, str) and len(coefficients) not in (1, self.ns_steps):
            raise ValueError(
                f"ns_coefficients: give one [a, b, c] triple (used at every iteration) or one per iteration "
                f"(ns_steps = {self.ns_steps}); got {len(coefficients)}"
            )
        if self.other_lr is not None and self.adamw_lr_ratio != 1.0:
            raise ValueError(
                f"adamw_lr_ratio ({self.adamw_lr_ratio}) ties the two LRs, other_lr ({self.other_lr}) fixes the one not "
                "swept: give one of them"
            )
        return self


class OptimizerConfig(StrictModel):
    """The optimizer shared by every learning rate of a cell: AdamW (`kind: adamw`, the default), or Muon
    for the hidden matrices and AdamW for the rest (`kind: muon`, settings in `muon`). `betas`, `eps` and
    `weight_decay` are AdamW's (with Muon: of the parameters AdamW updates); `grad_clip` is per member,
    over all of its gradients."""

    kind: Literal["adamw", "muon"] = "adamw"
    betas: tuple[Fraction, Fraction] = (0.9, 0.95)
    eps: PositiveFloat = 1e-8
    weight_decay: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1
    grad_clip: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0  # 0 disables; per member
    # Read with kind: muon only. Accepted (and ignored) with kind: adamw, so that a sweep's method can switch
    # a Muon recipe back to AdamW with `optimizer: {kind: adamw}` alone.
    muon: MuonConfig = MuonConfig()

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An AdamW optimizer dumps as it did before `kind` existed: cell fingerprints and checkpoint resume
        # keys (hashes of these dumps) of existing AdamW sweeps stay what they were.
        out: dict[str, Any] = handler(self)
        if self.kind == "adamw":
            out.pop("kind", None)
            out.pop("muon", None)
        return out


class ScheduleConfig(StrictModel):
    """Linear warmup, then cosine or linear decay to `final_fraction` of the peak LR.

    With `cooldown` (WSD / trapezoid): warmup, the peak held constant, then the decay over the last
    `cooldown` of the steps only (< 1: a fraction of the steps; >= 1: steps). Unset (the default): the
    decay spans every step after the warmup."""

    warmup: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.05  # < 1: fraction of steps; >= 1: steps
    decay: Literal["cosine", "linear", "constant"] = "cosine"
    final_fraction: Fraction = 0.1
    cooldown: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None  # < 1: fraction of steps; >= 1: steps

    @model_validator(mode="after")
    def _cooldown_decays(self) -> "ScheduleConfig":
        if self.cooldown is not None and self.decay == "constant":
            raise ValueError("cooldown: the decay over the last steps needs decay: linear or cosine (decay is constant)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.cooldown is None:  # as before `cooldown` existed (fingerprints, resume keys)
            out.pop("cooldown", None)
        return out


Interpolation = Literal["bicubic", "bilinear", "nearest", "random"]

# DeiT's recipe (Touvron et al. 2021, Table 9, and the defaults of the official training script), the
# values `recipe: deit` gives every ingredient that the YAML leaves unset. The model's two ingredients
# (drop-path 0.1 and the truncated-normal init) are `model.extra` keys of the ViT family
# (`models.vit`); the optimizer and schedule are `train.optimizer` / `train.schedule` (sweeps/vit.yaml).
DEIT_RECIPE: dict[str, object] = {
    "label_smoothing": 0.1,
    "mixup": 0.8,
    "cutmix": 1.0,
    "mix_prob": 1.0,
    "switch_prob": 0.5,
    "crop": True,
    "crop_scale": (0.08, 1.0),
    "crop_ratio": (3 / 4, 4 / 3),
    "interpolation": "bicubic",
    "flip": 0.5,
    "randaugment": "rand-m9-mstd0.5-inc1",
    "erasing": 0.25,
    "erasing_mode": "pixel",
    "erasing_count": 1,
    "repeats": 3,
    "crop_pct": 0.875,  # evaluation: shorter side to floor(224 / 0.875) = 256, bicubic; centre crop 224
    "cache_size": None,  # None: 8/7 of image_size (256 for 224), see VisionConfig
    "mix_per": "device",
    "mix_group": None,  # None: the device batch (set the run's batch / its GPU count to reproduce it on one device)
    "normalize": "imagenet",
}
DEIT_DROP_PATH = 0.1  # model.extra.drop_path under `recipe: deit` unless the YAML sets it
# Every ingredient off: what `recipe: none` (the default) gives the fields the YAML leaves unset.
NO_RECIPE: dict[str, object] = {
    **DEIT_RECIPE,
    "label_smoothing": 0.0, "mixup": 0.0, "cutmix": 0.0, "crop": False, "flip": 0.0,
    "randaugment": False, "erasing": 0.0, "repeats": 1, "crop_pct": 1.0, "normalize": "dataset",
}
IMAGE_AUGMENTATIONS = ("crop", "flip", "randaugment", "erasing", "mixup", "cutmix")  # need the `images` extra


@dataclass(frozen=True)
class VisionRecipe:
    """Every ingredient of a ViT training recipe with its value (`VisionConfig.resolved()`)."""

    recipe: str
    label_smoothing: float
    mixup: float
    cutmix: float
    mix_prob: float
    switch_prob: float
    crop: bool
    crop_scale: tuple[float, float]
    crop_ratio: tuple[float, float]
    interpolation: str
    flip: float
    randaugment: str | Literal[False]
    erasing: float
    erasing_mode: str
    erasing_count: int
    repeats: int
    workers: int
    crop_pct: float = 1.0
    cache_size: int | None = None
    mix_per: str = "device"
    normalize: str = "dataset"
    mix_group: int | None = None

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    @property
    def augments(self) -> bool:
        """Whether any per-image or batch augmentation is on (each one comes from timm / torchvision)."""
        return self.crop or self.flip > 0 or bool(self.randaugment) or self.erasing > 0 or self.mixing


class VisionConfig(StrictModel):
    """ViT training recipe: DeiT's data augmentation, mixing and label smoothing.

    `recipe: deit` sets every ingredient below to DeiT's value (`DEIT_RECIPE`); `recipe: none` (the
    default) turns every one off. A field given in the YAML overrides the recipe's value. The
    ingredients (all from the `images` extra: timm and torchvision, except label smoothing alone):

    - `crop`: random-resized-crop (area fraction `crop_scale`, aspect ratio `crop_ratio`,
      `interpolation`), back to the model's resolution; `flip`: probability of a horizontal flip;
    - `randaugment`: timm's RandAugment policy string (`rand-m9-mstd0.5-inc1`: 2 ops of magnitude 9,
      magnitude std 0.5, magnitude-increasing ops), `false` for none;
    - `erasing`: probability of random erasing (`erasing_mode` pixel: per-pixel normal noise,
      `erasing_count` regions at most), applied after normalisation;
    - `mixup` / `cutmix`: the Beta distribution's alpha (0 disables), applied to a batch with
      probability `mix_prob`, cutmix chosen with probability `switch_prob` when both are on;
    - `label_smoothing`: epsilon of the targets (inside the mixed targets when mixing is on);
    - `repeats`: repeated augmentation, each image `repeats` times per epoch with different augmentations
      (timm's RepeatAugSampler; an epoch then holds 1/repeats of the images, each `repeats` times);
    - `workers`: processes that augment the images of the next batches (0: in the trial's process);
    - `crop_pct`: evaluation resizes the shorter side to floor(image_size / crop_pct) (bicubic) and takes
      the centre image_size crop (DeiT: 0.875, 256 then 224; `none`: 1); without `crop`, training
      images get the same view;
    - `cache_size`: with `crop`, the shorter side at which training images are cached whole (aspect kept),
      the image the random-resized-crop samples; default 8/7 of image_size (256 for 224);
    - `mix_per`: `device` mixes each device batch apart (DeiT: each GPU's; here each micro-batch of
      `train.micro_batch`, else the whole batch, as for the ViT family, which takes no micro-batches
      today; a stack's members see the same mixed images), `batch` the whole batch at once;
    - `mix_group`: with `mix_per: device`, the images of one device batch when a multi-GPU run is
      reproduced on fewer devices (the run's batch over its GPU count, e.g. 1024 / 8 = 128): each
      consecutive group of this many images is mixed apart; unset, the device batch is as above;
    - `normalize`: `imagenet` (ImageNet's mean / std, DeiT's) or `dataset` (the training images' own).
    """

    recipe: Literal["none", "deit"] = "none"
    label_smoothing: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    mixup: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    cutmix: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    mix_prob: Fraction | None = None
    switch_prob: Fraction | None = None
    crop: bool | None = None
    crop_scale: tuple[Fraction, Fraction] | None = None
    crop_ratio: tuple[PositiveFloat, PositiveFloat] | None = None
    interpolation: Interpolation | None = None
    flip: Fraction | None = None
    randaugment: Literal[False] | Annotated[str, Field(pattern=r"^rand(-[a-z]+[0-9.]*)*$")] | None = None
    erasing: Fraction | None = None
    erasing_mode: Literal["pixel", "rand", "const"] | None = None
    erasing_count: PositiveInt | None = None
    repeats: PositiveInt | None = None
    workers: Annotated[int, Field(ge=0, le=64)] = 0
    crop_pct: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    cache_size: Annotated[int, Field(ge=1, le=8192)] | None = None
    mix_per: Literal["device", "batch"] | None = None
    normalize: Literal["imagenet", "dataset"] | None = None
    mix_group: Annotated[int, Field(ge=2, le=1_000_000)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "VisionConfig":
        if self.crop_scale is not None and not 0 < self.crop_scale[0] <= self.crop_scale[1]:
            raise ValueError(f"crop_scale must be [low, high] with 0 < low <= high <= 1 (got {list(self.crop_scale)})")
        if self.crop_ratio is not None and self.crop_ratio[0] > self.crop_ratio[1]:
            raise ValueError(f"crop_ratio must be [low, high] with low <= high (got {list(self.crop_ratio)})")
        return self

    def resolved(self) -> VisionRecipe:
        """Every ingredient's value: the YAML's where given, else the recipe's."""
        base = DEIT_RECIPE if self.recipe == "deit" else NO_RECIPE
        values = {key: (given if (given := getattr(self, key)) is not None else default) for key, default in base.items()}
        values["crop_scale"], values["crop_ratio"] = tuple(values["crop_scale"]), tuple(values["crop_ratio"])  # type: ignore[arg-type]
        return VisionRecipe(recipe=self.recipe, workers=self.workers, **values)  # type: ignore[arg-type]


class TrainConfig(StrictModel):
    """The training recipe of one trial. Exactly one of `steps`, `tokens`, `tokens_per_param`."""

    steps: PositiveInt | None = None
    tokens: PositiveInt | None = None
    tokens_per_param: PositiveFloat | None = None
    batch_size: PositiveInt = 8  # sequences per step (batch tokens = batch_size * seq_len)
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    eval_every: PositiveInt = 50  # steps
    eval_batches: PositiveInt = 4
    report_every: PositiveInt = 10  # steps between metric reports
    checkpoint_every: PositiveInt = 200  # steps
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    compile: bool = False  # regional torch.compile of the blocks + a compiled optimizer step (trials.engine)
    threads: PositiveInt | None = None  # torch intra-op threads; None: the trial's CPU share
    objective: Literal["loss", "error"] = "loss"  # error: 1 - top-1 accuracy (ViT)
    # which parameter count tokens_per_param multiplies (per member): every parameter, those outside the embeddings,
    # or `label`: the nominal count a named size's label states (parcae-140M: 140e6; the planner turns it into tokens)
    budget_params: Literal["total", "nonembed", "label"] = "total"
    drop_diverged: bool = True  # rebuild the stack without diverged members so they cost no compute
    fused_loss: bool = True  # LM head + cross-entropy in row chunks, gradients on the way (LLaMA; same math)
    sync_every: PositiveInt | None = None  # steps between host reads of the losses; None: 1 on CPU, 16 on CUDA
    cuda_graphs: bool = False  # CUDA only: capture the whole step in one CUDA graph (implies deferred reads)
    micro_batch: PositiveInt | None = None  # sequences per forward/backward, gradients accumulated over the batch; None: all
    deterministic: bool = False  # torch's deterministic algorithms + a fixed cuBLAS workspace: bit-identical reruns on CUDA (slower)
    vision: VisionConfig | None = None  # ViT: augmentation, mixup/cutmix, label smoothing (None: none of them; `recipe: deit`: DeiT's)

    @model_validator(mode="after")
    def _one_budget(self) -> "TrainConfig":
        given = [k for k in ("steps", "tokens", "tokens_per_param") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of steps, tokens, tokens_per_param (got {', '.join(given) or 'none'})"
            )
        return self


LAMBADA_HUB = "EleutherAI/lambada_openai"  # the usual hub copy of LAMBADA's test set (OpenAI's detokenized text)


class LambadaConfig(StrictModel):
    """Where LAMBADA's passages come from (`eval.tasks: [lambada]`; scored by `trials.lambada`).

    - `source: hf`: `datasets.load_dataset(dataset, subset, split=split)` (a hub name, read only when a sweep
      asks for the task; or a local folder, one written by `save_to_disk` too); `source: jsonl`: a local JSONL
      file (`path`), one object per line;
    - `text_column`: the passage, whose last space-separated word is the target;
    - `tokenizer`: the tokenizer the model's ids come from (default: `data.tokenizer`; byte-level without one);
    - `limit`: score the first `limit` passages only (default: all, 5,153 in LAMBADA's test set)."""

    source: Literal["hf", "jsonl"] = "hf"  # hf: Hugging Face datasets; jsonl: a local file (`path`)
    dataset: str = LAMBADA_HUB  # a hub name (read only when a sweep asks for the task) or a local folder
    subset: str | None = None  # None: the dataset's default configuration (lambada_openai: `default`, English)
    split: str = "test"
    path: str | None = None  # source jsonl: one JSON object per line
    text_column: str = "text"  # the passage; its last space-separated word is the target
    tokenizer: str | None = None  # None: data.tokenizer (byte-level without one)
    limit: PositiveInt | None = None  # score the first `limit` passages (None: all)

    @model_validator(mode="after")
    def _path_for_jsonl(self) -> "LambadaConfig":
        if self.source == "jsonl" and not self.path:
            raise ValueError("path: required for source 'jsonl' (a JSONL file with a text field per line)")
        return self


EvalTask = Literal["lambada"]


class EvalConfig(StrictModel):
    """Evaluations beyond the validation loss, run at a trial's final evaluation for every member of the
    stack and stored with each point: `tasks: [lambada]` is LAMBADA's last-word perplexity (`trials.lambada`).
    Empty (the default): the validation loss only."""

    tasks: tuple[EvalTask, ...] = ()  # lambada: LAMBADA's last-word perplexity (none: the validation loss only)
    lambada: LambadaConfig = LambadaConfig()

    @field_validator("tasks")
    @classmethod
    def _distinct(cls, tasks: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"each task once (got {list(tasks)})")
        return tasks


class ScaledPatience(StrictModel):
    """Spike patience as a share of the run: `fraction` x the trial's total steps, at least `min` and
    at most `max` steps (rounded to the nearest step). Written `spike_patience: 2%` or
    `spike_patience: {fraction: 0.02, min: 50}`."""

    fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    min: PositiveInt = 50
    max: PositiveInt | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "ScaledPatience":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"spike_patience: max ({self.max}) must be >= min ({self.min})")
        return self


DEFAULT_SPIKE_PATIENCE = ScaledPatience(fraction=0.02, min=50)


def _patience_from_percent(value: object) -> object:
    """`"2%"` -> `{fraction: 0.02}` (the default floor); a string of digits -> steps; anything else is
    validated as given."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return {"fraction": float(text[:-1]) / 100.0} if text.endswith("%") else int(text)
    except ValueError:
        raise ValueError(
            f"spike_patience must be steps (an integer), a share of the run ('2%') or {{fraction, min, max}}; got {value!r}"
        ) from None


class DivergenceConfig(StrictModel):
    """When a run counts as diverged (NaN/Inf losses always do, at once), and when as stalled: a final
    evaluation loss less than `stall_margin` nats below the loss of predicting every token by its training
    frequency on the same eval batches (about the data's unigram entropy; for classification, the chance loss).

    `spike_patience`: how long a spike may last, either in steps (an integer, the same for every run)
    or as a share of each run's length (`2%`, or `{fraction, min, max}`), so that a 800k-step run gets
    the same relative patience as a 10k-step one. Default: 2% of the run, at least 50 steps."""

    ema: Fraction = 0.9  # smoothing of the training loss
    init_loss_margin: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0  # diverged if smoothed > init + margin after warmup
    spike_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 1.5  # a spike: loss > factor * best smoothed loss
    spike_patience: Annotated[PositiveInt | ScaledPatience, BeforeValidator(_patience_from_percent)] = DEFAULT_SPIKE_PATIENCE
    explode_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] | None = 3.0  # loss > factor * init loss: diverged at once, even in warmup; None disables
    # Stalled: final eval loss > (frequency-only loss on the same eval batches) - stall_margin nats; None disables.
    # 0.05 by measurement: runs that learned only frequencies end between 0.025 nats above and 0.043 below that
    # loss (LM and ViT); healthy runs at the shipped quickstarts' budgets at least 0.11 (ViT), 0.50 (bytes) below.
    stall_margin: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = 0.05
