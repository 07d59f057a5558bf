"""The disaggregated deployment's compiled loop (:mod:`core.serving.sim.jit_disagg`): its caller, as
:mod:`core.serving.sim.compiled` is the aggregated loop's. It lays out the two pools' arrays and the transfers',
runs slices of the loop with the work budget checked between them, grows what must grow, and turns the arrays into
the Python loop's records (:meth:`core.serving.sim.replicas.ReplicaSet.records`). Same seed, same bytes
(``tests/test_compiled_disagg.py``).

The shapes it takes are the aggregated loop's (:func:`core.serving.sim.compiled.fallback_reason`, each pool on its
own timing and KV pool): chunked prefill or prefill priority, preempt-and-recompute or reserve admission (each pool
reserving a request's prompt and max_tokens: a prefill instance's requests ask for one token), full attention or
sliding-window layers (not under reserve admission), a shared prompt prefix per group (a prefill instance that has
served the group finds it cached, as the Python loop routes it; a decode instance takes the whole transferred
prompt as cached), behind a ``round-robin``, ``least-outstanding``, ``power-of-two`` or ``prefix-affinity`` router
(the decode pool's router is the same policy with its own draws; prefix affinity's is least-outstanding); Poisson
arrivals up to a count or a duration, or a closed loop of users up to a count (a user's next request a think time
after its last one left the decode pool, or was rejected or timed out on either). Adapters fall back
(:func:`fallback_reason`).

Its first call in a fresh install compiles it (about 10 CPU-s on the 2-core machine, on top of the aggregated
loop's); :func:`core.serving.warm_simulator` runs a tiny disaggregated deployment too, so that no page waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.serving.sim import compiled
from core.serving.sim.jit_layout import (
    CLOCK,
    EVENTS,
    G_AHN,
    G_CLOSED,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_ISSUED,
    G_LO,
    G_PASSES,
    G_TSN,
    GF_DURATION,
    GF_NEXT,
    GF_TIMEOUT,
    GROW,
    I_ASYNC,
    I_HE,
    I_HI,
    I_HOLD,
    I_HP,
    I_HR,
    I_HW,
    I_PPRI,
    I_REMOTE,
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
    Q_CACHED,
    Q_INP,
    Q_NX_IN,
    Q_NX_W,
    Q_OUT,
    Q_REP,
    Q_RES,
    Q_STATUS,
    R_NEXT,
    R_SS,
    SLICE,
    STUCK,
)  # fmt: skip
from core.serving.sim.pool import prefix_hit_tokens
from core.serving.sim.records import UNFINISHED, Records


@dataclass(frozen=True)
class KvWire:
    """What times a prompt's KV leaving its prefill instance (:func:`core.serving.kv_transfer.kv_transfer_s` and
    ``wire_share``): the KV bytes per token of the side that holds more [B], the achieved bandwidth per GPU [B/s]
    (``beta x eta``), the prefill stage's layers, layer-by-layer overlap, and the fixed setup + path latency [s]."""

    k_bytes: float
    bw_eff_bytes_per_s: float
    stage_layers: int
    overlap: bool
    fixed_s: float


#: The front routers it takes: the base three and prefix affinity (whose decode pool is least-outstanding).
ROUTERS = ("round-robin", "least-outstanding", "power-of-two", "prefix-affinity")


def fallback_reason(spec, ptiming, dtiming, ppool, dpool, instances: int, router: str, *, adapters=None, prefix=None):
    """Why the compiled loop leaves this disaggregated simulation to the Python loop, or None: the engine's reasons
    (:func:`core.serving.sim.compiled.fallback_reason` with ``extended``: this loop lays out sliding-window layers,
    prefill priority, reserve admission, a shared prompt prefix, the prefix-affinity router, a closed loop of users
    and a duration limit) for each pool, the instances of both counted against its slots; adapters fall back."""
    for timing, pool in ((ptiming, ppool), (dtiming, dpool)):
        why = compiled.fallback_reason(spec, timing, pool, instances, router, extended=True)
        if why is not None:
            return why
    checks = (
        (adapters is not None, "adapters"),
        (router not in ROUTERS, compiled.EXTENDED_REASONS[1]),
    )
    for holds, why in checks:
        if holds:
            return why
    return None


