"""Calibration: measured runs against RA-BIT's prediction on each run's own config; bias, interval, leave-one-out."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, charts, render, state
from dashboard.api import (
    COMPARABLE_RULE,
    CSV_COLUMNS,
    METRICS,
    RunError,
    fmt_num,
    fmt_sig,
    fmt_time,
)
from dashboard.text import plain

st.title("Calibration")
st.caption(
    "Import benchmark runs, and RA-BIT predicts each run's metrics on the run's own configuration. "
    "r = ln(measured / predicted); bias = mean r over comparable runs; calibrated = predicted × exp(bias). "
    "With 3 or more runs the 95 % interval is exp(± t · sd · √(1 + 1/n)) (Student t); with fewer, "
    "×0.7 … ×1.3 around the calibrated value."
)
analyses.store_or_stop()
cur = analyses.current()
if not cur:
    render.say(
        "info",
        "Runs are attached to a saved analysis: save this configuration or open one under **Saved analyses** first.",
    )
    st.stop()
cfg = state.require_config()
saved_cfg = analyses.store().get(cur["id"]).config
st.markdown(f"Analysis **{plain(cur['name'])}** (revision {cur['revision']}); calibrating for **{cfg.gpu}**.")

st.subheader("Add runs")
c1, c2 = st.columns([3, 1])
files = c1.file_uploader(
    "vllm bench serve --save-result JSON, vllm bench throughput --output-json, or the CSV template",
    type=["json", "csv"],
    accept_multiple_files=True,
    key=f"cal.files.{st.session_state.get('cal.attached', 0)}",
)  # a new key empties it
c2.download_button("CSV template", cache.run_csv_template(), file_name="rabit-runs-template.csv", mime="text/csv")
upload_slot = c1.container()
if "cal.message" in st.session_state:
    upload_slot.success(st.session_state.pop("cal.message"))
if files and c1.button("Attach the files", key="cal.attach", type="primary"):
    try:  # all files or none
        new = [r for f in files for r in cache.runs_from_file(f.name, f.getvalue(), saved_cfg)]
        analyses.store().add_runs(cur["id"], new)
        st.session_state["cal.attached"] = st.session_state.get("cal.attached", 0) + 1
        st.session_state["cal.message"] = f"Attached {len(new)} run(s)."
        st.rerun()
    except RunError as exc:
        upload_slot.error(f"Nothing attached: {plain(exc, 600)}")
with st.expander("…or type runs into a table (the CSV template's columns; empty config fields take the analysis's)"):
    table = st.data_editor(
        pd.DataFrame(columns=list(CSV_COLUMNS), dtype=str), num_rows="dynamic", key="cal.table", width="stretch"
    )
    table_slot = st.container()
    if st.button("Attach the typed runs", key="cal.attach_rows"):
        try:
            new = cache.runs_from_rows(table.to_dict("records"), saved_cfg)
            analyses.store().add_runs(cur["id"], new)
            table_slot.success(f"Attached {len(new)} run(s).")
        except RunError as exc:
            table_slot.error(f"Nothing attached: {plain(exc, 600)}")

runs = analyses.runs()
if not runs:
    render.say("info", "No measured runs attached yet.")
    st.stop()
with st.spinner(f"Predicting {len(runs)} run(s) on their own configs…"):
    res = cache.run_residuals(tuple(r for _, r in runs))
cals = analyses.calibrations(cfg)

st.subheader("Per metric")
st.info(f"**Comparable runs.** {COMPARABLE_RULE}")
loos = {m: cache.leave_one_out(c) for m, c in cals.items()}
render.table(
    pd.DataFrame(
        [
            {
                "metric": m,
                "family": c.family,
                "runs (n)": c.n,
                "bias": round(c.bias, 4),
                "factor": round(c.factor, 4),
                "interval (× analytical)": f"{c.low_mult:.3f} … {c.high_mult:.3f}",
                "basis": "Student t, 95 %" if c.basis == "t" else "×0.7 … ×1.3 (n < 3)",
                "leave-one-out coverage": (
                    f"{loos[m].coverage:.0%} of {len(loos[m].rows)}" if loos[m].rows else "needs 2 runs"
                ),
            }
            for m, c in cals.items()
        ]
    ),
    "calibration per metric",
)
if not cals:
    st.warning(f"No run was measured on {cfg.gpu}: nothing calibrates this configuration.")

metric = st.selectbox("Metric", sorted({r.metric for r in res}, key=list(METRICS).index), key="cal.metric")
c = cals.get(metric)
mres = [r for r in res if r.metric == metric]
st.plotly_chart(
    charts.calibration_chart(
        mres,
        {r.label for r in c.runs} if c else set(),
        c.low_mult if c else None,
        c.high_mult if c else None,
        c.factor if c else None,
        METRICS[metric][2] or "ratio",
    ),
    width="stretch",
)

# --- the heuristic range beside the calibrated interval, and what moves the metric ------------------------------
st.subheader(f"Heuristic range and calibrated interval: {metric}")
serve = METRICS[metric][1] == "serve"
try:
    with st.spinner("Evaluating this configuration at each assumption bound…"):
        if serve:  # the simulated replica at the sidebar's workload: the same percentiles the runs measure
            metric_rng = cache.simulation_ranges(cfg, cache.sim_spec(cfg)).ranges
        else:
            metric_rng = cache.training_layout_ranges(cfg).ranges
except (ValueError, KeyError) as exc:  # a config the simulator or the training model cannot run
    metric_rng = {}
    st.caption(f"No analytical value for {metric} on this configuration: {plain(exc, 300)}")
hr = metric_rng.get(metric)
if hr is not None and hr.value == hr.value:  # not NaN
    unit = METRICS[metric][2]
    fmt = fmt_time if unit == "s" else (lambda v: f"{v:.1%}") if metric == "mfu" else fmt_num
    k1, k2 = st.columns(2)
    render.metric_range(
        k1,
        f"{metric}, analytical",
        fmt(hr.value),
        hr,
        fmt,
        help="this configuration (the sidebar's)"
        + (", one simulated replica at its workload" if serve else ", its own training layout"),
    )
    compare = [(f"{metric}: heuristic range", hr.value, hr.low, hr.high, "heuristic range from the assumption bounds")]
    if c is not None:
        cr = c.range(hr.value)  # the calibrated interval around the same analytical value
        render.metric_range(k2, f"{metric}, calibrated (n={c.n})", fmt(cr.value), cr, fmt)
        compare.append((f"{metric}: calibrated (n={c.n})", cr.value, cr.low, cr.high, "calibrated from measured runs"))
    else:
        k2.info(f"No comparable run of {metric} on {cfg.gpu}: no calibrated interval, the heuristic range stands.")
    g1, g2 = st.columns(2)
    g1.plotly_chart(
        cache.figure(
            charts.range_compare_chart,
            tuple(compare),
            "Heuristic range vs calibrated interval",
            unit or "ratio",
        ),
        width="stretch",
    )
    with g2:
        render.tornado(hr, f"What moves {metric}")
    st.caption(
        "The heuristic range is the analytical value with each assumption alone at its low and high bound, combined; "
        "where comparable runs exist, the calibrated interval takes its place on every page."
    )

st.subheader("Residuals")
used = {(r.label, r.metric) for c_ in cals.values() for r in c_.runs}
render.table(
    pd.DataFrame(
        [
            {
                "run": r.label,
                "metric": r.metric,
                "GPU": r.gpu,
                "measured": r.measured,
                "predicted": r.predicted,
                "r = ln(measured / predicted)": round(r.r, 4),
                "used": (r.label, r.metric) in used,
                "config": r.config,
            }
            for r in res
        ]
    ),
    "residuals",
)

st.subheader("Leave-one-out check")
st.caption("Each run predicted from the others: if the interval is honest, about 95 % of held-out runs fall inside.")
if c and loos[metric].rows:
    st.metric(f"Coverage for {metric}", f"{loos[metric].coverage:.0%}", help=f"{len(loos[metric].rows)} runs")
    render.table(pd.DataFrame([r.model_dump() for r in loos[metric].rows]), "leave-one-out")
else:
    st.caption("Needs at least 2 comparable runs of this metric.")

with st.expander("Attached runs"):
    for rid, run in runs:
        a, b = st.columns([5, 1])
        a.write(
            f"**{plain(run.label)}** ({run.source}): {plain(run.describe())}; "
            + ", ".join(f"{m.metric} = {fmt_sig(m.value, 4)}" for m in run.measurements)
        )
        if b.button("Remove", key=f"cal.rm.{rid}"):
            analyses.store().remove_run(cur["id"], rid)
            st.rerun()

# --- the second calibration: the efficiency assumptions fitted to the runs ---------------------------------------
st.subheader("Fit of the efficiency assumptions")
st.caption(
    "A factor per metric cannot follow an error that depends on the run's shape. This fit moves the step model's "
    "efficiencies (decode bandwidth, compute ceiling and its ramp, the fixed per-step cost) within their bounds so "
    "that every run, predicted again, matches in log space; runs of one shape then calibrate another. Per GPU kind "
    "and engine; the interval comes from the fit's residuals."
)
serving_runs = tuple(r for _, r in runs if r.load != "train")
engine = cfg.workload.engine
with st.spinner(f"Fitting the assumptions to the runs on {cfg.gpu} with {engine}…"):
    fitted = cache.assumption_fit(serving_runs, cfg.gpu, engine)
if fitted is None:
    st.info(f"No serving run on {cfg.gpu} with {engine}: nothing to fit for this configuration.")
else:
    render.fit_table(fitted)
    with st.spinner("Predicting each run from the others, with the factor and with the fit…"):
        comp = cache.fit_comparison(serving_runs, cfg.gpu, engine)
    if comp is None:
        st.caption("The leave-one-out comparison needs at least 3 runs on this GPU kind and engine.")
    else:
        render.fit_comparison(comp)
    if fitted.moved:
        st.button(
            "Use the fitted assumptions in the sidebar",
            key="cal.fit.use",
            on_click=state.set_assumptions,
            args=({k: round(fitted.values[k], 4) for k in fitted.moved},),
        )
