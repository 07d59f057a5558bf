"""Optimizer: the cheapest configuration that meets the target, the Pareto front, and why."""

import pandas as pd
import streamlit as st

from dashboard import cache, charts, render, state
from dashboard.api import (
    MAX_TABLE_BYTES,
    BudgetExceeded,
    CatalogError,
    Constraints,
    ServingGoal,
    choices,
    fmt_days,
    fmt_latency,
    fmt_usd,
)
from dashboard.text import plain

st.title("Optimizer")
st.caption(
    "The cheapest priced configuration that meets your p95 targets at your request rate — "
    "screened in closed form, the finalists checked by the serving simulator."
)
cfg = render.bound_choice("optimizer", state.require_config())
E, B = state.edits, state.bounds
# A choice, not tabs: every tab's body runs on every rerun, and the hidden training search cost ~2 s on each
# sidebar change; only the chosen view runs here.
view = st.radio("Recommend", ["Serving", "Training run"], horizontal=True, **state.view("opt.view"))

if view == "Serving":
    head = st.container()  # the answer first; the form that asks the question under it
    form: list[str] = []  # the keys of its inputs, kept when it is submitted (state.commits)
    with st.form("opt"):
        st.markdown("**The question**: rate, p95 targets, constraints and prices")
        st.caption(
            f"Workload: mean {cfg.input_tokens:,} prompt and {cfg.output_tokens:,} output tokens from the "
            "sidebar; the arrival rate and length distribution are shared with the Serving simulation page."
        )
        c1, c2 = st.columns(2)
        c1.number_input("Arrival rate [requests/s]", **B("workload.rate_per_s"), **E("workload.rate_per_s", form))
        c2.selectbox("Length distribution", choices.LENGTH_KINDS, **E("workload.lengths", form))
        t1, t2, t3 = st.columns(3)
        t1.number_input("p95 TTFT target [s] (0 = none)", **B("targets.p95_ttft_s"), **E("targets.p95_ttft_s", form))
        t2.number_input(
            "p95 inter-token target [s] (0 = none)",
            **B("targets.p95_itl_s"),
            format="%.3f",
            **E("targets.p95_itl_s", form),
        )
        t3.number_input(
            "p95 end-to-end target [s] (0 = none)", **B("targets.p95_e2e_s"), **E("targets.p95_e2e_s", form)
        )
        with st.expander("Hard constraints and prices"):
            st.multiselect("GPU kinds allowed (empty = all)", cache.gpu_slugs(), **E("targets.gpus_allowed", form))
            k1, k2 = st.columns(2)
            k1.number_input("Max GPUs in total (0 = no limit)", **B("targets.max_gpus"), **E("targets.max_gpus", form))
            k2.number_input(
                "Max USD per hour (0 = no limit)",
                **B("targets.max_usd_per_hour"),
                **E("targets.max_usd_per_hour", form),
            )
            st.multiselect("Weight formats", choices.SEARCH_WEIGHT_FORMATS, **E("targets.weights_allowed", form))
            st.multiselect("KV cache formats", choices.SEARCH_KV_DTYPES, **E("targets.kv_allowed", form))
            p1, p2, p3 = st.columns(3)
            p1.selectbox("Price kind", choices.PRICE_KINDS, **E("targets.price_kind", form))
            p2.selectbox(
                "Price per GPU kind",
                choices.PRICE_POLICIES,
                **E("targets.price_policy", form),
                help="median of the listings across providers, or the cheapest listing",
            )
            p3.text_input("Providers (comma-separated substrings, empty = all)", **E("targets.providers", form))
            upload = st.file_uploader(
                "Your own price list (CSV, same columns as catalogs/prices.csv)", type=["csv"], key="opt.price_file"
            )
        st.form_submit_button(
            "Find the cheapest configuration", type="primary", key="opt.submit", **state.commits(form)
        )
    state.field_error("targets.weights_allowed")
    state.field_error("targets.kv_allowed")

    prices = cache.catalog_prices()
    if upload is not None:
        try:
            text = cache.upload_text(upload.getvalue(), "the price list", MAX_TABLE_BYTES)
            prices = cache.prices_from_csv(text, upload.name)
            st.caption(f"Using {len(prices)} prices from {plain(upload.name)}.")
        except (CatalogError, ValueError) as exc:  # not UTF-8, too large, or not a price list
            st.error(f"That price list cannot be used: {plain(exc, 300)}. Using the catalog's prices.")
    with st.expander("Edit prices for this session"):
        edited = st.data_editor(
            pd.DataFrame([p.model_dump(mode="json") for p in prices]),
            num_rows="dynamic",
            key="opt.price_editor",
            width="stretch",
        )
        try:
            prices = cache.prices_from_csv(edited.to_csv(index=False), "edited prices")
        except CatalogError as exc:
            st.error(f"The edited prices are not valid: {plain(exc, 300)}. Using the catalog's prices.")
            prices = cache.catalog_prices()

    goal, cons = ServingGoal.from_config(cfg), Constraints.from_config(cfg)
    if cfg.sessions is not None and st.toggle(
        "Size for the Serving page's sessions: concurrent agents at the p95 TTFT target per turn", key="opt.sessions"
    ):
        agents = st.number_input(
            "Concurrent agents", **state.session_bounds("agents"), value=cfg.sessions.agents, key="opt.agents"
        )
        if cfg.targets.p95_ttft_s is None:
            st.error("Set a p95 TTFT target in the sidebar: agents are sized for a p95 TTFT per turn.")
            st.stop()
        try:
            goal = cache.session_goal(cfg, int(agents))
        except ValueError as exc:
            st.error(plain(exc, 300))
            st.stop()
    if cfg.dp_attention or cfg.cp > 1 or cfg.dcp > 1:  # rabit recommend --dp-attention / --cp / --dcp alike
        st.info(
            "Attention parallelism is set in the sidebar"
            + (" (data-parallel attention)" if cfg.dp_attention else "")
            + (f" (CP {cfg.cp})" if cfg.cp > 1 else "")
            + (f" (DCP {cfg.dcp})" if cfg.dcp > 1 else "")
            + ": every candidate keeps that attention layout. Clear it to let the search choose."
        )
    try:
        rec = cache.recommendation(goal, cons, tuple(prices))
        rr = cache.recommendation_ranges(goal, cons, tuple(prices))
    except BudgetExceeded as exc:  # the search's work budget (core.base.limits.search_budget) ran out
        st.error(str(exc))
        st.stop()
    rg = rr.recommendation.ranges if rr.recommendation else {}
    if rec.unpriced:
        st.warning(
            f"No {cfg.targets.price_kind} price for {', '.join(rec.unpriced)}: left out of the search, not judged. "
            "Add a row under 'Edit prices for this session' (or upload a price list) to include them."
        )

    e = rec.explanation
    with head:
        render.workload_caption(cfg, goal.rate_per_s, sessions=goal.sessions)
        if rec.met:
            pessimistic = rr.recommendation
            misses = pessimistic is not None and pessimistic.misses_at_pessimistic
            render.say(
                "warning" if misses else "success",
                e.summary
                + (
                    " That is at base assumptions; with every assumption at its pessimistic bound at once, "
                    + "; ".join(t.text() for t in pessimistic.failing)
                    + "."
                    if misses and pessimistic.failing
                    else ""
                ),
                limit=2000,  # core's prose quotes prices and providers
            )
            checks = pessimistic.targets if pessimistic is not None else ()
            render.pick_metrics(rec.recommendation, rg, gpus=True, targets=checks)
            if pessimistic is not None:
                st.caption(
                    "Two rules: the range under each card moves one assumption at a time to its bounds and combines "
                    "the moves; the check under each target moves them all at once, so it can fall outside the range. "
                    "The recommendation " + pessimistic.pessimistic_note + "."
                )
            if rr.note:
                render.say("info" if rr.settled else "warning", rr.note[0].upper() + rr.note[1:] + ".", limit=1000)
        else:
            render.say("error", e.summary, limit=1000)
            if e.relax:
                render.say("warning", "To get an answer: " + e.relax, limit=1000)
    if goal.sessions is None:  # the sidebar's lengths: a session goal sizes for its turns instead
        render.length_warning(cfg)
    render.pool_vendor_caption(cons.gpus_allowed)
    if rec.met:
        render.launch_downloads(rec.recommendation, goal)

    with st.container(border=True):
        st.markdown("**Why this answer**")
        for label, text in (
            ("Why this GPU", e.why_gpu),
            ("Why this count and layout", e.why_count),
            ("Bottleneck", e.bottleneck),
            ("Disaggregated or not", e.disaggregation),
            ("Cheaper alternative", e.cheaper_alternative),
            ("Faster alternative", e.faster_alternative),
        ):
            if text:
                st.markdown(f"- **{label}:** {plain(text, 1000)}")  # core's prose quotes prices and providers
        if e.risks:
            st.markdown("**Risks:** " + plain("; ".join(e.risks), 2000))
        st.caption("Assumptions: " + plain("; ".join(e.assumptions), 2000))

    if cfg.adapters.enabled:
        st.subheader(f"{cfg.adapters.count:,} adapters: one deployment per variant, or one base")
        pv = cache.per_variant(goal, cons, tuple(prices), rec.recommendation or rec.nearest)
        if pv is None:
            st.caption("No merged deployment fits under these constraints, so there is nothing to compare.")
        else:
            render.per_variant(pv)

    sim = [c for c in rec.candidates if c.simulated]
    if sim:
        best = rec.recommendation
        fig = charts.optimizer_pareto(rec)
        if best is not None and rr.recommendation is not None:
            charts.range_cross(
                fig,
                best.cost_per_hour,
                best.p95_e2e_s,
                rg.get("cost_per_hour"),
                rg.get("p95_e2e_s"),
                name="recommendation's range",
            )
        if rr.runner_up is not None:
            ru = next((c for c in sim if c.label == rr.runner_up.label), None)
            if ru is not None:
                charts.range_cross(
                    fig,
                    ru.cost_per_hour,
                    ru.p95_e2e_s,
                    rr.runner_up.ranges.get("cost_per_hour"),
                    None,
                    name="runner-up's cost range",
                    color="#bf8700",
                )
        st.plotly_chart(fig, width="stretch", key="pareto_chart")
        st.caption(
            "Error bars: the recommendation's and the runner-up's heuristic ranges from the assumption "
            "bounds (computed for those two only)."
        )
        if rr.recommendation is not None:
            render.tornado_picker(
                rg,
                {
                    "cost_per_hour": "the cost per hour",
                    "p95_ttft_s": "the p95 TTFT",
                    "p95_itl_s": "the p95 ITL",
                    "p95_e2e_s": "the p95 end-to-end",
                    "capacity_requests_per_s": "the capacity",
                },
                "optimizer",
                "p95_e2e_s",
            )

    st.subheader(f"All {rec.evaluated} evaluated configurations ({rec.simulated} simulated)")
    st.caption("Sorted as the search ranked them; every column is in the CSV (sidebar: Tables as CSV).")
    render.table(
        pd.DataFrame(
            [
                {
                    "configuration": c.label,
                    "$/h": fmt_usd(c.cost_per_hour) if c.cost_per_hour is not None else "",
                    "meets": {True: "yes", False: "no", None: ""}[c.meets],
                    "p95 TTFT": fmt_latency(c.p95_ttft_s) if c.simulated else "",
                    "p95 ITL": fmt_latency(c.p95_itl_s) if c.simulated else "",
                    "p95 e2e": fmt_latency(c.p95_e2e_s) if c.simulated else "",
                    "pruned because": c.pruned,
                    "batch-1 TTFT": fmt_latency(c.batch_1_ttft_s),
                    "batch-1 ITL": fmt_latency(c.batch_1_itl_s),
                    "replicas": c.replicas,
                    "price basis": c.price_basis,
                }
                for c in rec.candidates
            ]
        ),
        "evaluated configurations",
        column_config=render.widths(configuration=290, **{"$/h": 70, "meets": 50, "pruned because": 240}),
    )


