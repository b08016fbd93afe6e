"""The γ probe: how the per-layer norm gains of a trained Transformer change with depth.

- `sweeper.analysis.gamma.layouts`: which tensors are per-layer norm gains, and their site (pure naming rules);
- `sweeper.analysis.gamma.checkpoints`: reading them from Hugging Face folders and this project's exports;
- `sweeper.analysis.gamma.stats`: the statistics (pure numpy/scipy): magnitude trends, LayerRoPE's
  schedule fit, cosine matrix, classical MDS and how well its arc orders the layers;
- `sweeper.analysis.gamma.report`: the results document written by `sweeper gamma` and read by
  `dashboards.gamma_figures`.
"""
