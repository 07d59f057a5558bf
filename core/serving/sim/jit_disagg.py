"""The disaggregated deployment's loop compiled: :class:`core.serving.sim.replicas.ReplicaSet` with a prefill pool,
KV transfers and a decode pool, over the compiled engine (:mod:`core.serving.sim.jit_engine`), operation for
operation.

Two worlds of the engine's arrays (:mod:`core.serving.sim.jit_layout`), one per pool, each a pair of tuples: its
parameters ``(nrep, B, K, MB, keep, tmax, graph_prefill, max_ctx, pool_blocks, fs, seq_max, inv_P, q, g_launch,
e_launch, g_max, n_k, pp)`` and its arrays ``(TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF)``. The
prefill world's requests are numbered as the deployment's (it takes them in arrival order); the decode world's in
the order their KV arrives (each decode instance takes its own in that order, as a replica numbers its requests,
so the finish and deadline heaps break ties as the Python loop's do). A prefill instance holds a finished request's
blocks (``I_HOLD``) until its KV has left; a decode instance admits a request only when blocks for all of its prompt
are free (``I_REMOTE``). One event heap of step ends (engine ``k``: the prefill instance ``k`` below ``P``, the
decode instance ``k - P`` above) keeps its counters in the prefill world's ``G``. So does the arrival stream
(:mod:`core.serving.sim.jit_arrivals`: Poisson up to a count or a duration, or a closed loop of users, its heap in
``AH``); each engine's list of ended requests goes to it where ``ReplicaSet._ended`` takes it (:func:`tell`).

The transfers: per prefill instance ``p`` its processor-sharing clock (``XF[p, X_V]`` at ``XF[p, X_T]``), a heap of
the transfers in flight (``XHV[p]``: the virtual time each has left at, ``XHG[p]``: its request; by both, as the
Python loop's tuples compare), their count, the heap's version and the requests whose blocks it holds (``XI[p]``);
the transfer events in a heap of their own (``xe_t``, ``XEI``: sequence, ``p`` for the wire of ``p`` done or
``-1 - gid`` for the KV of ``gid`` arrived, version), its counters in ``Gx`` (``G_EVN`` its size, ``G_SEQ`` its
sequence, ``G_ISSUED`` the requests delivered to the decode pool, ``G_FHMAX`` the largest transfer heap).
"""

from __future__ import annotations

from core.serving.sim.jit_arrivals import ah_push
from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_engine import absorb, cut_run, end_step, expire, release
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
from core.serving.sim.jit_plan import begin_step
from core.serving.sim.records import DONE, MIXED, NONE, RUN

# the transfer state of a prefill instance: XF[p] its virtual clock and when it was last caught up; XI[p] the
# transfers in flight, the version of its next wire-done event, the requests whose KV it holds
X_V, X_T = range(2)
X_N, X_VER, X_HELD = range(3)
#: Tolerance of a transfer's end on the virtual clock (core.serving.sim.replicas.Transfers.pop_done).
X_EPS = 1e-12


# --- one world's engine ------------------------------------------------------------------------------------------
@jit
def w_record(sw, aw, e, t):
    TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF = aw
    record(sw[9], sw[11], G, RI, RF, ts_rep, TSF, e, t)


@jit
def w_end_step(sw, aw, e):
    nrep, B, K, MB, keep, tmax, graph_prefill, max_ctx, pool_blocks, fs, seq_max, inv_P, q, g_launch, e_launch, g_max, n_k, pp = sw  # fmt: skip
    TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF = aw
    end_step(B, max_ctx, pool_blocks, fs, seq_max, inv_P, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF, e)


@jit
def tell(N, gaps, Gp, GFp, AH, RI, RQF, RQI, dgid, e, front):
    """ReplicaSet._ended of engine ``e`` of a pool (``front``: the prefill pool): each request that ended there, in
    order, to the arrival stream (a closed loop's user sends its next request a think time after the end, while
    requests are left to issue and the duration allows: jit_arrivals.tell_ended), but a prefill instance's finished
    prompts, whose KV transfers the loop starts from the step's chunks. The decode pool's requests are numbered in
    the order their KV arrived: ``dgid`` gives each one's number in the deployment (its user's think time)."""
    rid = RI[e, I_HE]
    RI[e, I_HE] = -1
    RI[e, I_TE] = -1
    if not Gp[G_CLOSED]:
        return
    while rid >= 0:
        nxt = RQI[Q_NX_E, rid]
        if not (front and RQI[Q_STATUS, rid] == DONE) and Gp[G_ISSUED] + Gp[G_AHN] < N:
            t = RQF[RQ_FIN, rid] + gaps[rid if front else dgid[rid]]
            if not t > GFp[GF_DURATION]:
                ah_push(Gp, AH, t, float(Gp[G_ISSUED] + Gp[G_AHN]))
                GFp[GF_NEXT] = AH[0, 0]
        rid = nxt


