"""Serving simulation: watch queues build on one replica under continuous batching."""

import streamlit as st
from pydantic import ValidationError

from core.simulate import Lengths, SimSpec, sweep_rates
from core.units import fmt_num, fmt_time
from dashboard import analyses, cache, charts, state

st.title("Serving simulation")
st.caption("A deterministic, iteration-level simulation of one replica: arrivals queue, the scheduler batches "
           "prefill and decode tokens, each iteration is timed by the step-time model for its exact mix. "
           "Mean prompt and output lengths come from the sidebar.")
cfg = state.require_config()

arr_col, len_col, sch_col = st.columns(3)
with arr_col:
    st.subheader("Arrivals")
    arrival = st.radio("Arrival process", ["poisson", "closed"], key="sim.arrival", horizontal=True,
                       format_func={"poisson": "Poisson (open)", "closed": "closed loop"}.get)
    rate_slot = st.container()
    users = st.number_input("Concurrent users", 1, 100_000, 16, key="sim.users", disabled=arrival != "closed")
    think = st.number_input("Mean think time [s]", 0.0, 3600.0, 0.0, key="sim.think", disabled=arrival != "closed")
    n_req = st.number_input("Requests", 20, 200_000, 1000, step=100, key="sim.requests")
with len_col:
    st.subheader("Lengths")
    kind = st.selectbox("Distribution", ["lognormal", "uniform", "fixed"], key="sim.lengths")
    spread = st.number_input("Spread (lognormal σ / uniform half-width)", 0.0, 3.0, 0.5, step=0.1, key="sim.spread",
                             disabled=kind == "fixed")
    up = st.file_uploader("Replay a trace (CSV/JSONL of input and output tokens)", type=["csv", "jsonl", "json"],
                          key="sim.trace_file")
    trace = None
    if up is not None:
        try:
            trace = cache.sim_trace(up.getvalue().decode("utf-8", errors="replace"))
            st.caption(f"Replaying {len(trace):,} rows in order (cycled).")
        except ValueError as exc:
            st.error(f"That trace cannot be used: {exc}")
with sch_col:
    st.subheader("Scheduler")
    policy = st.radio("Policy", ["chunked", "prefill_priority"], key="sim.policy", horizontal=True,
                      format_func={"chunked": "chunked prefill", "prefill_priority": "prefill priority"}.get)
    c1, c2 = st.columns(2)
    budget = c1.number_input("Token budget / iteration", 1, 1_000_000, 8192, step=512, key="sim.token_budget")
    max_batch = c2.number_input("Max batch", 1, 100_000, 256, step=16, key="sim.max_batch")
    sched_err = st.empty()
    admission = st.radio("KV admission", ["preempt", "reserve"], key="sim.admission", horizontal=True,
                         format_func={"preempt": "paged, preempt + recompute",
                                      "reserve": "reserve prompt + max output"}.get)
    c1, c2 = st.columns(2)
    timeout = c1.number_input("Timeout [s] (0 = none)", 0.0, 1e6, 0.0, key="sim.timeout")
    seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key="sim.seed")

try:
    lengths = {f: Lengths(kind=kind, mean=m, spread=spread)
               for f, m in (("input", cfg.input_tokens), ("output", cfg.output_tokens))}
    base = SimSpec(arrival=arrival, users=users, think_s=think, num_requests=n_req, trace=trace, policy=policy,
                   token_budget=budget, max_batch=max_batch, admission=admission,
                   timeout_s=timeout or None, seed=seed, **lengths)
    cap = cache.sim_capacity(cfg, base)
except ValidationError as exc:
    sched_err.error(exc.errors()[0]["msg"].removeprefix("Value error, "))
    st.stop()
except ValueError as exc:
    st.error(str(exc))
    st.stop()

if "sim.rate" not in st.session_state:  # first visit: half the closed-form capacity
    st.session_state["sim.rate"] = sweep_rates(cap.requests_per_s, (0.5,))[0]
rate = rate_slot.number_input("Arrival rate [requests/s]", min_value=0.001, max_value=1e6, step=0.5,
                              key="sim.rate", format="%.3g", disabled=arrival != "poisson")
spec = base.with_(rate_per_s=rate)

try:
    with st.spinner(f"Simulating {n_req:,} requests…"):
        res = cache.simulation(cfg, spec)
