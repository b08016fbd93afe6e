"""Item 6: the dashboard (`sweeper dashboard DIR`, its own process) under hostile requests and
hostile sweep contents. Builds on tests/dashboards/test_server.py (security headers, bad
queries, DNS rebinding, a first set of traversal and malformed requests) with more traversal
encodings sent byte-exact over a socket, slow clients holding connections open while others
are served, HTML/JS in the sweep name, method names and a failure reason, and the real page in
headless Chromium.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
from sweeper.core.rows import PointRow
from sweeper.records.store import StoreWriter, load_points

SWEEP_NAME = '"><svg onload=alert("sweep")>'
METHOD_SCRIPT = "<script>alert('method')</script>"
METHOD_IMG = "<img src=x onerror=alert('img')>"
REASON = "<img src=x onerror=alert('reason')> diverged"


@pytest.fixture(scope="module")
def hostile_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dash-hostile") / "sweep"
    spec = SyntheticSpec(name=SWEEP_NAME, methods=("pre", METHOD_SCRIPT, METHOD_IMG), depths=(4, 8), lrs_per_cell=4,
                         steps=40, report_every=10, eval_every=20)
    SyntheticSweep(root, spec).advance(0.8)
    # A diverged point whose failure reason carries markup (reasons come from exception texts).
    row = load_points(root).filter(load_points(root)["method"] == METHOD_IMG).row(0, named=True)
    row.update(point_id=row["point_id"] + "9", lr=row["lr"] * 9, state="diverged", objective=None, loss=None,
               diverged_step=3, reason=REASON)
    row.pop("seq")
    StoreWriter(root).append_points([PointRow.from_columns(row)])
    (root.parent / "secret.txt").write_text("outside the sweep folder")
    return root


class Server:
    def __init__(self, sweep: Path, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeper.cli", "dashboard", str(sweep), "--port", "0",
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"http://([^\s/]+):(\d+)/", line)
        assert match, line + (self.proc.stderr.read() if self.proc.stderr else "")
        self.url, self.port = match.group(0), int(match.group(2))

    def raw(self, data: bytes, timeout: float = 20) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(data)
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError as exc:  # the server answered a malformed request and closed first
                if exc.errno != errno.ENOTCONN:
                    raise
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def get(self, target: bytes) -> tuple[int, bytes]:
        answer = self.raw(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % self.port)
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    def health_seconds(self) -> float:
        t = time.perf_counter()
        status, body = self.get(b"/api/health")
        assert status == 200 and json.loads(body) == {"ok": True}
        return time.perf_counter() - t

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def server(hostile_sweep: Path) -> Iterator[Server]:
    srv = Server(hostile_sweep)
    yield srv
    srv.stop()


TRAVERSALS = [
    b"/../manifest.json", b"/../../../../etc/passwd", b"/static/../../manifest.json", b"/static/../../../secret.txt",
    b"/%2e%2e/manifest.json", b"/%2E%2E/%2E%2E/etc/passwd", b"/static/%2e%2e/%2e%2e/manifest.json",
    b"/static/.%2e/.%2e/manifest.json", b"/static/%2e./%2e./manifest.json", b"/static%2f..%2f..%2fmanifest.json",
    b"/static/..%2f..%2fmanifest.json", b"/static/..%252f..%252fmanifest.json", b"/%252e%252e/%252e%252e/etc/passwd",
    b"/static/%25252e%25252e/manifest.json", b"/static/..\\..\\manifest.json", b"/static\\..\\..\\secret.txt",
    b"/static/..%5c..%5cmanifest.json", b"/static/%5c..%5c..%5csecret.txt", b"/..;/manifest.json",
    b"/static/..;/..;/manifest.json", b"/static/%c0%ae%c0%ae/%c0%ae%c0%ae/manifest.json",
    b"/static/%e0%80%ae%e0%80%ae/manifest.json", b"/static/%ef%bc%8e%ef%bc%8e/manifest.json",
    b"/static/dashboard.js%00.html", b"/static/dashboard.js%00/../../manifest.json", b"/static/./../manifest.json",
    b"/./manifest.json", b"/manifest.json", b"/ledger.db", b"/store/cells.parquet", b"/sweep.yaml", b"/etc/passwd",
    b"/proc/self/environ", b"/static/", b"/static", b"/static/index.html/..", b"/api/../manifest.json",
    b"/api/update/../../manifest.json", b"/C:/Windows/win.ini", b"/C:\\Windows\\win.ini", b"/static/plotly.min.js/..",
    b"/STATIC/DASHBOARD.JS", b"/dashboards/server.py", b"/%2fetc%2fpasswd",
]
NOT_PATHS = [b"//etc/passwd", b"///manifest.json", b"http://127.0.0.1/../manifest.json", b"file:///etc/passwd",
             b"\\..\\manifest.json", b"*", b"manifest.json", b"..", b"C:\\secret.txt"]
SECRETS = (b"store_version", b"root:", b"outside the sweep", b"PATH=", b"[fonts]", b"import ")


def test_paths_outside_its_own_files_are_404(server, figures):
    answers = {}
    for target in TRAVERSALS + NOT_PATHS:
        status, body = server.get(target)
        answers[target] = status
        assert not any(s in body for s in SECRETS), target
    wrong = {t: s for t, s in answers.items() if s != 404 and not (t in NOT_PATHS and s == 400)}
    assert not wrong, wrong
    assert server.get(b"/static/dashboard.js")[0] == 200  # its own files are served
    figures.record("dashboard", order=11, title="Dashboard under attack",
                   does="`sweeper dashboard` in its own process: traversal, hostile names, malformed and slow clients",
                   traversal_requests_404=f"{sum(s == 404 for t, s in answers.items() if t in TRAVERSALS)} of "
                                          f"{len(TRAVERSALS)}",
                   non_path_targets_refused=f"{sum(s in (400, 404) for t, s in answers.items() if t in NOT_PATHS)} "
                                            f"of {len(NOT_PATHS)} (400 or 404)",
                   file_contents_leaked=0)


def _listening(port: int) -> list[str]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if Path(table).exists():
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[1].endswith(f":{port:04X}") and cols[3] == "0A":  # 0A: LISTEN
                    rows.append(cols[1])
    return rows


def test_binds_loopback_only_unless_told(server, hostile_sweep, figures):
    assert _listening(server.port) == [f"0100007F:{server.port:04X}"]  # 127.0.0.1 and nothing else
    exposed = Server(hostile_sweep, "--host", "0.0.0.0")
    try:
        assert _listening(exposed.port) == [f"00000000:{exposed.port:04X}"]
    finally:
        exposed.stop()
    figures.record("dashboard", order=11, title="Dashboard under attack",
                   does="`sweeper dashboard` in its own process: traversal, hostile names, malformed and slow clients",
                   default_bind="127.0.0.1 only", explicit_host_honoured=True)


def test_hostile_names_are_data_never_markup(server, figures):
    status, body = server.get(b"/api/update?since=0")
    assert status == 200
    msg = json.loads(body)
    assert msg["sweep"]["name"] == SWEEP_NAME  # raw data in JSON; the page sets it with textContent
    names = [m["name"] for m in msg["options"]["methods"]]
    assert METHOD_SCRIPT in names and METHOD_IMG in names
    traces = [t for panel in msg["figures"].values() for t in panel.get("traces", {}).values()]
    # Plotly renders a subset of HTML in the text it draws (names, hover texts and templates with their
    # meta, legend titles): every name reaches those entity-escaped. Identifiers (legendgroup, uid) are
    # never drawn.
    drawn = json.dumps([{k: t.get(k) for k in ("name", "text", "hovertext", "hovertemplate", "meta",
                                               "legendgrouptitle", "customdata")} for t in traces])
    for raw in (METHOD_SCRIPT, METHOD_IMG, "<img src=x onerror=alert('reason')>"):
        assert raw not in drawn
    assert "&lt;script&gt;" in drawn and "&lt;img src=x" in drawn
    layouts = json.dumps([panel.get("layout") for panel in msg["figures"].values()])
    assert "<script" not in layouts and "<img" not in layouts
    status, page = server.get(b"/")
    assert status == 200 and b"alert" not in page and b"svg onload" not in page


@pytest.mark.slow
@pytest.mark.browser
def test_hostile_names_are_text_in_the_browser(server, figures):
    playwright = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("no Chromium on this machine")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update"]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=flags)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        problems: list[str] = []
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto(server.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not page.evaluate(
                "() => window.sweepDashboard && window.sweepDashboard.firstRenderMs !== null"):
            time.sleep(0.1)
        for box in page.evaluate("""() => [...document.querySelectorAll('#fig-loss_vs_lr .scatterlayer path.point')]
                .slice(0, 40).map(e => e.getBoundingClientRect()).filter(r => r.width > 0)
                .map(r => [r.x + r.width / 2, r.y + r.height / 2])"""):
            page.mouse.move(*box)  # hover labels render the names and reasons too
            time.sleep(0.05)
        injected = page.evaluate("""() => ({
            imgs: document.querySelectorAll('img[src="x"]').length,
            svgs: document.querySelectorAll('svg[onload]').length,
            scripts: [...document.scripts].filter(s => s.textContent.includes('alert')).length,
            title: document.getElementById('sweep-name').textContent,
            filters: document.getElementById('filter-method').textContent })""")
        browser.close()
    assert not problems, problems
    assert injected["imgs"] == injected["svgs"] == injected["scripts"] == 0, injected
    assert injected["title"] == SWEEP_NAME
    assert METHOD_SCRIPT in injected["filters"] and METHOD_IMG in injected["filters"]
    figures.record("dashboard", order=11, title="Dashboard under attack",
                   does="`sweeper dashboard` in its own process: traversal, hostile names, malformed and slow clients",
                   hostile_names_shown_as_text="sweep name, 2 method names, a failure reason (JSON + Chromium)",
                   scripts_run_or_elements_injected=0)


MALFORMED = [
    b"\x00\xff\xfe\xfd garbage\r\n\r\n", b"\r\n\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"X-Junk: y\r\n" * 500 + b"\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"z" * 200_000 + b"\r\n\r\n",
    b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
    b"POST /api/update HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999\r\n\r\nabc",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /../manifest.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\nHost: 127.0.0.1\n\n", b"GET /\x00 HTTP/1.1\r\n\r\n", "GET /\u2603 HTTP/1.1\r\n\r\n".encode(),
    b"BREW /pot HTTP/1.1\r\n\r\n", b"GET /api/update?since=\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n",
]


def test_malformed_and_slow_clients_do_not_stop_the_server(server, figures):
    for request in MALFORMED:
        answer = server.raw(request)
        statuses = [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", answer)]
        # Well-formed parts may be served (a pipelined GET /, a bare-LF request); nothing fails with a
        # server error (501 is the answer to an unknown method) and nothing outside its files leaks.
        assert all(code < 500 or code == 501 for code in statuses), (request[:60], answer[:200])
        assert not any(secret in answer for secret in SECRETS), request[:60]
        if request.count(b"GET ") == 2:
            assert statuses[-1] == 404, answer[:300]  # the pipelined traversal
        assert server.alive()
    # Connections cut mid-request, and connections reset by the client.
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"GET /api/upd")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        sock.close()
    baseline = max(server.health_seconds() for _ in range(10))

    # Slowloris: 100 clients that send a request one byte at a time and never finish it.
    stop = threading.Event()
    slow: list[socket.socket] = []

    def drip(sock: socket.socket) -> None:
        payload = b"GET /api/update?since=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 1000
        for byte in payload:
            if stop.is_set():
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return
            stop.wait(0.2)

    threads = []
    for _ in range(100):
        sock = socket.create_connection(("127.0.0.1", server.port))
        slow.append(sock)
        threads.append(threading.Thread(target=drip, args=(sock,), daemon=True))
        threads[-1].start()
    try:
        time.sleep(1.0)
        under_attack = [server.health_seconds() for _ in range(20)]
        status, body = server.get(b"/api/update?since=0")
        assert status == 200 and json.loads(body)["sweep"]["name"] == SWEEP_NAME
    finally:
        stop.set()
        for sock in slow:
            sock.close()
        for t in threads:
            t.join(5)
    assert server.alive() and server.health_seconds() < 5
    assert max(under_attack) < 5, under_attack
    figures.record("dashboard", order=11, title="Dashboard under attack",
                   does="`sweeper dashboard` in its own process: traversal, hostile names, malformed and slow clients",
                   malformed_requests_survived=f"{len(MALFORMED)} + 20 reset mid-request",
                   slow_clients_held_open=100,
                   health_latency_seconds_idle_max=round(baseline, 3),
                   health_latency_seconds_with_100_slow_clients_max=round(max(under_attack), 3),
                   server_stopped=0)
