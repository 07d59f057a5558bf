"""Next experiment: which measurement could change the recommendation, and what it costs to make."""

import pandas as pd
import streamlit as st

from dashboard import cache, charts, render, state
from dashboard.api import BudgetExceeded, fmt_sig

st.title("Next experiment")
st.caption(
    "Which benchmark to run first: each uncertain input is moved across its range, the optimizer is re-run "
    "at each point, and the measurements that could change the decision are ranked by flip chance per "
    "GPU-hour. Diagnosing a running deployment from its metrics is on the Diagnostics page."
)
cfg = state.require_config()
K, B = state.key, state.bounds

st.caption(
    f"Workload: mean {cfg.input_tokens:,} prompt and {cfg.output_tokens:,} output tokens from the sidebar; "
    "the rate, targets and GPU kinds are shared with the Optimizer page."
)
with st.form("ne"):
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("Arrival rate [requests/s]", **B("workload.rate_per_s"), key=K("workload.rate_per_s"))
    c2.number_input("p95 TTFT target [s] (0 = none)", **B("targets.p95_ttft_s"), key=K("targets.p95_ttft_s"))
    c3.number_input(
        "p95 inter-token target [s] (0 = none)", **B("targets.p95_itl_s"), format="%.3f", key=K("targets.p95_itl_s")
    )
    c4.number_input("p95 end-to-end target [s] (0 = none)", **B("targets.p95_e2e_s"), key=K("targets.p95_e2e_s"))
    s1, s2, s3, s4 = st.columns(4)
    for col, name, label in (
        (s1, "prompt", "Prompt length spread [+-%]"),
        (s2, "output", "Output length spread [+-%]"),
        (s3, "rate", "Arrival rate spread [+-%]"),
    ):
        path = f"experiment.{name}_spread_frac"
        col.number_input(label, **B(path), format="%g", key=K(path))
    s4.multiselect("GPU kinds (empty = all)", cache.gpu_slugs(), key=K("targets.gpus_allowed"))
    run = st.form_submit_button("Find the next experiment", type="primary", key="ne.submit")

if not run and "ne.done" not in st.session_state:
    st.info(
        "Set the workload and press **Find the next experiment**. The efficiency ranges come from the "
        "assumptions registry (sidebar); the workload's from the spreads above."
    )
    st.stop()
st.session_state["ne.done"] = True

for path in ("workload.rate_per_s", "targets.p95_ttft_s", "targets.p95_itl_s", "targets.p95_e2e_s"):
    state.field_error(path)
for path in ("experiment.prompt_spread_frac", "experiment.output_spread_frac", "experiment.rate_spread_frac"):
    state.field_error(path)
spec = cache.next_experiment_spec(cfg)
bar = st.progress(0.0, text="Re-running the optimizer across every input's range ...")
try:
    r = cache.next_experiment(
        spec,
        cache.catalog_prices(),
        progress=lambda done, total, label: bar.progress(
            min(1.0, done / max(total, 1)), text=f"Re-run {done} of {total}: {label}"
        ),
    )
except BudgetExceeded as exc:  # the search's work budget (core.base.limits.next_budget) ran out
    bar.empty()
    st.error(str(exc))
    st.stop()
bar.empty()

base = r.baseline.recommendation
st.subheader("Today's decision")
if base is None:
    st.write("Nothing meets the target today; each re-run is compared with that.")
else:
    st.write(f"**{base.label}**.")
    rr = cache.recommendation_ranges(spec.goal, spec.constraints, cache.catalog_prices())
    rg = rr.recommendation.ranges if rr.recommendation else {}
    render.pick_metrics(base, rg, ("cost_per_hour", "p95_ttft_s", "p95_itl_s", "p95_e2e_s", "capacity_requests_per_s"))
    render.tornado_picker(
        rg,
        {
            "cost_per_hour": "the cost per hour",
            "p95_ttft_s": "the p95 TTFT",
            "p95_itl_s": "the p95 ITL",
            "p95_e2e_s": "the p95 end-to-end",
            "capacity_requests_per_s": "capacity",
        },
        "ne",
        "cost_per_hour",
    )
st.caption(f"{r.reruns} optimizer re-runs across {len(r.experiments) + len(r.stable)} uncertain inputs.")

st.subheader("Experiments, ranked by flip chance per GPU-hour")
if r.experiments:
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "rank": i,
                    "input": e.input.label,
                    "range": f"{fmt_sig(min(e.input.low, e.input.high))} - "
                    f"{fmt_sig(max(e.input.low, e.input.high))} {e.input.unit}",
                    "flip chance": f"{e.flip_chance:.0%}",
                    "flips to": e.flips_to,
                    "GPU-hours": round(e.gpu_hours, 3),
                    "cost [USD]": round(e.cost_usd, 2),
                    "measurement": e.measurement,
                }
                for i, e in enumerate(r.experiments, 1)
            ]
        ),
        hide_index=True,
        width="stretch",
    )
else:
    st.success("No input flips the decision anywhere in its range: nothing is worth measuring before you buy.")
st.plotly_chart(charts.flip_chance_chart(r.experiments, r.stable), width="stretch")

top = r.top
if top is not None:
    st.subheader(f"Run first: {top.input.label}")
    st.write(
        f"{top.measurement[0].upper()}{top.measurement[1:]}"
        + (
            f": {top.gpus} GPU(s) for {top.duration_s / 60:.0f} min, {top.gpu_hours:.2f} GPU-hours, "
            f"${top.cost_usd:,.2f} at catalog prices."
            if top.gpu_hours > 0
            else "."
        )
    )
    st.code(top.command, language="bash")
    st.caption(top.then)
    st.markdown("**The decision under each outcome**")
    for line in cache.outcomes(top):
        st.markdown(f"- {line}")

with st.expander(f"Not worth measuring now ({len(r.stable)})", expanded=not r.experiments):
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "input": e.input.label,
                    "range": f"{fmt_sig(min(e.input.low, e.input.high))} - "
                    f"{fmt_sig(max(e.input.low, e.input.high))} {e.input.unit}",
                    "source of the range": e.input.source,
                }
                for e in r.stable
            ]
        ),
        hide_index=True,
        width="stretch",
    )
