"""The disaggregated deployment's loop compiled: :class:`core.serving.sim.replicas.ReplicaSet` with a prefill pool,
KV transfers and a decode pool, over the compiled engine (:mod:`core.serving.sim.jit_engine`), operation for
operation.

Two pools of the engine (:mod:`core.serving.sim.jit_layout`), each a pair of records of the same types: its
parameters (a :class:`~core.serving.sim.jit_layout.Pool`: ``pf``, ``pd``) and its engines' state (an
:class:`~core.serving.sim.jit_layout.Engines`: ``sf``, ``sd``). The prefill pool's requests are numbered as the
deployment's (it takes them in arrival order); the decode pool's in the order their KV arrives (each decode instance
takes its own in that order, as a replica numbers its requests, so the finish and deadline heaps break ties as the
Python loop's do). A prefill instance holds a finished request's blocks (``I_HOLD``) until its KV has left; a decode
instance admits a request only when blocks for all of its prompt are free (``I_REMOTE``). One event heap of step
ends (the :class:`~core.serving.sim.jit_layout.Fleet`'s; engine ``k``: the prefill instance ``k`` below ``P``, the
decode instance ``k - P`` above) keeps its counters in the prefill pool's ``G``. So does the arrival stream
(:mod:`core.serving.sim.jit_arrivals`: Poisson up to a count or a duration, or a closed loop of users, its heap in
``AH``); each engine's list of ended requests goes to it where ``ReplicaSet._ended`` takes it (:func:`tell`).

The transfers (a :class:`~core.serving.sim.jit_layout.Transfers`, ``x``; their parameters a
:class:`~core.serving.sim.jit_layout.Wire`, ``w``): per prefill instance ``p`` its processor-sharing clock (``XF[p, X_V]`` at ``XF[p, X_T]``), a heap of
the transfers in flight (``XHV[p]``: the virtual time each has left at, ``XHG[p]``: its request; by both, as the
Python loop's tuples compare), their count, the heap's version and the requests whose blocks it holds (``XI[p]``);
the transfer events in a heap of their own (``xe_t``, ``XEI``: sequence, ``p`` for the wire of ``p`` done or
``-1 - gid`` for the KV of ``gid`` arrived, version), its counters in ``Gx`` (``G_EVN`` its size, ``G_SEQ`` its
sequence, ``G_ISSUED`` the requests delivered to the decode pool, ``G_FHMAX`` the largest transfer heap).
"""

from __future__ import annotations

from core.serving.sim.jit_arrivals import ah_push
from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_engine import absorb, cut_run, end_step_shared, expire, release
from core.serving.sim.jit_layout import (
    CLOCK,
    G_AHN,
    G_CLOSED,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_INBOX,
    G_ISSUED,
    G_PASSES,
    G_RESUME,
    G_SEQ,
    G_STARTED,
    G_TSN,
    GF_DURATION,
    GF_NEXT,
    GF_TIMEOUT,
    GROW,
    I_DLN,
    I_FLIGHT,
    I_HE,
    I_HI,
    I_KIND,
    I_LOAD,
    I_LR,
    I_LW,
    I_NCH,
    I_PUMP,
    I_STUCK,
    I_TE,
    I_TI,
    I_VER,
    INF,
    OK,
    Q_CACHED,
    Q_CTX,
    Q_INP,
    Q_NX_E,
    Q_NX_IN,
    Q_OUT,
    Q_REP,
    Q_RES,
    Q_STATUS,
    R_END,
    R_NEXT,
    R_NOW,
    RQ_ADMIT,
    RQ_ARR,
    RQ_FIN,
    STUCK,
)
from core.serving.sim.jit_loop import pass_check, pick, push, route
from core.serving.sim.jit_parts import ev_pop, ev_push, record
from core.serving.sim.jit_plan import begin_step_shared
from core.serving.sim.records import DONE, MIXED, NONE, RUN

# the transfer state of a prefill instance: XF[p] its virtual clock and when it was last caught up; XI[p] the
# transfers in flight, the version of its next wire-done event, the requests whose KV it holds
X_V, X_T = range(2)
X_N, X_VER, X_HELD = range(3)
#: Tolerance of a transfer's end on the virtual clock (core.serving.sim.replicas.Transfers.pop_done).
X_EPS = 1e-12


