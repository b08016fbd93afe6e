"""Power-law fits of sweep results (pure numpy/scipy; neither Ray nor torch)."""
