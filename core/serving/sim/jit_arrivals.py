"""The deployment's arrival stream compiled (:class:`core.serving.sim.arrivals.ArrivalStream`): Poisson arrivals
up to a request count or a duration, or a closed loop of users, each sending its next request a think time after
its last one ended. The closed loop's pending arrivals are a binary heap of ``(time [s], sequence)`` in ``AH[0]``
and ``AH[1]`` (sequences held as floats: exact below 2**53), its size in ``G[G_AHN]``; the sequences are distinct,
so any binary heap pops them in ``heapq``'s order. A request that ends joins its replica's list of ended requests
(``RI[e, I_HE]``, linked by ``RQI[Q_NX_E]``), and the loop tells the stream of them where the Python loop does
(``ReplicaSet._ended``), and the adapter-affinity router of their adapters."""

from __future__ import annotations

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_layout import (
    G_AHN,
    G_CLOSED,
    G_ISSUED,
    GF_DURATION,
    GF_NEXT,
    I_AFF,
    I_HE,
    I_TE,
    INF,
    Q_NX_E,
    RQ_FIN,
)
from core.serving.sim.jit_lora import affinity_ended


@jit_inline
def ah_less(AH, i, j):
    return AH[0, i] < AH[0, j] or (AH[0, i] == AH[0, j] and AH[1, i] < AH[1, j])


@jit_inline
def ah_swap(AH, i, j):
    for r in range(2):
        x = AH[r, i]
        AH[r, i] = AH[r, j]
        AH[r, j] = x


@jit
def ah_push(G, AH, t, seq):
    i = G[G_AHN]
    AH[0, i] = t
    AH[1, i] = seq
    G[G_AHN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if not ah_less(AH, i, p):
            break
        ah_swap(AH, i, p)
        i = p


@jit
def ah_pop(G, AH):
    """Remove the smallest entry (read it first at index 0)."""
    n = G[G_AHN] - 1
    G[G_AHN] = n
    if n == 0:
        return
    ah_swap(AH, 0, n)
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < n and ah_less(AH, a, m):
            m = a
        if b < n and ah_less(AH, b, m):
            m = b
        if m == i:
            return
        ah_swap(AH, i, m)
        i = m


@jit
def next_arrival(N, gaps, G, GF, AH):
    """``ArrivalStream._pop_arrival``: the arrival being routed now (``GF[GF_NEXT]``); the next one set."""
    t = GF[GF_NEXT]
    if G[G_CLOSED]:
        ah_pop(G, AH)
        GF[GF_NEXT] = AH[0, 0] if G[G_AHN] > 0 else INF
        return t
    nn = G[G_ISSUED] + 1
    if nn >= N:
        GF[GF_NEXT] = INF
    else:
        nxt = t + gaps[nn]
        GF[GF_NEXT] = nxt if nxt <= GF[GF_DURATION] else INF
    return t


@jit_inline
def ended_push(RI, RQI, e, rid):
    """``Replica._user_done``'s list: ``rid`` has ended on replica ``e``."""
    RQI[Q_NX_E, rid] = -1
    if RI[e, I_TE] < 0:
        RI[e, I_HE] = rid
    else:
        RQI[Q_NX_E, RI[e, I_TE]] = rid
    RI[e, I_TE] = rid


@jit
def tell_ended(N, gaps, G, GF, RI, RQF, RQI, AH, e):
    """``ReplicaSet._ended``: each request that ended on ``e``, in order, to the stream (``_user_done``: a closed
    loop's user sends its next request a think time after the end, while requests are left to issue and the
    duration allows)."""
    rid = RI[e, I_HE]
    RI[e, I_HE] = -1
    RI[e, I_TE] = -1
    if not G[G_CLOSED] and not RI[e, I_AFF]:
        return
    while rid >= 0:
        nxt = RQI[Q_NX_E, rid]
        affinity_ended(RI, RQI, e, rid)  # the adapter-affinity router's count in flight
        if G[G_CLOSED] and G[G_ISSUED] + G[G_AHN] < N:
            t = RQF[RQ_FIN, rid] + gaps[rid]
            if not t > GF[GF_DURATION]:
                ah_push(G, AH, t, float(G[G_ISSUED] + G[G_AHN]))
                GF[GF_NEXT] = AH[0, 0]
        rid = nxt
