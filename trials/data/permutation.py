"""A seeded permutation of `range(n)` that maps any index in O(1) time and memory.

A corpus prepared by `sweeper data prepare` may hold billions of tokens, tens of millions of
training windows: a `numpy` permutation of them would cost hundreds of MB per trial process (and
64 trial processes share a node). `IndexPermutation` instead computes `perm(i)` on demand:

- a balanced Feistel network over `2h` bits (the smallest even bit count with `2^(2h) >= n`), six
  rounds, each round's function a SplitMix64 finalizer of the right half mixed with a round key;
  a Feistel network is a bijection of `[0, 2^(2h))` whatever its round function;
- cycle walking: an output `>= n` is encrypted again until it falls in `[0, n)`, which keeps the map
  a bijection of `[0, n)` (the domain is at most 4n, so a few extra rounds on average).

The round keys come from `np.random.SeedSequence(key words)`: the same words give the same
permutation on every machine and numpy version.
"""

from __future__ import annotations

import numpy as np

_ROUNDS = 6
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (uint64 arithmetic wraps)."""
    z = z ^ (z >> np.uint64(30))
    z = z * _MIX1
    z = z ^ (z >> np.uint64(27))
    z = z * _MIX2
    return z ^ (z >> np.uint64(31))


class IndexPermutation:
    """`perm(indices)`: the images of `indices` (any int array with values in `[0, n)`) under a
    permutation of `range(n)` fixed by `key` (a list of non-negative 32-bit words)."""

    def __init__(self, n: int, key: list[int]) -> None:
        if n < 1:
            raise ValueError(f"a permutation of {n} elements")
        self.n = n
        bits = max(2, int(n - 1).bit_length())
        self.half = np.uint64((bits + 1) // 2)
        self.mask = np.uint64((1 << int(self.half)) - 1)
        self.keys = [np.uint64(k) for k in np.random.SeedSequence(key).generate_state(_ROUNDS, dtype=np.uint64)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            left, right = right, left ^ (_mix(right ^ k) & self.mask)
        return (left << self.half) | right

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        x = np.asarray(indices, dtype=np.uint64)
        if x.size and (int(x.max()) >= self.n):
            raise IndexError(f"index {int(x.max())} out of range for a permutation of {self.n}")
        with np.errstate(over="ignore"):
            y = self._encrypt(x)
            outside = y >= np.uint64(self.n)
            while outside.any():  # cycle walking: stays within x's cycle, which holds x itself (< n)
                y[outside] = self._encrypt(y[outside])
                outside = y >= np.uint64(self.n)
        return y.astype(np.int64)
