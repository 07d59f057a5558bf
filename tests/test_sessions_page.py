"""The Serving page's Sessions view: the answer above its inputs, the TTFT-by-turn chart, errors next to inputs."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

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
