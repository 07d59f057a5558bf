"""``simulate_sessions(cfg, sessions) -> SessionResult``: multi-turn sessions on the config's deployment, and what a
team sizing for agents reads from it: TTFT by turn index, the prefix hit rate, evictions, and the cost per session
and per agent-hour.

Cost: the deployment's GPUs are paid for the whole run, ``C = R g p`` [USD/h] for ``R`` replicas of ``g`` GPUs at
``p`` USD per GPU-hour (the catalog's median on-demand price). Over the run's span ``T`` (first arrival to last
end)::

    cost per session   = C T / sessions completed
    cost per agent-hour = C T / sum over sessions of (end - start)

so a deployment kept busy by ``N`` concurrent agents costs ``C / N`` per agent-hour. Example: 2 replicas of 8 GPUs
at $3/GPU-h serving 32 agents all the time: 48 / 32 = $1.50 per agent-hour.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core import catalog
from core.base import WorkBudget
from core.config import Deployment, Lengths, RabitConfig, Sessions, SimSpec, as_deployment
from core.serving import session_compiled
from core.serving.session_compiled import SessionRun
from core.serving.sessions import build_sessions
from core.serving.sim import compiled
from core.serving.sim.engine import DONE
from core.serving.sim.metrics import MIN_N_P95
from core.serving.simulation import SimResult, check_loop, kv_pool, max_throughput, replica_timing, result_of, sim_spec


def session_spec(cfg: RabitConfig, sessions: Sessions) -> SimSpec:
    """The simulator's workload of a session run: the config's scheduler, and session ``s``'s first turn as request
    ``s`` of a plain Poisson run at the session rate (its gap, prompt and output)."""
    n = sessions.num_sessions if sessions.trace is None else 1 + max(t.session for t in sessions.trace)
    return sim_spec(
        cfg,
        input=sessions.first_input,
        output=sessions.output,
        arrival="poisson",
        rate_per_s=sessions.rate_per_s,
        num_requests=n,
        duration_s=None,
        prefix_cache_frac=0.0,
        trace=None,
        adapter_trace=None,
    )


@dataclass(frozen=True)
class TurnLatency:
    """TTFT of the turns at one turn index (1 = a session's first) [s]; p95 withheld under 20 samples."""

    turn: int
    n: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    input_tokens_mean: float
    hit_frac: float  # cached share of these turns' prompt tokens


@dataclass(frozen=True)
class SessionResult:
    """One session run: the deployment's per-turn records (``result``, one request per turn) and the session view."""

    result: SimResult
    session: np.ndarray  # per turn (request): its session
    turn: np.ndarray  # its index in the session (0-based)
    replica: np.ndarray  # the replica it was routed to
    hit_tokens: np.ndarray  # prompt tokens found cached at its first admission
    by_turn: tuple[TurnLatency, ...]
    ttft_p95_s: float | None  # over every turn
    prefix_hit_rate: float  # cached tokens / prompt tokens, over the admitted turns
    evicted_prefixes: int  # whole session prefixes evicted
    evicted_tokens: int  # cached tokens evicted (block-size multiples)
    # tokens of the context a turn's previous turn left (whole blocks, up to all but this turn's last prompt token)
    # that this turn computed again: its prefix was evicted, it went to another replica, or no room at admission
    recomputed_tokens: int
    sessions: int
    sessions_completed: int  # every turn done
    replicas: int
    gpus: int
    span_s: float
    agent_hours: float
    usd_per_hour: float | None  # None: the GPU has no price row
    cost_per_session_usd: float | None
    cost_per_agent_hour_usd: float | None
    loop: str = "python"
    fallback_reason: str | None = None  # why the Python loop ran it (None: the compiled loop did)

    def payload(self) -> dict[str, Any]:
        """The JSON view (the CLI's ``sessions`` object)."""
        s = self.result.summary
        return {
            "loop": self.loop,
            "fallback_reason": self.fallback_reason,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "sessions": self.sessions,
            "sessions_completed": self.sessions_completed,
            "turns": int(self.turn.size),
            "ttft_p95_s": self.ttft_p95_s,
            "ttft_by_turn": [
                {
                    "turn": t.turn,
                    "n": t.n,
                    "ttft_p50_s": t.ttft_p50_s,
                    "ttft_p95_s": t.ttft_p95_s,
                    "input_tokens_mean": t.input_tokens_mean,
                    "hit_frac": t.hit_frac,
                }
                for t in self.by_turn
            ],
            "prefix_hit_rate": self.prefix_hit_rate,
            "evicted_prefixes": self.evicted_prefixes,
            "evicted_tokens": self.evicted_tokens,
            "recomputed_tokens": self.recomputed_tokens,
            "preemptions": int(self.result.preemptions.sum()),
            "span_s": self.span_s,
            "agent_hours": self.agent_hours,
            "usd_per_hour": self.usd_per_hour,
            "cost_per_session_usd": self.cost_per_session_usd,
            "cost_per_agent_hour_usd": self.cost_per_agent_hour_usd,
            "rejected": s.rejected,
            "timed_out": s.timed_out,
            "saturation_verdict": s.saturation_verdict,
        }


def simulate_sessions(
    dep: Deployment | RabitConfig,
    sessions: Sessions,
    *,
    replicas: int | None = None,
    budget: WorkBudget | None = None,
    timing: str = "auto",
    loop: str = "auto",
    batch_limits: tuple[int, int] | None = None,
) -> SessionResult:
    """Simulate ``sessions`` on ``replicas`` replicas of the config's replica (default: the config's replicas),
    deterministic in the workload's seed, on the compiled loop where it takes the run (``loop="auto"``;
    :func:`core.serving.session_compiled.fallback_reason`), else the Python one: the same records either way. Raises
    ``ValueError`` when a replica has no room for a KV cache, and :class:`core.base.limits.BudgetExceeded` past the
    work ``budget``."""
    check_loop(loop)
    dep = as_deployment(dep)
    cfg = dep.config
    R = replicas if replicas is not None else cfg.replicas
    if R < 1:
        raise ValueError(f"replicas must be at least 1, got {R}")
    spec = session_spec(cfg, sessions)
    if batch_limits is not None:
        spec = spec.with_(max_batch=batch_limits[0], token_budget=batch_limits[1])
    sm, tm = replica_timing(dep, spec, timing, sessions=True)
    pool = kv_pool(dep, spec)
    why = compiled.ASKED if loop == "python" else None
    why = why or session_compiled.fallback_reason(spec, tm, pool, R, spec.num_requests or 0)
    got = session_compiled.run(spec, sessions, tm, pool, R, budget) if why is None else None
    if why is None and got is None:
        why = compiled.PAST_TABLE  # or the host tier reached: the Python loop times those iterations
    if got is None:
        ss = build_sessions(spec, sessions, tm, pool, R)
        ss.run(budget)
        got = ss.outcome()
    # the closed-form capacity at the turns' mean lengths (every prompt token computed: a bound from below)
    n = int(got.session.size)
    inp = np.asarray(got.plan.inp, dtype=float)
    out = np.asarray(got.plan.out, dtype=float)
    cap_spec = spec.with_(
        input=Lengths(kind="fixed", mean=max(1.0, float(inp.mean()))),
        output=Lengths(kind="fixed", mean=max(1.0, float(out.mean()))),
    )
    one = max_throughput(dep, cap_spec, pool=pool, sm=sm)
    cap = one.model_copy(
        update={"requests_per_s": R * one.requests_per_s, "output_tokens_per_s": R * one.output_tokens_per_s}
    )
    res = result_of(
        spec.with_(num_requests=max(1, n)),
        got.records,
        cap,
        int(pool.blocks * pool.block),
        tm.exact_shape,
        one.residence_s,
        front_end=dep.assumptions,
    )
    res = replace(res, loop="python" if why else "compiled", fallback_reason=why)
    return session_result(got, res, dep, R)


def session_result(run: SessionRun, res: SimResult, dep: Deployment, R: int) -> SessionResult:
    """The session view of a finished run (see the module docstring for the cost)."""
    n = int(run.session.size)
    session, turn, replica, hits = run.session, run.turn, run.replica, run.hit_tokens
    done = res.status == DONE
    ttft = res.first_token_s - res.arrival_s
    admitted = np.isfinite(res.admitted_s)
    by_turn = []
    for k in range(int(turn.max()) + 1 if n else 0):
        m = turn == k
        d = m & done
        x = ttft[d]
        tok = res.input_tokens[m & admitted]
        by_turn.append(
            TurnLatency(
                turn=k + 1,
                n=int(x.size),
                ttft_p50_s=float(np.percentile(x, 50)) if x.size else None,
                ttft_p95_s=float(np.percentile(x, 95)) if x.size >= MIN_N_P95 else None,
                input_tokens_mean=float(res.input_tokens[m].mean()) if m.any() else 0.0,
                hit_frac=float(hits[m & admitted].sum() / tok.sum()) if tok.sum() else 0.0,
            )
        )
    all_ttft = ttft[done]
    recomputed = _recomputed(session, turn, hits, res, admitted, run.block_tokens)
    prompt = res.input_tokens[admitted].sum()
    n_sessions = run.plan.count
    started = np.full(n_sessions, np.nan)
    first = turn == 0
    started[session[first]] = res.arrival_s[first]
    ended = run.ended_s
    last_turn = np.asarray(run.plan.turns, dtype=np.int64) - 1
    full = np.zeros(n_sessions, dtype=bool)
    ok = done & (turn == last_turn[session])
    full[session[ok]] = True
    live = np.isfinite(started) & np.isfinite(ended)
    agent_s = float((ended[live] - started[live]).sum())
    span = float(np.nanmax(res.finish_s) - np.nanmin(res.arrival_s)) if n else 0.0
    cfg = dep.config
    gpus = R * cfg.replica_gpus
    price = catalog.gpu_price(cfg.gpu, catalog.prices())
    usd_h = gpus * price.usd_per_gpu_hour if price is not None else None
    cost = usd_h * span / 3600 if usd_h is not None else None
    return SessionResult(
        result=res,
        session=session,
        turn=turn,
        replica=replica,
        hit_tokens=hits,
        by_turn=tuple(by_turn),
        ttft_p95_s=float(np.percentile(all_ttft, 95)) if all_ttft.size >= MIN_N_P95 else None,
        prefix_hit_rate=float(hits[admitted].sum() / prompt) if prompt else 0.0,
        evicted_prefixes=run.evicted_prefixes,
        evicted_tokens=run.evicted_blocks * run.block_tokens,
        recomputed_tokens=recomputed,
        sessions=n_sessions,
        sessions_completed=int(full.sum()),
        replicas=R,
        gpus=gpus,
        span_s=span,
        agent_hours=agent_s / 3600,
        usd_per_hour=usd_h,
        cost_per_session_usd=cost / full.sum() if cost is not None and full.sum() else None,
        cost_per_agent_hour_usd=cost / (agent_s / 3600) if cost is not None and agent_s > 0 else None,
        loop=res.loop,
        fallback_reason=res.fallback_reason,
    )


def _recomputed(
    session: np.ndarray, turn: np.ndarray, hits: np.ndarray, res: SimResult, admitted: np.ndarray, block: int
) -> int:
    """Prefix tokens the admitted later turns computed again: for turn ``k`` after a completed turn ``k - 1`` of
    ``I'`` input and ``O'`` output tokens, ``min(B floor((I' + O' - 1) / B), B floor((I - 1) / B)) - hit`` summed
    (``B`` the block size; what an unbounded cache on the session's own replica would have found, less what was)."""
    if not turn.size:
        return 0
    order = np.lexsort((turn, session))
    s, k = session[order], turn[order]
    prev = np.zeros(order.size, dtype=bool)
    prev[1:] = (s[1:] == s[:-1]) & (k[1:] == k[:-1] + 1)
    cur, before = order[1:][prev[1:]], order[:-1][prev[1:]]
    ok = (res.status[before] == DONE) & admitted[cur]
    cur, before = cur[ok], before[ok]
    left = (res.input_tokens[before] + res.output_tokens[before] - 1) // block * block
    cap = (res.input_tokens[cur] - 1) // block * block
    return int(np.maximum(np.minimum(left, cap) - hits[cur], 0).sum())
