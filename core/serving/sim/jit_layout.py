"""Where the compiled loop (:mod:`core.serving.sim.compiled`) keeps its state: the columns of its per-replica and
global arrays, the rows of its per-request arrays, and the statuses a slice of the loop returns. Plain constants
(no numba): the loop's functions read them as compile-time constants, the caller builds and reads the arrays with
them; and the named records the engine's functions take (:class:`Run`, :class:`Pool`, :class:`Engines`,
:class:`Fleet`; a disaggregated run's :class:`Wire` and :class:`Transfers`; a session run's :class:`SessionParams` and
:class:`SessionState`), built by :mod:`core.serving.sim.compiled_layout`. numba passes a record by value, each
array in it as its seven to eleven machine words: a call that is not inlined copies the whole record (some 140 words
for a pool's parameters and state), so the hot path inlines the functions that take records (``jit_inline``) and
keeps real calls for the ones run once per event or fewer, and the small helpers take the few arrays they read.

The compiled functions' on-disk cache is stamped with a hash of every engine source, this file included
(:mod:`core.serving.sim.jit_cache`): a change here recompiles the loop in the next process.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

INF = math.inf
EPS = 1e-9  # the engine's tolerance on block counts (core.serving.sim.engine._EPS)
#: Passes of the loop between two returns to the caller (its work-budget checks: wall time, progress).
SLICE_PASSES = 1 << 14
#: The routers the loop knows, by its number for each (the one router table: :func:`core.serving.sim.jit_loop.pick`).
ROUTERS = {"round-robin": 0, "least-outstanding": 1, "power-of-two": 2, "prefix-affinity": 3, "adapter-affinity": 4}
#: Draws a power-of-two router takes from its generator at a time (core.serving.router._DRAW_CHUNK).
P2_CHUNK = 4096

# what a slice of the loop returns: done, a slice done (check the budget and call again), an array to grow, the
# simulated clock or the event count past the budget, a replica stuck, a decode run without room, the Python loop
OK, SLICE, GROW, CLOCK, EVENTS, STUCK, NO_ROOM, FALLBACK = range(8)

# the global integer state G: requests routed, the event heap's sequence, passes, the event heap's size, the time
# series' length, round-robin's next, least-outstanding's last, back from a slice, started, the largest finish heap,
# the largest deadline heap; a closed loop of users (else Poisson), the size of its arrival heap; the requests
# delivered to the engines' inboxes and not yet absorbed (each absorbed with a time-series point and, with a timeout,
# a deadline, all of one inbox in one pass: what a pass may write beyond the loop's fixed margin)
G_ISSUED, G_SEQ, G_PASSES, G_EVN, G_TSN, G_RR, G_LO, G_RESUME, G_STARTED, G_FHMAX, G_DLMAX, G_CLOSED, G_AHN = range(13)
G_INBOX = 13
N_G = 14
# the global float state GF: the next arrival, the simulated clock at the last check, the requests' timeout (INF:
# none), the time after which no request is issued (INF: none)
GF_NEXT, GF_CLOCK, GF_TIMEOUT, GF_DURATION = range(4)
N_GF = 4

# the per-replica integer state RI[e]: the engine's decode iterations D, decoding sequences, their base sum, full
# blocks held, iterations, preemptions, the planned step's kind, a step in flight, its version, requests in flight
# (the router's load); the heads, tails and lengths of the waiting, running and prefilling queues and the inbox
# (head and tail); the finish heap's size, the planned chunks' count, the step decodes too, being pumped, pumps
# without progress; the planned run's iterations, its bound and whether an arrival may cut it; preempted while
# planning; the deadline heap's size; async scheduling on; reserve admission on, and the blocks it has reserved
# (whole blocks: the compiled loop runs models without sliding layers, whose full share is 1.0, so the Python loop's
# float sum of reservations holds the same integer); the head and tail of the requests ended and not yet told to
# the arrival stream (Replica.ended); prefill-priority scheduling on (else chunked prefill); sliding-window layers:
# on, the window [tokens], sliding blocks held, decoding sequences below the window and the sum of their bases, the
# size of the window-crossing heap (rows 2 and 3 of the finish heaps' array); a prefill instance of a disaggregated
# deployment (a finished request keeps its blocks until its KV has left: Replica.hold_kv); a decode instance (a
# request's prompt KV arrives whole, admitted only when blocks for all of it are free: Engine.remote_kv)
(I_D, I_NDEC, I_BSUM, I_FULL, I_ITER, I_PRE, I_KIND, I_FLIGHT, I_VER, I_LOAD,
 I_HW, I_TW, I_LW, I_HR, I_TR, I_LR, I_HP, I_TP, I_LP, I_HI, I_TI,
 I_FHN, I_NCH, I_PDEC, I_PUMP, I_STUCK, I_RK, I_RKMAX, I_RCUT, I_PNOW, I_DLN, I_ASYNC,
 I_RSV, I_RES, I_HE, I_TE, I_PPRI, I_SLD, I_WIN, I_SLIDE, I_NIW, I_BSW, I_CXN, I_HOLD, I_REMOTE) = range(45)  # fmt: skip
# ... and multi-LoRA serving (core.serving.sim.jit_lora): the adapter slots (max_loras; 0: no adapters), the host
# cache's slots (max_cpu_loras), distinct adapters among the running requests, adapters in GPU slots and in host
# memory, the clock that orders their uses (least recently used first), loads from storage, the distinct adapters of
# the planned run of decode iterations, the router is adapter-affinity, distinct adapters the router counts in flight
(I_ASLOTS, I_AHSLOTS, I_ADIST, I_AGPU, I_AHOST, I_ACLK, I_ASTOR, I_RD, I_AFF, I_RACT) = range(45, 55)  # fmt: skip
#: The per-replica columns before the adapters' own: with adapters, RI has 4 x A more (A: the adapter numbers), per
#: adapter its running requests, its GPU slot's last use, its host copy's last use (0: not there) and the requests
#: the router counts in flight with it (core.serving.router.AdapterAffinity.active)
N_RI = 55
# the per-replica float state RF[e]: its clock, busy time, prefill time, the planned step's end, its inbox's next
# arrival, its last arrival, and the planned run's time, attended pairs, cached tokens, growth and deadline; async
# scheduling: the arrivals the next plan sees (up to), those the plan being made sees, the run's last iteration's start
# after the run's start
# after the run's start; the share of sliding-window layers (0.0: none)
R_NOW, R_BUSY, R_PREFILL, R_END, R_NEXT, R_LAST, R_RDT, R_RA, R_RR, R_RG, R_RDEAD, R_SEEN, R_CUT, R_RPRE, R_SS = range(
    15
)
# ... and the adapter loads the planned iteration waits for [s], busy time x distinct adapters summed [s]
R_LOADS, R_ADS = 15, 16
N_RF = 17

# rows of the per-request integer array RQI: status, preemptions, tokens emitted, context, prefill target, the
# decode iteration of its last token, tokens in the prefix cache (a shared prefix on arrival: set by the caller to
# what a replica that has served its group finds, zeroed by the router where it has not; left by a preemption), its
# replica; the queues' links (waiting next, running next and previous, prefilling next and previous, inbox next);
# its lengths
Q_STATUS, Q_NPRE, Q_GEN, Q_CTX, Q_TARGET, Q_FIN_D, Q_CACHED, Q_REP = range(8)
Q_NX_W, Q_NX_R, Q_PV_R, Q_NX_P, Q_PV_P, Q_NX_IN, Q_INP, Q_OUT = range(8, 16)
# ... and what reserve admission reserves for it: the blocks of its prompt and the workload's largest output
Q_RES = 16
# ... and the next in its replica's list of requests ended
Q_NX_E = 17
# ... and whether it is decoding below the sliding window (DecodeSet.lo)
Q_LO = 18
# ... and the adapter it carries (-1: none)
Q_ADP = 19
N_Q = 20
# rows of the per-request float array RQF: arrival, admission, first token, finish [s]; with adapters, when it was
# first turned away for want of a slot (NaN: not now) and its wait for a slot so far (NaN: never turned away)
RQ_ARR, RQ_ADMIT, RQ_FIRST, RQ_FIN, RQ_BLOCK, RQ_AWAIT = range(6)
#: rows of the timing table TB: the coefficients (c0, c1, m0, m1, x) by tokens; with adapters, the micro-batches by
#: tokens, one adapter's memory time per stage (every column), each adapter's load from host memory and from storage
#: [s] by adapter number
TB_MB, TB_MD, TB_HOST, TB_STORE = 5, 6, 7, 8


class Router(NamedTuple):
    """The router's state the loop reads and keeps (one record, whatever the policy: :data:`ROUTERS`)."""

    kind: int  # the policy's number in ROUTERS
    pairs: np.ndarray  # power-of-two: each request's two replicas (rows: first, second)
    groups: np.ndarray  # each request's prefix group (empty: requests not grouped)
    owner: np.ndarray  # prefix-affinity: the replica each group went to first (-1: none yet)
    seen: np.ndarray  # the (group, replica) pairs served so far, ``group x replicas + replica``, as an open-addressing
    # hash set (-1: an empty slot; a power of two at least twice the pairs it may hold; empty: no shared prefix)
    balance_abs: int  # prefix-affinity's balance thresholds (core.serving.router.out_of_balance)
    balance_rel: float


