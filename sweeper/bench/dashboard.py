"""The dashboard's benchmark: `sweeper bench dashboard [--points 10000] [--curve-rows 1000000]`.

Builds a synthetic sweep of the given size with the real StoreWriter (compactions
included), then measures, with the goals of issue 6 in brackets:
- server: first ingest of the store and the first full payload (time to first render on
  the server side, goal < 2 s), its size raw and gzipped;
- server: each incremental update while the sweep keeps writing (goal < 200 ms server
  time), what it carried (new point events, curve rows) and its size;
- browser (Debian's Chromium via Playwright, skipped with --no-browser or when absent):
  time to first render of a cold page load, of a warm one (plotly.js cached), and how long
  new results take to appear;
- how much a dashboard polling a sweep slows a trial of that sweep (issue 8: readers must
  not slow the sweep): a fixed single-threaded workload timed while a driver appends
  results, with and without a dashboard polled every second.
Prints a table, or JSON with --json. A benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dashboards.data import Filters
from dashboards.live import Dashboard
from dashboards.server import make_server
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep

METHODS = ("pre", "post", "layerrope", "deepnet")
DEPTHS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
LRS = 10
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def bench_spec(points: int, curve_rows: int) -> SyntheticSpec:
    seeds = max(1, round(points / (len(METHODS) * len(DEPTHS) * LRS)))
    n_points = len(METHODS) * len(DEPTHS) * LRS * seeds
    per_point = curve_rows / n_points
    # ok points report steps/report_every + 1 rows; diverged ones stop at 8-60%: 0.78 of that on average
    steps = int(round((per_point / 0.78 - 1) * 10))
    return SyntheticSpec(name="bench", methods=METHODS, depths=DEPTHS, seeds=tuple(range(seeds)), lrs_per_cell=LRS,
                         steps=steps, report_every=10, eval_every=100, concurrency=64,
                         seconds_per_block_step=0.002)  # fmt: skip


def build_store(root: Path, spec: SyntheticSpec, *, until: float, chunks: int) -> tuple[SyntheticSweep, float]:
    t = time.perf_counter()
    sweep = SyntheticSweep(root, spec)
    for i in range(1, chunks + 1):
        sweep.advance(until * i / chunks)
    return sweep, time.perf_counter() - t


def _chunk_files(root: Path) -> int:
    return sum(
        1 for table in ("points", "curves") for p in (root / "store" / table).iterdir() if p.suffix == ".parquet"
    )


def poll(dash: Dashboard, since: int) -> tuple[dict[str, Any], bytes, dict[str, float], float]:
    t = time.perf_counter()
    body, timings = dash.update(since, dash.model.epoch, Filters())
    elapsed = time.perf_counter() - t
    return json.loads(body), body, timings, elapsed


def gz(body: bytes) -> int:
    return len(gzip.compress(body, compresslevel=1))


def server_bench(sweep: SyntheticSweep, updates: int, step: float, start: float) -> dict[str, Any]:
    t = time.perf_counter()
    dash = Dashboard(sweep.root, min_interval=0.0)
    construct = time.perf_counter() - t
    msg, body, timings, elapsed = poll(dash, 0)
    first = {
        "seconds": construct + elapsed,
        "ingest_s": timings["refresh"],
        "figures_s": timings["sync"],
        "payload_s": timings["payload"],
        "bytes": len(body),
        "gzip_bytes": gz(body),
        "per_figure_s": dict(next(iter(dash.views.values())).timings),
        "points": msg["summary"]["n_points"],
        "curve_rows": msg["summary"]["n_curve_rows"],
    }
    rows = []
    since = msg["rev"]
    fraction = start
    for _ in range(updates):
        before_points, before_rows = msg["summary"]["n_points"], msg["summary"]["n_curve_rows"]
        files_before = _chunk_files(sweep.root)
        fraction += step
        events = sweep.advance(fraction)
        compacted = _chunk_files(sweep.root) < files_before  # the writer merged its chunks
        msg, body, timings, elapsed = poll(dash, since)
        since = msg["rev"]
        rows.append({
            "point_events": events,
            "curve_rows": msg["summary"]["n_curve_rows"] - before_rows,
            "new_points": msg["summary"]["n_points"] - before_points,
            "after_compaction": compacted,
            "seconds": elapsed, "refresh_s": timings["refresh"], "figures_s": timings["sync"],
            "bytes": len(body), "gzip_bytes": gz(body),
            "figures": sorted(msg["figures"]),
            "traces": sum(len(p.get("traces", {})) for p in msg["figures"].values()),
        })  # fmt: skip
    return {"first": first, "updates": rows, "final_fraction": fraction}


def browser_bench(sweep: SyntheticSweep, fraction: float, step: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright  # a test extra: only for the browser figures

    server = make_server(str(sweep.root), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    out: dict[str, Any] = {}

    def wait(page: Any, js: str, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if page.evaluate(js):
                return
            time.sleep(0.02)
        raise TimeoutError(js)

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=FLAGS)
            context = browser.new_context(viewport={"width": 1600, "height": 1200})
            for label in ("cold", "warm"):
                page = context.new_page()
                page.goto(server.url)
                wait(page, "() => window.sweepDashboard && window.sweepDashboard.firstRenderMs !== null")
                nav = page.evaluate("() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
                out[label] = {
                    "first_render_ms": page.evaluate("() => window.sweepDashboard.firstRenderMs"),
                    "page_ready_ms": nav,
                    "payload_bytes": page.evaluate("() => window.sweepDashboard.lastPayloadBytes"),
                    "poll_ms": page.evaluate("() => window.sweepDashboard.lastTimings"),
                    "draw_ms": page.evaluate("() => window.sweepDashboard.drawMs"),
                }
                if label == "cold":
                    page.close()
            latencies, polls = [], []
            for _ in range(5):
                rev = page.evaluate("() => window.sweepDashboard.rev")
                fraction += step
                sweep.advance(fraction)
                t = time.monotonic()
                wait(page, f"() => window.sweepDashboard.rev > {rev} && window.sweepDashboard.lastTimings !== null")
                latencies.append(time.monotonic() - t)
                polls.append(page.evaluate("() => window.sweepDashboard.lastTimings"))
                time.sleep(0.3)
            out["update_latency_s"] = latencies
            out["update_poll_ms"] = polls
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return out


def _train(seconds_of_work: int, out: Any) -> None:
    """A stand-in for a trial: fixed single-threaded matmul work; puts its wall time."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np  # after OMP_NUM_THREADS: BLAS reads it when it loads (this runs in a fresh process)

    a = np.random.default_rng(0).random((256, 256))
    t = time.perf_counter()
    for _ in range(seconds_of_work * 400):
        a = (a @ a) / 256.0
    out.put(time.perf_counter() - t)


