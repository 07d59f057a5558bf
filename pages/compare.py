"""Compare: two configurations, two saved analyses or two revisions of one, side by side, each kind by its own
numbers: fleet plans by cost, GPUs and picks; serving views by their p95s under load; training runs by time and cost."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, render, share, state
from dashboard.api import StoreError
from dashboard.text import plain

st.title("Compare")
st.caption(
    "Two analyses side by side: this view's, a saved analysis (any revision) or a pasted link. Two saved fleet plans "
    "compare by cost, GPUs and each workload's pick; two serving views by the p95 latencies their simulations give "
    "under the configured load; training runs by step time, runtime and cost. Then the inputs that differ. The link "
    "of this page reopens this comparison."
)

SOURCES = ("This view", "A saved analysis", "A link")
store = analyses.store_or_stop()
rows = store.list(owner=None)
ids = [r.id for r in rows]
linked = st.session_state.pop("_cmp_link", None) or {}  # the selections a link carried (dashboard.state)
not_used = []
for k, v in linked.items():  # each applied where the page offers it, else said
    side_, field = (k.split(".") + [""])[1:3]
    if k == "cmp.train":
        st.session_state[k] = v in ("1", "true", "True")
    elif (field == "src" and v in SOURCES) or (field == "id" and v in ids) or field == "link":
        st.session_state[k] = v
    elif field == "rev" and v.isdigit() and linked.get(f"cmp.{side_}.id") in ids:
        st.session_state[f"cmp.{side_}.rev.{linked[f'cmp.{side_}.id']}"] = int(v)
    else:
        not_used.append(f"{k}={plain(v, 60)}")
head = st.container()  # the answer first
if not_used:
    head.warning("Not used from the link (no such choice here): " + ", ".join(not_used))
pick_a, pick_b = st.columns(2)


def side(col, name: str, default: int) -> dict | None:
    """One side: its config, name, kind and date, and the results saved with it; None (the reason drawn) when it has
    none yet. Its selections go into the page's link."""
    src = col.radio(f"{name} from", SOURCES, index=default, horizontal=True, key=f"cmp.{name}.src")
    st.query_params[f"cmp.{name}.src"] = src
    if src == "This view":
        cfg = state.config()
        if cfg is None:
            col.warning("Fix the highlighted input in the sidebar first.")
            return None
        return {"cfg": cfg, "name": "this view", "results": {}, "when": "now"}
    if src == "A saved analysis":
        if not rows:
            col.info("No saved analyses yet: save one under Saved analyses.")
            return None
        aid = col.selectbox(
            "Analysis",
            ids,
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
        st.query_params[f"cmp.{name}.id"], st.query_params[f"cmp.{name}.rev"] = aid, str(rev)
        try:
            a = store.get(aid, rev)
        except StoreError as exc:
            col.error(plain(exc, 300))
            return None
        when = next((r.created_at for r in a.revisions if r.revision == rev), a.summary.updated_at)
        return {"cfg": a.config, "name": f"{plain(a.name)}, revision {rev}", "results": a.results, "when": when[:16]}
    text = col.text_input("RA-BIT link", key=f"cmp.{name}.link", placeholder="https://…/speed?model=…")
    if not text.strip():
        col.caption("Paste a link someone shared (the copy-link button in the sidebar makes one).")
        return None
    st.query_params[f"cmp.{name}.link"] = text.strip()
    cfg, problems, aid = cache.config_from_link(text, tuple(state.VIEW_PARAMS))
    results: dict = {}
    if aid:
        try:
            saved = store.get(aid)
            cfg, results = saved.config.with_(**{k: getattr(cfg, k) for k in cfg.model_fields_set}), saved.results
        except StoreError:
            problems = (*problems, f"no saved analysis {plain(aid, 40)} on this server")
    for p in problems:
        col.warning(f"Not used from the link: {plain(p, 300)}")
    return {"cfg": cfg, "name": "the link's view", "results": results, "when": "as linked"}


A = side(pick_a, "A", 0)
B = side(pick_b, "B", 1 if rows else 2)
as_train = st.toggle("Compare as training runs (step time, MFU, runtime, GPU-hours, cost)", key="cmp.train")
if as_train:
    st.query_params["cmp.train"] = "1"
if A is None or B is None:
    render.say("info", "Choose both sides below: this view, a saved analysis or a pasted link.", head)
    st.stop()
fleets = cache.is_fleet_plan(A["results"]) and cache.is_fleet_plan(B["results"])
kind = "fleet plans" if fleets else "training runs" if as_train else "serving views under load"
for s_, tag in ((A, "A"), (B, "B")):
    share.inputs(tag, f"{s_['name']} ({kind}, {s_['when']})")
try:
    with st.spinner("Evaluating both…"):
        got = cache.compare(A["cfg"], B["cfg"], kind, A["results"], B["results"])
except (ValueError, KeyError) as exc:  # a config the catalog or the model no longer accepts, a run out of budget
    head.error(f"These two cannot be compared: {plain(exc, 300)}")
    st.stop()
with head:
    render.say("info", f"Comparing {kind}: **A** {A['name']} ({A['when']}) · **B** {B['name']} ({B['when']}).")
    render.comparison_cards(got.numbers)
    for line in got.context:
        st.caption(line)

st.subheader("Numbers", divider="gray")
render.table(pd.DataFrame(render.comparison_rows(got.numbers)), "numbers")
if got.picks:
    st.subheader("Each workload's pick", divider="gray")
    render.table(pd.DataFrame(got.picks), "picks")

st.subheader("Inputs that differ", divider="gray")
if not got.differences:
    render.say("success", "The two configurations are the same: every input is equal.")
else:
    render.table(pd.DataFrame(got.differences, columns=["field", "A", "B"]), "inputs that differ")
