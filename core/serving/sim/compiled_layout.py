"""The compiled loops' records built in one place (:mod:`core.serving.sim.jit_layout`'s :class:`Pool`,
:class:`Engines`, :class:`Run` and :class:`Fleet`): every driver (:mod:`core.serving.sim.compiled`,
:mod:`core.serving.sim.compiled_disagg`, :mod:`core.serving.session_compiled`) lays out a pool of replicas with
:func:`pool_params` and :func:`engine_state`, and grows what a slice of its loop asked for (GROW) with
:func:`grown_engines` and :func:`grown_fleet`. Plain Python (no numba).
"""

from __future__ import annotations

import numpy as np

from core.serving.sim.jit_layout import (
    CLOCK,
    EVENTS,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_LO,
    G_PASSES,
    G_TSN,
    GF_DURATION,
    GF_NEXT,
    GF_TIMEOUT,
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
    Q_NX_IN,
    Q_NX_W,
    Q_REP,
    Q_STATUS,
    R_NEXT,
    R_SS,
    SLICE,
    STUCK,
    Engines,
    Fleet,
    Pool,
    Router,
    Run,
)  # fmt: skip
from core.serving.sim.records import UNFINISHED


def grown(x: np.ndarray, size: int) -> np.ndarray:
    """``x`` in an array of ``size`` along its last axis, the rest zeros."""
    out = np.zeros(x.shape[:-1] + (size,), dtype=x.dtype)
    out[..., : x.shape[-1]] = x
    return out


def timing_table(timing) -> np.ndarray:
    """The timing table of a :class:`~core.serving.sim.timing.LinearTiming` (rows c0, c1, m0, m1, x by tokens)."""
    return np.array([timing.c0, timing.c1, timing.m0, timing.m1, timing.x], dtype=float)


def keeps_cache(spec, pool) -> bool:
    """A preempted request's (a finished turn's) full blocks stay in the prefix cache: prefix caching on, under
    preempt-and-recompute, without sliding-window layers (``Engine.keep_cache``)."""
    return bool(spec.prefix_caching) and spec.admission != "reserve" and not pool.slide_share > 0


def pool_params(spec, timing, pool, replicas: int, TB: np.ndarray | None = None) -> Pool:
    """One pool's parameters: ``replicas`` engines of ``pool`` (a :class:`~core.serving.sim.pool.Pool`) on
    ``timing`` (a :class:`~core.serving.sim.timing.LinearTiming`); ``TB``: its timing table where the caller laid
    it out wider (adapters), else :func:`timing_table`."""
    sm = timing.sm
    return Pool(
        nrep=int(replicas),
        B=int(pool.block),
        K=int(spec.token_budget),
        MB=int(spec.max_batch),
        keep=keeps_cache(spec, pool),
        tmax=int(timing.t_max),
        graph_prefill=bool(sm.graph_prefill),
        max_ctx=int(pool.max_context),
        pool_blocks=float(pool.blocks),
        fs=float(pool.full_share),
        seq_max=float(pool.seq_blocks_max),
        inv_P=1.0 / pool.blocks if pool.blocks > 0 else 0.0,
        q=float(timing.q),
        g_launch=float(sm.graph_launch_s),
        e_launch=float(sm.eager_launch_s),
        g_max=float(sm.graph_max_tokens),
        n_k=float(sm.kernels_per_stage),
        pp=float(timing.pp),
        TB=timing_table(timing) if TB is None else TB,
        host_nh=float(timing.host_nh),
        host_h=float(timing.host_h),
    )


def run_limits(n: int, budget) -> Run:
    """The run's limits: ``n`` requests at most, the work ``budget``'s passes and simulated clock."""
    return Run(N=int(n), max_ev=int(budget.max_events), max_clock=float(budget.max_clock_s))