# --- one pool's engine ---------------------------------------------------------------------------------------------
@jit_inline
def w_record(p, s, e, t):
    """A time-series point of engine ``e`` of pool ``p`` (state ``s``) at ``t``."""
    record(p.fs, p.inv_P, s.G, s.RI, s.RF, s.ts_rep, s.TSF, e, t)


@jit
def tell(r, f, sf, x, s, e, front):
    """ReplicaSet._ended of engine ``e`` of a pool (state ``s``; ``front``: the prefill pool): each request that
    ended there, in order, to the arrival stream (a closed loop's user sends its next request a think time after the
    end, while requests are left to issue and the duration allows: jit_arrivals.tell_ended), but a prefill
    instance's finished prompts, whose KV transfers the loop starts from the step's chunks. The stream's counters
    are the prefill pool's (``sf``). The decode pool's requests are numbered in the order their KV arrived:
    ``x.dgid`` gives each one's number in the deployment (its user's think time)."""
    Gp, GFp, AH, gaps, dgid = sf.G, sf.GF, f.AH, f.gaps, x.dgid
    RI, RQF, RQI = s.RI, s.RQF, s.RQI
    rid = RI[e, I_HE]
    RI[e, I_HE] = -1
    RI[e, I_TE] = -1
    if not Gp[G_CLOSED]:
        return
    while rid >= 0:
        nxt = RQI[Q_NX_E, rid]
        if not (front and RQI[Q_STATUS, rid] == DONE) and Gp[G_ISSUED] + Gp[G_AHN] < r.N:
            t = RQF[RQ_FIN, rid] + gaps[rid if front else dgid[rid]]
            if not t > GFp[GF_DURATION]:
                ah_push(Gp, AH, t, float(Gp[G_ISSUED] + Gp[G_AHN]))
                GFp[GF_NEXT] = AH[0, 0]
        rid = nxt


@jit_inline
def turn(r, f, sf, x, p, s, e, held, front):
    """One turn of ``Replica``'s pump loop once the arrivals due are routed (ReplicaSet._pump_loop) on engine ``e``
    of pool ``p`` (state ``s``): absorb, expire, tell the stream what ended, plan. Returns (0: nothing to do, 1: a
    step planned to end at the second value, 2: again, -1: error)."""
    closed = sf.G[G_CLOSED]
    RI, RF, err = s.RI, s.RF, s.err
    if RF[e, R_NEXT] <= RF[e, R_NOW]:
        absorb(p, s, e)
    if RI[e, I_DLN] > 0 and s.DL[0, e, 0] <= RF[e, R_NOW]:
        expire(p, s, e)
    if closed and RI[e, I_HE] >= 0:  # (a Poisson stream leaves the lists unread)
        tell(r, f, sf, x, s, e, front)
    if RI[e, I_LR] == 0 and RI[e, I_LW] == 0:
        return 0, 0.0
    waiting = RI[e, I_LW]
    end = begin_step_shared(p, s, e)
    if err[0]:
        return -1, 0.0
    if RI[e, I_KIND] != NONE:
        return 1, end
    end_step_shared(p, s, e)
    if closed and RI[e, I_HE] >= 0:  # (a Poisson stream leaves the lists unread)
        tell(r, f, sf, x, s, e, front)
    if RI[e, I_LW] > 0 and RI[e, I_LR] == 0 and held > 0:
        return 0, 0.0  # the pool is full of KV waiting to leave: a release wakes it
    RI[e, I_STUCK] = RI[e, I_STUCK] + 1 if RI[e, I_LW] == waiting else 0
    if RI[e, I_STUCK] > 2:
        err[0] = STUCK
        return -1, 0.0
    return 2, 0.0


# --- the deployment ----------------------------------------------------------------------------------------------
@jit_inline
def delivered(DEL, ORD, k, rid):
    """Request ``rid`` of its pool's numbering queued at engine ``k``'s inbox: its place among those ``k`` took."""
    ORD[rid] = DEL[k]
    DEL[k] += 1


