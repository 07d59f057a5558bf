"""The deployment's loop compiled: :class:`core.serving.sim.replicas.ReplicaSet` (aggregated) over the compiled
engine (:mod:`core.serving.sim.jit_engine`): the router's pick, an arrival's routing and wake-up of its replica,
a replica's pump (absorb, plan, push its step; the replicas an arrival wakes on the way pumped in turn from an
explicit stack, where the Python loop recurses), and the loop over arrivals and step ends.
"""

from __future__ import annotations

from core.serving.sim.jit_arrivals import next_arrival, tell_ended
from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_engine import absorb, cut_run, end_step, expire
from core.serving.sim.jit_layout import (
    CLOCK,
    EVENTS,
    G_CLOSED,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_INBOX,
    G_ISSUED,
    G_LO,
    G_PASSES,
    G_RESUME,
    G_RR,
    G_SEQ,
    G_STARTED,
    G_TSN,
    GF_TIMEOUT,
    GROW,
    I_ASLOTS,
    I_DLN,
    I_FLIGHT,
    I_HE,
    I_HI,
    I_KIND,
    I_LOAD,
    I_LR,
    I_LW,
    I_PUMP,
    I_STUCK,
    I_TI,
    I_VER,
    INF,
    OK,
    Q_ADP,
    Q_CACHED,
    Q_NX_IN,
    Q_REP,
    R_END,
    R_NEXT,
    R_NOW,
    RQ_ARR,
    SLICE,
    SLICE_PASSES,
    STUCK,
)
from core.serving.sim.jit_lora import affinity_pick
from core.serving.sim.jit_parts import ev_pop, ev_push, record
from core.serving.sim.jit_plan import begin_step
from core.serving.sim.records import NONE, RUN


@jit
def push(G, RI, ev_t, EVI, e, end):
    RI[e, I_FLIGHT] = 1
    RI[e, I_VER] += 1
    G[G_SEQ] += 1
    ev_push(G, ev_t, EVI, end, G[G_SEQ], e, RI[e, I_VER])


@jit
def least_loaded(nrep, RI, start):
    """The replica with the fewest requests in flight; among equals, the first at or after ``start`` (cyclic):
    :func:`core.serving.router.least_loaded`."""
    m = RI[0, I_LOAD]
    for k in range(1, nrep):
        if RI[k, I_LOAD] < m:
            m = RI[k, I_LOAD]
    for k in range(start, nrep):
        if RI[k, I_LOAD] == m:
            return k
    for k in range(nrep):
        if RI[k, I_LOAD] == m:
            return k
    return 0


@jit
def prefix_pick(nrep, rt, G, RI, gid):
    """``PrefixAffinity.pick``: the group's replica, unless the loads are out of balance or the group is new."""
    lo, hi = RI[0, I_LOAD], RI[0, I_LOAD]
    for k in range(1, nrep):
        x = RI[k, I_LOAD]
        if x < lo:
            lo = x
        if x > hi:
            hi = x
    imbalanced = hi - lo > rt.balance_abs and hi > rt.balance_rel * lo
    g = rt.groups[gid] if rt.groups.shape[0] > 0 else -1
    j = rt.owner[g] if g >= 0 else -1
    if j < 0 or imbalanced:
        j = least_loaded(nrep, RI, (G[G_LO] + 1) % nrep)
        G[G_LO] = j
        if g >= 0 and rt.owner[g] < 0:
            rt.owner[g] = j
    return j


@jit
def adapter_pick(nrep, rt, G, RI, a):
    """``AdapterAffinity.pick`` for a request of adapter ``a`` (a request without one: the least loaded)."""
    start = (G[G_LO] + 1) % nrep
    j = least_loaded(nrep, RI, start) if a < 0 else affinity_pick(nrep, rt.balance_abs, rt.balance_rel, RI, a, start)
    G[G_LO] = j
    return j


@jit
def pick(nrep, rt, G, RI, RQI):
    """The router's choice for the next request (:data:`core.serving.router.POLICIES`' ``pick``, by ``rt.kind``)."""
    gid = G[G_ISSUED]
    if rt.kind == 0:  # round-robin
        j = G[G_RR]
        G[G_RR] = (j + 1) % nrep
        return j
    if rt.kind == 1:  # least-outstanding
        j = least_loaded(nrep, RI, (G[G_LO] + 1) % nrep)
        G[G_LO] = j
        return j
    if rt.kind == 2:  # power-of-two
        if nrep == 1:
            return 0
        a, b = rt.pairs[0, gid], rt.pairs[1, gid]
        return b if RI[b, I_LOAD] < RI[a, I_LOAD] else a
    if rt.kind == 3:
        return prefix_pick(nrep, rt, G, RI, gid)
    return adapter_pick(nrep, rt, G, RI, RQI[Q_ADP, gid])


