"""Meeting-room checks in headless Chromium: nothing is fetched from outside the server, and every page
reads at a projector's 1280 x 720 and a desk's 1920 x 1080."""

import os
from urllib.parse import urlparse

import pytest

import live

pytestmark = pytest.mark.browser

if live.CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the browser test (.ci/run installs it)")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402

PAGES = ("memory", "speed", "serving", "training", "optimizer", "math")
#: one text each page shows once its first results are drawn
READY = {"memory": "KV cache per GPU (batch)", "speed": "Prefill is", "serving": "Where is the knee?",
         "training": "Runtime and cost against GPU count", "optimizer": "Why this answer", "math": "Final numbers"}


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=live.CHROMIUM, args=live.CHROMIUM_ARGS)
        yield b
        b.close()


def test_nothing_is_fetched_from_outside_the_server(server, browser):
    """Every request of every page goes to the server itself (an offline intranet reaches nothing else).

    Requests elsewhere are recorded and refused, so the test neither waits on nor needs the internet."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    outside: list[str] = []
    hosts: set[str] = set()

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            hosts.add(host or "data")
            return r.continue_()
        outside.append(r.request.url)
        return r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    for name in PAGES:
        page.goto(f"{server}/{name}")
        page.get_by_text(READY[name]).first.wait_for(timeout=120_000)
        page.wait_for_load_state("networkidle", timeout=30_000)
    icon = page.locator("link[rel*=icon]").first.get_attribute("href") or ""
    ctx.close()
    assert outside == [], f"fetched from outside the server: {outside}"
    assert hosts == {"127.0.0.1"} or hosts == {"127.0.0.1", "data"}
    # the tab icon is served by the server itself (a :material/...: icon points at an external font host)
    assert icon.startswith(("/", server, "./", "data:")) or urlparse(icon).hostname in (None, "127.0.0.1"), icon
