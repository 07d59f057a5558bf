"""Two analyses side by side by their own numbers (the Compare page): two fleet plans by their cost, GPUs, power and
each workload's pick; two serving views by the p95 latencies their simulations give under the configured load;
and the inputs that differ, one readable row per field (a fleet's workloads and scenarios by name).

A fleet plan's numbers are those saved with it (:func:`core.decision.plan_headline`); a serving view's are its
simulation's summary (:class:`core.serving.Summary`). Each number is a :class:`Comparison` whose sides are point
values (``basis="none"``: no range was computed for them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.base import Range, WorkBudget, sig
from core.config import RabitConfig, differences
from core.decision.uncertainty import Comparison, compare_headlines
from core.serving import sim_spec, simulate_deployment

__all__ = [
    "KINDS",
    "AnalysisComparison",
    "compare_analyses",
    "FLEET_NUMBERS",
    "LOAD_NUMBERS",
    "fleet_comparisons",
    "fleet_pick_rows",
    "input_differences",
    "is_fleet_plan",
    "load_comparisons",
]

#: A saved fleet plan's numbers: (results key, label, unit) with unit "usd_per_hour", "count" or "kw".
FLEET_NUMBERS = (
    ("fleet.nominal_cost_per_hour", "Nominal plan", "usd_per_hour"),
    ("fleet.robust_cost_per_hour", "Robust plan", "usd_per_hour"),
    ("fleet.robustness_cost_per_hour", "Robustness costs", "usd_per_hour"),
    ("fleet.nominal_gpus", "GPUs (nominal plan)", "count"),
    ("fleet.robust_gpus", "GPUs (robust plan)", "count"),
    ("fleet.power_kw", "Power (nominal)", "kw"),
)
#: A serving view's numbers under its load: (summary field, label), each the p95 [s].
LOAD_NUMBERS = (("ttft_s", "p95 TTFT"), ("itl_s", "p95 ITL"), ("e2e_s", "p95 end-to-end"))


def _point(v: Any) -> Range | None:
    """A number as a range of no width (None for a missing or non-finite one)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return Range(value=float(v), low=float(v), high=float(v), basis="none")


def is_fleet_plan(results: Mapping[str, Any] | None) -> bool:
    """Whether an analysis's saved results hold a fleet plan."""
    return bool(results) and "fleet.nominal_cost_per_hour" in (results or {})


