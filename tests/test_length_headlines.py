"""Every serving headline says the workload's lengths (and rate), and a warning says when the lengths drive the
answer, naming what a typical chat request would give (core.serving.length_note)."""

from __future__ import annotations

from pathlib import Path

from app_state import set_input
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
DRIVEN = "The lengths drive this answer"


def _open(page: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300).run()
    for k, v in state.items():
        set_input(at, k, v)
    at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _warnings(at) -> list[str]:
    return [w.value for w in at.warning]


def test_speed_names_the_lengths_and_warns_at_the_defaults(clear_cache):
    at = _open("speed")
    head = next(i.value for i in at.info if i.value.startswith("Prefill is"))
    assert "4,096 in + 4,096 out tokens" in head
    driven = [w for w in _warnings(at) if w.startswith(DRIVEN)]
    assert driven and "1,020 + 129 tokens" in driven[0] and "KV cache" in driven[0]
    # a typical chat request: the same headline, no warning
    at.number_input(key="cfg.input_tokens").set_value(1020)
    at.number_input(key="cfg.output_tokens").set_value(129).run()
    assert not at.exception
    assert "1,020 in + 129 out tokens" in next(i.value for i in at.info if i.value.startswith("Prefill is"))
    assert not [w for w in _warnings(at) if w.startswith(DRIVEN)]


def test_serving_headline_names_the_lengths_and_rate(clear_cache):
    at = _open("serving", **{"cfg.workload.num_requests": 100, "cfg.workload.rate_per_s": 0.5})
    head = next(m.value for m in at.markdown if m.value.startswith("### "))
    assert "at 0.5 requests/s of 4,096 in + 4,096 out tokens" in head
    assert any(w.startswith(DRIVEN) for w in _warnings(at))


def test_optimizer_headline_names_the_workload(clear_cache):
    at = _open("optimizer")
    assert any(c.value == "For 4,096 in + 4,096 out tokens at 0.5 requests/s." for c in at.caption)
    assert any(w.startswith(DRIVEN) for w in _warnings(at))
    # every GPU kind is allowed: the page says why no disaggregated pools pair two vendors
    assert any("within one vendor only" in c.value for c in at.caption)