class Run(NamedTuple):
    """The run's limits, read and never changed (one record, whichever loop runs)."""

    N: int  # the most requests (turns, in a session run) the run issues
    max_ev: int  # the work budget's passes
    max_clock: float  # the work budget's simulated clock [s]


class Pool(NamedTuple):
    """One pool of replicas' parameters, read and never changed in a run: an aggregated deployment's replicas, or
    the prefill or the decode pool of a disaggregated one (two records of this type). Built in one place:
    :func:`core.serving.sim.compiled_layout.pool_params`."""

    nrep: int  # replicas in the pool
    B: int  # tokens per KV block
    K: int  # the token budget of an iteration [tokens]
    MB: int  # the batch cap [sequences]
    keep: bool  # a preempted request's full blocks stay in the prefix cache
    tmax: int  # the timing table's last row [tokens]
    graph_prefill: bool  # prefill iterations run as CUDA graphs too
    max_ctx: int  # the model's context [tokens]
    pool_blocks: float  # P: the KV pool [blocks-worth]
    fs: float  # the full-attention layers' share of a block (1.0 without sliding-window layers)
    seq_max: float  # one sequence's most [blocks-worth]
    inv_P: float  # 1 / P (0: no pool)
    q: float  # the scheduler's cost per sequence scheduled [s]
    g_launch: float  # a graph's launch [s]
    e_launch: float  # an eager kernel's launch [s]
    g_max: float  # the most tokens an iteration runs as a graph [tokens]
    n_k: float  # kernels per stage of an eager iteration
    pp: float  # pipeline stages
    TB: np.ndarray  # the timing table: rows TB_* (c0, c1, m0, m1, x by tokens; with adapters their rows)
    host_nh: float  # a host KV tier: the cached and new tokens HBM holds, N_h (INF: no tier) [tokens]
    host_h: float  # the host link's time per token past N_h [s]


