"""The session loop compiled: :class:`core.serving.sessions.SessionSet` (the deployment's loop with multi-turn
sessions) over the compiled engine (:mod:`core.serving.sim.jit_engine`), function for function: the session
stream (a heap of the turns due, each session's next turn pushed when its last one ends), the router's session
affinity, each replica's prefix cache in vLLM V1's free-queue order as linked lists over the sessions, and the loop
over arrivals and step ends with a replica's pump.

The compiled engine is the plain loop's and knows nothing of sessions, so this loop wraps its calls:

* ``absorb`` takes a request with no cached tokens; the cached tokens a turn found at routing (``GI[G_HIT]``) are
  set on each request it queued, after the call and before any plan reads them;
* the requests that end in a call are drained from the engine's list of them (``Replica.ended`` in the Python loop,
  in the order the engine ends them) where the Python loop's ``SessionSet._ended`` reads it;
* the cached tokens a turn found when first admitted are the context its admission gave it (``Q_CTX`` of the
  step's new chunks, right after the plan).

A request timeout ends a turn as the Python loop's does (its replica's deadline heap, expired in its pump before it
plans; the turn's session is over, as after a rejection); prefill priority, reserve admission and sliding-window
layers are the engine's own (those runs keep no session prefixes: ``Engine.keep_cache``).
:mod:`core.serving.session_compiled` lays out the arrays and reads the records back.
"""

from __future__ import annotations

import math

from core.serving.sim.jit_cache import jit, jit_inline
from core.serving.sim.jit_engine import absorb, end_step, expire
from core.serving.sim.jit_layout import (
    CLOCK,
    G_DLMAX,
    G_EVN,
    G_FHMAX,
    G_INBOX,
    G_ISSUED,
    G_LO,
    G_PASSES,
    G_RESUME,
    G_SEQ,
    G_STARTED,
    G_TSN,
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
    I_VER,
    INF,
    OK,
    Q_CACHED,
    Q_CTX,
    Q_INP,
    Q_NX_E,
    Q_NX_IN,
    Q_OUT,
    Q_RES,
    Q_STATUS,
    R_NEXT,
    R_NOW,
    RQ_ARR,
    RQ_FIN,
    STUCK,
)
from core.serving.sim.jit_loop import deliver, pass_check, push
from core.serving.sim.jit_parts import ev_pop, ev_push, record, used
from core.serving.sim.jit_plan import begin_step
from core.serving.sim.records import DONE, NONE, REJECTED

# rows of the per-request array GI: its session, its turn (0-based), the cached tokens it found at routing, those it
# found at its first admission (-1: never admitted)
G_SESS, G_TURN, G_HIT, G_ADM = range(4)
# rows of the per-session array SI: its first turn's index in the per-turn arrays, its turns, its home replica
S_FIRST, S_TURNS, S_HOME = range(3)
# rows of the per-turn arrays: PI (input, output tokens, blocks reserved: reserve admission), PF (gap after the
# previous turn's end [s], recorded start [s])
P_INP, P_OUT, P_RES = range(3)
P_GAP, P_AT = range(2)
# rows of the per-session float array SF: the agent's gap after the session, the session's end [s]
S_AGENT_GAP, S_ENDED = range(2)
# the prefix caches: CB[row, replica, session] (cached blocks, next and previous in the free queue); per replica
# CI[replica, col] (head: least recently freed, tail, cached blocks, blocks evicted, prefixes evicted whole)
C_BLOCKS, C_NEXT, C_PREV = range(3)
C_HEAD, C_TAIL, C_TOTAL, C_EV_BLOCKS, C_EV_WHOLE = range(5)
N_CI = 5
#: The affinity's balance thresholds (core.serving.router.BALANCE_ABS_THRESHOLD / BALANCE_REL_THRESHOLD; a test
#: holds them equal).
BALANCE_ABS = 64
BALANCE_REL = 1.5