@jit
def seen_add(seen, key):
    """Add ``key`` (>= 0) to the open-addressing hash set ``seen``; whether it was new."""
    mask = seen.shape[0] - 1
    h = (key * 2654435761) & mask
    while True:
        v = seen[h]
        if v == key:
            return False
        if v < 0:
            seen[h] = key
            return True
        h = (h + 1) & mask


@jit_inline
def pass_check(G, GF, passes, nxt, max_clock, max_ev):
    """The work budget's check every 1,024 passes of a compiled loop: the simulated clock (the next event, ``nxt``,
    0 with none) into ``GF[1]`` and the pass count into ``G``; CLOCK past ``max_clock``, EVENTS past ``max_ev``
    passes, SLICE every SLICE_PASSES passes (the caller's checks, resumable), else OK."""
    clock = nxt if nxt < INF else 0.0
    GF[1] = clock
    G[G_PASSES] = passes
    if not clock <= max_clock:
        return CLOCK
    if passes > max_ev:
        return EVENTS
    if not passes & (SLICE_PASSES - 1):
        G[G_RESUME] = 1
        return SLICE
    return OK


@jit_inline
def deliver(p, s, f, gid, j, t):
    """Request ``gid`` into replica ``j``'s inbox at ``t`` (``Replica.deliver``), and the replica woken (``ReplicaSet._wake``): the
    replica to pump, or -1 where it is pumping already or its iteration in flight absorbs the arrival (a decode run
    cut short at the next step where the arrival can join). The aggregated and the session loops route through it."""
    G, RI, RF, RQI = s.G, s.RI, s.RF, s.RQI
    RQI[Q_REP, gid] = j
    RQI[Q_NX_IN, gid] = -1
    if RI[j, I_TI] < 0:
        RI[j, I_HI] = gid
    else:
        RQI[Q_NX_IN, RI[j, I_TI]] = gid
    RI[j, I_TI] = gid
    G[G_INBOX] += 1
    if RF[j, R_NEXT] == INF:
        RF[j, R_NEXT] = t
    RI[j, I_LOAD] += 1
    # wake
    if RI[j, I_PUMP]:
        return -1
    if RI[j, I_FLIGHT]:
        if RI[j, I_KIND] == RUN:
            old = RF[j, R_END]
            new = cut_run(p, s, j, t)
            if new != old:
                push(G, RI, f.ev_t, f.EVI, j, new)
        return -1
    if t > RF[j, R_NOW]:
        record(p.fs, p.inv_P, G, RI, RF, s.ts_rep, s.TSF, j, t)
        RF[j, R_NOW] = t
    return j


@jit_inline
def route(r, p, s, f):
    """ReplicaSet._route and _wake: returns the replica to pump (idle, not pumping), or -1."""
    G, RI, RQI, rt = s.G, s.RI, s.RQI, f.rt
    nrep = p.nrep
    t = next_arrival(r.N, f.gaps, G, s.GF, f.AH)
    j = pick(nrep, rt, G, RI, RQI)
    gid = G[G_ISSUED]
    G[G_ISSUED] = gid + 1
    if rt.seen.shape[0] > 0 and rt.groups.shape[0] > 0 and seen_add(rt.seen, rt.groups[gid] * nrep + j):
        RQI[Q_CACHED, gid] = 0  # the first of its group here: its prefix is not yet in this replica's cache
    # deliver
    s.RQF[RQ_ARR, gid] = t
    return deliver(p, s, f, gid, j, t)


@jit
def pump(r, p, s, f, e0):
    """ReplicaSet._pump of e0, with the replicas an arrival wakes on the way pumped in turn (a stack)."""
    GF, RI, RF, DL, stk = s.GF, s.RI, s.RF, s.DL, f.stk
    stk[0] = e0
    top = 1
    RI[e0, I_PUMP] = 1
    RI[e0, I_STUCK] = 0
    while top > 0:
        e = stk[top - 1]
        if GF[0] <= RF[e, R_NOW]:  # every arrival due by now is routed before this replica plans
            j = route(r, p, s, f)
            if j >= 0:
                RI[j, I_PUMP] = 1
                RI[j, I_STUCK] = 0
                stk[top] = j
                top += 1
            continue
        if RF[e, R_NEXT] <= RF[e, R_NOW]:
            absorb(p, s, e)
        if RI[e, I_DLN] > 0 and DL[0, e, 0] <= RF[e, R_NOW]:
            expire(p, s, e)
        if RI[e, I_HE] >= 0:
            tell_ended(r.N, f.gaps, s.G, GF, RI, s.RQF, s.RQI, f.AH, e)
        if RI[e, I_LR] == 0 and RI[e, I_LW] == 0:
            RI[e, I_PUMP] = 0
            top -= 1
            continue
        waiting = RI[e, I_LW]
        end = begin_step(p, s, e)
        if s.err[0]:
            return
        if RI[e, I_KIND] != NONE:
            push(s.G, RI, f.ev_t, f.EVI, e, end)
            RI[e, I_PUMP] = 0
            top -= 1
            continue
        end_step(p, s, e)
        if RI[e, I_HE] >= 0:
            tell_ended(r.N, f.gaps, s.G, GF, RI, s.RQF, s.RQI, f.AH, e)
        RI[e, I_STUCK] = RI[e, I_STUCK] + 1 if RI[e, I_LW] == waiting else 0
        if RI[e, I_STUCK] > 2:
            s.err[0] = STUCK
            return


