"""The adapters of multi-LoRA serving in the compiled loop: :class:`core.serving.sim.adapters.Adapters` (each
replica's slots and host cache, least recently used first, and the loads), the adapters' per-iteration memory time
of :class:`core.serving.sim.timing.LinearTiming`, and the ``adapter-affinity`` router's count of the adapters in
flight on each replica (:class:`core.serving.router.AdapterAffinity`), function for function.

State lives in the compiled loop's arrays (:mod:`core.serving.sim.jit_layout`): per request its adapter
(``RQI[Q_ADP]``), when it was turned away and its wait (``RQF[RQ_BLOCK]``, ``RQF[RQ_AWAIT]``); per replica the
counts in ``RI``'s adapter columns and, past ``N_RI``, four blocks of one column per adapter: its running requests,
its GPU slot's last use, its host copy's last use (0: absent; a replica's clock ``I_ACLK`` numbers the uses, so the
least recently used is the smallest) and the router's count in flight. The loads go to a log in order, after the
loop's status in ``err`` (an array every plan already takes).
A replica with ``I_ASLOTS`` 0 serves no adapters and none of this runs.
"""

from __future__ import annotations

import math

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_layout import (
    I_ACLK,
    I_ADIST,
    I_AFF,
    I_AGPU,
    I_AHOST,
    I_AHSLOTS,
    I_ASLOTS,
    I_ASTOR,
    I_LOAD,
    I_RACT,
    N_RI,
    Q_ADP,
    R_NOW,
    RQ_AWAIT,
    RQ_BLOCK,
    TB_HOST,
    TB_MB,
    TB_MD,
    TB_STORE,
)


@jit_inline
def n_adapters(RI):
    """The adapter numbers the replicas' columns hold (0 without adapters)."""
    return (RI.shape[1] - N_RI) // 4


@jit_inline
def lora_s(TB, T, D):
    """``LinearTiming._adapter_s``: the memory time of ``D`` distinct adapters in an iteration of ``T`` tokens, one
    stage [s] (0 without adapters: a table of five rows)."""
    if TB.shape[0] <= TB_MB or not D:
        return 0.0
    return TB[TB_MD, T] * D / TB[TB_MB, T]


@jit
def admissible(RI, RF, RQF, RQI, e, rid):
    """``Adapters.admissible``: whether ``rid`` may join the batch (its adapter running, or a slot free of running
    ones); one turned away is marked blocked from now on."""
    a = RQI[Q_ADP, rid]
    if RI[e, N_RI + a] > 0 or RI[e, I_ADIST] < RI[e, I_ASLOTS]:
        return True
    if math.isnan(RQF[RQ_BLOCK, rid]):
        RQF[RQ_BLOCK, rid] = RF[e, R_NOW]
    return False


@jit
def lru_victim(RI, e, col, skip_col):
    """The adapter with the smallest last use in the block at ``col`` whose column at ``skip_col`` is 0 (the least
    recently used slot no running request needs; the host copy not on the GPU)."""
    na = n_adapters(RI)
    best, at = -1, 0
    for a in range(na):
        s = RI[e, col + a]
        if s > 0 and RI[e, skip_col + a] == 0 and (best < 0 or s < at):
            best, at = a, s
    return best


@jit
def acquire(TB, err, RI, RF, RQF, RQI, e, rid):
    """``Adapters.acquire``: ``rid`` is admitted, its adapter joins the running set; the time to load it into a slot
    [s] (0 when it is there already); each load logged past ``err[0]`` (:class:`~core.serving.sim.jit_layout.Engines`'
    ``err``: the count in ``err[1]``, then the replica and adapter x 2 + from storage of each)."""
    now = RF[e, R_NOW]
    since = RQF[RQ_BLOCK, rid]
    if not math.isnan(since):
        w = RQF[RQ_AWAIT, rid]
        RQF[RQ_AWAIT, rid] = (0.0 if math.isnan(w) else w) + now - since
        RQF[RQ_BLOCK, rid] = math.nan
    na = n_adapters(RI)
    run, gpu, host = N_RI, N_RI + na, N_RI + 2 * na
    a = RQI[Q_ADP, rid]
    if RI[e, run + a] == 0:
        RI[e, I_ADIST] += 1
    RI[e, run + a] += 1
    RI[e, I_ACLK] += 1
    clock = RI[e, I_ACLK]
    if RI[e, gpu + a] > 0:
        RI[e, gpu + a] = clock
        return 0.0
    if RI[e, I_AGPU] >= RI[e, I_ASLOTS]:
        RI[e, gpu + lru_victim(RI, e, gpu, run)] = 0
        RI[e, I_AGPU] -= 1
    RI[e, gpu + a] = clock
    RI[e, I_AGPU] += 1
    storage = RI[e, host + a] == 0
    if not storage:
        RI[e, host + a] = clock
        t = TB[TB_HOST, a]
    else:
        if RI[e, I_AHOST] >= RI[e, I_AHSLOTS]:  # host memory keeps every adapter on the GPU
            RI[e, host + lru_victim(RI, e, host, gpu)] = 0
            RI[e, I_AHOST] -= 1
        RI[e, host + a] = clock
        RI[e, I_AHOST] += 1
        t = TB[TB_STORE, a]
        RI[e, I_ASTOR] += 1
    k = err[1]
    err[2 + 2 * k] = e
    err[3 + 2 * k] = 2 * a + (1 if storage else 0)
    err[1] = k + 1
    return t


@jit_inline
def release(RI, RQI, e, rid):
    """``Adapters.release``: ``rid`` leaves the running set (finished, preempted or timed out)."""
    c = N_RI + RQI[Q_ADP, rid]
    RI[e, c] -= 1
    if RI[e, c] == 0:
        RI[e, I_ADIST] -= 1


@jit
def affinity_pick(nrep, bal_abs, bal_rel, RI, a, start):
    """``AdapterAffinity.pick`` for a request of adapter ``a`` >= 0: among the replicas in balance, in cyclic order
    from ``start``, the best tier (2: ``a`` in flight there, 1: room for one more adapter, 0: neither), then the
    least loaded; the first of equals."""
    col = N_RI + 3 * n_adapters(RI)
    lo = RI[0, I_LOAD]
    for k in range(1, nrep):
        if RI[k, I_LOAD] < lo:
            lo = RI[k, I_LOAD]
    j, bt, bl = -1, -1, 0
    for k in range(nrep):
        c = (start + k) % nrep
        x = RI[c, I_LOAD]
        if x - lo > bal_abs and x > bal_rel * lo:
            continue
        t = 2 if RI[c, col + a] > 0 else (1 if RI[c, I_RACT] < RI[c, I_ASLOTS] else 0)
        if j < 0 or t > bt or (t == bt and -x > bl):
            j, bt, bl = c, t, -x
    if RI[j, col + a] == 0:
        RI[j, I_RACT] += 1
    RI[j, col + a] += 1
    return j


@jit_inline
def affinity_ended(RI, RQI, e, rid):
    """``AdapterAffinity.ended``: ``rid``, routed to ``e``, has ended there."""
    if not RI[e, I_AFF]:
        return
    c = N_RI + 3 * n_adapters(RI) + RQI[Q_ADP, rid]
    RI[e, c] -= 1
    if RI[e, c] == 0:
        RI[e, I_RACT] -= 1
