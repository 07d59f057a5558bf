"""The Training page shows the plan core computes and follows its inputs."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.base import DAY_S, fmt_time
from core.config import RabitConfig
from core.training import TrainingGoal, deadline_choice, plan
from dashboard import state

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def _page(max_gpus: int = 512) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("../pages/training.py").run()
    at.selectbox(key=state.key("training.max_gpus")).set_value(max_gpus).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metrics(at) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in at.metric:
        out.setdefault(m.label, m.value)
    return out


def test_deadline_mode_shows_the_core_plan(clear_cache):
    at = _page()
    expected = plan(RabitConfig(), TrainingGoal(deadline_s=30 * DAY_S, max_gpus=512))
    shown = _metrics(at)
    assert shown["GPUs"] == f"{expected.gpus:,}"
    assert shown["Wall-clock with failures"] == fmt_time(expected.goodput.wall_clock_s)
    assert shown["Cost"] == f"${expected.cost_usd:,.0f}"
    # the headline and the cards are the recommended count: the cheapest that meets the deadline
    assert any(s.value.startswith(f"{expected.gpus:,} GPUs is the cheapest count") for s in at.success)
    assert expected.gpus == deadline_choice(expected.curve).cheapest.gpus
    # the smallest and the cheapest count that meet the deadline are shown side by side
    assert any("cheapest" in m.value for m in list(at.success) + list(at.info))
    assert len(at.get("plotly_chart")) >= 3  # memory, step breakdown, the GPU-count curve
    assert at.dataframe, "the layout table is missing"
    # a tighter deadline needs more GPUs
    at.number_input(key=state.key("targets.deadline_days")).set_value(10.0).run()
    assert not at.exception
    assert int(_metrics(at)["GPUs"].replace(",", "")) > expected.gpus


def test_budget_mode_and_a_bad_budget(clear_cache):
    at = _page()
    at.radio(key=state.key("training.mode")).set_value("budget").run()
    at.number_input(key=state.key("training.budget_gpus")).set_value(64).run()
    assert _metrics(at)["GPUs"] == "64"
    step_bf16 = _metrics(at)["Time per optimizer step"]
    at.selectbox(key="cfg.train_precision").set_value("fp8").run()  # the sidebar's training precision
    assert not at.exception
    assert _metrics(at)["Time per optimizer step"] != step_bf16
    at.number_input(key=state.key("training.budget_gpus")).set_value(60).run()
    assert not at.exception
    assert any("not a whole number of 8-GPU nodes" in e.value for e in at.error)


def test_gpu_without_a_price_and_a_model_that_cannot_fit(clear_cache):
    at = _page()
    at.radio(key=state.key("training.mode")).set_value("budget").run()
    at.selectbox(key="cfg.gpu").set_value("b300").run()  # no dated price in the catalog
    at.number_input(key=state.key("training.budget_gpus")).set_value(64).run()
    assert not at.exception
    assert _metrics(at)["Cost"] == "no price"
    assert any("No on-demand price" in i.value for i in at.info)
    at.selectbox(key="cfg.gpu").set_value("h100-sxm").run()
    at.selectbox(key="cfg.model").set_value("llama-3.1-405b").run()
    at.number_input(key=state.key("training.budget_gpus")).set_value(8).run()
    assert not at.exception
    assert any("no layout fits" in e.value for e in at.error)
