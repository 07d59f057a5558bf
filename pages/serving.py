"""Serving simulation: watch queues build on a deployment (replicas behind a router, or prefill and decode pools)
under continuous batching."""

import streamlit as st

from dashboard import analyses, cache, charts, render, sessions_view, state
from dashboard.api import (
    CUDA_GRAPH_MAX_TOKENS,
    DEFAULT_RATE_FRACTION,
    ENGINE_LABELS,
    MAX_TABLE_BYTES,
    ROUTER_HELP,
    ROUTER_LABELS,
    ValidationError,
    choices,
    fmt_num,
    fmt_sig,
    fmt_time,
)
from dashboard.text import plain

st.title("Serving simulation")
cfg = render.bound_choice("serving", state.require_config())
if st.toggle(
    "Sessions: multi-turn agents and chat (context grows each turn, its prefix cached)",
    value=cfg.sessions is not None,  # a link or a config file that carries sessions opens them
    key="serving.sessions",
):
    sessions_view.draw(cfg)
    st.stop()
head = st.container()  # the answer first (the deployment, its verdict and its p95s); this page's inputs under it
st.caption(
    "The deployment under load, iteration by iteration: its replicas behind a router, arrivals queue, the scheduler "
    "batches prefill and decode tokens, each iteration timed by the step-time model for its exact mix. Prompt and "
    "output lengths come from the sidebar; these inputs travel with the link and the saved configuration."
)

E, B = state.edits, state.bounds
st.subheader("Workload and scheduler", divider="gray")
with st.expander("Deployment: replicas, router, disaggregated prefill / decode", expanded=cfg.disagg.enabled):
    d1, d2, d3 = st.columns(3)
    d1.number_input(f"Replicas (0 = GPUs / (TP x PP) = {cfg.dp})", **B("workload.replicas"), **E("workload.replicas"))
    d1.selectbox("Router", choices.ROUTERS, **E("workload.router"), format_func=ROUTER_LABELS.get, help=ROUTER_HELP)
    d2.number_input(
        "Shared prefix (share of each prompt)", **B("workload.prefix_cache_frac"), **E("workload.prefix_cache_frac")
    )
    d2.number_input("Prefix groups", **B("workload.prefix_groups"), **E("workload.prefix_groups"))
    d3.checkbox("Disaggregated prefill / decode pools", **E("disagg.enabled"))
    d3.checkbox("KV sent layer by layer during the prefill", **E("disagg.overlap"), disabled=not cfg.disagg.enabled)
    if cfg.disagg.enabled:
        p1, p2, p3, q1, q2, q3 = st.columns(6)
        gpus = ("", *cache.gpu_slugs())
        p1.number_input("Prefill instances", **B("disagg.prefill_instances"), **E("disagg.prefill_instances"))
        p2.number_input("Prefill TP (0 = sidebar)", **B("disagg.prefill_tp"), **E("disagg.prefill_tp"))
        p3.selectbox("Prefill GPU", gpus, **E("disagg.prefill_gpu"), format_func=lambda g: g or cfg.gpu)
        q1.number_input("Decode instances", **B("disagg.decode_instances"), **E("disagg.decode_instances"))
        q2.number_input("Decode TP (0 = sidebar)", **B("disagg.decode_tp"), **E("disagg.decode_tp"))
        q3.selectbox("Decode GPU", gpus, **E("disagg.decode_gpu"), format_func=lambda g: g or cfg.gpu)
arr_col, len_col, sch_col = st.columns(3)
with arr_col:
    st.markdown("**Arrivals**")
    st.radio(
        "Arrival process",
        choices.ARRIVALS,
        **E("workload.arrival"),
        horizontal=True,
        format_func=choices.ARRIVAL_LABELS.get,
    )
    closed = cfg.workload.arrival == "closed"
    st.number_input(
        "Arrival rate [requests/s]",
        **B("workload.rate_per_s"),
        **E("workload.rate_per_s"),
        format="%.3g",
        disabled=closed,
    )
    st.number_input("Concurrent users", **B("workload.users"), **E("workload.users"), disabled=not closed)
    st.number_input("Mean think time [s]", **B("workload.think_s"), **E("workload.think_s"), disabled=not closed)
    st.number_input("Requests", **B("workload.num_requests"), **E("workload.num_requests"))
