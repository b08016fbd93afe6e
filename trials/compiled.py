"""Compile caches that cannot fail a trial: every compiled function is private to one model or one
optimizer layout, with a deliberate recompile limit and static shapes.

Dynamo stores compiled code on the Python *code object* it traced, and counts recompilations per
code object: `torch.compile(Block.forward)` in one trial and in the next share one cache. In a Ray
actor that trains trial after trial (`reuse_actors`), every new stack size K (a member dropped after
divergence), depth and scheme added entries to that one cache until `recompile_limit` (8) was hit;
then a `fullgraph=True` function (the optimizer update) raised `FailOnRecompileLimitHit` and the
blocks fell back to eager without a word.

Here each compiled function is a *private copy* of the Python function (`private_copy`: the same
bytecode in a new code object), so its cache belongs to the model or optimizer layout that made it
and is freed with it. What one copy can see is then bounded by construction:

- a model's blocks (`BLOCK_RECOMPILE_LIMIT`): one stack size K and one dtype; three input shapes at
  most: the micro-batch and a smaller last chunk at the training sequence length (the evaluation uses
  the same chunks), each with and without gradients (evaluation, a looped model's no-grad loops), and
  LAMBADA's chunk (`trials.lambada`: one padded length, the last chunk filled up), without gradients
  only: 5 shape and gradient cases; with and without autocast's weight cache (the deferred step
  disables it): 10; and up to four code paths through the block (a block with a value table and one
  without, `value_embeddings`, times Mix-LN's two wirings; or a ViT's drop path on and off): at most
  40 entries, under a limit of 64. A compiled Parcae-like looped trial with every one of these on CPU
  holds 14 (tests/trials/test_compile_caches.py); a new model (a dropped member, the next trial)
  starts a new copy;
- an optimizer layout (`OPTIMIZER_RECOMPILE_LIMIT`): one set of flat group buffers, always without
  gradients: one entry; `compact` (members dropped) builds the next layout with a new copy.

`dynamic=False` is deliberate: static shapes give the fastest kernels and what CUDA graphs need,
and the bounds above keep the number of shapes small. The limits are set on each `torch.compile`
call, not on the global config.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: entries one model's compiled block may hold (bounded by 5 shape-and-gradient cases x 2 autocast caches x 4 code
#: paths = 40, see the module docstring; above that, so that no reachable case meets it)
BLOCK_RECOMPILE_LIMIT = 64
#: the most entries the module docstring's analysis allows one model's compiled block (tested against a real trial)
BLOCK_ENTRIES_BOUND = 40
#: entries one optimizer layout's compiled update may hold (one is expected; more would be a bug, and a
#: `fullgraph` function past its limit raises rather than running eagerly)
OPTIMIZER_RECOMPILE_LIMIT = 4


def private_copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its own code object (same bytecode, constants, globals and closure): Dynamo's cache for
    it is its own and dies with it."""
    code = fn.__code__.replace()  # a new code object, equal to the original
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy


def compile_private(fn: Callable[..., Any], *, fullgraph: bool, recompile_limit: int,
                    options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """`torch.compile` of a private copy of `fn`, static shapes, with its own recompile limit (and inductor
    `options`, if any)."""
    return torch.compile(private_copy(fn), fullgraph=fullgraph, dynamic=False, recompile_limit=recompile_limit,
                         options=options)


def compile_regions(model: nn.Module) -> int:
    """Regional compilation: every block of `model.blocks` runs one compiled forward private to this model
    (one per block class). All blocks of a class run the same code and keep their per-layer constants in
    tensors, so one graph serves every layer and compile time does not grow with depth. Returns the
    number of blocks wrapped."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        return 0
    compiled: dict[type, Callable[..., Any]] = {}
    for block in blocks:
        kind = type(block)
        if kind not in compiled:
            compiled[kind] = compile_private(kind.forward, fullgraph=False, recompile_limit=BLOCK_RECOMPILE_LIMIT)
        block.forward = types.MethodType(compiled[kind], block)  # type: ignore[method-assign]
    return len(blocks)
