"""Evaluation noise: the standard error of an evaluation's mean loss over its batches (pure Python).

An evaluation averages the loss over `eval_batches` fixed held-out batches. Its standard error,
estimated from the spread of the batch means, says how much of a difference between two
evaluations (two learning rates, two depths) the choice of held-out batches alone could make.

With batch means `m_b` over `n_b` items each (`N` items in all) the evaluation's loss is the
item-weighted mean `m = sum n_b m_b / N`, and its standard error is
`sqrt(n / (n - 1) * sum (n_b / N)^2 (m_b - m)^2)` over the `n` batches: for equal batches the
familiar `stdev(m_b) / sqrt(n)`. One batch has no spread: the error is unknown (None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean_and_se(batch_means: Sequence[float], sizes: Sequence[float] | None = None) -> tuple[float, float | None]:
    """(mean, standard error of the mean) of per-batch mean losses, weighted by batch size."""
    n = len(batch_means)
    if n == 0:
        raise ValueError("no evaluation batches")
    weights = [1.0] * n if sizes is None else [float(s) for s in sizes]
    if len(weights) != n:
        raise ValueError(f"{n} batch means but {len(weights)} batch sizes")
    total = sum(weights)
    mean = sum(w * m for w, m in zip(weights, batch_means)) / total
    if n < 2 or not math.isfinite(mean):
        return mean, None
    variance = n / (n - 1) * sum((w / total) ** 2 * (m - mean) ** 2 for w, m in zip(weights, batch_means))
    return mean, math.sqrt(variance)
