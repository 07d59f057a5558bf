"""``rabit fleet``: the cheapest fleet for many serving workloads and the robust one that meets every scenario.

``rabit fleet plan FILE [--scenarios all|NAME,...] [--ray ADDRESS] [--workers N] --json``: JSON keys (contract,
issue 24) ``workloads`` (the nominal plan's per-workload picks, each the recommendation's fields with its
``cost_per_hour`` and ``ranges``), ``totals`` (GPUs by kind, cost per hour), ``robust`` and ``nominal`` (each
``workloads``, ``totals``, ``cost_per_hour``, ``power_kw``), ``robustness_cost_per_hour``, ``power_kw``,
``infeasible`` (the workloads no allowed GPU kind can serve, with why); plus ``scenarios`` (each scenario's own
cheapest plan), ``expensive_to_make_robust``, ``left_out`` (workloads the constraints could not hold),
``power_kw_by_site``, ``energy_kwh_per_million_tokens`` and ``units``. The JSON is the same whichever executor
runs the plan. Progress goes to stderr, one line per finished unit (``--quiet``: none).

``rabit fleet validate FILE`` checks a file without running it; ``rabit fleet example`` prints the smallest valid
file. A bad file exits 2 with one line naming the workload (or scenario, site) and the field.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from cli.common import (
    add_json,
    add_range_args,
    add_ray_arg,
    assumptions_from_args,
    config_file,
    die,
    emit,
    executor_from_args,
    read_file,
)
from core.base import KW, MAX_CONFIG_BYTES, PayloadError, parse_json
from core.catalog import from_hf_config
from core.config import DEFAULT, EXAMPLE_YAML, Fleet, FleetError, RabitConfig, parse_fleet


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="plan a fleet of serving workloads across scenarios (a YAML or JSON file)")
    fs = p.add_subparsers(dest="fleet_command", required=True, parser_class=type(p))
    plan = fs.add_parser("plan", help="the nominal and the robust plan, what robustness costs, power")
    plan.add_argument("file", metavar="FILE", help="the fleet description (YAML or JSON; rabit fleet example)")
    plan.add_argument(
        "--scenarios",
        default="all",
        metavar="all|NAME,...",
        help="the scenarios the robust plan must meet (default: all of the file's)",
    )
    add_ray_arg(plan)
    plan.add_argument("--workers", type=int, help="local worker processes (default: this machine's cores)")
    plan.add_argument("--quiet", action="store_true", help="no progress on stderr")
    plan.add_argument("--csv", metavar="PATH", help="also write every plan's rows as a CSV table to PATH")
    add_range_args(plan)
    add_json(plan)
    plan.set_defaults(func=run_plan)
    val = fs.add_parser("validate", help="check a fleet file without running it")
    val.add_argument("file", metavar="FILE")
    add_json(val)
    val.set_defaults(func=run_validate)
    ex = fs.add_parser("example", help="print the smallest valid fleet file")
    ex.set_defaults(func=lambda args: print(EXAMPLE_YAML, end="") or 0)


def _with_models(fleet: Fleet, where: Path) -> Fleet:
    """Each workload's ``config_json`` read (relative to the file) into its model (exit 2 naming the workload)."""
    out = []
    for i, w in enumerate(fleet.workloads):
        if w.config_json is None or w.custom_model is not None:
            out.append(w)
            continue
        path = (where / w.config_json) if not Path(w.config_json).is_absolute() else Path(w.config_json)
        what = f"FILE: workload {w.name!r} (workloads[{i}]): field config_json"
        try:
            arch = from_hf_config(
                parse_json(read_file(str(path), what, MAX_CONFIG_BYTES), what=str(path)), slug=path.stem.lower()
            )
        except (PayloadError, ValueError) as exc:
            die(f"rabit fleet: error: argument {what}: {exc}")
        out.append(w.model_copy(update={"custom_model": arch}))
    return fleet.model_copy(update={"workloads": tuple(out)})


def read_fleet(path: str) -> Fleet:
    """The fleet of ``FILE`` (exit 2 with one line naming the entry and the field)."""
    text = read_file(path, "FILE", MAX_CONFIG_BYTES)
    try:
        fleet = parse_fleet(text, name=Path(path).name)
    except FleetError as exc:
        die(f"rabit fleet: error: argument FILE: {exc}")
    return _with_models(fleet, Path(path).resolve().parent)


