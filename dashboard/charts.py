"""Plotly figures built from ``core`` results (no physics here: values come in computed)."""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

from core.base import DAY_S, GB, fmt_bytes, fmt_latency, fmt_num, fmt_time, fmt_time_in, fmt_usd, sig

#: A horizontal legend at the foot of the figure: plotly reserves room for it below the axis title, where a
#: legend placed at a negative paper fraction lands on the title or the tick labels when the figure is short.
LEGEND_BELOW = dict(orientation="h", yref="container", yanchor="bottom", y=0.0, xanchor="left", x=0.0)


def log_ticks(lo: float, hi: float, fmt: Callable[[float], str] = sig) -> tuple[list[float], list[str]]:
    """Tick values and labels of a log axis spanning ``lo``..``hi``: each decade (0.1, 1, 10, ...), each written
    by ``fmt`` in full; where fewer than three decades fall inside, 2 and 5 of each decade as well, and where even
    those are fewer than three, every digit. No label is a bare mantissa ("5 2 100 5 2")."""

    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return [], []
    lo, hi = min(lo, hi), max(lo, hi)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        vals = [m * 10.0**k for k in range(k0, k1 + 1) for m in mantissas]
        inside = [v for v in vals if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        if len(inside) >= 3:
            break
    vals = [v for v in vals if lo / 10 < v < hi * 10]
    return vals, [fmt(v) for v in vals]


_MIN_S, _HOUR_S = 60.0, 3600.0
#: Durations people write [s], coarse to fine: a time axis's ticks fall on these (2 min, 5 min, 10 min), never on
#: a decade of seconds (200 s reads "3.33 min"). Below a second the decades' 1, 2, 5 (ms) serve.
_TIME_TICKS_S = (
    (1.0, 10.0, _MIN_S, 10 * _MIN_S, _HOUR_S, 10 * _HOUR_S, DAY_S, 10 * DAY_S),
    (
        *(1.0, 2.0, 5.0, 10.0, 20.0, 30.0),
        *(m * _MIN_S for m in (1, 2, 5, 10, 20, 30)),
        *(h * _HOUR_S for h in (1, 2, 5, 10)),
        *(d * DAY_S for d in (1, 2, 5, 10)),
    ),
    (
        *(float(x) for x in (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40)),
        *(m * _MIN_S for m in (1, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40)),
        *(h * _HOUR_S for h in (1, 1.5, 2, 3, 4, 6, 8, 12, 18)),
        *(d * DAY_S for d in (1, 2, 3, 5, 7, 10)),
    ),
)


def time_ticks(lo_s: float, hi_s: float) -> tuple[list[float], list[str]]:
    """Tick values [s] and labels of a log time axis spanning ``lo_s``..``hi_s``: round durations in the unit
    people use (30 s, 2 min, 5 min, 1 h), the coarsest set with at least three inside; below a second the decades
    of :func:`log_ticks`."""
    if not (lo_s > 0 and hi_s > 0 and math.isfinite(lo_s) and math.isfinite(hi_s)):
        return [], []
    lo_s, hi_s = min(lo_s, hi_s), max(lo_s, hi_s)
    sub = [
        m * 10.0**k for k in range(math.floor(math.log10(lo_s)), 0) for m in (1, 2, 5) if m * 10.0**k < 1
    ]  # below a second
    for level, enough in zip(_TIME_TICKS_S, (3, 2, 0), strict=True):
        vals = sorted({*sub, *level})
        inside = [v for v in vals if lo_s * (1 - 1e-9) <= v <= hi_s * (1 + 1e-9)]
        if len(inside) >= enough:
            break
    vals = [v for v in vals if lo_s / 3 < v < hi_s * 3]
    return vals, [_duration_label(v) for v in vals]


def _duration_label(v_s: float) -> str:
    """A round duration in its largest whole unit: 1 min (not 60 s), 1 h (not 60 min), 1.5 min, 2 days."""
    if v_s < 1:
        return fmt_time(v_s)
    for unit, name in ((DAY_S, " days"), (_HOUR_S, " h"), (_MIN_S, " min"), (1.0, " s")):
        if v_s >= unit:
            n = v_s / unit
            return f"{n:g}{' day' if name == ' days' and n == 1 else name}"
    return fmt_time(v_s)


def log_time_axis(fig: go.Figure, axis: str = "y", **extra: Any) -> go.Figure:
    """Make ``axis`` of ``fig`` a log axis of durations [s] ticked at round values (:func:`time_ticks`)."""
    name = f"{axis[0]}axis{axis[1:]}"
    xs = [x for x in _axis_values(fig, axis) if x > 0 and math.isfinite(x)]
    spec: dict[str, Any] = dict(type="log", **extra)
    if xs:
        vals, text = time_ticks(min(xs), max(xs))
        spec.update(tickmode="array", tickvals=vals, ticktext=text)
    fig.update_layout({name: spec})
    return fig


def log_axis_spec(values, fmt: Callable[[float], str] = sig, **axis: Any) -> dict[str, Any]:
    """A log axis's layout dict with its ticks from :func:`log_ticks` over the positive ``values`` it shows;
    ``axis`` adds to it (``title``, ``anchor``, ...)."""
    import math

    xs = [x for x in (float(v) for v in values if isinstance(v, numbers.Real)) if x > 0 and math.isfinite(x)]
    spec: dict[str, Any] = dict(type="log", **axis)
    if xs:
        vals, text = log_ticks(min(xs), max(xs), fmt)
        spec.update(tickmode="array", tickvals=vals, ticktext=text)
    return spec


def _axis_values(fig: go.Figure, axis: str) -> list[float]:
    """Every plotted value on ``axis`` ("x", "y", "y2", ...) of ``fig``, error bars' ends included."""
    letter, ref = axis[0], axis
    out: list[float] = []
    for tr in fig.data:
        own = getattr(tr, f"{letter}axis", None) or letter
        if own != ref:
            continue
        raw = getattr(tr, letter, None)
        vals = [float(v) for v in (() if raw is None else raw) if isinstance(v, numbers.Real) and v == v]
        out += vals
        err = getattr(tr, f"error_{letter}", None)
        if err is not None and err.array is not None and len(err.array) == len(vals):
            minus = err.arrayminus if err.arrayminus is not None else err.array
            out += [v + e for v, e in zip(vals, err.array) if e is not None]
            out += [v - e for v, e in zip(vals, minus) if e is not None]
    return out


def log_axis(fig: go.Figure, axis: str = "x", fmt: Callable[[float], str] = sig, **extra: Any) -> go.Figure:
    """Make ``axis`` ("x", "y", "y2") of ``fig`` a log axis labelled by decade (:func:`log_ticks`) over the
    values its traces plot."""
    name = f"{axis[0]}axis{axis[1:]}"
    fig.update_layout({name: log_axis_spec(_axis_values(fig, axis), fmt, **extra)})
    return fig


PALETTE = {
    "weights": "#1f6feb",
    "kv": "#2da44e",
    "activations": "#bf8700",
    "overhead": "#8250df",
    "free": "#d0d7de",
    "gradients": "#cf222e",
    "optimizer": "#e16f24",
    "adapters": "#bf3989",
}


def stacked_bar(
    parts: list[tuple[str, float, str]], capacity_bytes: float, title: str, usable_bytes: float | None = None
) -> go.Figure:
    """One horizontal stacked bar of what fills a GPU [GB], with the capacity line."""
    fig = go.Figure()
    for name, value, color in parts:
        fig.add_bar(
            y=["one GPU"],
            x=[value / GB],
            name=name,
            orientation="h",
            marker_color=color,
            hovertemplate=f"{name}: %{{x:,.3~r}} GB<extra></extra>",
        )
    fig.add_vline(
        x=capacity_bytes / GB,
        line_dash="dash",
        line_color="black",
        annotation_text=f"capacity {sig(capacity_bytes / GB)} GB",
    )
    if usable_bytes:
        fig.add_vline(
            x=usable_bytes / GB,
            line_dash="dot",
            line_color="gray",
            annotation_text=f"usable {sig(usable_bytes / GB)} GB",
            annotation_position="bottom",
        )
    fig.update_layout(
        barmode="stack",
        height=220,
        title=title,
        xaxis_title="GB (10⁹ bytes)",
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def sequences_vs_context_chart(rows, height: int = 360) -> go.Figure:
    """Concurrent sequences per replica against context, paged and contiguous; ``rows`` = (ctx, paged, contig)."""
    fig = go.Figure()
    fig.add_scatter(x=[r[0] for r in rows], y=[r[1] for r in rows], name="paged", mode="lines+markers")
    fig.add_scatter(
        x=[r[0] for r in rows], y=[r[2] for r in rows], name="contiguous (reserve max context)", mode="lines+markers"
    )
    fig.update_layout(
        title="Sequences per replica against context",
        xaxis_title="context tokens (input + output)",
        yaxis_title="sequences",
        yaxis_rangemode="tozero",
        height=height,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return log_axis(fig, "x", fmt_num)


def long_context_memory_chart(points, height: int = 360) -> go.Figure:
    """One sequence alone as its context grows: its KV per GPU and the GPU's total against the usable memory [GB]."""
    x = [p.context_tokens for p in points]
    fig = go.Figure()
    fig.add_scatter(x=x, y=[p.kv_bytes_per_seq_per_gpu / GB for p in points], name="KV of the sequence per GPU")
    fig.add_scatter(
        x=x,
        y=[p.total_bytes_per_gpu / GB for p in points],
        name="total per GPU",
        mode="lines+markers",
        marker=dict(symbol=["circle" if p.fits else "x" for p in points], size=9),
    )
    fig.add_scatter(x=x, y=[p.usable_bytes_per_gpu / GB for p in points], name="usable", line=dict(dash="dash"))
    return _against_context(fig, "Memory of one sequence as the context grows (x: does not fit)", "GB per GPU", height)


def _against_context(fig: go.Figure, title: str, y_title: str, height: int, **layout: Any) -> go.Figure:
    """The long-context charts' layout: a log axis of context tokens, the legend below."""
    fig.update_layout(
        title=title,
        xaxis_type="log",
        xaxis_title="context tokens",
        yaxis_title=y_title,
        height=height,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
        **layout,
    )
    return fig


def long_context_ttft_chart(points, height: int = 360) -> go.Figure:
    """The first token's compute as the context grows, split into the matmuls (linear) and attention (quadratic)."""
    x = [p.context_tokens for p in points]
    fig = go.Figure()
    fig.add_bar(x=x, y=[p.linear_s for p in points], name="matmuls (linear in the context)")
    fig.add_bar(x=x, y=[p.attention_s for p in points], name="attention (quadratic)")
    fig.add_scatter(x=x, y=[p.ttft_s for p in points], name="time to first token", mode="lines+markers")
    return _against_context(
        fig, "Time to the first token of one prompt", "seconds (log)", height, barmode="stack", yaxis_type="log"
    )


def kv_per_token_chart(kv_rows, kv_dtype: str) -> go.Figure:
    """KV bytes per token for every catalog model [KB], coloured by attention layout; every bar labelled."""
    fig = go.Figure(
        go.Bar(
            x=[r[2] / 1e3 for r in kv_rows],
            y=[f"{r[0]} ({r[1]})" for r in kv_rows],
            orientation="h",
            marker_color=[{"MHA": "#cf222e", "GQA": "#1f6feb", "MLA": "#2da44e"}.get(r[1], "#8250df") for r in kv_rows],
            text=[fmt_bytes(r[2], "auto") for r in kv_rows],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{text} per token<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"KV bytes per token by model ({kv_dtype})",
        xaxis_title="KB per token (bars from zero: lengths compare)",
        xaxis_range=[0, 1.25 * max([r[2] / 1e3 for r in kv_rows] or [1.0])],  # room for the largest bar's label
        yaxis=dict(dtick=1),  # dtick 1: no model's label skipped
        height=max(360, 22 * len(kv_rows) + 110),
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig


def training_by_zero_chart(by_zero, capacity_bytes: float, height: int = 380) -> go.Figure:
    """Training memory per GPU [GB] at ZeRO stages 0-3, stacked by kind, with the capacity line."""
    fig = go.Figure()
    for name, attr, color in (
        ("weights", "weight_bytes_per_gpu", "weights"),
        ("gradients", "gradient_bytes_per_gpu", "gradients"),
        ("optimizer", "optimizer_bytes_per_gpu", "optimizer"),
        ("activations", "activation_bytes_per_gpu", "activations"),
        ("overhead", "overhead_bytes_per_gpu", "overhead"),
    ):
        fig.add_bar(
            x=[f"ZeRO-{z}" for z, _ in by_zero],
            y=[getattr(r, attr) / GB for _, r in by_zero],
            name=name,
            marker_color=PALETTE[color],
        )
    fig.add_scatter(
        x=[f"ZeRO-{z}" for z, _ in by_zero],
        y=[capacity_bytes / GB] * len(by_zero),
        mode="lines",
        name="capacity",
        line=dict(color="black", dash="dash"),
        hoverinfo="skip",
    )
    fig.update_layout(
        barmode="stack",
        title="Training memory per GPU by ZeRO stage",
        yaxis_title="GB",
        height=height,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig


# --- speed (issue 3) ----------------------------------------------------------------------------------

from core.base import MS, TERA  # noqa: E402

SPEED_COLORS = {
    "compute": "#cf222e",
    "memory": "#1f6feb",
    "communication": "#bf8700",
    "overhead": "#8250df",
    "hops": "#57606a",
}


def roofline_chart(roof, height: int = 420) -> go.Figure:
    """Arithmetic intensity [FLOP/B] against attainable throughput [TFLOP/s] per GPU, log-log."""
    import numpy as np

    lo = min([0.5] + [p.intensity_flop_per_byte / 3 for p in roof.points])
    hi = max([roof.ridge_flop_per_byte * 10] + [p.intensity_flop_per_byte * 20 for p in roof.points])
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    data = [
        dict(
            type="scatter",
            x=x,
            y=np.minimum(roof.peak_flop_per_s, x * roof.bw_bytes_per_s) / TERA,
            mode="lines",
            name="datasheet roof",
            line=dict(color="#8c959f", dash="dash"),
        ),
        dict(
            type="scatter",
            x=x,
            y=np.minimum(roof.ceiling_flop_per_s, x * roof.bw_eff_bytes_per_s) / TERA,
            mode="lines",
            name="effective roof (MFU, MBU)",
            line=dict(color="#24292f"),
        ),
    ]
    symbols = {"prefill": "diamond", "decode": "circle"}
    for p in roof.points:
        kind = p.name.split(",")[0]
        color = SPEED_COLORS[p.bound]
        data.append(
            dict(
                type="scatter",
                x=[p.intensity_flop_per_byte],
                y=[p.roof_flop_per_s / TERA],
                mode="markers+text",
                text=[p.name],
                textposition="bottom right",
                name=p.name,
                marker=dict(size=12, symbol=symbols.get(kind, "circle"), color=color),
                hovertemplate=f"{p.name}<br>%{{x:,.3~r}} FLOP/B, %{{y:,.4~r}} TFLOP/s ({p.bound})<extra></extra>",
            )
        )
        data.append(
            dict(
                type="scatter",
                x=[p.intensity_flop_per_byte],
                y=[p.delivered_flop_per_s / TERA],
                mode="markers",
                showlegend=False,
                marker=dict(size=9, symbol=symbols.get(kind, "circle") + "-open", color=color),
                hovertemplate=f"{p.name} with communication and overhead: %{{y:,.4~r}} TFLOP/s<extra></extra>",
            )
        )
    return figure_of(
        data,
        dict(
            title=dict(text="Roofline per GPU (filled: on the roof; open: with communication and overhead)"),
            xaxis=log_axis_spec(x, title=dict(text="arithmetic intensity [FLOP/byte]")),
            yaxis=log_axis_spec([v for d in data for v in d["y"]], title=dict(text="attainable [TFLOP/s]")),
            height=height,
            legend=LEGEND_BELOW,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    )


def batch_chart(points, batch: int, height: int = 380) -> go.Figure:
    """Decode step time and aggregate throughput against batch; batches that do not fit are hollow."""
    data, layout = _batch_spec(points, batch, height)
    return figure_of(data, layout)


def _batch_spec(points, batch: int, height: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The traces and layout of :func:`batch_chart`: step time on the left axis, tokens/s on the right one (the
    layout ``make_subplots(specs=[[{"secondary_y": True}]])`` makes), as a plain spec for :func:`figure_of`."""
    xs = [p.batch for p in points]
    top = max(p.decode_step_s for p in points) / MS
    data: list[dict[str, Any]] = [
        dict(
            type="scatter",
            x=xs,
            y=[p.decode_step_s / MS for p in points],
            name="decode step [ms]",
            mode="lines+markers",
            marker=dict(symbol=["circle" if p.fits else "circle-open" for p in points]),
            line=dict(color=SPEED_COLORS["memory"]),
            xaxis="x",
            yaxis="y",
        ),
        dict(
            type="scatter",
            x=xs,
            y=[p.tokens_per_s for p in points],
            name="decode tokens/s (aggregate)",
            mode="lines+markers",
            marker=dict(symbol=["square" if p.fits else "square-open" for p in points]),
            line=dict(color=SPEED_COLORS["compute"]),
            xaxis="x",
            yaxis="y2",
        ),
        # a trace, not a shape: shapes on log axes are placed inconsistently across plotly versions
        dict(
            type="scatter",
            x=[batch, batch],
            y=[0, top],
            mode="lines+text",
            text=["", f"batch {batch}"],
            textposition="top right",
            line=dict(color="#57606a", dash="dot"),
            showlegend=False,
            hoverinfo="skip",
            xaxis="x",
            yaxis="y",
        ),
    ]
    layout: dict[str, Any] = dict(
        xaxis=log_axis_spec(
            xs, fmt_num, anchor="y", domain=[0.0, 0.94], title=dict(text="batch (concurrent sequences per replica)")
        ),
        # both from zero: a step time or a throughput below zero is not a thing (autorange put a negative tick there)
        yaxis=dict(anchor="x", domain=[0.0, 1.0], title=dict(text="ms per step"), rangemode="tozero"),
        yaxis2=dict(anchor="x", overlaying="y", side="right", title=dict(text="tokens/s"), rangemode="tozero"),
        title=dict(text="Step time and throughput against batch (hollow: KV does not fit)"),
        height=height,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return data, layout


def tradeoff_chart(points, height: int = 380) -> go.Figure:
    """Per-user tokens/s against aggregate tokens/s, one point per batch."""
    return figure_of(
        [
            dict(
                type="scatter",
                x=[p.tokens_per_s_per_user for p in points],
                y=[p.tokens_per_s for p in points],
                mode="lines+markers+text",
                text=[f"B={p.batch}" for p in points],
                textposition="top right",
                marker=dict(
                    color=[SPEED_COLORS[p.bound] for p in points],
                    symbol=["circle" if p.fits else "circle-open" for p in points],
                    size=9,
                ),
                hovertemplate="%{text}: %{x:,.3~r} tokens/s per user, %{y:,.4~r} tokens/s in all<extra></extra>",
            )
        ],
        dict(
            title=dict(text="Latency against throughput (colour: what binds; hollow: does not fit)"),
            xaxis=dict(title=dict(text="tokens/s per user (interactivity)")),
            yaxis=dict(title=dict(text="tokens/s aggregate")),
            height=height,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    )


def breakdown_chart(items, height: int = 300) -> go.Figure:
    """Grouped bars of (compute, memory, communication, hops, overhead) per named iteration [ms].

    ``items`` = ((name, IterationParts), ...); compute and memory overlap (the larger counts).
    """
    names = [n for n, _ in items]
    data = []
    for part, attr in (
        ("compute", "compute_s"),
        ("memory", "memory_s"),
        ("communication", "comm_s"),
        ("hops", "hops_s"),
        ("overhead", "overhead_s"),
    ):
        vals = []
        for _, it in items:
            v = getattr(it, attr)
            vals.append((v * it.pp if attr in ("compute_s", "memory_s", "comm_s") else v) / MS)
        data.append(
            dict(
                type="bar",
                y=names,
                x=vals,
                name=part,
                orientation="h",
                marker=dict(color=SPEED_COLORS[part]),
                hovertemplate=f"{part}: %{{x:,.4~r}} ms<extra></extra>",
            )
        )
    return figure_of(
        data,
        dict(
            barmode="group",
            title=dict(text="One iteration taken apart (compute and memory overlap; the larger binds)"),
            xaxis=dict(title=dict(text="ms (all stages)"), rangemode="tozero"),
            height=height,
            legend=LEGEND_BELOW,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    )


def decode_curve_chart(rows, height: int = 320) -> go.Figure:
    """Decode step time as the context grows over the output [ms]."""
    ctx = [r[0] for r in rows]
    line = dict(type="scatter", x=ctx)
    return figure_of(
        [
            dict(line, y=[r[1] / MS for r in rows], name="step", line=dict(color="#24292f")),
            dict(
                line,
                y=[r[3] / MS for r in rows],
                name="memory part",
                line=dict(color=SPEED_COLORS["memory"], dash="dot"),
            ),
            dict(
                line,
                y=[r[2] / MS for r in rows],
                name="compute part",
                line=dict(color=SPEED_COLORS["compute"], dash="dot"),
            ),
        ],
        dict(
            title=dict(text="Decode time per token as the context grows"),
            xaxis=dict(title=dict(text="cached tokens")),
            yaxis=dict(title=dict(text="ms")),
            height=height,
            legend=LEGEND_BELOW,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    )


def spec_chart(rows, alpha: float, alpha_star: float, height: int = 320) -> go.Figure:
    fig = go.Figure(go.Scatter(x=[r[0] for r in rows], y=[r[1] for r in rows], mode="lines", name="speed-up"))
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="break-even")
    fig.add_vline(x=alpha, line_dash="dot", annotation_text=f"α = {sig(alpha, 6)}")
    if alpha_star == alpha_star and 0 < alpha_star < 1:  # not NaN
        fig.add_vline(
            x=alpha_star,
            line_color="#cf222e",
            annotation_text=f"α* = {alpha_star:.2f}",
            annotation_position="bottom right",
        )
    fig.update_layout(
        title="Speculative speed-up against acceptance rate",
        xaxis_title="acceptance rate α",
        yaxis_title="speed-up per sequence [x]",
        height=height,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig


def allreduce_chart(sizes_bytes, curves: dict, height: int = 320) -> go.Figure:
    return figure_of(
        [
            dict(
                type="scatter",
                x=list(sizes_bytes),
                y=[y / MS for y in ys],
                name=name,
                mode="lines",
                line=dict(width=4 if name == "chosen" else 2, dash="solid" if name == "chosen" else "dot"),
            )
            for name, ys in curves.items()
        ],
        dict(
            title=dict(text="All-reduce over the TP group: ring and tree/NVLS, the cheaper wins"),
            xaxis=log_axis_spec(sizes_bytes, lambda v: fmt_bytes(v, "auto"), title=dict(text="message")),
            yaxis=log_axis_spec([y / MS for ys in curves.values() for y in ys], title=dict(text="ms")),
            height=height,
            legend=LEGEND_BELOW,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    )


# --- training (issue 5) -------------------------------------------------------------------------------
TRAIN_COLORS = {
    "compute": "#1f6feb",
    "pipeline bubble": "#d0d7de",
    "TP communication": "#bf8700",
    "EP all-to-all": "#8250df",
    "PP sends": "#e16f24",
    "DP/ZeRO (exposed)": "#cf222e",
    "optimizer step": "#2da44e",
    "overhead": "#6e7781",
}


def training_time_bar(parts, step_s: float, height: int = 220) -> go.Figure:
    """One stacked bar of where an optimizer step goes [s]; ``parts`` = (name, seconds) adding to ``step_s``."""
    fig = go.Figure()
    for name, value in parts:
        if value > 0:
            fig.add_bar(
                y=["one step"],
                x=[value],
                name=name,
                orientation="h",
                marker_color=TRAIN_COLORS.get(name, "#6e7781"),
                hovertemplate=f"{name}: %{{x:,.3~r}} s<extra></extra>",
            )
    fig.update_layout(
        barmode="stack",
        height=height,
        title=f"Where one step goes ({sig(step_s)} s)",
        xaxis_title="seconds",
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def training_curve(curve, chosen_gpus: int | None, deadline_s: float | None, height: int = 380) -> go.Figure:
    """Wall-clock (with and without failures) against GPU count for the feasible counts, log-log and labelled by
    decade, the deadline and the recommended count marked. The cost is on hover and has its own chart (the
    deadline's cost chart): a second axis of dollars over a log axis of days read neither."""
    pts = [c for c in curve if c.feasible]
    fig = go.Figure()
    x = [c.gpus for c in pts]
    fig.add_scatter(
        x=x,
        y=[c.wall_clock_s / DAY_S for c in pts],
        name="wall-clock with failures",
        mode="lines",
        line=dict(color="#1f6feb"),
        customdata=[
            [
                c.gpu_hours,
                c.layout.label() if c.layout else "",
                c.mfu,
                fmt_usd(c.cost_usd) if c.cost_usd else "no price",
            ]
            for c in pts
        ],
        hovertemplate="%{x:,} GPUs: %{y:,.3~r} days, %{customdata[3]}<br>%{customdata[0]:,.0f} GPU-h (no failures), "
        "MFU %{customdata[2]:.1%}<br>%{customdata[1]}<extra></extra>",
    )
    fig.add_scatter(
        x=x,
        y=[c.runtime_s / DAY_S for c in pts],
        name="runtime without failures",
        mode="lines",
        line=dict(color="#1f6feb", dash="dot"),
        hoverinfo="skip",
    )
    slow = [c for c in pts if c.slower_reason]
    if len(slow) > 60:  # thousands of counts: a sample of them marks where the curve rises, without a blot
        slow = slow[:: -(-len(slow) // 60)]
    if slow:
        fig.add_scatter(
            x=[c.gpus for c in slow],
            y=[c.wall_clock_s / DAY_S for c in slow],
            mode="markers",
            name="slower than a smaller count",
            marker=dict(color="#cf222e", size=6, symbol="x-thin", line=dict(width=1.5, color="#cf222e")),
            text=[c.slower_reason for c in slow],
            hovertemplate="%{x:,} GPUs: %{text}<extra></extra>",
        )
    # Reference lines as traces, not add_hline/add_vline: a shape's annotation on a log axis is placed in log units.
    if deadline_s and x:
        fig.add_scatter(
            x=[min(x), max(x)],
            y=[deadline_s / DAY_S] * 2,
            mode="lines+text",
            name="deadline",
            text=["", f"deadline {sig(deadline_s / DAY_S)} days"],
            textposition="top left",
            line=dict(color="#cf222e", dash="dash"),
            hoverinfo="skip",
            showlegend=False,
        )
    chosen = next((c for c in pts if c.gpus == chosen_gpus), None)
    if chosen is not None:
        fig.add_scatter(
            x=[chosen.gpus],
            y=[chosen.wall_clock_s / DAY_S],
            mode="markers+text",
            name=f"recommended: {chosen.gpus:,} GPUs",
            text=[f"{chosen.gpus:,} GPUs"],
            textposition="bottom left",
            marker=dict(size=14, color="#2da44e", symbol="star", line=dict(width=1, color="black")),
            hoverinfo="skip",
        )
    fig.update_layout(
        title="Wall-clock against GPU count",
        height=height,
        margin=dict(l=10, r=10, t=50, b=10),
        legend=LEGEND_BELOW,
        xaxis_title="GPUs",
        yaxis_title="days",
    )
    log_axis(fig, "x", fmt_num)
    return log_axis(fig, "y")


# --- serving simulation (issue 4) ------------------------------------------------------------------
SIM_COLORS = {"ttft_s": "#1f6feb", "itl_s": "#2da44e", "e2e_s": "#cf222e", "queue_s": "#8250df"}
SIM_LABELS = {"ttft_s": "TTFT", "itl_s": "ITL (per-request mean)", "e2e_s": "end-to-end", "queue_s": "queueing"}


def latency_cdf(samples: dict[str, "object"], height: int = 360) -> go.Figure:
    """Empirical CDFs of per-request latencies [s] on a log time axis."""
    import numpy as np

    fig = go.Figure()
    for key, x in samples.items():
        x = np.sort(np.asarray(x, dtype=float))
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        if x.size > 2000:  # plot at most ~2,000 points, keep the tails
            idx = np.unique(
                np.concatenate([np.linspace(0, x.size - 1, 2000).astype(int), np.arange(x.size - 50, x.size)])
            )
            x, y = x[idx], y[idx]
        fig.add_scatter(
            x=x,
            y=y,
            mode="lines",
            name=SIM_LABELS.get(key, key),
            line_color=SIM_COLORS.get(key),
            hovertemplate="%{x:.3s}s: %{y:.1%}<extra></extra>",
        )
    fig.update_layout(
        title="Latency CDFs (completed requests)",
        xaxis_title="latency",
        yaxis_title="share of requests",
        yaxis_tickformat=".0%",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return log_time_axis(fig, "x")


def sim_timeseries(t_s, waiting, running, kv_frac, max_points: int = 3000, height: int = 520) -> go.Figure:
    """Queue length, running batch and KV occupancy over simulated time (sample-and-hold steps)."""
    import numpy as np
    from plotly.subplots import make_subplots

    t = np.asarray(t_s, dtype=float)
    step = max(1, t.size // max_points)
    sl = slice(None, None, step)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("waiting requests", "running batch", "KV pool held"),
    )
    fig.add_scatter(
        x=t[sl],
        y=np.asarray(waiting)[sl],
        mode="lines",
        line_shape="hv",
        name="waiting",
        line_color="#cf222e",
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=t[sl],
        y=np.asarray(running)[sl],
        mode="lines",
        line_shape="hv",
        name="running",
        line_color="#1f6feb",
        row=2,
        col=1,
    )
    fig.add_scatter(x=t[sl], y=np.asarray(kv_frac)[sl], mode="lines", name="KV", line_color="#2da44e", row=3, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=3, col=1)
    fig.update_xaxes(title_text="simulated time [s]", row=3, col=1)
    fig.update_layout(height=height, showlegend=False, margin=dict(l=10, r=10, t=40, b=10))
    return fig


#: How the knee chart marks each point's saturation verdict: (marker, legend text).
VERDICT_MARKS = {
    "stable": ("circle", "stable"),
    "too short to tell": ("circle-open", "inconclusive: the run is too short to tell"),
    "saturated": ("x", "saturated: no latency (the queue grows without bound)"),
}


def p95_vs_rate(
    rows,
    capacity_rps: float,
    current_rate: float | None = None,
    height: int = 380,
    targets: dict[str, float] | None = None,
) -> go.Figure:
    """p95 TTFT and end-to-end latency against the arrival rate. A saturated point has no latency (it would only
    measure how long the run lasted): its rate is marked with an x along the top; a point too short to tell is
    drawn open and named inconclusive. ``targets``: p95 targets [s] by key (``ttft_s``, ``e2e_s``), each a dashed
    line in its latency's colour."""
    fig = go.Figure()
    rates = [r for r, _ in rows]
    targets = {k: v for k, v in (targets or {}).items() if v and k in ("ttft_s", "e2e_s")}
    for key in ("e2e_s", "ttft_s"):
        pts = [(r, getattr(s, key).p95, s.saturation_verdict) for r, s in rows if not s.saturated]
        fig.add_scatter(
            x=[r for r, _, _ in pts],
            y=[y for _, y, _ in pts],
            mode="lines+markers",
            name=f"p95 {SIM_LABELS[key]}",
            line_color=SIM_COLORS[key],
            marker_symbol=[VERDICT_MARKS[v][0] for _, _, v in pts],
            marker_size=9,
            customdata=[VERDICT_MARKS[v][1] for _, _, v in pts],
            hovertemplate="%{x:,.3~r} requests/s: %{y:,.3~r} s (%{customdata})<extra></extra>",
        )
    xs_all = rates + ([current_rate] if current_rate else [])
    for key, t in targets.items():
        fig.add_scatter(
            x=[min(xs_all), max(xs_all)],
            y=[t, t],
            mode="lines+text",
            text=[f"p95 {SIM_LABELS[key]} target {fmt_latency(t)}", ""],
            textposition="top right",
            line=dict(dash="dash", color=SIM_COLORS[key], width=1),
            hoverinfo="skip",
            showlegend=False,
        )
    ys_all = [y for tr in fig.data for y in tr.y if y is not None and y > 0] or [1.0]
    span = [min(ys_all), max(ys_all)]
    for verdict in ("too short to tell", "saturated"):
        xs = [r for r, s in rows if s.saturation_verdict == verdict]
        if not xs:
            continue
        symbol, text = VERDICT_MARKS[verdict]
        fig.add_scatter(
            x=xs,
            y=[span[1]] * len(xs) if verdict == "saturated" else [None] * len(xs),
            mode="markers",
            marker=dict(symbol=symbol, size=11, color="#cf222e" if verdict == "saturated" else "#57606a"),
            name=text,
            hovertemplate="%{x:,.3~r} requests/s: " + text + "<extra></extra>",
            visible=True if verdict == "saturated" else "legendonly",
        )
    # reference lines as traces: a shape's annotation lands in the wrong place once the rate axis is log
    for x, label, dash, color in (
        (capacity_rps, "closed-form capacity", "dash", "gray"),
        (current_rate, "this run", "dot", "black"),
    ):
        if x is not None:
            fig.add_scatter(
                x=[x, x],
                y=span,
                mode="lines+text",
                text=[label, ""],
                textposition="bottom right",
                line=dict(dash=dash, color=color),
                hoverinfo="skip",
                showlegend=False,
            )
    wide = max(rates + [current_rate or 0]) > 20 * min(rates + [current_rate or max(rates)])
    fig.update_layout(
        title="p95 latency against arrival rate",
        xaxis_title="arrival rate [requests/s]",
        yaxis_title="p95 latency [s]",
        yaxis_type="log",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    log_axis(fig, "y")
    if wide:
        log_axis(fig, "x")
    return fig


def calibration_chart(
    residuals,
    used_labels: set[str],
    low_mult: float | None,
    high_mult: float | None,
    factor: float | None,
    unit: str,
    height: int = 420,
) -> go.Figure:
    """Predicted against measured on log axes: the 1:1 line, the calibrated line and interval band, one point
    per run (hover: the run's config). ``residuals``: :class:`core.decision.calibration.Residual` of one metric."""
    fig = go.Figure()
    xs = [r.predicted for r in residuals] + [r.measured for r in residuals]
    lo, hi = min(xs) / 2, max(xs) * 2
    if low_mult is not None and high_mult is not None:
        fig.add_scatter(
            x=[lo, hi, hi, lo],
            y=[lo * low_mult, hi * low_mult, hi * high_mult, lo * high_mult],
            mode="lines",
            fill="toself",
            fillcolor="rgba(31,111,235,0.12)",
            line_width=0,
            name="interval",
            hoverinfo="skip",
        )
        fig.add_scatter(
            x=[lo, hi],
            y=[lo * factor, hi * factor],
            mode="lines",
            name=f"calibrated (x{sig(factor)})",
            line=dict(color="#1f6feb"),
        )
    fig.add_scatter(
        x=[lo, hi], y=[lo, hi], mode="lines", name="1:1 (analytical)", line=dict(color="#57606a", dash="dash")
    )
    for used in (True, False):
        pts = [r for r in residuals if (r.label in used_labels) == used]
        if pts:
            fig.add_scatter(
                x=[r.predicted for r in pts],
                y=[r.measured for r in pts],
                mode="markers",
                name="runs used" if used else "other GPU kind (not used)",
                marker=dict(size=10, color="#cf222e" if used else "#8c959f"),
                # a run's label is the user's text: escaped, so plotly's hover never renders it as a tag or a link
                text=[f"{html.escape(r.label)}<br>{html.escape(r.config)}<br>r = {r.r:+.3f}" for r in pts],
                hovertemplate="%{text}<br>predicted %{x:.4s}, measured %{y:.4s}<extra></extra>",
            )
    fig.update_layout(
        xaxis_title=f"predicted [{unit}]",
        yaxis_title=f"measured [{unit}]",
        height=height,
        margin=dict(l=10, r=10, t=30, b=10),
        legend=LEGEND_BELOW,
    )
    log_axis(fig, "x")
    return log_axis(fig, "y")


# --- ranges (issue 9) --------------------------------------------------------------------------------
BAND_FILL = "rgba(31, 111, 235, 0.18)"


def _hex_rgba(color: str, alpha: float) -> str:
    if color.startswith("#") and len(color) == 7:
        r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
        return f"rgba({r}, {g}, {b}, {alpha})"
    return BAND_FILL


def add_band(
    fig: go.Figure, x, low, high, name: str = "range", color: str = "#1f6feb", scale: float = 1.0, **place
) -> go.Figure:
    """A shaded band between ``low`` and ``high`` along ``x`` (heuristic range or calibrated interval), with its
    edges dotted. ``place`` goes to ``add_trace`` (``row``, ``col``, ``secondary_y=True`` on a subplot figure).
    The two traces are built without per-property validation (their specs are fixed here)."""
    xs, lo, hi = list(x), [v / scale for v in low], [v / scale for v in high]
    fig.add_trace(
        go.Scatter(
            x=xs + xs[::-1],
            y=hi + lo[::-1],
            fill="toself",
            fillcolor=_hex_rgba(color, 0.18),
            line=dict(width=0),
            hoverinfo="skip",
            name=name,
            showlegend=True,
            _validate=False,
        ),
        **place,
    )
    fig.add_trace(
        go.Scatter(
            x=xs + [None] + xs,
            y=hi + [None] + lo,
            mode="lines",
            line=dict(width=0.5, color=color, dash="dot"),
            showlegend=False,
            customdata=["high"] * len(xs) + [None] + ["low"] * len(xs),
            hovertemplate=f"{name} %{{customdata}}: %{{y:,.4~r}}<extra></extra>",
            _validate=False,
        ),
        **place,
    )
    return fig


#: Legend of a band computed per point by the combination rule (core.decision.uncertainty.batch_band).
BAND_RULE_TEXT = "heuristic range (each assumption at its bounds, combined)"


def batch_band_chart(points, batch: int, band: dict, height: int = 380) -> go.Figure:
    """:func:`batch_chart` with the aggregate tokens/s range shaded (``band``: core.decision.uncertainty.batch_band)."""
    data, layout = _batch_spec(points, batch, height)
    xs, rows = [p.batch for p in points], band["tokens_per_s"]
    lo, hi = [r[0] for r in rows], [r[2] for r in rows]
    name, color = f"tokens/s, {BAND_RULE_TEXT}", SPEED_COLORS["compute"]
    data += [
        dict(
            type="scatter",
            x=xs + xs[::-1],
            y=hi + lo[::-1],
            fill="toself",
            fillcolor=_hex_rgba(color, 0.18),
            line=dict(width=0),
            hoverinfo="skip",
            name=name,
            showlegend=True,
            xaxis="x",
            yaxis="y2",
        ),
        dict(
            type="scatter",
            x=xs + [None] + xs,
            y=hi + [None] + lo,
            mode="lines",
            line=dict(width=0.5, color=color, dash="dot"),
            showlegend=False,
            customdata=["high"] * len(xs) + [None] + ["low"] * len(xs),
            hovertemplate=f"{name} %{{customdata}}: %{{y:,.4~r}}<extra></extra>",
            xaxis="x",
            yaxis="y2",
        ),
    ]
    return figure_of(data, layout)


def range_compare_chart(
    rows: tuple[tuple[str, float, float, float, str], ...],
    title: str,
    unit: str,
    measured: tuple[tuple[str, float], ...] = (),
    scale: float = 1.0,
    height: int | None = None,
) -> go.Figure:
    """Ranges side by side: one row per (label, value, low, high, basis), the value a dot and the range an error
    bar; each ``measured`` (label, value) a cross on its row, so a measurement outside a range shows at a glance.
    Values are divided by ``scale`` and labelled ``unit`` (log axis: ranges are multiplicative)."""
    labels = [r[0] for r in rows]
    data = [
        dict(
            type="scatter",
            x=[r[1] / scale for r in rows],
            y=labels,
            mode="markers",
            name="prediction with its range",
            marker=dict(size=10, color="#1f6feb"),
            error_x=dict(
                type="data",
                symmetric=False,
                array=[(r[3] - r[1]) / scale for r in rows],
                arrayminus=[(r[1] - r[2]) / scale for r in rows],
                thickness=2,
                width=8,
            ),
            customdata=[[r[2] / scale, r[3] / scale, r[4]] for r in rows],
            hovertemplate="%{y}: %{x:,.4~r}<br>range %{customdata[0]:,.4~r} … %{customdata[1]:,.4~r}<br>"
            "%{customdata[2]}<extra></extra>",
        )
    ]
    if measured:
        data.append(
            dict(
                type="scatter",
                x=[m[1] / scale for m in measured],
                y=[m[0] for m in measured],
                mode="markers",
                name="measured",
                marker=dict(size=12, symbol="x", color="#cf222e"),
                hovertemplate="%{y}: measured %{x:,.4~r}<extra></extra>",
            )
        )
    layout = dict(
        title=dict(text=title),
        xaxis=log_axis_spec(
            [v / scale for r in rows for v in r[1:4]] + [m[1] / scale for m in measured], title=dict(text=unit)
        ),
        height=height or max(200, 110 + 45 * len(set(labels))),
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return figure_of(data, layout)


def tornado_chart(r, title: str, sources: dict[str, tuple[str, str]], height: int | None = None) -> go.Figure:
    """Which assumptions move a number most: one bar per assumption, labelled in words from the assumptions
    registry (its code name and source on hover); left the bound that lowers the number, right the one that raises
    it [%].

    ``r``: a :class:`core.base.ranges.Range`; ``sources``: name -> (label, source). Built from a plain spec
    (:func:`figure_of`): every page redraws its tornado when its number changes.
    """
    import math

    contribs = sorted(r.contributions, key=lambda c: c.d_up - c.d_down)
    names = [c.name for c in contribs]
    labels = [_tick_label(sources.get(n, (n, ""))[0]) for n in names]
    lines = [t.split("<br>") for t in labels]
    widest = max((len(x) for ls in lines for x in ls), default=0)
    rows = max((len(ls) for ls in lines), default=1)
    down = [(math.exp(c.d_down) - 1) * 100 if math.isfinite(c.d_down) else -100.0 for c in contribs]
    up = [(math.exp(c.d_up) - 1) * 100 if math.isfinite(c.d_up) else 100.0 for c in contribs]
    hover = [
        f"<b>{sources.get(n, (n, ''))[0]}</b> ({n})<br>source: {_wrap(sources.get(n, ('', ''))[1])}" for n in names
    ]
    bar = dict(type="bar", y=labels, orientation="h", customdata=hover)
    layout = dict(
        barmode="overlay",
        title=dict(text=title),
        xaxis=dict(title=dict(text="change of the number, one assumption at a bound [%]"), zeroline=True),
        yaxis=dict(dtick=1, automargin=True),
        height=height or max(220, 90 + max(28, 15 * rows + 6) * len(names)),
        # room for the widest label line (about 7 px a character at the axis's 12 px font), so none is cut
        margin=dict(l=10 + round(_TICK_PX_PER_CHAR * widest), r=10, t=50, b=10),
        legend=LEGEND_BELOW,
    )
    if not names:
        layout["annotations"] = [
            dict(text="no assumption moves this number", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        ]
    return figure_of(
        [
            dict(
                bar,
                x=down,
                name="the bound that lowers the number",
                marker=dict(color="#1f6feb"),
                hovertemplate="%{x:,.3~r}%<br>%{customdata}<extra></extra>",
            ),
            dict(
                bar,
                x=up,
                name="the bound that raises it",
                marker=dict(color="#cf222e"),
                hovertemplate="+%{x:,.3~r}%<br>%{customdata}<extra></extra>",
            ),
        ],
        layout,
    )


#: Width of one character of a 12 px axis label [px] (Plotly's default font; wide enough for capitals and digits).
_TICK_PX_PER_CHAR = 7.0


def _tick_label(label: str, width: int = 28) -> str:
    """An assumption's label without its parenthesis, wrapped onto lines of at most ``width`` characters (never
    cut: the tornado sits in half a page's width at 1280 px, where a 36-character line was clipped)."""
    import textwrap

    return "<br>".join(textwrap.wrap(label.split(" (")[0], width, break_on_hyphens=False)) or label


def figure_of(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain trace and layout dicts (full property names, no ``a_b`` shorthands), without
    plotly's per-property validation: an order of magnitude faster to build, for the range charts every rerun
    redraws. The specs are this module's own; the figure tests render every one of them."""
    return go.Figure(data=data, layout=layout, _validate=False)


def _wrap(text: str, width: int = 70) -> str:
    import textwrap

    return "<br>".join(textwrap.wrap(text, width))


def error_bar_points(
    fig: go.Figure, x, y, low, high, name: str, color: str = "#1f6feb", scale: float = 1.0, **trace_kw
) -> go.Figure:
    """Points with asymmetric error bars from a range (e.g. the Pareto front)."""
    ys = [v / scale for v in y]
    fig.add_scatter(
        x=list(x),
        y=ys,
        mode="markers",
        name=name,
        marker=dict(color=color, size=10),
        error_y=dict(
            type="data",
            symmetric=False,
            array=[h / scale - v for h, v in zip(high, ys)],
            arrayminus=[v - lo / scale for lo, v in zip(low, ys)],
        ),
        **trace_kw,
    )
    return fig


def deadline_cost_chart(curve, choice, height: int = 340) -> go.Figure:
    """Cost (or GPU-hours with failures) against GPU count for the counts that meet the deadline, with the
    smallest and the cheapest marked."""
    pts = [c for c in curve if c.feasible and c.meets_deadline]
    priced = choice.basis.startswith("cost")

    def val(c):
        return c.cost_usd if priced else c.gpus * c.wall_clock_s / 3600.0

    fig = go.Figure()
    fig.add_scatter(
        x=[c.gpus for c in pts],
        y=[val(c) for c in pts],
        mode="lines",
        name="meets the deadline",
        line=dict(color="#8c959f", width=1.5),
        customdata=[[c.layout.label() if c.layout else "", c.mfu] for c in pts],
        hovertemplate=("$" if priced else "")
        + "%{y:,.0f} at %{x:,} GPUs<br>MFU %{customdata[1]:.1%}<br>%{customdata[0]}<extra></extra>",
    )
    for c, name, color, symbol in (
        (choice.smallest, "smallest", "#cf222e", "diamond"),
        (choice.cheapest, "cheapest (recommended)", "#2da44e", "star"),
    ):
        fig.add_scatter(
            x=[c.gpus],
            y=[val(c)],
            mode="markers",
            name=f"{name}: {c.gpus:,} GPUs",
            marker=dict(size=16, color=color, symbol=symbol, line=dict(width=1, color="black")),
        )
    fig.update_layout(
        title=f"{'Cost' if priced else 'GPU-hours with failures'} against GPU count (every count that meets the deadline)",
        height=height,
        xaxis_title="GPUs",
        yaxis_title=choice.basis,
        yaxis_tickprefix="$" if priced else "",
        yaxis_tickformat=",.3~s",
        margin=dict(l=10, r=10, t=50, b=10),
        legend=LEGEND_BELOW,
    )
    return log_axis(fig, "x", fmt_num)


def range_cross(
    fig: go.Figure,
    x: float,
    y: float | None,
    x_range=None,
    y_range=None,
    name: str = "",
    color: str = "#2da44e",
    symbol: str = "diamond-open",
) -> go.Figure:
    """One point with horizontal and vertical error bars from its ranges (either may be None or unbounded)."""
    import math

    def bar(v, r):
        if r is None or v is None or r.basis == "none":
            return None
        hi = r.high if math.isfinite(r.high) else v * 10
        return dict(type="data", symmetric=False, array=[hi - v], arrayminus=[v - r.low], color=color, thickness=2)

    fig.add_scatter(
        x=[x],
        y=[y],
        mode="markers",
        name=name,
        marker=dict(size=14, color=color, symbol=symbol),
        error_x=bar(x, x_range),
        error_y=bar(y, y_range),
        hovertemplate=f"{name}<br>$%{{x:,.2f}}/h, p95 %{{y:,.3~r}} s<extra>range</extra>",
    )


# --- next experiment (issue 11) ----------------------------------------------------------------------
def flip_chance_chart(experiments, stable, height: int = 380) -> go.Figure:
    """Flip chance against the GPU-hours of the measurement: up and to the left runs first."""
    fig = go.Figure()
    for name, items, color in (
        ("can flip the decision", experiments, "#cf222e"),
        ("not worth measuring now", stable, "#8c959f"),
    ):
        if not items:
            continue
        fig.add_scatter(
            x=[e.gpu_hours for e in items],
            y=[e.flip_chance * 100 for e in items],
            mode="markers+text",
            name=name,
            marker=dict(color=color, size=11),
            # the rank in the table beside the chart: short labels, those of points on one spot joined ("1, 2")
            text=_rank_labels(items) if name.startswith("can") else None,
            textposition="middle right",
            customdata=[[e.input.label, e.cost_usd, e.flips_to or "no change"] for e in items],
            hovertemplate="%{customdata[0]}<br>flip chance %{y:.0f}%<br>%{x:,.3~r} GPU-hours, "
            "$%{customdata[1]:,.2f}<br>flips to: %{customdata[2]}<extra></extra>",
        )
    fig.update_layout(
        height=height,
        title="Flip chance against the GPU-hours to measure (numbers: the table's rank)",
        xaxis_title="GPU-hours to measure",
        xaxis_rangemode="tozero",
        yaxis_title="flip chance [%]",
        yaxis_range=[-5, 105],
        margin=dict(l=10, r=10, t=30, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def _rank_labels(items) -> list[str]:
    """Each point's rank (1-based), written once per spot: points that coincide share one label "1, 2"."""
    spots: dict[tuple[float, float], list[int]] = {}
    for i, e in enumerate(items, 1):
        spots.setdefault((round(e.gpu_hours, 2), round(e.flip_chance * 100)), []).append(i)
    first = {ranks[0]: ", ".join(map(str, ranks)) for ranks in spots.values()}
    return [first.get(i, "") for i in range(1, len(items) + 1)]


# --- optimizer ----------------------------------------------------------------------------------------


def optimizer_pareto(rec) -> go.Figure:
    """Simulated configurations of a recommendation: USD per hour against p95 end-to-end [s].

    The front has three criteria (cost, p95, capacity) and the chart shows two, so its members are drawn in
    two kinds: those no point beats on cost and p95 (blue, joined by the plotted front's staircase), and those
    on the front only for their capacity (orange diamonds, labelled with it, the reason on hover). Dominated
    points are grey; the recommendation is a star; the target a dashed line."""
    from core.decision import pareto_reasons

    sim = [c for c in rec.candidates if c.simulated and c.p95_e2e_s is not None]
    best = rec.recommendation
    cap = {c.label: (c.replicas or 0) * (c.capacity_per_replica_rps or 0.0) for c in sim}
    front = {p.label for p in rec.pareto}
    reasons = pareto_reasons([(c.label, c.cost_per_hour, c.p95_e2e_s, cap[c.label]) for c in sim])
    plain = [c for c in sim if c.label in front and reasons[c.label].startswith("no other")]
    by_cap = [c for c in sim if c.label in front and not reasons[c.label].startswith("no other")]
    rest = [c for c in sim if c.label not in front]
    fig = go.Figure()
    if plain:
        stair = sorted(plain, key=lambda c: c.cost_per_hour)
        fig.add_scatter(
            x=[c.cost_per_hour for c in stair],
            y=[c.p95_e2e_s for c in stair],
            mode="lines",
            line=dict(color="#1f6feb", shape="hv", width=1),
            hoverinfo="skip",
            showlegend=False,
        )
    for pts, name, color, symbol, show_cap in (
        (plain, "front: nothing cheaper and faster", "#1f6feb", "circle", False),
        (by_cap, "front: more capacity than the cheaper, faster ones", "#e16f24", "diamond", True),
        (rest, "dominated", "#8c959f", "circle", False),
    ):
        if not pts:
            continue
        fig.add_scatter(
            x=[c.cost_per_hour for c in pts],
            y=[c.p95_e2e_s for c in pts],
            name=name,
            mode="markers+text" if show_cap else "markers",
            text=[f"{sig(cap[c.label])} req/s" for c in pts] if show_cap else None,
            textposition="top center",
            marker=dict(size=11, color=color, symbol=[symbol if c.meets else "x" for c in pts], line=dict(width=1)),
            customdata=[
                f"{c.label}<br>{sig(cap[c.label])} requests/s capacity; "
                f"{'meets' if c.meets else 'misses'} the target<br>"
                + (f"on the front: {reasons[c.label]}" if c.label in front else "dominated")
                for c in pts
            ],
            hovertemplate="%{customdata}<br>$%{x:,.2f}/h, p95 e2e %{y:,.3~r} s<extra></extra>",
        )
    dis = [c for c in sim if c.mode == "disaggregated"]
    if dis:  # the front marks which layouts are disaggregated (a ring around their markers)
        fig.add_scatter(
            x=[c.cost_per_hour for c in dis],
            y=[c.p95_e2e_s for c in dis],
            mode="markers",
            name="disaggregated (prefill + decode pools)",
            marker=dict(size=18, color="rgba(0,0,0,0)", symbol="square-open", line=dict(width=2, color="#8250df")),
            hoverinfo="skip",
        )
    if best is not None:
        fig.add_scatter(
            x=[best.cost_per_hour],
            y=[best.p95_e2e_s],
            mode="markers",
            name="recommendation",
            marker=dict(size=22, color="#2da44e", symbol="star", line=dict(width=1, color="black")),
            hovertemplate=f"{best.label}<extra>recommended</extra>",
        )
    if rec.goal.p95_e2e_s and sim:
        xs = [c.cost_per_hour for c in sim]
        fig.add_scatter(
            x=[min(xs), max(xs)],
            y=[rec.goal.p95_e2e_s] * 2,
            mode="lines+text",
            text=["p95 end-to-end target", ""],
            textposition="top right",
            showlegend=False,
            line=dict(color="#57606a", dash="dash"),
            hoverinfo="skip",
        )
    fig.update_layout(
        title="Simulated configurations: cost against p95 end-to-end",
        xaxis_title="USD per hour",
        yaxis_title="p95 end-to-end [s]",
        height=460,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig


def training_cost_by_gpu(tr) -> go.Figure:
    """Cost of the cheapest training run per GPU kind [USD]; green the recommendation, grey a missed deadline."""
    fig = go.Figure(
        go.Bar(
            x=[o.gpu for o in tr.options],
            y=[o.cost_usd for o in tr.options],
            marker_color=[
                "#2da44e"
                if tr.recommendation and o.gpu == tr.recommendation.gpu
                else ("#1f6feb" if o.meets_deadline else "#8c959f")
                for o in tr.options
            ],
            text=[f"{o.gpus:,} GPUs, {fmt_time_in(o.wall_clock_s, 'days')} d" for o in tr.options],
            hovertemplate="%{x}: $%{y:,.0f}<br>%{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Cost of the cheapest run per GPU kind (grey: misses the deadline)",
        yaxis_title="USD for the run",
        height=380,
    )
    return fig


# --- video generation (issue 23) ---------------------------------------------------------------------------------

VIDEO_COLORS = {
    "text encoder": "#8250df",
    "denoising": "#1f6feb",
    "VAE decode": "#bf8700",
    "ulysses": "#1f6feb",
    "ring": "#2da44e",
    "ulysses + cfg": "#8250df",
    "ring + cfg": "#e16f24",
}


def _ref_line(fig: go.Figure, x: float, y_span: list[float], label: str, dash: str, color: str, where: str) -> None:
    """A vertical reference line at ``x`` as a trace, labelled at its ``where`` end ("top" or "bottom"): a shape's
    or an annotation's position is in log units on a log axis, a trace's is not."""
    fig.add_scatter(
        x=[x, x],
        y=y_span,
        mode="lines+text",
        text=["", label] if where == "top" else [label, ""],
        textposition=f"{where} right",
        line=dict(dash=dash, color=color),
        hoverinfo="skip",
        showlegend=False,
    )


def video_time_bar(parts: dict[str, float], video_s: float, height: int = 200) -> go.Figure:
    """One stacked bar of where a video's time goes [s]: text encoder, denoising, VAE decode."""
    fig = go.Figure()
    for name, value in parts.items():
        fig.add_bar(
            y=["one video"],
            x=[value],
            name=f"{name} ({value / video_s:.0%})" if video_s > 0 else name,
            orientation="h",
            marker_color=VIDEO_COLORS.get(name, "#6e7781"),
            hovertemplate=f"{name}: %{{x:,.4~r}} s<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        height=height,
        title="Where the time per video goes",
        xaxis_title="seconds",
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def video_speedup_chart(points, current_gpus: int, knees: dict[str, int | None], height: int = 400) -> go.Figure:
    """Speed-up of one request against its GPU count per layout, the ideal line, and where communication stops
    hiding (a hollow marker on each layout's first such count)."""
    fig = go.Figure()
    top = max((p.gpus for p in points), default=1)
    fig.add_scatter(x=[1, top], y=[1, top], mode="lines", name="ideal (= GPUs)", line=dict(color="gray", dash="dot"))
    for mode in dict.fromkeys(p.mode for p in points):
        pts = sorted((p for p in points if p.mode == mode), key=lambda p: p.gpus)
        fig.add_scatter(
            x=[p.gpus for p in pts],
            y=[p.speedup for p in pts],
            mode="lines+markers",
            name=mode,
            line_color=VIDEO_COLORS.get(mode),
            marker_symbol=["circle" if p.hidden else "circle-open" for p in pts],
            marker_size=8,
            customdata=[[p.video_s, p.comm_s, p.compute_s] for p in pts],
            hovertemplate="%{x} GPUs: %{y:,.3~r}x, %{customdata[0]:,.4~r} s per video; exposed communication "
            "%{customdata[1]:,.3~r} s per forward against %{customdata[2]:,.3~r} s of compute<extra>"
            + mode
            + "</extra>",
        )
    # markers and reference lines as traces: a shape's or an annotation's position is in log units on a log axis
    marks = [
        (p.gpus, p.speedup, mode)
        for mode, k in knees.items()
        if k is not None
        for p in points
        if p.mode == mode and p.gpus == k
    ]
    if marks:
        fig.add_scatter(
            x=[m[0] for m in marks],
            y=[m[1] for m in marks],
            mode="markers",
            marker=dict(symbol="x", size=11, color="black"),
            name="communication stops hiding",
            customdata=[m[2] for m in marks],
            hovertemplate="%{customdata}: communication stops hiding at %{x} GPUs<extra></extra>",
        )
    ys = [p.speedup for p in points] or [1.0]
    _ref_line(fig, current_gpus, [min(ys + [1.0]), max(ys + [float(top)])], "this request", "dash", "black", "top")
    fig.update_layout(
        title="Speed-up against GPUs per request (hollow: communication no longer hidden)",
        xaxis_title="GPUs per request",
        yaxis_title="speed-up over one GPU [x]",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    log_axis(fig, "x", fmt_num)
    return log_axis(fig, "y")


def video_rate_chart(rows, capacity_per_hour: float, rate_per_hour: float | None, height: int = 360) -> go.Figure:
    """p50 and p95 latency per video against the arrival rate [videos/h]; saturated points marked with an x."""
    fig = go.Figure()
    for idx, name, color in ((1, "p50", "#2da44e"), (2, "p95", "#cf222e")):
        fig.add_scatter(
            x=[r[0] for r in rows if not r[3]],
            y=[r[idx] for r in rows if not r[3]],
            mode="lines+markers",
            name=f"{name} latency per video",
            line_color=color,
            marker_size=8,
        )
    ys = [y for r in rows if not r[3] for y in (r[1], r[2]) if y] or [1.0]
    sat = [r[0] for r in rows if r[3]]
    if sat:
        fig.add_scatter(
            x=sat,
            y=[max(ys)] * len(sat),
            mode="markers",
            name="saturated: no latency (the queue grows without bound)",
            marker=dict(symbol="x", size=11, color="#cf222e"),
            hovertemplate="%{x:,.3~r} videos/h: saturated<extra></extra>",
        )
    for x, label, dash, color in (
        (capacity_per_hour, "capacity", "dash", "gray"),
        (rate_per_hour, "this rate", "dot", "black"),
    ):
        if x:
            _ref_line(fig, x, [min(ys), max(ys)], label, dash, color, "bottom")
    fig.update_layout(
        title="Latency per video against the arrival rate",
        xaxis_title="videos per hour",
        yaxis_title="latency per video",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return log_time_axis(fig, "y")


def video_timeline_chart(timeline, height: int | None = None) -> go.Figure:
    """The first requests' lives: waiting in the queue (grey) and running their denoising steps (blue)."""
    fig = go.Figure()
    ids = [f"#{t.id}" for t in timeline]
    fig.add_bar(
        y=ids,
        x=[t.start_s - t.arrival_s for t in timeline],
        base=[t.arrival_s for t in timeline],
        orientation="h",
        name="queued",
        marker_color="#d0d7de",
        hovertemplate="%{y}: queued %{x:,.4~r} s<extra></extra>",
    )
    fig.add_bar(
        y=ids,
        x=[t.end_s - t.start_s for t in timeline],
        base=[t.start_s for t in timeline],
        orientation="h",
        name="running (text, steps, decode)",
        marker_color="#1f6feb",
        customdata=[[t.replica] for t in timeline],
        hovertemplate="%{y}: running %{x:,.4~r} s on replica %{customdata[0]}<extra></extra>",
    )
    fig.update_layout(
        barmode="overlay",
        title="The first requests: queued, then running",
        xaxis_title="seconds since the first arrival",
        yaxis=dict(autorange="reversed", dtick=1),
        height=height or 140 + 18 * len(timeline),
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def video_progress_chart(progress, steps: int, at_s: float, height: int = 260) -> go.Figure:
    """Every request running at one moment and the denoising step it is on."""
    fig = go.Figure()
    fig.add_bar(
        x=[f"#{i}" for i, _ in progress],
        y=[s for _, s in progress],
        marker_color="#1f6feb",
        hovertemplate="%{x}: step %{y} of " + str(steps) + "<extra></extra>",
    )
    fig.add_hline(y=steps, line_dash="dash", line_color="gray", annotation_text=f"{steps} steps")
    if not progress:
        fig.add_annotation(text="no request running at that moment", showarrow=False, x=0.5, y=0.5, xref="paper")
    fig.update_layout(
        title=f"Per-request progress at {fmt_time(at_s)} into the run",
        xaxis=dict(title="request", type="category"),
        yaxis_title="denoising step",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
    )
    return fig


def fleet_cost_bars(rows, height: int = 360) -> go.Figure:
    """Each workload's cost per hour in the nominal and the robust plan, with the nominal pick's cost range. An end
    with no bound (no pool count meets the target at that bound) draws no whisker on that side: the bar says "no
    bound" above it instead, so an open range never reads as the tightest one."""
    fig = go.Figure()

    def finite(v) -> bool:
        return v is not None and math.isfinite(v)

    for which, color in (("nominal", "#0969da"), ("robust", "#bf8700")):
        mine = [r for r in rows if r["plan"] == which]
        err, text = None, None
        if mine and all(r["cost_per_hour_low"] is not None and r["cost_per_hour_high"] is not None for r in mine):
            hi, lo = [r["cost_per_hour_high"] for r in mine], [r["cost_per_hour_low"] for r in mine]
            err = dict(
                type="data",
                symmetric=False,
                array=[h - r["cost_per_hour"] if finite(h) else 0.0 for h, r in zip(hi, mine, strict=True)],
                arrayminus=[r["cost_per_hour"] - v if finite(v) else 0.0 for v, r in zip(lo, mine, strict=True)],
            )
            text = [
                "range: no bound" + (" above" if not finite(h) else " below") if not (finite(h) and finite(v)) else ""
                for h, v in zip(hi, lo, strict=True)
            ]
        fig.add_bar(
            x=[r["workload"] for r in mine],
            y=[r["cost_per_hour"] for r in mine],
            name=f"{which} plan",
            marker_color=color,
            error_y=err,
            text=text,
            textposition="outside",
            cliponaxis=False,
            customdata=[r["configuration"] for r in mine],
            hovertemplate="%{x}: $%{y:,.2f}/h<br>%{customdata}<extra></extra>",
        )
    fig.update_layout(
        barmode="group",
        height=height,
        title="Cost per hour by workload (the range: every efficiency assumption at its bounds)",
        yaxis_title="USD per hour",
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return fig


def ttft_by_turn_chart(by_turn, target_s: float | None = None, height: int = 360) -> go.Figure:
    """TTFT p50 and p95 by a session's turn index (1 = its first request), with the cached share of each turn's
    prompt on a second axis: later turns send longer contexts but find most of them cached."""
    x = [t.turn for t in by_turn]
    fig = go.Figure()
    fig.add_scatter(x=x, y=[t.ttft_p50_s for t in by_turn], name="TTFT p50", mode="lines+markers")
    fig.add_scatter(x=x, y=[t.ttft_p95_s for t in by_turn], name="TTFT p95", mode="lines+markers")
    fig.add_bar(x=x, y=[t.hit_frac for t in by_turn], name="prompt found cached", yaxis="y2", opacity=0.25)
    if target_s is not None:
        fig.add_hline(y=target_s, line_dash="dot", annotation_text=f"target {fmt_time(target_s)}")
    fig.update_layout(
        title="Time to first token by turn",
        xaxis_title="turn of the session",
        yaxis_title="seconds",
        yaxis2=dict(title="share cached", overlaying="y", side="right", range=[0, 1], tickformat=".0%"),
        height=height,
        legend=LEGEND_BELOW,
        margin=dict(l=10, r=10, t=50, b=10),
    )
    return fig