def fleet_comparisons(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[Comparison, ...]:
    """Two saved fleet plans' numbers, key by key (:data:`FLEET_NUMBERS`); a side is None where its plan was saved
    without that number."""
    return tuple(Comparison(k, _point(a.get(k)), _point(b.get(k))) for k, _, _ in FLEET_NUMBERS)


def fleet_pick_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """Each workload's nominal and robust pick in both plans (workloads of either, A's first); "-" where a plan
    has no pick for it."""
    pa, pb = a.get("fleet.picks") or {}, b.get("fleet.picks") or {}

    def pick(p: Mapping[str, Any], w: str, which: str) -> str:
        return str((p.get(w) or {}).get(which) or "-")

    return tuple(
        {
            "workload": w,
            "A nominal": pick(pa, w, "nominal"),
            "B nominal": pick(pb, w, "nominal"),
            "A robust": pick(pa, w, "robust"),
            "B robust": pick(pb, w, "robust"),
            "same picks": "yes"
            if (pick(pa, w, "nominal"), pick(pa, w, "robust")) == (pick(pb, w, "nominal"), pick(pb, w, "robust"))
            else "no",
        }
        for w in dict.fromkeys([*pa, *pb])
    )


def load_comparisons(a: Any, b: Any) -> tuple[Comparison, ...]:
    """Two simulations' p95 latencies (:data:`LOAD_NUMBERS`, from each :class:`core.serving.Summary`); a side is
    None where its run withheld the latency (saturated, or too few completed requests)."""

    def p95(s: Any, key: str) -> Range | None:
        return None if s.latency_withheld else _point(getattr(s, key).p95)

    return tuple(Comparison(k, p95(a, k), p95(b, k)) for k, _ in LOAD_NUMBERS)


def _text(v: Any) -> str:
    """One input value as a person reads it: lists joined, None as "none", floats to six digits, long text cut."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return sig(v, 6)
    if isinstance(v, (list, tuple)):
        return ", ".join(_text(x) for x in v) if v else "none"
    t = str(v)
    return t if len(t) <= 120 else t[:119] + "…"


def _flat(prefix: str, v: Any, out: dict[str, Any]) -> None:
    """``v`` flattened under ``prefix``: a dict by its keys, a list of named dicts by their names, scalars and other
    lists as they are."""
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(f"{prefix}.{k}", x, out)
    elif isinstance(v, list) and v and all(isinstance(x, dict) and "name" in x for x in v):
        for x in v:
            _flat(f"{prefix}[{x['name']}]", {k: y for k, y in x.items() if k != "name"}, out)
    else:
        out[prefix] = v


def input_differences(a: RabitConfig, b: RabitConfig) -> tuple[tuple[str, str, str], ...]:
    """The inputs in which two configs differ, one (field, A, B) row each, as text: a nested input (a fleet) field
    by field, its workloads and scenarios by name (``fleet.workloads[chat].rate_per_s``), instead of one dict per
    side."""
    rows: list[tuple[str, str, str]] = []
    for k, va, vb in differences(a, b):
        if isinstance(va, dict) or isinstance(vb, dict):
            fa: dict[str, Any] = {}
            fb: dict[str, Any] = {}
            _flat(k, va or {}, fa)
            _flat(k, vb or {}, fb)
            rows += [(f, _text(fa.get(f)), _text(fb.get(f))) for f in dict.fromkeys([*fa, *fb])]
        else:
            rows.append((k, _text(va), _text(vb)))
    return tuple(r for r in rows if r[1] != r[2])  # an empty list and none read the same


@dataclass(frozen=True)
class AnalysisComparison:
    """Two analyses compared by their kind's numbers: ``numbers`` as (key, label, unit, comparison) with unit
    "usd_per_hour", "count", "kw", "s" or the key of a configuration headline; ``context`` what each side's numbers
    were computed at; ``picks`` a fleet's workloads; ``differences`` (field, A, B) as text."""

    kind: str
    numbers: tuple[tuple[str, str, str, Comparison], ...]
    context: tuple[str, ...]
    picks: tuple[dict[str, str], ...]
    differences: tuple[tuple[str, str, str], ...]


#: The kinds :func:`compare_analyses` knows.
KINDS = ("fleet plans", "serving views under load", "training runs")


def compare_analyses(
    kind: str,
    a: RabitConfig,
    b: RabitConfig,
    results_a: Mapping[str, Any] | None = None,
    results_b: Mapping[str, Any] | None = None,
    budget: WorkBudget | None = None,
) -> AnalysisComparison:
    """Two analyses by the numbers of ``kind`` (:data:`KINDS`): fleet plans by their saved plans' cost, GPUs and
    power and each workload's picks; serving views by the p95s of each one's deployment simulated at its own
    configured load (:func:`core.serving.simulate_deployment`); training runs by their headline numbers with ranges
    (:func:`core.decision.compare_headlines`). Raises ``ValueError`` for an unknown kind or a config the catalog no
    longer accepts."""
    diffs = input_differences(a, b)
    if kind == "fleet plans":
        ra, rb = results_a or {}, results_b or {}
        nums = tuple((k, lab, unit, c) for (k, lab, unit), c in zip(FLEET_NUMBERS, fleet_comparisons(ra, rb)))
        return AnalysisComparison(kind, nums, (), fleet_pick_rows(ra, rb), diffs)
    if kind == "serving views under load":
        runs = [simulate_deployment(c.with_(phase="serve"), sim_spec(c), budget=budget) for c in (a, b)]
        comps = load_comparisons(runs[0].summary, runs[1].summary)
        nums = tuple((k, lab, "s", c) for (k, lab), c in zip(LOAD_NUMBERS, comps))
        context = tuple(
            f"{tag}: {c.gpus:,} x {c.gpu}, {sig(r.result.spec.rate_per_s or 0.0)} requests/s of "
            f"{c.input_tokens:,} prompt + {c.output_tokens:,} output tokens, {r.result.spec.num_requests or 0:,} "
            f"requests simulated: {r.summary.saturation_verdict}"
            for tag, c, r in (("A", a, runs[0]), ("B", b, runs[1]))
        )
        return AnalysisComparison(kind, nums, context, (), diffs)
    if kind == "training runs":
        comps = compare_headlines(a.with_(phase="train"), b.with_(phase="train"))
        return AnalysisComparison(kind, tuple((c.key, c.key, c.key, c) for c in comps), (), (), diffs)
    raise ValueError(f"no comparison of {kind!r}: one of {', '.join(KINDS)}")
