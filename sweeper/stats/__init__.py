"""Pure statistics (numpy and scipy, nothing else of the project): estimates with bootstrap intervals
(`estimate`), the log-log power law `y = c·x^b` (`loglog`) and the optimal-LR law with its prediction
interval (`lrlaw`).

Why a leaf beside `sweeper.core` and not inside `sweeper.analysis`: two layers use one implementation
of this math. The planner's prior (`sweeper.search.prior`, `prior: extrapolate`) centres a new size's
first grid on the LR law of the smaller sizes *before* they are stored, and `sweeper fit`
(`sweeper.analysis.fits`) reports the same law over stored results. `search` sits below `records` and
`analysis`, so the shared math must sit below `search`; it reads no sweep, no file and no id, so it
needs nothing above it either.
"""
