"""Plotly figures built from ``core`` results (no physics here: values come in computed)."""

from __future__ import annotations

import plotly.graph_objects as go

from core.units import GB

PALETTE = {"weights": "#1f6feb", "kv": "#2da44e", "activations": "#bf8700", "overhead": "#8250df",
           "free": "#d0d7de", "gradients": "#cf222e", "optimizer": "#e16f24"}


def stacked_bar(parts: list[tuple[str, float, str]], capacity_bytes: float, title: str,
                usable_bytes: float | None = None) -> go.Figure:
    """One horizontal stacked bar of what fills a GPU [GB], with the capacity line."""
    fig = go.Figure()
    for name, value, color in parts:
        fig.add_bar(y=["one GPU"], x=[value / GB], name=name, orientation="h", marker_color=color,
                    hovertemplate=f"{name}: %{{x:.3g}} GB<extra></extra>")
    fig.add_vline(x=capacity_bytes / GB, line_dash="dash", line_color="black",
                  annotation_text=f"capacity {capacity_bytes / GB:.3g} GB")
    if usable_bytes:
        fig.add_vline(x=usable_bytes / GB, line_dash="dot", line_color="gray",
                      annotation_text=f"usable {usable_bytes / GB:.3g} GB", annotation_position="bottom")
    fig.update_layout(barmode="stack", height=220, title=title, xaxis_title="GB (1e9 bytes)",
                      margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.5))
    return fig
