"""The Next experiment and Diagnostics pages in headless Chromium: rank experiments from a link, upload a
/metrics dump, and refuse a file that is not telemetry next to the upload."""

from pathlib import Path

import live
import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"
CHROMIUM, ARGS = live.CHROMIUM, live.CHROMIUM_ARGS

live.require_chromium()


@pytest.fixture(scope="module")
def server():
    proc, url = live.start()
    yield url
    live.stop(proc)


def test_next_experiment_ranks_and_draws_the_chart(server, browser):
    page = browser.new_context(viewport={"width": 1400, "height": 1400}).new_page()
    # two GPU kinds through the link (the config round-trips through the URL) keep the run short
    page.goto(server + "/next-experiment?model=llama-3.1-8b&targets.gpus_allowed=h100-sxm,h200-sxm")
    page.get_by_role("button", name="Find the next experiment").click()
    page.get_by_text("Today's decision").first.wait_for(timeout=240_000)
    page.get_by_text("Experiments, ranked by flip chance per GPU-hour").first.wait_for(timeout=30_000)
    # the ranking chart: the plot with scatter points (the decision's tornado above it draws bars)
    chart = page.locator(".js-plotly-plot").filter(has=page.locator(".scatterlayer .point")).first
    chart.wait_for(timeout=30_000)
    assert chart.locator(".scatterlayer .point").count() >= 1
    body = page.inner_text("body")
    assert "Not worth measuring now" in body
    assert "Run first" in body or "nothing is worth measuring" in body
    page.context.close()


def _upload(page, path: Path) -> None:
    box = page.locator('[data-testid="stFileUploader"]').filter(has_text="Telemetry")
    box.locator("input[type=file]").set_input_files(str(path))


def test_diagnostics_upload_and_a_bad_file(server, browser, tmp_path):
    page = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
    page.goto(server + "/diagnostics")
    page.get_by_text("no diagnosis").first.wait_for(timeout=60_000)
    dump = tmp_path / "metrics.txt"
    dump.write_text((FIX / "vllm_metrics.txt").read_text() + (FIX / "dcgm_metrics.txt").read_text())
    _upload(page, dump)
    page.get_by_text("No rule fired on this telemetry.").first.wait_for(timeout=60_000)
    assert "Not evaluated" in page.inner_text("body")  # the two rules that need the analysis's figures
    bad = tmp_path / "notes.txt"
    bad.write_text("these are meeting notes, not metrics\n")
    _upload(page, bad)
    page.get_by_text("That file cannot be used").first.wait_for(timeout=60_000)
    page.context.close()
