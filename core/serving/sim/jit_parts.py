"""The compiled loop's building blocks (:mod:`core.serving.sim.compiled`): the time series, the engine's queues as
linked lists over the request numbers, its finish heap and the deployment's event heap (binary heaps with the
Python loop's tie-breaks), and the iteration timing of :class:`core.serving.sim.timing.LinearTiming` (one stage,
its adapters' term from :mod:`core.serving.sim.jit_lora`), each operation in the Python loop's order.

Each function takes the arrays and parameters it reads, by the names :func:`core.serving.sim.jit_loop.loop` gives
them (``RI``/``RF``: per replica, ``RQI``/``RQF``: per request, ``FH``: the finish heaps, ``G``: the loop's
counters; :mod:`core.serving.sim.jit_layout` names their columns and rows).
"""

from __future__ import annotations

import math

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_layout import (
    G_EVN,
    G_FHMAX,
    G_TSN,
    I_FHN,
    I_FULL,
    I_HW,
    I_LR,
    I_LW,
    I_RES,
    I_RSV,
    I_SLIDE,
    I_TW,
    INF,
    Q_NX_W,
    R_SS,
)
from core.serving.sim.jit_lora import lora_s


@jit_inline
def used(fs, RI, RF, e):
    """Blocks-worth held: full_share x full blocks + slide_share x sliding blocks (reserve admission: reserved;
    full_share is 1.0 there, so 1.0 x the count)."""
    if RI[e, I_RSV]:
        return fs * RI[e, I_RES]
    return fs * RI[e, I_FULL] + RF[e, R_SS] * RI[e, I_SLIDE]


@jit_inline
def record(fs, inv_P, G, RI, RF, ts_rep, TSF, e, t):
    n = G[G_TSN]
    ts_rep[n] = e
    TSF[0, n] = t
    TSF[1, n] = RI[e, I_LW]
    TSF[2, n] = RI[e, I_LR]
    TSF[3, n] = used(fs, RI, RF, e) * inv_P  # (full_share x full blocks + slide_share x sliding) / P
    G[G_TSN] = n + 1


# --- linked lists --------------------------------------------------------------------------------------------
@jit_inline
def w_append(RI, RQI, e, rid):
    RQI[Q_NX_W, rid] = -1
    if RI[e, I_TW] < 0:
        RI[e, I_HW] = rid
    else:
        RQI[Q_NX_W, RI[e, I_TW]] = rid
    RI[e, I_TW] = rid
    RI[e, I_LW] += 1


@jit_inline
def w_appendleft(RI, RQI, e, rid):
    RQI[Q_NX_W, rid] = RI[e, I_HW]
    RI[e, I_HW] = rid
    if RI[e, I_TW] < 0:
        RI[e, I_TW] = rid
    RI[e, I_LW] += 1


@jit_inline
def w_popleft(RI, RQI, e):
    rid = RI[e, I_HW]
    nxt = RQI[Q_NX_W, rid]
    RI[e, I_HW] = nxt
    if nxt < 0:
        RI[e, I_TW] = -1
    RI[e, I_LW] -= 1
    return rid


@jit_inline
def link_append(RI, RQI, e, rid, H, T, L, NX, PV):
    """Append ``rid`` to a doubly linked queue of replica ``e``: its head, tail and length in columns ``H``, ``T``,
    ``L`` of ``RI``, its links in rows ``NX`` (next) and ``PV`` (previous) of ``RQI`` (the running queue, or the
    prefilling one: both in admission order, either member removable)."""
    RQI[NX, rid] = -1
    RQI[PV, rid] = RI[e, T]
    if RI[e, T] < 0:
        RI[e, H] = rid
    else:
        RQI[NX, RI[e, T]] = rid
    RI[e, T] = rid
    RI[e, L] += 1


@jit_inline
def link_remove(RI, RQI, e, rid, H, T, L, NX, PV):
    """Take ``rid`` out of the queue of :func:`link_append` (``list.remove``)."""
    a, b = RQI[PV, rid], RQI[NX, rid]
    if a < 0:
        RI[e, H] = b
    else:
        RQI[NX, a] = b
    if b < 0:
        RI[e, T] = a
    else:
        RQI[PV, b] = a
    RI[e, L] -= 1


# --- a replica's binary heaps of (key, request) pairs, smallest first: rows r and r + 1 of a (rows, replica, slot)
# array, the size in RI[e, n] and the deployment's largest size in G[gmax]. The finish heap (FH rows 0-1), the
# sliding window's crossing heap (FH rows 2-3, jit_window.py) and the deadline heap (DL, jit_deadline.py) are this
# one heap. Keys are distinct (a request's pair is pushed once per key), so any binary heap pops in heapq's order.
@jit_inline
def h_less(H, r, e, i, j):
    return H[r, e, i] < H[r, e, j] or (H[r, e, i] == H[r, e, j] and H[r + 1, e, i] < H[r + 1, e, j])


