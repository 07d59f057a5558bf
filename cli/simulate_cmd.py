"""``rabit simulate``: queue a deployment under load (its replicas behind a router, or disaggregated prefill and
decode pools) and report latency percentiles, throughput and saturation, per deployment and per replica.

JSON keys added by the deployment (contract, issue 20): ``mode`` ("aggregated" or "disaggregated"), ``replicas``,
``per_replica_rate_per_s``, ``router``, ``load_imbalance`` (max / mean requests per replica),
``replica_utilization`` (each replica's busy share), ``per_replica`` (requests, rate, utilisation, p95s of each);
disaggregated also ``kv_transfer_s`` (p50 / p95 / p99), ``kv_transfer_share_of_ttft``, ``kv_path`` and ``pools``
({"prefill": {...}, "decode": {...}}, each with instances, tp, pp, gpu, utilization, queue_s, requests).
``loop`` ("compiled" or "python": the event loop that ran it, the same records either way) and ``fallback_reason``
(why the Python loop ran it, one of ``core.serving.sim.compiled.FALLBACK_REASONS``; null on the compiled loop)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from pydantic import ValidationError

from cli.common import (
    adapter_payload,
    adapters_from_args,
    add_adapter_args,
    add_attention_args,
    add_cluster_args,
    add_json,
    add_length_args,
    add_model_args,
    add_range_args,
    add_weight_kv_args,
    attention_payload,
    cli_budget,
    config_from_args,
    die,
    emit,
    fill_from_config,
    fill_lengths,
    named,
    read_file,
    refuse_attention_flags,
    refuse_unused,
    with_calibrated,
    with_ranges,
)
from cli.sessions_cmd import add_session_args, run_sessions, wants_sessions
from core.base import MAX_TABLE_BYTES, choices, fmt_time, sig
from core.config import DEFAULT, RabitConfig, Workload, parse_trace_adapters, workload_problems
from core.decision import deployment_spread
from core.physics import serving_memory
from core.serving import LATENCY_KEYS, SimSpec, layout_of, parse_trace, sim_spec, simulate_deployment

#: Workload / SimSpec field -> flag, for error messages that name the argument.
SPEC_FLAG = {
    "rate_per_s": "--rate",
    "num_requests": "--requests",
    "duration_s": "--duration",
    "users": "--users",
    "think_s": "--think",
    "token_budget": "--token-budget",
    "max_batch": "--max-batch",
    "timeout_s": "--timeout",
    "seed": "--seed",
    "kv_pool_tokens": "--kv-pool-tokens",
    "input": "--input",
    "output": "--output",
    "trace": "--trace",
    "admission": "--kv-admission",
    "policy": "--chunked-prefill",
    "spread": "--spread",
    "lengths": "--lengths",
    "arrival": "--arrival",
    "prefix_cache_frac": "--prefix-share",
    "prefix_groups": "--prefix-groups",
    "replicas": "--replicas",
    "router": "--router",
}
W = DEFAULT.workload
#: Flag -> workload field, for ``--config FILE``.
CONFIG_DEST = {
    "arrival": "workload.arrival",
    "rate": "workload.rate_per_s",
    "users": "workload.users",
    "think": "workload.think_s",
    "requests": "workload.num_requests",
    "duration": "workload.duration_s",
    "lengths": "workload.lengths",
    "spread": "workload.spread",
    "policy": "workload.policy",
    "token_budget": "workload.token_budget",
    "max_batch": "workload.max_batch",
    "kv_admission": "workload.admission",
    "timeout": "workload.timeout_s",
    "kv_pool_tokens": "workload.kv_pool_tokens",
    "seed": "workload.seed",
    "replicas": "workload.replicas",
    "router": "workload.router",
    "prefix_share": "workload.prefix_cache_frac",
    "prefix_groups": "workload.prefix_groups",
    "disagg": "disagg.enabled",
    "prefill_instances": "disagg.prefill_instances",
    "prefill_tp": "disagg.prefill_tp",
    "prefill_gpu": "disagg.prefill_gpu",
    "decode_instances": "disagg.decode_instances",
    "decode_tp": "disagg.decode_tp",
    "decode_gpu": "disagg.decode_gpu",
}
D = DEFAULT.disagg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a serving deployment under load (replicas behind a router, or prefill and decode pools): "
        "TTFT/ITL/E2E percentiles, throughput, preemptions, saturation, per replica",
    )
    add_model_args(p)
    add_cluster_args(p)
    add_weight_kv_args(p)
    add_attention_args(p)
    a = p.add_argument_group("arrivals")
    a.add_argument("--arrival", choices=choices.ARRIVALS, default=W.arrival)
    a.add_argument("--rate", type=float, help="Poisson arrival rate [requests/s] (required for poisson)")
    a.add_argument("--users", type=int, default=W.users, help="closed loop: concurrent users")
    a.add_argument("--think", type=float, default=W.think_s, help="closed loop: mean think time [s]")
    a.add_argument("--requests", type=int, default=W.num_requests, help="requests to issue")
    a.add_argument("--duration", type=float, default=W.duration_s, help="stop issuing after this many seconds")
    w = p.add_argument_group("lengths")
    add_length_args(w, "mean ")
    w.add_argument("--lengths", choices=choices.LENGTH_KINDS, default=W.lengths)
    w.add_argument(
        "--spread",
        type=float,
        default=W.spread,
        help="uniform: relative half-width; lognormal: sigma of the underlying normal",
    )
    w.add_argument("--trace", metavar="PATH", help="CSV/JSONL of input and output token counts to replay")
    s = p.add_argument_group("scheduler")
    s.add_argument("--max-batch", type=int, default=W.max_batch, help="running sequences (max_num_seqs)")
    s.add_argument(
        "--token-budget", type=int, default=W.token_budget, help="tokens per iteration (max_num_batched_tokens)"
    )
    g = s.add_mutually_exclusive_group()
    g.add_argument(
        "--chunked-prefill",
        dest="policy",
        action="store_const",
        const="chunked",
        help="decode first, prompts chunked into the rest of the budget (default)",
    )
    g.add_argument(
        "--prefill-priority",
        dest="policy",
        action="store_const",
        const="prefill_priority",
        help="whole prompts first, decodes wait",
    )
    s.add_argument("--kv-admission", choices=choices.ADMISSIONS, default=W.admission)
    s.add_argument(
        "--timeout",
        type=float,
        default=W.timeout_s,
        help="cancel a request not finished this many seconds after arrival",
    )
    s.add_argument("--kv-pool-tokens", type=int, default=W.kv_pool_tokens, help="override the KV pool size (what-if)")
    s.add_argument(
        "--engine",
        choices=choices.ENGINES,
        help="take this engine's documented defaults for --max-batch, --token-budget and --kv-admission "
        "on the GPU (flags left at their defaults only)",
    )
    s.add_argument(
        "--no-prefix-caching",
        dest="prefix_caching",
        action="store_false",
        help="a preempted request recomputes from scratch (prefix cache off)",
    )
    s.add_argument(
        "--no-async-scheduling",
        dest="async_scheduling",
        action="store_false",
        help="plan each iteration after the previous one ends (vLLM's async scheduling off): an arrival waits "
        "one iteration less",
    )
    d = p.add_argument_group("deployment")
    d.add_argument(
        "--replicas",
        type=int,
        default=W.replicas,
        help="replicas behind the router (default: GPUs / (TP x PP))",
    )
    d.add_argument(
        "--router",
        choices=choices.ROUTERS,
        default=W.router,
        help="how each request is assigned a replica (default least-outstanding: fewest requests in flight)",
    )
    d.add_argument(
        "--prefix-share",
        type=float,
        default=W.prefix_cache_frac,
        help="share of each prompt shared by its prefix group (found cached where the group was served)",
    )
    d.add_argument("--prefix-groups", type=int, default=W.prefix_groups, help="distinct shared prefixes")
    d.add_argument(
        "--disagg",
        action="store_true",
        default=D.enabled,
        help="disaggregated: separate prefill and decode pools, the KV cache moved between them",
    )
    d.add_argument("--prefill-instances", type=int, default=D.prefill_instances, help="prefill instances")
    d.add_argument("--prefill-tp", type=int, default=D.prefill_tp, help="TP of a prefill instance (default --tp)")
    d.add_argument("--prefill-gpu", default=D.prefill_gpu, help="GPU of the prefill pool (default --gpu)")
    d.add_argument("--decode-instances", type=int, default=D.decode_instances, help="decode instances")
    d.add_argument("--decode-tp", type=int, default=D.decode_tp, help="TP of a decode instance (default --tp)")
    d.add_argument("--decode-gpu", default=D.decode_gpu, help="GPU of the decode pool (default --gpu)")
    d.add_argument(
        "--no-overlap",
        dest="overlap",
        action="store_false",
        help="disaggregated: send the KV after the prefill, not layer by layer during it",
    )
    p.add_argument("--seed", type=int, default=W.seed)
    add_adapter_args(p)
    add_session_args(p)
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run, policy=W.policy)


def _spec_error(exc: ValidationError, args: argparse.Namespace) -> NoReturn:
    e = exc.errors()[0]
    field = str(e["loc"][-1]) if e["loc"] else ""
    msg = e["msg"].removeprefix("Value error, ")
    flag = SPEC_FLAG.get(field)
    if flag is None:  # a model-level check: name the flag its message is about
        flag = "--token-budget" if "token_budget" in msg else "--spread" if "spread" in msg else "--requests"
    die(f"rabit simulate: error: argument {named(args, flag)}: {msg}")


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The shared config's workload group from the flags (exit 2 naming the flag)."""
    if args.arrival == "poisson" and args.rate is None and not wants_sessions(args):
        die("rabit simulate: error: argument --rate: required for Poisson arrivals (or use --arrival closed)")
    try:
        return W.with_(
            arrival=args.arrival,
            rate_per_s=W.rate_per_s if args.rate is None else args.rate,
            users=args.users,
            think_s=args.think,
            num_requests=args.requests,
            duration_s=args.duration,
            lengths=args.lengths,
            spread=args.spread,
            policy=args.policy,
            token_budget=args.token_budget,
            max_batch=args.max_batch,
            admission=args.kv_admission,
            timeout_s=args.timeout,
            kv_pool_tokens=args.kv_pool_tokens,
            seed=args.seed,
            engine=args.engine or W.engine,
            prefix_caching=args.prefix_caching,
            async_scheduling=args.async_scheduling,
            replicas=args.replicas,
            router=args.router,
            prefix_cache_frac=args.prefix_share,
            prefix_groups=args.prefix_groups,
        )
    except ValidationError as exc:
        _spec_error(exc, args)


