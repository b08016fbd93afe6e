"""Which points to train: the cells of a sweep (`planner`), the bracketing policy of one cell
(`bracketing`), a cell's first grid (`prior`; `priorsim` simulates priors), and replaying the search
on recorded grids (`replay`). Pure logic, tested directly."""
