"""The live dashboard's HTTP server: the standard library's ThreadingHTTPServer serving a
fixed set of files and one JSON endpoint.

Routes (nothing else exists; every other path is 404, so there is no path to traverse):
  GET /                     the page (static/index.html)
  GET /static/dashboard.js  the page's script
  GET /static/dashboard.css its style
  GET /static/plotly.min.js plotly.js as shipped in the plotly package (no CDN: works offline)
  GET /api/update?since=R&epoch=E[&method=M...][&size=S...][&seed=N...]
                            what changed since revision R (see `dashboards.live`)
  GET /api/health           {"ok": true}

Security: binds 127.0.0.1 unless told otherwise; paths are matched exactly as sent, never
decoded or joined to a folder; when bound to loopback, requests whose Host header names
another host are refused (a DNS-rebinding page cannot read the sweep); every response
carries nosniff and frame-denial headers and the page a strict Content-Security-Policy;
sweep, method and size names reach the page only as JSON data and are inserted as text.
A malformed request gets a 4xx answer and the server keeps serving; a handler error is
logged in one line and answered with 500.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import re
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs

from dashboards.data import Filters
from dashboards.live import Dashboard

STATIC = Path(__file__).resolve().parent / "static"
MAX_QUERY = 8192
MAX_FILTER_VALUES = 500
GZIP_ABOVE = 16 * 1024

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_EPOCH = re.compile(r"^[0-9a-f]{0,32}$")


def plotly_js_path() -> Path:
    import plotly  # the package (slow to import) only to find its bundled plotly.min.js

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: plotly.min.js is missing from the plotly package; reinstall plotly")
    return path


class _Asset:
    """A file served as-is, read once (and gzipped once) on first use."""

    def __init__(self, path: Callable[[], Path], content_type: str, cache: str) -> None:
        self._path = path
        self.content_type = content_type
        self.cache = cache
        self._lock = threading.Lock()
        self._raw: bytes | None = None
        self._gz: bytes | None = None

    def body(self, gzip_ok: bool) -> tuple[bytes, bool]:
        with self._lock:
            if self._raw is None:
                self._raw = self._path().read_bytes()
            if gzip_ok and len(self._raw) > GZIP_ABOVE:
                if self._gz is None:
                    self._gz = gzip.compress(self._raw, compresslevel=6, mtime=0)
                return self._gz, True
            return self._raw, False


_INDEX = _Asset(lambda: STATIC / "index.html", "text/html; charset=utf-8", "no-cache")
ASSETS: dict[str, _Asset] = {
    "/": _INDEX,
    "/index.html": _INDEX,
    "/static/dashboard.js": _Asset(lambda: STATIC / "dashboard.js", "text/javascript; charset=utf-8", "no-cache"),
    "/static/dashboard.css": _Asset(lambda: STATIC / "dashboard.css", "text/css; charset=utf-8", "no-cache"),
    "/static/plotly.min.js": _Asset(plotly_js_path, "text/javascript; charset=utf-8", "public, max-age=86400"),
}


class BadRequest(Exception):
    pass


def parse_update_query(query: str) -> tuple[int, str | None, Filters]:
    """(since, epoch, filters) from /api/update's query string, or BadRequest saying why."""
    if len(query) > MAX_QUERY:
        raise BadRequest("query too long")
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FILTER_VALUES)
    except ValueError as exc:
        raise BadRequest(f"bad query: {exc}") from None
    unknown = set(params) - {"since", "epoch", "method", "size", "seed"}
    if unknown:
        raise BadRequest(f"unknown parameter {sorted(unknown)[0]!r} (allowed: since, epoch, method, size, seed)")
    since_text = params.get("since", ["0"])[-1]
    if not since_text.isdigit() or len(since_text) > 18:
        raise BadRequest("since must be a non-negative integer")
    epoch = params.get("epoch", [None])[-1]
    if epoch is not None and not _EPOCH.match(epoch):
        raise BadRequest("epoch must be hexadecimal")

    def names(key: str) -> frozenset[str] | None:
        if key not in params:
            return None
        values = [v for v in params[key] if v != ""]
        if any(len(v) > 200 for v in values):
            raise BadRequest(f"{key} value too long")
        return frozenset(values)

    seeds = names("seed")
    seed_values: frozenset[int] | None = None
    if seeds is not None:
        try:
            seed_values = frozenset(int(v) for v in seeds)
        except ValueError:
            raise BadRequest("seed must be an integer") from None
    return int(since_text), epoch, Filters(methods=names("method"), sizes=names("size"), seeds=seed_values)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _host_name(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "sweeper-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle or slow client loses its connection, not a thread forever

    # Plumbing ---------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send(self, status: int, body: bytes, content_type: str, *, cache: str = "no-store",
              gzipped: bool = False, extra: dict[str, str] | None = None) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        for key, value in COMMON_HEADERS.items():
            self.send_header(key, value)
        if content_type.startswith("text/html"):
            self.send_header("Content-Security-Policy", CSP)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        if status >= 400 and status != 404:
            self.close_connection = True  # the rest of a bad request is not worth parsing
        body = json.dumps({"error": message}).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own rejections (bad request line, oversized headers...) as JSON."""
        self.close_connection = True
        try:
            self.send_response(code, message)
            body = json.dumps({"error": message or HTTPStatus(code).phrase}).encode()
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            for key, value in COMMON_HEADERS.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            pass

    def _gzip_ok(self) -> bool:
        return "gzip" in (self.headers.get("Accept-Encoding") or "").lower()

    # Methods ------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # answer, log one line, keep serving
            self.server.log_error_line(f"{self.command} {self.path[:200]!r}: {type(exc).__name__}: {exc}")
            try:
                self._error(500, "internal error")
            except OSError:
                pass

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _not_allowed(self) -> None:
        self.close_connection = True  # its body, if any, is left unread
        body = json.dumps({"error": "method not allowed"}).encode()
        self._send(405, body, "application/json; charset=utf-8", extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    def _route(self) -> None:
        if not self.path.startswith("/") or self.path.startswith("//"):
            self._error(400, "request target must be a path")
            return
        if not self._host_allowed():
            self._error(403, "Host header names another host; open the dashboard at the address it printed")
            return
        path, _, query = self.path.partition("?")
        asset = ASSETS.get(path)
        if asset is not None:
            body, gzipped = asset.body(self._gzip_ok())
            self._send(200, body, asset.content_type, cache=asset.cache, gzipped=gzipped)
        elif path == "/api/update":
            self._update(query)
        elif path == "/favicon.ico":
            self._send(204, b"", "image/x-icon", cache="public, max-age=86400")
        elif path == "/api/health":
            self._send(200, b'{"ok":true}', "application/json; charset=utf-8")
        else:
            self._error(404, "not found")

    def _host_allowed(self) -> bool:
        if not self.server.loopback_only:
            return True
        header = self.headers.get("Host")
        if header is None:
            return True  # HTTP/1.0 clients; a rebinding browser always sends one
        name = _host_name(header)
        return _is_loopback(name) or name == "localhost"

    def _update(self, query: str) -> None:
        try:
            since, epoch, filters = parse_update_query(query)
        except BadRequest as exc:
            self._error(400, str(exc))
            return
        t = time.perf_counter()
        body, timings = self.server.dashboard.update(since, epoch, filters)
        elapsed = time.perf_counter() - t
        gzipped = False
        if self._gzip_ok() and len(body) > GZIP_ABOVE:
            body, gzipped = gzip.compress(body, compresslevel=1, mtime=0), True
        timing = ", ".join(f"{k};dur={v * 1000:.1f}" for k, v in timings.items()) + f", total;dur={elapsed * 1000:.1f}"
        self._send(200, body, "application/json; charset=utf-8", gzipped=gzipped, extra={"Server-Timing": timing})


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], dashboard: Dashboard, *, verbose: bool = False) -> None:
        self.dashboard = dashboard
        self.verbose = verbose
        self.loopback_only = _is_loopback(address[0])
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
            return
        self.log_error_line(f"{client_address}: {type(exc).__name__}: {exc}")

    def log_error_line(self, line: str) -> None:
        sys.stderr.write(f"dashboard: {line}\n")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if ":" in str(host):
            host = f"[{host}]"
        return f"http://{host}:{port}/"


def make_server(sweep_dir: str, host: str = "127.0.0.1", port: int = 8050, *, verbose: bool = False) -> DashboardServer:
    """A bound server for `sweep_dir` (raises OSError when the address is taken)."""
    dashboard = Dashboard(sweep_dir)
    dashboard.model.refresh(force=True)
    return DashboardServer((host, port), dashboard, verbose=verbose)