@jit
def turn(sw, aw, err, e, held, N, gaps, Gp, GFp, AH, dgid, front):
    """One turn of ``Replica``'s pump loop once the arrivals due are routed (ReplicaSet._pump_loop): absorb,
    expire, tell the stream what ended, plan. Returns (0: nothing to do, 1: a step planned to end at the second
    value, 2: again, -1: error)."""
    nrep, B, K, MB, keep, tmax, graph_prefill, max_ctx, pool_blocks, fs, seq_max, inv_P, q, g_launch, e_launch, g_max, n_k, pp = sw  # fmt: skip
    TB, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF = aw
    if RF[e, R_NEXT] <= RF[e, R_NOW]:
        absorb(B, max_ctx, pool_blocks, fs, seq_max, inv_P, G, GF, RI, RF, RQF, RQI, DL, ts_rep, TSF, e)
    if RI[e, I_DLN] > 0 and DL[0, e, 0] <= RF[e, R_NOW]:
        expire(B, RI, RF, hist, RQF, RQI, DL, e)
    if Gp[G_CLOSED] and RI[e, I_HE] >= 0:  # (a Poisson stream leaves the lists unread)
        tell(N, gaps, Gp, GFp, AH, RI, RQF, RQI, dgid, e, front)
    if RI[e, I_LR] == 0 and RI[e, I_LW] == 0:
        return 0, 0.0
    waiting = RI[e, I_LW]
    end = begin_step(B, K, MB, keep, tmax, graph_prefill, pool_blocks, fs, q, g_launch, e_launch, g_max, n_k, pp, TB, RI, RF, hist, FH, CH, RQF, RQI, DL, err, e)  # fmt: skip
    if err[0]:
        return -1, 0.0
    if RI[e, I_KIND] != NONE:
        return 1, end
    end_step(B, max_ctx, pool_blocks, fs, seq_max, inv_P, G, GF, RI, RF, hist, FH, CH, RQF, RQI, DL, ts_rep, TSF, e)
    if Gp[G_CLOSED] and RI[e, I_HE] >= 0:  # (a Poisson stream leaves the lists unread)
        tell(N, gaps, Gp, GFp, AH, RI, RQF, RQI, dgid, e, front)
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


@jit
def pump(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, stk, err, dgid, k0):
    """ReplicaSet._pump of engine ``k0``, the prefill instances an arrival wakes on the way pumped in turn."""
    TBp, Gp, GFp, RIp, RFp, hist_p, FHp, CHp, RQFp, RQIp, DLp, ts_p, TSFp = ap
    RId, RFd = ad[3], ad[4]
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
            j = route(N, P, sp[9], sp[11], sp[17], gaps, rtp, TBp, Gp, GFp, RIp, RFp, RQFp, RQIp, AH, ev_t, EVI, ts_p, TSFp)  # fmt: skip
            gid = Gp[G_ISSUED] - 1
            delivered(DEL, ORDp, RQIp[Q_REP, gid], gid)
            if j >= 0:
                RIp[j, I_PUMP] = 1
                RIp[j, I_STUCK] = 0
                stk[top] = j
                top += 1
            continue
        if k < P:
            code, end = turn(sp, ap, err, k, XI[k, X_HELD], N, gaps, Gp, GFp, AH, dgid, True)
        else:
            code, end = turn(sd, ad, err, k - P, 0, N, gaps, Gp, GFp, AH, dgid, False)
        if code < 0:
            return
        if code == 2:
            continue
        if k < P:
            if code == 1:
                push(Gp, RIp, ev_t, EVI, k, end)
            RIp[k, I_PUMP] = 0
        else:
            if code == 1:
                push_decode(Gp, ev_t, EVI, RId, P, k - P, end)
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
def x_add(Gx, XF, XI, XHV, XHG, p, now, wire_s, gid):
    """Transfers.add: a transfer of wire time ``wire_s`` leaves prefill instance ``p`` from ``now``."""
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
def x_schedule(Gx, xe_t, XEI, XF, XI, XHV, p):
    """ReplicaSet._schedule_transfer: the next wire-done event of ``p`` (earlier ones now stale)."""
    XI[p, X_VER] += 1
    n = XI[p, X_N]
    if n:
        t = XF[p, X_T] + (XHV[p, 0] - XF[p, X_V]) * n
        if t < INF:
            Gx[G_SEQ] += 1
            ev_push(Gx, xe_t, XEI, t, Gx[G_SEQ], p, XI[p, X_VER])


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