def _scenarios(text: str) -> tuple[str, ...] | None:
    t = text.strip()
    if t.lower() == "all":
        return None
    names = tuple(x.strip() for x in t.split(",") if x.strip())
    if not names:
        die("rabit fleet: error: argument --scenarios: give all or a comma-separated list of scenario names")
    return names


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def pick_json(o: Any, ranges: dict[str, Any], fleet: Fleet) -> dict[str, Any]:
    """One workload's pick: the recommendation's fields, the fleet's replicas, spares, cost, power and ranges."""
    w = fleet.workload(o.workload)
    out: dict[str, Any] = {"name": o.workload, "model": w.model_label, "adapters": o.adapters}
    out.update(o.pick.model_dump())
    out.update(
        {
            "label": o.label,
            "replicas": o.replicas,
            "spare_replicas": o.spare_replicas,
            "gpus": o.gpus,
            "gpus_by_kind": {k: o.gpus_of(k) for k in o.kinds},
            "serving_cost_per_hour": o.pick.cost_per_hour,
            "cost_per_hour": o.cost_per_hour,
            "cost_per_million_tokens": o.cost_per_million_tokens,
            "usd_per_gpu_hour": o.usd_per_gpu_hour,
            "sized_for": o.case,
            "site": o.site,
            "utilisation": o.utilisation,
            "power_kw": o.power_w / KW,
            "energy_kwh_per_million_tokens": o.energy_kwh_per_million_tokens,
            "ranges": {k: {"low": _finite(r.low), "high": _finite(r.high)} for k, r in ranges.items()},
        }
    )
    # a disaggregated option's pools with the fleet's instance counts and spares (a robust option's are the most
    # any scenario needs, not its pick's)
    for q in o.pools:
        if isinstance(out.get(q.role), dict):
            out[q.role] = {**out[q.role], "instances": q.instances, "spares": q.spares}
    return out


def totals_json(a: Any) -> dict[str, Any]:
    return {
        "gpus": {t.gpu: t.gpus for t in a.totals},
        "serving_gpus": {t.gpu: t.serving_gpus for t in a.totals},
        "spare_gpus": {t.gpu: t.spare_gpus for t in a.totals},
        "cost_per_hour_by_gpu": {t.gpu: t.cost_per_hour for t in a.totals},
        "cost_per_hour": a.cost_per_hour,
        "cost_per_hour_pooled": a.cost_per_hour_pooled,
        "pooling_saves_per_hour": a.pooling_saves_per_hour,
    }


def plan_json(a: Any, fleet: Fleet, ranges: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "workloads": [pick_json(o, (ranges or {}).get(o.workload, {}), fleet) for o in a.picks],
        "totals": totals_json(a),
        "cost_per_hour": a.cost_per_hour,
        "power_kw": a.power_w / KW,
        "power_kw_by_site": {s: w / KW for s, w in sorted(a.power_w_by_site().items())},
        "left_out": [{"workload": n, "why": why} for n, why in a.left_out],
    }


def to_json(plan: Any) -> dict[str, Any]:
    """The CLI's JSON of a :class:`core.decision.FleetPlan` (the module docstring's keys)."""
    f = plan.fleet
    nominal_ranges = {n: dict(r) for n, r in plan.ranges}
    robust_ranges = {n: dict(r) for n, r in plan.robust_ranges}
    nominal = plan_json(plan.nominal, f, nominal_ranges)
    return {
        "workloads": nominal["workloads"],
        "totals": nominal["totals"],
        "nominal": nominal,
        "robust": plan_json(plan.robust, f, robust_ranges),
        "robustness_cost_per_hour": plan.robustness_cost_per_hour,
        "power_kw": plan.nominal.power_w / KW,
        "power_kw_by_site": nominal["power_kw_by_site"],
        "energy_kwh_per_million_tokens": plan.nominal.energy_kwh_per_million_tokens,
        "infeasible": [{"workload": n, "why": why} for n, why in plan.infeasible],
        "robust_infeasible": [{"workload": n, "why": why} for n, why in plan.robust_infeasible],
        "left_out": nominal["left_out"],
        "expensive_to_make_robust": [
            {"workload": e.workload, "extra_cost_per_hour": e.extra_per_hour, "scenario": e.case, "why": e.why}
            for e in plan.expensive
        ],
        "scenarios": {name: plan_json(a, f) for name, a in plan.scenarios},
        "units": plan.units,
    }


