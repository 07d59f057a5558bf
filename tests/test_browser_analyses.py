"""The real app in headless Chromium: save an analysis, reload the page by its link in a new session, find it.

The server runs on its own empty embedded store (``RABIT_DATA_DIR`` in a temporary folder).
"""

from pathlib import Path

import live
import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, ARGS = live.CHROMIUM, live.CHROMIUM_ARGS

live.require_chromium()

from playwright.sync_api import sync_playwright


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {"RABIT_DATA_DIR": str(tmp_path_factory.mktemp("rabit-data")), "RABIT_DATABASE_URL": ""}
    proc, url = live.start(env=env)
    yield url
    live.stop(proc)


def test_save_an_analysis_then_reload_it_by_its_link(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
        page.goto(server + "/analyses")
        page.get_by_text("Save as a new analysis").first.wait_for(timeout=60_000)
        box = page.get_by_label("Batch (concurrent sequences)")
        box.wait_for(timeout=120_000)
        box.fill("48")
        box.press("Enter")
        page.wait_for_function("() => window.location.search.includes('batch=48')", timeout=30_000)
        name = page.get_by_label("Name", exact=True)
        name.fill("Browser-saved sizing")
        name.press("Enter")
        page.get_by_role("button", name="Save as a new analysis").click()
        page.get_by_text("Saved as a new analysis").first.wait_for(timeout=30_000)
        page.wait_for_function("() => window.location.search.includes('analysis=')", timeout=30_000)
        aid = page.evaluate("() => new URLSearchParams(window.location.search).get('analysis')")
        assert aid and len(aid) == 12

        # a fresh session (another person) opens only the link: the analysis and its config come back
        other = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
        other.goto(f"{server}/analyses?analysis={aid}")
        other.get_by_text("Open: ").first.wait_for(timeout=60_000)
        batch = other.get_by_label("Batch (concurrent sequences)")
        batch.wait_for(timeout=120_000)  # a loaded machine draws the sidebar's widgets late
        body = other.inner_text("body")
        assert "Browser-saved sizing" in body and "Traceback" not in body
        assert batch.input_value() == "48"
        # the picked analysis's headline numbers with their ranges, and the tornado of its decode step
        other.get_by_text("Headline numbers, with ranges").first.wait_for(timeout=60_000)
        other.get_by_text("What moves decode step").first.wait_for(timeout=120_000)
        assert "heuristic range from the assumption bounds" in other.inner_text("body")
        browser.close()