@jit
def start_transfer(D, rtd, Gd, RId, Gx, xe_t, XEI, XF, XI, XHV, XHG, RFp, RQFp, RQIp, decode_of, pend_s, k_bytes, den, stage_layers, overlap, p, gid):  # fmt: skip
    """ReplicaSet._start_transfer: the decode instance chosen, the transfer leaving prefill instance ``p``."""
    now = RFp[p, R_NOW]
    pend_s[gid] = now
    d = pick(D, rtd, Gd, RId, RQIp)
    Gd[G_ISSUED] += 1  # the back router's picks (power-of-two: its pair of each)
    RId[d, I_LOAD] += 1  # in flight towards it from now
    decode_of[gid] = d
    XI[p, X_HELD] += 1
    w = wire_s(RQIp[Q_INP, gid], k_bytes, den, stage_layers, overlap, now - RQFp[RQ_ADMIT, gid])
    x_add(Gx, XF, XI, XHV, XHG, p, now, w, gid)
    x_schedule(Gx, xe_t, XEI, XF, XI, XHV, p)


@jit
def kv_arrived(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, ORDd, stk, err, Gx, dgid, decode_of, pend_s, kv, out, t, gid):  # fmt: skip
    """ReplicaSet._event for an arrived KV: the prefill instance frees its blocks (and plans if idle), the decode
    instance queues the request with its whole prompt cached (and is woken)."""
    RIp, RFp, RQIp = ap[3], ap[4], ap[9]
    TBd, Gd, GFd, RId, RFd, hist_d, FHd, CHd, RQFd, RQId, DLd, ts_d, TSFd = ad
    B = sp[1]
    p = RQIp[Q_REP, gid]
    c = RQIp[Q_CTX, gid]
    release(B, RIp, RQIp, p, gid, c)  # Replica.release
    XI[p, X_HELD] -= 1
    kv[gid] = t - pend_s[gid]
    if not RIp[p, I_FLIGHT]:
        if t > RFp[p, R_NOW]:
            w_record(sp, ap, p, t)
            RFp[p, R_NOW] = t
        pump(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, stk, err, dgid, p)
        if err[0]:
            return
    d = decode_of[gid]
    i = RQIp[Q_INP, gid]
    s = Gx[G_ISSUED]  # its number in the decode world
    Gx[G_ISSUED] = s + 1
    dgid[s] = gid
    RQFd[RQ_ARR, s] = t
    RQId[Q_INP, s] = i
    RQId[Q_OUT, s] = out[0, gid]
    RQId[Q_CACHED, s] = i  # its whole prompt cached
    RQId[Q_RES, s] = out[1, gid]  # reserve admission: its prompt and max_tokens on the decode pool
    RQId[Q_REP, s] = d
    RQId[Q_NX_IN, s] = -1
    if RId[d, I_TI] < 0:
        RId[d, I_HI] = s
    else:
        RQId[Q_NX_IN, RId[d, I_TI]] = s
    RId[d, I_TI] = s
    Gd[G_INBOX] += 1
    delivered(DEL, ORDd, P + d, s)
    if RFd[d, R_NEXT] == INF:
        RFd[d, R_NEXT] = t
    # wake it (its load counted since it was chosen)
    if RId[d, I_FLIGHT]:
        if RId[d, I_KIND] == RUN:
            old = RFd[d, R_END]
            new = cut_run(sd[17], TBd, RId, RFd, d, t)
            if new != old:
                push_decode(ap[1], ev_t, EVI, RId, P, d, new)
        return
    if t > RFd[d, R_NOW]:
        w_record(sd, ad, d, t)
        RFd[d, R_NOW] = t
    pump(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, stk, err, dgid, P + d)


