"""Compare: two configurations, two saved analyses or two revisions of one, side by side."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, render, share, state
from dashboard.api import StoreError, fmt_pct, fmt_sig
from dashboard.text import plain

st.title("Compare")
st.caption(
    "Two configurations side by side: this view's, a saved analysis (any revision) or a pasted link. The headline "
    "numbers with their ranges, the difference, and the inputs that differ."
)

SOURCES = ("This view", "A saved analysis", "A link")
store = analyses.store_or_stop()
rows = store.list(owner=None)
head = st.container()  # the answer first
pick_a, pick_b = st.columns(2)


def side(col, name: str, default: int):
    """The configuration one side shows and its name, or None (with the reason drawn) when it has none yet."""
    src = col.radio(f"{name} from", SOURCES, index=default, horizontal=True, key=f"cmp.{name}.src")
    if src == "This view":
        cfg = state.config()
        if cfg is None:
            col.warning("Fix the highlighted input in the sidebar first.")
        return cfg, "this view"
    if src == "A saved analysis":
        if not rows:
            col.info("No saved analyses yet: save one under Saved analyses.")
            return None, ""
        aid = col.selectbox(
            "Analysis",
            [r.id for r in rows],
            key=f"cmp.{name}.id",
            format_func=lambda i: next(f"{r.name} ({r.model} on {r.gpu})" for r in rows if r.id == i),
        )
        current = next(r.revision for r in rows if r.id == aid)
        rev = col.selectbox(
            "Revision",
            list(range(current, 0, -1)),
            key=f"cmp.{name}.rev.{aid}",
            format_func=lambda n: f"revision {n}" + (" (current)" if n == current else ""),
        )
        try:
            a = store.get(aid, rev)
        except StoreError as exc:
            col.error(plain(exc, 300))
            return None, ""
        return a.config, f"{plain(a.name)}, revision {rev}"
    text = col.text_input("RA-BIT link", key=f"cmp.{name}.link", placeholder="https://…/speed?model=…")
    if not text.strip():
        col.caption("Paste a link someone shared (the copy-link button in the sidebar makes one).")
        return None, ""
    cfg, problems, aid = cache.config_from_link(text, tuple(state.VIEW_PARAMS))
    if aid:
        try:
            saved = store.get(aid)
            cfg = saved.config.with_(**{k: getattr(cfg, k) for k in cfg.model_fields_set})
        except StoreError:
            problems = (*problems, f"no saved analysis {plain(aid, 40)} on this server")
    for p in problems:
        col.warning(f"Not used from the link: {plain(p, 300)}")
    return cfg, "the link's view"


cfg_a, name_a = side(pick_a, "A", 0)
cfg_b, name_b = side(pick_b, "B", 1 if rows else 2)
as_train = st.toggle("Compare as training runs (step time, MFU, runtime, GPU-hours, cost)", key="cmp.train")
if cfg_a is None or cfg_b is None:
    head.info("Choose both sides below: this view, a saved analysis or a pasted link.")
    st.stop()
phase = "train" if as_train else "serve"
a, b = cfg_a.with_(phase=phase), cfg_b.with_(phase=phase)
try:
    with st.spinner("Evaluating both at each assumption bound…"):
        rows_ = cache.compare_headlines(a, b)
except (ValueError, KeyError) as exc:  # a config the catalog or the model no longer accepts
    head.error(f"These two cannot be compared: {plain(exc, 300)}")
    st.stop()

keys = [k for k in render.headline_keys(as_train) if any(c.key == k for c in rows_)]
by_key = {c.key: c for c in rows_}
with head:
    st.markdown(f"**A**: {name_a} · **B**: {name_b}")
    cols = render.grid(len(keys), [render.HEADLINE[k][0] for k in keys])
    for col, k in zip(cols, keys):
        label, fmt = render.HEADLINE[k]
        c = by_key[k]
        if c.b is None:
            col.metric(label, "—", help="B has no such number")
            continue
        rel = c.relative
        col.metric(
            f"{label} (B)",
            fmt(c.b.value),
            delta=(f"{'+' if rel >= 0 else ''}{fmt_pct(rel)} against A" if rel is not None else None),
            delta_color="off",
        )
        share.card(f"{label}: B", fmt(c.b.value), render.range_text(c.b, fmt))
        if c.a is not None:
            col.caption(f"A: {fmt(c.a.value)}")
            share.card(f"{label}: A", fmt(c.a.value), render.range_text(c.a, fmt))
        if c.overlap:
            col.caption(":orange[the two ranges overlap: the difference is within the assumptions' uncertainty]")

st.subheader("Numbers with their ranges", divider="gray")
st.caption(
    "Each range: the heuristic range from the assumption bounds (each assumption alone at its bounds, combined)."
)
render.table(
    pd.DataFrame(
        [
            {
                "number": render.HEADLINE[k][0],
                "A": render.HEADLINE[k][1](by_key[k].a.value) if by_key[k].a else "—",
                "A's range": render.range_span(by_key[k].a, render.HEADLINE[k][1]),
                "B": render.HEADLINE[k][1](by_key[k].b.value) if by_key[k].b else "—",
                "B's range": render.range_span(by_key[k].b, render.HEADLINE[k][1]),
                "B - A": (
                    f"{fmt_pct(by_key[k].relative)} ({'+' if by_key[k].difference >= 0 else '−'}"
                    f"{render.HEADLINE[k][1](abs(by_key[k].difference))})"
                    if by_key[k].relative is not None
                    else ""
                ),
                "ranges overlap": {True: "yes", False: "no", None: ""}[by_key[k].overlap],
            }
            for k in keys
        ]
    ),
    "numbers",
)

st.subheader("Inputs that differ", divider="gray")
diff = cache.config_differences(cfg_a, cfg_b)
if not diff:
    st.success("The two configurations are the same: every input is equal.")
else:
    render.table(
        pd.DataFrame(
            [
                {
                    "input": k,
                    "A": fmt_sig(va, 6) if isinstance(va, float) else str(va),
                    "B": fmt_sig(vb, 6) if isinstance(vb, float) else str(vb),
                }
                for k, va, vb in diff
            ]
        ),
        "inputs that differ",
    )