def engine_state(spec, pool, replicas: int, n: int, ev_cap: int, ts_cap: int, rq_rows: int = 4) -> Engines:
    """One pool's engine state for ``n`` requests: its flags (async scheduling, reserve admission, prefill
    priority, sliding-window layers) per replica, every queue empty, every request unfinished; deadline heaps of
    ``ev_cap`` slots under a timeout (else one), a time series of ``ts_cap`` points, ``rq_rows`` rows of per-request
    floats (6: with the adapters' waits)."""
    R, mb = int(replicas), int(spec.max_batch)
    G = np.zeros(N_G, dtype=np.int64)
    G[G_LO] = -1
    GF = np.zeros(N_GF)
    GF[GF_NEXT] = INF
    GF[GF_TIMEOUT] = INF if spec.timeout_s is None else float(spec.timeout_s)
    GF[GF_DURATION] = INF
    RI = np.zeros((R, N_RI), dtype=np.int64)
    RI[:, [I_HW, I_TW, I_HR, I_TR, I_HP, I_TP, I_HI, I_TI, I_HE, I_TE]] = -1
    RI[:, I_ASYNC] = 1 if spec.async_scheduling else 0
    RI[:, I_RSV] = 1 if spec.admission == "reserve" else 0
    RI[:, I_PPRI] = 1 if spec.policy == "prefill_priority" else 0
    RI[:, I_SLD] = 1 if pool.slide_share > 0 else 0
    RI[:, I_WIN] = int(pool.window)
    RF = np.zeros((R, N_RF), dtype=float)
    RF[:, R_NEXT] = INF
    RF[:, R_SS] = float(pool.slide_share)
    RQI = np.zeros((N_Q, n), dtype=np.int64)
    RQI[Q_STATUS] = UNFINISHED
    RQI[Q_REP] = -1
    RQI[Q_NX_W : Q_NX_IN + 1] = -1  # the queues' links: none
    return Engines(
        G=G,
        GF=GF,
        RI=RI,
        RF=RF,
        hist=np.zeros((R, 2 * pool.block), dtype=np.int64),  # decoding sequences by block phase: all, below the window
        FH=np.zeros((4, R, mb + 72), dtype=np.int64),  # the finish heaps (iteration, request), the window-crossing ones
        CH=np.zeros((2, R, mb + 1), dtype=np.int64),  # the planned step's chunks: request, tokens
        RQF=np.full((rq_rows, n), np.nan),
        RQI=RQI,
        DL=np.zeros((2, R, ev_cap if spec.timeout_s is not None else 1)),  # the deadline heaps (jit_deadline)
        ts_rep=np.zeros(ts_cap, dtype=np.int64),
        TSF=np.zeros((4, ts_cap)),
        err=np.zeros(1, dtype=np.int64),
    )


def fleet(gaps: np.ndarray, rt: Router, AH: np.ndarray, ev_cap: int, engines: int) -> Fleet:
    """The deployment's arrival stream (``gaps``, the closed loop's heap ``AH``), router and an empty event heap of
    ``ev_cap`` slots, with a pump stack for ``engines``."""
    return Fleet(
        gaps=gaps,
        rt=rt,
        AH=AH,
        ev_t=np.zeros(ev_cap),
        EVI=np.zeros((3, ev_cap), dtype=np.int64),
        stk=np.zeros(engines, dtype=np.int64),
    )


def no_router() -> Router:
    """A router record that routes nothing (a loop with a rule of its own: the session loop's)."""
    empty = np.zeros(0, dtype=np.int64)
    return Router(0, np.zeros((2, 1), dtype=np.int64), empty, empty, empty, 0, 0.0)


def grown_engines(s: Engines, mb: int, room: int) -> Engines:
    """``s`` with the arrays grown that a pass adding ``room`` points and deadlines (and a batch cap of ``mb``) may
    overrun: the finish heaps, the deadline heaps (under a timeout: more than one slot), the time series."""
    G = s.G
    FH, DL, ts_rep, TSF = s.FH, s.DL, s.ts_rep, s.TSF
    if int(G[G_FHMAX]) + mb + 8 > FH.shape[2]:
        FH = grown(FH, 2 * FH.shape[2])
    if DL.shape[2] > 1 and int(G[G_DLMAX]) + room > DL.shape[2]:
        DL = grown(DL, max(2 * DL.shape[2], int(G[G_DLMAX]) + 2 * room))
    if int(G[G_TSN]) + room > ts_rep.shape[0]:
        size = max(2 * ts_rep.shape[0], int(G[G_TSN]) + 2 * room)
        ts_rep, TSF = grown(ts_rep, size), grown(TSF, size)
    return s._replace(FH=FH, DL=DL, ts_rep=ts_rep, TSF=TSF)


def grown_fleet(f: Fleet, G: np.ndarray, margin: int) -> Fleet:
    """``f`` with its event heap grown where a pass adding ``margin`` events may overrun it (``G``: its counters)."""
    if int(G[G_EVN]) + margin > f.ev_t.shape[0]:
        size = max(2 * f.ev_t.shape[0], int(G[G_EVN]) + 2 * margin)
        return f._replace(ev_t=grown(f.ev_t, size), EVI=grown(f.EVI, size))
    return f


def goes_on(code: int, budget, G: np.ndarray, GF: np.ndarray) -> bool:
    """After a compiled loop stopped on ``code`` (neither OK nor GROW; ``G`` / ``GF`` its counters): True where the
    run goes on (a slice done, the work budget checked), False where the Python loop times it (an iteration past
    the timing's table); raises on a budget past, a stuck replica or a decode run without room."""
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
