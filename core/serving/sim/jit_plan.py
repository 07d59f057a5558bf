"""A replica's plan of its next step compiled: :meth:`core.serving.sim.engine.Engine.begin_step` and the scheduler's
admissions (``_plan_chunked``, ``_plan_prefill_priority``, ``_hit``, ``_admit``) over the arrays of
:mod:`core.serving.sim.jit_layout`, with the adapters' rule (:mod:`core.serving.sim.jit_lora`): a waiting request
whose adapter would exceed ``max_loras`` is skipped and keeps its place, and an admission that loads an adapter
makes the iteration wait for it. The step's timing and its end are :mod:`core.serving.sim.jit_engine`'s.
"""

from __future__ import annotations

import math

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_engine import begin_mixed, begin_run, chunk_f, decode_need, finish, preempt_last
from core.serving.sim.jit_layout import (
    EPS,
    I_ASLOTS,
    I_ASYNC,
    I_FULL,
    I_HP,
    I_HR,
    I_HW,
    I_KIND,
    I_LP,
    I_LR,
    I_LW,
    I_NCH,
    I_NDEC,
    I_PNOW,
    I_PPRI,
    I_REMOTE,
    I_RES,
    I_RSV,
    I_TP,
    I_TR,
    I_WIN,
    Q_CACHED,
    Q_CTX,
    Q_GEN,
    Q_INP,
    Q_NX_P,
    Q_NX_R,
    Q_NX_W,
    Q_PV_P,
    Q_PV_R,
    Q_RES,
    Q_TARGET,
    R_CUT,
    R_END,
    R_LOADS,
    R_NOW,
    R_SEEN,
    R_SS,
    RQ_ADMIT,
    RQ_ARR,
)
from core.serving.sim.jit_lora import acquire, admissible
from core.serving.sim.jit_parts import link_append, used, w_popleft, w_unlink
from core.serving.sim.jit_window import chunk_s
from core.serving.sim.records import NONE, REJECTED

# what :func:`candidate` finds of a waiting request: admit it (if its blocks fit), skip it, end the admissions
TAKE, SKIP, STOP = range(3)


@jit_inline
def turned_away(RI, RF, RQF, RQI, e, rid):
    """``lora is not None and not lora.admissible(rid, now)``: its adapter would exceed ``max_loras``."""
    return RI[e, I_ASLOTS] > 0 and not admissible(RI, RF, RQF, RQI, e, rid)


