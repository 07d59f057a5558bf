"""The Video generation page in headless Chromium: reached from the menu, opened from a pasted link with the numbers
``rabit video`` prints, its headline cards above the fold at a projector's 1280 x 720, and every tab readable."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()

from test_browser_meeting import LAYOUT_PROBLEMS_JS, wait_drawn  # noqa: E402

from core.base import fmt_bytes, fmt_time  # noqa: E402

LINK = "video?video.model=hunyuanvideo&video.frames=129&video.gpus=4&video.rate_per_hour=6"
CLI = ["video", "--model", "hunyuanvideo", "--frames", "129", "--gpus", "4", "--rate", "6", "--json"]
HEADLINE = ("Memory per GPU", "Time per video", "Cost per video")


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


def cards(page) -> dict[str, tuple[str, float]]:
    """Each metric's label -> (value, bottom edge [px]) as drawn (the first card of a label wins)."""
    page.locator('[data-testid="stMetric"]').first.wait_for(timeout=240_000)
    wait_drawn(page)
    return {label: (card["value"], card["bottom"]) for label, card in live.shown_cards(page).items()}


def test_the_menu_opens_the_page(server, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.goto(server)
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text=re.compile(r"Video generation\s*$")).first.click()
    page.get_by_text("Where the time per video goes").first.wait_for(timeout=240_000)
    assert page.url.rstrip("/").endswith("/video") or "/video?" in page.url
    page.context.close()


def test_a_pasted_link_shows_the_clis_numbers_above_the_fold(server, browser):
    out = json.loads(
        subprocess.run(
            [sys.executable, "-m", "cli.main", *CLI], cwd=live.ROOT, capture_output=True, text=True, check=True
        ).stdout
    )
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()  # a fresh visitor
    page.goto(f"{server}/{LINK}")
    shown = cards(page)
    assert shown["Time per video"][0] == fmt_time(out["video_s"])
    assert shown["Memory per GPU"][0] == fmt_bytes(out["memory_bytes_per_gpu"])
    assert shown["Cost per video"][0] == f"${out['cost_per_video_full_load_usd']:,.3g}"
    for label in HEADLINE:
        assert shown[label][1] <= 720, f"{label} is below the fold at 1280 x 720"
    body = page.inner_text("body")
    assert "heuristic range from the assumption bounds" in body
    # the link keeps the request: the input shows it
    assert page.get_by_label("GPUs per request").first.input_value() == "4"
    page.context.close()


def test_every_tab_reads_at_meeting_size(server, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.goto(f"{server}/video")
    page.get_by_text("Where the time per video goes").first.wait_for(timeout=240_000)
    live.settle(page)  # the script done and the page quiet: a websocket page under load may never go network-idle
    wait_drawn(page)
    problems = list(page.evaluate(LAYOUT_PROBLEMS_JS))
    tabs = page.get_by_role("tab")
    assert tabs.count() >= 5
    for i in range(1, tabs.count()):
        name = tabs.nth(i).inner_text()
        tabs.nth(i).click()
        page.wait_for_timeout(500)
        wait_drawn(page)
        problems += [f"[{name}] {p}" for p in page.evaluate(LAYOUT_PROBLEMS_JS)]
    page.context.close()
    problems = list(dict.fromkeys(problems))
    assert problems == [], "\n".join(problems)