# --- the prefix cache (sessions.PrefixCache) -----------------------------------------------------------------------
@jit
def c_take(CB, CI, e, s):
    """``PrefixCache.take``: the blocks of session ``s``'s cached prefix on replica ``e``, out of the queue."""
    b = CB[C_BLOCKS, e, s]
    if b > 0:
        p, n = CB[C_PREV, e, s], CB[C_NEXT, e, s]
        if p < 0:
            CI[e, C_HEAD] = n
        else:
            CB[C_NEXT, e, p] = n
        if n < 0:
            CI[e, C_TAIL] = p
        else:
            CB[C_PREV, e, n] = p
        CB[C_BLOCKS, e, s] = 0
        CI[e, C_TOTAL] -= b
    return b


@jit
def c_put(CB, CI, e, s, blocks):
    """``PrefixCache.put``: session ``s``'s prefix of ``blocks`` blocks freed now (the queue's tail)."""
    c_take(CB, CI, e, s)
    if blocks > 0:
        t = CI[e, C_TAIL]
        CB[C_PREV, e, s] = t
        CB[C_NEXT, e, s] = -1
        if t < 0:
            CI[e, C_HEAD] = s
        else:
            CB[C_NEXT, e, t] = s
        CI[e, C_TAIL] = s
        CB[C_BLOCKS, e, s] = blocks
        CI[e, C_TOTAL] += blocks


@jit
def c_trim(CB, CI, e, free):
    """``PrefixCache.trim``: evict from the head until the cached blocks fit in ``free`` [blocks]."""
    room = int(math.floor(free + 1e-9))
    over = CI[e, C_TOTAL] - (room if room > 0 else 0)
    while over > 0 and CI[e, C_HEAD] >= 0:
        s = CI[e, C_HEAD]
        b = CB[C_BLOCKS, e, s]
        cut = b if b < over else over
        over -= cut
        CI[e, C_TOTAL] -= cut
        CI[e, C_EV_BLOCKS] += cut
        if cut == b:
            c_take(CB, CI, e, s)
            CI[e, C_TOTAL] += b  # c_take took b off the total: the cut already did
            CI[e, C_EV_WHOLE] += 1
        else:
            CB[C_BLOCKS, e, s] = b - cut


# --- the session stream (session_plan.SessionStream) ---------------------------------------------------------------
@jit
def s_push(SG, sh_t, SHI, t, s, k):
    SG[G_SEQ] += 1
    ev_push(SG, sh_t, SHI, t, SG[G_SEQ], s, k)


@jit
def s_next(SG, sh_t):
    return sh_t[0] if SG[G_EVN] > 0 else INF


@jit_inline
def turn_ended(sp, ss, GF, s, k, t_end, done):
    """``SessionStream.turn_ended``: turn ``k`` of session ``s`` ended at ``t_end`` (``done``: finished)."""
    SG, SI, PF, SF, sh_t, SHI = ss.SG, ss.SI, ss.PF, ss.SF, ss.sh_t, ss.SHI
    if done and k + 1 < SI[S_TURNS, s]:
        j = SI[S_FIRST, s] + k + 1
        g = PF[P_GAP, j]
        if not math.isnan(g):
            t = t_end + g
        else:
            a = PF[P_AT, j]
            t = t_end if t_end > a else a
        s_push(SG, sh_t, SHI, t, s, k + 1)
    else:
        SF[S_ENDED, s] = t_end
        if sp.agents and SG[G_STARTED] < sp.S:
            s_push(SG, sh_t, SHI, t_end + SF[S_AGENT_GAP, s], SG[G_STARTED], 0)
            SG[G_STARTED] += 1
    GF[0] = s_next(SG, sh_t)


