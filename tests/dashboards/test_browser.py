"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): every panel
draws data, a result appended to the store appears without a reload while the zoom stays,
filters work, and a hostile name stays text."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import HOSTILE

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
PANELS = ["status", "loss_vs_lr", "scaling", "optimal_lr", "learning_curves", "progress"]


@pytest.fixture()
def page() -> Iterator[Any]:
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.problems = []  # type: ignore[attr-defined]
        pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
        pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console: {m.text}"))
        pg.on("dialog", lambda d: (pg.problems.append(f"dialog: {d.message}"), d.dismiss()))
        yield pg
        browser.close()


def wait_for(page: Any, js: str, timeout: float = 15.0) -> float:
    """Poll a JS predicate (the page's CSP forbids Playwright's eval-based waits); seconds taken."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if page.evaluate(js):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {js}")


COUNT_POINTS = """(id) => {
  const gd = document.getElementById('fig-' + id);
  return (gd.data || []).reduce((n, t) => n + (t.x || []).filter(v => v !== null).length + (t.z || []).flat().filter(v => v !== null).length, 0);
}"""


def test_dashboard_renders_every_panel_and_shows_new_results_without_reload(live_sweep, dashboard_process, page):
    page.goto(dashboard_process.url)
    wait_for(page, "() => window.sweepDashboard && window.sweepDashboard.firstRenderMs !== null", 30)
    for panel in PANELS:
        assert page.evaluate(COUNT_POINTS, panel) > 0, panel
        assert page.locator(f"#fig-{panel} .main-svg").count() >= 1, panel
        assert page.locator(f"#fig-{panel} .scatterlayer .trace, #fig-{panel} .hm image").count() > 0, panel

    # names are text: the sweep name, the filter labels, the legend and panel titles
    assert page.locator("#sweep-name").inner_text() == "live <b>sweep</b>"
    assert page.locator("#sweep-name b").count() == 0
    assert HOSTILE in page.locator("#filter-method").inner_text()
    assert page.locator("img[src='x']").count() == 0
    assert HOSTILE in page.locator("#fig-loss_vs_lr").inner_text()

    # zoom into the loss-vs-LR panel, then append results to the store
    page.evaluate("() => Plotly.relayout('fig-loss_vs_lr', {'xaxis.range': [-3.5, -2.5], 'yaxis.range': [3.3, 4.2]})")
    page.evaluate("() => { window.__notReloaded = true; }")
    before = {p: page.evaluate(COUNT_POINTS, p) for p in PANELS}
    done_before = page.locator("#summary").inner_text()
    rev = page.evaluate("() => window.sweepDashboard.rev")
    assert live_sweep.advance(0.7) > 0  # the real StoreWriter appends point, curve and cell rows
    # The writer appends points, curves and cells as separate chunks and the page draws one
    # figure at a time, so a poll may land between two chunks: wait until both panels grew.
    grown = (
        f"() => window.sweepDashboard.rev > {rev}"
        f" && ({COUNT_POINTS})('loss_vs_lr') > {before['loss_vs_lr']}"
        f" && ({COUNT_POINTS})('learning_curves') > {before['learning_curves']}"
    )
    took = wait_for(page, grown, 10)
    print(f"new results drawn {took:.2f} s after they were written")
    assert page.locator("#summary").inner_text() != done_before
    assert page.evaluate("() => window.__notReloaded === true")
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1
    zoom = page.evaluate(
        "() => { const l = document.getElementById('fig-loss_vs_lr').layout; return [l.xaxis.range, l.yaxis.range]; }"
    )
    assert zoom == [[-3.5, -2.5], [3.3, 4.2]]  # the user's zoom survived the update

    # filters: hide a method, then show everything again
    page.locator("#filter-method input[value='pre']").uncheck()
    wait_for(
        page,
        """() => { const gd = document.getElementById('fig-loss_vs_lr');
        const lines = gd.data.filter(t => t.mode === 'lines+markers');
        return lines.length > 0 && lines.every(t => t.meta[0] !== 'pre'); }""",
    )
    page.locator("#filter-reset").click()
    wait_for(
        page,
        """() => document.getElementById('fig-loss_vs_lr').data.some(t => t.mode === 'lines+markers' && t.meta[0] === 'pre')""",
    )
    assert page.problems == []  # type: ignore[attr-defined]  # no CSP violation, script error or alert