@jit
def pending(RI, DEL, ORD, off, nrep):
    """Requests waiting in a pool's inboxes (each absorbed at once when its engine's step ends, a time-series point
    and a deadline each): what one pass may add beyond the loop's margin."""
    n = 0
    for e in range(nrep):
        h = RI[e, I_HI]
        if h >= 0:
            n += DEL[off + e] - ORD[h]
    return n


@jit
def push_decode(Gp, ev_t, EVI, RId, P, e, end):
    """A decode instance's step on the deployment's heap (jit_loop.push, as engine ``P + e``)."""
    RId[e, I_FLIGHT] = 1
    RId[e, I_VER] += 1
    Gp[G_SEQ] += 1
    ev_push(Gp, ev_t, EVI, end, Gp[G_SEQ], P + e, RId[e, I_VER])


@jit_inline
def route_front(r, pf, sf, f, x):
    """The next arrival routed to a prefill instance (jit_loop.route), its place in that inbox noted."""
    j = route(r, pf, sf, f)
    gid = sf.G[G_ISSUED] - 1
    delivered(x.DEL, x.ORDp, sf.RQI[Q_REP, gid], gid)
    return j


@jit
def pump(r, f, pf, sf, pd, sd, x, k0):
    """ReplicaSet._pump of engine ``k0``, the prefill instances an arrival wakes on the way pumped in turn."""
    P = pf.nrep
    GFp, RIp, RFp, RId, RFd, stk = sf.GF, sf.RI, sf.RF, sd.RI, sd.RF, f.stk
    if k0 < P:
        RIp[k0, I_PUMP] = 1
        RIp[k0, I_STUCK] = 0
    else:
        RId[k0 - P, I_PUMP] = 1
        RId[k0 - P, I_STUCK] = 0
    stk[0] = k0
    top = 1
    while top > 0:
        k = stk[top - 1]
        now = RFp[k, R_NOW] if k < P else RFd[k - P, R_NOW]
        if GFp[0] <= now:  # every arrival due by now is routed before this engine plans
            j = route_front(r, pf, sf, f, x)
            if j >= 0:
                RIp[j, I_PUMP] = 1
                RIp[j, I_STUCK] = 0
                stk[top] = j
                top += 1
            continue
        if k < P:
            code, end = turn(r, f, sf, x, pf, sf, k, x.XI[k, X_HELD], True)
        else:
            code, end = turn(r, f, sf, x, pd, sd, k - P, 0, False)
        if code < 0:
            return
        if code == 2:
            continue
        if k < P:
            if code == 1:
                push(sf.G, RIp, f.ev_t, f.EVI, k, end)
            RIp[k, I_PUMP] = 0
        else:
            if code == 1:
                push_decode(sf.G, f.ev_t, f.EVI, RId, P, k - P, end)
            RId[k - P, I_PUMP] = 0
        top -= 1


@jit
def x_less(XHV, XHG, p, i, j):
    return XHV[p, i] < XHV[p, j] or (XHV[p, i] == XHV[p, j] and XHG[p, i] < XHG[p, j])


@jit
def x_swap(XHV, XHG, p, i, j):
    v, g = XHV[p, i], XHG[p, i]
    XHV[p, i] = XHV[p, j]
    XHG[p, i] = XHG[p, j]
    XHV[p, j] = v
    XHG[p, j] = g


@jit
def x_catch_up(XF, XI, p, now):
    n = XI[p, X_N]
    if n:
        XF[p, X_V] += (now - XF[p, X_T]) / n
    XF[p, X_T] = now


@jit
def x_add(x, p, now, wire_s, gid):
    """Transfers.add: a transfer of wire time ``wire_s`` leaves prefill instance ``p`` from ``now``."""
    Gx, XF, XI, XHV, XHG = x.Gx, x.XF, x.XI, x.XHV, x.XHG
    x_catch_up(XF, XI, p, now)
    i = XI[p, X_N]
    XHV[p, i] = XF[p, X_V] + wire_s
    XHG[p, i] = gid
    XI[p, X_N] = i + 1
    if i + 1 > Gx[G_FHMAX]:
        Gx[G_FHMAX] = i + 1
    while i > 0:
        u = (i - 1) >> 1
        if not x_less(XHV, XHG, p, i, u):
            break
        x_swap(XHV, XHG, p, i, u)
        i = u