@jit_inline
def s_ended(p, s, sp, ss, nel, e):
    """``SessionSet._ended`` over the ``nel`` requests of ``ss.EL`` that ended on replica ``e``, in their order."""
    RI, RF, RQF, RQI, GI, CB, CI = s.RI, s.RF, s.RQF, s.RQI, ss.GI, ss.CB, ss.CI
    for x in range(nel):
        rid = ss.EL[x]
        sess, k = GI[G_SESS, rid], GI[G_TURN, rid]
        done = RQI[Q_STATUS, rid] == DONE
        if done and sp.caching:
            c_put(CB, CI, e, sess, (RQI[Q_INP, rid] + RQI[Q_OUT, rid] - 1) // p.B)
            c_trim(CB, CI, e, p.pool_blocks - used(p.fs, RI, RF, e))
        turn_ended(sp, ss, s.GF, sess, k, RQF[RQ_FIN, rid], done)


@jit
def absorbed(RI, RQI, GI, e, head):
    """After ``absorb`` on ``e`` took its inbox from ``head``: the queued ones given the cached tokens their routing
    found (the engine's absorb queues a request with none)."""
    cur = head
    while cur >= 0 and cur != RI[e, I_HI]:
        if RQI[Q_STATUS, cur] != REJECTED:
            RQI[Q_CACHED, cur] = GI[G_HIT, cur]
        cur = RQI[Q_NX_IN, cur]


@jit
def drain_ended(RI, RQI, EL, e):
    """The requests that ended on ``e`` since the last drain (``Replica.ended``: the engine lists them in the order
    it ends them) into ``EL``; returns how many."""
    nel = 0
    cur = RI[e, I_HE]
    while cur >= 0:
        EL[nel] = cur
        nel += 1
        cur = RQI[Q_NX_E, cur]
    RI[e, I_HE] = -1
    RI[e, I_TE] = -1
    return nel


@jit_inline
def s_end_step(p, s, ss, e):
    """``end_step`` on ``e``; returns how many requests ended in it (in ``ss.EL``, in the engine's order)."""
    RI, RQI = s.RI, s.RQI
    head = RI[e, I_HI]
    end_step(p, s, e)
    absorbed(RI, RQI, ss.GI, e, head)
    return drain_ended(RI, RQI, ss.EL, e)


@jit
def pick(nrep, affinity, G, RI, SI, s):
    """``SessionSet._pick``: the session's replica unless out of balance, else the least loaded."""
    home = SI[S_HOME, s] if affinity else -1
    least = RI[0, I_LOAD]
    for k in range(1, nrep):
        if RI[k, I_LOAD] < least:
            least = RI[k, I_LOAD]
    if home < 0 or (RI[home, I_LOAD] - least > BALANCE_ABS and RI[home, I_LOAD] > BALANCE_REL * least):
        start = (G[G_LO] + 1) % nrep
        home = -1
        for k in range(start, nrep):
            if RI[k, I_LOAD] == least:
                home = k
                break
        if home < 0:
            for k in range(nrep):
                if RI[k, I_LOAD] == least:
                    home = k
                    break
        G[G_LO] = home
    SI[S_HOME, s] = home
    return home


@jit_inline
def s_route(p, s, f, sp, ss):
    """``SessionSet._route`` and ``_wake``: returns the replica to pump (idle, not pumping), or -1."""
    G, RI, RQI, GI, SI, PI, SG, sh_t, SHI = s.G, s.RI, s.RQI, ss.GI, ss.SI, ss.PI, ss.SG, ss.sh_t, ss.SHI
    B = p.B
    t, sess, k = sh_t[0], SHI[1, 0], SHI[2, 0]
    ev_pop(SG, sh_t, SHI)
    s.GF[0] = s_next(SG, sh_t)
    gid = G[G_ISSUED]
    G[G_ISSUED] = gid + 1
    j0 = SI[S_FIRST, sess] + k
    i, o = PI[P_INP, j0], PI[P_OUT, j0]
    GI[G_SESS, gid] = sess
    GI[G_TURN, gid] = k
    j = pick(p.nrep, sp.affinity, G, RI, SI, sess)
    hit = 0
    if sp.caching and k > 0:
        c_trim(ss.CB, ss.CI, j, p.pool_blocks - used(p.fs, RI, s.RF, j))
        hit = c_take(ss.CB, ss.CI, j, sess) * B
        last = ((i - 1) // B) * B
        if last < hit:
            hit = last
    # deliver
    GI[G_HIT, gid] = hit
    s.RQF[RQ_ARR, gid] = t
    RQI[Q_INP, gid] = i
    RQI[Q_OUT, gid] = o
    RQI[Q_RES, gid] = PI[P_RES, j0]
    return deliver(p, s, f, gid, j, t)


@jit_inline
def pump_trim(p, s, ss, e):
    """``SessionSet._pump``'s first act: running requests may have taken cached blocks."""
    CI = ss.CI
    if CI[e, C_TOTAL]:
        free = p.pool_blocks - used(p.fs, s.RI, s.RF, e)
        if CI[e, C_TOTAL] > free:
            c_trim(ss.CB, CI, e, free)


@jit
def s_pump(p, s, f, sp, ss, e0):
    """``SessionSet._pump`` of ``e0``, the replicas an arrival wakes on the way pumped in turn (a stack)."""
    GF, RI, RF, RQI, DL, CH, err, GI, EL, stk = s.GF, s.RI, s.RF, s.RQI, s.DL, s.CH, s.err, ss.GI, ss.EL, f.stk
    pump_trim(p, s, ss, e0)
    stk[0] = e0
    top = 1
    RI[e0, I_PUMP] = 1
    RI[e0, I_STUCK] = 0
    while top > 0:
        e = stk[top - 1]
        if GF[0] <= RF[e, R_NOW]:  # every arrival due by now is routed before this replica plans
            j = s_route(p, s, f, sp, ss)
            if j >= 0:
                pump_trim(p, s, ss, j)
                RI[j, I_PUMP] = 1
                RI[j, I_STUCK] = 0
                stk[top] = j
                top += 1
            continue
        if RF[e, R_NEXT] <= RF[e, R_NOW]:
            head = RI[e, I_HI]
            absorb(p, s, e)
            absorbed(RI, RQI, GI, e, head)
        if RI[e, I_DLN] > 0 and DL[0, e, 0] <= RF[e, R_NOW]:
            expire(p, s, e)
        nel = drain_ended(RI, RQI, EL, e) if RI[e, I_HE] >= 0 else 0
        if nel:
            s_ended(p, s, sp, ss, nel, e)
        if RI[e, I_LR] == 0 and RI[e, I_LW] == 0:
            RI[e, I_PUMP] = 0
            top -= 1
            continue
        waiting = RI[e, I_LW]
        end = begin_step(p, s, e)
        if err[0]:
            return
        if RI[e, I_KIND] != NONE:
            for x in range(RI[e, I_NCH]):  # the cached tokens each turn found at its first admission
                rid = CH[0, e, x]
                if GI[G_ADM, rid] < 0:
                    GI[G_ADM, rid] = RQI[Q_CTX, rid]
            push(s.G, RI, f.ev_t, f.EVI, e, end)
            RI[e, I_PUMP] = 0
            top -= 1
            continue
        end_step(p, s, e)
        nel = drain_ended(RI, RQI, EL, e)
        if nel:
            s_ended(p, s, sp, ss, nel, e)
        RI[e, I_STUCK] = RI[e, I_STUCK] + 1 if RI[e, I_LW] == waiting else 0
        if RI[e, I_STUCK] > 2:
            err[0] = STUCK
            return


@jit
def s_due(SG, sh_t, t, stack):
    """How many turns of the session heap are due by ``t``: a walk down the binary heap that stops at every entry
    later than ``t`` (so it costs the due ones, not the heap), ``stack`` its scratch of at least the heap's size."""
    n = SG[G_EVN]
    if n == 0 or sh_t[0] > t:
        return 0
    count, top = 0, 1
    stack[0] = 0
    while top > 0:
        top -= 1
        i = stack[top]
        count += 1
        for c in (2 * i + 1, 2 * i + 2):
            if c < n and sh_t[c] <= t:
                stack[top] = c
                top += 1
    return count


@jit
def pass_room(margin, nrep, G, GF, RI, SG, sh_t, EL):
    """The requests one pass of :func:`s_loop` may absorb, each a time-series point and a deadline: the margin, the
    inboxes (absorbed whole), the turns due at the pass's start (``s_pump`` routes every one due before a replica
    plans: all of them where many sessions or agents come due at one instant) and, with a timeout, one for each
    deadline held (a turn that expires in the pass ends its session, whose agent's next session may come due at
    once). The turns that end in the pass's step are at most a batch, inside the margin. ``EL`` (the ended list,
    free between passes, longer than the session heap) is the walk's scratch."""
    room = margin + G[G_INBOX] + s_due(SG, sh_t, GF[0], EL)
    if GF[GF_TIMEOUT] < INF:
        for e in range(nrep):
            room += RI[e, I_DLN]
    return room


@jit
def s_start(SG, GF, sh_t, SHI, starts, S, agents):
    """``SessionStream.__init__``: every session's first turn at its start, or the agents' first sessions."""
    for x in range(starts.shape[0]):
        s_push(SG, sh_t, SHI, starts[x], x, 0)
    SG[G_STARTED] = starts.shape[0] if agents else S
    GF[0] = s_next(SG, sh_t)


@jit
def s_loop(z):
    """Run the session loop until it ends (OK), a slice is done (SLICE), an array needs to grow (GROW) or a check
    fails (the other statuses); resumable from its arrays (``z``: the :class:`~core.serving.sim.jit_layout.Run`,
    :class:`~core.serving.sim.jit_layout.Pool`, :class:`~core.serving.sim.jit_layout.Engines`,
    :class:`~core.serving.sim.jit_layout.Fleet`, :class:`~core.serving.sim.jit_layout.SessionParams` and
    :class:`~core.serving.sim.jit_layout.SessionState` records)."""
    r, p, s, f, sp, ss = z
    nrep, MB, max_clock = p.nrep, p.MB, r.max_clock
    G, GF, RI, RF, DL, err = s.G, s.GF, s.RI, s.RF, s.DL, s.err
    ev_t, EVI = f.ev_t, f.EVI
    fcap = s.FH.shape[2]
    evcap = ev_t.shape[0]
    tscap = s.TSF.shape[1]
    if not G[G_STARTED]:
        G[G_STARTED] = 1
        for e in range(nrep):
            record(p.fs, p.inv_P, G, RI, RF, s.ts_rep, s.TSF, e, RF[e, R_NOW])
    passes = G[G_PASSES]
    resumed = G[G_RESUME] != 0
    G[G_RESUME] = 0
    margin = 8 * nrep + 4 * MB + 64
    while True:
        # an inbox is absorbed whole in one pass, a time-series point and a deadline per request
        room = pass_room(margin, nrep, G, GF, RI, ss.SG, ss.sh_t, ss.EL)
        if (
            G[G_TSN] + room > tscap
            or G[G_EVN] + margin > evcap
            or G[G_FHMAX] + MB + 8 > fcap
            or (GF[GF_TIMEOUT] < INF and G[G_DLMAX] + room > DL.shape[2])
        ):
            G[G_PASSES] = passes
            G[G_RESUME] = 1 if resumed else 0
            return GROW
        if resumed:
            resumed = False
        else:
            passes += 1
            if not passes & 1023:
                nxt = GF[0]
                if G[G_EVN] > 0 and ev_t[0] < nxt:
                    nxt = ev_t[0]
                code = pass_check(G, GF, passes, nxt, max_clock, r.max_ev)
                if code != OK:
                    return code
        while G[G_EVN] > 0 and EVI[2, 0] != RI[EVI[1, 0], I_VER]:
            ev_pop(G, ev_t, EVI)  # a run cut short since
        t_r = ev_t[0] if G[G_EVN] > 0 else INF
        t_a = GF[0]
        woken = -1
        if t_r < t_a:
            woken = EVI[1, 0]
            ev_pop(G, ev_t, EVI)
            RI[woken, I_FLIGHT] = 0
            nel = s_end_step(p, s, ss, woken)
            if nel:
                s_ended(p, s, sp, ss, nel, woken)
        elif t_a < INF:
            if t_a > max_clock:
                G[G_PASSES] = passes
                GF[1] = t_a
                return CLOCK
            woken = s_route(p, s, f, sp, ss)
        else:
            break
        if woken >= 0:
            s_pump(p, s, f, sp, ss, woken)
        if err[0]:
            G[G_PASSES] = passes
            return err[0]
    G[G_PASSES] = passes
    return OK
