"""Fleet: the cheapest fleet for many serving workloads, the robust one that meets every scenario, and power."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, charts, exports, render, state
from dashboard.api import EXAMPLE_FLEET, FLEET_TABLE_COLUMNS, BudgetExceeded, FleetError, StoreError, fmt_value
from dashboard.text import plain

st.title("Fleet")
st.caption(
    "Many workloads at once: each one's cheapest configuration on each allowed GPU kind in each scenario, the "
    "nominal plan, the robust plan that meets every scenario and what robustness costs, spares for failed nodes, "
    "and the power each plan draws. The efficiency assumptions, engine and fabric come from the sidebar; the fleet "
    "lives here, in the link and in a YAML or JSON file (`rabit fleet plan FILE` plans the same file)."
)
cfg = state.require_config()
fleet = cfg.fleet or EXAMPLE_FLEET
tag = f"{hash(fleet) & 0xFFFFFFFF:08x}"  # the plan and the description follow the fleet
# The editors keep one key while their own edits change the fleet (a new key would drop a cell typed during the
# rerun); they restart from the fleet only when it changes from elsewhere (a file, the description, an analysis)
# or after the page was left (Streamlit forgets an editor that was not drawn).
source, ver = st.session_state.get("fleet.source", (None, 0))
if (
    source != fleet and st.session_state.get("fleet.edited") != fleet
) or f"fleet.workloads.{ver}" not in st.session_state:
    source, ver = fleet, ver + 1
    st.session_state["fleet.source"] = (source, ver)


def use(new) -> None:
    if new != fleet:
        state.set_fleet(new)
        st.rerun()


with st.expander("The fleet as a file (YAML or JSON)", expanded=False):
    up = st.file_uploader("Load a fleet file", type=["yaml", "yml", "json"], key="fleet.upload")
    text = st.text_area("Fleet description", cache.fleet_file(fleet, "yaml"), height=260, key=f"fleet.text.{tag}")
    c1, c2, c3 = st.columns(3)
    apply_text = c1.button("Use this description", key="fleet.apply")
    c2.download_button("Download (YAML)", cache.fleet_file(fleet, "yaml"), "fleet.yaml", "application/yaml")
    c3.download_button("Download (JSON)", cache.fleet_file(fleet, "json"), "fleet.json", "application/json")
    try:
        if up is not None and st.session_state.get("fleet.loaded") != up.file_id:
            st.session_state["fleet.loaded"] = up.file_id
            use(cache.fleet_from_text(up.getvalue(), up.name))
        if apply_text:
            use(cache.fleet_from_text(text.encode(), "the description"))
    except FleetError as exc:
        st.error(plain(exc, 600))

tables = cache.fleet_tables(source)
edited = []
for table, label in (
    ("workloads", "Workloads (the plan is sized for rate x peak factor; a p95 target of 0 is none)"),
    ("scenarios", "Scenarios (factors on rate and lengths; GPU kinds withdrawn, or capped as kind=count; prices)"),
    ("availability", "Availability: each GPU kind's failure rate per GPU-hour and repair time, for spare replicas"),
    ("sites", "Sites: PUE, power budget [kW] and the GPU kinds hosted there (none named: every other kind)"),
):
    st.markdown(f"**{label}**")
    df = pd.DataFrame(tables[table], columns=list(FLEET_TABLE_COLUMNS[table]))
    rows = st.data_editor(df, num_rows="dynamic", width="stretch", key=f"fleet.{table}.{ver}")
    edited.append(f'"{table}": {rows.to_json(orient="records")}')
c1, c2, c3, c4, c5 = st.columns(5)
kinds = c1.multiselect("GPU kinds (empty: all)", cache.gpu_slugs(), list(source.constraints.gpus), key=f"fleet.k.{ver}")
counts = c2.text_input(
    "GPUs available (kind=count, ...)",
    ", ".join(f"{g}={n}" for g, n in source.constraints.max_gpus),
    key=f"fleet.n.{ver}",
)
usd = c3.number_input(
    "Budget [$/h] (0: none)",
    **state.bounds("targets.max_usd_per_hour"),
    value=source.constraints.max_usd_per_hour or 0.0,
    key=f"fleet.b.{ver}",
)
s = source.settings
reqs = c4.number_input(
    "Requests per simulation",
    **state.bounds("targets.requests_per_simulation"),
    value=s.requests_per_simulation,
    key=f"fleet.r.{ver}",
)
sims = c5.number_input(
    "Simulations per search", **state.bounds("targets.max_simulations"), value=s.max_simulations, key=f"fleet.s.{ver}"
)
settings = s.model_copy(update={"requests_per_simulation": int(reqs), "max_simulations": int(sims)})
incomplete = ""
try:
    new = cache.fleet_from_tables("{" + ",".join(edited) + "}", tuple(kinds), counts, usd or None, settings, fleet)
    st.session_state["fleet.edited"] = new
    use(new)
except FleetError as exc:  # a row still being filled in: said here, the Plan button stays
    incomplete = str(exc)
    st.error(plain(f"Not planned yet: {incomplete}", 600))
render.pool_vendor_caption(kinds)

pressed = st.button("Plan the fleet", type="primary", key="fleet.plan")
if incomplete:
    if pressed:
        st.error(plain(f"Complete or delete that row first: {incomplete}", 600))
    st.stop()
if not pressed and st.session_state.get("fleet.planned") != tag:
    st.info(f"{len(fleet.workloads)} workloads, {len(fleet.scenarios)} scenarios: press **Plan the fleet**.")
    st.stop()
st.session_state["fleet.planned"] = tag
bar = st.progress(0.0, text="Planning ...")
try:
    plan = cache.fleet_plan(
        fleet, cfg, lambda d, t, label: bar.progress(min(1.0, d / max(t, 1)), text=f"Unit {d} of {t}: {label}")
    )
except (BudgetExceeded, RuntimeError) as exc:
    bar.empty()
    st.error(plain(exc, 600))
    st.stop()
bar.empty()
exports.fleet_plan(plan, fleet)  # the plan's numbers, tables and inputs for the summary and the tables' zip

energy = plan.nominal.energy_kwh_per_million_tokens
cards = (
    ("Nominal plan", f"${plan.nominal.cost_per_hour:,.2f}/h", None),
    ("Robust plan", f"${plan.robust.cost_per_hour:,.2f}/h", "meets every scenario"),
    ("Robustness costs", f"${plan.robustness_cost_per_hour:,.2f}/h", None),
    ("GPUs (nominal)", f"{plan.nominal.gpus:,}", f"{plan.nominal.spare_gpus:,} of them spares, pooled per kind"),
    ("Power (nominal)", fmt_value(plan.nominal.power_w, "W"), "at the peak load, with the sites' PUE"),
    (
        "Energy / M tokens",
        fmt_value(energy, "kWh") if energy is not None else "-",
        "per million output tokens, at the mean load",
    ),
)
for col, (label, value, why) in zip(render.grid(len(cards), [c[0] for c in cards], [c[1] for c in cards]), cards):
    col.metric(label, value, help=why)
for name, why in plan.infeasible:
    st.error(f"No allowed GPU kind can serve {plain(name)}: {plain(why, 600)}")
for name, why in (*plan.nominal.left_out, *plan.robust.left_out):
    st.warning(f"{plain(name)} is left out: {plain(why, 400)}")
for name, why in plan.robust_infeasible:
    st.warning(f"{plain(name)} has no robust configuration: {plain(why, 400)}")
st.plotly_chart(cache.figure(charts.fleet_cost_bars, cache.fleet_rows(plan)), width="stretch")
for which in ("nominal", "robust"):
    st.subheader(f"{which.capitalize()} plan")
    st.dataframe(pd.DataFrame(cache.fleet_rows(plan, which)), hide_index=True, width="stretch")
st.subheader("By GPU kind (spares pooled where workloads share a kind)")
st.dataframe(pd.DataFrame(cache.fleet_totals(plan)), hide_index=True, width="stretch")
st.subheader("What robustness costs, by workload")
for e in plan.expensive:
    st.markdown(f"- **{plain(e.workload)}**: +${e.extra_per_hour:,.2f}/h ({plain(e.why, 300)})")
with st.expander("Each scenario's own cheapest plan"):
    for name, a in plan.scenarios:
        st.markdown(f"**{plain(name)}**: ${a.cost_per_hour:,.2f}/h")
        st.dataframe(pd.DataFrame(cache.fleet_rows(plan, name)), hide_index=True, width="stretch")

c1, c2, c3 = st.columns(3)
c1.download_button("Export the plan (CSV)", cache.fleet_csv(plan), "fleet-plan.csv", "text/csv", key="fleet.csv")
name = c2.text_input("Save as an analysis named", key="fleet.name")
if c3.button("Save", key="fleet.save", disabled=not name.strip()):
    results = {**analyses.headline(cfg.with_(fleet=fleet)), **cache.fleet_headline(plan)}
    try:
        aid = analyses.save_new(name, cfg.with_(fleet=fleet), note="", saved_by="", results=results)
        st.success(f"Saved: {plain(name)} · link `?analysis={aid}`")
    except StoreError as exc:
        st.error(plain(exc, 400))
