"""``rabit assumptions``: every efficiency assumption with its unit, base, low, high, domain, what it moves and
its source (``--json``: a list of objects with those keys).

``--assume``, ``--bound`` and ``--config FILE`` as on every subcommand: each row then also has ``value``, the
value in force (the file's, at the bound, with each ``--assume``), the one every estimate would use.
"""

from __future__ import annotations

import argparse

from cli.common import add_json, add_range_args, assumptions_from_args, emit, parse_assume
from core.base import REGISTRY


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("assumptions", help="every efficiency assumption: unit, base, low, high, what it moves, source")
    add_json(p)
    add_range_args(p)
    p.set_defaults(func=run)


def rows() -> list[dict]:
    return [
        {
            "name": i.name,
            "label": i.label,
            "unit": i.unit,
            "base": i.base,
            "low": i.low,
            "high": i.high,
            "min": i.min_value,
            "max": i.max_value,
            "domain_reason": i.domain_reason,
            "moves": list(i.moves),
            "source": i.source,
        }
        for i in REGISTRY.values()
    ]


def run(args: argparse.Namespace) -> int:
    parse_assume(args.assume)
    data = rows()
    changed = bool(args.assume or args.config or args.bound != "base")
    if changed:
        now = assumptions_from_args(args)
        for r in data:
            r["value"] = getattr(now, r["name"])
    head = f"{'name':<26} {'unit':<8} {'base':>9} {'low':>9} {'high':>9}"
    lines = [head + (f" {'in force':>9}" if changed else "") + "  moves"]
    for r in data:
        lines.append(
            f"{r['name']:<26} {r['unit']:<8} {r['base']:>9.4g} {r['low']:>9.4g} {r['high']:>9.4g}"
            + (f" {r['value']:>9.4g}" if changed else "")
            + f"  {', '.join(r['moves'])}"
        )
        lines.append(f"    {r['label']}. Source: {r['source']}")
    lines.append(
        "low = the pessimistic bound, high = the optimistic one; set one with --assume NAME=VALUE on any "
        "command, or all with --bound low|high."
    )
    emit({"assumptions": data}, args.json, "\n".join(lines))
    return 0