def _world(spec, timing, pool, R: int, n: int, ev_cap: int, ts_cap: int, *, prefill: bool):
    """One pool's parameters and arrays (the order :mod:`core.serving.sim.jit_disagg` unpacks), with the flags of
    its admission (reserve), its scheduling (prefill priority) and its model's sliding-window layers as
    :func:`core.serving.sim.compiled.run` lays them out."""
    mb = int(spec.max_batch)
    sm = timing.sm
    reserve = spec.admission == "reserve"
    sliding = pool.slide_share > 0
    sw = (
        R, int(pool.block), int(spec.token_budget), mb, bool(spec.prefix_caching) and not reserve and not sliding,
        int(timing.t_max),
        bool(sm.graph_prefill), int(pool.max_context), float(pool.blocks), float(pool.full_share),
        float(pool.seq_blocks_max), 1.0 / pool.blocks if pool.blocks > 0 else 0.0, float(timing.q),
        float(sm.graph_launch_s), float(sm.eager_launch_s), float(sm.graph_max_tokens), float(sm.kernels_per_stage),
        float(timing.pp),
    )  # fmt: skip
    TB = np.array([timing.c0, timing.c1, timing.m0, timing.m1, timing.x], dtype=float)
    G = np.zeros(N_G, dtype=np.int64)
    G[G_LO] = -1
    GF = np.zeros(N_GF)
    GF[GF_NEXT] = INF
    GF[GF_TIMEOUT] = INF if spec.timeout_s is None else float(spec.timeout_s)
    GF[GF_DURATION] = INF
    RI = np.zeros((R, N_RI), dtype=np.int64)
    RI[:, [I_HW, I_TW, I_HR, I_TR, I_HP, I_TP, I_HI, I_TI, I_HE, I_TE]] = -1
    RI[:, I_ASYNC] = 1 if spec.async_scheduling else 0
    RI[:, I_WIN] = int(pool.window)
    RI[:, I_HOLD if prefill else I_REMOTE] = 1
    RI[:, I_RSV] = 1 if reserve else 0
    RI[:, I_PPRI] = 1 if spec.policy == "prefill_priority" else 0
    RI[:, I_SLD] = 1 if sliding else 0
    RF = np.zeros((R, N_RF), dtype=float)
    RF[:, R_NEXT] = INF
    RF[:, R_SS] = float(pool.slide_share)
    hist = np.zeros((R, 2 * pool.block), dtype=np.int64)
    FH = np.zeros((4, R, mb + 72), dtype=np.int64)
    CH = np.zeros((2, R, mb + 1), dtype=np.int64)
    RQF = np.full((4, n), np.nan)
    RQI = np.zeros((N_Q, n), dtype=np.int64)
    RQI[Q_STATUS] = UNFINISHED
    RQI[Q_REP] = -1
    RQI[Q_NX_W : Q_NX_IN + 1] = -1
    DL = np.zeros((2, R, ev_cap if spec.timeout_s is not None else 1))
    ts_rep, TSF = np.zeros(ts_cap, dtype=np.int64), np.zeros((4, ts_cap))
    return sw, [TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF]


