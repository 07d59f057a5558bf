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
from core.serving.sim.jit_layout import (
    CLOCK,
    EVENTS,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_LO,
    G_PASSES,
    G_TSN,
    GF_NEXT,
    GF_TIMEOUT,
    GROW,
    I_ASYNC,
    I_HE,
    I_HI,
    I_HP,
    I_HR,
    I_HW,
    I_PPRI,
    I_RSV,
    I_SLD,
    I_TE,
    I_TI,
    I_TP,
    I_TR,
    I_TW,
    I_WIN,
    INF,
    N_G,
    N_GF,
    N_Q,
    N_RF,
    N_RI,
    NO_ROOM,
    OK,
    Q_NX_IN,
    Q_NX_W,
    Q_REP,
    Q_STATUS,
    R_NEXT,
    R_SS,
    SLICE,
    STUCK,
)  # fmt: skip
from core.serving.sim.records import UNFINISHED, Records
from core.serving.sim.timing import compiled_form, host_tier_untouched

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
    """The compiled form of ``timing`` as the session loop reads it: a session run draws no adapters (its replicas
    hold none: :func:`core.serving.sessions.build_sessions`), so every iteration carries none and a timing priced
    for adapters adds nothing to it (``LinearTiming._adapter_s`` of 0 adapters); the gate is asked of it as such."""
    tm: Any = compiled_form(timing)
    if not getattr(tm, "lora", False):
        return tm
    bare = copy.copy(tm)
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
    """The session run on the compiled loop, or None where an iteration went past the timing's table or reached a
    host KV tier (the Python loop then times it). Raises :class:`core.base.limits.BudgetExceeded` past ``budget``."""
    from core.base import WorkBudget
    from core.serving.sim.jit_sessions import pass_room, s_loop, s_start

    budget = budget or WorkBudget()
    tm: Any = compiled_form(timing)  # a LinearTiming: fallback_reason let no other through
    draws = Draws(spec, np.random.default_rng(spec.seed))
    plan = SessionPlan(sessions, spec, draws)
    S, R, mb = plan.count, int(replicas), int(spec.max_batch)
    n = max(1, len(plan.inp))  # turns: at most one request each
    agents = sessions.arrival == "agents" and sessions.trace is None
    sm = tm.sm
    reserve, sliding = spec.admission == "reserve", pool.slide_share > 0
    # a finished turn's blocks stay cached as the engine's preempted ones do (Engine.keep_cache)
    keep = bool(spec.prefix_caching) and not reserve and not sliding
    scal = (
        n, R, int(pool.block), int(spec.token_budget), mb, keep, int(tm.t_max),
        bool(sm.graph_prefill), int(pool.max_context), int(budget.max_events), float(pool.blocks),
        float(pool.full_share), float(pool.seq_blocks_max), 1.0 / pool.blocks if pool.blocks > 0 else 0.0,
        float(tm.q), float(sm.graph_launch_s), float(sm.eager_launch_s), float(sm.graph_max_tokens),
        float(sm.kernels_per_stage), float(tm.pp), float(budget.max_clock_s), bool(sessions.affinity),
        keep, agents, S,
    )  # fmt: skip
    TB = np.array([tm.c0, tm.c1, tm.m0, tm.m1, tm.x], dtype=float)
    G = np.zeros(N_G, dtype=np.int64)
    G[G_LO] = -1
    GF = np.zeros(N_GF)
    GF[GF_NEXT] = INF
    GF[GF_TIMEOUT] = INF if spec.timeout_s is None else float(spec.timeout_s)
    RI = np.zeros((R, N_RI), dtype=np.int64)
    RI[:, [I_HW, I_TW, I_HR, I_TR, I_HP, I_TP, I_HI, I_TI, I_HE, I_TE]] = -1
    RI[:, I_ASYNC] = 1 if spec.async_scheduling else 0
    RI[:, I_RSV] = 1 if reserve else 0
    RI[:, I_PPRI] = 1 if spec.policy == "prefill_priority" else 0
    RI[:, I_SLD] = 1 if sliding else 0
    RI[:, I_WIN] = int(pool.window)
    RF = np.zeros((R, N_RF), dtype=float)
    RF[:, R_NEXT] = INF
    RF[:, R_SS] = float(pool.slide_share)
    hist = np.zeros((R, 2 * pool.block), dtype=np.int64)  # the engine's layout (compiled.run's)
    FH = np.zeros((4, R, mb + 72), dtype=np.int64)
    CH = np.zeros((2, R, mb + 1), dtype=np.int64)
    RQF = np.full((4, n), np.nan)
    RQI = np.zeros((N_Q, n), dtype=np.int64)
    RQI[Q_STATUS] = UNFINISHED
    RQI[Q_REP] = -1
    RQI[Q_NX_W : Q_NX_IN + 1] = -1
    margin = 8 * R + 4 * mb + 64  # what one pass may add at most (jit_sessions.s_loop's margin)
    ev_t, EVI = np.zeros(margin + 64), np.zeros((3, margin + 64), dtype=np.int64)
    ts_cap = 2 * n + margin + 256
    ts_rep, TSF = np.zeros(ts_cap, dtype=np.int64), np.zeros((4, ts_cap))
    stk = np.zeros(R, dtype=np.int64)
    DL = np.zeros((2, R, margin + 64 if spec.timeout_s is not None else 1))  # the deadline heaps (jit_deadline)
    err = np.zeros(1, dtype=np.int64)
    GI = np.zeros((4, n), dtype=np.int64)
    GI[3] = -1  # cached tokens at the first admission: not admitted yet
    SI = np.zeros((3, S), dtype=np.int64)
    SI[0] = plan.first
    SI[1] = plan.turn_counts
    SI[2] = -1
    PI = np.zeros((3, n), dtype=np.int64)
    PF = np.zeros((2, n))
    PI[0, : len(plan.inp)], PI[1, : len(plan.out)] = plan.inp, plan.out
    if reserve:  # each turn's blocks of its prompt and the client's max_tokens, set when routed (Pool.blocks_for)
        PI[2] = (PI[0] + spec.max_output_tokens() + pool.block - 1) // pool.block
    PF[0, : len(plan.gap)], PF[1, : len(plan.at)] = plan.gap, plan.at
    SF = np.full((2, S), np.nan)
    SF[0] = plan.agent_gaps
    SG = np.zeros(N_G, dtype=np.int64)
    sh_t, SHI = np.zeros(S + 1), np.zeros((3, S + 1), dtype=np.int64)
    CB = np.zeros((3, R, S), dtype=np.int64)
    CI = np.zeros((R, 5), dtype=np.int64)
    CI[:, :2] = -1
    EL = np.zeros(n + mb + 8, dtype=np.int64)
    if agents:
        m = min(sessions.agents, S)
        starts = np.array([a * sessions.gap_s / m for a in range(m)], dtype=float)
    else:
        starts = np.asarray(plan.starts, dtype=float)
    s_start(SG, GF, sh_t, SHI, starts, S, agents)
    while True:
        arrays = (TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ev_t, EVI, ts_rep, TSF, stk, err, GI, SI, PI, PF, SF, SG, sh_t, SHI, CB, CI, EL)  # fmt: skip
        code = s_loop((scal, arrays))
        if code == OK:
            break
        if code == GROW:
            room = int(pass_room(margin, R, G, GF, RI, SG, sh_t, EL))
            FH, ev_t, EVI, ts_rep, TSF, DL = _grown_arrays(G, mb, margin, room, FH, ev_t, EVI, ts_rep, TSF, DL)
        elif not _goes_on(code, budget, G, GF):
            return None
    issued = int(G[0])
    parts, gids = compiled.replica_records(
        R, RQF[:, :issued], RQI[:, :issued], RF, RI, ts_rep[: int(G[G_TSN])], TSF[:, : int(G[G_TSN])]
    )
    if not host_tier_untouched(timing, parts, pool):
        return None
    return SessionRun(
        records=compiled.merged(parts, gids),
        plan=plan,
        session=GI[0, :issued].copy(),
        turn=GI[1, :issued].copy(),
        replica=RQI[Q_REP, :issued].copy(),
        hit_tokens=np.maximum(GI[3, :issued], 0),
        ended_s=SF[1].copy(),
        evicted_prefixes=int(CI[:, 4].sum()),
        evicted_blocks=int(CI[:, 3].sum()),
        block_tokens=int(pool.block),
    )


