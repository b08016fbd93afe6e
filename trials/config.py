"""Trial configuration: data source, training recipe and divergence rules.

Pure pydantic models with no torch import, so that the sweep schema (`sweeper.schema`)
embeds them directly and validation stays fast. Every model forbids unknown keys.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(StrictModel):
    """Where tokens come from.

    - `builtin`: the running interpreter's standard-library sources, byte-level tokens (vocab 256).
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
    dataset: str | None = None
    subset: str | None = None
    split: str = "train"
    val_split: str | None = "validation"
    streaming: bool = True
    val_fraction: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05
    seed: int = 0
    shuffle_buffer: PositiveInt = 10_000  # `hf` streaming: documents in the shuffle buffer
    synthetic_vocab: Annotated[int, Field(ge=2, le=65536)] = 64  # `synthetic`: alphabet size
    synthetic_tokens: Annotated[int, Field(ge=1024)] = 65_536  # `synthetic`: tokens generated (train + val)
    builtin_classes: Annotated[int, Field(ge=2, le=10)] = 10  # `builtin_images`: classes (shapes and textures)
    builtin_per_class: Annotated[int, Field(ge=10, le=1_000_000)] = 1000  # `builtin_images`: images per class (train + val)


class OptimizerConfig(StrictModel):
    """AdamW settings shared by every learning rate of a cell."""

    betas: tuple[Fraction, Fraction] = (0.9, 0.95)
    eps: PositiveFloat = 1e-8
    weight_decay: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1
    grad_clip: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0  # 0 disables; per member


class ScheduleConfig(StrictModel):
    """Linear warmup, then cosine or linear decay to `final_fraction` of the peak LR."""

    warmup: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.05  # < 1: fraction of steps; >= 1: steps
    decay: Literal["cosine", "linear", "constant"] = "cosine"
    final_fraction: Fraction = 0.1


class VisionConfig(StrictModel):
    """ViT training: DeiT's augmentation and loss knobs (every one off by default; see sweeps/vit.yaml).

    `crop`: random-resized-crop (area fraction `crop_scale`, aspect ratio `crop_ratio`, resized back
    to the model's resolution); `flip`: probability of a horizontal flip; `mixup` / `cutmix`: the Beta
    distribution's alpha (0 disables), applied to a batch with probability `mix_prob`, cutmix chosen
    with probability `switch_prob` when both are on; `label_smoothing`: epsilon of the soft targets.
    """

    label_smoothing: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    mixup: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    cutmix: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    mix_prob: Fraction = 1.0
    switch_prob: Fraction = 0.5
    crop: bool = False
    crop_scale: tuple[Fraction, Fraction] = (0.08, 1.0)
    crop_ratio: tuple[PositiveFloat, PositiveFloat] = (3 / 4, 4 / 3)
    flip: Fraction = 0.0

    @model_validator(mode="after")
    def _ordered(self) -> "VisionConfig":
        if not 0 < self.crop_scale[0] <= self.crop_scale[1]:
            raise ValueError(f"crop_scale must be [low, high] with 0 < low <= high <= 1 (got {list(self.crop_scale)})")
        if self.crop_ratio[0] > self.crop_ratio[1]:
            raise ValueError(f"crop_ratio must be [low, high] with low <= high (got {list(self.crop_ratio)})")
        return self


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
    budget_params: Literal["total", "nonembed"] = "total"  # which parameter count tokens_per_param multiplies (per member)
    drop_diverged: bool = True  # rebuild the stack without diverged members so they cost no compute
    fused_loss: bool = True  # LM head + cross-entropy in row chunks, gradients on the way (LLaMA; same math)
    sync_every: PositiveInt | None = None  # steps between host reads of the losses; None: 1 on CPU, 16 on CUDA
    cuda_graphs: bool = False  # CUDA only: capture the whole step in one CUDA graph (implies deferred reads)
    micro_batch: PositiveInt | None = None  # sequences per forward/backward, gradients accumulated over the batch; None: all
    vision: VisionConfig | None = None  # ViT: augmentation, mixup/cutmix, label smoothing (None: none of them)

    @model_validator(mode="after")
    def _one_budget(self) -> "TrainConfig":
        given = [k for k in ("steps", "tokens", "tokens_per_param") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of steps, tokens, tokens_per_param (got {', '.join(given) or 'none'})"
            )
        return self


class DivergenceConfig(StrictModel):
    """When a run counts as diverged. NaN/Inf losses always do, at once."""

    ema: Fraction = 0.9  # smoothing of the training loss
    init_loss_margin: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0  # diverged if smoothed > init + margin after warmup
    spike_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 1.5  # a spike: loss > factor * best smoothed loss
    spike_patience: PositiveInt = 50  # steps a spike may last before it counts as divergence
    explode_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] | None = 3.0  # loss > factor * init loss: diverged at once, even in warmup; None disables