with len_col:
    st.markdown("**Lengths**")
    st.selectbox("Distribution", choices.LENGTH_KINDS, **E("workload.lengths"))
    st.number_input(
        "Spread (lognormal σ / uniform half-width)",
        **B("workload.spread"),
        **E("workload.spread"),
        disabled=cfg.workload.lengths == "fixed",
    )
    state.field_error("workload.spread")
    up = st.file_uploader(
        "Replay a trace (CSV/JSONL of input and output tokens)", type=["csv", "jsonl", "json"], key="sim.trace_file"
    )
    trace = None
    if up is not None:
        try:
            trace = cache.sim_trace(cache.upload_text(up.getvalue(), "the trace", MAX_TABLE_BYTES))  # UTF-8, sized
            st.caption(f"Replaying {len(trace):,} rows in order (cycled).")
        except ValueError as exc:
            st.error(f"That trace cannot be used: {plain(exc, 300)}")
with sch_col:
    st.markdown("**Scheduler**")
    st.selectbox("Serving engine", choices.ENGINES, **E("workload.engine"), format_func=ENGINE_LABELS.get)
    eng = cache.engine_defaults(cfg)

    def _apply_engine_defaults(d=eng) -> None:
        for field, value in d.spec_fields().items():
            state.put(state.key(f"workload.{field}"), value)

    w = cfg.workload
    differs = [f"{f} {now} (default {v})" for f, (now, v) in eng.differences(w.model_dump()).items()]
    st.caption(
        f"{ENGINE_LABELS[eng.engine]} on {cfg.gpu}: max batch {eng.max_batch:,}, token budget "
        f"{eng.token_budget:,}, {choices.ADMISSION_LABELS[eng.admission]}, prefix caching "
        f"{'on' if eng.prefix_caching else 'off'}; CUDA graphs for iterations up to "
        f"{CUDA_GRAPH_MAX_TOKENS[eng.engine]:,} tokens, eager kernel launches beyond ({eng.source})."
        + (f" Differs here: {'; '.join(differs)}." if differs else " These settings are its defaults.")
    )
    st.button(f"Use {ENGINE_LABELS[eng.engine]}'s defaults", on_click=_apply_engine_defaults, disabled=not differs)
    st.radio(
        "Policy",
        choices.SCHEDULER_POLICIES,
        **E("workload.policy"),
        horizontal=True,
        format_func=choices.POLICY_LABELS.get,
    )
    c1, c2 = st.columns(2)
    c1.number_input("Token budget / iteration", **B("workload.token_budget"), **E("workload.token_budget"))
    c2.number_input("Max batch", **B("workload.max_batch"), **E("workload.max_batch"))
    sched_err = st.empty()
    st.radio(
        "KV admission",
        choices.ADMISSIONS,
        **E("workload.admission"),
        horizontal=True,
        format_func=choices.ADMISSION_LABELS.get,
    )
    st.checkbox("Prefix caching (a preempted request finds its blocks again)", **E("workload.prefix_caching"))
    st.checkbox(
        "Async scheduling (the next iteration planned while one runs: an arrival waits one iteration more)",
        **E("workload.async_scheduling"),
    )
    st.checkbox("CUDA graphs (off = eager mode, every kernel launched from the host)", **E("workload.cuda_graphs"))
    c1, c2 = st.columns(2)
    c1.number_input("Timeout [s] (0 = none)", **B("workload.timeout_s"), **E("workload.timeout_s"))
    c2.number_input("Seed", **B("workload.seed"), **E("workload.seed"))

try:
    spec = cache.sim_spec(cfg, trace)
    cap = cache.sim_capacity(cfg, spec)
except ValidationError as exc:
    sched_err.error(exc.errors()[0]["msg"].removeprefix("Value error, "))
    st.stop()
except ValueError as exc:
    st.error(plain(exc, 400))
    st.stop()
for prob in cache.workload_problems(cfg, trace):  # a replayed request past the context, a pool too small
    st.error(plain(prob.message, 400))
    st.stop()
n_req, arrival = spec.num_requests or 0, spec.arrival
try:
    with st.spinner(f"Simulating {n_req:,} requests…"):
        dep = cache.deployment(cfg, spec)
except ValueError as exc:  # a work budget ran out (core.base.limits): say what to change
    head.error(str(exc))
    st.stop()
res = dep.result
s = res.summary
dcap = res.capacity.requests_per_s  # the deployment's closed form (replicas x one, or its pools)
if arrival == "poisson" and dcap > 0:
    arr_col.caption(
        f"Arrival rate {fmt_sig(spec.rate_per_s, 6)} requests/s = {spec.rate_per_s / dcap:.0%} of the deployment's "
        f"closed-form capacity ({fmt_sig(dcap)} requests/s). A round rate clearly inside capacity would be "
        f"{fmt_sig(cache.default_rate(dcap), 6)}: {DEFAULT_RATE_FRACTION:.0%} of capacity, rounded down to 1, 2 or "
        "5 x 10^k."
    )
