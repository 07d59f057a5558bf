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


def launch_downloads(pick, goal, key: str = "launch") -> None:
    """Download buttons for the launch configs of an optimizer pick (engine commands and a Deployment)."""
    from core.launch import EMIT_CHOICES, FILE_NAMES, emit, launch_spec

    spec = launch_spec(pick, goal)
    labels = {"vllm": "vLLM command", "sglang": "SGLang command", "trtllm": "TensorRT-LLM command",
              "k8s": "Kubernetes Deployment"}
    cols = st.columns(len(EMIT_CHOICES))
    for col, kind in zip(cols, EMIT_CHOICES):
        try:
            text = emit(kind, spec)
        except ValueError as exc:  # e.g. TensorRT-LLM on an AMD GPU
            col.caption(f"{labels[kind]}: {exc}")
            continue
        col.download_button(labels[kind], text, file_name=FILE_NAMES[kind], key=f"{key}.{kind}",
                            mime="text/yaml" if kind == "k8s" else "text/x-shellscript")
    with st.expander("Launch config (vLLM)"):
        st.code(emit("vllm", spec), language="bash")