def _grown_arrays(G, mb: int, margin: int, room: int, FH, ev_t, EVI, ts_rep, TSF, DL) -> tuple:
    """The arrays ``s_loop`` asked to grow (GROW): the finish heaps, the event heap, the time series and, with a
    timeout, the deadline heaps (as :func:`core.serving.sim.compiled.run` grows them), for ``room`` requests in the
    next pass (:func:`core.serving.sim.jit_sessions.pass_room`)."""
    if int(G[G_FHMAX]) + mb + 8 > FH.shape[2]:
        FH = compiled._grown(FH, 2 * FH.shape[2])
    if int(G[G_EVN]) + margin > ev_t.shape[0]:
        ev_t, EVI = compiled._grown(ev_t, 2 * ev_t.shape[0]), compiled._grown(EVI, 2 * EVI.shape[1])
    if int(G[G_TSN]) + room > ts_rep.shape[0]:
        size = max(2 * ts_rep.shape[0], int(G[G_TSN]) + 2 * room)
        ts_rep, TSF = compiled._grown(ts_rep, size), compiled._grown(TSF, size)
    if DL.shape[2] > 1 and int(G[G_DLMAX]) + room > DL.shape[2]:  # a timeout's deadline heaps (else one slot)
        DL = compiled._grown(DL, max(2 * DL.shape[2], int(G[G_DLMAX]) + 2 * room))
    return FH, ev_t, EVI, ts_rep, TSF, DL


def _goes_on(code: int, budget, G, GF) -> bool:
    """After ``s_loop`` stopped on ``code`` (neither OK nor GROW): True where the run goes on (a slice done, the
    budget checked), False where the Python loop times it (an iteration past the timing's table); raises on a
    budget past or a stuck replica."""
    if code == SLICE:
        budget.check(int(G[G_PASSES]), float(GF[1]))
        return True
    if code in (CLOCK, EVENTS):
        budget.check(int(G[G_PASSES]), float(GF[1]))
        raise RuntimeError("the compiled loop stopped on a budget its caller's check let pass")
    if code == STUCK:
        raise RuntimeError("a replica can neither admit nor reject the head of its queue")
    if code == NO_ROOM:
        raise RuntimeError("decode run without room for one iteration")
    return False