@jit
def x_pop(XI, XHV, XHG, p):
    n = XI[p, X_N] - 1
    XI[p, X_N] = n
    if n == 0:
        return
    x_swap(XHV, XHG, p, 0, n)
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < n and x_less(XHV, XHG, p, a, m):
            m = a
        if b < n and x_less(XHV, XHG, p, b, m):
            m = b
        if m == i:
            return
        x_swap(XHV, XHG, p, i, m)
        i = m


@jit
def x_schedule(x, p):
    """ReplicaSet._schedule_transfer: the next wire-done event of ``p`` (earlier ones now stale)."""
    Gx, XF, XI, XHV = x.Gx, x.XF, x.XI, x.XHV
    XI[p, X_VER] += 1
    n = XI[p, X_N]
    if n:
        t = XF[p, X_T] + (XHV[p, 0] - XF[p, X_V]) * n
        if t < INF:
            Gx[G_SEQ] += 1
            ev_push(Gx, x.xe_t, x.XEI, t, Gx[G_SEQ], p, XI[p, X_VER])


@jit
def wire_s(tokens, k_bytes, den, stage_layers, overlap, prefill_s):
    """The wire time left of a prompt's KV (core.serving.kv_transfer.kv_transfer_s at full bandwidth, times
    wire_share: what a layer-by-layer send did not hide behind the prefill)."""
    w = tokens * k_bytes / den
    if not overlap or w <= 0:
        return w * 1.0
    a = 1.0 / (stage_layers if stage_layers > 1 else 1)
    b = 1.0 - prefill_s / w
    return w * (b if b > a else a)


@jit_inline
def start_transfer(w, pd, sd, sf, x, p, gid):
    """ReplicaSet._start_transfer: the decode instance chosen, the transfer leaving prefill instance ``p``."""
    now = sf.RF[p, R_NOW]
    x.pend_s[gid] = now
    Gd, RId = sd.G, sd.RI
    d = pick(pd.nrep, x.rtd, Gd, RId, sf.RQI)
    Gd[G_ISSUED] += 1  # the back router's picks (power-of-two: its pair of each)
    RId[d, I_LOAD] += 1  # in flight towards it from now
    x.decode_of[gid] = d
    x.XI[p, X_HELD] += 1
    ws = wire_s(sf.RQI[Q_INP, gid], w.k_bytes, w.den, w.stage_layers, w.overlap, now - sf.RQF[RQ_ADMIT, gid])
    x_add(x, p, now, ws, gid)
    x_schedule(x, p)


@jit
def kv_arrived(r, f, pf, sf, pd, sd, x, t, gid):
    """ReplicaSet._event for an arrived KV: the prefill instance frees its blocks (and plans if idle), the decode
    instance queues the request with its whole prompt cached (and is woken)."""
    P = pf.nrep
    RIp, RFp, RQIp = sf.RI, sf.RF, sf.RQI
    Gd, RId, RFd, RQFd, RQId = sd.G, sd.RI, sd.RF, sd.RQF, sd.RQI
    Gx = x.Gx
    p = RQIp[Q_REP, gid]
    c = RQIp[Q_CTX, gid]
    release(pf.B, RIp, RQIp, p, gid, c)  # Replica.release
    x.XI[p, X_HELD] -= 1
    x.kv[gid] = t - x.pend_s[gid]
    if not RIp[p, I_FLIGHT]:
        if t > RFp[p, R_NOW]:
            w_record(pf, sf, p, t)
            RFp[p, R_NOW] = t
        pump(r, f, pf, sf, pd, sd, x, p)
        if sf.err[0]:
            return
    d = x.decode_of[gid]
    i = RQIp[Q_INP, gid]
    q = Gx[G_ISSUED]  # its number in the decode pool
    Gx[G_ISSUED] = q + 1
    x.dgid[q] = gid
    RQFd[RQ_ARR, q] = t
    RQId[Q_INP, q] = i
    RQId[Q_OUT, q] = x.out[0, gid]
    RQId[Q_CACHED, q] = i  # its whole prompt cached
    RQId[Q_RES, q] = x.out[1, gid]  # reserve admission: its prompt and max_tokens on the decode pool
    RQId[Q_REP, q] = d
    RQId[Q_NX_IN, q] = -1
    if RId[d, I_TI] < 0:
        RId[d, I_HI] = q
    else:
        RQId[Q_NX_IN, RId[d, I_TI]] = q
    RId[d, I_TI] = q
    Gd[G_INBOX] += 1
    delivered(x.DEL, x.ORDd, P + d, q)
    if RFd[d, R_NEXT] == INF:
        RFd[d, R_NEXT] = t
    # wake it (its load counted since it was chosen)
    if RId[d, I_FLIGHT]:
        if RId[d, I_KIND] == RUN:
            old = RFd[d, R_END]
            new = cut_run(pd, sd, d, t)
            if new != old:
                push_decode(sf.G, f.ev_t, f.EVI, RId, P, d, new)
        return
    if t > RFd[d, R_NOW]:
        w_record(pd, sd, d, t)
        RFd[d, R_NOW] = t
    pump(r, f, pf, sf, pd, sd, x, P + d)


