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

Its first call in a fresh install compiles it (about 40 CPU-s on a loaded 2-core machine, on top of the aggregated
loop's: the functions that take a pool's records are inlined into the loop, a record being copied whole at a call); :func:`core.serving.warm_simulator` runs a tiny disaggregated deployment too, so that no page waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.serving.sim import compiled, compiled_layout
from core.serving.sim.compiled_layout import (
    engine_state,
    fleet,
    goes_on,
    grown,
    grown_engines,
    grown_fleet,
    pool_params,
)
from core.serving.sim.jit_layout import (
    G_AHN,
    G_CLOSED,
    G_EVN,
    G_FHMAX,
    G_ISSUED,
    G_TSN,
    GF_DURATION,
    GF_NEXT,
    GROW,
    I_HI,
    I_HOLD,
    I_REMOTE,
    INF,
    N_G,
    OK,
    Q_CACHED,
    Q_INP,
    Q_OUT,
    Q_RES,
    Transfers,
    Wire,
)  # fmt: skip
from core.serving.sim.pool import prefix_hit_tokens
from core.serving.sim.records import Records


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


def _pool(spec, timing, pool, R: int, n: int, ev_cap: int, ts_cap: int, err: np.ndarray, *, prefill: bool):
    """One pool's parameters and engine state (:mod:`core.serving.sim.compiled_layout`, as the aggregated loop lays
    them out), a prefill instance holding a finished request's blocks until its KV has left, a decode instance
    taking a request's prompt KV whole; ``err``: the loop's status, one array for both pools."""
    s = engine_state(spec, pool, R, n, ev_cap, ts_cap)._replace(err=err)
    s.RI[:, I_HOLD if prefill else I_REMOTE] = 1
    return pool_params(spec, timing, pool, R), s


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
    err = np.zeros(1, dtype=np.int64)
    pf, sf = _pool(spec, ptiming, ppool, P, n, ev_cap, ts_cap, err, prefill=True)
    pd, sd = _pool(spec, dtiming, dpool, D, n, ev_cap, ts_cap, err, prefill=False)
    # the arrival stream in the prefill pool's counters (jit_arrivals): Poisson up to a count or a duration, or a
    # closed loop of users, every user's first request at 0 s
    closed = spec.arrival == "closed"
    users = min(int(spec.users), n) if closed else 0
    AH = np.zeros((2, max(users, 1)))
    AH[1, :users] = np.arange(users)
    Gp, GFp, RQIp = sf.G, sf.GF, sf.RQI
    Gp[G_CLOSED], Gp[G_AHN] = (1 if closed else 0), users
    GFp[GF_DURATION] = INF if spec.duration_s is None else float(spec.duration_s)
    GFp[GF_NEXT] = (0.0 if users else INF) if closed else gaps[0]
    burst = AH.shape[1] if closed else 0  # the arrivals one pass may route at one instant (jit_disagg.loop's)
    RQIp[Q_INP] = np.asarray(draws.inp[:n], dtype=np.int64)
    RQIp[Q_OUT] = 1  # a prefill instance computes a request's prompt and first token
    if shared:
        RQIp[Q_CACHED] = prefix_hit_tokens(spec.prefix_cache_frac, RQIp[Q_INP])
    out = np.asarray(draws.out[:n], dtype=np.int64)
    # reserve admission: the blocks of the prompt and the client's max_tokens on each pool (Pool.blocks_for, whole
    # blocks; a prefill instance's requests ask for one token); dres is each request's on the decode pool, beside its
    # output tokens (jit_disagg.kv_arrived reads both)
    dres = np.zeros(n, dtype=np.int64)
    if spec.admission == "reserve":
        RQIp[Q_RES] = (RQIp[Q_INP] + 1 + ppool.block - 1) // ppool.block
        dres = (RQIp[Q_INP] + spec.max_output_tokens() + dpool.block - 1) // dpool.block
    f = fleet(gaps, compiled._router(spec, P, router, n, shared), AH, ev_cap, P + D)
    # the decode pool's router: the same policy with its own draws (prefix affinity's: least-outstanding)
    rtd = compiled._router(spec, D, "least-outstanding" if router == "prefix-affinity" else router, n, False)
    if router == "power-of-two":
        rtd = rtd._replace(pairs=compiled._p2_pairs(D, seed + 1, n))
    x = _transfers(rtd, P, D, n, mb + 64, ev_cap, np.stack([out, dres]))
    r = compiled_layout.run_limits(n, budget)
    w = Wire(float(wire.fixed_s), float(wire.k_bytes), float(wire.bw_eff_bytes_per_s), int(wire.stage_layers), bool(wire.overlap))  # fmt: skip
    while True:
        code = loop((r, w, pf, sf, pd, sd, f, x))
        if code == OK:
            break
        if code == GROW:
            sf = grown_engines(sf, mb, margin + burst + _pending(sf.RI, x.DEL[:P], x.ORDp))
            sd = grown_engines(sd, mb, margin + _pending(sd.RI, x.DEL[P:], x.ORDd))
            f = grown_fleet(f, Gp, margin + burst)
            x = _grown_transfers(x, mb, margin)
        elif not goes_on(code, budget, Gp, GFp):
            return None
    front, front_g = _records(P, sf)
    back_parts, back_idx = _records(D, sd, int(x.Gx[G_ISSUED]))
    gids = front_g + [x.dgid[i] for i in back_idx]
    parts: list[Records] = front + back_parts
    m = int(Gp[G_ISSUED])
    return deployment_records(m, parts, gids, P, out[:m]), parts, x.kv[:m]


