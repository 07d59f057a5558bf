"""Drawing helpers shared by the pages: metrics and math straight from ``core`` derivation steps."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import streamlit as st

from core.trace import Step, find


def metrics(steps: tuple[Step, ...], keys: Iterable[str], cols: int | None = None) -> None:
    """One ``st.metric`` per step key, showing exactly the step's formatted value."""
    keys = list(keys)
    columns = st.columns(cols or len(keys))
    for i, k in enumerate(keys):
        s = find(steps, k)
        columns[i % len(columns)].metric(s.label, s.shown(), help=s.note or None)


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
