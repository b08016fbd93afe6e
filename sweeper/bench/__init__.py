"""The benchmark wing: every harness that measures (throughput of a trial, the networks alone, the
data path, memory, the dashboard, the GPU suite and its worker, fit coverage, the built-in corpus,
a simulated sweep's readers), and the throughput cache's writer. Reached through `sweeper bench ...`
only; nothing below the command line imports it."""