@jit_inline
def wire_done(x, a, b, t, fixed_s):
    """The wire time done on prefill instance ``a`` at ``t`` (if version ``b`` is still its): each transfer done
    arrives ``fixed_s`` later."""
    XF, XI, XHV, XHG, Gx = x.XF, x.XI, x.XHV, x.XHG, x.Gx
    if b == XI[a, X_VER]:
        x_catch_up(XF, XI, a, t)
        while XI[a, X_N] > 0 and XHV[a, 0] <= XF[a, X_V] + X_EPS:
            g = XHG[a, 0]
            x_pop(XI, XHV, XHG, a)
            Gx[G_SEQ] += 1
            ev_push(Gx, x.xe_t, x.XEI, t + fixed_s, Gx[G_SEQ], -1 - g, 0)
        x_schedule(x, a)


@jit_inline
def step_ended(r, w, f, pf, sf, pd, sd, x, k):
    """The step of engine ``k`` ended (the prefill instance ``k`` below ``P``, the decode instance ``k - P`` above):
    its end, the stream told, the prompts it finished leaving as KV transfers in the step's order; then its pump."""
    P = pf.nrep
    closed = sf.G[G_CLOSED]
    if k < P:
        RIp = sf.RI
        RIp[k, I_FLIGHT] = 0
        mixed = RIp[k, I_KIND] == MIXED
        end_step_shared(pf, sf, k)
        if closed and RIp[k, I_HE] >= 0:
            tell(r, f, sf, x, sf, k, True)
        if mixed:
            for j in range(RIp[k, I_NCH]):
                rid = sf.CH[0, k, j]
                if sf.RQI[Q_STATUS, rid] == DONE:
                    start_transfer(w, pd, sd, sf, x, k, rid)
    else:
        RId = sd.RI
        RId[k - P, I_FLIGHT] = 0
        end_step_shared(pd, sd, k - P)
        if closed and RId[k - P, I_HE] >= 0:
            tell(r, f, sf, x, sd, k - P, False)
    pump(r, f, pf, sf, pd, sd, x, k)


