"""The 300-adapter question in headless Chromium: a pasted link opens the Memory page with what the adapters take
(the CLI's numbers) and the Optimizer page with one deployment per variant beside one base, in GPUs and cost."""

from __future__ import annotations

import json
import subprocess
import sys

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()

from test_browser_video import cards  # noqa: E402

from core.base import fmt_bytes  # noqa: E402

QUERY = (
    "model=llama-3.1-8b&tp=1&gpus_per_node=1&input_tokens=1000&output_tokens=250&adapters.count=300"
    "&adapters.ranks=16&adapters.max_loras=16&workload.rate_per_s=5&targets.gpus_allowed=h100-sxm,l40s"
    "&targets.max_simulations=4&targets.requests_per_simulation=300"
)
CLI = "memory --model llama-3.1-8b --gpus 1 --tp 1 --input 1000 --output 250 --adapters 300 --lora-rank 16"


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


def test_a_link_answers_the_three_hundred_adapter_question(server, browser):
    out = json.loads(
        subprocess.run(
            [sys.executable, "-m", "cli.main", *CLI.split(), "--max-loras", "16", "--json"],
            cwd=live.ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()  # a fresh visitor
    page.goto(f"{server}/?{QUERY}")
    shown = cards(page)
    assert shown["One adapter"][0] == fmt_bytes(out["adapter_bytes"], "auto")
    assert shown["Slots reserved per GPU"][0] == fmt_bytes(out["adapter_reserved_bytes_per_gpu"], "auto")
    assert shown["Concurrent sequences per replica (paged)"][0].startswith(f"{out['max_sequences']:,}")
    assert "300 adapters over one base" in page.inner_text("body")
    page.goto(f"{server}/optimizer?{QUERY}")
    page.get_by_text("One deployment per variant").first.wait_for(timeout=240_000)
    shown = cards(page)
    per_variant, one_base = shown["One deployment per variant"][0], shown["Adapters over one base"][0]
    assert int(per_variant.split(" GPU")[0].replace(",", "")) >= 300  # at least one replica per variant
    assert int(one_base.split(" GPU")[0].replace(",", "")) < 10
    page.context.close()


#: Fifty adapters at vLLM's default of one adapter slot: nearly every request waits for the slot.
ONE_SLOT = (
    "model=llama-3.1-8b&tp=1&gpus_per_node=1&input_tokens=1000&output_tokens=250&adapters.count=50"
    "&adapters.ranks=16&workload.rate_per_s=5&workload.num_requests=300"
)


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_one_adapter_slot_is_named_in_the_serving_headline(server, browser, size):
    """At both sizes the Serving page says, under its headline and inside the first viewport, that requests wait
    for an adapter slot, with the max_loras that meets the target."""
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    page.goto(f"{server}/serving?{ONE_SLOT}")
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="Requests wait for an adapter slot").first
    alert.wait_for(timeout=180_000)
    text = alert.inner_text()
    assert "max_loras = 1 slot" in text and "Fix: max_loras = " in text and "--max-loras" in text, text
    box = alert.bounding_box()
    assert box["y"] < size[1], box  # it starts inside the first viewport, right under the headline
    ctx.close()
