"""`sweeper dashboard` as its own process: it serves only its own files, keeps serving
after hostile or malformed requests, binds to 127.0.0.1 unless told otherwise, and
refuses bad arguments with exit code 2."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep

from .conftest import HOSTILE, ServerProcess, start_dashboard


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("server") / "sweep"
    spec = SyntheticSpec(
        methods=("pre", HOSTILE), depths=(4, 8), lrs_per_cell=4, steps=40, name='<script>alert("x")</script>'
    )
    SyntheticSweep(root, spec).advance(0.7)
    (root.parent / "secret.txt").write_text("outside the sweep")
    return root


@pytest.fixture(scope="module")
def server(sweep_dir: Path) -> Iterator[ServerProcess]:
    srv = start_dashboard(sweep_dir)
    yield srv
    srv.proc.terminate()
    srv.proc.wait(10)


def request(
    srv: ServerProcess, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=20)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for key, value in ({"Host": f"127.0.0.1:{srv.port}"} | (headers or {})).items():
        conn.putheader(key, value)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def raw(srv: ServerProcess, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as sock:
        sock.sendall(data)
        if not read:
            return b""
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def assert_alive(srv: ServerProcess) -> None:
    assert srv.proc.poll() is None, "the server process died"
    status, _, body = request(srv, "/api/health")
    assert status == 200 and json.loads(body) == {"ok": True}


def test_serves_the_page_its_script_and_plotly_offline_with_security_headers(server):
    status, headers, body = request(server, "/")
    assert status == 200 and b'<script src="/static/plotly.min.js"' in body
    assert (
        "script-src 'self'" in headers["content-security-policy"]
        and "frame-ancestors 'none'" in headers["content-security-policy"]
    )
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert b"http://" not in body and b"https://" not in body  # no CDN: nothing leaves the machine
    status, headers, body = request(server, "/static/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body).startswith(b"/**\n* plotly.js v")
    for path in ("/static/dashboard.js", "/static/dashboard.css"):
        assert request(server, path)[0] == 200


@pytest.mark.parametrize(
    "path",
    [
        "/../manifest.json",
        "/static/../../manifest.json",
        "/static/..%2f..%2fmanifest.json",
        "/static/%2e%2e/%2e%2e/manifest.json",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/%252e%252e/%252e%252e/manifest.json",
        "/static/..%5c..%5cmanifest.json",
        "/static/%c0%ae%c0%ae/%c0%ae%c0%ae/manifest.json",
        "/static/dashboard.js%00.html",
        "/static/./dashboard.js/../../../secret.txt",
        "/manifest.json",
        "/store/cells.parquet",
        "/etc/passwd",
        "/static/",
        "/static/index.html",
        "/dashboards/server.py",
        "/static/plotly.min.js/",
        "/STATIC/DASHBOARD.JS",
        "/api/update/../../manifest.json",
        "/api",
        "//etc/passwd",
    ],
)
def test_anything_but_its_own_files_is_404(server, path):
    status, headers, body = request(server, path)
    assert status == 404, path
    assert json.loads(body) == {"error": "not found"}
    assert b"store_version" not in body and b"root:" not in body


@pytest.mark.parametrize("target", ["http://127.0.0.1/static/dashboard.js", "*", "manifest.json"])
def test_targets_that_are_not_paths_are_refused(server, target):
    assert request(server, target)[0] == 400


def test_a_page_served_under_another_host_name_cannot_read_the_sweep(server):
    # DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends Host: evil.example
    status, _, body = request(server, "/api/update?since=0", headers={"Host": "evil.example:80"})
    assert status == 403 and b"pre" not in body
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}"):
        assert request(server, "/api/health", headers={"Host": host})[0] == 200


@pytest.mark.parametrize(
    "query, message",
    [
        ("since=abc", "since must be"),
        ("since=-1", "since must be"),
        ("since=99999999999999999999999", "since must be"),
        ("epoch=<script>", "epoch must be"),
        ("seed=one", "seed must be"),
        ("bogus=1", "unknown parameter"),
        ("method=" + "x" * 300, "too long"),
        ("since=1&" + "&".join(["method=a"] * 600), "bad query"),
    ],
)
def test_bad_queries_are_400_with_a_reason(server, query, message):
    status, _, body = request(server, "/api/update?" + query)
    assert status == 400 and message in json.loads(body)["error"]


def test_names_reach_the_page_only_as_json_data_and_escaped_plotly_text(server):
    status, headers, body = request(server, "/api/update?since=0")
    assert status == 200 and headers["content-type"].startswith("application/json")
    msg = json.loads(body)
    assert msg["sweep"]["name"] == '<script>alert("x")</script>'  # data, set with textContent by the page
    assert HOSTILE in [m["name"] for m in msg["options"]["methods"]]
    rendered = json.dumps([p.get("traces") for p in msg["figures"].values()])
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered
    for trace in (t for p in msg["figures"].values() for t in p["traces"].values()):
        for key in ("name", "hovertemplate", "text"):
            assert "<img" not in json.dumps(trace.get(key, "")), trace["uid"]
    _, _, page = request(server, "/")
    assert b"alert" not in page  # the page itself holds no sweep data


def test_malformed_requests_do_not_stop_the_server(server):
    answers = [
        raw(server, b"\x00\xff\xfe garbage \r\n\r\n"),
        raw(server, b"GET\r\n\r\n"),
        raw(server, b"GET / HTTP/9.9\r\n\r\n"),
        raw(server, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"),
        raw(server, b"GET / HTTP/1.1\r\n" + b"X-Junk: y\r\n" * 200 + b"\r\n"),
        raw(server, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"z" * 70000 + b"\r\n\r\n"),
        raw(server, b"POST /api/update HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"),
        raw(server, b"DELETE / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        raw(server, b"BREW /pot HTTP/1.1\r\n\r\n"),
        raw(server, "GET /caf\u00e9\u2603 HTTP/1.1\r\n\r\n".encode()),
    ]
    for answer in answers:
        if answer.startswith(b"HTTP/1."):
            assert int(answer.split()[1]) >= 400, answer[:80]
        else:  # a request line too broken to name a version gets a bare (HTTP/0.9) error body
            assert b'"error"' in answer, answer[:80]
    assert b"405" in answers[6].split(b"\r\n")[0] and b"Allow: GET, HEAD" in answers[6]
    raw(server, b"GET /api/upd", read=False)  # a request cut off mid-line
    with socket.create_connection(("127.0.0.1", server.port)) as idle:  # a client that never sends anything
        assert_alive(server)
        idle.sendall(b"")
    assert_alive(server)


def test_binds_to_loopback_only_by_default(server):
    port_hex = f"{server.port:04X}"
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    mine = [cols[1] for cols in listening if cols[1].endswith(":" + port_hex) and cols[3] == "0A"]  # 0A: LISTEN
    assert mine == ["0100007F:" + port_hex]  # 127.0.0.1, nothing else
    v6 = Path("/proc/net/tcp6")
    if v6.exists():
        rows = [line.split() for line in v6.read_text().splitlines()[1:]]
        assert not [cols for cols in rows if cols[1].endswith(":" + port_hex) and cols[3] == "0A"]


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_bad_arguments_exit_2_with_one_line(tmp_path, sweep_dir, server):
    cases = [
        (["dashboard", str(tmp_path / "missing")], "no such directory"),
        (["dashboard", str(tmp_path)], "not a sweep directory"),
        (["dashboard", str(sweep_dir), "--port", "70000"], "--port"),
        (["dashboard", str(sweep_dir), "--port", str(server.port)], "already in use"),
        (["dashboard", str(sweep_dir), "--host", "256.1.1.1"], "--host"),
        (["dashboard", str(sweep_dir), "--port", "x"], "invalid int value"),
    ]
    for args, message in cases:
        result = run_cli(*args)  # its timeout catches a command that hangs instead of exiting
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert_alive(server)


def test_an_explicit_host_is_honoured_and_warned_about(sweep_dir):
    srv = start_dashboard(sweep_dir, "--host", "0.0.0.0")
    try:
        assert srv.url.startswith("http://0.0.0.0:")
        assert (
            request(srv, "/api/health", headers={"Host": "my-workstation:8050"})[0] == 200
        )  # no host check when exposed
    finally:
        srv.proc.terminate()
        _, err = srv.proc.communicate(timeout=10)
    assert "anyone who can reach this machine" in err
