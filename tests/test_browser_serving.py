"""The Serving page answers the planning meeting's first question above the fold: opened from a link for
8 x H100 at TP 4 and 5 requests/s, a projector's 1280 x 720 shows the replica count and the rate each gets without
scrolling."""

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()

from test_browser_meeting import wait_drawn  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


def test_deployment_headline_is_above_the_fold(server, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    link = "tp=4&input_tokens=1000&output_tokens=250&workload.rate_per_s=5&workload.num_requests=200"
    page.goto(f"{server}/serving?{link}")
    head = page.get_by_text("2.5 requests/s each")
    head.wait_for(timeout=240_000)
    wait_drawn(page)
    text = page.locator("h3").filter(has_text="requests/s each").first.inner_text()
    assert "2 replicas of TP 4" in text and "2.5 requests/s each" in text
    box = head.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720, box
    ctx.close()
