"""One replica's engine compiled: :class:`core.serving.sim.engine.Engine` (and the :class:`~core.serving.sim.replicas.Replica`
it is in a deployment) function for function, for chunked prefill or prefill priority, with preempt-and-recompute
or reserve admission, sliding windows and adapters (:mod:`core.serving.sim.jit_lora`) where the caller lays them out
(:func:`core.serving.sim.compiled.fallback_reason`), the plan of a step in :mod:`core.serving.sim.jit_plan`; a timeout expires requests as
``_expire`` does, from the deadline heap of :mod:`core.serving.sim.jit_deadline`. Each function is the method of the
same name (``absorb`` is ``_absorb_arrivals``, ``plan_chunked`` ``_plan_chunked``, ...) with the engine's lists in
the arrays of :mod:`core.serving.sim.jit_layout`.
"""

from __future__ import annotations

import numpy as np

from core.serving.sim.jit_arrivals import ended_push
from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_deadline import dl_pop, dl_push
from core.serving.sim.jit_layout import (
    EPS,
    FALLBACK,
    G_INBOX,
    GF_TIMEOUT,
    I_ADIST,
    I_ASLOTS,
    I_ASYNC,
    I_BSUM,
    I_BSW,
    I_D,
    I_DLN,
    I_FHN,
    I_FULL,
    I_HI,
    I_HOLD,
    I_HP,
    I_HR,
    I_HW,
    I_ITER,
    I_KIND,
    I_LOAD,
    I_LP,
    I_LR,
    I_LW,
    I_NCH,
    I_NDEC,
    I_NIW,
    I_PDEC,
    I_PPRI,
    I_PRE,
    I_RCUT,
    I_RD,
    I_RES,
    I_RK,
    I_RKMAX,
    I_RSV,
    I_SLD,
    I_SLIDE,
    I_TI,
    I_TP,
    I_TR,
    I_TW,
    I_WIN,
    INF,
    NO_ROOM,
    Q_CACHED,
    Q_CTX,
    Q_FIN_D,
    Q_GEN,
    Q_INP,
    Q_LO,
    Q_NPRE,
    Q_NX_IN,
    Q_NX_P,
    Q_NX_R,
    Q_OUT,
    Q_PV_P,
    Q_PV_R,
    Q_RES,
    Q_STATUS,
    Q_TARGET,
    R_ADS,
    R_BUSY,
    R_CUT,
    R_END,
    R_LAST,
    R_LOADS,
    R_NEXT,
    R_NOW,
    R_PREFILL,
    R_RA,
    R_RDEAD,
    R_RDT,
    R_RG,
    R_RPRE,
    R_RR,
    R_SEEN,
    R_SS,
    RQ_ADMIT,
    RQ_ARR,
    RQ_FIN,
    RQ_FIRST,
)
from core.serving.sim.jit_lora import release as lora_release
from core.serving.sim.jit_parts import (
    f_pop,
    f_push,
    in_waiting,
    link_remove,
    record,
    t_one,
    t_run,
    used,
    w_append,
    w_appendleft,
    w_remove,
)
from core.serving.sim.jit_window import chunk_pairs_sliding, chunk_s, cross, cross_min, x_push
from core.serving.sim.records import DONE, MIXED, NONE, REJECTED, RUN, TIMED_OUT, UNFINISHED


@jit_inline
def finish(RI, RF, RQF, RQI, e, rid, st):
    RQI[Q_STATUS, rid] = st
    RQF[RQ_FIN, rid] = RF[e, R_NOW]
    RI[e, I_LOAD] -= 1  # Replica._user_done
    ended_push(RI, RQI, e, rid)


@jit_inline
def release(B, RI, RQI, e, rid, c):
    if RI[e, I_ASLOTS]:
        lora_release(RI, RQI, e, rid)
    if RI[e, I_RSV]:
        RI[e, I_RES] -= RQI[Q_RES, rid]
        return
    RI[e, I_FULL] -= (c + B - 1) // B
    if RI[e, I_SLD]:
        w = RI[e, I_WIN]
        RI[e, I_SLIDE] -= ((c if c < w else w) + B - 1) // B


