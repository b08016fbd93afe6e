"""The small sweep and planted surface that the simulated-launch tests run (tests/sweeper/sim/test_launch.py,
tests/sweeper/records/test_throughput.py): two methods, depths 2 and 4, CPU-only trials at a planted rate."""

from __future__ import annotations

SWEEP = """\
name: {name}
output: {out}
methods: [pre, post]
model: {{width: 32, heads: 2, depths: [2, 4], seq_len: 16, vocab: 256}}
data: {{source: synthetic}}
train: {{steps: 200, batch_size: 4, report_every: 20, eval_every: 100, checkpoint_every: 100}}
lr: {{center: 1.0e-2, points: 3, factor: 2.0, refine: vertex, bounds: [1.0e-5, 1.0], max_points: 8}}
resources: {{cpu: 1}}
stack: 3
concurrency: 2
"""

#: the trials' training rate (FLOP/s per CPU): a 3-stack trial of depth 4 sleeps ~0.3 s
PLANTED_FLOPS = 2.0e9

#: pre's planted law: lr* = 0.02·x^-0.5, no noise
PRE = "{E: 2.0, A: 1.0, alpha: 0.5, lr_k: 0.02, lr_b: -0.5, c: 0.05, cliff: 4.0}"


def planted_surface(post: str) -> str:
    """The planted surface, with `post`'s entry (a law, or a recorded table) as given."""
    return f"""\
name: planted
cpu_throughput: {PLANTED_FLOPS:.1e}
time_compression: 1
min_report_seconds: 0.2
noise: 0.0
methods:
  pre:  {PRE}
  post: {post}
"""