@jit
def loop(z):
    """Run the disaggregated deployment's loop until it ends (OK), a slice is done (SLICE), an array needs to grow
    (GROW) or a check fails (the other statuses); resumable from its arrays (``z``: the
    :class:`~core.serving.sim.jit_layout.Run`, :class:`~core.serving.sim.jit_layout.Wire`, the prefill pool's
    :class:`~core.serving.sim.jit_layout.Pool` and :class:`~core.serving.sim.jit_layout.Engines`, the decode
    pool's, the :class:`~core.serving.sim.jit_layout.Fleet` and the
    :class:`~core.serving.sim.jit_layout.Transfers`)."""
    r, w, pf, sf, pd, sd, f, x = z
    P, D, MB, max_clock = pf.nrep, pd.nrep, pf.MB, r.max_clock
    Gp, GFp, RIp, RFp, err = sf.G, sf.GF, sf.RI, sf.RF, sf.err
    Gd, RId, RFd = sd.G, sd.RI, sd.RF
    AH, ev_t, EVI, xe_t, XEI, Gx = f.AH, f.ev_t, f.EVI, x.xe_t, x.XEI, x.Gx
    if not Gp[G_STARTED]:
        Gp[G_STARTED] = 1
        for e in range(P):
            w_record(pf, sf, e, RFp[e, R_NOW])
        for e in range(D):
            w_record(pd, sd, e, RFd[e, R_NOW])
    passes = Gp[G_PASSES]
    resumed = Gp[G_RESUME] != 0
    Gp[G_RESUME] = 0
    margin = 8 * (P + D) + 4 * MB + 64
    timeout = GFp[GF_TIMEOUT] < INF
    # a closed loop's users may all be due at one instant (every one's first request at 0 s): one pass routes them
    # all, each to a prefill instance's inbox (a point and a deadline when absorbed) and a run cut short
    burst = AH.shape[1] if Gp[G_CLOSED] else 0
    while True:
        wp = margin + burst + pending(RIp, x.DEL, x.ORDp, 0, P)
        wd = margin + pending(RId, x.DEL, x.ORDd, P, D)
        if (
            Gp[G_TSN] + wp > sf.TSF.shape[1]
            or Gd[G_TSN] + wd > sd.TSF.shape[1]
            or Gp[G_EVN] + margin + burst > ev_t.shape[0]
            or Gd[G_FHMAX] + MB + 8 > sd.FH.shape[2]
            or (timeout and (Gp[G_DLMAX] + wp > sf.DL.shape[2] or Gd[G_DLMAX] + wd > sd.DL.shape[2]))
            or Gx[G_FHMAX] + MB + 8 > x.XHV.shape[1]
            or Gx[G_EVN] + Gx[G_FHMAX] + margin > xe_t.shape[0]
        ):
            Gp[G_PASSES] = passes
            Gp[G_RESUME] = 1 if resumed else 0
            return GROW
        if resumed:
            resumed = False
        else:
            passes += 1
            if not passes & 1023:
                nxt = GFp[0]
                if Gp[G_EVN] > 0 and ev_t[0] < nxt:
                    nxt = ev_t[0]
                if Gx[G_EVN] > 0 and xe_t[0] < nxt:
                    nxt = xe_t[0]
                code = pass_check(Gp, GFp, passes, nxt, max_clock, r.max_ev)
                if code != OK:
                    return code
        while Gp[G_EVN] > 0:  # a run cut short since
            k = EVI[1, 0]
            if EVI[2, 0] == (RIp[k, I_VER] if k < P else RId[k - P, I_VER]):
                break
            ev_pop(Gp, ev_t, EVI)
        t_r = ev_t[0] if Gp[G_EVN] > 0 else INF
        t_e = xe_t[0] if Gx[G_EVN] > 0 else INF
        t_a = GFp[0]
        if t_r < t_a and t_r <= t_e:
            k = EVI[1, 0]
            ev_pop(Gp, ev_t, EVI)
            step_ended(r, w, f, pf, sf, pd, sd, x, k)
        elif t_e <= t_a and t_e < INF:
            t, a, b = xe_t[0], XEI[1, 0], XEI[2, 0]
            ev_pop(Gx, xe_t, XEI)
            if a >= 0:  # the wire time done on prefill instance a (if version b is still its)
                wire_done(x, a, b, t, w.fixed_s)
            else:
                kv_arrived(r, f, pf, sf, pd, sd, x, t, -1 - a)
        elif t_a < INF:
            if t_a > max_clock:
                Gp[G_PASSES] = passes
                GFp[1] = t_a
                return CLOCK
            j = route_front(r, pf, sf, f, x)
            if j >= 0:
                pump(r, f, pf, sf, pd, sd, x, j)
        else:
            break
        if err[0]:
            Gp[G_PASSES] = passes
            return err[0]
    Gp[G_PASSES] = passes
    return OK
