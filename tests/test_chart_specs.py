"""Charts built from plain specs (dashboard.charts.figure_of skips plotly's per-property validation): every such
chart must still be a valid figure, which plotly's validating constructor checks property by property."""

import plotly.graph_objects as go
import pytest

from core.config import DEFAULT, RabitConfig
from core.decision import batch_band, speed_spread
from core.serving import allreduce_curve, batch_sweep, decode_curve, default_batches, roofline, speed_summary
from dashboard import charts

SOURCES = {"mbu": ("memory bandwidth utilisation", "a source")}


def _figures(cfg):
    pts = batch_sweep(cfg, default_batches(cfg, 1024))
    s = speed_summary(cfg)
    sizes = tuple(float(2**k) for k in range(10, 20))
    r = speed_spread(cfg).ranges["decode_step_s"]
    return {
        "batch": charts.batch_chart(pts, cfg.batch),
        "batch_band": charts.batch_band_chart(pts, cfg.batch, batch_band(cfg, tuple(p.batch for p in pts))),
        "roofline": charts.roofline_chart(roofline(cfg)),
        "tradeoff": charts.tradeoff_chart(pts),
        "breakdown": charts.breakdown_chart((("prefill", s.prefill.iteration), ("decode", s.decode.at_mean))),
        "decode_curve": charts.decode_curve_chart(decode_curve(cfg)),
        "allreduce": charts.allreduce_chart(sizes, allreduce_curve(cfg, sizes)),
        "tornado": charts.tornado_chart(r, "What moves the decode step", SOURCES),
        "tornado_empty": charts.tornado_chart(r.model_copy(update={"contributions": ()}), "nothing", SOURCES),
        "range_compare": charts.range_compare_chart(
            (("a", 1.0, 0.8, 1.3, "heuristic"), ("b", 1.1, 1.0, 1.2, "calibrated")), "t", "s", (("a", 1.5),)
        ),
    }


@pytest.mark.parametrize("cfg", [DEFAULT, RabitConfig(model="mixtral-8x7b", gpus_per_node=2, tp=2)], ids=["70b", "moe"])
def test_every_plain_spec_chart_is_a_valid_figure(cfg):
    for name, fig in _figures(cfg).items():
        spec = fig.to_plotly_json()
        checked = go.Figure(spec)  # raises on any property plotly does not know or a value it refuses
        assert checked.to_plotly_json()["layout"].keys() == spec["layout"].keys(), name
        assert len(checked.data) == len(fig.data) >= 1, name
        title = spec["layout"].get("title")
        assert isinstance(title, dict) and title.get("text"), name  # a title object, never a bare string


def test_the_band_is_drawn_on_the_throughput_axis():
    pts = batch_sweep(DEFAULT, default_batches(DEFAULT, 256))
    band = batch_band(DEFAULT, tuple(p.batch for p in pts))
    fig = charts.batch_band_chart(pts, DEFAULT.batch, band).to_plotly_json()
    fill = [t for t in fig["data"] if t.get("fill") == "toself"]
    assert len(fill) == 1 and fill[0]["yaxis"] == "y2" and charts.BAND_RULE_TEXT in fill[0]["name"]
    lows, highs = [r[0] for r in band["tokens_per_s"]], [r[2] for r in band["tokens_per_s"]]
    assert list(fill[0]["y"]) == highs + lows[::-1]


def test_an_unbounded_fleet_cost_is_drawn_open_not_as_the_tightest_bar():
    row = {"workload": "chat", "configuration": "2 x h100-sxm", "cost_per_hour": 10.0}
    rows = [
        {**row, "plan": "nominal", "cost_per_hour_low": 8.0, "cost_per_hour_high": float("inf")},
        {**row, "workload": "code", "plan": "nominal", "cost_per_hour_low": 9.0, "cost_per_hour_high": 12.0},
        {**row, "plan": "robust", "cost_per_hour_low": None, "cost_per_hour_high": None},
    ]
    fig = charts.fleet_cost_bars(rows)
    go.Figure(fig.to_dict())  # a valid figure
    nominal = fig.data[0]
    # the open end draws no whisker (an infinite one would be drawn as none at all, the tightest-looking bar) and
    # the bar says so; the bounded bar keeps its whiskers: +2 / -1
    assert list(nominal.error_y.array) == [0.0, 2.0] and list(nominal.error_y.arrayminus) == [2.0, 1.0]
    assert list(nominal.text) == ["range: no bound above", ""]


@pytest.mark.parametrize(("lo_s", "hi_s"), [(150.0, 1100.0), (60.0, 3600.0), (2.0, 9.0), (0.004, 0.3), (100.0, 9e4)])
def test_a_time_axis_ticks_round_durations(lo_s, hi_s):
    # Video's latency axis read 3.33 / 8.33 / 16.7 min: decades of seconds (200, 500, 1,000 s) written in minutes
    vals, text = charts.time_ticks(lo_s, hi_s)
    inside = [v for v in vals if lo_s <= v <= hi_s]
    assert len(inside) >= 2, text
    for v, t in zip(vals, text, strict=True):
        n, unit = t.split(" ")
        scale = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "days": 86400.0}[unit]
        assert float(n) * scale == pytest.approx(v)  # the label is the tick
        assert float(n) in {1, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40, 50, 100, 200, 500}, t  # a round number
    assert "3.33 min" not in text and "8.33 min" not in text


def test_the_video_latency_chart_uses_round_time_ticks():
    rows = [(2.0, 180.0, 320.0, False), (5.0, 200.0, 450.0, False), (8.0, 260.0, 1000.0, False)]
    fig = charts.video_rate_chart(rows, 9.0, 5.0)
    assert list(fig.layout.yaxis.ticktext) == charts.time_ticks(180.0, 1000.0)[1]
    assert "5 min" in fig.layout.yaxis.ticktext and "10 min" in fig.layout.yaxis.ticktext


def test_tornado_labels_wrap_whole_and_the_margin_fits_them():
    # every assumption at once: the longest labels (89 characters) were cut to 36 with an ellipsis and still
    # clipped in half a page at 1280 px
    from core.base import REGISTRY, Contribution, Range

    r = Range(
        value=1.0,
        low=0.5,
        high=2.0,
        contributions=tuple(Contribution(name=n, d_down=-0.1, d_up=0.1 + i / 100) for i, n in enumerate(REGISTRY)),
    )
    sources = {n: (i.label, i.source) for n, i in REGISTRY.items()}
    fig = charts.tornado_chart(r, "all", sources)
    go.Figure(fig.to_dict())
    shown = list(fig.data[0].y)
    assert not any("…" in t for t in shown)
    # each label is the whole label (its parenthesis left for the hover), on lines of at most 28 characters
    assert {t.replace("<br>", " ") for t in shown} == {i.label.split(" (")[0] for i in REGISTRY.values()}
    widest = max(len(x) for t in shown for x in t.split("<br>"))
    assert widest <= 28
    assert fig.layout.margin.l >= 7 * widest  # ~7 px a character at the axis's 12 px font
