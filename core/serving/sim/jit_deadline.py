"""The compiled loop's deadline heap of each replica (:attr:`core.serving.sim.engine.Engine.dl_heap`): the
requests' timeouts as ``(deadline [s], request)``, smallest first, in ``DL[0, e]`` (deadlines) and ``DL[1, e]``
(request numbers, held as floats: exact below 2**53), its size in ``RI[e, I_DLN]``. Each request is pushed once (when
its replica queues it), so the keys are distinct and any binary heap pops them in ``heapq``'s order."""

from __future__ import annotations

from core.serving.sim.jit_cache import jit_inline
from core.serving.sim.jit_layout import G_DLMAX, I_DLN
from core.serving.sim.jit_parts import h_pop, h_push


@jit_inline
def dl_push(G, RI, DL, e, t, rid):
    h_push(G, G_DLMAX, RI, I_DLN, DL, 0, e, t, rid)


@jit_inline
def dl_pop(RI, DL, e):
    """Remove the smallest entry (read it first at index 0)."""
    h_pop(RI, I_DLN, DL, 0, e)
