"""The training loop of one trial: K learning rates of one cell trained as one stacked model.

Every member starts from the same initial weights (`build_model(cfg, stack=K, seed)`) and sees
the same batches (one stream seeded by the data seed and the cell seed). Per step:

1. one batch feeds every member (read ahead on a background thread, into pinned memory on CUDA:
   `trials.data.prefetch`); `member_losses` gives each member's mean loss `[K]`;
2. the divergence monitor reads the K losses (one host sync per step); a member that has just
   diverged is masked for this step (no update, its gradient discarded);
3. backward on the sum of the members' losses (each member's gradient is then exactly that of
   a model trained alone); per-member clipping; stacked AdamW at the scheduled LR;
4. with `train.drop_diverged` (default) the stack is rebuilt without diverged members, so they
   cost no further compute (their last weights are kept on the CPU for export);
5. evaluation every `train.eval_every` steps and at the end, on fixed held-out batches that are
   the same for every member and every learning rate (mean loss and its standard error over the
   batches, `trials.noise`); checkpoints every `train.checkpoint_every` steps and at the end.

A member that finishes without diverging is `ok`, or `stalled` when its final evaluation loss is
not `divergence.stall_margin` nats below the loss of predicting every token by its training
frequency on the same eval batches (about the data's unigram entropy; the chance loss for
classification): it learned nothing else.

The trial stops when every member is diverged or has finished, or when `should_stop()` says so
(a checkpoint is written, and the unfinished members are reported as `failed`, "stopped").
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models import build_model, count_params, flops_per_token
from models.families.vit import vit_settings
from trials.checkpoint import latest_checkpoint
from trials.compiled import compile_regions
from trials.data import check_vocab, open_source
from trials.data.base import seed_words
from trials.data.prefetch import Prefetcher
from trials.determinism import set_deterministic
from trials.divergence import DivergenceMonitor
from trials.engine import DeviceStep, accumulate, make_optimizer, release_cached_memory, resolve_execution
from trials.errors import TrialInputError
from trials.evaluation import FinalTasks, evaluate_text, loop_counts
from trials.fused_loss import member_losses as fused_member_losses
from trials.model_setup import recipe_model, trial_family
from trials.noise import mean_and_se
from trials.schedule import LRSchedule, budget_count, total_steps
from trials.config import VisionConfig
from trials.spec import PointResult, StepReport, TrialSpec
from trials.trial_state import TrialState
from trials.vision import ClassificationBatches, open_image_data, top1_correct

Report = Callable[[StepReport], None]


def resolve_device(train_device: str) -> torch.device:
    if train_device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if train_device == "cuda" and not torch.cuda.is_available():
        raise TrialInputError("train.device: cuda requested, but torch sees no CUDA device (torch.cuda.is_available() is False)")
    return torch.device(train_device)


def resolve_autocast(train_dtype: str, device: torch.device) -> torch.dtype | None:
    """None: plain fp32. bf16 autocast by default on CUDA; fp32 on CPU."""
    if train_dtype == "fp32" or (train_dtype == "auto" and device.type != "cuda"):
        return None
    return torch.bfloat16


def data_order_seed(data_seed: int, cell_seed: int) -> int:
    """One seed for the batch order of a cell: every LR of the cell, in any trial, sees the same batches."""
    return int(np.random.SeedSequence(seed_words(data_seed, cell_seed)).generate_state(1)[0])


def pinned_tensor(batch: np.ndarray) -> torch.Tensor:
    """A batch in page-locked host memory: its copy to the GPU can overlap the step (`non_blocking`)."""
    return torch.from_numpy(batch).pin_memory()


class Trial(TrialState):
    """One trial, ready to run (or to resume from a checkpoint): built here, trained and evaluated by the loop
    below; its reports and results come from `trials.trial_report`, its checkpoints and export from
    `trials.trial_state`."""

    def __init__(self, spec: TrialSpec) -> None:
        self.spec = spec
        self.family = family = trial_family(spec.model, spec.data)
        train, cfg = spec.train, recipe_model(spec.model, spec.train)
        self.model_cfg = cfg  # the model as built: spec.model, with the ViT recipe's drop-path filled in
        self.source = open_source(spec.data)
        check_vocab(cfg.vocab, self.source)
        # The stall rule's baseline (cached with the corpus after the first trial); not needed without the rule.
        self.unigram = self.source.unigram_entropy() if spec.divergence.stall_margin is not None else None
        try:
            counts = count_params(cfg)
            self.flops_per_token = flops_per_token(cfg)
        except ValueError as exc:
            raise TrialInputError(f"model: {exc}") from None
        self.params, self.params_nonembed = counts["total"], counts["nonembed"]
        seq = family.tokens_per_sample(cfg)  # tokens per sequence, or per image (patches + class token) for the ViT
        self.steps = total_steps(train, seq, budget_count(train, counts))
        self.schedule = LRSchedule.from_config(train.schedule, self.steps)
        self.tokens_per_step = train.batch_size * seq
        self.device = resolve_device(train.device)
        self.autocast = resolve_autocast(train.dtype, self.device)
        self.execution = resolve_execution(train, self.device)
        if train.micro_batch is not None and not family.micro_batch:
            raise TrialInputError(f"train.micro_batch: not for the {family.name} family (its drop-path masks are drawn per "
                                  "batch); leave it unset")
        if train.threads:
            torch.set_num_threads(train.threads)
        if train.deterministic:  # process-wide; trials.ray_entry sets it per trial in a reused actor
            set_deterministic(True)

        k = spec.stack
        try:
            self.model = build_model(cfg, stack=k, seed=spec.seed, device=self.device)
        except ValueError as exc:
            raise TrialInputError(f"model: {exc}") from None
        self.slots = list(range(k))  # member index held by each slot of the current stack
        if self.execution.compile:
            compile_regions(self.model)
        self.opt = make_optimizer(self.model, spec.lrs, train, self.execution, steps=self.steps)
        self.device_step: DeviceStep | None = None
        if self.execution.deferred:
            self.device_step = DeviceStep(
                self._losses, self.opt, self.autocast, spec.divergence.explode_factor, graphs=self.execution.cuda_graphs,
                micro_batch=train.micro_batch,
            )
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, [K] losses on the device) not yet observed
        self.vision: ClassificationBatches | None = None
        if family.requires_image_data:
            self._open_images(spec)
        else:
            # Read ahead on a background thread, into pinned memory on CUDA (see trials.data.prefetch).
            self.stream = Prefetcher(
                self.source.train_stream(train.batch_size, cfg.seq_len, data_order_seed(spec.data.seed, spec.seed)),
                convert=pinned_tensor if self.device.type == "cuda" else torch.from_numpy,
            )
            if self.device_step is not None:
                self.device_step.quiet = self.stream.paused  # no pinning from the prefetch thread during a capture
            self.eval_data = [
                torch.from_numpy(b).to(self.device) for b in self.source.eval_batches(train.eval_batches, train.batch_size, cfg.seq_len)
            ]
        self.loop_counts = loop_counts(family, cfg)  # a looped model's eval_loops, when it lists several
        self.tasks = FinalTasks(spec.eval, spec.data, cfg, family, rows=self.eval_chunk)  # eval.tasks (LAMBADA)
        self.monitor = DivergenceMonitor(spec.divergence, k, self.schedule.warmup, self.steps)
        # The stall rule's baseline: the frequency-only loss on exactly the batches every evaluation uses.
        self.unigram_loss = self._frequency_only_loss() if self.unigram is not None else None
        self.step = 0
        self.train_seconds = 0.0
        self.eval_loss: list[float | None] = [None] * k
        self.eval_loss_se: list[float | None] = [None] * k
        self.eval_batch_losses: list[list[float] | None] = [None] * k  # the last evaluation's per-batch means
        self.eval_step: list[int | None] = [None] * k
        self.evaluations = 0  # evaluations run by this object (not restored from a checkpoint)
        self.accuracy: list[float | None] = [None] * k
        self.loop_losses: list[dict[str, float] | None] = [None] * k  # the last evaluation's, by loop count
        self.lambada: list[float | None] = [None] * k  # LAMBADA perplexity, from the final evaluation
        self.last_loss: list[float | None] = [None] * k
        self._interval_sum = [0.0] * k
        self._interval_n = [0] * k
        self.frozen: dict[int, dict[str, torch.Tensor]] = {}  # weights of members dropped from the stack
        self.stopped = False
        self._saved_step: int | None = None

    def _open_images(self, spec: TrialSpec) -> None:
        """ViT: the image stream, the held-out images and the batch maker (DeiT's recipe, `trials.vision`)."""
        image, train = vit_settings(self.model_cfg), spec.train
        data = open_image_data(self.source, (train.vision or VisionConfig()).resolved(), image_size=image.image_size,
                               channels=image.channels, classes=self.model_cfg.vocab, batch_size=train.batch_size,
                               eval_batches=train.eval_batches, seed=data_order_seed(spec.data.seed, spec.seed),
                               device=self.device, micro_batch=train.micro_batch)
        self.vision, self.stream, self.eval_data = data.batches, data.stream, data.eval_data

    def _frequency_only_loss(self) -> float:
        """The eval loss of a model that predicts by training frequencies alone (see `trials.data.unigram`)."""
        assert self.unigram is not None
        if self.vision is not None:
            labels = np.concatenate([y.cpu().numpy() for _, y in self.eval_data])
            return self.unigram.cross_entropy(labels, self.spec.model.vocab)
        targets = np.concatenate([b[:, 1:].cpu().numpy().reshape(-1) for b in self.eval_data])
        return self.unigram.cross_entropy(targets, self.spec.model.vocab)

    # ---- the loop ------------------------------------------------------------------------------

    @property
    def active(self) -> list[int]:
        return [m for m in self.slots if not self.monitor.members[m].diverged]

    @property
    def finished(self) -> bool:
        return self.step >= self.steps or not self.active

    def run(
        self,
        *,
        report: Report | None = None,
        checkpoint_dir: str | Path | None = None,
        export_dir: str | Path | None = None,
        should_stop: Callable[[], bool] | None = None,
        export_best_only: bool = False,
    ) -> list[PointResult]:
        ckpt_root = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if ckpt_root is not None and (found := latest_checkpoint(ckpt_root)) is not None:
            self.restore(found)
        train = self.spec.train
        while not self.finished:
            if should_stop is not None and should_stop():
                self.stopped = True
                break
            started = time.perf_counter()
            self.train_step()
            self.step += 1
            if self._pending and self.sync_due(ckpt_root is not None):
                self.sync()
            evaluate = self.step % train.eval_every == 0 or self.step == self.steps
            if evaluate and self.active:
                self.evaluate()
            self.train_seconds += time.perf_counter() - started
            if self.finished:
                break
            written = None
            if ckpt_root is not None and self.step % train.checkpoint_every == 0:
                written = self.save(ckpt_root)
            if report is not None and (self.step % train.report_every == 0 or evaluate or written):
                report(self.step_report(done=False, checkpoint=written))
        self.sync()  # stopped between two reads: observe what was trained
        if self.finished and self.active and self.eval_step[self.active[0]] != self.step:
            started = time.perf_counter()
            self.evaluate()  # e.g. resumed from a checkpoint of a finished trial saved before its evaluation
            self.train_seconds += time.perf_counter() - started
        written = self.save(ckpt_root) if ckpt_root is not None and self._saved_step != self.step else None
        if export_dir is not None and self.finished:
            self.export(Path(export_dir), best_only=export_best_only)
        if isinstance(self.stream, Prefetcher):
            self.stream.close()  # its read-ahead thread ends with the run
        results = self.results()
        if report is not None:  # last: under Ray Tune the trial may end inside this call
            last = self.step_report(done=self.finished, checkpoint=written)
            last.results = results
            report(last)
        return results

    def sync_due(self, checkpoints: bool) -> bool:
        """Deferred mode reads the losses every `sync_every` steps and wherever the host needs the
        divergence state: before an evaluation, a report, a checkpoint, and at the end."""
        train, step = self.spec.train, self.step
        return (
            step % self.execution.sync_every == 0 or step >= self.steps or step % train.eval_every == 0
            or step % train.report_every == 0 or (checkpoints and step % train.checkpoint_every == 0)
        )

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)

    def _losses(self, inputs: torch.Tensor, targets: Any, **extra: Any) -> torch.Tensor:
        """The `[K]` training losses of the current stack (fused head + loss where it applies)."""
        if self.execution.fused_loss:
            return fused_member_losses(self.model, inputs, targets, **extra)
        return self.model.member_losses(inputs, targets, **extra)

    def _observe(self, step: int, values: list[float]) -> None:
        """Give the divergence monitor one step's training losses (one per slot of the stack)."""
        observed = {m: values[i] for i, m in enumerate(self.slots) if not self.monitor.members[m].diverged}
        self.monitor.observe(step, observed)
        for m, v in observed.items():
            self.last_loss[m] = v
            if math.isfinite(v):
                self._interval_sum[m] += v
                self._interval_n[m] += 1

    def sync(self) -> None:
        """Deferred mode: read the collected losses back (one host sync), run the divergence rules over
        them step by step, then mask or drop members that diverged."""
        if not self._pending:
            return
        steps = [step for step, _ in self._pending]
        values = torch.stack([losses for _, losses in self._pending]).cpu().tolist()
        self._pending.clear()
        for step, row in zip(steps, values):
            self._observe(step, row)
        alive = [not self.monitor.members[m].diverged for m in self.slots]
        if all(alive):
            return
        self.opt.active.copy_(torch.tensor(alive, device=self.device) & self.opt.active)
        if any(alive) and self.spec.train.drop_diverged:
            self.drop_diverged()

    def train_step(self) -> None:
        extra: dict[str, Any] = {}
        if self.vision is not None:
            images, labels = self.stream.next_batch()
            inputs, targets = self.vision.train_inputs(images, labels, self.step)
            extra["drop_seed"] = self.vision.drop_seed(self.step)  # drop-path decisions: a pure function of the step
            extra.update(self.vision.loss_options(targets))
        else:
            batch = self.stream.next_batch().to(self.device, non_blocking=True)
            inputs, targets = batch[:, :-1], batch[:, 1:]
            if self.family.samples_loops:  # the step's loop count(s): a pure function of (seed, step)
                extra["loops"] = self.model.training_loops(self.step, self.spec.seed, inputs.shape[0])
        if self.device_step is not None:  # deferred: nothing is read back here
            losses = self.device_step.run(inputs, targets, extra, self.schedule.factor(self.step))
            self._pending.append((self.step, losses))
            return
        if self.spec.train.micro_batch is None:
            with self._autocast():
                losses = self._losses(inputs, targets, **extra)
            self._observe(self.step, losses.detach().float().cpu().tolist())
        else:  # forward and backward per micro-batch (activations of one at a time), then the same step
            losses = accumulate(self._losses, inputs, targets, extra, self.spec.train.micro_batch, self._autocast)
            self._observe(self.step, losses.cpu().tolist())
        alive = [not self.monitor.members[m].diverged for m in self.slots]
        if not any(alive):
            self.opt.zero_grad()
            return
        if self.spec.train.micro_batch is None:
            losses.sum().backward()
        mask = None if all(alive) else torch.tensor(alive, device=self.device)
        self.opt.step(self.schedule.factor(self.step), active=mask)
        self.opt.zero_grad()
        if not all(alive) and self.spec.train.drop_diverged:
            self.drop_diverged()

    def drop_diverged(self) -> None:
        """Rebuild the stack with the surviving members only (their weights and AdamW moments carried over)."""
        keep = [i for i, m in enumerate(self.slots) if not self.monitor.members[m].diverged]
        for i, m in enumerate(self.slots):
            if i not in keep:
                self.frozen[m] = {n: t.to("cpu") for n, t in self.model.member_state_dict(i).items()}
        model = build_model(self.model_cfg, stack=len(keep), seed=self.spec.seed, device=self.device)
        for j, i in enumerate(keep):
            model.load_member_state_dict(j, self.model.member_state_dict(i))
        if self.execution.compile:
            compile_regions(model)
        self.opt.compact(keep, model.param_specs())
        self.model = model
        self.slots = [self.slots[i] for i in keep]
        self._reset_device_step()

    def _reset_device_step(self) -> None:
        """The device step follows the stack: new buffers, the slots' initial losses, a new graph."""
        if self.device_step is not None:
            self.device_step.reset(self.opt, [self.monitor.members[m].init_loss for m in self.slots])

    @property
    def eval_chunk(self) -> int:
        """Sequences per evaluation forward: a training micro-batch (the whole batch without one), so that an
        evaluation never holds more than a training micro-step does."""
        return self.spec.train.micro_batch or self.spec.train.batch_size

    @torch.no_grad()
    def evaluate(self) -> None:
        """Mean held-out loss of every member in the stack (and top-1 accuracy for `objective: error`; a looped
        model's loss at each of its `eval_loops`), in chunks of `eval_chunk` sequences (`trials.evaluation`);
        at the last step, the tasks of `eval.tasks` too (LAMBADA)."""
        if self.vision is not None:
            return self._evaluate_images()
        self.model.eval()
        self.evaluations += 1
        result = evaluate_text(self.model, self.eval_data, chunk=self.eval_chunk, autocast=self._autocast,
                               accuracy=self.spec.train.objective == "error", counts=self.loop_counts)
        lambada = self.tasks.lambada_perplexity(self.model, self._autocast) if self.tasks and self.step >= self.steps else None
        self.model.train()
        release_cached_memory(self.device)
        self._record_evaluation(result.per_batch, result.sizes, result.accuracy)
        for i, m in enumerate(self.slots):
            if not self.monitor.members[m].diverged:
                self.loop_losses[m] = result.loop_losses(i)
                self.lambada[m] = lambada[i] if lambada is not None else None

    def _record_evaluation(self, per_batch: list[list[float]], sizes: list[int] | None, accuracy: list[float] | None) -> None:
        """Store each slot's mean loss, its standard error over the batches (`trials.noise`), the batch
        means themselves and the accuracy; a non-finite loss diverges."""
        for i, m in enumerate(self.slots):
            if self.monitor.members[m].diverged:
                continue
            loss, se = mean_and_se(per_batch[i], sizes)
            self.eval_loss[m], self.eval_loss_se[m], self.eval_step[m] = loss, se, self.step
            self.eval_batch_losses[m] = per_batch[i]
            self.accuracy[m] = accuracy[i] if accuracy is not None else None
            if not math.isfinite(loss):
                self.monitor.force(m, self.step, f"non-finite: evaluation loss is {loss} at step {self.step}")

    @torch.no_grad()
    def _evaluate_images(self) -> None:
        """ViT: mean cross-entropy (no smoothing) and top-1 accuracy over the held-out images."""
        self.model.eval()
        self.evaluations += 1
        batch_losses, sizes = [], []  # [K] mean loss of each batch, and its number of images
        correct = torch.zeros(len(self.slots), device=self.device)
        for inputs, labels in self.eval_data:
            with self._autocast():
                logits = self.model(inputs).float()  # [K, B, classes]
            k, batch, classes = logits.shape
            flat = logits.reshape(k * batch, classes)
            losses = torch.nn.functional.cross_entropy(flat, labels.repeat(k), reduction="none").view(k, batch)
            batch_losses.append(losses.mean(dim=1))
            sizes.append(batch)
            correct += top1_correct(logits, labels)
        self.model.train()
        per_batch = torch.stack(batch_losses).double().cpu().T.tolist()
        accuracy = (correct / sum(sizes)).cpu().tolist()
        release_cached_memory(self.device)
        self._record_evaluation(per_batch, sizes, accuracy)