except ValueError as exc:  # a work budget ran out (core.limits): say what to change
    st.error(str(exc))
    st.stop()
s = res.summary

if s.saturated:
    st.error(f"Saturated: requests arrive faster than this replica drains them, so the queue grows without bound "
             f"({s.saturation_reason}). Closed-form capacity ≈ {cap.requests_per_s:.3g} requests/s "
             f"at a batch of {cap.batch:.0f} ({cap.limited_by}).")
elif s.saturation_verdict == "too short to tell":
    st.warning(f"Too short to tell whether the queue is stable: {s.saturation_reason}. Simulate more requests. "
               f"Closed-form capacity ≈ {cap.requests_per_s:.3g} requests/s at a batch of {cap.batch:.0f} "
               f"({cap.limited_by}).")
else:
    st.success(f"Stable: {s.saturation_reason}. Closed-form capacity ≈ {cap.requests_per_s:.3g} requests/s "
               f"at a batch of {cap.batch:.0f} ({cap.limited_by}).")

for col, key in zip(st.columns(4), ("ttft_s", "itl_s", "e2e_s", "queue_s")):
    p = getattr(s, key)
    name = {"ttft_s": "TTFT", "itl_s": "ITL", "e2e_s": "E2E", "queue_s": "Queue"}[key]
    for q in ("p50", "p95", "p99"):
        v = getattr(p, q)
        col.metric(f"{name} {q}", fmt_time(v) if v is not None else f"withheld (n={p.n})",
                   help=f"{charts.SIM_LABELS[key]} over {p.n:,} completed requests"
                        + ("" if v is not None else "; p95 needs 20 samples, p99 needs 100"))

analyses.show_calibrated([("TTFT p50", "ttft_s.p50", s.ttft_s.p50), ("TTFT p99", "ttft_s.p99", s.ttft_s.p99),
                          ("ITL p50", "itl_s.p50", s.itl_s.p50), ("ITL p99", "itl_s.p99", s.itl_s.p99),
                          ("E2E p50", "e2e_s.p50", s.e2e_s.p50)], cfg)

cols = st.columns(8)
cols[0].metric("Requests/s", f"{s.throughput_requests_per_s:.3g}")
cols[1].metric("Output tokens/s", fmt_num(s.throughput_tokens_per_s))
cols[2].metric("GPU busy", f"{s.gpu_busy_share:.0%}")
cols[3].metric("KV held (mean)", f"{s.kv_occupancy_mean:.0%}", help=f"pool of {res.kv_pool_tokens:,} tokens")
cols[4].metric("Prefill share of time", f"{s.prefill_time_share:.0%}")
cols[5].metric("Preemptions", f"{s.preemptions:,}")
cols[6].metric("Rejected", f"{s.rejected:,}", help=f"{s.rejection_rate:.1%}: could never fit the KV pool or context")
cols[7].metric("Timed out", f"{s.timed_out:,}", help=f"{s.timeout_rate:.1%}")

left, right = st.columns(2)
left.plotly_chart(charts.latency_cdf({k: res.samples(k) for k in ("ttft_s", "itl_s", "e2e_s")}),
                  width="stretch")
right.plotly_chart(charts.sim_timeseries(res.ts_s, res.ts_waiting, res.ts_running, res.ts_kv_frac),
                   width="stretch")

st.subheader("Where is the knee?")
sweep_spec = base.with_(arrival="poisson", num_requests=min(n_req, 600))  # rate-free: cached across rates
rates = sweep_rates(cap.requests_per_s)
bar = st.progress(0.0, text=f"Simulating {len(rates)} arrival rates…")
rows = []
for i, r in enumerate(rates):
    try:
        rows.append((r, cache.sim_summary(cfg, sweep_spec.with_(rate_per_s=r))))
    except ValueError as exc:
        st.error(str(exc))
        st.stop()
    bar.progress((i + 1) / len(rates), text=f"Simulated {i + 1} of {len(rates)} arrival rates")
bar.empty()
st.plotly_chart(charts.p95_vs_rate(rows, cap.requests_per_s, rate if arrival == "poisson" else None),
                width="stretch")
st.caption(f"Each point simulates {sweep_spec.num_requests:,} requests with this page's lengths and scheduler; "
           "the closed-form capacity assumes prefills mix perfectly into decode iterations, so the knee comes "
           "a little before it.")