def _paced_writer(root: str, spec: SyntheticSpec, period: float, stop: Any) -> None:
    sweep = SyntheticSweep(root, spec)
    i = 0
    while not stop.is_set():
        i += 1
        sweep.advance(min(i / 200, 1.0))
        stop.wait(period)


def sweep_slowdown(tmp: Path, with_dashboard: bool, spec: SyntheticSpec, work: int) -> tuple[float, float, int]:
    """(trial seconds, dashboard CPU seconds, polls): a trial process does fixed work while a
    driver process appends results every 0.5 s, and, optionally, this process serves a
    dashboard polled every second (the page's cadence) on the same directory."""
    root = tmp / ("with" if with_dashboard else "without")
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    writer = ctx.Process(target=_paced_writer, args=(str(root), spec, 0.5, stop))
    writer.start()
    while not (root / "store" / "points").is_dir():
        time.sleep(0.05)
    trainer = ctx.Process(target=_train, args=(work, out))
    trainer.start()
    dash = None
    since, cpu, polls = 0, 0.0, 0
    while trainer.is_alive():
        if with_dashboard:
            c = time.process_time()
            if dash is None:
                dash = Dashboard(root, min_interval=0.0)
            body, _ = dash.update(since, dash.model.epoch, Filters())
            since = json.loads(body)["rev"]
            cpu += time.process_time() - c
            polls += 1
        trainer.join(1.0)
    stop.set()
    writer.join(30)
    return out.get(timeout=10), cpu, polls


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement for `args` (`points`, `curve_rows`, `updates`, `dir`, `no_browser`, `no_writer`)."""
    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="dashboard-bench-"))
    report: dict[str, Any] = {}
    try:
        spec = bench_spec(args.points, args.curve_rows)
        start = 0.9
        sweep, build_s = build_store(tmp / "sweep", spec, until=start, chunks=40)
        total_rows = sum(p.curve.shape[1] for p in sweep.points)
        report["store"] = {"points": len(sweep.points), "curve_rows_planned": total_rows, "build_s": build_s,
                           "methods": len(spec.methods), "depths": len(spec.depths), "seeds": len(spec.seeds),
                           "lrs_per_cell": spec.lrs_per_cell}  # fmt: skip
        step = (1.0 - start) / (args.updates + 8)
        report["server"] = server_bench(sweep, args.updates, step, start)
        fraction = report["server"]["final_fraction"]
        if not args.no_browser and shutil.which("chromium"):
            report["browser"] = browser_bench(sweep, fraction, step)
        if not args.no_writer:
            small = SyntheticSpec(methods=METHODS, depths=DEPTHS[:6], seeds=(0, 1, 2, 3), lrs_per_cell=LRS, steps=400,
                                  report_every=10)  # fmt: skip
            alone, polled = [], []
            for i in range(3):  # interleaved, so a change in the machine's load hits both
                alone.append(sweep_slowdown(tmp / f"w{i}", False, small, 3)[0])
                polled.append(sweep_slowdown(tmp / f"p{i}", True, small, 3))
            report["writer"] = {
                "alone_s": alone, "with_dashboard_s": [p[0] for p in polled],
                "dashboard_cpu_s": [p[1] for p in polled], "polls": [p[2] for p in polled],
                "slowdown": statistics.median(p[0] for p in polled) / statistics.median(alone) - 1,
            }  # fmt: skip
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def print_report(r: dict[str, Any]) -> None:
    s = r["store"]
    print(f"store: {s['points']} points ({s['methods']} methods x {s['depths']} depths x {s['seeds']} seeds x "
          f"{s['lrs_per_cell']} LRs), {s['curve_rows_planned']:,} curve rows planned, written in {s['build_s']:.1f} s")  # fmt: skip
    f = r["server"]["first"]
    print(f"first payload (server): {f['seconds'] * 1000:.0f} ms [goal < 2000] = ingest {f['ingest_s'] * 1000:.0f} ms"
          f" + figures {f['figures_s'] * 1000:.0f} ms + assembly {f['payload_s'] * 1000:.0f} ms;"
          f" {f['bytes'] / 1e6:.2f} MB ({f['gzip_bytes'] / 1e6:.2f} MB gzipped) for {f['points']} points,"
          f" {f['curve_rows']:,} curve rows")  # fmt: skip
    print("  per figure (ms): " + ", ".join(f"{k} {v * 1000:.0f}" for k, v in f["per_figure_s"].items()))
    print("incremental updates (server) [goal < 200 ms]:")
    print(
        f"  {'events':>6} {'rows':>6} {'ms':>6} {'read':>6} {'figs':>6} {'KB':>7} {'KB gz':>6} {'traces':>6}  figures"
    )
    for u in r["server"]["updates"]:
        print(f"  {u['point_events']:>6} {u['curve_rows']:>6} {u['seconds'] * 1000:>6.0f} {u['refresh_s'] * 1000:>6.0f}"
              f" {u['figures_s'] * 1000:>6.0f} {u['bytes'] / 1e3:>7.1f} {u['gzip_bytes'] / 1e3:>6.1f} {u['traces']:>6}"
              f"  {','.join(u['figures'])}{'  (after a compaction)' if u['after_compaction'] else ''}")  # fmt: skip
    times = [u["seconds"] * 1000 for u in r["server"]["updates"]]
    if times:
        print(f"  median {statistics.median(times):.0f} ms, max {max(times):.0f} ms")
    if "browser" in r:
        b = r["browser"]
        for label in ("cold", "warm"):
            x = b[label]
            print(f"browser {label} load: first render {x['first_render_ms']:.0f} ms after navigation (page ready at "
                  f"{x['page_ready_ms']:.0f} ms; plotly.js parse is most of it), payload {x['payload_bytes'] / 1e6:.2f} MB,"
                  f" poll {json.dumps({k: round(v) for k, v in (x['poll_ms'] or {}).items()})}")  # fmt: skip
            print("  draw per figure (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in (x["draw_ms"] or {}).items()))
        lat = b["update_latency_s"]
        print(f"browser: new results drawn {min(lat):.2f}-{max(lat):.2f} s after the store was written [goal < 2 s]; "
              f"draw {statistics.median(p['draw'] for p in b['update_poll_ms']):.0f} ms median")  # fmt: skip
    if "writer" in r:
        w = r["writer"]
        print(f"sweep slowdown: a trial's fixed work took median {statistics.median(w['alone_s']):.2f} s while the driver "
              f"wrote results every 0.5 s, {statistics.median(w['with_dashboard_s']):.2f} s with a dashboard polled every "
              f"second as well ({w['slowdown'] * 100:+.1f}%); the dashboard used "
              f"{sum(w['dashboard_cpu_s']) / max(sum(w['polls']), 1) * 1000:.0f} ms CPU per poll")  # fmt: skip

