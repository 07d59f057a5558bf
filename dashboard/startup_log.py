"""The Memory page's start-up log section: paste or upload a vLLM / SGLang log, see its numbers beside the
prediction, the runtime overhead that reproduces it, an out-of-memory diagnosis, the tuning loop, and attach
the log to the open analysis. Every number comes from :mod:`dashboard.cache`; this module only draws."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.base import MAX_LOG_BYTES
from core.catalog import ENGINE_LABELS
from core.config import RabitConfig
from core.operations import COSTS, NUMBER_TEXT, NUMBERS, LogError, StartupLog, number_text
from dashboard import analyses, cache, state
from dashboard.text import plain


def read_input() -> tuple[StartupLog | None, str, str]:
    """(log, text, name) from the upload or the pasted text; an unusable one is reported next to the input."""
    c1, c2 = st.columns(2)
    up = c1.file_uploader("Upload the log (text)", type=["log", "txt", "out"], key="mem.log.file")
    pasted = c2.text_area(
        "…or paste it",
        key="mem.log.text",
        height=120,
        help="From the first line to 'Maximum concurrency for …' (vLLM) or 'max_total_num_tokens=…' (SGLang); "
        "a log that ends in an out-of-memory error is diagnosed.",
    )
    if up is not None:
        data, name, slot = up.getvalue(), up.name, c1
    elif pasted.strip():
        data, name, slot = pasted.encode("utf-8"), "pasted log", c2
    else:
        return None, "", ""
    if len(data) > MAX_LOG_BYTES:
        slot.error(
            f"{plain(name)} is {len(data) / 1e6:,.1f} MB; a start-up log is at most {MAX_LOG_BYTES / 1e6:.0f} MB."
        )
        return None, "", ""
    try:
        log = cache.startup_log(data, name)
    except LogError as exc:
        slot.error(f"That text cannot be used: {plain(exc, 600)}")
        return None, "", ""
    return log, data.decode("utf-8", "replace"), name


def section(cfg: RabitConfig) -> None:
    """The whole section for the sidebar's config."""
    st.caption(
        "vLLM and SGLang print at start-up the weights' size, the KV cache memory, its size in tokens and the "
        "maximum concurrency for the configured context. RA-BIT reads them, predicts the same numbers for the "
        "log's own flags (memory share, token budget, tensor parallelism, max model len) over the sidebar's "
        "model and GPU, and says what the runtime overhead would have to be to match."
    )
    log, text, name = read_input()
    if log is None:
        st.info("No log yet: paste or upload one above.")
        return
    comp = cache.log_comparison(log, cfg)
    st.markdown(
        f"**{ENGINE_LABELS.get(log.engine, log.engine)} {plain(log.version)}**"
        + (f", model {plain(log.model)}" if log.model else "")
        + (f"; flags from the log: {', '.join(comp.applied)}" if comp.applied else "")
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "number": NUMBER_TEXT[k],
                    "log": number_text(k, comp.measured[k]),
                    "RA-BIT": number_text(k, comp.predicted[k]),
                    "log / RA-BIT": "—" if comp.ratios[k] is None else f"×{comp.ratios[k]:.3f}",
                    "RA-BIT, calibrated": number_text(k, comp.recalibrated[k]),
                }
                for k in NUMBERS
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    if log.unrecognised:
        st.caption("Not in the log: " + ", ".join(NUMBER_TEXT[k] for k in log.unrecognised) + ".")
    if log.derived:
        st.caption("Computed from the log's other numbers: " + ", ".join(NUMBER_TEXT[k] for k in log.derived) + ".")
    for n in comp.notes:
        st.caption(plain(n, 400))
    for aname, v in comp.calibrated.items():
        a, b = st.columns([3, 1])
        a.markdown(
            f"The log is reproduced with **{aname} = {v:.3f}** (RA-BIT assumed "
            f"{getattr(cfg.assumptions, aname):g}); one log cannot tell the runtime overhead from the activation "
            "workspace, two at different token budgets can."
        )
        b.button("Use it", key=f"mem.log.use.{aname}", on_click=state.set_assumption, args=(aname, round(v, 3)))
    diag = cache.oom_diagnosis(log, cfg)
    if diag is not None:
        st.subheader(f"Out of memory {diag.phase}")
        st.error(f"While {diag.stage}: {diag.cause}.")
        st.caption(" · ".join(plain(e, 300) for e in diag.evidence))
        st.dataframe(
            pd.DataFrame(
                [
                    {"rank": i, "change": r.change, "cost": r.cost, "effect": r.effect}
                    for i, r in enumerate(diag.remedies, 1)
                ]
            ),
            hide_index=True,
            width="stretch",
        )
        st.caption("Ranked by what they cost, cheapest first: " + " < ".join(COSTS) + ".")
    tuning_section(cfg, log)
    cur = analyses.current()
    if cur and st.button(f"Attach this log to {cur['name']}", key="mem.log.attach"):
        lid = analyses.store().add_log(cur["id"], name, log, text)
        st.success(f"Attached to {plain(cur['name'])} as start-up log {lid}.")


def tuning_section(cfg: RabitConfig, log: StartupLog | None) -> None:
    st.subheader("Tuning loop")
    target = st.number_input(
        "Target concurrency (requests of the workload's length at once)",
        min_value=1,
        max_value=1_000_000,
        value=int(cfg.batch),
        key="mem.tune.target",
    )
    plan = cache.tuning(cfg, int(target), log, None)
    st.caption("Order: " + " → ".join(plan.order) + ". Rule: " + plan.rule + ".")
    rows = [{"step": "start", "change": "", "cost": "", **_state_row(plan.start)}]
    rows += [
        {"step": i, "change": s.change, "cost": s.cost, **_state_row(s.after)} for i, s in enumerate(plan.steps, 1)
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    (st.success if plan.reached else st.warning)(plain(plan.stopped_because, 400))
    if plan.declined:
        st.caption("Declined: " + plain(plan.declined, 400))
    st.code(plan.command, language="bash")


def _state_row(s) -> dict:
    return {
        "KV tokens": f"{s.kv_cache_tokens:,}",
        "max concurrency": f"{s.max_concurrency:,.2f}×",
        "at max model len": f"{s.max_model_len:,}",
        "token budget": f"{s.token_budget:,}",
        "memory share": f"{s.util:g}",
        "KV": s.kv_dtype,
    }
