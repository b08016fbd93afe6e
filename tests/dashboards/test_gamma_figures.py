"""The γ-probe page: figures per site across models, the table, offline plotly.js; renders in Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dashboards import gamma_figures as gf
from sweeper.analysis.gamma.checkpoints import ModelGains, SiteGains
from sweeper.analysis.gamma.report import analyze
from tests.sweeper.analysis.gamma.conftest import planted  # noqa: F401 (a fixture: the planted gains of the gamma tests)


def _model(planted, name: str, kinds: dict[str, str], n_layers: int, source: str = "safetensors",
           model_type: str | None = None) -> ModelGains:
    import numpy as np

    sites = {site: SiteGains(np.arange(1, n_layers + 1), planted.gains(kind, n_layers, 32)) for site, kind in kinds.items()}
    return ModelGains(name=name, path=f"/ckpt/{name}", source=source, layout="test layout", model_type=model_type,
                      n_layers=n_layers, gain_transform="w", sites=sites)


@pytest.fixture
def results(planted) -> dict:
    models = [
        _model(planted, "rising <b>", {"mlp_in": "rising", "attn_in": "noise"}, 16),
        _model(planted, "steady", {"mlp_in": "steady"}, 24),
        _model(planted, "post", {"mlp_out": "falling"}, 8),
        _model(planted, "layerrope L12", {"mlp_in": "steady"}, 12, source="layerrope-sweeper", model_type="layerrope"),
    ]
    return analyze(models, "all")


def test_figures_have_one_panel_per_model(results) -> None:
    mag = gf.magnitude_figure(results, "mlp_in")
    assert len(mag.data) == 3 * len(gf.STAT_STYLE)  # three models have mlp_in, four statistics each
    assert [a.text for a in mag.layout.annotations] == ["rising &lt;b&gt;", "steady", "layerrope L12"]
    cos = gf.cosine_figure(results, "mlp_in")
    assert [t.type for t in cos.data] == ["heatmap"] * 3
    assert len(cos.data[1].z) == 24
    mds = gf.mds_figure(results, "mlp_in")
    markers = [t for t in mds.data if t.mode == "markers"]
    assert len(markers) == 3 and list(markers[1].customdata) == list(range(1, 25))
    assert "arc order 1" in mds.layout.annotations[1].text
    sched = gf.schedule_figure(results, "mlp_in")
    assert len(sched.data) == 6  # data + fitted power law per model


def test_project_models_take_their_scheme_colour(results) -> None:
    from dashboards.style import KNOWN_METHOD_COLOURS

    assert gf.model_colours(results)["layerrope L12"] == KNOWN_METHOD_COLOURS["layerrope"]


def test_table_lists_every_model_and_site(results) -> None:
    table = gf.summary_table_html(results)
    assert table.count("<tr>") == 1 + 5  # header + (rising: attn_in, mlp_in), steady, post, layerrope
    assert "rising &lt;b&gt;" in table and "rising <b>" not in table


def test_page_sections_only_for_sites_present(results) -> None:
    page = gf.page_html(results)
    assert "id='site-mlp_in'" in page and "id='site-mlp_out'" in page and "id='site-attn_in'" in page
    assert "id='site-attn_out'" not in page
    assert page.count("class=\"plotly-graph-div\"") == 3 * 4


@pytest.mark.browser
@pytest.mark.slow
def test_page_renders_offline_in_chromium(results, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    page_path = gf.write_page(results, tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium) if chromium else p.chromium.launch()
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            # offline: any request that leaves the folder fails the test
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
            page.goto(page_path.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 12")
            assert errors == []
            assert page.locator(".js-plotly-plot").count() == 12
            assert page.locator("table.summary tbody tr").count() == 5
        finally:
            browser.close()
