"""``rabit recommend``: the cheapest configuration that meets a serving target, the Pareto front, and why.

JSON keys (contract, issue 6): recommendation {gpu, gpus_per_replica, tp, pp, weights, kv_dtype, replicas,
cost_per_hour, cost_per_million_tokens, p95_e2e_s, capacity_requests_per_s, bottleneck} (null when nothing
meets the target), pareto (a list of the same), explanation (structured fields), evaluated, simulated;
plus met, nearest (the closest option when nothing meets) and candidates_pruned.

Ranges: ``ranges["recommendation.<key>"]`` and ``ranges["runner_up.<key>"]`` = {low, high} (high null where
the configuration no longer fits at a bound), ``range_basis``, ``misses_at_pessimistic_bound``, ``settled``,
``settled_by`` (the assumption whose measurement would settle an open choice) and ``range_note``.

Sessions: ``--agents N`` sizes for N concurrent agents running the session workload (the ``--config`` file's
``sessions``, else the defaults) at ``--p95-ttft-s`` per turn (the one target, as ``rabit simulate --sessions
--size-gpus`` sizes), every candidate simulated as their sessions (in place of ``--rate``); the JSON then carries
``agents`` and ``session_workload`` (the sessions as run).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from cli.common import (
    adapters_from_args,
    add_adapter_args,
    add_attention_args,
    add_json,
    add_length_args,
    add_range_args,
    assumptions_from_args,
    cli_search_budget,
    config_file,
    custom_model,
    die,
    emit,
    fill_lengths,
    read_file,
    with_ranges,
)
from core import catalog
from core.base import MAX_TABLE_BYTES, choices, sig
from core.catalog import CatalogError, parse_prices
from core.config import DEFAULT, RabitConfig, Sessions, Targets, describe_validation_error
from core.decision import (
    KV_FORMATS,
    WEIGHT_FORMATS,
    Constraints,
    ServingGoal,
    recommend,
    recommendation_ranges,
    session_goal,
    training_option_ranges,
)


def _csv(s: str) -> tuple[str, ...]:
    """Comma-separated names; a list that names nothing (``,,,``) is refused, as an empty value is."""
    names = tuple(x.strip() for x in s.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"{s!r} names nothing: give comma-separated names")
    return names


def _target(text: str) -> float | None:
    """A p95 target [s]: a positive number, or ``none`` for no target on that metric."""
    if text.strip().lower() == "none":
        return None
    return float(text)


T = DEFAULT.targets
W = DEFAULT.workload
#: Flag -> workload / targets field, for ``--config FILE``.
CONFIG_DEST = {
    "rate": "workload.rate_per_s",
    "lengths": "workload.lengths",
    "spread": "workload.spread",
    "seed": "workload.seed",
    "p95_ttft_s": "targets.p95_ttft_s",
    "p95_itl_s": "targets.p95_itl_s",
    "p95_e2e_s": "targets.p95_e2e_s",
    "gpus_allowed": "targets.gpus_allowed",
    "max_gpus": "targets.max_gpus",
    "max_usd_per_hour": "targets.max_usd_per_hour",
    "weights_allowed": "targets.weights_allowed",
    "kv_allowed": "targets.kv_allowed",
    "providers": "targets.providers",
    "price_kind": "targets.price_kind",
    "price_policy": "targets.price_policy",
    "max_simulations": "targets.max_simulations",
    "disagg": "targets.disagg",
    "requests": "targets.requests_per_simulation",
    "deadline_days": "targets.deadline_days",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help="cheapest configuration meeting p95 targets at a request rate")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", default=DEFAULT.model, help="catalog model slug")
    g.add_argument("--model-config", metavar="PATH", help="a Hugging Face config.json instead of --model")
    p.add_argument("--rate", type=float, help="arrival rate [requests/s] (serving; required unless --train)")
    p.add_argument(
        "--agents",
        type=int,
        help="size for this many concurrent agents running the session workload (the --config file's sessions, "
        "else the defaults) at --p95-ttft-s per turn (the one target), in place of --rate",
    )
    add_length_args(p, "mean ")
    p.add_argument(
        "--lengths", choices=choices.LENGTH_KINDS, default=W.lengths, help="length distribution around the means"
    )
    p.add_argument("--spread", type=float, default=W.spread, help="lognormal sigma or uniform relative half-width")
    p.add_argument(
        "--p95-ttft-s",
        type=_target,
        default=T.p95_ttft_s,
        help=f"p95 time-to-first-token target [s] (default {T.p95_ttft_s}; none: no target)",
    )
    p.add_argument(
        "--p95-itl-s",
        type=_target,
        default=T.p95_itl_s,
        help=f"p95 inter-token latency target [s] (default {T.p95_itl_s}; none: no target)",
    )
    p.add_argument(
        "--p95-e2e-s",
        type=_target,
        default=T.p95_e2e_s,
        help=f"p95 end-to-end latency target [s] (default {T.p95_e2e_s}; none: no target)",
    )
    p.add_argument("--gpus-allowed", type=_csv, default=T.gpus_allowed, help="comma-separated GPU slugs (default: all)")
    p.add_argument("--max-gpus", type=int, default=T.max_gpus, help="at most this many GPUs in total")
    p.add_argument(
        "--max-usd-per-hour", type=float, default=T.max_usd_per_hour, help="at most this many USD per hour in total"
    )
    p.add_argument("--weights-allowed", type=_csv, default=T.weights_allowed, help="e.g. bf16,fp8")
    p.add_argument("--kv-allowed", type=_csv, default=T.kv_allowed, help="e.g. bf16")
    p.add_argument("--providers", type=_csv, default=T.providers, help="only prices from these providers (substrings)")
    p.add_argument("--price-file", metavar="CSV", help="your own price list (same columns as catalogs/prices.csv)")
    p.add_argument("--price-kind", choices=choices.PRICE_KINDS, default=T.price_kind)
    p.add_argument("--price-policy", choices=choices.PRICE_POLICIES, default=T.price_policy)
    p.add_argument("--max-simulations", type=int, default=T.max_simulations, help="simulator runs (1-64)")
    p.add_argument("--requests", type=int, default=T.requests_per_simulation, help="requests per simulation")
    p.add_argument(
        "--no-disagg",
        dest="disagg",
        action="store_false",
        default=T.disagg,
        help="search aggregated replicas only (no disaggregated prefill / decode pools)",
    )
    p.add_argument("--seed", type=int, default=W.seed)
    p.add_argument(
        "--emit",
        choices=["vllm", "sglang", "trtllm", "k8s"],
        help="print the launch config of the recommendation instead of the summary (with --json: the 'launch' key)",
    )
    add_attention_args(p)
    t = p.add_argument_group("training run (--train): the cheapest run that meets a deadline")
    t.add_argument("--train", action="store_true", help="recommend a training run instead of a serving setup")
    t.add_argument("--tokens", type=float, help="training tokens (with --train)")
    t.add_argument("--deadline-days", type=float, help="deadline in days (with --train)")
    t.add_argument("--seq", type=int, default=DEFAULT.seq_len, help="training sequence length")
    t.add_argument("--global-batch-tokens", type=int, default=DEFAULT.global_batch_tokens)
    t.add_argument("--precision", choices=choices.TRAIN_PRECISIONS, default=DEFAULT.train_precision)
    t.add_argument(
        "--lora-rank",
        type=int,
        default=DEFAULT.lora_rank,
        help="LoRA rank: of the training run, or with --adapters of the adapters served",
    )
    add_adapter_args(p, lora_rank=False)
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


#: Targets / Workload / config field -> flag, for error messages.
_FLAG = {
    "p95_ttft_s": "--p95-ttft-s",
    "p95_itl_s": "--p95-itl-s",
    "p95_e2e_s": "--p95-e2e-s",
    "gpus_allowed": "--gpus-allowed",
    "max_gpus": "--max-gpus",
    "max_usd_per_hour": "--max-usd-per-hour",
    "weights_allowed": "--weights-allowed",
    "kv_allowed": "--kv-allowed",
    "providers": "--providers",
    "price_kind": "--price-kind",
    "price_policy": "--price-policy",
    "max_simulations": "--max-simulations",
    "requests_per_simulation": "--requests",
    "seed": "--seed",
    "rate_per_s": "--rate",
    "lengths": "--lengths",
    "spread": "--spread",
    "input_tokens": "--input",
    "output_tokens": "--output",
    "train_tokens": "--tokens",
    "seq_len": "--seq",
    "global_batch_tokens": "--global-batch-tokens",
    "train_precision": "--precision",
    "lora_rank": "--lora-rank",
    "deadline_days": "--deadline-days",
    "input": "--input",
    "output": "--output",
}


def _die_validation(exc: ValidationError) -> NoReturn:
    e = exc.errors()[0]
    field = str(e["loc"][-1]) if e["loc"] else ""
    flag = _FLAG.get(field, "--" + field.replace("_", "-"))
    die(f"rabit: error: argument {flag}: {describe_validation_error(exc)}")


def _targets(args: argparse.Namespace, **extra: object) -> Targets:
    return T.with_(
        p95_ttft_s=args.p95_ttft_s,
        p95_itl_s=args.p95_itl_s,
        p95_e2e_s=args.p95_e2e_s,
        gpus_allowed=args.gpus_allowed,
        max_gpus=args.max_gpus,
        max_usd_per_hour=args.max_usd_per_hour,
        weights_allowed=args.weights_allowed,
        kv_allowed=args.kv_allowed,
        providers=args.providers,
        price_kind=args.price_kind,
        price_policy=args.price_policy,
        max_simulations=args.max_simulations,
        requests_per_simulation=args.requests,
        disagg=getattr(args, "disagg", T.disagg),
        **extra,
    )


def _checked_model_gpus_prices(args: argparse.Namespace) -> tuple:
    """Check --gpus-allowed and --model, and read --price-file (exit 2 naming the flag); return the prices."""
    unknown = [g for g in args.gpus_allowed if g not in catalog.gpus()]
    if unknown:
        die(
            f"rabit: error: argument --gpus-allowed: unknown GPU {unknown[0]!r}; known: {', '.join(sorted(catalog.gpus()))}"
        )
    if args.model_config is None and args.model not in catalog.models():
        die(
            f"rabit: error: argument --model: unknown model '{args.model}'; known: {', '.join(sorted(catalog.models()))}"
        )
    if not args.price_file:
        return catalog.prices()
    text = read_file(args.price_file, "--price-file", MAX_TABLE_BYTES)  # a regular UTF-8 file within its size
    try:
        return parse_prices(text, name=Path(args.price_file).name)
    except CatalogError as exc:
        die(f"rabit: error: argument --price-file: {exc}")


def _shared_settings(args: argparse.Namespace) -> dict:
    """Fabric and block size from ``--config FILE`` (the dashboard's shared analysis file), else the defaults."""
    cfg = config_file(args)
    return {} if cfg is None else {"fabric": cfg.fabric, "block_size": cfg.block_size}


def run(args: argparse.Namespace) -> int:
    from cli.common import fill_from_config

    fill_from_config(args, CONFIG_DEST)
    from cli.common import ADAPTER_FLAGS, refuse_attention_flags, refuse_unused, training_only

    refuse_attention_flags(args, "rabit recommend", training=args.train, search=True)
    if args.train:
        why = "with --train (a serving flag: the training run is sized by --tokens and --deadline-days)"
        refuse_unused(args, "rabit recommend", dict.fromkeys(_SERVING_ONLY + tuple(ADAPTER_FLAGS), why))
        return run_training(args)
    unused = training_only(args, _TRAINING_ONLY)
    refuse_unused(args, "rabit recommend", dict.fromkeys(unused, "without --train (a training flag)"))
    return _run_serving(args, *serving_inputs(args))


#: The flags only one of recommend's two searches reads (refused under the other).
_SERVING_ONLY = (
    *("rate", "input", "output", "lengths", "spread", "p95_ttft_s", "p95_itl_s", "p95_e2e_s"),
    *("max_simulations", "requests", "emit"),
)
_TRAINING_ONLY = ("tokens", "deadline_days", "seq", "global_batch_tokens", "precision", "lora_rank")


def serving_inputs(args: argparse.Namespace) -> tuple:
    """(goal, constraints, prices) from the serving flags (exit 2 naming the flag); next-experiment shares it."""
    agents = getattr(args, "agents", None)
    _check_rate_or_agents(args, agents)
    fill_lengths(args)
    _check_positive_flags(args, agents)
    _check_precisions(args)
    prices = _checked_model_gpus_prices(args)
    try:
        goal, cfg = _serving_goal(args, agents)
    except ValidationError as exc:
        _die_validation(exc)
    return goal, Constraints.from_config(cfg), prices


def _check_rate_or_agents(args: argparse.Namespace, agents: int | None) -> None:
    """Exactly one of --rate and --agents, and at least one agent (exit 2)."""
    if agents is not None and args.rate is not None:
        die("rabit recommend: error: --agents sizes for agents' sessions, whose turns come as fast as they are "
            "answered: give --agents or --rate, not both")  # fmt: skip
    if agents is not None and agents < 1:
        die(f"rabit: error: argument --agents: must be at least 1, got {agents}")
    if args.rate is None and agents is None:
        die("rabit recommend: error: the following arguments are required: --rate (or --agents, or use --train)")


def _check_positive_flags(args: argparse.Namespace, agents: int | None) -> None:
    """The rate, lengths and request count, and each target or cap given, are positive (exit 2 naming the flag)."""
    for flag, v in (
        ("--rate", args.rate if agents is None else 1.0),
        ("--input", args.input),
        ("--output", args.output),
        ("--requests", args.requests),
    ):
        if v <= 0:
            die(f"rabit: error: argument {flag}: must be positive, got {sig(v, 6)}")
    for flag, v in (
        ("--p95-ttft-s", args.p95_ttft_s),
        ("--p95-itl-s", args.p95_itl_s),
        ("--p95-e2e-s", args.p95_e2e_s),
        ("--max-gpus", args.max_gpus),
        ("--max-usd-per-hour", args.max_usd_per_hour),
    ):
        if v is not None and v <= 0:
            die(f"rabit: error: argument {flag}: must be positive, got {sig(v, 6)}")


def _check_precisions(args: argparse.Namespace) -> None:
    """--weights-allowed and --kv-allowed name known formats, at least one each (exit 2 naming the first bad)."""
    for flag, vals, ok in (
        ("--weights-allowed", args.weights_allowed, WEIGHT_FORMATS),
        ("--kv-allowed", args.kv_allowed, KV_FORMATS),
    ):
        bad = [v for v in vals if v not in ok] or ([] if vals else ["(empty)"])
        if bad:
            die(f"rabit: error: argument {flag}: {bad[0]!r} is not one of {', '.join(ok)}")


def _serving_goal(args: argparse.Namespace, agents: int | None) -> tuple:
    """(goal, config): the --config file's settings with the flags over them; for --agents, the session goal
    sized at the p95 TTFT per turn. Raises ``ValidationError`` on a bad value."""
    # the settings every candidate inherits (cached prefix, speculative decoding, engine, fabric, block size)
    # are the --config file's, as the dashboard's optimizer takes the sidebar's; the flags set the rest
    base = config_file(args) or DEFAULT
    cfg = base.with_(
        model=args.model,
        custom_model=custom_model(args.model_config) or getattr(args, "_custom_model", None),
        input_tokens=args.input,
        output_tokens=args.output,
        assumptions=assumptions_from_args(args),
        # attention parallelism pins the search to that layout; the host KV tier applies to every candidate
        dp_attention=getattr(args, "dp_attention", False),
        cp=getattr(args, "cp", DEFAULT.cp),
        dcp=getattr(args, "dcp", DEFAULT.dcp),
        kv_offload_gib=getattr(args, "kv_offload_gib", DEFAULT.kv_offload_gib),
        workload=base.workload.with_(
            rate_per_s=args.rate if agents is None else base.workload.rate_per_s,
            lengths=args.lengths,
            spread=args.spread,
            seed=args.seed,
        ),
        targets=_targets(args),
        adapters=adapters_from_args(args),
    )
    goal = ServingGoal.from_config(cfg)
    if agents is not None:
        if cfg.targets.p95_ttft_s is None:
            die("rabit recommend: error: --agents sizes for a p95 TTFT per turn: give --p95-ttft-s")
        sessions = (cfg.sessions or Sessions()).with_(trace=None)
        goal = session_goal(cfg, sessions, agents=agents, ttft_p95_s=cfg.targets.p95_ttft_s)
    return goal, cfg


def _run_serving(args: argparse.Namespace, goal, cons, prices) -> int:
    """Search, then print the pick (or its launch text alone for --emit without --json) with its ranges."""
    r = recommend(goal, cons, prices, budget=cli_search_budget())
    payload = _serving_payload(r, goal)
    rr = recommendation_ranges(r, prices)
    _add_ranges(payload, rr)
    if goal.settings.adapters.enabled:
        payload.update(_adapter_keys(r, goal, cons, prices))
    payload["settled"] = rr.settled
    payload["settled_by"] = rr.settled_by or None
    payload["range_note"] = rr.note
    if args.emit:
        text = _launch_text(args.emit, r, goal)
        if not args.json:
            print(text, end="")
            return 0
        payload["launch"] = {"kind": args.emit, "text": text}
    emit(payload, args.json, "\n".join(_serving_lines(args, r, payload, rr)))
    return 0


def _serving_payload(r, goal) -> dict[str, Any]:
    """The search's JSON keys before its ranges: the pick, the nearest, the front, the explanation, the counts."""
    return {
        "met": r.met,
        "recommendation": pick_json(r.recommendation),
        "nearest": pick_json(r.nearest),
        "pareto": [pick_json(p) for p in r.pareto],
        "explanation": r.explanation.model_dump(),
        "evaluated": r.evaluated,
        "simulated": r.simulated,
        "candidates_pruned": sum(1 for c in r.candidates if c.pruned),
        **(
            {"agents": goal.sessions.agents, "session_workload": goal.sessions.model_dump(mode="json")}
            if goal.sessions is not None
            else {}
        ),
        "unpriced_gpus": list(r.unpriced),
        # the search's attention-parallelism pin (the picks carry their own) and the host KV tier every candidate has
        "cp": goal.settings.cp,
        "dcp": goal.settings.dcp,
        "dp_attention": goal.settings.dp_attention,
        "kv_offload_bytes": goal.settings.kv_offload_bytes,
    }


def _add_ranges(payload: dict[str, Any], rr) -> None:
    """The uncertainty bands of the pick and the runner-up, into ``payload``."""
    payload["ranges"] = {}
    if rr.recommendation is not None:
        with_ranges(payload, rr.recommendation.ranges, prefix="recommendation.")
        payload["misses_at_pessimistic_bound"] = rr.recommendation.misses_at_pessimistic
    if rr.runner_up is not None:
        with_ranges(payload, rr.runner_up.ranges, prefix="runner_up.")
        payload["runner_up"] = rr.runner_up.label
    payload.setdefault("range_basis", "no assumption moves this number")


def _serving_lines(args: argparse.Namespace, r, payload: dict[str, Any], rr) -> list[str]:
    """The text answer: the summary, each reason the explanation gives, the risks, the left-out kinds, the
    per-variant comparison, the counts and the cost range."""
    e = r.explanation
    lines = [e.summary]
    for label, v in (
        ("why this GPU", e.why_gpu),
        ("why this count", e.why_count),
        ("bottleneck", e.bottleneck),
        ("cheaper", e.cheaper_alternative),
        ("faster", e.faster_alternative),
        ("relax", e.relax),
        ("disaggregation", e.disaggregation),
    ):
        if v:
            lines.append(f"  {label}: {v}")
    lines.extend(f"  risk: {risk}" for risk in e.risks)
    if r.unpriced:
        lines.append(f"  no {args.price_kind} price (left out): {', '.join(r.unpriced)}")
    lines.extend(_per_variant_lines(payload.get("per_variant")))
    lines.append(f"  evaluated {r.evaluated} configurations, simulated {r.simulated}")
    if rr.recommendation is not None:
        c = rr.recommendation.ranges.get("cost_per_hour")
        if c is not None:
            lines.append(f"  cost range ({payload['range_basis']}): ${c.low:,.2f} ... ${c.high:,.2f} per hour")
        lines.append(f"  {rr.recommendation.pessimistic_note}")
    if rr.note:
        lines.append(f"  {rr.note}")
    return lines


def _per_variant_lines(pv: dict[str, Any] | None) -> list[str]:
    """Multi-LoRA serving: one deployment per variant against the adapters over one base, and the variants that
    earn a replica of their own."""
    if not pv:
        return []
    lines = [
        f"  one deployment per variant (merged weights): {pv['gpus']:,} GPUs, ${pv['cost_per_hour']:,.2f}/h for "
        f"{pv['variants']:,} variants, against {pv['multi_lora']['gpus']:,} GPUs, "
        f"${pv['multi_lora']['cost_per_hour']:,.2f}/h with the adapters over one base"
    ]
    lines.extend(f"  {v['adapter']} earns its own replica: {v['reason']}" for v in pv["own_replica"])
    return lines


def _adapter_keys(r, goal, cons, prices) -> dict[str, Any]:
    """Multi-LoRA serving: the adapter slots of the pick and the per-variant comparison (merged weights)."""
    from core.decision import per_variant

    a = goal.settings.adapters
    engine = goal.settings.workload.engine
    pick = r.recommendation or r.nearest
    out: dict[str, Any] = {}
    if pick is not None:
        chosen = a.with_slots(pick.adapter_slots, engine)
        out["adapters"] = {
            "count": a.count,
            "ranks": list(a.ranks),
            "targets": a.targets,
            "max_loras": chosen.slots(engine),
            "max_lora_rank": chosen.slot_rank(engine),
            "max_cpu_loras": chosen.host_slots(engine),
        }
    pv = per_variant(goal, cons, prices, pick)
    out["per_variant"] = (
        None
        if pv is None
        else {
            "variants": pv.variants,
            "gpus": pv.gpus,
            "cost_per_hour": pv.cost_per_hour,
            "replicas": pv.replicas,
            "shapes": [{"label": lab, "variants": n} for lab, n in pv.shapes],
            "multi_lora": {
                "gpus": pv.multi_lora_gpus,
                "cost_per_hour": pv.multi_lora_cost_per_hour,
                "label": pv.multi_lora_label,
            },
            "gpus_saved": pv.gpus_saved,
            "cost_ratio": pv.cost_ratio,
            "own_replica": [v.model_dump() for v in pv.own_replica],
            "basis": pv.basis,
        }
    )
    return out


def pick_json(p) -> dict | None:
    """A pick's JSON (contract): ``mode`` always, the ``prefill`` and ``decode`` pools only when disaggregated."""
    if p is None:
        return None
    out = p.model_dump()
    if p.mode != "disaggregated":
        out.pop("prefill", None)
        out.pop("decode", None)
    return out


def _launch_text(kind: str, r, goal) -> str:
    """The launch config of the recommendation (or, when nothing meets, of the nearest option, said so)."""
    from core.operations import emit_pick

    pick = r.recommendation or r.nearest
    if pick is None:
        die(
            "rabit recommend: error: argument --emit: nothing fits under these constraints, so there is no "
            "configuration to launch"
        )
    try:
        text = emit_pick(kind, pick, goal)
    except ValueError as exc:
        die(f"rabit recommend: error: argument --emit: {exc}")
    if r.recommendation is None:
        text = "# NOTE: nothing met the targets; this is the nearest option, " + pick.label + "\n" + text
    return text


def run_training(args: argparse.Namespace) -> int:
    return _run_training(args, *training_inputs(args))


def training_inputs(args: argparse.Namespace) -> tuple:
    """(config, constraints, prices) from the --train flags (exit 2 naming the flag); next-experiment shares it."""
    for flag, v in (("--tokens", args.tokens), ("--deadline-days", args.deadline_days)):
        if v is None:
            die(f"rabit recommend: error: argument {flag}: required with --train")
        if v <= 0:
            die(f"rabit recommend: error: argument {flag}: must be positive, got {sig(v, 6)}")
    prices = _checked_model_gpus_prices(args)
    try:
        cfg = RabitConfig(
            model=args.model,
            custom_model=custom_model(args.model_config) or getattr(args, "_custom_model", None),
            phase="train",
            assumptions=assumptions_from_args(args),
            **_shared_settings(args),
            train_tokens=args.tokens,
            seq_len=args.seq,
            global_batch_tokens=args.global_batch_tokens,
            train_precision=args.precision,
            lora_rank=args.lora_rank,
            attention_kernel=getattr(args, "attention_kernel", DEFAULT.attention_kernel),
            targets=_targets(args, deadline_days=args.deadline_days, train_gpus_allowed=args.gpus_allowed),
        )
    except ValidationError as exc:
        _die_validation(exc)
    return cfg, Constraints.from_config(cfg, training=True), prices


def _run_training(args: argparse.Namespace, cfg, cons, prices) -> int:
    from core.decision import recommend_training

    r = recommend_training(cfg, cfg.targets.deadline_s, cons, prices, budget=cli_search_budget())
    rg = training_option_ranges(cfg, r.recommendation) if r.recommendation else {}
    payload: dict[str, Any] = {
        "met": r.met,
        "recommendation": r.recommendation.model_dump() if r.recommendation else None,
        "options": [o.model_dump() for o in r.options],
        "skipped": list(r.skipped),
        "explanation": {"summary": r.summary, "why_gpu": r.why_gpu, "relax": r.relax},
    }
    with_ranges(payload, rg, prefix="recommendation.")
    human = "\n".join(
        [r.summary]
        + ([f"  why this GPU: {r.why_gpu}"] if r.why_gpu else [])
        + ([f"  relax: {r.relax}"] if r.relax else [])
        + [
            f"  {o.gpu:<10} {o.gpus:>7,} GPUs  {o.wall_clock_s / 86400:6.3g} days  "
            f"${o.cost_usd:,.0f}{'' if o.meets_deadline else '  (misses)'}"
            for o in r.options
        ]
    )
    emit(payload, args.json, human)
    return 0
