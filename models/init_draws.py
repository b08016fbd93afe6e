"""The draws of the decoder's init rules (`models.llama`, `models.looped`): one member's tensor from a
seeded generator, in fp32 on the generator's device, copied into every stack member by the caller.

- `normal(shape, std, g)`: N(0, std) (the default rule);
- `truncated_normal(shape, std, g)`: N(0, std) truncated to [-3 std, 3 std] (inverse-CDF sampling,
  `torch.nn.init.trunc_normal_`): the embeddings of `init: scaled_zero_orthogonal` and the looped model's
  `state_init: like_weights`;
- `scaled_orthogonal(shape, std, g)`: a (semi-)orthogonal `[in, out]` matrix (orthonormal rows when
  in <= out, orthonormal columns otherwise; `torch.nn.init.orthogonal_`, a QR of a Gaussian) times
  `std * sqrt(max(in, out))`, so that its entries have RMS `std` and its Frobenius norm is the expected
  norm of the N(0, std) matrix it replaces, with every singular value equal to `std * sqrt(max(in, out))`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TRUNCATION = 3.0  # truncated draws are cut at +-3 std


def normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> Tensor:
    return torch.empty(shape, dtype=torch.float32, device=generator.device).normal_(0.0, std, generator=generator)


def truncated_normal(shape: tuple[int, ...], std: float, generator: torch.Generator,
                     dtype: torch.dtype = torch.float32) -> Tensor:
    out = torch.empty(shape, dtype=dtype, device=generator.device)
    return torch.nn.init.trunc_normal_(out, 0.0, std, -TRUNCATION * std, TRUNCATION * std, generator=generator)


def scaled_orthogonal(shape: tuple[int, int], std: float, generator: torch.Generator) -> Tensor:
    out = torch.empty(shape, dtype=torch.float32, device=generator.device)
    return torch.nn.init.orthogonal_(out, gain=std * math.sqrt(max(shape)), generator=generator)