def disagg_from_args(args: argparse.Namespace) -> dict:
    """The config's ``disagg`` group from the flags (exit 2 naming an unknown GPU)."""
    from core import catalog

    for flag, slug in (("--prefill-gpu", args.prefill_gpu), ("--decode-gpu", args.decode_gpu)):
        if slug is not None and slug not in catalog.gpus():
            die(
                f"rabit simulate: error: argument {flag}: unknown GPU '{slug}'; known: {', '.join(sorted(catalog.gpus()))}"
            )
    return {
        "enabled": args.disagg,
        "prefill_instances": args.prefill_instances,
        "prefill_tp": args.prefill_tp,
        "prefill_gpu": args.prefill_gpu,
        "decode_instances": args.decode_instances,
        "decode_tp": args.decode_tp,
        "decode_gpu": args.decode_gpu,
        "overlap": args.overlap,
    }


def deployment_payload(d) -> dict:
    """The deployment's keys of the JSON contract (module docstring) from a :class:`DeploymentResult`; in
    saturation its replicas' and pools' latencies are null as the run's are (``latency_withheld`` says why)."""
    withheld = bool(d.result.summary.latency_withheld)
    lat = {"queue_p95_s", "ttft_p95_s", "e2e_p95_s"}
    none = {"p50": None, "p95": None, "p99": None, "mean": None}  # the sample count stays

    def held(k: str, v):
        if not withheld:
            return v
        if k in lat:
            return None
        return {**v, **none} if k in LATENCY_KEYS and isinstance(v, dict) else v

    out = {
        "mode": d.mode,
        "replicas": d.layout.instances,
        "per_replica_rate_per_s": d.per_replica_rate_per_s,
        "router": d.layout.router,
        "load_imbalance": d.load_imbalance,
        "replica_utilization": [r.utilization for r in d.replicas],
        "per_replica": [{k: held(k, v) for k, v in r.model_dump().items()} for r in d.replicas],
        "loop": d.result.loop,
        "fallback_reason": d.result.fallback_reason,
    }
    if d.mode == "disaggregated":
        out["kv_transfer_s"] = d.kv_transfer_s.model_dump() if d.kv_transfer_s is not None else None
        out["kv_transfer_share_of_ttft"] = d.kv_transfer_share_of_ttft
        out["kv_path"] = d.kv_path
        out["pools"] = {k: {f: held(f, x) for f, x in v.model_dump().items()} for k, v in (d.pools or {}).items()}
    return out


