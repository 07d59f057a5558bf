"""``rabit simulate --sessions N``: multi-turn sessions (coding agents, chat) on the deployment, and with
``--ttft-p95 T`` the fewest GPUs of each kind that serve ``--agents N`` concurrent agents at that p95 TTFT per turn.

JSON keys (contract): ``model``, ``gpu``, ``tp``, ``pp``, ``replicas``; ``session_workload`` (the session fields
as run); ``sessions`` (``loop`` ("compiled" or "python": the event loop that ran it, the same records either way),
``fallback_reason`` (why the Python loop ran it; null on the compiled loop), ``replicas``, ``gpus``, ``sessions``, ``sessions_completed``, ``turns``,
``ttft_p95_s``, ``ttft_by_turn`` [{``turn``, ``n``, ``ttft_p50_s``, ``ttft_p95_s``, ``input_tokens_mean``,
``hit_frac``}], ``prefix_hit_rate``, ``evicted_prefixes``, ``evicted_tokens``, ``preemptions``, ``span_s``,
``agent_hours``, ``usd_per_hour``, ``cost_per_session_usd``, ``cost_per_agent_hour_usd``, ``rejected``,
``timed_out``, ``saturation_verdict``); with ``--ttft-p95``, ``sizing`` ({``agents``, ``ttft_p95_target_s``,
``answer`` (the cheapest option that meets, or null), ``options`` [{``gpu``, ``replicas``, ``gpus``,
``usd_per_hour``, ``ttft_p95_s``, ``cost_per_agent_hour_usd``, ``prefix_hit_rate``, ``meets``, ``reason``}]}).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from cli.common import cli_budget, config_file, config_from_args, die, emit, given, read_file
from core.base import MAX_TABLE_BYTES, fmt_time, sig
from core.config import SESSION_ARRIVALS, Lengths, Sessions, describe_validation_error, parse_session_trace
from core.decision import SIZING_GPUS, SessionSizing, size_sessions
from core.serving import simulate_sessions

S = Sessions()
#: Session flag -> Sessions field, for error messages.
SESSION_FLAG = {
    "num_sessions": "--sessions",
    "rate_per_s": "--rate",
    "arrival": "--session-arrival",
    "cv": "--session-cv",
    "agents": "--agents",
    "turns": "--turns",
    "gap_s": "--gap",
    "gap_cv": "--gap-cv",
    "first_input": "--first-input",
    "new_input": "--new-input",
    "output": "--turn-output",
    "trace": "--session-trace",
}


def add_session_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sessions (multi-turn: agents and chat)")
    g.add_argument(
        "--sessions",
        type=int,
        metavar="N",
        help=f"simulate N multi-turn sessions instead of independent requests (default workload: {S.turns.mean:g} "
        f"turns, {S.first_input.mean:g} first-turn tokens, {S.new_input.mean:g} new and {S.output.mean:g} output "
        f"tokens a turn, {S.gap_s:g} s gaps); --rate is then sessions per second",
    )
    g.add_argument(
        "--session-trace",
        metavar="FILE",
        help="replay recorded sessions: CSV / JSONL with session_id, turn or timestamp, input_tokens, output_tokens; "
        "or OpenTelemetry spans with gen_ai.usage.input_tokens / output_tokens",
    )
    g.add_argument("--session-arrival", choices=SESSION_ARRIVALS, help=f"how sessions start (default {S.arrival})")
    g.add_argument("--session-cv", type=float, help="gamma arrivals: coefficient of variation of the gaps (>1: bursts)")
    g.add_argument(
        "--agents", type=int, help=f"concurrent agents (--session-arrival agents, sizing; default {S.agents})"
    )
    g.add_argument("--turns", type=float, help=f"mean turns per session (default {S.turns.mean:g})")
    g.add_argument("--gap", type=float, help=f"mean think / tool-call gap between turns [s] (default {S.gap_s:g})")
    g.add_argument("--gap-cv", type=float, help="coefficient of variation of the gaps (0 fixed, 1 exponential)")
    g.add_argument("--first-input", type=float, help="mean tokens of a session's first request")
    g.add_argument("--new-input", type=float, help="mean tokens a later turn adds (user message, tool output)")
    g.add_argument("--turn-output", type=float, help="mean output tokens of a turn")
    g.add_argument("--no-affinity", action="store_true", help="route every turn to the least loaded replica")
    g.add_argument(
        "--ttft-p95", type=float, metavar="SECONDS", help="size: the fewest GPUs meeting this p95 TTFT per turn"
    )
    g.add_argument(
        "--size-gpus",
        nargs="?",
        const=",".join(SIZING_GPUS),
        metavar="KIND,KIND",
        help=f"GPU kinds the sizing compares (given alone: {', '.join(SIZING_GPUS)}; default: --gpu)",
    )


def wants_sessions(args: argparse.Namespace) -> bool:
    """Sessions flags given, or a ``--config FILE`` whose config has a sessions group."""
    if args.sessions or args.session_trace or args.ttft_p95 is not None or args.size_gpus:
        return True
    file_cfg = config_file(args)
    return file_cfg is not None and file_cfg.sessions is not None


def _lengths(base: Lengths, mean: float | None) -> Lengths:
    return base if mean is None else base.model_copy(update={"mean": mean})


def sessions_from_args(args: argparse.Namespace) -> Sessions:
    """The session workload: ``--config FILE``'s sessions group (else the defaults), then the flags given."""
    file_cfg = config_file(args)
    base = file_cfg.sessions if file_cfg is not None and file_cfg.sessions is not None else S
    trace = None
    if args.session_trace:
        text = read_file(args.session_trace, "--session-trace", MAX_TABLE_BYTES)
        try:
            trace = parse_session_trace(text)
        except ValueError as exc:
            die(f"rabit simulate: error: argument --session-trace: {exc}")
    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "num_sessions": args.sessions,
            # the command line's --rate (a config file's workload.rate_per_s is the request rate, not the sessions')
            "rate_per_s": args.rate if given(args, "rate") else None,
            "arrival": args.session_arrival,
            "cv": args.session_cv,
            "agents": args.agents,
            "gap_s": args.gap,
            "gap_cv": args.gap_cv,
            "trace": trace,
        }.items()
        if v is not None
    }
    if args.no_affinity:
        changes["affinity"] = False
    try:
        for field, mean in (
            ("turns", args.turns),
            ("first_input", args.first_input),
            ("new_input", args.new_input),
            ("output", args.turn_output),
        ):
            if mean is not None:
                if mean < 1:
                    raise ValueError(f"{SESSION_FLAG[field]}: must be at least 1, got {mean:g}")
                changes[field] = _lengths(getattr(base, field), mean)
        return base.with_(**changes)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        die(
            f"rabit simulate: error: argument {SESSION_FLAG.get(field, '--sessions')}: {describe_validation_error(exc)}"
        )
    except ValueError as exc:
        die(f"rabit simulate: error: argument {exc}")


