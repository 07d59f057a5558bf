"""Multi-turn sessions on the compiled loop (:mod:`core.serving.sim.jit_sessions`): where it takes a run, the arrays
it runs on, and the run read back as the Python loop leaves it (:class:`SessionRun`: the deployment's records, and
per turn its session, turn index, replica and cached tokens at admission). Same seed, same bytes: every record,
time-series point and counter equals the Python loop's (:class:`core.serving.sessions.SessionSet`;
``tests/test_session_loop.py`` holds the two to the byte over fixed and drawn shapes).

Every shape of the engine's the aggregated loop takes runs here too: a request timeout (each replica's deadline
heap, ``DL``), prefill-priority scheduling, reserve admission (``RQI[Q_RES]``, from each turn's prompt and the
client's max_tokens) and sliding-window layers, laid out as :func:`core.serving.sim.compiled.run` lays them out;
and a deployment with adapters, whose session runs carry none (on either loop).

Speed: the Python loop spends some 60 us of interpreter time per turn on the engine's steps (about 2.7 a turn);
compiled, a turn costs a few microseconds, so 10,000 sessions of 10 turns on 8 replicas run in well under 2 s.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.config import Draws, Sessions, SimSpec
from core.serving.session_plan import SessionPlan
from core.serving.sim import compiled
from core.serving.sim.compiled_layout import (
    engine_state,
    fleet,
    goes_on,
    grown_engines,
    grown_fleet,
    no_router,
    pool_params,
    run_limits,
)
from core.serving.sim.jit_layout import (
    G_TSN,
    GROW,
    N_G,
    OK,
    Q_REP,
    SessionParams,
    SessionState,
)  # fmt: skip
from core.serving.sim.records import Records

#: The most replicas x sessions the compiled loop's prefix caches hold (three 8-byte words each: 96 MB); past it
#: the Python loop, whose caches hold only the sessions cached.
MAX_CACHE_SLOTS = 4_000_000
#: Why a session run took the Python loop where the plain run's reasons (:data:`compiled.FALLBACK_REASONS`) let
#: the compiled one take it.
CACHE_SLOTS = "more replicas x sessions than the compiled loop's prefix caches hold"
SESSION_FALLBACK_REASONS = (CACHE_SLOTS,)


@dataclass(frozen=True)
class SessionRun:
    """What a session run leaves, whichever loop ran it: the deployment's records (one request per turn, in the
    order the turns were routed) and per turn its session, turn index (0-based), replica and the prompt tokens it
    found cached at its first admission (0: none or never admitted); per session its end [s] (NaN: never); the
    prefix caches' evictions (whole prefixes, blocks)."""

    records: Records
    plan: SessionPlan
    session: np.ndarray
    turn: np.ndarray
    replica: np.ndarray
    hit_tokens: np.ndarray
    ended_s: np.ndarray
    evicted_prefixes: int
    evicted_blocks: int
    block_tokens: int


def _adapterless(timing: Any) -> Any:
    """``timing`` as the session loop reads it: a session run draws no adapters (its replicas
    hold none: :func:`core.serving.sessions.build_sessions`), so every iteration carries none and a timing priced
    for adapters adds nothing to it (``LinearTiming._adapter_s`` of 0 adapters); the gate is asked of it as such."""
    if not getattr(timing, "lora", False):
        return timing
    bare = copy.copy(timing)
    bare.lora = False
    return bare


def fallback_reason(spec: SimSpec, timing, pool, replicas: int, sessions_count: int) -> str | None:
    """Why the compiled loop leaves this session run to the Python loop, or None where it runs it. The aggregated
    loop's extended shapes are asked of the gate (``extended``): a session run's spec carries no shared prefix,
    closed loop or duration of the workload's (its own arrivals); prefill priority, reserve admission, sliding-window
    layers and a request timeout are laid out as :func:`compiled.run` lays them out; a timing priced for adapters is
    asked of as one without them (:func:`_adapterless`)."""
    why = compiled.fallback_reason(spec, _adapterless(timing), pool, replicas, "least-outstanding", extended=True)
    if why is not None:
        return why
    if replicas * max(1, sessions_count) > MAX_CACHE_SLOTS:
        return CACHE_SLOTS
    return None


