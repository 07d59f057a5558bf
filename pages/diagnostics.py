"""Diagnostics: what a running deployment's metrics say is wrong, rule by rule, with remedies."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, charts, render, share, state
from dashboard.api import (
    MAX_BYTES,
    RULES,
    Expectation,
    PrometheusError,
    TelemetryError,
    fmt_time,
)
from dashboard.text import plain

st.title("Diagnostics")
st.caption(
    "Upload a deployment's telemetry — vLLM's /metrics page, dcgm-exporter's, or a CSV of time series — "
    "and explicit rules with stated thresholds look for a cause. A rule fires only when every metric it "
    "needs is present."
)
head = st.container()  # the answer first: the diagnosis, or why there is none

upload = st.file_uploader(
    "Telemetry: Prometheus text dump (curl http://HOST:8000/metrics > metrics.txt; "
    "several dumps may be concatenated) or CSV (timestamp_s,metric,value[,labels])",
    type=["txt", "prom", "csv", "metrics"],
    key="dx.file",
)
use_prom = st.toggle("Query a Prometheus server instead (off by default)", key="dx.prom_on")
if use_prom:
    p1, p2, p3 = st.columns([3, 1, 1])
    prom_url = p1.text_input("Prometheus URL", placeholder="http://prometheus:9090", key="dx.prom_url")
    since_min = p2.number_input("Last minutes", **state.query_bounds("since_min"), value=60, key="dx.since")
    timeout_s = p3.number_input("Timeout [s]", **state.query_bounds("timeout_s"), value=5, key="dx.timeout")
with st.expander("What the analysis predicted (for the divergence and prefix-cache rules)"):
    e1, e2, e3 = st.columns(3)
    E = state.edits
    e1.number_input(
        "Predicted p95 TTFT [s] (0 = unknown)", **state.bounds("predicted.p95_ttft_s"), **E("predicted.p95_ttft_s")
    )
    e2.number_input(
        "Predicted p95 ITL [s] (0 = unknown)",
        **state.bounds("predicted.p95_itl_s"),
        format="%.4f",
        **E("predicted.p95_itl_s"),
    )
    e3.number_input(
        "Expected cached prompt share [%] (0 = unknown)",
        **state.bounds("predicted.prefix_cache_frac"),
        format="%g",
        **E("predicted.prefix_cache_frac"),
    )
    for path in ("predicted.p95_ttft_s", "predicted.p95_itl_s", "predicted.prefix_cache_frac"):
        state.field_error(path)
opened = analyses.current()
saved = analyses.store_or_stop().get(opened["id"]) if opened else None
predicted = cache.analysis_expectation(saved.config) if saved is not None else Expectation()
mine = state.config().predicted if state.config() is not None else None  # the link's / sidebar's predictions
expect = Expectation(
    p95_ttft_s=(mine and mine.p95_ttft_s) or predicted.p95_ttft_s,
    p95_itl_s=(mine and mine.p95_itl_s) or predicted.p95_itl_s,
    prefix_cache_frac=(mine and mine.prefix_cache_frac) or predicted.prefix_cache_frac,
)
if saved is not None:
    st.caption(
        f"Open analysis: **{plain(saved.name)}** ({len(saved.telemetry)} telemetry attached). Its simulated p95 "
        "TTFT and ITL and its cached-prefix share are the predictions the rules compare with, unless "
        "entered above."
    )

tel = None
if use_prom and prom_url:
    try:
        tel = cache.prometheus_telemetry(prom_url, since_min, float(timeout_s))
    except PrometheusError as exc:
        st.error(f"Prometheus: {plain(exc, 400)}")
elif upload is not None:
    if upload.size > MAX_BYTES:
        st.error(
            f"{plain(upload.name)} is {upload.size / 1e6:,.1f} MB; the limit is {MAX_BYTES / 1e6:.0f} MB. Scrape one "
            "/metrics page, or export a shorter range."
        )
    else:
        try:
            tel = cache.telemetry(upload.getvalue(), upload.name)
        except TelemetryError as exc:
            st.error(f"That file cannot be used: {plain(exc, 400)}")

if tel is None and saved is not None and saved.telemetry and upload is None and not use_prom:
    last = saved.telemetry[-1]
    tel = cache.stored_telemetry(last["payload"])
    st.caption(
        f"Diagnosing the telemetry attached to {plain(saved.name)} on "
        f"{plain(last['created_at'][:16].replace('T', ' '))} UTC."
    )
elif (
    tel is not None
    and saved is not None
    and st.button(f"Attach this telemetry to {plain(saved.name)}", key="dx.attach")
):
    tid = analyses.attach_telemetry(saved.id, tel)
    st.success(f"Attached to {plain(saved.name)} as telemetry {tid}.")

# --- the predictions the rules compare with, each with its heuristic range ------------------------------------
PREDICTED = (("p95_ttft_s", "ttft_s.p95", "p95 TTFT"), ("p95_itl_s", "itl_s.p95", "p95 ITL"))
st.subheader("Predicted against measured")
rng = {}
if saved is not None:
    try:
        with st.spinner("Evaluating the analysis's prediction at each assumption bound…"):
            sim_rng = cache.simulation_ranges(saved.config, cache.sim_spec(saved.config)).ranges
        rng = {k: sim_rng[key] for k, key, _ in PREDICTED if key in sim_rng}
    except (ValueError, KeyError) as exc:  # a config the simulator cannot run (e.g. a training analysis)
        st.caption(f"No simulated prediction for {plain(saved.name)}: {plain(exc, 300)}")
typed = {k: bool(mine and getattr(mine, k)) for k, _, _ in PREDICTED}
rng = {k: r for k, r in rng.items() if not typed[k]}  # a number typed above has no range
got = cache.measured_p95(tel) if tel is not None else {}
cols = st.columns(len(PREDICTED))
rows, marks = [], []
for col, (k, _, label) in zip(cols, PREDICTED):
    want, r, m = getattr(expect, k), rng.get(k), got.get(k)
    if want is None:
        col.metric(f"Predicted {label}", "—")
        col.caption("no prediction: open a saved analysis or enter one above")
        continue
    render.metric_range(col, f"Predicted {label}", fmt_time(want), r, fmt_time)
    if typed[k]:
        col.caption("entered above: no range")
    if m is not None:
        side = cache.outside(r, m)
        col.metric(f"Measured {label}", fmt_time(m))
        if side:
            col.warning(
                f"The measurement lies **{side}** the predicted range: itself evidence that an assumption or the "
                "workload differs from the analysis (see the rules below, and Calibration)."
            )
        elif r is not None and r.basis != "none":
            col.caption("inside the predicted range")
        marks.append((label, m))
    if r is not None and r.basis != "none":
        rows.append((label, want, r.low, r.high, "heuristic range from the assumption bounds"))
if rows:
    c1, c2 = st.columns(2)
    c1.plotly_chart(
        cache.figure(charts.range_compare_chart, tuple(rows), "Predicted range and the measurement", "s", tuple(marks)),
        width="stretch",
    )
    with c2:
        render.tornado_picker(rng, {k: f"the predicted {label}" for k, _, label in PREDICTED}, "dx", "p95_ttft_s")
elif saved is None:
    st.caption(
        "Open a saved analysis to compare the telemetry with its predicted p95s and their heuristic ranges from "
        "the assumption bounds (a measurement outside the range is itself evidence)."
    )

if tel is None:
    render.say(
        "info",
        "No telemetry attached, so no diagnosis: RA-BIT does not guess. Upload a /metrics dump or a CSV, "
        "or query a Prometheus server.",
        where=head,
    )
    with st.expander(f"The {len(RULES)} rules and the metrics each needs"):
        render.table(
            pd.DataFrame(
                [{"rule": r.title, "fires when": r.threshold, "needs": ", ".join(m[0] for m in r.needs)} for r in RULES]
            ),
            "rules",
        )
    st.stop()

d = cache.diagnosis(tel, expect)
with head:
    st.caption(f"{plain(tel.name)}: {len(tel.samples):,} samples in {tel.num_series:,} series.")
    c1, c2, c3 = st.columns(3)
    for col, label, n in (
        (c1, "Rules fired", len(d.fired)),
        (c2, "Evaluated, quiet", len(d.quiet)),
        (c3, "Not evaluated", len(d.not_evaluated)),
    ):
        col.metric(label, n)
        share.card(label, str(n))
    if not d.fired:
        render.say("success", "No rule fired on this telemetry.")
    else:
        render.say("warning", "Fired: " + "; ".join(f.title for f in d.fired) + ".")
for f in d.fired:
    with st.container(border=True):
        st.markdown(f"**{f.title}** (`{f.rule}`)")
        st.write(plain(f.evidence, 1000))
        render.table(
            pd.DataFrame(
                [{"rank": i, "remedy": m.action, "config change": m.config_change} for i, m in enumerate(f.remedies, 1)]
            ),
            f"remedies {f.rule}",
        )
if d.not_evaluated:
    st.subheader("Not evaluated")
    for n in d.not_evaluated:
        st.markdown(f"- **{n.title}**: missing {', '.join(n.missing)}")
if d.quiet:
    titles = {r.id: r.title for r in RULES}
    st.caption("Quiet: " + "; ".join(titles[q] for q in d.quiet))
