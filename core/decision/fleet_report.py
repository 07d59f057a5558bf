"""A fleet plan as rows: the Fleet page's tables, the exported CSV, and the headline a saved analysis keeps."""

from __future__ import annotations

import csv
import io
from typing import Any

from core.base import KW
from core.decision.fleet import FleetPlan
from core.decision.fleet_assign import Assignment, FleetOption

#: The columns of the exported table, in order.
PLAN_COLUMNS = (
    "plan",
    "workload",
    "model",
    "gpu",
    "mode",
    "configuration",
    "replicas",
    "spare_replicas",
    "gpus",
    "cost_per_hour",
    "cost_per_hour_low",
    "cost_per_hour_high",
    "p95_ttft_s",
    "p95_itl_s",
    "power_kw",
    "energy_kwh_per_million_tokens",
    "site",
    "sized_for",
    "adapters",
)


def _row(plan: FleetPlan, name: str, o: FleetOption, robust: bool) -> dict[str, Any]:
    w = plan.fleet.workload(o.workload)
    cost = plan.ranges_of(o.workload, robust).get("cost_per_hour") if name in ("nominal", "robust") else None
    return {
        "plan": name,
        "workload": o.workload,
        "model": w.model_label,
        "gpu": " + ".join(o.kinds),
        "mode": o.mode,
        "configuration": o.label,
        "replicas": o.replicas,
        "spare_replicas": o.spare_replicas,
        "gpus": o.gpus,
        "cost_per_hour": o.cost_per_hour,
        "cost_per_hour_low": cost.low if cost is not None else None,
        "cost_per_hour_high": cost.high if cost is not None else None,
        "p95_ttft_s": o.pick.p95_ttft_s,
        "p95_itl_s": o.pick.p95_itl_s,
        "power_kw": o.power_w / KW,
        "energy_kwh_per_million_tokens": o.energy_kwh_per_million_tokens,
        "site": o.site,
        "sized_for": o.case,
        "adapters": o.adapters,
    }


def plans_of(plan: FleetPlan) -> tuple[tuple[str, Assignment], ...]:
    """Every plan by name: nominal, robust, then each scenario's own."""
    return (("nominal", plan.nominal), ("robust", plan.robust), *plan.scenarios)


def plan_rows(plan: FleetPlan, which: str | None = None) -> tuple[dict[str, Any], ...]:
    """One row per workload and plan (:data:`PLAN_COLUMNS`); ``which``: one plan only."""
    return tuple(
        _row(plan, name, o, name == "robust")
        for name, a in plans_of(plan)
        if which is None or name == which
        for o in a.picks
    )


def totals_rows(plan: FleetPlan) -> tuple[dict[str, Any], ...]:
    """Each plan's GPUs, spares (pooled), cost and power by GPU kind."""
    return tuple(
        {
            "plan": name,
            "gpu": t.gpu,
            "workloads": ", ".join(t.workloads),
            "gpus": t.gpus,
            "spare_gpus": t.spare_gpus,
            "spare_gpus_unpooled": t.spare_gpus_unpooled,
            "cost_per_hour": t.cost_per_hour,
            "power_kw": t.power_w / KW,
        }
        for name, a in plans_of(plan)
        for t in a.totals
    )


def plan_csv(plan: FleetPlan) -> str:
    """Every plan's rows as CSV (the page's export)."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=PLAN_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in plan_rows(plan):
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return out.getvalue()


def plan_headline(plan: FleetPlan) -> dict[str, Any]:
    """What a saved analysis keeps of a plan: each plan's cost, GPUs and power, what robustness costs, each workload's
    nominal and robust pick, and the workloads left unserved."""
    return {
        "fleet.nominal_cost_per_hour": plan.nominal.cost_per_hour,
        "fleet.robust_cost_per_hour": plan.robust.cost_per_hour,
        "fleet.robustness_cost_per_hour": plan.robustness_cost_per_hour,
        # GPUs with each pick's own spares (what the costs above pay for)
        "fleet.nominal_gpus": sum(o.gpus for o in plan.nominal.picks),
        "fleet.robust_gpus": sum(o.gpus for o in plan.robust.picks),
        "fleet.power_kw": plan.nominal.power_w / KW,
        "fleet.picks": {
            o.workload: {
                "nominal": o.label,
                "robust": r.label if (r := plan.robust.pick_of(o.workload)) else None,
            }
            for o in plan.nominal.picks
        },
        "fleet.infeasible": [n for n, _ in plan.infeasible],
        "fleet.left_out": [n for n, _ in plan.nominal.left_out],
    }
