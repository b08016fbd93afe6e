"""A trial's state on disk: checkpoints written and restored (exact resume), and each member's final weights.

`TrialState` is one part of `trials.train.Trial`. A checkpoint (`trials.checkpoint`) holds the stacked
model, the optimizer, the data position, the divergence monitor, every per-member record, the weights of
members dropped from the stack and the random states, keyed by the trial's `resume_key` and its corpus
fingerprint: a checkpoint of another trial or another corpus is refused. The export writes a member's
weights as safetensors with a `config.json`, as a sweep keeps its cells' best weights.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models import build_model
from models.config import ModelConfig
from trials.checkpoint import load_checkpoint, save_checkpoint
from trials.compiled import compile_regions
from trials.engine import Execution
from trials.errors import TrialInputError
from trials.trial_report import TrialReports


class TrialState(TrialReports):
    """Checkpoint, resume and export of `trials.train.Trial` (the attributes below are set by its constructor;
    the results it exports come from `TrialReports`)."""

    model_cfg: ModelConfig
    device: torch.device
    model: Any  # the stacked model (`models.build_model`)
    opt: Any  # the stacked optimizer (`trials.engine.make_optimizer`)
    stream: Any  # the training batches (a `Prefetcher`, or the ViT's image stream)
    execution: Execution
    slots: list[int]
    frozen: dict[int, dict[str, torch.Tensor]]
    _saved_step: int | None

    def _reset_device_step(self) -> None:
        """Defined by `trials.train.Trial`: the deferred device step follows a rebuilt stack."""
        raise NotImplementedError

    def member_weights(self, m: int) -> dict[str, torch.Tensor]:
        if m in self.slots:
            return self.model.member_state_dict(self.slots.index(m))
        return self.frozen[m]

    def export(self, root: Path, *, best_only: bool = False) -> None:
        """Each member's final weights: `root/<i>/model.safetensors` + `config.json`. With `best_only`, only
        the member with the lowest objective among those that finished ok (the only one that can be its
        cell's best: a sweep keeps each cell's best weights, and a 1.3B member is 5 GB)."""
        from safetensors.torch import save_file

        from trials.data.cache import write_atomic

        results = self.results()
        chosen = range(len(results))
        if best_only:
            ok = [m for m, r in enumerate(results) if r.outcome == "ok" and r.objective is not None]
            chosen = [min(ok, key=lambda m: results[m].objective)] if ok else []  # type: ignore[arg-type, return-value]
        for m in chosen:
            result = results[m]
            folder = root / str(m)
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".model.safetensors.{os.getpid()}.tmp"
            save_file({n: t.detach().cpu().contiguous() for n, t in self.member_weights(m).items()}, str(tmp))
            tmp.replace(folder / "model.safetensors")
            config = {
                "format": "layerrope-sweeper",
                "model": self.spec.model.to_dict(),
                "lr": result.lr,
                "point_id": result.point_id,
                "outcome": result.outcome,
                "loss": result.loss,
                "steps": result.steps,
                "seed": self.spec.seed,
                "corpus": result.corpus,
            }
            write_atomic(folder / "config.json", json.dumps(config, indent=2).encode())

    def save(self, root: Path) -> Path:
        extra = {"rng/torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            extra["rng/cuda"] = torch.cuda.get_rng_state(self.device)
        for m, weights in self.frozen.items():
            extra.update({f"frozen/{m}/{n}": t for n, t in weights.items()})
        np_state: tuple[Any, ...] = np.random.get_state(legacy=True)  # type: ignore[assignment]
        state = {
            "resume_key": self.spec.resume_key(),
            "step": self.step,
            "steps": self.steps,
            "slots": self.slots,
            "optimizer_step": self.opt.step_count,
            "data": self.stream.state(),
            "divergence": self.monitor.state_dict(),
            "train_seconds": self.train_seconds,
            "eval_loss": self.eval_loss,
            "eval_loss_se": self.eval_loss_se,
            "eval_batch_losses": self.eval_batch_losses,
            "eval_step": self.eval_step,
            "accuracy": self.accuracy,
            "loop_losses": self.loop_losses,
            "lambada": self.lambada,
            "last_loss": self.last_loss,
            "interval": [self._interval_sum, self._interval_n],
            "frozen": sorted(self.frozen),
            "rng_python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
            "rng_numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
            "corpus": self.source.fingerprint,
        }
        tensors = {"model": self.model.state_dict(), "optimizer": self.opt.state_tensors(), "extra": extra}
        self._saved_step = self.step
        return save_checkpoint(root, self.step, tensors, state)

    def restore(self, path: Path) -> None:
        tensors, state = load_checkpoint(path)
        if state["resume_key"] != self.spec.resume_key():
            raise TrialInputError(f"{path}: this checkpoint belongs to another trial (different spec); use another checkpoint_dir")
        if state["corpus"] != self.source.fingerprint:
            raise TrialInputError(f"{path}: written on corpus {state['corpus']}, but the data is now {self.source.fingerprint}")
        self.slots = list(state["slots"])
        if len(self.slots) != self.spec.stack:
            self.model = build_model(self.model_cfg, stack=len(self.slots), seed=self.spec.seed, device=self.device)
            if self.execution.compile:
                compile_regions(self.model)
            self.opt.compact(list(range(len(self.slots))), self.model.param_specs())
        self.model.load_state_dict({k: v.to(self.device) for k, v in tensors["model"].items()})
        self.opt.load_state_tensors({k: v.to(self.device) for k, v in tensors["optimizer"].items()}, state["optimizer_step"])
        self.stream.load_state(state["data"])
        self.monitor.load_state_dict(state["divergence"])
        if hasattr(self.opt, "active"):  # flat optimizer: diverged members still in the stack stay masked
            self.opt.active.copy_(torch.tensor([not self.monitor.members[m].diverged for m in self.slots], device=self.device))
        self._reset_device_step()
        self.step, self.train_seconds = int(state["step"]), float(state["train_seconds"])
        self._saved_step = self.step
        self.eval_loss, self.eval_step, self.accuracy = state["eval_loss"], state["eval_step"], state["accuracy"]
        self.eval_loss_se = state.get("eval_loss_se") or [None] * len(self.eval_loss)  # absent in older checkpoints
        self.eval_batch_losses = state.get("eval_batch_losses") or [None] * len(self.eval_loss)
        self.loop_losses = state.get("loop_losses") or [None] * len(self.eval_loss)
        self.lambada = state.get("lambada") or [None] * len(self.eval_loss)
        self.last_loss = state["last_loss"]
        self._interval_sum, self._interval_n = state["interval"]
        extra = tensors["extra"]
        self.frozen = {
            m: {key.split("/", 2)[2]: t for key, t in extra.items() if key.startswith(f"frozen/{m}/")} for m in state["frozen"]
        }
        torch.set_rng_state(extra["rng/torch"])
        if "rng/cuda" in extra and self.device.type == "cuda":
            torch.cuda.set_rng_state(extra["rng/cuda"], self.device)
        version, internal, gauss = state["rng_python"]
        random.setstate((version, tuple(internal), gauss))
        kind, keys, pos, has_gauss, cached = state["rng_numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
