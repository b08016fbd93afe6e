"""The controller: sweep schema, bracketing policy, Ray Tune wiring, ledger and store,
fits, and the `sweeper` command line. Pure-logic modules (schema, bracketing, fits)
import neither Ray nor torch.
"""

__version__ = "0.1.0"
