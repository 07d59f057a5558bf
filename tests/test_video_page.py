"""The Video generation page in AppTest: headline cards with ranges first, inputs that travel in the link, problems
next to the input, the queue's saturation verdict, the model's defaults, and the sidebar inputs it does not read."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_state import set_input
from streamlit.testing.v1 import AppTest

from core import catalog
from dashboard import state

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
BASIS = "heuristic range from the assumption bounds"
HEADLINE = ["Memory per GPU", "Time per video", "Cost per video"]


@pytest.fixture
def page(clear_cache):
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("../pages/video.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_headline_cards_come_first_with_their_ranges(page):
    labels = [m.label for m in page.metric]
    assert labels[:3] == HEADLINE
    ranges = [c.value for c in page.caption if c.value.startswith("range: ")]
    # one range per headline card (and more under the other cards), every one from the assumption bounds
    assert len(ranges) >= 3 and all(BASIS in r for r in ranges[:3]), ranges[:3]
    assert page.title[0].value == "Video generation"
    assert any("fits in" in c.value for c in page.caption)


def test_an_input_changes_the_numbers_and_the_link(page):
    before = {m.label: m.value for m in page.metric}["Time per video"]
    page.number_input(key=state.key("video.gpus")).set_value(4).run()
    assert not page.exception
    assert page.query_params["video.gpus"] in ("4", ["4"])
    after = {m.label: m.value for m in page.metric}["Time per video"]
    assert after != before


def test_a_request_that_cannot_run_is_said_next_to_its_inputs(page):
    page.number_input(key=state.key("video.frames")).set_value(80).run()
    assert not page.exception
    assert any("try 81" in e.value for e in page.error)
    assert not page.metric  # nothing computed from an impossible request


def test_the_queue_saturates_past_capacity(page):
    set_input(page, "video.tab", "Queue and cost")  # the page computes only the open tab
    page.run()
    page.number_input(key=state.key("video.rate_per_hour")).set_value(500.0).run()
    assert not page.exception
    assert any(e.value.startswith("saturated") for e in page.error)
    page.number_input(key=state.key("video.rate_per_hour")).set_value(5.0).run()
    assert any(s.value.startswith("stable") for s in page.success)


def test_the_models_defaults_button(page):
    page.selectbox(key=state.key("video.model")).set_value("cogvideox-5b").run()
    page.button(key="video.defaults").click().run()
    assert not page.exception
    m = catalog.diffusion_model("cogvideox-5b")
    assert page.number_input(key=state.key("video.height")).value == m.default_height
    assert page.number_input(key=state.key("video.frames")).value == m.default_frames
    assert page.query_params["video.model"] in ("cogvideox-5b", ["cogvideox-5b"])


def test_sidebar_inputs_the_page_does_not_read_are_greyed_out(page):
    assert page.selectbox(key=state.key("model")).disabled
    assert page.number_input(key=state.key("tp")).disabled
    assert not page.selectbox(key=state.key("gpu")).disabled  # the request runs on the sidebar's GPU


def test_each_tab_draws_and_the_link_carries_it(page):
    for tab in ("Queue and cost", "Cheapest fleet", "Memory", "Sensitivity"):
        set_input(page, "video.tab", tab)
        page.run()
        assert not page.exception, (tab, [e.value for e in page.exception])
        assert page.query_params["video.tab"] in (tab, [tab])
        if tab == "Cheapest fleet":
            assert "Fleet cost per hour" in {m.label for m in page.metric}
