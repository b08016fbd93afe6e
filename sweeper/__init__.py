"""The controller: the sweep file (`spec`), which points to train (`search`), running a sweep on
Ray Tune (`run`), what a sweep keeps (`records`), what is computed from it (`analysis`), and the
`sweeper` command line (`cli`, `commands`). Only `run` (and the commands that use it) imports Ray;
nothing here imports torch at module level.
"""

__version__ = "0.1.0"