@jit_inline
def h_swap(H, r, e, i, j):
    for k in range(r, r + 2):
        x = H[k, e, i]
        H[k, e, i] = H[k, e, j]
        H[k, e, j] = x


@jit
def h_push(G, gmax, RI, n, H, r, e, key, rid):
    i = RI[e, n]
    H[r, e, i] = key
    H[r + 1, e, i] = rid
    RI[e, n] = i + 1
    if i + 1 > G[gmax]:
        G[gmax] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if not h_less(H, r, e, i, p):
            break
        h_swap(H, r, e, i, p)
        i = p


@jit
def h_pop(RI, n, H, r, e):
    """Remove the smallest entry (read it first at index 0)."""
    m = RI[e, n] - 1
    RI[e, n] = m
    if m == 0:
        return
    h_swap(H, r, e, 0, m)
    i = 0
    while True:
        a, b, k = 2 * i + 1, 2 * i + 2, i
        if a < m and h_less(H, r, e, a, k):
            k = a
        if b < m and h_less(H, r, e, b, k):
            k = b
        if k == i:
            return
        h_swap(H, r, e, i, k)
        i = k


@jit_inline
def f_push(G, RI, FH, e, d, rid):
    """The finish heap: (iteration, request)."""
    h_push(G, G_FHMAX, RI, I_FHN, FH, 0, e, d, rid)


@jit_inline
def f_pop(RI, FH, e):
    h_pop(RI, I_FHN, FH, 0, e)


# --- the deployment's event heap: (time, sequence) -------------------------------------------------------------
@jit_inline
def ev_less(ev_t, EVI, i, j):
    return ev_t[i] < ev_t[j] or (ev_t[i] == ev_t[j] and EVI[0, i] < EVI[0, j])


@jit_inline
def ev_swap(ev_t, EVI, i, j):
    a, b, c, d = ev_t[i], EVI[0, i], EVI[1, i], EVI[2, i]
    ev_t[i], EVI[0, i], EVI[1, i], EVI[2, i] = ev_t[j], EVI[0, j], EVI[1, j], EVI[2, j]
    ev_t[j], EVI[0, j], EVI[1, j], EVI[2, j] = a, b, c, d


