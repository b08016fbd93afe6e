"""What `--address` (and `ray.address`) may name, and joining a cluster's Ray with its token.

Supported: `auto` (the cluster this machine belongs to) and `HOST:PORT`, the head's GCS address (6379
by default), from a machine inside the cluster's network: the head node itself, or any machine that
reaches every node's ports (a node of the cluster, or a login node beside them).

Refused: `ray://HOST:PORT` (Ray Client). Under Ray Client, `Tuner.fit()` does not run in the driver's
process: Ray ships it to the head node and runs Tune's controller there, and with it the Searcher,
Callback and Stopper through which this sweep records every result. They reach the sweep through the
driver process (`sweeper.run.tune_session.active`, the ledger's single writer), which does not exist
on the head, so the first suggestion would fail; the ledger, the store and the live table would be on
the wrong machine anyway.
"""

from __future__ import annotations

import os

from sweeper.core.errors import UserError

RAY_CLIENT_REFUSED = (
    "{flag} {address}: Ray Client (ray://) is not supported: under it Ray Tune runs its controller, and with "
    "it this sweep's only writer of the ledger and the store, on the head node instead of in this process; "
    "run `sweeper launch` on the head node (or on a machine inside the cluster's network) with --address "
    "HOST:6379 (the GCS port) or --address auto"
)


def check_address(address: str | None, flag: str = "--address") -> None:
    """Refuse an address the driver cannot use (a `ray://` one), with the reason and what works."""
    if address and address.strip().lower().startswith("ray://"):
        raise UserError(RAY_CLIENT_REFUSED.format(flag=flag, address=address))


def token_auth_if_available() -> None:
    """Ray ≥ 2.59 clusters started with `ray start --head` require token authentication from
    every joining process; a driver opts in with RAY_AUTH_MODE=token. Opt in when a token is at
    hand (a token-mode driver also joins clusters without authentication)."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(token_file):
        os.environ["RAY_AUTH_MODE"] = "token"
