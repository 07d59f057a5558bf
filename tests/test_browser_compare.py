"""The Compare page in headless Chromium at 1280 x 720 and 1920 x 1080: two saved fleet plans opened by the page's
own link compare by their cost and GPUs (the answer in the first viewport), with the picks and the inputs that differ
under them (their rows, drawn on a canvas, are read in tests/test_compare_page.py); the address bar then holds both selections, and opening it in a new session shows the same
comparison."""

from __future__ import annotations

from urllib.parse import urlencode

import live
import pytest
from test_compare_page import _two_fleets

pytestmark = pytest.mark.browser
live.require_chromium()

from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A server over a store holding two saved fleet plans ($37.02/h and $40.80/h); (url, id A, id B)."""
    from store.db import SQLITE_FILE

    data = tmp_path_factory.mktemp("rabit-data")
    a, b = _two_fleets(f"sqlite:///{data / SQLITE_FILE}")
    proc, url = live.start(env={"RABIT_DATA_DIR": str(data), "RABIT_DATABASE_URL": ""})
    yield url, a, b
    live.stop(proc)


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_two_fleet_plans_by_link_at_both_sizes(seeded, size):
    url, a, b = seeded
    query = {"cmp.A.src": "A saved analysis", "cmp.A.id": a, "cmp.B.src": "A saved analysis", "cmp.B.id": b}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=live.CHROMIUM, args=live.CHROMIUM_ARGS)
        ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
        page = ctx.new_page()
        page.goto(f"{url}/compare?{urlencode(query)}")
        card = page.locator('[data-testid="stMetric"]').filter(has_text="Nominal plan (B)").first
        card.wait_for(timeout=120_000)
        text = card.inner_text()
        assert "$40.80/h" in text and "+10% against A" in text, text
        assert card.bounding_box()["y"] + card.bounding_box()["height"] <= size[1]  # the answer in the first view
        body = page.inner_text('[data-testid="stMain"]')
        assert "A: $37.02/h" in body and "fleet today, revision 1" in body and "fleet grown, revision 1" in body
        assert "Each workload's pick" in body and "Inputs that differ" in body  # the tables' rows: AppTest
        page.wait_for_function("() => window.location.search.includes('cmp.B.rev')", timeout=30_000)
        again = ctx.new_page()  # the address bar's link, in a new tab: the same comparison
        again.goto(page.url)
        card2 = again.locator('[data-testid="stMetric"]').filter(has_text="Nominal plan (B)").first
        card2.wait_for(timeout=120_000)
        assert card2.inner_text() == text
        ctx.close()
        browser.close()