def _sizing_payload(z: SessionSizing) -> dict[str, Any]:
    def one(o) -> dict[str, Any]:
        return {**asdict(o), "meets": o.meets}

    return {
        "agents": z.agents,
        "ttft_p95_target_s": z.ttft_p95_target_s,
        "answer": one(z.answer) if z.answer is not None else None,
        "options": [one(o) for o in z.options],
    }


def run_sessions(args: argparse.Namespace, workload) -> int:
    """``rabit simulate`` with sessions (the module docstring); ``workload``: the config's workload group."""
    if args.disagg:
        die("rabit simulate: error: argument --disagg: sessions run on aggregated replicas")
    if args.trace:
        die("rabit simulate: error: argument --trace: give a session trace with --session-trace")
    if args.size_gpus and args.ttft_p95 is None:
        die("rabit simulate: error: argument --size-gpus: give the target with --ttft-p95 SECONDS")
    if args.ttft_p95 is not None and not args.ttft_p95 > 0:
        die(f"rabit simulate: error: argument --ttft-p95: must be a positive number of seconds, got {args.ttft_p95:g}")
    sessions = sessions_from_args(args)
    cfg = config_from_args(args, workload=workload)
    cfg = cfg.with_(sessions=sessions)
    try:
        r = simulate_sessions(cfg, sessions, budget=cli_budget(sessions.num_sessions))
    except ValueError as exc:
        die(f"rabit simulate: error: {exc}")
    payload: dict[str, Any] = {
        "model": cfg.model_label,
        "gpu": cfg.gpu,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "replicas": r.replicas,
        "session_workload": sessions.model_dump(mode="json", exclude={"trace"})
        | {"trace_turns": len(sessions.trace) if sessions.trace else None},
        "sessions": r.payload(),
    }
    p95 = r.ttft_p95_s
    cost = r.cost_per_agent_hour_usd
    lines = [
        f"{cfg.model_label} on {r.gpus} x {cfg.gpu} ({r.replicas} replica{'s' if r.replicas != 1 else ''} of TP "
        f"{cfg.tp}): {r.sessions:,} sessions, {r.turn.size:,} turns, {r.sessions_completed:,} sessions completed "
        f"(the {r.loop} event loop" + (f": {r.fallback_reason}" if r.fallback_reason else "") + ")",
        f"  TTFT p95 over every turn {fmt_time(p95) if p95 is not None else 'withheld'}; prefix hit rate "
        f"{r.prefix_hit_rate:.0%}; {r.evicted_prefixes:,} prefixes evicted ({r.evicted_tokens:,} tokens)",
        "  by turn: "
        + "; ".join(
            f"{t.turn}: p50 {fmt_time(t.ttft_p50_s) if t.ttft_p50_s is not None else '-'}"
            f" p95 {fmt_time(t.ttft_p95_s) if t.ttft_p95_s is not None else '-'}"
            for t in r.by_turn[:12]
        ),
        f"  cost: ${sig(r.usd_per_hour)}/h; ${sig(r.cost_per_session_usd)} per session, ${sig(cost)} per agent-hour"
        if r.usd_per_hour is not None and cost is not None
        else "  cost: no price for this GPU",
    ]
    if args.ttft_p95 is not None:
        kinds = tuple(k.strip() for k in (args.size_gpus or cfg.gpu).split(",") if k.strip())
        agents = sessions.agents
        try:
            z = size_sessions(
                cfg, sessions, agents=agents, ttft_p95_s=args.ttft_p95, gpus=kinds, budget=cli_budget(None)
            )
        except ValueError as exc:
            die(f"rabit simulate: error: argument --ttft-p95: {exc}")
        payload["sizing"] = _sizing_payload(z)
        a = z.answer
        lines.append(
            f"  sizing for {agents:,} concurrent agents at p95 TTFT <= {fmt_time(args.ttft_p95)} per turn: "
            + (
                f"{a.gpus} x {a.gpu} ({a.replicas} replicas) at ${sig(a.usd_per_hour)}/h, "
                f"${sig(a.cost_per_agent_hour_usd)} per agent-hour"
                if a is not None
                else "no GPU kind searched meets it"
            )
        )
        lines += [
            f"    {o.gpu}: "
            + (f"{o.gpus} GPUs, ${sig(o.usd_per_hour)}/h, p95 {fmt_time(o.ttft_p95_s)}" if o.meets else o.reason)
            for o in z.options
        ]
    emit(payload, args.json, "\n".join(lines))
    return 0
