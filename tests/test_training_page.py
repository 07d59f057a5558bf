"""The Training page shows the plan core computes and follows its inputs."""

import math
from pathlib import Path

import pytest
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


def test_gpu_hours_count_the_failures_the_cost_is_priced_on(clear_cache):
    at = _page()
    expected = plan(RabitConfig(), TrainingGoal(deadline_s=30 * DAY_S, max_gpus=512))
    shown = _metrics(at)
    assert "GPU-hours" not in shown, "a GPU-hours card without failures beside a cost with them"
    with_failures = expected.gpus * expected.goodput.wall_clock_s / 3600
    assert shown["GPU-hours with failures"] == f"{with_failures:,.0f}"
    # the failures add hours: wall-clock with failures > runtime without (Daly: checkpoints, lost work, restarts)
    assert with_failures > expected.best.gpu_hours
    # the cost card is the price times the same GPU-hours
    assert expected.cost_usd == pytest.approx(with_failures * expected.price.usd_per_gpu_hour, rel=1e-9)


def test_an_unbounded_range_reads_no_bound_never_inf():
    from core.base import Range
    from dashboard import render

    r = Range(value=7376, low=7376, high=math.inf, basis="heuristic")
    text = render.range_text(r, lambda x: f"{x:,.0f}", "the deadline cannot be met at the pessimistic bound")
    assert text.startswith("7,376 – no bound (the deadline cannot be met at the pessimistic bound)")
    assert "inf" not in text.replace("no bound", "")
    assert render.range_span(Range(value=2, low=1, high=3), lambda x: f"{x:g}") == "1 … 3"


def test_training_tokens_are_entered_in_billions(clear_cache):
    at = _page()
    w = at.number_input(key="cfg.train_tokens")
    assert w.value == pytest.approx(RabitConfig().train_tokens / 1e9)  # 15T reads 15000, not 1.500e+13
    assert "e+" not in (w.proto.format or "")
    w.set_value(1000.0).run()
    assert not at.exception
    assert at.session_state["_config"].train_tokens == pytest.approx(1e12)
