"""What one trial does: data, the training loop, divergence detection, stacked
multi-LR training, checkpoints. A trial trains K learning rates of one sweep cell
(method, model size, seed) as one stacked model and reports per-member metrics.
Runs with or without Ray (`trials.ray_entry` is the Ray Tune trainable).
"""
