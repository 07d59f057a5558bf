"""The real app in headless Chromium (Playwright driving Debian's chromium).

Starts `streamlit run dashboard/app.py` on a free port, first hits the cold server with several
sessions at once (heavy imports must not race), then changes an input and checks the page updates.
"""

import os
import time
from pathlib import Path

import live
import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, ARGS = live.CHROMIUM, live.CHROMIUM_ARGS

live.require_chromium()


@pytest.fixture(scope="module")
def server():
    proc, url = live.start()
    yield url
    live.stop(proc)


def test_cold_server_serves_concurrent_first_sessions(server, browser):
    """Four first sessions at once on a cold server: no exception (e.g. a partially initialised pandas)."""
    pages = [browser.new_context().new_page() for _ in range(4)]
    for pg in pages:
        pg.goto(server + "/", wait_until="commit")
    for pg in pages:
        # a guard against a hang, not a timing target (those are the benchmarks'): four first runs on a cold server
        # took over 60 s on a 2-core machine beside a second test process
        pg.get_by_text("Weights per GPU").first.wait_for(timeout=240_000)
        body = pg.inner_text("body")
        assert "Traceback" not in body and "partially initialized" not in body
        assert "17.6 GB" in body
        pg.context.close()


def test_changing_an_input_updates_the_page(server, browser):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(server + "/")
    page.get_by_text("KV cache per GPU (batch)").first.wait_for(timeout=60_000)
    assert "10.7 GB" in page.inner_text("body")
    box = page.get_by_label("Batch (concurrent sequences)")
    box.fill("64")
    box.press("Enter")
    # 64 x 8,192 tokens x 40,960 B per token per GPU = 21.5 GB
    page.get_by_text("21.5 GB").first.wait_for(timeout=30_000)
    page.wait_for_function("() => window.location.search.includes('batch=64')", timeout=10_000)
    shot = os.environ.get("RABIT_SCREENSHOT")
    if shot:
        page.screenshot(path=shot, full_page=True)
    page.context.close()


def test_optimizer_pareto_chart_renders(server, browser):
    page = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
    page.goto(server + "/optimizer")
    page.get_by_text("Simulated configurations").first.wait_for(timeout=90_000)
    chart = page.locator(".js-plotly-plot").filter(has_text="Simulated configurations")
    chart.first.wait_for(timeout=30_000)
    # plotly drew the scatter points and the highlighted recommendation
    assert chart.first.locator(".scatterlayer .point").count() >= 2
    assert "recommendation" in chart.first.inner_text()
    shot = os.environ.get("RABIT_SCREENSHOT_OPTIMIZER")
    if shot:
        page.screenshot(path=shot, full_page=True)
    page.context.close()


def test_upload_a_model_config_json(server, browser, tmp_path):
    """A user adds a model from a Hugging Face config.json in the UI; the page sizes it."""
    cfg = tmp_path / "tiny-llama.json"
    # 2 x 16 layers x 4 KV heads x 64 dims x 2 B = 16,384 B of KV per token
    cfg.write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, '
        '"num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 4, '
        '"head_dim": 64, "intermediate_size": 8192, "vocab_size": 32000, '
        '"max_position_embeddings": 16384}'
    )
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(server + "/")
    page.get_by_text("KV cache per GPU (batch)").first.wait_for(timeout=60_000)
    page.get_by_text("Add a model from config.json").click()
    page.locator("input[type=file]").first.set_input_files(str(cfg))
    page.get_by_text("16,384 B").first.wait_for(timeout=30_000)
    # the uploaded architecture travels in the link, so a pasted URL shows the same model
    page.wait_for_function("() => window.location.search.includes('custom_model=z')", timeout=10_000)
    page.context.close()


def test_ranges_band_and_tornado_render(server, browser):
    """The Speed page shows each headline number's range, a shaded band on the batch chart and a tornado chart."""
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.goto(server + "/speed")
    page.get_by_text("heuristic range from the assumption bounds").first.wait_for(timeout=90_000)
    body = page.inner_text("body")
    assert "Traceback" not in body and "range: " in body
    page.get_by_text("Assumptions behind these numbers").first.wait_for(timeout=60_000)  # the run has finished
    page.get_by_role("tab", name="Batch", exact=True).click(timeout=60_000)
    chart = page.locator(".js-plotly-plot").filter(has_text="tokens/s, heuristic range")
    chart.first.wait_for(timeout=30_000)
    # the band is a filled trace (fill="toself" draws an SVG path with a fill)
    assert chart.first.locator(".scatterlayer .js-fill").count() >= 1
    shot = os.environ.get("RABIT_SCREENSHOT_RANGES")
    if shot:
        chart.first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -120)")
        page.mouse.move(0, 0)
        page.wait_for_timeout(500)
        page.screenshot(path=shot)
    page.get_by_role("tab", name="Sensitivity", exact=True).click(timeout=60_000)
    tornado = page.locator(".js-plotly-plot").filter(has_text="What moves")
    tornado.first.wait_for(timeout=30_000)
    # the registry's words, not "mbu"; a long label wraps onto lines (SVG tspans) that inner_text joins without a space
    assert "Decodememory-bandwidthutilisation" in "".join(tornado.first.inner_text().split())
    page.context.close()


def test_a_link_with_one_bad_parameter_says_which_and_uses_the_rest(server, browser):
    """A pasted link with a mistyped GPU: the page names the parameter and suggests the catalog name, and the
    rest of the link (the 8B model, batch 64) is what the page shows."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(server + "/?model=llama-3.1-8b&gpu=h100&batch=64&tp=1&gpus_per_node=1")
    page.get_by_text("not exactly the link").first.wait_for(timeout=60_000)
    page.get_by_text("KV cache per GPU (batch)").first.wait_for(timeout=60_000)
    live.settle(page)  # the run that applies the link has ended (on a loaded machine the sidebar read 1 before it)
    body = page.inner_text("body")
    assert "gpu=h100 was not used" in body and "did you mean h100" in body
    assert "Traceback" not in body
    # the rest applies: the model and batch of the link are in the sidebar, not a catalog's first entry
    assert page.get_by_label("Batch (concurrent sequences)").input_value() == "64"
    page.wait_for_function("() => window.location.search.includes('model=llama-3.1-8b')", timeout=10_000)
    assert "batch=64" in page.url and "gpu=" not in page.url  # the link now says what is shown
    page.context.close()


def test_a_config_json_with_ten_billion_heads_is_refused_quickly(server, browser, tmp_path):
    cfg = tmp_path / "huge.json"
    cfg.write_text(
        '{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 10000000000, '
        '"vocab_size": 32000, "intermediate_size": 11008}'
    )
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(server + "/")
    page.get_by_text("KV cache per GPU (batch)").first.wait_for(timeout=60_000)
    page.get_by_text("Add a model from config.json").click()
    t0 = time.time()
    page.locator("input[type=file]").first.set_input_files(str(cfg))
    # The refusal comes before any layout check: a few seconds on an idle machine, where the unchecked file took over
    # 240 s per rerun. The bound is that hang's, not a timing target (those are benchmarks): a browser test beside
    # other processes on a slow 2-core machine waited over 30 s for the message to be drawn.
    page.get_by_text("num_attention_heads").first.wait_for(timeout=200_000)
    assert time.time() - t0 < 120
    assert "above the maximum" in page.inner_text("body")
    page.context.close()
