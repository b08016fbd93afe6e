"""The data path's throughput, measured: the code behind `sweeper bench --data`.

A training step needs one batch of `batch x (seq_len + 1)` tokens, whatever the stack size. This
measures, on the trial's own stream (`TokenSource.train_stream`, seed 0), for `batches` batches
after one untimed batch that opens the files:

1. read + collate: `next_batch()` on the training thread, as it was before prefetching (memory-map
   gather, or tokenizing documents for the `hf` source);
2. host to device (CUDA only): a pinned batch copied with `non_blocking=True`, synchronized;
3. the whole path as a trial runs it: the `Prefetcher` (background thread, pinned memory on CUDA)
   drained as fast as the consumer can take batches and copy them to the device.

Each figure is in training tokens per second (`batch x seq_len` per batch), the unit of a step's
throughput, so `pipeline / step` is how many times faster the data path can feed the GPU than the
step consumes: below 1 the GPU waits for data. The prefetch thread shares the CPUs with the
training loop's own host work (kernel launches), so keep that ratio well above 1.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from trials.config import DataConfig
from trials.data import open_source
from trials.data.prefetch import Prefetcher
from trials.train import pinned_tensor


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_data_path(data: DataConfig, batch: int, seq_len: int, device: torch.device, batches: int = 40) -> dict[str, Any]:
    """Tokens/s of each stage of the data path (see the module docstring)."""
    source = open_source(data)
    tokens = batch * seq_len * batches
    stream = source.train_stream(batch, seq_len, 0)
    stream.next_batch()
    start = time.perf_counter()
    for _ in range(batches):
        stream.next_batch()
    read_s = time.perf_counter() - start

    copy_s = None
    if device.type == "cuda":
        host = pinned_tensor(stream.next_batch())
        host.to(device, non_blocking=True)
        _sync(device)
        start = time.perf_counter()
        for _ in range(batches):
            host.to(device, non_blocking=True)
        _sync(device)
        copy_s = time.perf_counter() - start

    convert = pinned_tensor if device.type == "cuda" else torch.from_numpy
    prefetcher: Prefetcher[torch.Tensor] = Prefetcher(source.train_stream(batch, seq_len, 0), convert=convert)
    prefetcher.next_batch()
    start = time.perf_counter()
    for _ in range(batches):
        prefetcher.next_batch().to(device, non_blocking=True)
    _sync(device)
    pipeline_s = time.perf_counter() - start
    prefetcher.close()
    return {
        "source": source.description,
        "batches": batches,
        "tokens_per_batch": batch * seq_len,
        "read_collate_tokens_per_s": tokens / read_s,
        "host_to_device_tokens_per_s": tokens / copy_s if copy_s else None,
        "pipeline_tokens_per_s": tokens / pipeline_s,
        "read_collate_ms_per_batch": 1000 * read_s / batches,
        "pipeline_ms_per_batch": 1000 * pipeline_s / batches,
    }
