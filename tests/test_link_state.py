"""A page switch that interrupts a script run makes Streamlit clear the state of the widgets the browser no longer
shows; an input whose key it dropped comes back, in the config and in the link (dashboard.state._keep)."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
LINK = {"batch": "48", "workload.rate_per_s": "0.2", "targets.p95_ttft_s": "3.0", "training.budget_gpus": "16"}


def _param(at: AppTest, k: str):
    v = at.query_params.get(k)
    return v[-1] if isinstance(v, list) else v


def test_inputs_streamlit_drops_on_a_page_switch_come_back(clear_cache):
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in LINK.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    assert {k: _param(at, k) for k in LINK} == LINK
    # what Streamlit's clean-up does to the inputs of pages not shown: their keys are gone from the session
    for k in ("cfg.workload.rate_per_s", "cfg.targets.p95_ttft_s", "cfg.training.budget_gpus"):
        del at.session_state[k]
    at.switch_page("../pages/training.py").run()
    assert not at.exception
    assert {k: _param(at, k) for k in LINK} == LINK  # the link still carries every input
    assert at.session_state["cfg.workload.rate_per_s"] == 0.2
    assert at.session_state["cfg.training.budget_gpus"] == 16
