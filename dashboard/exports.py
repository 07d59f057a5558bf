"""What a page's exports hold of results the page draws itself: a fleet plan's headline numbers, its tables and
the fleet it was planned for, recorded for the page's one-page summary and its tables' zip
(:mod:`dashboard.share`), formatted as the page shows them."""

from __future__ import annotations

import pandas as pd

from core.base import fmt_latency, fmt_num, fmt_value, sig
from dashboard import cache, share


def fleet_plan(plan, fleet) -> None:
    """Record the Fleet page's plan: each plan's cost, GPUs, power and energy as cards; the nominal, robust and
    per-kind tables and each scenario's own plan as tables; the fleet's workloads, scenarios and limits as the
    page's inputs."""
    nominal, robust = plan.nominal, plan.robust
    energy = nominal.energy_kwh_per_million_tokens
    head = cache.fleet_headline(plan)
    for label, value in (
        ("Nominal plan", f"${nominal.cost_per_hour:,.2f}/h"),
        ("Robust plan", f"${robust.cost_per_hour:,.2f}/h"),
        ("Robustness costs", f"${plan.robustness_cost_per_hour:,.2f}/h"),
        ("GPUs (nominal plan, spares included)", f"{head['fleet.nominal_gpus']:,}"),
        ("GPUs (robust plan, spares included)", f"{head['fleet.robust_gpus']:,}"),
        ("Power (nominal)", fmt_value(nominal.power_w, "W")),
        ("Energy", f"{fmt_num(energy)} kWh / M tokens" if energy is not None else "-"),
    ):
        share.card(label, value)
    for name, why in plan.infeasible:
        share.note("error", f"No allowed GPU kind can serve {name}: {why}")
    for which in ("nominal", "robust"):
        share.table(f"{which} plan", pd.DataFrame(cache.fleet_rows(plan, which)))
    share.table("by GPU kind", pd.DataFrame(cache.fleet_totals(plan)))
    for name, _ in plan.scenarios:
        share.table(f"scenario {name}", pd.DataFrame(cache.fleet_rows(plan, name)))
    tables = cache.fleet_tables(fleet)
    share.table("workloads (input)", pd.DataFrame(tables["workloads"]))
    for w in fleet.workloads:
        targets = "; ".join(
            f"p95 {n} ≤ {fmt_latency(v)}"
            for n, v in (("TTFT", w.p95_ttft_s), ("ITL", w.p95_itl_s), ("end-to-end", w.p95_e2e_s))
            if v
        )
        share.inputs(
            f"Workload {w.name}",
            f"{w.model or 'custom model'} at {sig(w.rate_per_s)} requests/s (peak x{sig(w.peak_factor)}), "
            f"{w.input_tokens:,} prompt + {w.output_tokens:,} output tokens"
            + (f", {w.adapters:,} adapters" if w.adapters else "")
            + (f"; {targets}" if targets else ""),
        )
    if fleet.scenarios:
        share.inputs("Scenarios", ", ".join(s.name for s in fleet.scenarios))
    c = fleet.constraints
    limits = [f"GPU kinds {', '.join(c.gpus)}" if c.gpus else "every GPU kind"]
    limits += [f"{g} at most {n:,}" for g, n in c.max_gpus]
    if c.max_usd_per_hour:
        limits.append(f"budget ${c.max_usd_per_hour:,.2f}/h")
    share.inputs("Limits", "; ".join(limits))
