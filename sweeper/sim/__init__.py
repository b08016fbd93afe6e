"""The simulation wing: the real controller on planted or recorded loss surfaces, without training.

- `surface`: a planted surface file (`Surface`: per method a planted law or a recorded table, the
  virtual pool, the clock) and the losses it reports;
- `trial`: the simulated trial (a Ray Tune trainable that sleeps and reports the surface's losses);
- `devices`, `clock`: the virtual pool's GPUs (placement, time-slicing, the busy log and its figures)
  and the pool's clock (simulated time that runs at 1× while the pool waits for the orchestration);
- `simulation`: `sweeper launch --simulate` (loading a surface, marking the plan, the trials'
  payload) and `GpuProbe` (GPU-slot utilisation of the virtual pool);
- `check`: a simulated sweep against its planted truth (`sweeper bench simcheck`);
- `prior`: `prior: extrapolate` on planted methods (`sweeper bench prior`);
- `synthetic`: a synthetic sweep written with the real `StoreWriter` (the dashboard's fixtures and
  its benchmark's large store).

Reached through `sweeper launch --simulate` and `sweeper bench ...`. Sits above `tracking` and below
`run` (the driver runs a simulation's trials): it never imports `sweeper.run`, the dashboards or the
command line.
"""