class Engines(NamedTuple):
    """One pool's engine state: what the engine's functions read and write, columns and rows named above. The
    caller grows some between slices and passes a new record (:func:`core.serving.sim.compiled_layout.grown`)."""

    G: np.ndarray  # the loop's counters (G_*); a disaggregated run's arrival stream and event heap: the prefill pool's
    GF: np.ndarray  # the loop's float state (GF_*)
    RI: np.ndarray  # per replica, integers (I_*; with adapters, four columns per adapter after N_RI)
    RF: np.ndarray  # per replica, floats (R_*) [s]
    hist: np.ndarray  # decoding sequences by block phase: all, then below the window
    FH: np.ndarray  # the finish heaps (rows 0-1) and window-crossing heaps (rows 2-3)
    CH: np.ndarray  # the planned step's chunks (request, tokens)
    RQF: np.ndarray  # per request, floats (RQ_*) [s]
    RQI: np.ndarray  # per request, integers (Q_*)
    DL: np.ndarray  # the deadline heaps (jit_deadline)
    ts_rep: np.ndarray  # the time series: replica of each point, then (time, waiting, running, KV share) in TSF
    TSF: np.ndarray
    err: np.ndarray  # a status set deep in the loop (err[0]); with adapters, the log of their loads in order
    # (core.serving.sim.jit_lora.acquire): err[1] their count, then per load its replica and adapter x 2 + from storage


