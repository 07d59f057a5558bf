"""No rendered text on any page shows a number in Python's exponent form ("1e+12 tokens", "1.66e+03 s"): every page
and view, over the default configuration and two others (a small model on one GPU, an MoE on another vendor's
GPU), read as a visitor reads it (tests/pagetext.py: markdown, captions, metrics, alerts, widget labels, table
cells, chart titles, labels and hover texts)."""

from pathlib import Path

import pytest
from app_state import set_input
from pagecheck import PAGES
from pagetext import exponents
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
#: The views a page only draws when chosen (session keys of dashboard.state.VIEW_PARAMS), for the default config.
VIEWS = (
    ("memory", "memory.tab", "Training"),
    ("math", "math.view", "Training"),
    ("optimizer", "opt.view", "Training run"),
    ("video", "video.tab", "Queue and cost"),
    ("video", "video.tab", "Cheapest fleet"),
    ("video", "video.tab", "Memory"),
    ("video", "video.tab", "Sensitivity"),
)
CONFIGS = {
    "default": {},
    "8b-one-gpu": {
        "cfg.model": "llama-3.1-8b",
        "cfg.gpus_per_node": 1,
        "cfg.tp": 1,
        "cfg.input_tokens": 1000,
        "cfg.output_tokens": 250,
    },
    "moe-mi300x": {
        "cfg.model": "mixtral-8x7b",
        "cfg.gpu": "mi300x",
        "cfg.tp": 2,
        "cfg.train_tokens": 300.0,
    },  # billions, as shown
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_no_page_writes_an_exponent(name, clear_cache):
    at = AppTest.from_file(APP, default_timeout=300).run()
    for k, v in CONFIGS[name].items():
        set_input(at, k, v)
    at.run()
    found = []
    for page in PAGES:
        at.switch_page(f"../pages/{page}.py").run()
        if page == "next_experiment" and name == "default":  # the re-runs are the expensive part: one config
            next(b for b in at.button if b.label == "Find the next experiment").click().run()
        assert not at.exception, (page, [e.value for e in at.exception])
        found += [f"{page}: {t[:160]}" for t in exponents(at)]
    if name == "default":
        for page, key, value in VIEWS:
            set_input(at, key, value)
            at.switch_page(f"../pages/{page}.py").run()
            assert not at.exception, (page, value, [e.value for e in at.exception])
            found += [f"{page} [{value}]: {t[:160]}" for t in exponents(at)]
    assert found == [], "\n".join(found)
