"""A pasted link reproduces the view: change inputs in the sidebar and on every page that has its own (Serving,
Optimizer, Training, Next experiment), then open each page's URL in a fresh browser context (no shared session,
cookies or storage) and compare every headline number (each metric's label and value) with what the sender
sees."""

import re

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()

from playwright.sync_api import sync_playwright  # noqa: E402
from test_browser_meeting import wait_drawn  # noqa: E402

#: (url path, menu title) of the pages whose numbers the link must reproduce
PAGES = (
    ("", "Memory"),
    ("speed", "Speed"),
    ("serving", "Serving simulation"),
    ("training", "Training"),
    ("optimizer", "Optimizer"),
    ("math", "Show the math"),
    ("next-experiment", "Next experiment"),
)
#: The link every compared URL must carry: one changed input of each page's own.
CHANGED = (
    "batch=48",
    "workload.rate_per_s=0.2",
    "targets.p95_ttft_s=3",
    "training.mode=budget",
    "training.budget_gpus=16",
    "training.checkpoint_interval_s=1800",
    "experiment.rate_spread_frac=0.5",
    "predicted.p95_ttft_s=1.5",
    "speed.bound=pessimistic",
)
#: Pages whose numbers appear only once their button is pressed (by the sender and by the visitor alike).
BUTTON = {"Next experiment": "Find the next experiment"}
#: The Diagnostics page's expander and the prediction changed in it.
DIAG = ("What the analysis predicted", "Predicted p95 TTFT [s] (0 = unknown)")


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


def _metrics(page) -> dict[str, str]:
    return {card["label"]: card["value"] for card in live.metric_cards(page) if card["label"]}


def headline(page) -> dict[str, str]:
    """Every metric on the page once it has settled: the same on two reads with the page quiet between them (a
    page whose script reruns shows no status widget between its runs, so one read may catch it half drawn)."""
    page.locator('[data-testid="stMetric"]').first.wait_for(timeout=240_000)
    wait_drawn(page)
    out = _metrics(page)
    for _ in range(60):
        wait_drawn(page)  # settled again: quiet for half a second, no script running
        again = _metrics(page)
        if again == out:
            return out
        out = again
    return out


def set_number(page, label, value: str) -> None:
    box = page.get_by_label(label, exact=isinstance(label, str)).first
    box.fill(value)
    box.press("Enter")


def goto_menu(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text=re.compile(rf"{re.escape(title)}\s*$")).first.click()