class Fleet(NamedTuple):
    """The deployment's arrival stream, router and event heap: one per run (the prefill pool's router in a
    disaggregated one; a session run routes by its own rule and leaves gaps, rt and AH empty)."""

    gaps: np.ndarray  # the arrival gaps (Poisson) or think times (closed loop) [s]
    rt: Router
    AH: np.ndarray  # the closed loop's arrival heap (time, user's sequence)
    ev_t: np.ndarray  # the event heap of step ends: times [s], then (sequence, engine, version) in EVI
    EVI: np.ndarray
    stk: np.ndarray  # the pump's stack of engines


class Wire(NamedTuple):
    """A disaggregated run's KV transfers' parameters (core.serving.sim.compiled_disagg.KvWire)."""

    fixed_s: float  # setup and path latency of a transfer [s]
    k_bytes: float  # KV bytes per token [B]
    den: float  # the achieved bandwidth per GPU [B/s]
    stage_layers: int  # the prefill stage's layers
    overlap: bool  # the KV leaves layer by layer, behind the prefill


class Transfers(NamedTuple):
    """A disaggregated run's state between its pools (:mod:`core.serving.sim.jit_disagg`'s X_* columns)."""

    rtd: Router  # the decode pool's router
    XF: np.ndarray  # per prefill instance: its processor-sharing clock and when it was caught up [s]
    XI: np.ndarray  # per prefill instance: transfers in flight, its wire-done event's version, KV held
    XHV: np.ndarray  # per prefill instance, the heap of transfers in flight: the virtual time each leaves at [s]
    XHG: np.ndarray  # ... and its request
    xe_t: np.ndarray  # the transfer events' heap: times [s], then (sequence, wire or -1 - request, version) in XEI
    XEI: np.ndarray
    Gx: np.ndarray  # their counters (G_EVN, G_SEQ, G_FHMAX) and the requests delivered to the decode pool (G_ISSUED)
    dgid: np.ndarray  # per decode-pool request: its number in the deployment
    decode_of: np.ndarray  # per request: the decode instance chosen for it
    pend_s: np.ndarray  # per request: when its transfer started [s]
    kv: np.ndarray  # per request: its KV transfer time [s]
    out: np.ndarray  # per request: output tokens, and reserve admission's blocks on the decode pool
    DEL: np.ndarray  # per engine (prefill, then decode): the requests its inbox took
    ORDp: np.ndarray  # per prefill-pool request: its place among those its engine took
    ORDd: np.ndarray  # per decode-pool request: the same


class SessionParams(NamedTuple):
    """A session run's parameters (:mod:`core.serving.sim.jit_sessions`)."""

    affinity: bool  # the router keeps a session on its replica
    caching: bool  # a finished turn's blocks stay cached for the session's next turn
    agents: bool  # agents start a next session as one ends (else every session's start is set)
    S: int  # sessions


class SessionState(NamedTuple):
    """A session run's state beside the engine's (:mod:`core.serving.sim.jit_sessions`' rows and columns)."""

    GI: np.ndarray  # per request: its session, turn, cached tokens at routing and at its first admission
    SI: np.ndarray  # per session: its first turn's index, its turns, its home replica
    PI: np.ndarray  # per turn: input, output tokens, blocks reserved
    PF: np.ndarray  # per turn: gap after the previous turn's end, recorded start [s]
    SF: np.ndarray  # per session: the agent's gap after it, its end [s]
    SG: np.ndarray  # the session stream's counters (G_EVN, G_SEQ, G_STARTED)
    sh_t: np.ndarray  # the turns due: times [s], then (sequence, session, turn) in SHI
    SHI: np.ndarray
    CB: np.ndarray  # the prefix caches: per replica and session its cached blocks and free-queue links
    CI: np.ndarray  # per replica: the free queue's head and tail, cached blocks, evictions
    EL: np.ndarray  # the requests that ended in a call, in order; between passes the scratch of jit_sessions.s_due
