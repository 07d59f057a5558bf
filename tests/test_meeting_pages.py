"""Pages that must not mislead in a meeting: each check fails on the page as it was before its fix."""

import json
import math
import re
from pathlib import Path

import pytest
from app_state import set_input
from streamlit.testing.v1 import AppTest

from core.serving import default_rate, knee_rates, max_throughput, round_rate_down, sim_spec

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def figures(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def figure(at, title_part: str) -> dict:
    for f in figures(at):
        t = f["layout"].get("title", {})
        if title_part in (t.get("text", "") if isinstance(t, dict) else str(t)):
            return f
    raise AssertionError(f"no chart titled {title_part!r}")


@pytest.mark.parametrize(
    "rate,expected",
    [(0.718, 0.5), (7.3, 5.0), (13.0, 10.0), (1.0, 1.0), (0.25, 0.2), (2.0, 2.0), (1999.0, 1000.0), (0.0049, 0.002)],
)
def test_round_rate_down_is_a_1_2_5_value_not_above_the_rate(rate, expected):
    assert round_rate_down(rate) == pytest.approx(expected)


def test_default_rate_is_round_and_between_a_quarter_and_half_of_capacity():
    for cap in (0.0123, 1.44, 3.9, 75.2, 980.0):
        r = default_rate(cap)
        assert 0.2 * cap <= r <= 0.5 * cap  # 1-2-5 rounding loses at most a factor 2.5
        mantissa = float(f"{r:e}".split("e")[0])
        assert mantissa in (1.0, 2.0, 5.0)


def test_knee_sweep_covers_capacity_and_a_chosen_rate_far_above_it():
    rates = knee_rates(1.44, 50.0)
    assert list(rates) == sorted(rates)
    near_cap = [r for r in rates if 0.1 <= r <= 2.0]
    near_chosen = [r for r in rates if 25 <= r <= 75]
    assert len(near_cap) >= 8 and len(near_chosen) == 5
    assert knee_rates(1.44, 1.0) == knee_rates(1.44)  # a chosen rate near capacity adds nothing


def _serving(**preset) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90).run()
    at.selectbox(key="cfg.model").set_value("llama-3.1-8b")
    at.number_input(key="cfg.gpus_per_node").set_value(1)
    at.number_input(key="cfg.tp").set_value(1)
    at.number_input(key="cfg.input_tokens").set_value(1000)
    at.number_input(key="cfg.output_tokens").set_value(250).run()
    for k, v in preset.items():
        set_input(at, f"cfg.workload.{k}", v)
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_serving_starts_at_a_round_rate_inside_capacity_and_says_why(clear_cache):
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    cfg = at.session_state["_config"]
    rate = at.number_input(key="cfg.workload.rate_per_s").value
    cap = max_throughput(cfg, sim_spec(cfg)).requests_per_s
    # the default rate is round (1, 2 or 5 x 10^k) and clearly inside the default deployment's capacity
    mantissa = rate / 10 ** math.floor(math.log10(rate))
    assert round(mantissa, 9) in (1.0, 2.0, 5.0) and rate <= 0.5 * cap
    assert any("of the deployment's closed-form capacity" in c.value and "rounded" in c.value for c in at.caption)
    assert not any(e.value.startswith("Saturated") for e in at.error)


def test_knee_chart_keeps_its_points_spread_when_the_rate_is_far_above_capacity(clear_cache):
    at = _serving(num_requests=100, rate_per_s=2000.0)
    fig = figure(at, "p95 latency against arrival rate")
    xs = sorted({x for tr in fig["data"] if tr.get("showlegend") is not False for x in tr["x"]})
    assert fig["layout"]["xaxis"]["type"] == "log"
    # points near the chosen rate and near capacity: neither end of the axis is empty
    assert sum(x >= 1000 for x in xs) >= 3 and sum(x <= 200 for x in xs) >= 3
    # the shared p95 TTFT target (2 s by default) is drawn, named with its figure; no end-to-end target is set
    lines = [tr for tr in fig["data"] if any("target" in (t or "") for t in tr.get("text") or [])]
    assert [(tr["y"], tr["text"][0]) for tr in lines] == [([2.0, 2.0], "p95 TTFT target 2 s")]
    assert lines[0]["line"]["dash"] == "dash" and lines[0]["x"][0] <= min(xs) and lines[0]["x"][1] >= max(xs)


