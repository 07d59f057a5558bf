"""The compiled loop's deadline heap of each replica (:attr:`core.serving.sim.engine.Engine.dl_heap`): the
requests' timeouts as ``(deadline [s], request)``, smallest first, in ``DL[0, e]`` (deadlines) and ``DL[1, e]``
(request numbers, held as floats: exact below 2**53), its size in ``RI[e, I_DLN]``. Each request is pushed once (when
its replica queues it), so the keys are distinct and any binary heap pops them in ``heapq``'s order."""

from __future__ import annotations

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_layout import G_DLMAX, I_DLN


@jit_inline
def dl_less(DL, e, i, j):
    return DL[0, e, i] < DL[0, e, j] or (DL[0, e, i] == DL[0, e, j] and DL[1, e, i] < DL[1, e, j])


@jit_inline
def dl_swap(DL, e, i, j):
    for r in range(2):
        x = DL[r, e, i]
        DL[r, e, i] = DL[r, e, j]
        DL[r, e, j] = x


@jit
def dl_push(G, RI, DL, e, t, rid):
    i = RI[e, I_DLN]
    DL[0, e, i] = t
    DL[1, e, i] = rid
    RI[e, I_DLN] = i + 1
    if i + 1 > G[G_DLMAX]:
        G[G_DLMAX] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if not dl_less(DL, e, i, p):
            break
        dl_swap(DL, e, i, p)
        i = p


@jit
def dl_pop(RI, DL, e):
    """Remove the smallest entry (read it first at index 0)."""
    n = RI[e, I_DLN] - 1
    RI[e, I_DLN] = n
    if n == 0:
        return
    dl_swap(DL, e, 0, n)
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < n and dl_less(DL, e, a, m):
            m = a
        if b < n and dl_less(DL, e, b, m):
            m = b
        if m == i:
            return
        dl_swap(DL, e, i, m)
        i = m
