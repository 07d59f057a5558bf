"""``rabit tune``: the tuning loop, from the engine's three published numbers to the final launch command.

The engine's defaults (or, with ``--log FILE``, the flags and numbers of its start-up log) are the start; the
flags move in a stated order (``--max-model-len``, ``--max-num-seqs``, ``--gpu-memory-utilization``,
``--max-num-batched-tokens``, the KV format) until the target concurrency (``--target-concurrency``, default
``--batch``) is reached or the next step costs more than it returns (:mod:`core.decision.tuning`).

JSON keys: ``engine``, ``target_concurrency``, ``order``, ``stopping_rule``, ``start`` and ``final`` (the five
flags with ``kv_cache_tokens``, ``max_concurrency``, ``concurrency``), ``steps`` ([{change, why, cost, gain_frac,
price_frac, after}]), ``reached``, ``stopped_because``, ``declined``, ``command`` (the final launch command) and
``calibrated`` (assumptions calibrated from the log); ``ranges`` of ``final.kv_cache_tokens`` and
``final.max_concurrency`` (each serving-memory assumption alone at its bounds) with ``range_basis``.
"""

from __future__ import annotations

import argparse

from cli.common import (
    add_cluster_args,
    add_json,
    add_model_args,
    add_range_args,
    add_serving_args,
    config_from_args,
    die,
    emit,
    fill_from_config,
    read_log,
    with_ranges,
)
from core.base import ENGINES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="the tuning loop: which engine flag to move next, and the final command")
    add_model_args(p)
    add_cluster_args(p)
    add_serving_args(p)
    p.add_argument("--engine", choices=ENGINES, help="the serving engine (default: the log's, else vllm)")
    p.add_argument("--target-concurrency", type=int, help="requests of the workload's length at once (default --batch)")
    p.add_argument("--log", metavar="FILE", help="start from this vLLM or SGLang start-up log's flags and numbers")
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.decision import final_ranges, tune

    fill_from_config(args)
    if args.target_concurrency is not None and not 1 <= args.target_concurrency <= 1_000_000:
        die("rabit tune: error: argument --target-concurrency: must be between 1 and 1,000,000")
    log = read_log(args.log, "--log", "tune")[0] if args.log else None
    if args.engine == "trtllm" and log is not None:
        die("rabit tune: error: argument --engine: a start-up log is vLLM's or SGLang's")
    cfg = config_from_args(args)
    plan = tune(cfg, args.target_concurrency, log=log, engine=args.engine)
    lines = [f"target: {plan.target_concurrency} requests of {cfg.context_tokens:,} tokens at once ({plan.engine})"]
    lines += [f"order: {i}. {o}" for i, o in enumerate(plan.order, start=1)]
    s = plan.start
    lines.append(
        f"start: {s.kv_cache_tokens:,} KV tokens, max concurrency {s.max_concurrency:.2f}x at {s.max_model_len:,}, "
        f"token budget {s.token_budget:,}"
    )
    for i, st in enumerate(plan.steps, start=1):
        a = st.after
        lines.append(
            f"step {i}: {st.change} [{st.cost}] -> {a.kv_cache_tokens:,} KV tokens, concurrency {a.concurrency:.2f}, "
            f"token budget {a.token_budget:,}  ({st.why})"
        )
    lines.append(f"stopped: {plan.stopped_because}")
    if plan.declined:
        lines.append(f"declined: {plan.declined}")
    lines.append(plan.command.rstrip())
    payload = with_ranges(plan.as_json(), final_ranges(plan))
    emit(payload, args.json, "\n".join(lines))
    return 0
