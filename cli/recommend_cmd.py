"""``rabit recommend``: the cheapest configuration that meets a serving target, the Pareto front, and why.

JSON keys (contract, issue 6): recommendation {gpu, gpus_per_replica, tp, pp, weights, kv_dtype, replicas,
cost_per_hour, cost_per_million_tokens, p95_e2e_s, capacity_requests_per_s, bottleneck} (null when nothing
meets the target), pareto (a list of the same), explanation (structured fields), evaluated, simulated;
plus met, nearest (the closest option when nothing meets) and candidates_pruned.

Ranges: ``ranges["recommendation.<key>"]`` and ``ranges["runner_up.<key>"]`` = {low, high} (high null where
the configuration no longer fits at a bound), ``range_basis``, ``misses_at_pessimistic_bound``, ``settled``,
``settled_by`` (the assumption whose measurement would settle an open choice) and ``range_note``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import ValidationError

from cli.common import (add_json, add_range_args, assumptions_from_args, config_file, custom_model, die, emit,
                        with_ranges)
from core import catalog
from core.catalog import CatalogError, parse_prices
from core.config import describe_validation_error
from core.optimizer import KV_FORMATS, WEIGHT_FORMATS, Constraints, ServingGoal, recommend
from core.simulate import Lengths, SimSpec
from core.uncertainty import recommendation_ranges, training_option_ranges


def _csv(s: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in s.split(",") if x.strip())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help="cheapest configuration meeting p95 targets at a request rate")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", default="llama-3.1-70b", help="catalog model slug")
    g.add_argument("--model-config", metavar="PATH", help="a Hugging Face config.json instead of --model")
    p.add_argument("--rate", type=float, help="arrival rate [requests/s] (serving; required unless --train)")
    p.add_argument("--input", type=int, default=1024, help="mean prompt tokens")
    p.add_argument("--output", type=int, default=256, help="mean output tokens")
    p.add_argument("--lengths", choices=["fixed", "uniform", "lognormal"], default="fixed",
                   help="length distribution around the means")
    p.add_argument("--spread", type=float, default=0.5, help="lognormal sigma or uniform relative half-width")
    p.add_argument("--p95-ttft-s", type=float, help="p95 time-to-first-token target [s]")
    p.add_argument("--p95-itl-s", type=float, help="p95 inter-token latency target [s]")
    p.add_argument("--p95-e2e-s", type=float, help="p95 end-to-end latency target [s]")
    p.add_argument("--gpus-allowed", type=_csv, default=(), help="comma-separated GPU slugs (default: all)")
    p.add_argument("--max-gpus", type=int, help="at most this many GPUs in total")
    p.add_argument("--max-usd-per-hour", type=float, help="at most this many USD per hour in total")
    p.add_argument("--weights-allowed", type=_csv, default=WEIGHT_FORMATS, help="e.g. bf16,fp8")
    p.add_argument("--kv-allowed", type=_csv, default=KV_FORMATS, help="e.g. bf16")
    p.add_argument("--providers", type=_csv, default=(), help="only prices from these providers (substrings)")
    p.add_argument("--price-file", metavar="CSV", help="your own price list (same columns as catalogs/prices.csv)")
    p.add_argument("--price-kind", choices=["on-demand", "spot", "reserved", "marketplace"], default="on-demand")
    p.add_argument("--price-policy", choices=["median", "cheapest"], default="median")
    p.add_argument("--max-simulations", type=int, default=16, help="simulator runs (1-64)")
    p.add_argument("--requests", type=int, default=2000, help="requests per simulation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--emit", choices=["vllm", "sglang", "trtllm", "k8s"],
                   help="print the launch config of the recommendation instead of the summary (with --json: "
                        "the 'launch' key)")
    t = p.add_argument_group("training run (--train): the cheapest run that meets a deadline")
    t.add_argument("--train", action="store_true", help="recommend a training run instead of a serving setup")
    t.add_argument("--tokens", type=float, help="training tokens (with --train)")
    t.add_argument("--deadline-days", type=float, help="deadline in days (with --train)")
    t.add_argument("--seq", type=int, default=4096, help="training sequence length")
    t.add_argument("--global-batch-tokens", type=int, default=4 * 2**20)
    t.add_argument("--precision", choices=["bf16", "fp8"], default="bf16")
    t.add_argument("--lora-rank", type=int, default=0)
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


def _checked_model_gpus_prices(args: argparse.Namespace) -> tuple:
    """Check --gpus-allowed and --model, and read --price-file (exit 2 naming the flag); return the prices."""
    unknown = [g for g in args.gpus_allowed if g not in catalog.gpus()]
    if unknown:
        die(f"rabit: error: argument --gpus-allowed: unknown GPU {unknown[0]!r}; known: {', '.join(sorted(catalog.gpus()))}")
    if args.model_config is None and args.model not in catalog.models():
        die(f"rabit: error: argument --model: unknown model '{args.model}'; known: {', '.join(sorted(catalog.models()))}")
    if not args.price_file:
        return catalog.prices()
    try:
        return parse_prices(Path(args.price_file).read_text(), name=Path(args.price_file).name)
    except OSError as exc:
        die(f"rabit: error: argument --price-file: cannot read {args.price_file}: {exc.strerror}")
    except CatalogError as exc:
        die(f"rabit: error: argument --price-file: {exc}")


def _shared_settings(args: argparse.Namespace) -> dict:
    """Fabric and block size from ``--config FILE`` (the dashboard's shared analysis file), else the defaults."""
    cfg = config_file(args)
    return {} if cfg is None else {"fabric": cfg.fabric, "block_size": cfg.block_size}


def run(args: argparse.Namespace) -> int:
    from cli.common import fill_from_config

    fill_from_config(args)
    if args.train:
        return run_training(args)
    if args.rate is None:
        die("rabit recommend: error: the following arguments are required: --rate (or use --train)")
    for flag, v in (("--rate", args.rate), ("--input", args.input), ("--output", args.output),
                    ("--requests", args.requests)):
        if v <= 0:
            die(f"rabit: error: argument {flag}: must be positive, got {v:g}")
    for flag, v in (("--p95-ttft-s", args.p95_ttft_s), ("--p95-itl-s", args.p95_itl_s),
                    ("--p95-e2e-s", args.p95_e2e_s), ("--max-gpus", args.max_gpus),
                    ("--max-usd-per-hour", args.max_usd_per_hour)):
        if v is not None and v <= 0:
            die(f"rabit: error: argument {flag}: must be positive, got {v:g}")
    for flag, vals, ok in (("--weights-allowed", args.weights_allowed, WEIGHT_FORMATS),
                           ("--kv-allowed", args.kv_allowed, KV_FORMATS)):
        bad = [v for v in vals if v not in ok] or ([] if vals else ["(empty)"])
        if bad:
            die(f"rabit: error: argument {flag}: {bad[0]!r} is not one of {', '.join(ok)}")
    prices = _checked_model_gpus_prices(args)
    try:
        lengths = dict(kind=args.lengths, spread=args.spread)
        spec = SimSpec(num_requests=args.requests, seed=args.seed, input=Lengths(mean=args.input, **lengths),
                       output=Lengths(mean=args.output, **lengths))
        goal = ServingGoal(model=args.model, custom_model=custom_model(args.model_config) or getattr(args, "_custom_model", None),
                           rate_per_s=args.rate,
                           workload=spec, p95_ttft_s=args.p95_ttft_s, p95_itl_s=args.p95_itl_s,
                           p95_e2e_s=args.p95_e2e_s, assumptions=assumptions_from_args(args),
                           **_shared_settings(args))
        cons = Constraints(gpus_allowed=args.gpus_allowed, max_gpus=args.max_gpus,
                           max_usd_per_hour=args.max_usd_per_hour, weights_allowed=args.weights_allowed,
                           kv_allowed=args.kv_allowed, providers=args.providers, price_kind=args.price_kind,
                           price_policy=args.price_policy, max_simulations=args.max_simulations)
    except ValidationError as exc:
        e = exc.errors()[0]
        die(f"rabit: error: argument --{str(e['loc'][-1]).replace('_', '-')}: {describe_validation_error(exc)}")
    r = recommend(goal, cons, prices)
    payload = {
        "met": r.met,
        "recommendation": r.recommendation.model_dump() if r.recommendation else None,
        "nearest": r.nearest.model_dump() if r.nearest else None,
        "pareto": [p.model_dump() for p in r.pareto],
        "explanation": r.explanation.model_dump(),
        "evaluated": r.evaluated,
        "simulated": r.simulated,
        "candidates_pruned": sum(1 for c in r.candidates if c.pruned),
        "unpriced_gpus": list(r.unpriced),
    }
    rr = recommendation_ranges(r, prices)
    payload["ranges"] = {}
    if rr.recommendation is not None:
        with_ranges(payload, rr.recommendation.ranges, prefix="recommendation.")
        payload["misses_at_pessimistic_bound"] = rr.recommendation.misses_at_pessimistic
    if rr.runner_up is not None:
        with_ranges(payload, rr.runner_up.ranges, prefix="runner_up.")
        payload["runner_up"] = rr.runner_up.label
    payload.setdefault("range_basis", "no assumption moves this number")
    payload["settled"] = rr.settled
    payload["settled_by"] = rr.settled_by or None
    payload["range_note"] = rr.note
    if args.emit:
        text = _launch_text(args.emit, r, goal)
        if not args.json:
            print(text, end="")
            return 0
        payload["launch"] = {"kind": args.emit, "text": text}
    e = r.explanation
    lines = [e.summary]
    for label, v in (("why this GPU", e.why_gpu), ("why this count", e.why_count), ("bottleneck", e.bottleneck),
                     ("cheaper", e.cheaper_alternative), ("faster", e.faster_alternative), ("relax", e.relax)):
        if v:
            lines.append(f"  {label}: {v}")
    for risk in e.risks:
        lines.append(f"  risk: {risk}")
    if r.unpriced:
        lines.append(f"  no {args.price_kind} price (left out): {', '.join(r.unpriced)}")
    lines.append(f"  evaluated {r.evaluated} configurations, simulated {r.simulated}")
    if rr.recommendation is not None:
        c = rr.recommendation.ranges.get("cost_per_hour")
        if c is not None:
            lines.append(f"  cost range ({payload['range_basis']}): ${c.low:,.2f} ... ${c.high:,.2f} per hour")
        lines.append(f"  {rr.recommendation.pessimistic_note}")
    if rr.note:
        lines.append(f"  {rr.note}")
    emit(payload, args.json, "\n".join(lines))
    return 0


def _launch_text(kind: str, r, goal) -> str:
    """The launch config of the recommendation (or, when nothing meets, of the nearest option, said so)."""
    from core.launch import emit as emit_launch
    from core.launch import launch_spec

    pick = r.recommendation or r.nearest
    if pick is None:
        die("rabit recommend: error: argument --emit: nothing fits under these constraints, so there is no "
            "configuration to launch")
    try:
        text = emit_launch(kind, launch_spec(pick, goal))
    except ValueError as exc:
        die(f"rabit recommend: error: argument --emit: {exc}")
    if r.recommendation is None:
        text = "# NOTE: nothing met the targets; this is the nearest option, " + pick.label + "\n" + text
    return text


def run_training(args: argparse.Namespace) -> int:
    from core.config import RabitConfig
    from core.optimizer import recommend_training

    for flag, v in (("--tokens", args.tokens), ("--deadline-days", args.deadline_days)):
        if v is None:
            die(f"rabit recommend: error: argument {flag}: required with --train")
        if v <= 0:
            die(f"rabit recommend: error: argument {flag}: must be positive, got {v:g}")
    prices = _checked_model_gpus_prices(args)
    try:
        cfg = RabitConfig(model=args.model, custom_model=custom_model(args.model_config) or getattr(args, "_custom_model", None),
                          phase="train", assumptions=assumptions_from_args(args), **_shared_settings(args),
                          train_tokens=args.tokens, seq_len=args.seq, global_batch_tokens=args.global_batch_tokens,
                          train_precision=args.precision, lora_rank=args.lora_rank)
    except ValidationError as exc:
        e = exc.errors()[0]
        die(f"rabit: error: argument --{str(e['loc'][-1]).replace('_', '-')}: {describe_validation_error(exc)}")
    cons = Constraints(gpus_allowed=args.gpus_allowed, max_gpus=args.max_gpus,
                       max_usd_per_hour=args.max_usd_per_hour, providers=args.providers,
                       price_kind=args.price_kind, price_policy=args.price_policy)
    r = recommend_training(cfg, args.deadline_days * 86400, cons, prices)
    rg = training_option_ranges(cfg, r.recommendation) if r.recommendation else {}
    payload = {
        "met": r.met,
        "recommendation": r.recommendation.model_dump() if r.recommendation else None,
        "options": [o.model_dump() for o in r.options],
        "skipped": list(r.skipped),
        "explanation": {"summary": r.summary, "why_gpu": r.why_gpu, "relax": r.relax},
    }
    with_ranges(payload, rg, prefix="recommendation.")
    human = "\n".join([r.summary] + ([f"  why this GPU: {r.why_gpu}"] if r.why_gpu else [])
                      + ([f"  relax: {r.relax}"] if r.relax else [])
                      + [f"  {o.gpu:<10} {o.gpus:>7,} GPUs  {o.wall_clock_s / 86400:6.3g} days  "
                         f"${o.cost_usd:,.0f}{'' if o.meets_deadline else '  (misses)'}" for o in r.options])
    emit(payload, args.json, human)
    return 0