@jit
def loop(z):
    """Run the deployment's loop until it ends (OK), a slice is done (SLICE), an array needs to grow (GROW) or a
    check fails (the other statuses); resumable from its arrays (``z``: the :class:`~core.serving.sim.jit_layout.Run`,
    :class:`~core.serving.sim.jit_layout.Pool`, :class:`~core.serving.sim.jit_layout.Engines` and
    :class:`~core.serving.sim.jit_layout.Fleet` records)."""
    r, p, s, f = z
    nrep, MB, max_clock = p.nrep, p.MB, r.max_clock
    G, GF, RI, RF, DL, err = s.G, s.GF, s.RI, s.RF, s.DL, s.err
    AH, ev_t, EVI = f.AH, f.ev_t, f.EVI
    fcap = s.FH.shape[2]
    evcap = ev_t.shape[0]
    tscap = s.TSF.shape[1]

    # --- the time series -------------------------------------------------------------------------------------
    if not G[G_STARTED]:
        G[G_STARTED] = 1
        for e in range(nrep):
            record(p.fs, p.inv_P, G, RI, RF, s.ts_rep, s.TSF, e, RF[e, R_NOW])
    passes = G[G_PASSES]
    resumed = G[G_RESUME] != 0  # back from a slice: its last pass was counted and checked, not yet run
    G[G_RESUME] = 0
    # a closed loop's users may all be due at one instant (every one's first request at 0 s): one pass routes them all
    margin = 8 * nrep + 4 * MB + 64 + (AH.shape[1] if G[G_CLOSED] else 0)
    # the adapter loads one pass may log: at most one per adapter slot in a replica's plan, two plans a replica
    lg_room = 2 * nrep * RI[0, I_ASLOTS] + 8 if RI[0, I_ASLOTS] else 0
    while True:
        room = margin + G[G_INBOX]  # an inbox is absorbed whole in one pass: a point and a deadline per request
        if (
            G[G_TSN] + room > tscap
            or G[G_EVN] + margin > evcap
            or G[G_FHMAX] + MB + 8 > fcap
            or (GF[GF_TIMEOUT] < INF and G[G_DLMAX] + room > DL.shape[2])
            or (lg_room > 0 and 2 * (err[1] + lg_room) + 2 > err.shape[0])
        ):
            G[G_PASSES] = passes
            G[G_RESUME] = 1 if resumed else 0
            return GROW
        if resumed:
            resumed = False
        else:
            passes += 1
            if not passes & 1023:
                nxt = GF[0]
                if G[G_EVN] > 0 and ev_t[0] < nxt:
                    nxt = ev_t[0]
                code = pass_check(G, GF, passes, nxt, max_clock, r.max_ev)
                if code != OK:
                    return code
        while G[G_EVN] > 0 and EVI[2, 0] != RI[EVI[1, 0], I_VER]:
            ev_pop(G, ev_t, EVI)  # a run cut short since
        t_r = ev_t[0] if G[G_EVN] > 0 else INF
        t_a = GF[0]
        woken = -1  # the replica to pump: the one whose step ended, or the one an arrival woke
        if t_r < t_a:
            woken = EVI[1, 0]
            ev_pop(G, ev_t, EVI)
            RI[woken, I_FLIGHT] = 0
            end_step(p, s, woken)
            if RI[woken, I_HE] >= 0:
                tell_ended(r.N, f.gaps, G, GF, RI, s.RQF, s.RQI, AH, woken)
        elif t_a < INF:
            if t_a > max_clock:
                G[G_PASSES] = passes
                GF[1] = t_a
                return CLOCK
            woken = route(r, p, s, f)
        else:
            break
        if woken >= 0:
            pump(r, p, s, f, woken)
        if err[0]:
            G[G_PASSES] = passes
            return err[0]
    G[G_PASSES] = passes
    return OK