if view == "Training run":
    st.caption(
        "The cheapest training run that meets a deadline, across GPU kinds and their prices: the training "
        "deadline search runs for each priced kind, and the cheapest count that finishes in time wins. "
        "Model, training tokens, sequence length, precision and global batch come from the sidebar's "
        "Training settings."
    )
    train_form: list[str] = []  # the keys of its inputs, kept when it is submitted (state.commits)
    with st.form("opt_train"):
        c1, c2 = st.columns(2)
        c1.number_input("Deadline [days]", **B("targets.deadline_days"), **E("targets.deadline_days", train_form))
        c2.multiselect(
            "GPU kinds (empty = all priced)", cache.gpu_slugs(), **E("targets.train_gpus_allowed", train_form)
        )
        st.form_submit_button(
            "Find the cheapest run", type="primary", key="opt.train_submit", **state.commits(train_form)
        )
    tcfg = cfg.with_(phase="train")
    try:
        tr = cache.training_recommendation(
            tcfg,
            cfg.targets.deadline_s,
            Constraints.from_config(cfg, training=True),
            cache.catalog_prices(),
        )
    except BudgetExceeded as exc:  # the search's work budget (core.base.limits.search_budget) ran out
        st.error(str(exc))
        st.stop()
    render.say("success" if tr.met else "error", tr.summary)
    if tr.recommendation is not None:
        trg = cache.training_option_ranges(tcfg, tr.recommendation)
        o = tr.recommendation
        t1, t2, t3 = st.columns(3)
        render.metric_range(t1, "Cost of the run", fmt_usd(o.cost_usd), trg.get("cost_usd"), fmt_usd)
        render.metric_range(
            t2,
            "Wall-clock with failures",
            fmt_days(o.wall_clock_s),
            trg.get("wall_clock_s"),
            fmt_days,
        )
        render.metric_range(t3, "GPU-hours", f"{o.gpu_hours:,.0f}", trg.get("gpu_hours"), lambda x: f"{x:,.0f}")
    if tr.why_gpu:
        st.markdown(f"- **Why this GPU:** {plain(tr.why_gpu, 1000)}")
    if tr.relax:
        st.warning("To get an answer: " + plain(tr.relax, 1000))
    if tr.options:
        st.plotly_chart(charts.training_cost_by_gpu(tr), width="stretch", key="train_cost_chart")
        render.table(
            pd.DataFrame(
                [
                    {
                        "GPU": o.gpu,
                        "GPUs": o.gpus,
                        "cost": fmt_usd(o.cost_usd),
                        "wall-clock": fmt_days(o.wall_clock_s),
                        "meets the deadline": "yes" if o.meets_deadline else "no",
                        "GPU-hours": f"{o.gpu_hours:,.0f}",
                        "layout": o.layout,
                    }
                    for o in tr.options
                ]
            ),
            "cheapest run per GPU kind",
        )
    if tr.skipped:
        st.caption("Left out: " + plain("; ".join(tr.skipped), 2000))