@jit
def hit_of(B, pool_blocks, RQI, rid, u, remote):
    cc = RQI[Q_CACHED, rid]
    if not cc:
        return 0
    free = int(math.floor(pool_blocks - u + EPS))
    last = ((RQI[Q_INP, rid] + RQI[Q_GEN, rid] - 1) // B) * B
    if remote and free * B < (cc if cc < last else last):
        return -1  # the transferred KV waits until blocks for all of it are free
    v = cc
    if free * B < v:
        v = free * B
    if last < v:
        v = last
    return v - v % B if v > 0 else 0  # whole blocks only: vLLM's prefix cache hashes full blocks


@jit
def admit(B, TB, err, RI, RF, RQF, RQI, e, rid, h, prev):
    """``Engine._admit``: ``rid``, the waiting request after ``prev`` (-1: the head), joins the running set; its
    adapter's load (if any) is added to the planned iteration."""
    w_unlink(RI, RQI, e, prev, rid)
    if RI[e, I_ASLOTS]:
        RF[e, R_LOADS] += acquire(TB, err, RI, RF, RQF, RQI, e, rid)
    link_append(RI, RQI, e, rid, I_HR, I_TR, I_LR, Q_NX_R, Q_PV_R)
    link_append(RI, RQI, e, rid, I_HP, I_TP, I_LP, Q_NX_P, Q_PV_P)
    RQI[Q_CTX, rid] = h
    RQI[Q_CACHED, rid] = 0
    if h:
        RI[e, I_FULL] += h // B
    RQI[Q_TARGET, rid] = RQI[Q_INP, rid] + RQI[Q_GEN, rid]
    if math.isnan(RQF[RQ_ADMIT, rid]):
        RQF[RQ_ADMIT, rid] = RF[e, R_NOW]
    if RI[e, I_RSV]:
        RI[e, I_RES] += RQI[Q_RES, rid]


@jit_inline
def adm_need(B, fs, RI, RF, RQI, e, rid, n):
    """``Engine._admission_need``: blocks-worth admitting ``rid`` with a first chunk of ``n`` tokens takes."""
    if RI[e, I_RSV]:
        return fs * RQI[Q_RES, rid]
    return fs * ((n + B - 1) // B) + RF[e, R_SS] * chunk_s(B, RI[e, I_WIN], 0, n)


@jit
def continued(B, K, keep, pool_blocks, fs, RI, RF, hist, CH, RQI, e):
    """The first half of ``Engine._plan_chunked``: every decoding sequence's token and the prefilling requests'
    chunks (CH[:, e, :I_NCH]), the last admitted preempted until their blocks fit; (the token budget left, the
    blocks-worth they need, whether it preempted)."""
    preempted = False
    while True:
        left = K - RI[e, I_NDEC]
        need = decode_need(B, fs, RI, RF, hist, e)
        nch = 0
        rid = RI[e, I_HP]
        while rid >= 0:
            if left <= 0:
                break
            c = RQI[Q_CTX, rid]
            n = RQI[Q_TARGET, rid] - c
            if n > left:
                n = left
            left -= n
            CH[0, e, nch] = rid
            CH[1, e, nch] = n
            nch += 1
            if not RI[e, I_RSV]:
                need += fs * chunk_f(B, c, n) + RF[e, R_SS] * chunk_s(B, RI[e, I_WIN], c, n)
            rid = RQI[Q_NX_P, rid]
        RI[e, I_NCH] = nch
        if RI[e, I_RSV] or used(fs, RI, RF, e) + need <= pool_blocks + EPS or RI[e, I_LR] == 0:
            return left, need, preempted
        preempt_last(B, keep, RI, hist, RQI, e)
        preempted = True


@jit_inline
def candidate(p, s, e, rid, u):
    """The waiting request ``rid`` as an admission sees it, ``u`` blocks-worth in use: (STOP, ...) where it arrived
    after this plan was made (async scheduling: the next plan sees it) or its transferred KV waits for blocks (the
    admissions end); (SKIP, ...) where its adapter would exceed max_loras (skipped, it keeps its place); else
    (TAKE, its prefix hit [tokens], the tokens left to compute)."""
    RI, RQI = s.RI, s.RQI
    if s.RQF[RQ_ARR, rid] > s.RF[e, R_CUT]:
        return STOP, 0, 0
    if turned_away(RI, s.RF, s.RQF, RQI, e, rid):
        return SKIP, 0, 0
    h = hit_of(p.B, p.pool_blocks, RQI, rid, u, RI[e, I_REMOTE])
    if h < 0:
        return STOP, 0, 0
    return TAKE, h, RQI[Q_INP, rid] + RQI[Q_GEN, rid] - h


@jit_inline
def plan_chunked(p, s, e):
    """Engine._plan_chunked: the step's chunks in CH[:, e, :I_NCH]; True if it preempted (no admissions then)."""
    B, fs, pool_blocks = p.B, p.fs, p.pool_blocks
    RI, RF, CH, RQI = s.RI, s.RF, s.CH, s.RQI
    left, need, preempted = continued(B, p.K, p.keep, pool_blocks, fs, RI, RF, s.hist, CH, RQI, e)
    if preempted:
        return True
    u = used(fs, RI, RF, e) + need
    nch = RI[e, I_NCH]
    prev, rid = -1, RI[e, I_HW]
    while rid >= 0 and left > 0 and RI[e, I_LR] < p.MB:
        code, h, n = candidate(p, s, e, rid, u)
        if code == STOP:
            break
        if code == SKIP:
            prev, rid = rid, RQI[Q_NX_W, rid]
            continue
        if n > left:
            n = left
        add = adm_need(B, fs, RI, RF, RQI, e, rid, n) if not h or RI[e, I_RSV] else h // B + chunk_f(B, h, n)
        if u + add > pool_blocks + EPS:
            break
        admit(B, p.TB, s.err, RI, RF, s.RQF, RQI, e, rid, h, prev)
        u += add
        left -= n
        CH[0, e, nch] = rid
        CH[1, e, nch] = n
        nch += 1
        rid = RI[e, I_HW] if prev < 0 else RQI[Q_NX_W, prev]
    RI[e, I_NCH] = nch
    return False


@jit_inline
def plan_prefill_priority(p, s, e):
    """Engine._plan_prefill_priority: whole prompts admitted first-come first-served up to the token budget (a
    longer one alone), or, with none to admit, decoding with the last admitted preempted until its blocks fit; the
    step's chunks in CH[:, e, :I_NCH]; True if it preempted."""
    B, fs, pool_blocks = p.B, p.fs, p.pool_blocks
    RI, RF, hist, CH, RQI = s.RI, s.RF, s.hist, s.CH, s.RQI
    u = used(fs, RI, RF, e)
    total = 0
    nch = 0
    prev, rid = -1, RI[e, I_HW]
    while rid >= 0 and RI[e, I_LR] < p.MB:
        code, h, n = candidate(p, s, e, rid, u)
        if code == STOP:
            break
        if code == SKIP:
            prev, rid = rid, RQI[Q_NX_W, rid]
            continue
        if nch > 0 and total + n > p.K:
            break
        # reserve admission takes the whole reservation, prefix hit or not (admit adds Q_RES to I_RES)
        add = adm_need(B, fs, RI, RF, RQI, e, rid, n) if not h or RI[e, I_RSV] else h // B + chunk_f(B, h, n)
        if u + add > pool_blocks + EPS:
            break
        admit(B, p.TB, s.err, RI, RF, s.RQF, RQI, e, rid, h, prev)
        u += add
        total += n
        CH[0, e, nch] = rid
        CH[1, e, nch] = n
        nch += 1
        rid = RI[e, I_HW] if prev < 0 else RQI[Q_NX_W, prev]
    RI[e, I_NCH] = nch
    if nch > 0:
        return False
    preempted = False
    while (
        RI[e, I_NDEC]
        and not RI[e, I_RSV]  # reserve admission never preempts (Engine._plan_prefill_priority)
        and used(fs, RI, RF, e) + decode_need(B, fs, RI, RF, hist, e) > pool_blocks + EPS
    ):
        preempt_last(B, p.keep, RI, hist, RQI, e)
        preempted = True
    return preempted


@jit_inline
def begin_step(p, s, e):
    """``Engine.begin_step``: plan the replica's next step and time it; its end [s] (``s.err``: its status and,
    with adapters, the loads' log)."""
    RI, RF, RQF, RQI = s.RI, s.RF, s.RQF, s.RQI
    RI[e, I_PNOW] = 0
    RF[e, R_CUT] = RF[e, R_SEEN] if RI[e, I_ASYNC] and RI[e, I_LR] > 0 else RF[e, R_NOW]
    if RI[e, I_PPRI]:
        if plan_prefill_priority(p, s, e):
            RI[e, I_PNOW] = 1
    elif plan_chunked(p, s, e):  # its chunks (those that fit after the preemptions) still run, with no admissions
        RI[e, I_PNOW] = 1
    RF[e, R_END] = RF[e, R_NOW]
    if RI[e, I_NCH] > 0:
        RF[e, R_SEEN] = RF[e, R_NOW]
        begin_mixed(p, s, e)
        return RF[e, R_END]
    if RI[e, I_NDEC]:
        begin_run(p, s, e, 1 if RI[e, I_PNOW] else 0)
        return RF[e, R_END]
    RI[e, I_KIND] = NONE
    if RI[e, I_LW] > 0 and RI[e, I_LR] == 0:
        rid = RI[e, I_HW]
        n = RQI[Q_INP, rid] + RQI[Q_GEN, rid]
        if n > p.K:
            n = p.K
        if adm_need(p.B, p.fs, RI, RF, RQI, e, rid, n) > p.pool_blocks + EPS:
            w_popleft(RI, RQI, e)
            finish(RI, RF, RQF, RQI, e, rid, REJECTED)
    return RF[e, R_END]


@jit
def begin_step_shared(p, s, e):
    """:func:`begin_step` as a call of its own: one compiled body for a loop with many sites of it (the
    disaggregated loop's two), where inlining each would compile it twice over."""
    return begin_step(p, s, e)
