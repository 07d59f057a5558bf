"""Every page, at the links and saved analyses a careless or hostile visitor brings: no exception, no number that
cannot be (NaN, an infinity, a negative size, count or time; tests/pagecheck.py reads every text, table and
chart string), and the user's text (an analysis's name, note and author, a run's label, a telemetry file's name,
a link's free-text settings) shown as text, never as live markup.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pagecheck import PAGES, impossible
from streamlit.testing.v1 import AppTest

from core.operations import csv_template, parse_csv, to_payload
from core.operations import parse as parse_telemetry

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def blob(obj) -> str:
    return "z" + base64.urlsafe_b64encode(zlib.compress(json.dumps(obj).encode(), 9)).decode().rstrip("=")


def open_page(params: dict[str, str], name: str, *, math: bool = True) -> AppTest:
    """The page at a link, with every "Show the math" derivation open (their numbers are on the page too)."""
    __import__("streamlit").cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(f"../pages/{name}.py").run()
    if math:
        toggles = [t for t in at.toggle if str(t.key or "").startswith("show_math")]
        for t in toggles:
            t.set_value(True)
        if toggles:
            at.run()
    assert not at.exception, (name, params, [e.value for e in at.exception])
    return at


#: Links at the edges a fuzz pass found impossible numbers at (one replica that cannot hold the weights, a draft
#: larger than the target, no failures, one-token requests at the highest rate, a closed loop of 100,000 users, a
#: KV pool of one token, a context at the model's edge).
SMALL = {"model": "llama-3.1-8b", "gpus_per_node": "1", "tp": "1"}
EDGE_LINKS = {
    "default": {},
    "weights exceed one GPU": {"model": "llama-3.1-405b", "gpus_per_node": "1", "tp": "1"},
    "draft larger than target": {"spec_method": "draft", "draft_model": "deepseek-v3", "model": "llama-3.1-8b"},
    "no failures": {**SMALL, "assumptions": blob({"failure_rate_per_gpu_hour": 0.0})},
    "one-token requests at a million per second": {
        **SMALL,
        "input_tokens": "1",
        "output_tokens": "1",
        "workload.rate_per_s": "1e6",
        "workload.num_requests": "100",
    },
    "closed loop of 100,000 users": {
        **SMALL,
        "workload.arrival": "closed",
        "workload.users": "100000",
        "workload.num_requests": "200",
    },
    "a KV pool of one token": {**SMALL, "workload.kv_pool_tokens": "1"},
    "context at the edge": {**SMALL, "input_tokens": "130000", "output_tokens": "1000"},
    "every assumption at its pessimistic end": {
        **SMALL,
        "memory.bound": "pessimistic",
        "speed.bound": "pessimistic",
        "serving.bound": "pessimistic",
    },
}
#: Pages cheap enough to load at every edge link (the Training page runs its deadline search, seconds a link: its
#: edge without failures is tests/test_fuzz_regressions.py's).
QUICK = ("memory", "speed", "serving", "math", "video", "diagnostics", "analyses", "calibration")


@pytest.mark.parametrize("name", PAGES)
def test_no_page_shows_an_impossible_number_at_its_defaults(clear_cache, name):
    at = open_page({}, name)
    assert not impossible(at), impossible(at)


@settings(max_examples=14, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(link=st.sampled_from(sorted(EDGE_LINKS)), name=st.sampled_from(QUICK))
def test_fuzz_no_page_shows_an_impossible_number_at_the_edges(link, name):
    at = open_page(EDGE_LINKS[link], name)
    assert not impossible(at), (link, name, impossible(at))


# --- user text is text on every page that shows it -------------------------------------------------------

HOSTILE = "![x](http://e.example/x.png) **b** <img src=x> [click](http://e.example) <a href='http://e.example'>a</a>"
_MARKUP = ("](http", "**b**", "<img", "![", "<a href")


def live_markup(at: AppTest) -> list[str]:
    """Every element that would render the hostile text as markup: the Markdown sources with their escaped
    characters taken out, and chart strings (plotly renders a subset of HTML, links included)."""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "subheader", "title", "header"):
        for e in getattr(at, kind, ()):
            live = re.sub(r"\\.", "", str(e.value))
            out += [f"{kind}: {str(e.value)[:100]}" for m in _MARKUP if m in live]
    for kind in ("button", "checkbox", "toggle", "expander", "metric"):
        for e in at.get(kind):
            live = re.sub(r"\\.", "", str(getattr(e, "label", "")))
            out += [f"{kind}: {live[:100]}" for m in _MARKUP if m in live]
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out += [f"chart: {m}" for m in ("<img", "<a href") if m in json.dumps(spec)]
    return out


@pytest.fixture
def hostile_analysis(tmp_path):
    """A saved analysis whose name, note and author are hostile, with a run labelled and a telemetry file named
    the same way."""
    from store import Store

    s = Store()
    from core.config import DEFAULT

    cfg = DEFAULT.with_(model="llama-3.1-8b", gpus_per_node=1, tp=1)
    aid = s.create(HOSTILE, cfg, note=HOSTILE, saved_by=HOSTILE)
    runs = parse_csv(csv_template().replace("serve-run-1", HOSTILE.replace(",", " ")))
    s.add_runs(aid, runs)
    tel = parse_telemetry(b"vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n", HOSTILE)
    s.add_telemetry(aid, tel.fmt, to_payload(tel))
    return aid


@pytest.mark.parametrize("name", ["diagnostics", "analyses", "calibration", "memory"])
def test_a_hostile_name_note_label_and_file_name_are_text(clear_cache, hostile_analysis, name):
    at = open_page({"analysis": hostile_analysis}, name, math=False)
    assert not live_markup(at), live_markup(at)
    shown = " ".join(re.sub(r"\\(.)", r"\1", str(e.value)) for e in list(at.caption) + list(at.markdown))
    assert "e.example/x.png" in shown, name  # the text is there, as text


def test_a_links_free_text_settings_are_text(clear_cache):
    # the providers filter is free text from the link; the search's prose (summary, why, what to relax) quotes it
    link = {
        "targets.providers": HOSTILE.replace(",", " "),
        "targets.gpus_allowed": "h100-sxm",
        "model": "llama-3.1-8b",
        "targets.max_simulations": "1",
        "targets.requests_per_simulation": "50",
    }
    at = open_page(link, "optimizer", math=False)
    at.button(key="opt.submit").click().run()
    assert not at.exception and not live_markup(at), live_markup(at)
