"""The compiled engine's sliding-window layers (:mod:`core.serving.sim.jit_engine`; ``Engine`` and ``DecodeSet``
with ``sliding``): a sequence of context ``c`` holds ``f ceil(c/B) + s ceil(min(c, w)/B)`` blocks-worth, so a
decoding sequence below the window ``w`` (``RQI[Q_LO]``) grows its sliding blocks too until its context reaches
the window. The window-crossing heap of each replica, ``(decode iteration at which it reaches the window,
request)``, lives in rows 2 and 3 of the finish heaps' array (``FH``), its size in ``RI[e, I_CXN]``; entries of
sequences that left are dropped when they reach the top, as ``DecodeSet.cross_min`` does."""

from __future__ import annotations

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_layout import G_FHMAX, I_BSW, I_CXN, I_NIW, I_WIN, Q_CTX, Q_LO
from core.serving.sim.jit_parts import h_pop, h_push


@jit_inline
def chunk_s(B, w, c, n):
    """Sliding blocks a chunk of ``n`` tokens after ``c`` adds (``Engine._chunk_blocks``' second)."""
    a = c + n if c + n < w else w
    b = c if c < w else w
    return (a + B - 1) // B - (b + B - 1) // B


@jit_inline
def x_push(G, RI, FH, e, d, rid):
    h_push(G, G_FHMAX, RI, I_CXN, FH, 2, e, d, rid)


@jit_inline
def x_pop(RI, FH, e):
    h_pop(RI, I_CXN, FH, 2, e)


@jit
def cross_min(RI, FH, RQI, e):
    """``DecodeSet.cross_min``: the decode iteration at which the first sequence below the window reaches it."""
    w = RI[e, I_WIN]
    while RI[e, I_CXN] > 0:
        rid = FH[3, e, 0]
        if RQI[Q_LO, rid] and RQI[Q_CTX, rid] == w - FH[2, e, 0]:
            return FH[2, e, 0]
        x_pop(RI, FH, e)
    return 1 << 62


@jit
def cross(B, RI, hist, FH, RQI, e, D):
    """The end of ``DecodeSet._advance_decode``: the sequences whose context reached the window by decode iteration
    ``D`` leave the sliding set (their sliding blocks stay at the window's)."""
    w = RI[e, I_WIN]
    while RI[e, I_CXN] > 0 and FH[2, e, 0] <= D:
        cd, rid = FH[2, e, 0], FH[3, e, 0]
        x_pop(RI, FH, e)
        if not RQI[Q_LO, rid] or RQI[Q_CTX, rid] != w - cd:
            continue
        base = RQI[Q_CTX, rid]
        RQI[Q_LO, rid] = 0
        RI[e, I_NIW] -= 1
        RI[e, I_BSW] -= base
        hist[e, B + base % B] -= 1


@jit_inline
def chunk_pairs_sliding(fs, ss, w, p, n):
    """``Pool.chunk_pairs`` with sliding layers: attended (query, key) pairs of a chunk of ``n`` tokens after ``p``
    cached ones, the sliding layers' clipped at the window."""
    full = n * p + n * (n + 1) / 2
    a, b = p + 1, p + n
    if b <= w:
        clipped = full
    elif a > w:
        clipped = n * w
    else:
        clipped = (a + w) * (w - a + 1) / 2 + (b - w) * w
    return fs * full + ss * clipped
