"""`sweeper doctor` on a Ray cluster: one task per alive node, pinned to it (node-affinity scheduling,
no CPU asked so that busy nodes answer too), each running `sweeper.run.nodes.probe`; and the same check
that `sweeper launch --address` runs before its first trial.

Without an address, the local machine is checked in the command's process, without Ray
(`sweeper.run.nodes.check_local`).
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sweeper.core.errors import UserError
from sweeper.run.nodes import Report, probe, report
from sweeper.run.ray_address import check_address, token_auth_if_available
from trials.storage import Storage

NODE_TIMEOUT_S = 120.0


class ClusterNotReady(UserError):
    """A node cannot reach the sweep's storage: exit code 1 (fix the cluster, launch again)."""

    exit_code = 1


def join(address: str) -> None:
    """Join the cluster at `address` (a `ray://` one is refused), with its token when one is at hand."""
    check_address(address)
    token_auth_if_available()
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:
        raise UserError(f"--address {address}: cannot connect ({type(exc).__name__}: "
                        f"{(str(exc).splitlines() or [''])[0]}); is the cluster up (`ray status`), and is its auth "
                        "token available here?") from None


def check_cluster(storage: Storage | None, scratch: str | None, data_paths: list[str],
                  timeout: float = NODE_TIMEOUT_S) -> Report:
    """Every alive node of the Ray this process is connected to, each by a task pinned to it."""
    task = ray.remote(num_cpus=0, max_retries=0)(probe)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    pending: dict[Any, dict[str, Any]] = {}
    for n in alive:
        name = n.get("NodeManagerAddress") or n["NodeID"][:12]
        label = f"{name} ({n['NodeID'][:8]})"
        ref = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            storage.to_dict() if storage else None, scratch, data_paths, label)
        pending[ref] = {"label": label, "resources": n.get("Resources") or {}}
    ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    nodes, missing = [], []
    for ref in ready:
        try:
            answer = ray.get(ref)
        except Exception as exc:
            missing.append(f"node {pending[ref]['label']}: the check failed ({type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0][:200]})")
            continue
        answer["ray_resources"] = {k: v for k, v in pending[ref]["resources"].items() if not k.startswith("node:")}
        nodes.append(answer)
    for ref in late:
        missing.append(f"node {pending[ref]['label']}: no answer within {timeout:g} s (is the node busy or gone?)")
        ray.cancel(ref, force=True)
    nodes.sort(key=lambda n: str(n.get("node")))
    return report(nodes, storage, missing)


def refuse_unreachable_storage(storage: Storage, scratch: str | None) -> list[str]:
    """Before a launch's first trial on a cluster: refuse (exit 1) when some node cannot write, read back
    and delete a marker in the storage; returns the other problems (warnings)."""
    found = check_cluster(storage, scratch, [])
    if found.storage_problems:
        raise ClusterNotReady(found.storage_problems[0] + " — every node must reach the storage (ray.storage); "
                              "`sweeper doctor --address ADDR --storage URI` checks them all",
                              details=found.storage_problems[1:])
    return [p for p in found.problems if p not in found.storage_problems]