def _trace(args: argparse.Namespace) -> tuple[tuple[tuple[int, int], ...] | None, tuple[int, ...] | None]:
    """The ``--trace`` rows and the adapter each names (None without a trace or an adapter column)."""
    if not args.trace:
        return None, None
    text = read_file(args.trace, "--trace", MAX_TABLE_BYTES)  # a regular UTF-8 file within its size
    try:
        return parse_trace(text), parse_trace_adapters(text)
    except ValueError as exc:
        die(f"rabit simulate: error: argument --trace: {exc}")


def spec_from_args(args: argparse.Namespace, cfg: RabitConfig) -> SimSpec:
    trace, names = _trace(args)
    try:
        spec = sim_spec(cfg, trace=trace, adapter_trace=names if cfg.adapters.enabled else None)
    except ValidationError as exc:
        _spec_error(exc, args)
    for prob in workload_problems(cfg, trace):
        flag = "--trace" if prob.field == "trace" else "--kv-pool-tokens"
        die(f"rabit simulate: error: argument {named(args, flag)}: {prob.message}")
    return spec


def _adapters(args: argparse.Namespace):
    """The adapters group; a trace that names each request's adapter serves as many adapters as it names (unless
    ``--adapters`` says otherwise)."""
    a = adapters_from_args(args)
    _, names = _trace(args)
    if names and args.adapters is None:
        a = a.with_(count=max(a.count, max(names) + 1))
    if names and a.count <= max(names):
        die(
            f"rabit simulate: error: argument --adapters: the trace names {max(names) + 1} adapters, more than {a.count}"
        )
    return a


