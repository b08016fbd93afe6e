"""`sweeper dashboard DIR`: serve the live dashboard of a running or finished sweep."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import Any

from sweeper.core.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the live dashboard of a sweep (while it runs or after it ended)",
        description=(
            "Serve a page that shows the sweep's figures and updates itself every second as results "
            "arrive: loss against LR, status grid, scaling fits, optimal LR, learning curves, progress. "
            "Reads only the sweep directory; run it from any terminal, in its own process. Offline: "
            "plotly.js comes from the installed plotly package. On a cluster, keep the default "
            "host and forward the port (ssh -L 8050:127.0.0.1:8050 HOST)."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--port", type=int, default=8050, help="TCP port (default 8050; 0 picks a free one)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes the sweep to the network)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.records.manifest import read_manifest

    read_manifest(args.dir)  # a bad DIR is a one-line error, before anything is bound
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port: must be between 0 and 65535 (got {args.port})")
    if not args.host or any(c.isspace() for c in args.host):
        raise UserError(f"--host: not an address: {args.host!r}")

    from dashboards.server import make_server  # (see above) the one command that serves the dashboards

    try:
        server = make_server(args.dir, args.host, args.port, verbose=args.verbose)
    except socket.gaierror as exc:
        raise UserError(f"--host {args.host}: unknown host ({exc.strerror})") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(
                f"--port {args.port}: already in use on {args.host}; choose another (--port 0 picks a free one)"
            ) from None
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise UserError(f"--host {args.host}: cannot bind to that address ({exc.strerror})") from None
        if exc.errno == errno.EACCES:
            raise UserError(f"--port {args.port}: permission denied (ports below 1024 need root)") from None
        raise
    print(f"Dashboard of {args.dir} at {server.url}  (Ctrl-C to stop)", flush=True)
    if not server.loopback_only:
        print(f"warning: bound to {args.host}: anyone who can reach this machine can read the sweep", file=sys.stderr,
              flush=True)  # fmt: skip
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