with st.spinner("Simulating each assumption at its bounds…"):
    rng = cache.deployment_ranges(cfg, spec)

if dep.mode == "disaggregated":
    capacity = f"the deployment's closed-form capacity {fmt_sig(dcap)} requests/s ({res.capacity.limited_by})"
elif dep.layout.replicas > 1:
    capacity = (
        f"the deployment's closed-form capacity {fmt_sig(dcap)} requests/s ({dep.layout.replicas} x "
        f"{fmt_sig(cap.requests_per_s)} of one replica at a batch of {cap.batch:.0f}, {cap.limited_by})"
    )
else:
    capacity = f"the closed-form capacity {fmt_sig(dcap)} requests/s at a batch of {cap.batch:.0f} ({cap.limited_by})"
load = (
    f" at {fmt_sig(spec.rate_per_s, 6)} requests/s, {spec.rate_per_s / dcap:.0%} of"
    if arrival == "poisson" and dcap > 0
    else ";"
)
with head:
    render.headline(render.deployment_headline(cfg, dep))
    slots = cache.slot_limit(cfg, spec) if cfg.adapters.enabled else None
    if slots is not None and slots.is_cause:  # the adapter slots, not the run length or the load
        render.say("error" if s.saturated else "warning", slots.text())
    if s.saturated:
        render.say(
            "error",
            f"**Saturated**{load} {capacity}: requests arrive faster than the deployment drains them "
            "and the queue grows without bound, so no latency is shown.",
        )
    elif s.saturation_verdict == "too short to tell":
        render.say(
            "warning",
            f"**Too short to tell** whether the queue is stable{load} {capacity}. Simulate more requests.",
        )
    else:
        render.say("success", f"**Stable**{load} {capacity}.")
    render.latency_cards(s, rng.ranges, cfg.targets)
    render.length_warning(cfg)
    st.caption(f"Why: {s.saturation_reason}.")
    (st.warning if rng.verdict_changes else st.caption)(
        f"Saturation inside the range: **{rng.verdict_text()}** (pessimistic bound: "
        f"{'saturated' if rng.saturated_at['low'] else 'stable'}, optimistic bound: "
        f"{'saturated' if rng.saturated_at['high'] else 'stable'}; bound runs of {rng.requests_at_bounds:,} requests)."
    )
    if s.thrash:
        st.warning(s.thrash_note)
render.deployment_details(dep)

st.subheader("Every percentile", divider="gray")
if s.latency_withheld:
    st.info(f"No latency: {s.latency_withheld}. Lower the arrival rate or add capacity.")
else:
    for col, key in zip(st.columns(4), ("ttft_s", "itl_s", "e2e_s", "queue_s")):
        p = getattr(s, key)
        name = {"ttft_s": "TTFT", "itl_s": "ITL", "e2e_s": "E2E", "queue_s": "Queue"}[key]
        for q in ("p50", "p95", "p99"):
            v = getattr(p, q)
            render.metric_range(
                col,
                f"{name} {q}",
                fmt_time(v) if v is not None else f"withheld (n={p.n})",
                rng.ranges.get(f"{key}.{q}") if v is not None else None,
                fmt_time,
                help=f"{charts.SIM_LABELS[key]} over {p.n:,} completed requests"
                + ("" if v is not None else "; p95 needs 20 samples, p99 needs 100"),
            )

analyses.show_calibrated(
    []
    if s.latency_withheld
    else [
        ("TTFT p50", "ttft_s.p50", s.ttft_s.p50),
        ("TTFT p99", "ttft_s.p99", s.ttft_s.p99),
        ("ITL p50", "itl_s.p50", s.itl_s.p50),
        ("ITL p99", "itl_s.p99", s.itl_s.p99),
        ("E2E p50", "e2e_s.p50", s.e2e_s.p50),
    ],
    cfg,
)