def run(spec: SimSpec, sessions: Sessions, timing: Any, pool, replicas: int, budget=None) -> SessionRun | None:
    """The session run on the compiled loop, or None where an iteration went past the timing's table (the Python
    loop then times it). Raises :class:`core.base.limits.BudgetExceeded` past ``budget``."""
    from core.base import WorkBudget
    from core.serving.sim.jit_sessions import pass_room, s_loop, s_start

    budget = budget or WorkBudget()
    draws = Draws(spec, np.random.default_rng(spec.seed))
    plan = SessionPlan(sessions, spec, draws)
    S, R, mb = plan.count, int(replicas), int(spec.max_batch)
    n = max(1, len(plan.inp))  # turns: at most one request each
    agents = sessions.arrival == "agents" and sessions.trace is None
    margin = 8 * R + 4 * mb + 64  # what one pass may add at most (jit_sessions.s_loop's margin)
    s = engine_state(spec, pool, R, n, margin + 64, 2 * n + margin + 256)
    p = pool_params(spec, timing, pool, R)  # a LinearTiming (a host tier's too): fallback_reason let no other through
    G, GF = s.G, s.GF
    empty = np.zeros(0)
    f = fleet(empty, no_router(), np.zeros((2, 1)), margin + 64, R)
    # a finished turn's blocks stay cached as the engine's preempted ones do (Engine.keep_cache)
    sp = SessionParams(affinity=bool(sessions.affinity), caching=p.keep, agents=agents, S=S)
    ss = _session_state(spec, plan, pool, R, n, mb)
    if agents:
        m = min(sessions.agents, S)
        starts = np.array([a * sessions.gap_s / m for a in range(m)], dtype=float)
    else:
        starts = np.asarray(plan.starts, dtype=float)
    s_start(ss.SG, GF, ss.sh_t, ss.SHI, starts, S, agents)
    r = run_limits(n, budget)
    while True:
        code = s_loop((r, p, s, f, sp, ss))
        if code == OK:
            break
        if code == GROW:
            # the requests one pass may absorb: the inboxes, the turns due at once, the deadlines held (pass_room)
            s = grown_engines(s, mb, int(pass_room(margin, R, G, GF, s.RI, ss.SG, ss.sh_t, ss.EL)))
            f = grown_fleet(f, G, margin)
        elif not goes_on(code, budget, G, GF):
            return None
    RQF, RQI, GI, CI, tsn = s.RQF, s.RQI, ss.GI, ss.CI, int(G[G_TSN])
    issued = int(G[0])
    parts, gids = compiled.replica_records(
        R, RQF[:, :issued], RQI[:, :issued], s.RF, s.RI, s.ts_rep[:tsn], s.TSF[:, :tsn]
    )
    return SessionRun(
        records=compiled.merged(parts, gids),
        plan=plan,
        session=GI[0, :issued].copy(),
        turn=GI[1, :issued].copy(),
        replica=RQI[Q_REP, :issued].copy(),
        hit_tokens=np.maximum(GI[3, :issued], 0),
        ended_s=ss.SF[1].copy(),
        evicted_prefixes=int(CI[:, 4].sum()),
        evicted_blocks=int(CI[:, 3].sum()),
        block_tokens=int(pool.block),
    )


def _session_state(spec: SimSpec, plan: SessionPlan, pool, R: int, n: int, mb: int) -> SessionState:
    """The session loop's state beside the engine's: every turn not yet routed, every session without a home and
    with nothing cached, the turns' tokens and gaps from ``plan`` (each turn's reserved blocks, under reserve
    admission: its prompt and the client's max_tokens, Pool.blocks_for)."""
    S = plan.count
    GI = np.zeros((4, n), dtype=np.int64)
    GI[3] = -1  # cached tokens at the first admission: not admitted yet
    SI = np.zeros((3, S), dtype=np.int64)
    SI[0] = plan.first
    SI[1] = plan.turn_counts
    SI[2] = -1
    PI = np.zeros((3, n), dtype=np.int64)
    PF = np.zeros((2, n))
    PI[0, : len(plan.inp)], PI[1, : len(plan.out)] = plan.inp, plan.out
    if spec.admission == "reserve":
        PI[2] = (PI[0] + spec.max_output_tokens() + pool.block - 1) // pool.block
    PF[0, : len(plan.gap)], PF[1, : len(plan.at)] = plan.gap, plan.at
    SF = np.full((2, S), np.nan)
    SF[0] = plan.agent_gaps
    CI = np.zeros((R, 5), dtype=np.int64)
    CI[:, :2] = -1
    return SessionState(
        GI=GI,
        SI=SI,
        PI=PI,
        PF=PF,
        SF=SF,
        SG=np.zeros(N_G, dtype=np.int64),
        sh_t=np.zeros(S + 1),
        SHI=np.zeros((3, S + 1), dtype=np.int64),
        CB=np.zeros((3, R, S), dtype=np.int64),
        CI=CI,
        EL=np.zeros(n + mb + 8, dtype=np.int64),
    )