def _speed(**cfg) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90).run()
    for k, v in cfg.items():
        w = at.number_input(key=f"cfg.{k}") if isinstance(v, int) else at.selectbox(key=f"cfg.{k}")
        w.set_value(v)
    at.run()
    at.switch_page("../pages/speed.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_speed_leads_with_one_request_and_its_caption_agrees_with_the_info_box(clear_cache):
    # TP 16 over two 8-GPU nodes: the all-reduces cross InfiniBand and decode is communication-bound
    at = _speed(nodes=2, tp=16)
    info = at.info[0].value
    assert "decode is **communication**-bound" in info
    first = at.metric[0].label
    assert "one prompt" in first or "one request" in first, first
    bound_caption = [c.value for c in at.caption if "at every batch" in c.value or "turns compute-bound" in c.value]
    assert bound_caption and bound_caption[0].startswith("Decode is communication-bound"), bound_caption


def test_batch_chart_axes_start_at_zero(clear_cache):
    from core.config import DEFAULT
    from core.serving import batch_sweep, default_batches
    from dashboard import charts

    fig = charts.batch_chart(batch_sweep(DEFAULT, default_batches(DEFAULT, 1024)), DEFAULT.batch).to_plotly_json()
    assert fig["layout"]["yaxis"]["rangemode"] == "tozero" and fig["layout"]["yaxis2"]["rangemode"] == "tozero"


def test_defaults_show_no_red_dead_end_and_the_advice_fits_this_config(clear_cache):
    """At the defaults (70B on 8 GPUs, TP 8, so DP 1) training does not fit: a warning with changes that do fit,
    and no advice to raise ZeRO, which shards over DP and so changes nothing at DP 1."""
    from core.config import DEFAULT
    from core.physics import training_memory
    from core.training import training_fit_options

    assert DEFAULT.dp == 1 and not training_memory(DEFAULT).fits
    assert "ZeRO stage" not in training_memory(DEFAULT).reason
    options = training_fit_options(DEFAULT)
    assert options and any(o.startswith("ZeRO-3 over") for o in options)
    # each option is a config that fits, and the ZeRO-3 one names the fewest nodes that do: 3 here (2 nodes hold
    # 83.8 GB per GPU, over the 80 GiB x (1 - the 5 % training headroom) an H100 leaves; 3 hold 60.3 GB)
    z3 = next(o for o in options if o.startswith("ZeRO-3 over"))
    n = int(re.search(r"\((\d+) nodes", z3)[1])
    assert training_memory(DEFAULT.with_(nodes=n, zero=3)).fits
    assert not training_memory(DEFAULT.with_(nodes=n - 1, zero=3)).fits
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    set_input(at, "memory.tab", "Training")  # the Memory page computes only the chosen tab
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("fits with any one" in m.value for m in at.markdown)
    at.switch_page("../pages/training.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("ZeRO-3 over 24 GPUs" in m.value for m in at.markdown)  # 3 nodes of 8 (the test above)


def test_first_load_sends_no_hidden_math_and_optimizer_runs_one_view(clear_cache):
    """Per-session cost: formulas are drawn only when asked for, and the Optimizer runs only the chosen view."""
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not at.exception and len(at.get("latex")) == 0
    at.toggle[0].set_value(True).run()
    assert len(at.get("latex")) > 10
    at.switch_page("../pages/optimizer.py").run()
    assert not at.exception
    assert not any("GPU kind" in m.value for m in [*at.success, *at.error])  # the training search did not run


def test_shared_figures_are_built_once_for_every_session(clear_cache):
    import streamlit as st

    from dashboard import cache, charts

    st.cache_resource.clear()
    rows = ((1024, 100, 10), (2048, 50, 10))
    assert cache.figure(charts.sequences_vs_context_chart, rows) is cache.figure(
        charts.sequences_vs_context_chart, rows
    )
    assert cache.figure(charts.sequences_vs_context_chart, rows[:1]) is not cache.figure(
        charts.sequences_vs_context_chart, rows
    )


def test_inputs_a_page_does_not_read_are_greyed_out_there_with_why(clear_cache):
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not at.number_input(key="cfg.tp").disabled and not at.number_input(key="cfg.batch").disabled
    assert not [r for r in at.radio if r.key == "cfg.phase"]  # the page decides the phase; no input for it
    at.switch_page("../pages/optimizer.py").run()
    assert not at.exception
    for key in ("cfg.tp", "cfg.pp", "cfg.gpus_per_node", "cfg.batch"):
        w = at.number_input(key=key)
        assert w.disabled and "optimizer searches" in w.help, key
    assert at.selectbox(key="cfg.gpu").disabled
    assert any("Greyed-out inputs" in c.value for c in at.sidebar.caption)
    at.switch_page("../pages/serving.py").run()
    assert at.number_input(key="cfg.batch").disabled and not at.number_input(key="cfg.tp").disabled


def test_pareto_reasons_say_why_a_point_that_looks_dominated_is_on_the_front():
    from core.decision import pareto_reasons

    # B is beaten on cost and p95 by A but holds more capacity: on the three-criterion front for that alone
    r = pareto_reasons([("A", 10.0, 5.0, 2.0), ("B", 20.0, 8.0, 9.0), ("C", 5.0, 30.0, 1.0)])
    assert r["A"].startswith("no other") and r["C"].startswith("no other")
    assert "hold at most 2 requests/s; this one holds 9" in r["B"]


def test_optimizer_chart_shows_why_each_front_point_is_on_the_front(clear_cache):
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page("../pages/optimizer.py").run()
    assert not at.exception
    fig = figure(at, "cost against p95 end-to-end")
    named = {t["name"]: t for t in fig["data"] if t.get("name")}
    drawn = [(x, y) for t in named.values() if t["name"] != "recommendation" for x, y in zip(t["x"], t["y"])]
    plain = named.get("front: nothing cheaper and faster")
    assert plain is not None
    for x, y in zip(plain["x"], plain["y"]):  # nothing drawn is both cheaper and faster than a blue point
        assert not any(x2 <= x and y2 <= y and (x2, y2) != (x, y) for x2, y2 in drawn), (x, y)
    by_cap = named.get("front: more capacity than the cheaper, faster ones")
    if by_cap:  # each says its capacity on the chart and why on hover
        assert all("req/s" in t for t in by_cap["text"]) and all("on the front" in c for c in by_cap["customdata"])


def test_assumption_inputs_are_drawn_only_when_opened_and_keep_their_values(clear_cache):
    from core.base import REGISTRY

    name = next(iter(REGISTRY))
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not [w for w in at.number_input if w.key == f"cfg.a.{name}"]
    at.toggle(key="show_assumptions").set_value(True).run()
    new = REGISTRY[name].base * 0.9
    at.number_input(key=f"cfg.a.{name}").set_value(new).run()
    at.toggle(key="show_assumptions").set_value(False).run()
    at.run()
    assert not at.exception
    assert getattr(at.session_state["_config"].assumptions, name) == pytest.approx(new)