cols = render.grid(
    9,
    (
        "Requests/s",
        "Output tokens/s",
        "Utilisation",
        "Iteration running",
        "KV held (mean)",
        "Prefill share of time",
        "Preemptions",
        "Rejected",
        "Timed out",
    ),
)
render.metric_range(
    cols[0],
    "Requests/s",
    f"{fmt_sig(s.throughput_requests_per_s)}",
    rng.ranges.get("throughput_requests_per_s"),
    lambda x: f"{fmt_sig(x)}",
)
render.metric_range(
    cols[1], "Output tokens/s", fmt_num(s.throughput_tokens_per_s), rng.ranges.get("throughput_tokens_per_s"), fmt_num
)
cols[2].metric(
    "Utilisation",
    f"{res.utilisation_frac:.0%}",
    help="the load: the arrival rate x each request's service demand (1 / the closed-form capacity)",
)
cols[3].metric(
    "Iteration running",
    f"{s.gpu_busy_share:.0%}",
    help="share of the time an iteration runs, at whatever batch: near 100 % whenever a request is in flight, "
    "even at a small load (not the utilisation)",
)
cols[4].metric("KV held (mean)", f"{s.kv_occupancy_mean:.0%}", help=f"pool of {res.kv_pool_tokens:,} tokens")
cols[5].metric("Prefill share of time", f"{s.prefill_time_share:.0%}")
cols[6].metric("Preemptions", f"{s.preemptions:,}")
cols[7].metric("Rejected", f"{s.rejected:,}", help=f"{s.rejection_rate:.1%}: could never fit the KV pool or context")
cols[8].metric("Timed out", f"{s.timed_out:,}", help=f"{s.timeout_rate:.1%}")

if s.adapters is not None:
    st.markdown(f"**{cfg.adapters.count:,} adapters over one base**")
    render.adapter_simulation(s.adapters)

left, right = st.columns(2)
left.plotly_chart(charts.latency_cdf({k: res.samples(k) for k in ("ttft_s", "itl_s", "e2e_s")}), width="stretch")
right.plotly_chart(charts.sim_timeseries(res.ts_s, res.ts_waiting, res.ts_running, res.ts_kv_frac), width="stretch")

st.subheader("Where is the knee? (one replica)")
one_spec = spec.with_(rate_per_s=dep.per_replica_rate_per_s) if arrival == "poisson" else spec  # one replica's share
sweep_spec, rates = cache.knee_sweep(one_spec, cap)  # around the capacity and this rate
with st.spinner(f"Simulating {len(rates)} arrival rates…"):
    try:
        rows = cache.sim_sweep(cfg, sweep_spec, tuple(rates))
    except ValueError as exc:  # a work budget ran out (core.base.limits): say what to change
        st.error(str(exc))
        st.stop()
fig = charts.p95_vs_rate(
    rows,
    cap.requests_per_s,
    one_spec.rate_per_s if arrival == "poisson" else None,
    targets={"ttft_s": cfg.targets.p95_ttft_s, "e2e_s": cfg.targets.p95_e2e_s},
)
with st.spinner("The same sweep at the pessimistic and optimistic bounds…"):
    band_x, band_lo, band_hi = cache.p95_e2e_band(cfg, sweep_spec, tuple(rates))
if band_x:
    charts.add_band(
        fig,
        band_x,
        band_lo,
        band_hi,
        name="p95 end-to-end, every assumption at its pessimistic / optimistic bound",
        color=charts.SIM_COLORS["e2e_s"],
    )
st.plotly_chart(fig, width="stretch")
c1, c2 = st.columns(2)
with c1:
    render.tornado_picker(
        rng.ranges,
        {
            "e2e_s.p95": "p95 end-to-end",
            "ttft_s.p95": "p95 TTFT",
            "itl_s.p95": "p95 ITL",
            "throughput_tokens_per_s": "output tokens/s",
            "capacity_requests_per_s": "closed-form capacity",
        },
        "serving",
        "e2e_s.p95",
    )
with c2:
    render.metric_range(  # the deployment's (its range is rebased on it); the chart's line is one replica's
        st,
        "Closed-form capacity [requests/s]"
        if dcap == cap.requests_per_s
        else "Deployment's closed-form capacity [requests/s]",
        f"{fmt_sig(dcap)}",
        rng.ranges.get("capacity_requests_per_s"),
        lambda x: f"{fmt_sig(x)}",
        help=None if dcap == cap.requests_per_s else f"one replica: {fmt_sig(cap.requests_per_s)} requests/s",
    )
st.caption(
    f"One replica of this layout against its own arrival rate (the deployment's rate split over its replicas is "
    "marked); each point simulates "
    f"{sweep_spec.num_requests:,} requests with this page's lengths and scheduler; "
    "the closed-form capacity assumes prefills mix perfectly into decode iterations, so the knee comes "
    "a little before it."
)
