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


def test_inputs_streamlit_sets_back_to_their_defaults_on_a_page_switch_come_back(clear_cache):
    """The same clean-up can leave a key with its widget's default in place of the user's value (the widget's
    key kept, its value changed). Only a widget's callback (the user's edit) changes the kept copy, so the next run
    puts the user's value back: in the session, in the config and in the link."""
    from dashboard import state

    at = AppTest.from_file(APP, default_timeout=240)
    for k, v in LINK.items():
        at.query_params[k] = v
    at.run()
    # the user's edits (none of them a default), each on its own page: a plain input, a form's input (kept when the form is submitted) and a
    # view choice
    at.switch_page("../pages/serving.py").run()
    at.number_input(key="cfg.workload.rate_per_s").set_value(0.7).run()
    at.switch_page("../pages/optimizer.py").run()
    at.number_input(key="cfg.targets.p95_ttft_s").set_value(7.0)
    at.button(key="opt.submit").click().run()
    at.switch_page("../pages/speed.py").run()
    at.segmented_control(key="speed.bound").set_value("pessimistic").run()
    assert not at.exception, [e.value for e in at.exception]
    edited = {"workload.rate_per_s": "0.7", "targets.p95_ttft_s": "7.0", "speed.bound": "pessimistic"}
    assert {k: _param(at, k) for k in edited} == edited
    # what the clean-up of an interrupted page switch does to the inputs of pages not shown: each widget's default
    # (a number input without a value starts at its minimum; the bound control at "base")
    at.switch_page("../pages/training.py").run()
    at.session_state["cfg.workload.rate_per_s"] = state.bounds("workload.rate_per_s")["min_value"]
    at.session_state["cfg.targets.p95_ttft_s"] = 0
    at.session_state["cfg.training.budget_gpus"] = 0
    at.session_state["speed.bound"] = "base"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert {k: _param(at, k) for k in edited} == edited  # the link still carries every edit
    assert _param(at, "training.budget_gpus") == "16"  # and the link's own input
    assert at.session_state["cfg.workload.rate_per_s"] == 0.7
    assert at.session_state["cfg.targets.p95_ttft_s"] == 7.0
    assert at.session_state["speed.bound"] == "pessimistic"
    # a user's edit back to a widget's default is an edit like any other: it stands
    at.switch_page("../pages/serving.py").run()
    at.number_input(key="cfg.workload.rate_per_s").set_value(1.0).run()
    at.switch_page("../pages/speed.py").run()
    at.segmented_control(key="speed.bound").set_value("base").run()
    assert not at.exception, [e.value for e in at.exception]
    assert _param(at, "workload.rate_per_s") == "1.0"
    assert _param(at, "speed.bound") is None  # the default view: the link does not name it
    assert _param(at, "targets.p95_ttft_s") == "7.0"


def test_every_config_input_and_view_choice_is_drawn_with_its_callback():
    """A widget keyed to a config input or a view choice without the callback that keeps the user's edit would have
    each edit undone on the next run (dashboard.state._keep): the pages draw them with state.edits / state.view, never
    with a bare key."""
    import re

    from dashboard.state import VIEW_PARAMS

    views = "|".join(re.escape(k) for k in VIEW_PARAMS)
    bare = re.compile(rf'key=(K|_key|state\.key)\(|key=f?"(cfg\.|{views}"|{{page}}\.bound")')
    root = Path(APP).resolve().parent.parent
    found = [
        f"{f.relative_to(root)}:{n}: {line.strip()}"
        for f in sorted([*root.glob("pages/*.py"), *root.glob("dashboard/*.py")])
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert found == []