def _pct(p: dict) -> str:
    def one(v):
        return fmt_time(v) if v is not None else "withheld"

    return f"p50 {one(p['p50'])}, p95 {one(p['p95'])}, p99 {one(p['p99'])} (n={p['n']:,})"


def _engine_defaults(args: argparse.Namespace) -> None:
    """--engine: the engine's documented scheduler defaults on this GPU, for the flags left at their defaults."""
    if not args.engine:
        return
    from core import catalog
    from core.catalog import engine_defaults

    try:
        d = engine_defaults(args.engine, catalog.gpu(args.gpu))
    except KeyError as exc:
        die(f"rabit simulate: error: argument --gpu: {exc.args[0]}")
    dest = {"admission": "kv_admission"}  # the flag's name where it is not the field's
    current = {f: getattr(args, dest.get(f, f)) for f in d.spec_fields()}
    for field, value in d.fill(current, W.model_dump()).items():
        setattr(args, dest.get(field, field), value)


#: Flags a simulation does not read in a given mode, with why (refused when given: nothing is ignored silently).
def _unused(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    if args.arrival == "closed":
        out["rate"] = "with --arrival closed: each closed-loop user sends its next request after --think"
    else:
        why = "with --arrival poisson: requests arrive at --rate (give --arrival closed for a closed loop)"
        out.update(users=why, think=why)
    if args.trace:
        why = "with --trace: the trace's rows are the request lengths"
        out.update(lengths=why, spread=why)
    elif args.lengths == "fixed":
        out["spread"] = "with --lengths fixed: every request has the mean lengths (give --lengths uniform or lognormal)"
    return out


def run(args: argparse.Namespace) -> int:
    fill_from_config(args, CONFIG_DEST)
    if wants_sessions(args):  # --rate is the sessions' rate there, not the workload's
        return run_sessions(args, workload_from_args(argparse.Namespace(**{**vars(args), "rate": None})))
    refuse_unused(args, "rabit simulate", _unused(args))
    refuse_attention_flags(args, "rabit simulate", training=False)
    _engine_defaults(args)
    trace, _ = _trace(args)
    fill_lengths(args, trace)  # with a trace its lengths are the run's: --input / --output are neither used nor checked
    if args.input < 1 or args.output < 1:
        die(f"rabit simulate: error: argument {'--input' if args.input < 1 else '--output'}: must be at least 1")
    cfg = config_from_args(
        args,
        input_tokens=args.input,
        output_tokens=args.output,
        workload=workload_from_args(args),
        adapters=_adapters(args),
        disagg=disagg_from_args(args),
    )
    spec = spec_from_args(args, cfg)
    layout = layout_of(cfg)
    try:
        d = simulate_deployment(cfg, spec, layout, budget=cli_budget(spec.num_requests))
    except ValueError as exc:
        die(f"rabit simulate: error: {exc}")
    r = d.result
    s = r.summary.reported()  # in saturation: no latency, and why
    payload = {
        "model": cfg.model_label,
        "gpu": cfg.gpu,
        "gpus": cfg.gpus,
        "tp": cfg.tp,
        "pp": cfg.pp,
        **attention_payload(cfg),
        "arrival": spec.arrival,
        "rate_per_s": spec.rate_per_s if spec.arrival == "poisson" else None,
        "policy": spec.policy,
        "kv_admission": spec.admission,
        "max_batch": spec.max_batch,
        "token_budget": spec.token_budget,
        "engine": cfg.workload.engine,
        "prefix_caching": spec.prefix_caching,
        "async_scheduling": spec.async_scheduling,
        "seed": spec.seed,
        **s,
        "kv_pool_tokens": r.kv_pool_tokens,
        "capacity_requests_per_s": r.capacity.requests_per_s,
        "capacity_output_tokens_per_s": r.capacity.output_tokens_per_s,
        "capacity_batch": r.capacity.batch,
        "capacity_limited_by": r.capacity.limited_by,
        **deployment_payload(d),
    }
    ad = r.summary.adapters
    if ad is not None:  # multi-LoRA serving: the adapters' memory, loads and the queueing they caused
        payload.update(adapter_payload(cfg, serving_memory(cfg)))
        payload.update(
            {
                "adapter_loads": ad.loads,
                "adapter_loads_from_storage": ad.loads_from_storage,
                "adapter_load_s": ad.load_s.model_dump(),
                "adapter_load_time_share": ad.load_time_share,
                "adapter_blocked_requests": ad.blocked_requests,
                "adapter_wait_s": ad.wait_s.model_dump(),
                "adapters_in_batch_mean": ad.distinct_mean,
                "adapters_seen": ad.adapters_seen,
                "capacity_adapter_slot_wait_s": r.capacity.adapter_slot_wait_s,
            }
        )
    if d.mode == "disaggregated":
        payload["gpus"] = layout.gpus
        shape = (
            f"{layout.prefill.instances} prefill x {layout.prefill.gpu} TP {layout.prefill.tp} + "  # type: ignore[union-attr]
            f"{layout.decode.instances} decode x {layout.decode.gpu} TP {layout.decode.tp}"  # type: ignore[union-attr]
        )
    else:
        shape = (
            f"{layout.replicas} replica{'s' if layout.replicas != 1 else ''} of TP {cfg.tp} x PP {cfg.pp}, "
            f"{sig(d.per_replica_rate_per_s)} requests/s each"
        )
    human = "\n".join(
        [
            f"{payload['model']} on {payload['gpus']} x {cfg.gpu}: {shape} ({layout.router}); {spec.policy}, "
            f"{spec.admission}; {s['requests']:,} requests, {s['completed']:,} completed",
            *(
                [f"  latency withheld, {s['latency_withheld']}"]
                if s["latency_withheld"]
                else [
                    f"  TTFT   {_pct(s['ttft_s'])}",
                    f"  ITL    {_pct(s['itl_s'])}",
                    f"  E2E    {_pct(s['e2e_s'])}",
                    f"  queue  {_pct(s['queue_s'])}",
                ]
            ),
            f"  throughput {sig(s['throughput_requests_per_s'])} req/s, {s['throughput_tokens_per_s']:,.0f} output tok/s "
            f"(closed-form max {sig(r.capacity.requests_per_s)} req/s at batch {r.capacity.batch:.0f}, "
            f"{r.capacity.limited_by})",
            f"  KV pool {r.kv_pool_tokens:,} tokens, mean occupancy {s['kv_occupancy_mean']:.0%}; prefill share of time "
            f"{s['prefill_time_share']:.0%}; GPU busy {s['gpu_busy_share']:.0%}",
            f"  preemptions {s['preemptions']:,} ({sig(s['preemptions_per_request'])} per request), rejected "
            f"{s['rejected']:,}, timed out {s['timed_out']:,}" + (f"\n  {s['thrash_note']}" if s["thrash"] else ""),
            ("  SATURATED: " if s["saturated"] else "  stable: " if s["saturation_verdict"] == "stable" else "  ")
            + s["saturation_reason"],
        ]
        + (
            [
                f"  adapters: {ad.loads:,} loads ({ad.loads_from_storage:,} from storage), load p50 "
                f"{fmt_time(ad.load_s.p50 or 0)}, {ad.load_time_share:.1%} of busy time; {ad.blocked_requests:,} "
                f"requests waited for a slot (p95 {fmt_time(ad.wait_s.p95) if ad.wait_s.p95 is not None else 'withheld'}"
                f"); {sig(ad.distinct_mean)} adapters per batch on average"
            ]
            if ad is not None
            else []
        )
    )
    human += "".join(
        f"\n  {x.pool} {x.replica}: {x.requests:,} requests ({sig(x.rate_per_s)}/s), busy {x.utilization:.0%}"
        for x in d.replicas
    ) + (f"\n  load imbalance (max / mean requests) {sig(d.load_imbalance)}" if len(d.replicas) > 1 else "")
    if d.mode == "disaggregated" and d.kv_transfer_s is not None:
        human += f"\n  KV transfer ({d.kv_path}) {_pct(d.kv_transfer_s.model_dump())}, " + (
            f"{d.kv_transfer_share_of_ttft:.1%} of the mean TTFT" if d.kv_transfer_share_of_ttft is not None else ""
        )
    rg = deployment_spread(cfg, spec, d)
    withheld = r.summary.latency_withheld
    with_ranges(payload, {k: v for k, v in rg.ranges.items() if not (withheld and k.split(".")[0] in LATENCY_KEYS)})
    payload["saturated_at_bounds"] = {"pessimistic": rg.saturated_at["low"], "optimistic": rg.saturated_at["high"]}
    payload["saturation_range"] = rg.verdict_text()
    shown = [
        f"{k} {fmt_time(rg.ranges[k].low)} ... {fmt_time(rg.ranges[k].high)}"
        for k in ("ttft_s.p95", "e2e_s.p95")
        if rg.ranges[k].basis != "none" and not withheld
    ]
    human += (
        f"\n  ranges ({payload['range_basis']}): "
        + ("; ".join(shown) if shown else "none for the latencies (withheld)" if withheld else "none")
        + f"\n  saturation: {rg.verdict_text()}"
    )
    with_calibrated(
        payload,
        args,
        cfg,
        {f"{m}.{q}": f"{m}.{q}" for m in ("ttft_s", "itl_s", "e2e_s") for q in ("p50", "p99")}
        | {"throughput_tokens_per_s": "throughput_tokens_per_s"},
    )
    emit(payload, args.json, human)
    return 0