@jit
def absorb(p, s, e):
    """``_absorb_arrivals`` of replica ``e`` of pool ``p`` (its state ``s``)."""
    B, fs, pool_blocks, seq_max = p.B, p.fs, p.pool_blocks, p.seq_max
    G, GF, RI, RF, RQF, RQI, DL = s.G, s.GF, s.RI, s.RF, s.RQF, s.RQI, s.DL
    while RF[e, R_NEXT] <= RF[e, R_NOW] and RF[e, R_NEXT] < INF:
        rid = RI[e, I_HI]  # the inbox's head (Replica._next_request)
        G[G_INBOX] -= 1
        t = RQF[RQ_ARR, rid]
        nxt = RQI[Q_NX_IN, rid]
        RI[e, I_HI] = nxt
        if nxt < 0:
            RI[e, I_TI] = -1
            RF[e, R_NEXT] = INF
        else:
            RF[e, R_NEXT] = RQF[RQ_ARR, nxt]
        i, o = RQI[Q_INP, rid], RQI[Q_OUT, rid]
        RQI[Q_STATUS, rid] = UNFINISHED
        RQF[RQ_ADMIT, rid] = np.nan
        RQF[RQ_FIRST, rid] = np.nan
        RQF[RQ_FIN, rid] = np.nan
        RQI[Q_NPRE, rid] = 0
        RQI[Q_GEN, rid] = 0
        RQI[Q_CTX, rid] = 0
        RQI[Q_TARGET, rid] = 0
        RQI[Q_FIN_D, rid] = -1  # Q_CACHED: its shared prefix, where the router found its group served here
        RF[e, R_LAST] = t
        c = i + (o - 1)
        need = fs * (RQI[Q_RES, rid] if RI[e, I_RSV] else (c + B - 1) // B)
        if RI[e, I_SLD]:  # Pool.blocks_for's sliding term
            w = RI[e, I_WIN]
            need += RF[e, R_SS] * (((c if c < w else w) + B - 1) // B)
        cap = pool_blocks if pool_blocks < seq_max else seq_max
        if i + o > p.max_ctx or need > cap + EPS:
            RQI[Q_STATUS, rid] = REJECTED
            RQF[RQ_FIN, rid] = t
            RI[e, I_LOAD] -= 1
            ended_push(RI, RQI, e, rid)
            continue
        w_append(RI, RQI, e, rid)
        if GF[GF_TIMEOUT] < INF:
            dl_push(G, RI, DL, e, t + GF[GF_TIMEOUT], rid)
        record(fs, p.inv_P, G, RI, RF, s.ts_rep, s.TSF, e, t)


@jit_inline
def decode_need(B, fs, RI, RF, hist, e):
    if RI[e, I_RSV] or not RI[e, I_NDEC]:
        return 0.0
    ph = (-RI[e, I_D]) % B
    if not RI[e, I_SLD]:  # the sliding half of hist is read only where laid out (a loop may give it B columns)
        return fs * hist[e, ph]
    return fs * hist[e, ph] + RF[e, R_SS] * hist[e, B + ph]


@jit
def kv_run_bound(B, pool_blocks, fs, RI, RF, hist, e, kmax):
    ss, sld = RF[e, R_SS], RI[e, I_SLD]
    cyc = fs * RI[e, I_NDEC] + ss * RI[e, I_NIW]
    if RI[e, I_RSV] or cyc <= 0:
        return kmax
    free = pool_blocks - used(fs, RI, RF, e) + EPS
    if free < 0:
        return 0
    qq = int(free // cyc)
    if qq * B >= kmax:
        return kmax
    rem = free - qq * cyc
    D = RI[e, I_D]
    for j in range(B):
        ph = (-(D + j)) % B
        need = fs * hist[e, ph]
        if sld:
            need += ss * hist[e, B + ph]
        if need > rem:
            v = qq * B + j
            return kmax if kmax < v else v
        rem -= need
    v = qq * B + B
    return kmax if kmax < v else v


@jit
def join_decode(B, G, RI, hist, FH, RQI, e, rid, c):
    base = c - RI[e, I_D]
    RQI[Q_CTX, rid] = base
    ph = base % B
    RI[e, I_NDEC] += 1
    RI[e, I_BSUM] += base
    hist[e, ph] += 1
    if RI[e, I_SLD] and c < RI[e, I_WIN]:
        RQI[Q_LO, rid] = 1
        RI[e, I_NIW] += 1
        RI[e, I_BSW] += base
        hist[e, B + ph] += 1
        x_push(G, RI, FH, e, RI[e, I_WIN] - base, rid)
    fd = RI[e, I_D] + RQI[Q_OUT, rid] - RQI[Q_GEN, rid]
    RQI[Q_FIN_D, rid] = fd
    f_push(G, RI, FH, e, fd, rid)


@jit
def leave_decode(B, RI, hist, RQI, e, rid):
    base = RQI[Q_CTX, rid]
    ph = base % B
    RI[e, I_NDEC] -= 1
    RI[e, I_BSUM] -= base
    hist[e, ph] -= 1
    if RQI[Q_LO, rid]:
        RQI[Q_LO, rid] = 0
        RI[e, I_NIW] -= 1
        RI[e, I_BSW] -= base
        hist[e, B + ph] -= 1
    RQI[Q_GEN, rid] = RQI[Q_OUT, rid] - (RQI[Q_FIN_D, rid] - RI[e, I_D])
    RQI[Q_FIN_D, rid] = -1
    return base + RI[e, I_D]


@jit
def complete(B, RI, RF, RQF, RQI, e, rid, c):
    link_remove(RI, RQI, e, rid, I_HR, I_TR, I_LR, Q_NX_R, Q_PV_R)
    if not RI[e, I_HOLD]:  # a prefill instance keeps the blocks until the KV has left
        release(B, RI, RQI, e, rid, c)
    finish(RI, RF, RQF, RQI, e, rid, DONE)


@jit
def advance_decode(B, RI, RF, hist, FH, RQF, RQI, e, k):
    D = RI[e, I_D]
    sld = RI[e, I_SLD]
    if k == 1:
        ph = (-D) % B
        RI[e, I_FULL] += hist[e, ph]
        if sld:
            RI[e, I_SLIDE] += hist[e, B + ph]
    else:
        qq, r = k // B, k % B
        s = 0
        for j in range(r):
            s += hist[e, (-(D + j)) % B]
        RI[e, I_FULL] += qq * RI[e, I_NDEC] + s
        if sld:
            s = 0
            for j in range(r):
                s += hist[e, B + (-(D + j)) % B]
            RI[e, I_SLIDE] += qq * RI[e, I_NIW] + s
    RI[e, I_D] = D + k
    D = D + k
    while RI[e, I_FHN] > 0 and FH[0, e, 0] <= D:
        fd, rid = FH[0, e, 0], FH[1, e, 0]
        f_pop(RI, FH, e)
        if RQI[Q_FIN_D, rid] != fd:
            continue
        complete(B, RI, RF, RQF, RQI, e, rid, leave_decode(B, RI, hist, RQI, e, rid))
    if sld:
        cross(B, RI, hist, FH, RQI, e, D)


@jit
def take_out(B, RI, hist, RQI, e, rid):
    link_remove(RI, RQI, e, rid, I_HR, I_TR, I_LR, Q_NX_R, Q_PV_R)
    if RQI[Q_FIN_D, rid] >= 0:
        c = leave_decode(B, RI, hist, RQI, e, rid)
    else:
        link_remove(RI, RQI, e, rid, I_HP, I_TP, I_LP, Q_NX_P, Q_PV_P)
        c = RQI[Q_CTX, rid]
    release(B, RI, RQI, e, rid, c)
    return c


@jit
def preempt_last(B, keep, RI, hist, RQI, e):
    rid = RI[e, I_TR]
    c = take_out(B, RI, hist, RQI, e, rid)
    RQI[Q_CACHED, rid] = (c // B) * B if keep else 0
    RQI[Q_CTX, rid] = 0
    RQI[Q_NPRE, rid] += 1
    RI[e, I_PRE] += 1
    w_appendleft(RI, RQI, e, rid)


@jit_inline
def chunk_f(B, c, n):
    return (c + n + B - 1) // B - (c + B - 1) // B


@jit_inline
def decode_ar(fs, RI, RF, e):
    """``DecodeSet._decode_AR``: (attended pairs, cached tokens read, growth per iteration) of the decode set."""
    m, D = RI[e, I_NDEC], RI[e, I_D]
    if not RI[e, I_SLD]:
        Rr = float(RI[e, I_BSUM] + m * D)
        return Rr + m, Rr, float(m)
    ss, niw = RF[e, R_SS], RI[e, I_NIW]
    lo_ctx = RI[e, I_BSW] + niw * D
    Rr = fs * (RI[e, I_BSUM] + m * D) + ss * (lo_ctx + (m - niw) * RI[e, I_WIN])
    g = fs * m + ss * niw
    return Rr + g, Rr, g


@jit_inline
def begin_mixed(p, s, e):
    """The mixed step of the planned chunks (and the decoding sequences' tokens) on replica ``e``: its time."""
    B, fs = p.B, p.fs
    RI, RF, CH, RQI = s.RI, s.RF, s.CH, s.RQI
    nch = RI[e, I_NCH]
    decoding = RI[e, I_NDEC] > 0 and not RI[e, I_PPRI]  # prefill priority: decoding sequences wait
    A_d, R_d = 0.0, 0.0
    if decoding:
        A_d, R_d, _ = decode_ar(fs, RI, RF, e)
        T, A, Rr = RI[e, I_NDEC], A_d, R_d
    else:
        T, A, Rr = 0, 0.0, 0.0
    for j in range(nch):
        rid, n = CH[0, e, j], CH[1, e, j]
        c = RQI[Q_CTX, rid]
        T += n
        if RI[e, I_SLD]:  # Pool.chunk_pairs and Pool.eff with the window's clipping
            A += chunk_pairs_sliding(fs, RF[e, R_SS], RI[e, I_WIN], c, n)
            w = RI[e, I_WIN]
            Rr += fs * c + RF[e, R_SS] * (c if c < w else w)
            RI[e, I_SLIDE] += chunk_s(B, w, c, n)
        else:
            A += n * c + n * (n + 1) / 2
            Rr += c
        RI[e, I_FULL] += chunk_f(B, c, n)
    if T > p.tmax:
        s.err[0] = FALLBACK
        return
    S = (RI[e, I_NDEC] if decoding else 0) + nch
    D = RI[e, I_ADIST]  # the running set's adapters
    dt = t_one(p, T, A, Rr, S, D) + RF[e, R_LOADS]
    RF[e, R_LOADS] = 0.0
    RF[e, R_BUSY] += dt
    RF[e, R_PREFILL] += dt - (t_one(p, RI[e, I_NDEC], A_d, R_d, RI[e, I_NDEC], D) if decoding else 0.0)
    RF[e, R_ADS] += D * dt
    RI[e, I_ITER] += 1
    RI[e, I_KIND] = MIXED
    RF[e, R_END] = RF[e, R_NOW] + dt
    RI[e, I_PDEC] = 1 if decoding else 0


@jit
def fin_min(RI, FH, RQI, e):
    while RI[e, I_FHN] > 1 and RQI[Q_FIN_D, FH[1, e, 0]] != FH[0, e, 0]:
        f_pop(RI, FH, e)
    return FH[0, e, 0]


@jit
def expire(p, s, e):
    """``_expire``: every request past its deadline by now leaves (running: its blocks freed) as timed out. A
    request of this replica not finished is in its waiting queue or running."""
    B, RI, RF, hist, RQF, RQI, DL = p.B, s.RI, s.RF, s.hist, s.RQF, s.RQI, s.DL
    now = RF[e, R_NOW]
    while RI[e, I_DLN] > 0 and DL[0, e, 0] <= now:
        rid = np.int64(DL[1, e, 0])
        dl_pop(RI, DL, e)
        if RQI[Q_STATUS, rid] != UNFINISHED:
            continue
        if in_waiting(RI, RQI, e, rid):
            w_remove(RI, RQI, e, rid)
        else:
            take_out(B, RI, hist, RQI, e, rid)
        finish(RI, RF, RQF, RQI, e, rid, TIMED_OUT)


@jit
def next_deadline(RI, RQI, DL, e):
    while RI[e, I_DLN] > 0 and RQI[Q_STATUS, np.int64(DL[1, e, 0])] != UNFINISHED:
        dl_pop(RI, DL, e)
    return DL[0, e, 0] if RI[e, I_DLN] > 0 else INF


@jit_inline
def begin_run(p, s, e, limit):
    """A run of decode iterations on replica ``e`` (at most ``limit``, 0: no limit): how many, and its time."""
    B, fs = p.B, p.fs
    RI, RF, hist, FH, RQF, RQI, DL, err = s.RI, s.RF, s.hist, s.FH, s.RQF, s.RQI, s.DL, s.err
    kmax = fin_min(RI, FH, RQI, e) - RI[e, I_D]
    if limit > 0 and limit < kmax:
        kmax = limit
    if RI[e, I_SLD] and RI[e, I_NIW]:  # the run stops where the first sequence reaches the window
        kx = cross_min(RI, FH, RQI, e) - RI[e, I_D]
        if kx < kmax:
            kmax = kx
    kmax = kv_run_bound(B, p.pool_blocks, fs, RI, RF, hist, e, kmax)
    if kmax <= 0:
        err[0] = NO_ROOM
        return
    t_dead = next_deadline(RI, RQI, DL, e) if RI[e, I_DLN] > 0 else INF
    t_event = t_dead
    asy = RI[e, I_ASYNC] != 0
    cut = RF[e, R_CUT]
    # with adapters an arrival may join at once although others wait (theirs would exceed max_loras)
    cut_ok = RI[e, I_LW] == 0 or RI[e, I_ASLOTS] > 0 or (asy and RQF[RQ_ARR, RI[e, I_HW]] > cut)
    A, Rr, g = decode_ar(fs, RI, RF, e)
    D = RI[e, I_ADIST]
    RI[e, I_RD] = D
    T = RI[e, I_NDEC]
    if T > p.tmax:
        err[0] = FALLBACK
        return
    if asy and cut_ok:
        if RI[e, I_LW] > 0 and RQF[RQ_ARR, RI[e, I_TW]] > cut:
            kmax = 1
        elif RF[e, R_NEXT] < INF:
            ka = t_run(p, T, A, Rr, g, kmax, RF[e, R_NEXT] - RF[e, R_NOW], D)[0] + 1
            if ka < kmax:
                kmax = ka
    elif cut_ok and RF[e, R_NEXT] < t_event:
        t_event = RF[e, R_NEXT]
    k, dt = t_run(p, T, A, Rr, g, kmax, t_event - RF[e, R_NOW] if t_event < INF else INF, D)
    RF[e, R_RPRE] = t_run(p, T, A, Rr, g, k - 1, INF, D)[1] if asy and k > 1 else 0.0
    RI[e, I_KIND] = RUN
    RF[e, R_END] = RF[e, R_NOW] + dt
    RI[e, I_RK] = k
    RF[e, R_RDT] = dt
    RI[e, I_RKMAX] = kmax
    RF[e, R_RA] = A
    RF[e, R_RR] = Rr
    RF[e, R_RG] = g
    RF[e, R_RDEAD] = t_dead
    RI[e, I_RCUT] = 1 if cut_ok else 0


@jit_inline
def cut_run(p, s, e, t):
    """A run of replica ``e`` in flight cut short where an arrival at ``t`` may join it: its new end [s]."""
    RI, RF = s.RI, s.RF
    if RI[e, I_KIND] != RUN or t >= RF[e, R_END]:
        return RF[e, R_END]
    if not RI[e, I_RCUT]:
        return RF[e, R_END]
    T, A, Rr, g, D = RI[e, I_NDEC], RF[e, R_RA], RF[e, R_RR], RF[e, R_RG], RI[e, I_RD]
    if RI[e, I_ASYNC]:  # seen one iteration after the one it falls in (never past the run planned)
        ka = t_run(p, T, A, Rr, g, RI[e, I_RKMAX], t - RF[e, R_NOW], D)[0] + 1
        kk = RI[e, I_RK] if RI[e, I_RK] < ka else ka
        k, dt = t_run(p, T, A, Rr, g, kk, RF[e, R_RDEAD] - RF[e, R_NOW], D)
        RF[e, R_RPRE] = t_run(p, T, A, Rr, g, k - 1, INF, D)[1] if k > 1 else 0.0
    else:
        tt = t if t < RF[e, R_RDEAD] else RF[e, R_RDEAD]
        k, dt = t_run(p, T, A, Rr, g, RI[e, I_RKMAX], tt - RF[e, R_NOW], D)
    RI[e, I_RK] = k
    RF[e, R_RDT] = dt
    RF[e, R_END] = RF[e, R_NOW] + dt
    return RF[e, R_END]


@jit_inline
def end_step(p, s, e):
    """``Engine.end_step`` of replica ``e``: its planned step done, its clock at the step's end."""
    B = p.B
    G, RI, RF, hist, FH, CH, RQF, RQI = s.G, s.RI, s.RF, s.hist, s.FH, s.CH, s.RQF, s.RQI
    kind = RI[e, I_KIND]
    if kind == MIXED:
        RF[e, R_NOW] = RF[e, R_END]
        if RF[e, R_NEXT] <= RF[e, R_NOW]:
            absorb(p, s, e)
        if RI[e, I_PDEC]:
            advance_decode(B, RI, RF, hist, FH, RQF, RQI, e, 1)
        for j in range(RI[e, I_NCH]):
            rid, n = CH[0, e, j], CH[1, e, j]
            c = RQI[Q_CTX, rid] + n
            RQI[Q_CTX, rid] = c
            if c < RQI[Q_TARGET, rid]:
                continue
            link_remove(RI, RQI, e, rid, I_HP, I_TP, I_LP, Q_NX_P, Q_PV_P)
            RQI[Q_GEN, rid] += 1
            if RQI[Q_GEN, rid] == 1:
                RQF[RQ_FIRST, rid] = RF[e, R_NOW]
            if RQI[Q_GEN, rid] >= RQI[Q_OUT, rid]:
                complete(B, RI, RF, RQF, RQI, e, rid, c)
            else:
                join_decode(B, G, RI, hist, FH, RQI, e, rid, c)
    elif kind == RUN:
        k, dt = RI[e, I_RK], RF[e, R_RDT]
        if RI[e, I_ASYNC]:  # the next plan was made when the run's last iteration started
            RF[e, R_SEEN] = RF[e, R_NOW] + RF[e, R_RPRE]
        RF[e, R_ADS] += RI[e, I_RD] * dt
        RF[e, R_BUSY] += dt
        RI[e, I_ITER] += k
        RF[e, R_NOW] = RF[e, R_END]
        if RF[e, R_NEXT] <= RF[e, R_NOW]:
            absorb(p, s, e)
        advance_decode(B, RI, RF, hist, FH, RQF, RQI, e, k)
    RI[e, I_KIND] = NONE
    record(p.fs, p.inv_P, G, RI, RF, s.ts_rep, s.TSF, e, RF[e, R_NOW])


@jit
def end_step_shared(p, s, e):
    """:func:`end_step` as a call of its own: one compiled body for a loop with many sites of it (the disaggregated
    loop's four), where inlining each would compile it four times over."""
    end_step(p, s, e)


# --- the deployment (ReplicaSet) ---------------------------------------------------------------------------------
