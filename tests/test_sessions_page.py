"""The Serving page's Sessions view: the answer above its inputs, the TTFT-by-turn chart, errors next to inputs."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.config import Lengths, RabitConfig, Sessions, Targets, from_query, to_query
from core.decision import Constraints, recommend, session_goal
from tests.pagecheck import impossible

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def _sessions_view(at: AppTest) -> AppTest:
    at.run()
    at.switch_page("../pages/serving.py").run()
    at.toggle(key="serving.sessions").set_value(True).run()
    return at


def test_sessions_view_answers_first_and_sizes(clear_cache):
    at = _sessions_view(AppTest.from_file(APP, default_timeout=300))
    at.number_input(key="sessions.n").set_value(40).run()
    assert not at.exception
    texts = [m.value for m in at.markdown]
    line = next(t for t in texts if "sessions on" in t)
    assert "p95 TTFT" in line and "per agent-hour" in line and "found cached" in line
    assert at.get("plotly_chart")  # the TTFT-by-turn chart
    at.multiselect(key="sessions.kinds").set_value(["h100-sxm"]).run()
    at.number_input(key="sessions.size_agents").set_value(8).run()
    at.button(key="sessions.size").click().run()
    assert not at.exception
    assert any("agents at p95 TTFT" in s.value for s in (*at.success, *at.warning))
    assert not impossible(at), impossible(at)  # no NaN, infinity or negative amount anywhere on the view


def test_bad_session_input_is_an_error_not_a_traceback(clear_cache):
    at = _sessions_view(AppTest.from_file(APP, default_timeout=300))
    at.number_input(key="sessions.n").set_value(20).run()
    at.multiselect(key="sessions.kinds").set_value([]).run()
    assert not at.exception
    assert any("Pick at least one GPU kind" in e.value for e in at.error)


def test_session_inputs_travel_with_the_link(clear_cache):
    """The view's inputs are the shared config's sessions: the link carries them, and a link that carries them opens
    the Serving page on the Sessions view with the same inputs."""
    at = _sessions_view(AppTest.from_file(APP, default_timeout=300))
    assert "sessions" not in at.query_params  # the defaults: nothing to carry
    at.number_input(key="sessions.n").set_value(40).run()
    at.number_input(key="sessions.gap").set_value(7.5).run()
    at.radio(key="sessions.arrival").set_value("gamma").run()
    assert not at.exception
    link = at.query_params["sessions"]
    got = from_query({"sessions": link if isinstance(link, str) else link[-1]}).sessions
    assert got is not None and (got.num_sessions, got.gap_s, got.arrival) == (40, 7.5, "gamma")
    again = AppTest.from_file(APP, default_timeout=300)
    again.query_params["sessions"] = link if isinstance(link, str) else link[-1]
    again.run()
    again.switch_page("../pages/serving.py").run()
    assert not again.exception
    assert again.toggle(key="serving.sessions").value is True
    assert again.number_input(key="sessions.n").value == 40
    assert again.number_input(key="sessions.gap").value == 7.5
    assert again.radio(key="sessions.arrival").value == "gamma"
    assert any("40 sessions on" in m.value for m in again.markdown)


def test_optimizer_sizes_for_the_sessions_agents(clear_cache):
    """The Optimizer page, opened on a link that carries sessions, sizes for concurrent agents: every candidate is
    simulated as their sessions (its notes say so) and the answer is drawn without a traceback."""
    cfg = RabitConfig(
        model="llama-3.1-8b",
        sessions=Sessions(turns=Lengths(kind="fixed", mean=4), gap_s=2.0),
        targets=Targets(
            p95_ttft_s=0.5, gpus_allowed=("l40s",), weights_allowed=("bf16",), kv_allowed=("bf16",), max_simulations=4
        ),
    )
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in to_query(cfg).items():
        at.query_params[k] = v
    at.run()
    at.switch_page("../pages/optimizer.py").run()
    at.toggle(key="opt.sessions").set_value(True).run()
    at.number_input(key="opt.agents").set_value(12).run()
    assert not at.exception
    # the page's answer is the optimizer's for the agents' sessions (1 x L40S at TP 1 for 12 agents)
    rec = recommend(session_goal(cfg, cfg.sessions, agents=12, ttft_p95_s=0.5), Constraints.from_config(cfg))
    assert rec.met and rec.recommendation is not None
    said = [m.value.replace("\\", "") for m in (*at.success, *at.warning)]  # markdown escapes taken out
    assert any(rec.recommendation.label in m and "meeting p95 TTFT" in m for m in said), said
    # the answer names the agents' sessions it was sized for, not the sidebar's request lengths and rate
    assert any("for 12 concurrent agents, 4 turns a session" in m for m in said), said
    captions = [c.value for c in at.caption]
    assert any(c.startswith("For 12 concurrent agents, 4 turns a session") for c in captions), captions
    assert not any("requests/s" in m for m in said), said
    assert not impossible(at), impossible(at)
