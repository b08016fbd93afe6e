"""Shared test fixtures. One local Ray instance serves every stream's Ray tests in a session.

Start-up of Ray costs 6-12 s on a 2-core machine and its processes take about 0.9 GB, so
tests must never call `ray.init` themselves: they ask for `ray_session` (it yields the
cluster's GCS address, which a subprocess can join with `--address`). Ray is started
lazily, only if some selected test asks for it.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# OpenMP's default spin-wait makes multi-threaded torch 10-25x slower when the cores are shared
# (pytest beside Ray workers on 2 cores); it must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs for the whole test session; yields its GCS address."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    address = ray.get_runtime_context().gcs_address
    yield address
    ray.shutdown()
