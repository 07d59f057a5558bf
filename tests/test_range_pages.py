"""Every page shows ranges under its headline numbers and a tornado chart; the bound switch moves the page."""

import json
from pathlib import Path

import pytest
from app_state import set_input
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
BASIS = "heuristic range from the assumption bounds"


def _open(page: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    if page != "memory":
        at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _titles(at) -> list[str]:
    out = []
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        t = spec.get("layout", {}).get("title", {})
        out.append(t.get("text", "") if isinstance(t, dict) else str(t))
    return out


def _range_captions(at) -> list[str]:
    return [c.value for c in at.caption if c.value.startswith("range: ")]


@pytest.mark.parametrize("page", ["memory", "speed", "math"])
def test_page_shows_ranges_and_a_tornado(page, clear_cache):
    at = _open(page)
    caps = _range_captions(at)
    assert any(BASIS in c for c in caps), caps[:5]
    assert any(t.startswith("What moves") for t in _titles(at)), _titles(at)


def test_serving_page_ranges(clear_cache):
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.selectbox(key="cfg.model").set_value("llama-3.1-8b")
    at.number_input(key="cfg.gpus_per_node").set_value(1)
    at.number_input(key="cfg.tp").set_value(1)
    at.number_input(key="cfg.input_tokens").set_value(1000)
    at.number_input(key="cfg.output_tokens").set_value(250).run()
    set_input(at, "cfg.workload.num_requests", 300)
    set_input(at, "cfg.workload.rate_per_s", 5.0)
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(BASIS in c for c in _range_captions(at))
    assert any(t.startswith("What moves") for t in _titles(at))
    assert any("Saturation inside the range" in c.value for c in list(at.caption) + list(at.warning))


def test_training_page_ranges(clear_cache):
    at = _open("training")
    assert any(BASIS in c for c in _range_captions(at))
    assert any(t.startswith("What moves") for t in _titles(at))


def test_bound_switch_moves_every_number(clear_cache):
    at = _open("speed")
    base = {m.label: m.value for m in at.metric}
    set_input(at, "speed.bound", "pessimistic")  # what one click on the segmented control stores
    at.run()
    assert not at.exception
    low = {m.label: m.value for m in at.metric}
    assert any("pessimistic" in i.value for i in at.info)
    key = next(k for k in base if k.startswith("Decode step"))
    assert low[key] != base[key]


def test_optimizer_page_ranges(clear_cache):
    at = _open("optimizer")
    caps = _range_captions(at)
    assert any(BASIS in c for c in caps), caps
    assert any(t.startswith("What moves") for t in _titles(at))
    notes = [m.value for m in list(at.warning) + list(at.info) + list(at.caption)]
    assert any("pessimistic bound" in n for n in notes)
