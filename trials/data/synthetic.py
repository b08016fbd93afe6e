"""A tiny deterministic source for tests: a sparse random Markov chain over `synthetic_vocab`
tokens (each token has four possible successors), so a model can learn it and the loss falls
well below ln(vocab). Generated in memory from `data.seed`; the last `val_fraction` is held out.
"""

from __future__ import annotations

import numpy as np

from trials.config import DataConfig
from trials.data.base import ArrayTokenSource, seed_words

_SUCCESSORS = 4
_made: dict[tuple[int, int, int, float], ArrayTokenSource] = {}


def synthetic_source(cfg: DataConfig) -> ArrayTokenSource:
    key = (cfg.synthetic_vocab, cfg.synthetic_tokens, cfg.seed, cfg.val_fraction)
    if key not in _made:
        vocab, n = cfg.synthetic_vocab, cfg.synthetic_tokens
        rng = np.random.default_rng(seed_words(cfg.seed, vocab, n))
        successors = rng.integers(0, vocab, size=(vocab, _SUCCESSORS))
        # Skewed successor probabilities: some transitions much likelier than others.
        choice = rng.choice(_SUCCESSORS, size=n, p=[0.55, 0.25, 0.15, 0.05])
        tokens = np.empty(n, dtype=np.uint16 if vocab > 256 else np.uint8)
        current = int(rng.integers(0, vocab))
        for i in range(n):
            tokens[i] = current
            current = int(successors[current, choice[i]])
        cut = n - max(1, int(round(n * cfg.val_fraction)))
        _made[key] = ArrayTokenSource(
            tokens[:cut],
            tokens[cut:],
            vocab=vocab,
            fingerprint=f"synthetic:markov{_SUCCESSORS}:v{vocab}:n{n}:seed{cfg.seed}:val{cfg.val_fraction:g}",
            description=f"synthetic Markov source (vocab {vocab}, {n} tokens)",
        )
    return _made[key]
