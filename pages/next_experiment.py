"""Next experiment: which measurement could change the recommendation, and what it costs to make."""

import pandas as pd
import streamlit as st

from dashboard import cache, charts, render, state
from dashboard.api import BudgetExceeded, fmt_sig, fmt_time, fmt_usd

st.title("Next experiment")
st.caption(
    "Which benchmark to run first: each uncertain input is moved across its range, the optimizer re-run at each "
    "point, and the measurements that could change the decision ranked by flip chance per GPU-hour."
)
cfg = state.require_config()
E, B = state.edits, state.bounds
head = st.container()  # the answer first; the question under it

form: list[str] = []  # the keys of its inputs, kept when it is submitted (state.commits)
with st.form("ne"):
    st.caption(
        f"Workload: mean {cfg.input_tokens:,} prompt and {cfg.output_tokens:,} output tokens from the sidebar; "
        "the rate, targets and GPU kinds are shared with the Optimizer page."
    )
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("Arrival rate [requests/s]", **B("workload.rate_per_s"), **E("workload.rate_per_s", form))
    c2.number_input("p95 TTFT target [s] (0 = none)", **B("targets.p95_ttft_s"), **E("targets.p95_ttft_s", form))
    c3.number_input(
        "p95 inter-token target [s] (0 = none)", **B("targets.p95_itl_s"), format="%.3f", **E("targets.p95_itl_s", form)
    )
    c4.number_input("p95 end-to-end target [s] (0 = none)", **B("targets.p95_e2e_s"), **E("targets.p95_e2e_s", form))
    s1, s2, s3, s4 = st.columns(4)
    for col, name, label in (
        (s1, "prompt", "Prompt length spread [+-%]"),
        (s2, "output", "Output length spread [+-%]"),
        (s3, "rate", "Arrival rate spread [+-%]"),
    ):
        path = f"experiment.{name}_spread_frac"
        col.number_input(label, **B(path), format="%g", **E(path, form))
    s4.multiselect("GPU kinds (empty = all)", cache.gpu_slugs(), **E("targets.gpus_allowed", form))
    run = st.form_submit_button("Find the next experiment", type="primary", key="ne.submit", **state.commits(form))

if not run and "ne.done" not in st.session_state:
    render.say(
        "info",
        "Set the workload and press **Find the next experiment**. The efficiency ranges come from the "
        "assumptions registry (sidebar); the workload's from the spreads below.",
        head,
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
with head:
    render.workload_caption(cfg, cfg.workload.rate_per_s)
    top = r.top
    if base is None:
        render.say("warning", "Nothing meets the target today; each re-run is compared with that.")
    else:
        render.say(
            "info",
            f"Today's decision: **{base.label}**. "
            + (
                f"Measure first: **{top.input.label}** ({top.flip_chance:.0%} chance it flips the decision)."
                if top is not None
                else "No measurement in any input's range changes it."
            ),
        )
        rr = cache.recommendation_ranges(spec.goal, spec.constraints, cache.catalog_prices())
        rg = rr.recommendation.ranges if rr.recommendation else {}
        render.pick_metrics(
            base, rg, ("cost_per_hour", "p95_ttft_s", "p95_itl_s", "p95_e2e_s", "capacity_requests_per_s")
        )
if base is not None:
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
    render.table(
        pd.DataFrame(
            [
                {
                    "rank": i,
                    "input": e.input.label,
                    "flip chance": f"{e.flip_chance:.0%}",
                    "flips to": e.flips_to,
                    "GPU-hours": fmt_sig(e.gpu_hours),
                    "cost": fmt_usd(e.cost_usd),
                    "range": f"{fmt_sig(min(e.input.low, e.input.high))} … "
                    f"{fmt_sig(max(e.input.low, e.input.high))} {e.input.unit}",
                    "measurement": e.measurement,
                }
                for i, e in enumerate(r.experiments, 1)
            ]
        ),
        "experiments ranked",
        column_config=render.widths(
            rank=45, input=170, cost=60, range=110, **{"flip chance": 75, "flips to": 290, "GPU-hours": 70}
        ),
    )
else:
    render.say(
        "success", "No input flips the decision anywhere in its range: nothing is worth measuring before you buy."
    )
st.plotly_chart(charts.flip_chance_chart(r.experiments, r.stable), width="stretch")

top = r.top
if top is not None:
    st.subheader(f"Run first: {top.input.label}")
    st.write(
        f"{top.measurement[0].upper()}{top.measurement[1:]}"
        + (
            f": {top.gpus} GPU(s) for {fmt_time(top.duration_s)}, {fmt_sig(top.gpu_hours)} GPU-hours, "
            f"{fmt_usd(top.cost_usd)} at catalog prices."
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
    render.table(
        pd.DataFrame(
            [
                {
                    "input": e.input.label,
                    "range": f"{fmt_sig(min(e.input.low, e.input.high))} … "
                    f"{fmt_sig(max(e.input.low, e.input.high))} {e.input.unit}",
                    "source of the range": e.input.source,
                }
                for e in r.stable
            ]
        ),
        "not worth measuring now",
    )
