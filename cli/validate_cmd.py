"""``rabit validate``: predict every published measurement under ``validation/`` and summarise per family.

JSON keys: families [{family, cases, median_abs_error, bias, within_25pct, within_2x, meets_target}], cases
[{family, id, metric, measured, predicted, error, source, date}], target_median_abs_error.
"""

from __future__ import annotations

import argparse

from cli.common import add_json, die, emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements (validation/)")
    p.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    p.add_argument("--cases", action="store_true", help="also print every case")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.validation import TARGET_MEDIAN_ABS_ERROR
    from core.validation import run as validate

    r = validate(tuple(args.family))
    if not r.cases:
        die(f"rabit validate: error: argument --family: no cases in {', '.join(args.family)}")
    payload = {
        "target_median_abs_error": TARGET_MEDIAN_ABS_ERROR,
        "families": [f.model_dump() for f in r.families],
        "cases": [{**c.model_dump(), "error": c.error} for c in r.cases],
    }
    lines = [f"{'family':<26} {'cases':>5} {'median |err|':>12} {'bias':>7} {'within 25%':>10} {'within 2x':>9}"]
    for f in r.families:
        lines.append(
            f"{f.family:<26} {f.cases:>5} {f.median_abs_error:>12.1%} {f.bias:>+7.1%} "
            f"{f.within_25pct:>10.0%} {f.within_2x:>9.0%}"
            + ("" if f.meets_target else f"  (misses the {TARGET_MEDIAN_ABS_ERROR:.0%} target)")
        )
    if args.cases:
        lines.append("")
        for c in r.cases:
            lines.append(
                f"{c.family:<26} {c.id:<44} measured {c.measured:<10.4g} predicted {c.predicted:<10.4g} {c.error:+.0%}"
            )
    emit(payload, args.json, "\n".join(lines))
    return 0