def test_a_pasted_link_reproduces_every_page(server):
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=live.CHROMIUM, args=live.CHROMIUM_ARGS)
        sender = b.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        # a link received with two GPU kinds chosen keeps the next experiment's re-runs short
        sender.goto(server + "/?targets.gpus_allowed=h100-sxm,h200-sxm")
        sender.get_by_text("KV cache per GPU (batch)").first.wait_for(timeout=120_000)
        # the sidebar (shared by every page)
        set_number(sender, "Batch (concurrent sequences)", "48")
        sender.wait_for_function("() => location.search.includes('batch=48')", timeout=30_000)
        set_number(sender, "Output tokens", "2048")
        sender.wait_for_function("() => location.search.includes('output_tokens=2048')", timeout=30_000)
        # the Serving page's workload
        goto_menu(sender, "Serving simulation")
        sender.get_by_text("Where is the knee?").first.wait_for(timeout=120_000)
        set_number(sender, "Arrival rate [requests/s]", "0.2")
        sender.wait_for_function("() => location.search.includes('workload.rate_per_s=0.2')", timeout=60_000)
        set_number(sender, "Requests", "300")
        sender.wait_for_function("() => location.search.includes('workload.num_requests=300')", timeout=60_000)
        # the Optimizer's targets
        goto_menu(sender, "Optimizer")
        sender.get_by_text("Why this answer").first.wait_for(timeout=180_000)
        set_number(sender, "p95 TTFT target [s] (0 = none)", "3")
        sender.get_by_role("button", name="Find the cheapest configuration").click()
        sender.wait_for_function("() => location.search.includes('targets.p95_ttft_s=3')", timeout=60_000)
        # the Speed page's bound: every number at the pessimistic bound (a view choice the link carries)
        goto_menu(sender, "Speed")
        sender.wait_for_function(
            "() => [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === 'Speed')", timeout=120_000
        )
        sender.locator("button").filter(has_text=re.compile(r"^\s*pessimistic\s*$")).first.click(timeout=120_000)
        sender.wait_for_function("() => location.search.includes('speed.bound=pessimistic')", timeout=60_000)
        # the Training page's own inputs: size by a GPU budget, checkpoint every 30 min
        goto_menu(sender, "Training")
        sender.get_by_text("Size the run by").first.wait_for(timeout=180_000)
        sender.get_by_text("GPU budget", exact=True).first.click()
        sender.wait_for_function("() => location.search.includes('training.mode=budget')", timeout=120_000)
        set_number(sender, re.compile(r"^GPU budget \(GPUs to train on"), "16")
        sender.wait_for_function("() => location.search.includes('training.budget_gpus=16')", timeout=120_000)
        set_number(sender, "Checkpoint interval [min] (0 = Daly optimum)", "30")
        sender.wait_for_function(
            "() => location.search.includes('training.checkpoint_interval_s=1800')", timeout=120_000
        )
        # the Next experiment's form: a wider arrival-rate spread, then its button
        goto_menu(sender, "Next experiment")
        sender.get_by_text("Arrival rate spread [+-%]").first.wait_for(timeout=120_000)
        set_number(sender, "Arrival rate spread [+-%]", "50")
        sender.get_by_role("button", name=BUTTON["Next experiment"]).click()
        sender.wait_for_function("() => location.search.includes('experiment.rate_spread_frac=0.5')", timeout=60_000)
        # the Diagnostics page's predictions (it shows numbers only for uploaded telemetry: its inputs are compared)
        goto_menu(sender, "Diagnostics")
        sender.get_by_text(DIAG[0]).first.click()
        set_number(sender, DIAG[1], "1.5")
        sender.wait_for_function("() => location.search.includes('predicted.p95_ttft_s=1.5')", timeout=60_000)

        mismatches = []
        for path, title in PAGES:
            goto_menu(sender, title)
            sender.wait_for_function(
                "([path, title]) => location.pathname.replace(/^\\//, '') === path && location.search.includes("
                "'batch=48') && [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === title)",
                arg=[path, title],
                timeout=120_000,
            )
            sent = headline(sender)
            url = sender.url
            assert all(c in url for c in CHANGED), (title, url)
            fresh = b.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            fresh.goto(url)
            fresh.wait_for_function(
                "(title) => [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === title)",
                arg=title,
                timeout=180_000,
            )
            if title in BUTTON:
                fresh.get_by_role("button", name=BUTTON[title]).click()
            got = headline(fresh)
            fresh.context.close()
            sent = headline(sender)  # again, now that the sender's page has surely finished too
            assert sent, f"no headline numbers on {title}"
            if got != sent:
                mismatches.append(f"{title}: sent {sent} got {got}")
        # the Diagnostics page: the visitor's inputs are the sender's
        goto_menu(sender, "Diagnostics")
        sender.wait_for_function(
            "() => location.pathname.endsWith('diagnostics') && location.search.includes('predicted.p95_ttft_s=1.5')",
            timeout=60_000,
        )
        fresh = b.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        fresh.goto(sender.url)
        fresh.get_by_text(DIAG[0]).first.click(timeout=120_000)
        box = fresh.get_by_label(DIAG[1], exact=True).first
        got = box.input_value(timeout=120_000)
        for _ in range(60):  # the input is drawn before the first run's value reaches it
            if float(got or "nan") == 1.5:
                break
            fresh.wait_for_timeout(1000)
            got = box.input_value()
        if float(got or "nan") != 1.5:
            mismatches.append(f"Diagnostics: sent predicted p95 TTFT 1.5, got {got}")
        fresh.context.close()
        b.close()
    assert mismatches == [], "\n".join(mismatches)
