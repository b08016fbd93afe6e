"""The LR search: which learning rates a cell tries (bracketing, priors), and replaying it on recorded grids."""