@jit
def loop(z):
    """Run the disaggregated deployment's loop until it ends (OK), a slice is done (SLICE), an array needs to grow
    (GROW) or a check fails (the other statuses); resumable from its arrays (``z``: the deployment's parameters, the
    prefill world, the decode world, the deployment's arrays)."""
    N, P, D, max_ev, max_clock, fixed_s, k_bytes, den, stage_layers, overlap = z[0]
    sp, ap, sd, ad = z[1], z[2], z[3], z[4]
    gaps, rtp, rtd, AH, ev_t, EVI, XF, XI, XHV, XHG, xe_t, XEI, Gx, dgid, decode_of, pend_s, kv, out, stk, err, DEL, ORDp, ORDd = z[5]  # fmt: skip
    TBp, Gp, GFp, RIp, RFp, hist_p, FHp, CHp, RQFp, RQIp, DLp, ts_p, TSFp = ap
    TBd, Gd, GFd, RId, RFd, hist_d, FHd, CHd, RQFd, RQId, DLd, ts_d, TSFd = ad
    MB = sp[3]
    if not Gp[G_STARTED]:
        Gp[G_STARTED] = 1
        for e in range(P):
            w_record(sp, ap, e, RFp[e, R_NOW])
        for e in range(D):
            w_record(sd, ad, e, RFd[e, R_NOW])
    passes = Gp[G_PASSES]
    resumed = Gp[G_RESUME] != 0
    Gp[G_RESUME] = 0
    margin = 8 * (P + D) + 4 * MB + 64
    timeout = GFp[GF_TIMEOUT] < INF
    # a closed loop's users may all be due at one instant (every one's first request at 0 s): one pass routes them
    # all, each to a prefill instance's inbox (a point and a deadline when absorbed) and a run cut short
    burst = AH.shape[1] if Gp[G_CLOSED] else 0
    while True:
        wp = margin + burst + pending(RIp, DEL, ORDp, 0, P)
        wd = margin + pending(RId, DEL, ORDd, P, D)
        if (
            Gp[G_TSN] + wp > TSFp.shape[1]
            or Gd[G_TSN] + wd > TSFd.shape[1]
            or Gp[G_EVN] + margin + burst > ev_t.shape[0]
            or Gd[G_FHMAX] + MB + 8 > FHd.shape[2]
            or (timeout and (Gp[G_DLMAX] + wp > DLp.shape[2] or Gd[G_DLMAX] + wd > DLd.shape[2]))
            or Gx[G_FHMAX] + MB + 8 > XHV.shape[1]
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
                code = pass_check(Gp, GFp, passes, nxt, max_clock, max_ev)
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
            if k < P:
                RIp[k, I_FLIGHT] = 0
                mixed = RIp[k, I_KIND] == MIXED
                w_end_step(sp, ap, k)
                if Gp[G_CLOSED] and RIp[k, I_HE] >= 0:
                    tell(N, gaps, Gp, GFp, AH, RIp, RQFp, RQIp, dgid, k, True)
                if mixed:  # the prompts it finished leave as KV transfers, in the step's order
                    for j in range(RIp[k, I_NCH]):
                        rid = CHp[0, k, j]
                        if RQIp[Q_STATUS, rid] == DONE:
                            start_transfer(D, rtd, Gd, RId, Gx, xe_t, XEI, XF, XI, XHV, XHG, RFp, RQFp, RQIp, decode_of, pend_s, k_bytes, den, stage_layers, overlap, k, rid)  # fmt: skip
            else:
                RId[k - P, I_FLIGHT] = 0
                w_end_step(sd, ad, k - P)
                if Gp[G_CLOSED] and RId[k - P, I_HE] >= 0:
                    tell(N, gaps, Gp, GFp, AH, RId, RQFd, RQId, dgid, k - P, False)
            pump(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, stk, err, dgid, k)
        elif t_e <= t_a and t_e < INF:
            t, a, b = xe_t[0], XEI[1, 0], XEI[2, 0]
            ev_pop(Gx, xe_t, XEI)
            if a >= 0:  # the wire time done on prefill instance a (if version b is still its)
                if b == XI[a, X_VER]:
                    x_catch_up(XF, XI, a, t)
                    while XI[a, X_N] > 0 and XHV[a, 0] <= XF[a, X_V] + X_EPS:
                        g = XHG[a, 0]
                        x_pop(XI, XHV, XHG, a)
                        Gx[G_SEQ] += 1
                        ev_push(Gx, xe_t, XEI, t + fixed_s, Gx[G_SEQ], -1 - g, 0)
                    x_schedule(Gx, xe_t, XEI, XF, XI, XHV, a)
            else:
                kv_arrived(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, ORDd, stk, err, Gx, dgid, decode_of, pend_s, kv, out, t, -1 - a)  # fmt: skip
        elif t_a < INF:
            if t_a > max_clock:
                Gp[G_PASSES] = passes
                GFp[1] = t_a
                return CLOCK
            j = route(N, P, sp[9], sp[11], sp[17], gaps, rtp, TBp, Gp, GFp, RIp, RFp, RQFp, RQIp, AH, ev_t, EVI, ts_p, TSFp)  # fmt: skip
            gid = Gp[G_ISSUED] - 1
            delivered(DEL, ORDp, RQIp[Q_REP, gid], gid)
            if j >= 0:
                pump(N, P, rtp, gaps, AH, sp, ap, sd, ad, ev_t, EVI, XI, DEL, ORDp, stk, err, dgid, j)
        else:
            break
        if err[0]:
            Gp[G_PASSES] = passes
            return err[0]
    Gp[G_PASSES] = passes
    return OK
