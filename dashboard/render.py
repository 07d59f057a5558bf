"""Drawing helpers shared by the pages: metrics and math straight from ``core`` derivation steps."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import streamlit as st

from core.trace import Step, find


#: Width of the main column at 1280 x 720 with the sidebar open [px], and what a metric needs per character:
#: Streamlit cuts a metric's label and value with an ellipsis rather than wrapping them.
MAIN_WIDTH_PX = 820
_GAP_PX, _HELP_PX, _LABEL_PX_PER_CHAR, _VALUE_PX_PER_CHAR = 16, 26, 7.4, 20.0


def per_row(labels: Iterable[str], values: Iterable[str] = (), width_px: float = MAIN_WIDTH_PX) -> int:
    """How many metrics fit side by side without cutting the longest label or value."""
    labels, values = list(labels), list(values)
    need = max([len(t) * _LABEL_PX_PER_CHAR + _HELP_PX for t in labels]
               + [len(v) * _VALUE_PX_PER_CHAR for v in values] + [1.0])
    n = max(1, len(labels), len(values))
    while n > 1 and (width_px - _GAP_PX * (n - 1)) / n < need:
        n -= 1
    return n


def grid(count: int, labels: Iterable[str] = (), values: Iterable[str] = ()) -> list:
    """``count`` column slots, as many per row as fit the given labels and values, in reading order."""
    n = min(count, per_row(labels, values)) if labels or values else count
    n = -(-count // -(-count // n))  # the same number of rows, filled evenly (6 at 4 a row: 3 + 3)
    slots: list = []
    while len(slots) < count:
        slots += st.columns(n)
    return slots[:count]


def metrics(steps: tuple[Step, ...], keys: Iterable[str], cols: int | None = None) -> None:
    """One ``st.metric`` per step key, showing exactly the step's formatted value, in rows that fit."""
    found = [find(steps, k) for k in keys]
    columns = grid(len(found), [s.label for s in found], [s.shown() for s in found])
    for col, s in zip(columns, found):
        col.metric(s.label, s.shown(), help=s.note or None)


def steps_table(steps: tuple[Step, ...]) -> pd.DataFrame:
    return pd.DataFrame([{"step": s.label, "formula": f"{s.symbol} = {s.expr}", "value": s.shown(),
                          "note": s.note} for s in steps])


def show_math(steps: tuple[Step, ...], *, expanded: bool = False, title: str = "Show the math") -> None:
    """Each step as the symbolic formula, then with the numbers, then the result."""
    with st.expander(title, expanded=expanded):
        for s in steps:
            math_step(s)


def math_step(s: Step) -> None:
    st.markdown(f"**{s.label}** — {s.shown()}")
    st.latex(s.latex_symbolic())
    st.latex(s.latex_substituted())
    if s.note:
        st.caption(s.note)


# --- speed and show-the-math helpers (issue 3) ---------------------------------------------------------

def math_section(title: str, steps: tuple[Step, ...]) -> None:
    """A titled run of derivation steps, each as symbols, numbers, result (``st.latex``)."""
    st.subheader(title)
    for s in steps:
        math_step(s)


def steps_by_key(steps: tuple[Step, ...], keys: tuple[str, ...]) -> tuple[Step, ...]:
    return tuple(find(steps, k) for k in keys)


def gap_table(rows) -> pd.DataFrame:
    """The textbook-vs-ours waterfall (core.speed.GapRow) as a table of formatted times."""
    from core.units import fmt_time

    return pd.DataFrame([{"change (cumulative)": r.label, "time": fmt_time(r.value_s),
                          "change": ("+" if r.delta_s > 0 else "") + fmt_time(r.delta_s) if r.delta_s else "—",
                          "why": r.note} for r in rows])


def assumption_sources(cfg, names: tuple[str, ...]) -> pd.DataFrame:
    """The efficiency assumptions behind a result: value in force, base, range and the published source."""
    from core.assumptions import REGISTRY

    rows = []
    for n in names:
        info = REGISTRY[n]
        lo, hi = sorted((info.low, info.high))
        rows.append({"assumption": info.label, "value": f"{getattr(cfg.assumptions, n):g} {info.unit}",
                     "base": f"{info.base:g}", "range": f"{lo:g}–{hi:g}", "source": info.source})
    return pd.DataFrame(rows)


def collective_table(view) -> pd.DataFrame:
    from core.units import fmt_bytes, fmt_time

    return pd.DataFrame([{"collective": r.what, "message": fmt_bytes(r.bytes, "auto"), "time": fmt_time(r.time_s),
                          "how": r.how} for r in view.rows])
