"""Optimizer: the cheapest configuration that meets the target, the Pareto front, and why."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core import catalog
from core.catalog import CatalogError, parse_prices
from core.optimizer import KV_FORMATS, WEIGHT_FORMATS, Constraints, ServingGoal
from core.simulate import Lengths, SimSpec
from dashboard import cache, render, state

st.title("Optimizer")
st.caption("The cheapest priced configuration that meets your p95 targets at your request rate — "
           "screened in closed form, the finalists checked by the serving simulator.")
cfg = state.require_config()
model_name = cfg.custom_model.name if cfg.custom_model else cfg.model
# A choice, not tabs: every tab's body runs on every rerun, and the hidden training search cost ~2 s on each
# sidebar change; only the chosen view runs here.
view = st.radio("Recommend", ["Serving", "Training run"], horizontal=True, key="opt.view")

if view == "Serving":

    with st.form("opt"):
        c1, c2, c3, c4 = st.columns(4)
        rate = c1.number_input("Arrival rate [requests/s]", min_value=0.01, max_value=1e5, value=10.0, key="opt.rate")
        mean_in = c2.number_input("Mean input tokens", min_value=1, max_value=1_000_000,
                                  value=int(min(cfg.input_tokens, 1000)), key="opt.input")
        mean_out = c3.number_input("Mean output tokens", min_value=1, max_value=100_000,
                                   value=int(min(cfg.output_tokens, 250)), key="opt.output")
        kind = c4.selectbox("Length distribution", ["lognormal", "fixed", "uniform"], key="opt.lengths")
        t1, t2, t3 = st.columns(3)
        ttft = t1.number_input("p95 TTFT target [s] (0 = none)", min_value=0.0, value=2.0, key="opt.ttft")
        itl = t2.number_input("p95 inter-token target [s] (0 = none)", min_value=0.0, value=0.0, format="%.3f",
                              key="opt.itl")
        e2e = t3.number_input("p95 end-to-end target [s] (0 = none)", min_value=0.0, value=20.0, key="opt.e2e")
        with st.expander("Hard constraints and prices"):
            gpus_allowed = st.multiselect("GPU kinds allowed (empty = all)", sorted(catalog.gpus()), key="opt.gpus")
            k1, k2 = st.columns(2)
            max_gpus = k1.number_input("Max GPUs in total (0 = no limit)", min_value=0, value=0, key="opt.max_gpus")
            max_usd = k2.number_input("Max USD per hour (0 = no limit)", min_value=0.0, value=0.0, key="opt.max_usd")
            weights = st.multiselect("Weight formats", list(WEIGHT_FORMATS), default=list(WEIGHT_FORMATS),
                                     key="opt.weights")
            kvs = st.multiselect("KV cache formats", list(KV_FORMATS), default=list(KV_FORMATS), key="opt.kv")
            p1, p2, p3 = st.columns(3)
            price_kind = p1.selectbox("Price kind", ["on-demand", "spot", "reserved", "marketplace"], key="opt.kind")
            policy = p2.selectbox("Price per GPU kind", ["median", "cheapest"], key="opt.policy",
                                  help="median of the listings across providers, or the cheapest listing")
            providers = p3.text_input("Providers (comma-separated substrings, empty = all)", key="opt.providers")
            upload = st.file_uploader("Your own price list (CSV, same columns as catalogs/prices.csv)", type=["csv"],
                                      key="opt.price_file")
        st.form_submit_button("Find the cheapest configuration", type="primary", key="opt.submit")

    prices = catalog.prices()
    if upload is not None:
        try:
            prices = parse_prices(upload.getvalue().decode("utf-8", "replace"), name=upload.name)
            st.caption(f"Using {len(prices)} prices from {upload.name}.")
        except CatalogError as exc:
            st.error(f"That price list cannot be used: {exc}. Using the catalog's prices.")
    with st.expander("Edit prices for this session"):
        edited = st.data_editor(pd.DataFrame([p.model_dump(mode="json") for p in prices]), num_rows="dynamic",
                                key="opt.price_editor", width="stretch")
        try:
            prices = parse_prices(edited.to_csv(index=False), name="edited prices")
        except CatalogError as exc:
            st.error(f"The edited prices are not valid: {exc}. Using the catalog's prices.")
            prices = catalog.prices()

    if not weights or not kvs:
        st.error("Allow at least one weight format and one KV cache format.")
        weights, kvs = weights or ["bf16"], kvs or ["bf16"]
    goal = ServingGoal(model=cfg.model, custom_model=cfg.custom_model, rate_per_s=rate,
                       workload=SimSpec(num_requests=2000, input=Lengths(kind=kind, mean=mean_in),
                                        output=Lengths(kind=kind, mean=mean_out)),
                       p95_ttft_s=ttft or None, p95_itl_s=itl or None, p95_e2e_s=e2e or None)
    cons = Constraints(gpus_allowed=tuple(gpus_allowed), max_gpus=max_gpus or None, max_usd_per_hour=max_usd or None,
                       weights_allowed=tuple(weights), kv_allowed=tuple(kvs),
                       providers=tuple(s.strip() for s in providers.split(",") if s.strip()), price_kind=price_kind,
                       price_policy=policy)
    rec = cache.recommendation(goal, cons, tuple(prices))
    if rec.unpriced:
        st.warning(f"No {price_kind} price for {', '.join(rec.unpriced)}: left out of the search, not judged. "
                   "Add a row under 'Edit prices for this session' (or upload a price list) to include them.")

    e = rec.explanation
    if rec.met:
        st.success(e.summary)
        r = rec.recommendation
        m1, m2, m3, m4, m5 = render.grid(5, ("Cost per hour", "Cost per million output tokens", "GPUs",
                                             "p95 end-to-end (simulated)", "Capacity"),
                                         (f"{r.replicas} x {r.gpus_per_replica} {r.gpu}",))
        m1.metric("Cost per hour", f"${r.cost_per_hour:,.2f}")
        m2.metric("Cost per million output tokens", f"${r.cost_per_million_tokens:,.3g}")
        m3.metric("GPUs", f"{r.replicas} x {r.gpus_per_replica} {r.gpu}")
        m4.metric("p95 end-to-end (simulated)", f"{r.p95_e2e_s:.3g} s" if r.p95_e2e_s is not None else "withheld")
        m5.metric("Capacity", f"{r.capacity_requests_per_s:.3g} req/s")
        render.launch_downloads(r, goal)
    else:
        st.error(e.summary)
        if e.relax:
            st.warning("To get an answer: " + e.relax)

    with st.container(border=True):
        st.markdown("**Why this answer**")
        for label, text in (("Why this GPU", e.why_gpu), ("Why this count and layout", e.why_count),
                            ("Bottleneck", e.bottleneck), ("Cheaper alternative", e.cheaper_alternative),
                            ("Faster alternative", e.faster_alternative)):
            if text:
                st.markdown(f"- **{label}:** {text}")
        if e.risks:
            st.markdown("**Risks:** " + "; ".join(e.risks))
        st.caption("Assumptions: " + "; ".join(e.assumptions))

    sim = [c for c in rec.candidates if c.simulated]
    if sim:
        best = rec.recommendation
        fig = go.Figure()
        front = {p.label for p in rec.pareto}
        for group, color in (("on the Pareto front", "#1f6feb"), ("dominated", "#8c959f")):
            pts = [c for c in sim if (c.label in front) == (group == "on the Pareto front")]
            if not pts:
                continue
            fig.add_scatter(
                x=[c.cost_per_hour for c in pts], y=[c.p95_e2e_s for c in pts], mode="markers", name=group,
                marker=dict(size=[8 + 3 * min((c.replicas or 0) * (c.capacity_per_replica_rps or 0), 30) for c in pts],
                            color=color, symbol=["circle" if c.meets else "x" for c in pts], line=dict(width=1)),
                text=[f"{c.label}<br>p95 TTFT {c.p95_ttft_s}<br>p95 ITL {c.p95_itl_s}<br>"
                      f"{'meets' if c.meets else 'misses'} the target<br>{c.sim_notes}" for c in pts],
                hovertemplate="%{text}<br>$%{x:,.2f}/h, p95 e2e %{y:.3g} s<extra></extra>")
        if best is not None:
            fig.add_scatter(x=[best.cost_per_hour], y=[best.p95_e2e_s], mode="markers", name="recommendation",
                            marker=dict(size=22, color="#2da44e", symbol="star", line=dict(width=1, color="black")),
                            hovertemplate=f"{best.label}<extra>recommended</extra>")
        if goal.p95_e2e_s:
            fig.add_hline(y=goal.p95_e2e_s, line_dash="dash", annotation_text="p95 end-to-end target")
        fig.update_layout(title="Simulated configurations: cost against p95 end-to-end (marker size = capacity)",
                          xaxis_title="USD per hour", yaxis_title="p95 end-to-end [s]", height=460)
        st.plotly_chart(fig, width="stretch", key="pareto_chart")

    st.subheader(f"All {rec.evaluated} evaluated configurations ({rec.simulated} simulated)")
    table = pd.DataFrame([{
        "configuration": c.label, "GPU": c.gpu, "GPUs/replica": c.gpus_per_replica, "TP": c.tp, "PP": c.pp,
        "weights": c.weights, "KV": c.kv_dtype, "replicas": c.replicas, "$/h": c.cost_per_hour,
        "batch-1 TTFT [s]": c.batch_1_ttft_s, "batch-1 ITL [s]": c.batch_1_itl_s, "simulated": c.simulated,
        "meets": c.meets, "p95 TTFT [s]": c.p95_ttft_s, "p95 ITL [s]": c.p95_itl_s, "p95 e2e [s]": c.p95_e2e_s,
        "pruned because": c.pruned, "price basis": c.price_basis} for c in rec.candidates])
    st.dataframe(table, width="stretch", hide_index=True)


if view == "Training run":
    st.caption("The cheapest training run that meets a deadline, across GPU kinds and their prices: the training "
               "deadline search runs for each priced kind, and the cheapest count that finishes in time wins. "
               "Model, sequence length, precision and global batch come from the sidebar's Training settings.")
    with st.form("opt_train"):
        c1, c2, c3 = st.columns(3)
        tokens = c1.number_input("Training tokens", min_value=1e6, max_value=1e15, value=float(cfg.train_tokens),
                                 format="%.3e", key="opt.train_tokens")
        days = c2.number_input("Deadline [days]", min_value=0.01, max_value=3650.0, value=30.0,
                               key="opt.deadline_days")
        t_gpus = c3.multiselect("GPU kinds (empty = all priced)", sorted(catalog.gpus()), key="opt.train_gpus")
        st.form_submit_button("Find the cheapest run", type="primary", key="opt.train_submit")
    tcfg = cfg.with_(phase="train", train_tokens=tokens)
    tr = cache.training_recommendation(tcfg, days * 86400, Constraints(gpus_allowed=tuple(t_gpus)),
                                       tuple(catalog.prices()))
    (st.success if tr.met else st.error)(tr.summary)
    if tr.why_gpu:
        st.markdown(f"- **Why this GPU:** {tr.why_gpu}")
    if tr.relax:
        st.warning("To get an answer: " + tr.relax)
    if tr.options:
        fig = go.Figure(go.Bar(
            x=[o.gpu for o in tr.options], y=[o.cost_usd for o in tr.options],
            marker_color=["#2da44e" if tr.recommendation and o.gpu == tr.recommendation.gpu else
                          ("#1f6feb" if o.meets_deadline else "#8c959f") for o in tr.options],
            text=[f"{o.gpus:,} GPUs, {o.wall_clock_s / 86400:.3g} d" for o in tr.options],
            hovertemplate="%{x}: $%{y:,.0f}<br>%{text}<extra></extra>"))
        fig.update_layout(title="Cost of the cheapest run per GPU kind (grey: misses the deadline)",
                          yaxis_title="USD for the run", height=380)
        st.plotly_chart(fig, width="stretch", key="train_cost_chart")
        st.dataframe(pd.DataFrame([o.model_dump() for o in tr.options]), width="stretch", hide_index=True)
    if tr.skipped:
        st.caption("Left out: " + "; ".join(tr.skipped))