def run(spec, ptiming, dtiming, ppool, dpool, draws, P: int, D: int, router: str, seed: int, wire: KvWire, budget=None, *, shared: bool = False):  # fmt: skip
    """The disaggregated deployment's records, as the Python loop's ``ReplicaSet.records`` gives them (the
    deployment's, each engine's: the prefill instances then the decode ones, the KV transfer time of each request),
    or None where the loop leaves the run to the Python one (an iteration past a timing's table). ``shared``: the
    requests of a prefix group share the first ``spec.prefix_cache_frac`` of their prompts (a prefill instance that
    has served the group finds it cached). Raises as the Python loop does:
    :class:`core.base.limits.BudgetExceeded` past the work ``budget``."""
    from core.base import WorkBudget
    from core.serving.sim.jit_disagg import loop
    from core.serving.sim.replicas import deployment_records

    budget = budget or WorkBudget()
    n, mb = compiled._issued_at_most(spec, draws), int(spec.max_batch)
    draws.ensure(n)
    gaps = np.asarray(draws.gaps[:n], dtype=float)
    margin = 8 * (P + D) + 4 * mb + 64  # what one pass of the loop may add at most (jit_disagg.loop's margin)
    # about three time-series points a request in each pool (2.8 prefill, 3.2 decode at 20 req/s on 1P1D): grown
    # rarely
    ev_cap, ts_cap = margin + 64, (7 * n) // 2 + margin + 256
    sp, ap = _world(spec, ptiming, ppool, P, n, ev_cap, ts_cap, prefill=True)
    sd, ad = _world(spec, dtiming, dpool, D, n, ev_cap, ts_cap, prefill=False)
    # the arrival stream in the prefill world's counters (jit_arrivals): Poisson up to a count or a duration, or a
    # closed loop of users, every user's first request at 0 s
    closed = spec.arrival == "closed"
    users = min(int(spec.users), n) if closed else 0
    AH = np.zeros((2, max(users, 1)))
    AH[1, :users] = np.arange(users)
    ap[1][G_CLOSED], ap[1][G_AHN] = (1 if closed else 0), users
    ap[2][GF_DURATION] = INF if spec.duration_s is None else float(spec.duration_s)
    ap[2][GF_NEXT] = (0.0 if users else INF) if closed else gaps[0]
    burst = AH.shape[1] if closed else 0  # the arrivals one pass may route at one instant (jit_disagg.loop's)
    ap[9][Q_INP] = np.asarray(draws.inp[:n], dtype=np.int64)
    ap[9][Q_OUT] = 1  # a prefill instance computes a request's prompt and first token
    if shared:
        ap[9][Q_CACHED] = prefix_hit_tokens(spec.prefix_cache_frac, ap[9][Q_INP])
    out = np.asarray(draws.out[:n], dtype=np.int64)
    # reserve admission: the blocks of the prompt and the client's max_tokens on each pool (Pool.blocks_for, whole
    # blocks; a prefill instance's requests ask for one token); dres is each request's on the decode pool, beside its
    # output tokens (jit_disagg.kv_arrived reads both)
    dres = np.zeros(n, dtype=np.int64)
    if spec.admission == "reserve":
        ap[9][Q_RES] = (ap[9][Q_INP] + 1 + ppool.block - 1) // ppool.block
        dres = (ap[9][Q_INP] + spec.max_output_tokens() + dpool.block - 1) // dpool.block
    rtp = compiled._router(spec, P, router, n, shared)
    # the decode pool's router: the same policy with its own draws (prefix affinity's: least-outstanding)
    rtd = compiled._router(spec, D, "least-outstanding" if router == "prefix-affinity" else router, n, False)
    if router == "power-of-two":
        rtd = rtd._replace(pairs=compiled._p2_pairs(D, seed + 1, n))
    x_cap = mb + 64
    d: list[Any] = [
        gaps, rtp, rtd, AH, np.zeros(ev_cap), np.zeros((3, ev_cap), dtype=np.int64),  # the step ends' heap
        np.zeros((P, 2)), np.zeros((P, 3), dtype=np.int64), np.zeros((P, x_cap)),
        np.zeros((P, x_cap), dtype=np.int64),  # the transfers of each prefill instance
        np.zeros(ev_cap), np.zeros((3, ev_cap), dtype=np.int64), np.zeros(N_G, dtype=np.int64),  # their events
        np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n), np.full(n, np.nan), np.stack([out, dres]),
        np.zeros(P + D, dtype=np.int64), np.zeros(1, dtype=np.int64),
        np.zeros(P + D, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),  # inbox places
    ]  # fmt: skip
    par = (
        n, P, D, int(budget.max_events), float(budget.max_clock_s), float(wire.fixed_s),
        float(wire.k_bytes), float(wire.bw_eff_bytes_per_s), int(wire.stage_layers), bool(wire.overlap),
    )  # fmt: skip
    Gp, GFp, Gd, Gx = ap[1], ap[2], ad[1], d[12]
    while True:
        code = loop((par, sp, tuple(ap), sd, tuple(ad), tuple(d)))
        if code == OK:
            break
        if code == SLICE:
            budget.check(int(Gp[G_PASSES]), float(GFp[1]))
        elif code == GROW:
            for w, G, off, ords, b in ((ap, Gp, 0, d[21], burst), (ad, Gd, P, d[22], 0)):
                room = margin + b + _pending(w[3], d[20][off : off + w[3].shape[0]], ords)
                if int(G[G_FHMAX]) + mb + 8 > w[6].shape[2]:
                    w[6] = compiled._grown(w[6], 2 * w[6].shape[2])
                if spec.timeout_s is not None and int(G[G_DLMAX]) + room > w[10].shape[2]:
                    w[10] = compiled._grown(w[10], max(2 * w[10].shape[2], int(G[G_DLMAX]) + 2 * room))
                if int(G[G_TSN]) + room > w[11].shape[0]:
                    size = max(2 * w[11].shape[0], int(G[G_TSN]) + 2 * room)
                    w[11], w[12] = compiled._grown(w[11], size), compiled._grown(w[12], size)
            if int(Gp[G_EVN]) + margin + burst > d[4].shape[0]:
                size = max(2 * d[4].shape[0], int(Gp[G_EVN]) + 2 * (margin + burst))
                d[4], d[5] = compiled._grown(d[4], size), compiled._grown(d[5], size)
            if int(Gx[G_FHMAX]) + mb + 8 > d[8].shape[1]:
                d[8], d[9] = compiled._grown(d[8], 2 * d[8].shape[1]), compiled._grown(d[9], 2 * d[9].shape[1])
            if int(Gx[G_EVN]) + int(Gx[G_FHMAX]) + margin > d[10].shape[0]:
                size = 2 * (d[10].shape[0] + int(Gx[G_FHMAX]))
                d[10], d[11] = compiled._grown(d[10], size), compiled._grown(d[11], size)
        elif code in (CLOCK, EVENTS):
            budget.check(int(Gp[G_PASSES]), float(GFp[1]))
            raise RuntimeError("the compiled loop stopped on a budget its caller's check let pass")
        elif code == STUCK:
            raise RuntimeError("a replica can neither admit nor reject the head of its queue")
        elif code == NO_ROOM:
            raise RuntimeError("decode run without room for one iteration")
        else:
            return None
    front, front_g = _records(P, ap, Gp)
    moved = int(Gx[G_ISSUED])
    back_parts, back_idx = _records(D, ad, Gd, moved)
    dgid = d[13]
    gids = front_g + [dgid[i] for i in back_idx]
    parts: list[Records] = front + back_parts
    m = int(Gp[G_ISSUED])
    return deployment_records(m, parts, gids, P, out[:m]), parts, d[16][:m]


def _pending(RI: np.ndarray, delivered: np.ndarray, ords: np.ndarray) -> int:
    """Requests waiting in a pool's inboxes (jit_disagg.pending)."""
    head = RI[:, I_HI]
    has = head >= 0
    return int((delivered[has] - ords[head[has]]).sum())


def _records(R: int, w: list, G: np.ndarray, count: int | None = None):
    """Each engine's records of one pool (``count``: its first requests only, those that reached it)."""
    TB, G_, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF = w
    m = int(G[G_TSN])
    if count is not None:
        RQF, RQI = RQF[:, :count], RQI[:, :count]
    return compiled.replica_records(R, RQF, RQI, RF, RI, ts_rep[:m], TSF[:, :m])
