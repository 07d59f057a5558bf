"""``rabit validate``: predict every published measurement under ``validation/`` and summarise per family.

JSON keys: families [{family, cases, median_abs_error, bias, within_25pct, within_2x, meets_target}], cases
[{family, id, metric, measured, predicted, error, source, date}], target_median_abs_error; with cases of the
replayed vLLM runs, ``lifecycle``: {runs: {<row id>: {run, stage, model, gpu, tp, rate_per_s, metrics: {<metric>:
{measured, predicted, error}}}}, median_abs_error: {<metric>: ...}, median_abs_error_by_stage: {stage_<i>:
{<metric>: ...}}, targets: {<metric>: {median_abs_error_max, meets}}} (core.decision.validation_lifecycle); ``ranges`` maps
``cases.<id>.predicted`` to the heuristic range of that prediction ({"low", "high"}), with ``range_basis``.

``--assume NAME=VALUE``, ``--bound low|base|high`` and ``--config FILE`` (its assumptions; each case keeps its
own model, GPU and sizes) set the assumptions every case is predicted with: ``--bound low`` predicts every case
at the pessimistic bound.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import add_json, add_range_args, assumptions_from_args, die, emit, parse_assume, with_ranges


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements (validation/)")
    p.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    p.add_argument("--cases", action="store_true", help="also print every case, with its range")
    add_json(p)
    add_range_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.base import fmt_num
    from core.decision import LIFECYCLE_FAMILY, TARGET_MEDIAN_ABS_ERROR, lifecycle_breakdown
    from core.decision import run as validate

    parse_assume(args.assume)
    r = validate(tuple(args.family), assumptions=assumptions_from_args(args), ranges=True)
    if not r.cases:
        die(f"rabit validate: error: argument --family: no cases in {', '.join(args.family)}")
    payload: dict[str, Any] = {
        "target_median_abs_error": TARGET_MEDIAN_ABS_ERROR,
        "families": [f.model_dump() for f in r.families],
        "cases": [{**c.model_dump(), "error": c.error} for c in r.cases],
    }
    life = lifecycle_breakdown(r.cases) if any(c.family == LIFECYCLE_FAMILY for c in r.cases) else None
    if life is not None:
        payload["lifecycle"] = life
    with_ranges(payload, {f"cases.{k}.predicted": v for k, v in r.ranges.items()})
    lines = []
    if args.bound != "base" or args.assume or args.config:
        what = {"low": "the pessimistic bound", "high": "the optimistic bound"}.get(args.bound, "base")
        lines.append(
            f"predicted with every assumption at {what}"
            + (f", {', '.join(args.assume)}" if args.assume else "")
            + (f", assumptions of {args.config}" if args.config else "")
        )
    w = max([26] + [len(f.family) for f in r.families])
    lines.append(f"{'family':<{w}} {'cases':>5} {'median |err|':>12} {'bias':>7} {'within 25%':>10} {'within 2x':>9}")
    for f in r.families:
        lines.append(
            f"{f.family:<{w}} {f.cases:>5} {f.median_abs_error:>12.1%} {f.bias:>+7.1%} "
            f"{f.within_25pct:>10.0%} {f.within_2x:>9.0%}"
            + ("" if f.meets_target else f"  (misses the {TARGET_MEDIAN_ABS_ERROR:.0%} target)")
        )
    if life is not None:
        lines.append("")
        lines.append(f"{LIFECYCLE_FAMILY}: median |err| per metric and stage (stage 0: each run's lower rate)")
        for stage, medians in life["median_abs_error_by_stage"].items():
            lines.append(f"  {stage}: " + ", ".join(f"{m} {v:.1%}" for m, v in medians.items()))
        for m, t in life["targets"].items():
            lines.append(
                f"  target {m} <= {t['median_abs_error_max']:.0%} at every stage: "
                + ("met" if t["meets"] else "missed")
            )
    if args.cases:
        lines.append("")
        for c in r.cases:
            rg = r.ranges.get(c.id)
            inside = rg is not None and rg.basis != "none" and rg.low <= c.measured <= rg.high
            lines.append(
                f"{c.family:<26} {c.id:<44} measured {c.measured:<10.4g} predicted {c.predicted:<10.4g} {c.error:+.0%}"
                + (
                    f"  range {fmt_num(rg.low)} ... {fmt_num(rg.high)}" + (" (measured inside)" if inside else "")
                    if rg is not None and rg.basis != "none"
                    else ""
                )
            )
    lines.append("ranges: " + payload["range_basis"])
    emit(payload, args.json, "\n".join(lines))
    return 0