def human(plan: Any) -> str:
    lines = []
    for title, a in (("Nominal plan", plan.nominal), ("Robust plan (meets every scenario)", plan.robust)):
        lines.append(f"{title}: ${a.cost_per_hour:,.2f}/h, {a.power_w / KW:,.1f} kW")
        for o in a.picks:
            lines.append(
                f"  {o.workload:<16} {o.label}"
                + (f" + {o.spare_replicas} spare" if o.spare_replicas else "")
                + f"  ${o.cost_per_hour:,.2f}/h"
            )
        for t in a.totals:
            lines.append(f"  total {t.gpu:<10} {t.gpus:>6,} GPUs  ${t.cost_per_hour:,.2f}/h (spares pooled)")
        for n, why in a.left_out:
            lines.append(f"  left out {n}: {why}")
    lines.append(f"Robustness costs ${plan.robustness_cost_per_hour:,.2f}/h")
    for e in plan.expensive[:5]:
        if e.extra_per_hour > 0:
            lines.append(f"  {e.workload}: +${e.extra_per_hour:,.2f}/h ({e.why})")
    for n, why in plan.infeasible:
        lines.append(f"Infeasible {n}: {why}")
    return "\n".join(lines)


def _progress(quiet: bool):
    tty = sys.stderr.isatty()

    def show(done: int, total: int, label: str) -> None:
        if quiet:
            return
        text = f"  [{done}/{total}] {label}"
        if tty:
            print(f"\r{text[:100]:<100}", end="", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    return show, tty and not quiet


def run_plan(args: argparse.Namespace) -> int:
    from core.decision import plan_fleet

    if args.workers is not None and not 1 <= args.workers <= 1024:
        die(f"rabit fleet: error: argument --workers: 1 to 1,024 processes, got {args.workers}")
    if args.csv and not (
        Path(args.csv).resolve().parent.is_dir() and os.access(Path(args.csv).resolve().parent, os.W_OK)
    ):
        die(f"rabit fleet: error: argument --csv: cannot write {args.csv}: no writable folder there")
    fleet = read_fleet(args.file)
    try:
        fleet = fleet.with_scenarios(_scenarios(args.scenarios))
    except FleetError as exc:
        die(f"rabit fleet: error: argument --scenarios: {exc}")
    base: RabitConfig = config_file(args) or DEFAULT
    base = base.model_copy(update={"assumptions": assumptions_from_args(args)})
    show, tty = _progress(args.quiet)
    with executor_from_args(args, args.workers or max(1, os.cpu_count() or 1)) as executor:
        plan = plan_fleet(fleet, base, executor=executor, progress=show)
    if tty:
        print("\r" + " " * 100 + "\r", end="", file=sys.stderr)
    if args.csv:
        from core.decision import plan_csv

        try:
            Path(args.csv).write_text(plan_csv(plan))
        except OSError as exc:
            die(f"rabit fleet: error: argument --csv: cannot write {args.csv}: {exc.strerror}")
    emit(to_json(plan), args.json, human(plan))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from core.decision import fleet_kinds

    fleet = read_fleet(args.file)
    kinds = fleet_kinds(fleet)
    units = sum(len([g for g in kinds if not w.gpus or g in w.gpus]) for w in fleet.workloads) * (
        1 + len(fleet.scenarios)
    )
    payload = {
        "valid": True,
        "workloads": [w.name for w in fleet.workloads],
        "scenarios": [s.name for s in fleet.scenarios],
        "gpu_kinds": list(kinds),
        "units": units,
    }
    emit(
        payload,
        args.json,
        f"{args.file}: valid: {len(fleet.workloads)} workloads, {len(fleet.scenarios)} scenarios, "
        f"{len(kinds)} GPU kinds; at most {units} optimizer runs in the first round",
    )
    return 0