def _transfers(rtd, P: int, D: int, n: int, x_cap: int, ev_cap: int, out: np.ndarray) -> Transfers:
    """The transfers' state, none in flight: heaps of ``x_cap`` per prefill instance, an event heap of ``ev_cap``;
    ``out``: each request's output tokens and its reserved blocks on the decode pool."""
    return Transfers(
        rtd=rtd,
        XF=np.zeros((P, 2)),
        XI=np.zeros((P, 3), dtype=np.int64),
        XHV=np.zeros((P, x_cap)),
        XHG=np.zeros((P, x_cap), dtype=np.int64),
        xe_t=np.zeros(ev_cap),
        XEI=np.zeros((3, ev_cap), dtype=np.int64),
        Gx=np.zeros(N_G, dtype=np.int64),
        dgid=np.zeros(n, dtype=np.int64),
        decode_of=np.zeros(n, dtype=np.int64),
        pend_s=np.zeros(n),
        kv=np.full(n, np.nan),
        out=out,
        DEL=np.zeros(P + D, dtype=np.int64),
        ORDp=np.zeros(n, dtype=np.int64),
        ORDd=np.zeros(n, dtype=np.int64),
    )


def _grown_transfers(x: Transfers, mb: int, margin: int) -> Transfers:
    """The transfers' heaps grown where a pass may overrun them (jit_disagg.loop's GROW)."""
    Gx = x.Gx
    if int(Gx[G_FHMAX]) + mb + 8 > x.XHV.shape[1]:
        x = x._replace(XHV=grown(x.XHV, 2 * x.XHV.shape[1]), XHG=grown(x.XHG, 2 * x.XHG.shape[1]))
    if int(Gx[G_EVN]) + int(Gx[G_FHMAX]) + margin > x.xe_t.shape[0]:
        size = 2 * (x.xe_t.shape[0] + int(Gx[G_FHMAX]))
        x = x._replace(xe_t=grown(x.xe_t, size), XEI=grown(x.XEI, size))
    return x


def _pending(RI: np.ndarray, delivered: np.ndarray, ords: np.ndarray) -> int:
    """Requests waiting in a pool's inboxes (jit_disagg.pending)."""
    head = RI[:, I_HI]
    has = head >= 0
    return int((delivered[has] - ords[head[has]]).sum())


def _records(R: int, s, count: int | None = None):
    """Each engine's records of one pool (``count``: its first requests only, those that reached it)."""
    m = int(s.G[G_TSN])
    RQF, RQI = s.RQF, s.RQI
    if count is not None:
        RQF, RQI = RQF[:, :count], RQI[:, :count]
    return compiled.replica_records(R, RQF, RQI, s.RF, s.RI, s.ts_rep[:m], s.TSF[:, :m])