@jit
def ev_push(G, ev_t, EVI, t, s, e, v):
    i = G[G_EVN]
    ev_t[i], EVI[0, i], EVI[1, i], EVI[2, i] = t, s, e, v
    G[G_EVN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if ev_less(ev_t, EVI, i, p):
            ev_swap(ev_t, EVI, i, p)
            i = p
        else:
            break


@jit
def ev_pop(G, ev_t, EVI):
    n = G[G_EVN] - 1
    G[G_EVN] = n
    if n > 0:
        ev_swap(ev_t, EVI, 0, n)
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            c = left
            if left + 1 < n and ev_less(ev_t, EVI, left + 1, left):
                c = left + 1
            if ev_less(ev_t, EVI, c, i):
                ev_swap(ev_t, EVI, c, i)
                i = c
            else:
                break


# --- timing (LinearTiming.one / run, pp 1) --------------------------------------------------------
@jit_inline
def t_one(p, T, A, R, S, D):
    """``LinearTiming.one``: one iteration of ``T`` tokens, ``S`` sequences, ``D`` distinct adapters [s] on pool
    ``p`` (a :class:`~core.serving.sim.jit_layout.Pool`)."""
    q, g_launch, e_launch, TB = p.q, p.g_launch, p.e_launch, p.TB
    extra = 0.0
    if S != T:
        extra = (S - T) * q
        if S < T and not p.graph_prefill:
            graph = g_launch if T <= p.g_max else e_launch
            extra += p.n_k * (e_launch - graph)
    c0, c1, m0, m1, x = TB[0, T], TB[1, T], TB[2, T], TB[3, T], TB[4, T]
    if D:  # the adapters' weights move with the GEMMs (StepModel.busy_s)
        m0 = m0 + lora_s(TB, T, D)
    base = c0 if c0 > m0 else m0
    tier = tier_s(p.host_nh, p.host_h, T, R, m1, base)
    a, b = c1 * A, m1 * R
    return p.pp * (base + tier + (a if a > b else b)) + x + extra


@jit_inline
def tier_s(n_h, h, T, R, m1, base):
    """``timing._tier_s``: what a host KV tier adds to the stage's busy time past the tokens HBM holds [s]."""
    over = R + T - n_h
    if over <= 0:
        return 0.0
    th = h * over - m1 * R
    return th - base if th > base else 0.0


@jit_inline
def line_sum(alpha, beta, lo, hi):
    if hi <= lo:
        return 0.0
    return alpha * (hi - lo) + beta * (hi * (hi - 1) - lo * (lo - 1)) / 2


@jit_inline
def first_reach(lin, quad, target_s):
    if target_s <= 0:
        return 1
    qa, qb = quad / 2, lin - quad / 2
    if abs(qa) * target_s < 1e-12 * qb * qb:
        kf = target_s / qb
    else:
        disc = qb * qb + 4 * qa * target_s
        if disc < 0:
            return 1 << 62
        kf = 2 * target_s / (qb + math.sqrt(disc)) if qb > 0 else (-qb + math.sqrt(disc)) / (2 * qa)
    if not math.isfinite(kf) or kf > 1e15:
        return 1 << 62
    k = math.ceil(kf - 1e-9)
    return k if k > 1 else 1


@jit_inline
def t_total(pp_, l1a, l1b, l2a, l2b, x, s, k):
    ss = s if s < k else k
    return pp_ * (line_sum(l1a, l1b, 0, ss) + line_sum(l2a, l2b, ss, k)) + x * k


@jit
def t_run(p, T, A0, R0, g, kmax, budget_s, D):
    """(k, elapsed) of a run of decode iterations with ``D`` distinct adapters on pool ``p`` (LinearTiming.run)."""
    if R0 + g * (kmax - 1) + T > p.host_nh:  # the run reaches the host tier: iteration by iteration (LinearTiming.run)
        total = 0.0
        k = 0
        while k < kmax:
            total += t_one(p, T, A0 + g * k, R0 + g * k, T, D)
            k += 1
            if total >= budget_s:
                break
        return k, total
    pp, TB = p.pp, p.TB
    c0, c1, m0, m1, x = TB[0, T], TB[1, T], TB[2, T], TB[3, T], TB[4, T]
    if D:
        m0 = m0 + lora_s(TB, T, D)
    x = x + pp * (c0 if c0 > m0 else m0)
    a0, a1 = c1 * A0, c1 * g
    b0, b1 = m1 * R0, m1 * g
    d0, d1 = a0 - b0, a1 - b1
    if d1 > 0:
        js = -d0 / d1
        s = 0 if js <= 0 else (kmax if js >= kmax else math.ceil(js))
        l1a, l1b, l2a, l2b = b0, b1, a0, a1
    elif d1 < 0:
        js = -d0 / d1
        s = 0 if js < 0 else (kmax if js >= kmax - 1 else math.floor(js) + 1)
        l1a, l1b, l2a, l2b = a0, a1, b0, b1
    else:
        s = kmax
        if d0 >= 0:
            l1a, l1b, l2a, l2b = a0, a1, a0, a1
        else:
            l1a, l1b, l2a, l2b = b0, b1, b0, b1
    if budget_s == INF:
        return kmax, t_total(pp, l1a, l1b, l2a, l2b, x, s, kmax)
    seg1_end = t_total(pp, l1a, l1b, l2a, l2b, x, s, s) if s > 0 else 0.0
    if s > 0 and seg1_end >= budget_s:
        k = first_reach(pp * l1a + x, pp * l1b, budget_s)
    else:
        lin = pp * (l2a + l2b * s) + x
        k = s + first_reach(lin, pp * l2b, budget_s - seg1_end)
    k = k if k < kmax else kmax
    k = k if k > 1 else 1
    while k > 1 and t_total(pp, l1a, l1b, l2a, l2b, x, s, k - 1) >= budget_s:
        k -= 1
    while k < kmax and t_total(pp, l1a, l1b, l2a, l2b, x, s, k) < budget_s:
        k += 1
    return k, t_total(pp, l1a, l1b, l2a, l2b, x, s, k)


# --- one replica's engine (Engine / Replica) -------------------------------------------------------------------


@jit
def w_remove(RI, RQI, e, rid):
    """Take ``rid`` out of the waiting queue wherever it is (``deque.remove``)."""
    prev, cur = -1, RI[e, I_HW]
    while cur != rid:
        prev, cur = cur, RQI[Q_NX_W, cur]
    w_unlink(RI, RQI, e, prev, rid)


@jit
def in_waiting(RI, RQI, e, rid):
    cur = RI[e, I_HW]
    while cur >= 0:
        if cur == rid:
            return True
        cur = RQI[Q_NX_W, cur]
    return False


@jit_inline
def w_unlink(RI, RQI, e, prev, rid):
    """Take ``rid``, the waiting request after ``prev`` (-1: the head), out of the waiting queue (``del
    waiting[at]``)."""
    nxt = RQI[Q_NX_W, rid]
    if prev < 0:
        RI[e, I_HW] = nxt
    else:
        RQI[Q_NX_W, prev] = nxt
    if nxt < 0:
        RI[e, I_TW] = prev
    RI[e, I_LW] -= 1
