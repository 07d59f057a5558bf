"""The deployment's event loop compiled (numba): the same engine and router as :mod:`core.serving.sim.engine` and
:mod:`core.serving.sim.replicas`, operation for operation, over flat arrays, for the common shape of a run.

A profile of the Python loop (``bench/cluster.py``: one replica, 100,000 requests at 1.4 s; 16 replicas and
1,000,000 requests at 29 s) spreads its time over some ninety small calls per request, none above a tenth of the
whole: the cost is the interpreter's per operation, not one hot spot, so a compiled loop is the fix that pays.
This module is that loop for runs that are

* aggregated replicas behind ``round-robin``, ``least-outstanding``, ``power-of-two``, ``prefix-affinity`` or
  ``adapter-affinity`` (one replica included: a deployment of one replica is :func:`core.serving.simulate`'s run,
  byte for byte), with a shared prompt prefix per group of requests or without, serving multi-LoRA adapters or not
  (:mod:`core.serving.sim.jit_lora`: each replica's ``max_loras`` slots and host cache, the loads, the waits for a
  slot, the adapters' per-iteration memory time; :mod:`core.serving.sim.compiled_lora` lays them out and reads the
  adapter records back); disaggregated prefill and decode pools behind one of the
  first four (:mod:`core.serving.sim.compiled_disagg`: the arrivals, scheduling, admission, sliding windows and
  shared prefix below, no adapters);
* Poisson arrivals up to a number of requests or a duration, or a closed loop of users up to a number of
  requests; chunked prefill or prefill priority, with preempt-and-recompute (prefix caching of
  a preempted request's blocks on or off) or reserve admission; a timeout or none;
* a model with sliding-window layers (not under reserve admission) or without, on the tabulated timing of one
  pipeline stage
  (:class:`core.serving.sim.timing.LinearTiming` with ``pp`` 1);

anything else runs the Python loop (:func:`fallback_reason` says why, and the result carries it). The loop itself is in
:mod:`core.serving.sim.jit_loop` over :mod:`core.serving.sim.jit_plan`, :mod:`core.serving.sim.jit_engine` and
:mod:`core.serving.sim.jit_parts`;
this module is its caller: it lays out the arrays, runs slices of the loop with the work budget checked between
them, and turns the arrays into the Python loop's :class:`Records`. Same seed, same bytes: every record, time-series
point and counter equals the Python loop's (``tests/test_compiled_loop.py`` holds the two to the byte over the
shapes above). The order of every floating-point operation is kept, so the results are equal, not close.

State lives in arrays (per request, per replica, the event heap, the time series), so the loop stops every
:data:`SLICE_PASSES` passes and the caller checks the work budget (wall time, progress) as the Python loop does,
then resumes it; it also stops to let the caller grow an array. Linked lists over the request numbers stand for
the engine's queues (waiting: first-come first-served with a preempted request back at the head; running and
prefilling: admission order with removal anywhere), binary heaps for its heaps, with the same tie-break
(``(iteration, request)`` and ``(time, sequence)``), so they pop in the same order. The router's wake-up of an idle
replica while another plans (a recursion in the Python loop) is an explicit stack.

The first call in a fresh install compiles the loop (about 15 s on the 2-core CI machine); numba caches it on disk
beside its modules, stamped with a hash of all the engine's sources (:mod:`core.serving.sim.jit_cache`: an edit to
any of them compiles afresh in the next process), so every later process loads it in a fraction of a second. :func:`warm` runs a tiny
simulation: the dashboard calls it in the background at start-up, so no page waits for the compiler.
"""

from __future__ import annotations

from array import array

import numpy as np

from core.serving.sim.compiled_layout import (
    engine_state,
    fleet,
    goes_on,
    grown,
    grown_engines,
    grown_fleet,
    pool_params,
    run_limits,
    timing_table,
)
from core.serving.sim.compiled_lora import adapter_numbers, lay_out, loads_by_replica, replica_adapters
from core.serving.sim.jit_layout import (
    G_AHN,
    G_CLOSED,
    G_INBOX,
    G_TSN,
    GF_DURATION,
    GF_NEXT,
    GROW,
    I_ASLOTS,
    I_ITER,
    I_PRE,
    INF,
    OK,
    P2_CHUNK,
    Q_CACHED,
    Q_INP,
    Q_NPRE,
    Q_OUT,
    Q_REP,
    Q_RES,
    Q_STATUS,
    R_BUSY,
    R_LAST,
    R_PREFILL,
    ROUTERS,
    RQ_ADMIT,
    RQ_ARR,
    RQ_FIN,
    RQ_FIRST,
    Router,
)  # fmt: skip
from core.serving.sim.pool import prefix_hit_tokens
from core.serving.sim.records import Records

#: The most replicas x batch cap the compiled loop takes (its per-replica heaps and chunk lists are arrays of the
#: batch cap: 48 B each, the finish and window-crossing heaps and the chunks); past it the Python loop, whose replicas
#: grow their lists as they go.
MAX_REPLICA_SLOTS = 4_000_000


#: The most requests a Poisson run cut by a duration alone (no request count) may expect, rate x duration, for the
#: compiled loop's per-request arrays; past it the Python loop, which grows its lists as requests come.
MAX_DURATION_REQUESTS = 5_000_000


ASKED = "loop='python' asked for"
PAST_TABLE = "an iteration past the timing's table"
SESSIONS = "multi-turn sessions"
#: The shapes this module's loop (:func:`run`) lays out in arrays and flags of its own beyond the engine's base shape
#: (chunked prefill, preempt-and-recompute, full attention, Poisson arrivals of a count, no shared prefix, a
#: round-robin, least-outstanding or power-of-two router). A loop built on the same engine that does not lay them out
#: asks :func:`fallback_reason` without ``extended`` and leaves them to the Python loop by these reasons: the
#: engine's functions read their flags, which such a loop leaves off (the session loop lays them out).
EXTENDED_REASONS = (
    "a shared prompt prefix (prefix_cache_frac)",
    "router not compiled",
    "arrivals not Poisson",
    "a duration limit",
    "prefill-priority scheduling",
    "reserve admission",
    "sliding-window layers",
)
#: Why a run took the Python loop (:func:`fallback_reason`, the result's ``fallback_reason``), in the order checked.
FALLBACK_REASONS = (
    ASKED,
    "numba not installed",
    "adapters",
    "iteration timing per step (timing='direct') or over pipeline stages",
    *EXTENDED_REASONS,
    "a closed loop without a request count",
    "a duration limit past the compiled loop's arrays",
    "reserve admission with sliding-window layers",
    "more replica slots than the compiled loop holds",
    PAST_TABLE,
    SESSIONS,
)
_BASE_ROUTERS = ("round-robin", "least-outstanding", "power-of-two")


def fallback_reason(
    spec, timing, pool, replicas: int, router: str, *, adapters=None, prefix=None, extended: bool = False
) -> str | None:
    """Why the compiled loop leaves this simulation to the Python loop (the first of :data:`FALLBACK_REASONS` that
    holds), or None where it runs it (see the module docstring). ``extended``: the caller's loop lays out the
    shapes of :data:`EXTENDED_REASONS` and the adapters (this module's :func:`run` does: ``adapters``, the run's
    :class:`~core.serving.sim.adapters.AdapterDraws` or a replica's :class:`~core.serving.sim.adapters.Adapters`);
    without it they fall back, a shared prefix where ``prefix`` (the prompt tokens a group's prefix holds) is
    given."""
    from core.serving.sim.timing import LinearTiming

    lora = adapters is not None or (isinstance(timing, LinearTiming) and bool(timing.lora))
    numbers = adapter_numbers(adapters) if adapters is not None else None
    base = (
        (not numba_available(), "numba not installed"),
        # a loop that lays them out is given them (a timing priced for adapters without them: a session run's)
        (lora and (not extended or numbers is None), "adapters"),
        (not isinstance(timing, LinearTiming) or timing.pp != 1.0, FALLBACK_REASONS[3]),
    )
    beyond = (
        (prefix is not None, EXTENDED_REASONS[0]),
        (router not in _BASE_ROUTERS, EXTENDED_REASONS[1]),
        (spec.arrival != "poisson", EXTENDED_REASONS[2]),
        (spec.duration_s is not None, EXTENDED_REASONS[3]),
        (spec.policy != "chunked", EXTENDED_REASONS[4]),
        (spec.admission != "preempt", EXTENDED_REASONS[5]),
        (pool.slide_share != 0, EXTENDED_REASONS[6]),
    )
    rest = (
        (router not in ROUTERS, "router not compiled"),
        (spec.num_requests is None and spec.arrival != "poisson", "a closed loop without a request count"),
        (
            spec.num_requests is None and spec.rate_per_s * (spec.duration_s or INF) > MAX_DURATION_REQUESTS,
            "a duration limit past the compiled loop's arrays",
        ),
        (pool.slide_share != 0 and spec.admission == "reserve", "reserve admission with sliding-window layers"),
        (
            replicas * (spec.max_batch + 72 + 4 * (numbers or 0)) > MAX_REPLICA_SLOTS,
            "more replica slots than the compiled loop holds",
        ),
    )
    for holds, why in base + (() if extended else beyond) + rest:
        if holds:
            return why
    return None


def supported(spec, timing, pool, replicas: int, router: str, *, adapters=None) -> bool:
    """Whether this module's loop runs this simulation (:func:`fallback_reason` is None for it)."""
    return fallback_reason(spec, timing, pool, replicas, router, adapters=adapters, extended=True) is None


def _p2_pairs(replicas: int, seed: int, n: int) -> np.ndarray:
    """The power-of-two router's pairs for ``n`` requests (rows: first, second), drawn as
    :class:`core.serving.router.PowerOfTwo` draws them (chunks of :data:`P2_CHUNK` from its own generator)."""
    if replicas == 1:
        return np.zeros((2, 1), dtype=np.int64)
    rng = np.random.default_rng([seed, 0x524F55])
    a_s, b_s = [], []
    for _ in range(-(-n // P2_CHUNK)):
        a = rng.integers(0, replicas, size=P2_CHUNK)
        b = rng.integers(0, max(1, replicas - 1), size=P2_CHUNK)
        a_s.append(a)
        b_s.append(b + (b >= a))
    return np.stack([np.concatenate(a_s), np.concatenate(b_s)]).astype(np.int64)


def _router(spec, replicas: int, router: str, n: int, shared: bool) -> Router:
    """The router's record for ``n`` requests: the power-of-two pairs, the prefix groups drawn as
    :class:`core.serving.sim.replicas.ReplicaSet` draws them (chunks of its own generator, where a shared prefix or
    prefix affinity groups the requests) and the empty tables the loop fills."""
    from core.serving.router import BALANCE_ABS_THRESHOLD, BALANCE_REL_THRESHOLD
    from core.serving.sim.replicas import GROUP_CHUNK, GROUP_STREAM

    grouped = shared or router == "prefix-affinity"
    groups = np.zeros(0, dtype=np.int64)
    if grouped:
        rng = np.random.default_rng([spec.seed, GROUP_STREAM])
        chunks = [rng.integers(0, spec.prefix_groups, size=GROUP_CHUNK) for _ in range(-(-n // GROUP_CHUNK))]
        groups = np.concatenate(chunks).astype(np.int64)
    pairs = min(n, replicas * spec.prefix_groups) if shared else 0  # distinct (group, replica) pairs, at most
    return Router(
        kind=ROUTERS[router],
        pairs=_p2_pairs(replicas, spec.seed, n) if router == "power-of-two" else np.zeros((2, 1), dtype=np.int64),
        groups=groups,
        owner=np.full(spec.prefix_groups if router == "prefix-affinity" else 0, -1, dtype=np.int64),
        seen=np.full(1 << (2 * pairs + 1).bit_length() if shared else 0, -1, dtype=np.int64),
        balance_abs=BALANCE_ABS_THRESHOLD,
        balance_rel=float(BALANCE_REL_THRESHOLD),
    )


def _ints(code: str, x: np.ndarray) -> array:
    a = array(code)
    a.frombytes(np.ascontiguousarray(x, dtype={"q": np.int64, "l": np.int64, "b": np.int8}[code]).tobytes())
    return a


def _floats(x: np.ndarray) -> array:
    a = array("d")
    a.frombytes(np.ascontiguousarray(x, dtype=float).tobytes())
    return a


def run(
    spec, timing, pool, draws, replicas: int, router: str, seed: int, budget=None, *, shared: bool = False, lora=None
):
    """The deployment's records (each replica's :class:`Records` and the deployment's number of each of its
    requests), or None where the loop leaves the run to the Python one (an iteration past the timing's table).
    ``shared``: the requests of a prefix group share the first ``spec.prefix_cache_frac`` of their prompts.
    ``lora``: multi-LoRA serving, the adapters of one replica as each is built
    (:class:`~core.serving.sim.adapters.Adapters`, its draws the run's; None: none).
    Raises as the Python loop does: :class:`core.base.limits.BudgetExceeded` past the work ``budget``."""
    from core.base import WorkBudget
    from core.serving.sim.jit_loop import loop

    budget = budget or WorkBudget()
    n, R, mb = _issued_at_most(spec, draws), int(replicas), int(spec.max_batch)
    draws.ensure(n)
    gaps = np.asarray(draws.gaps[:n], dtype=float)
    closed = spec.arrival == "closed"
    users = min(int(spec.users), n) if closed else 0
    AH = np.zeros((2, max(users, 1)))  # the closed loop's arrival heap: every user's first request at 0 s
    AH[1, :users] = np.arange(users)
    # what one pass of the loop may add at most (jit_loop.loop's margin: a closed loop's users all due at once)
    margin = 8 * R + 4 * mb + 64 + (AH.shape[1] if closed else 0)
    ev_cap = margin + 64
    ts_cap = n + margin + 256  # about two points a request: grown once or twice on a run (as the tests' runs are)
    s = engine_state(spec, pool, R, n, ev_cap, ts_cap, rq_rows=6)
    G, GF, RQI = s.G, s.GF, s.RQI
    G[G_CLOSED] = 1 if closed else 0
    G[G_AHN] = users
    GF[GF_DURATION] = INF if spec.duration_s is None else float(spec.duration_s)
    GF[GF_NEXT] = (0.0 if users else INF) if closed else gaps[0]
    RQI[Q_INP] = np.asarray(draws.inp[:n], dtype=np.int64)
    RQI[Q_OUT] = np.asarray(draws.out[:n], dtype=np.int64)
    if spec.admission == "reserve":  # the blocks of the prompt and the client's max_tokens (Pool.blocks_for)
        RQI[Q_RES] = (RQI[Q_INP] + spec.max_output_tokens() + pool.block - 1) // pool.block
    if shared:
        RQI[Q_CACHED] = prefix_hit_tokens(spec.prefix_cache_frac, RQI[Q_INP])
    TB, RI, err = lay_out(lora, n, router, timing, timing_table(timing), s.RI, RQI)
    s = s._replace(RI=RI, err=err)
    p = pool_params(spec, timing, pool, R, TB)
    r = run_limits(n, budget)
    f = fleet(gaps, _router(spec, R, router, n, shared), AH, ev_cap, R)
    lg_room = 2 * R * int(RI[0, I_ASLOTS]) + 8 if lora is not None else 0  # jit_loop.loop's room for the loads
    while True:
        code = loop((r, p, s, f))
        if code == OK:
            break
        if code == GROW:
            s = grown_engines(s, mb, margin + int(G[G_INBOX]))  # an inbox is absorbed whole in one pass
            f = grown_fleet(f, G, margin)
            if lg_room and 2 * (int(s.err[1]) + lg_room) + 2 > s.err.shape[0]:
                s = s._replace(err=grown(s.err, 2 * s.err.shape[0]))
        elif not goes_on(code, budget, G, GF):
            return None
    tsn = int(G[G_TSN])
    loads = loads_by_replica(R, TB, s.err) if lora is not None else None
    return replica_records(R, s.RQF, RQI, s.RF, RI, s.ts_rep[:tsn], s.TSF[:, :tsn], loads)


def replica_records(R: int, RQF, RQI, RF, RI, ts_rep, TSF, loads=None) -> tuple[list[Records], list[np.ndarray]]:
    """Each of ``R`` engines' :class:`Records` from the compiled loop's arrays (:mod:`core.serving.sim.jit_layout`;
    ``ts_rep`` and ``TSF`` the time series points recorded) and the numbers (columns of ``RQI``) of each one's
    requests, in the order it took them; ``loads``: with adapters, each engine's adapter loads [s]."""
    order = np.argsort(ts_rep, kind="stable")
    bounds = np.searchsorted(ts_rep[order], np.arange(R + 1))
    status = RQI[Q_STATUS].astype(np.int8)
    rep = RQI[Q_REP]
    parts, gids = [], []
    for e in range(R):
        g = np.flatnonzero(rep == e)
        pts = order[bounds[e] : bounds[e + 1]]
        parts.append(
            Records(
                arrival_s=_floats(RQF[RQ_ARR, g]),
                input_tokens=_ints("q", RQI[Q_INP, g]),
                output_tokens=_ints("q", RQI[Q_OUT, g]),
                status=_ints("b", status[g]),
                admitted_s=_floats(RQF[RQ_ADMIT, g]),
                first_token_s=_floats(RQF[RQ_FIRST, g]),
                finish_s=_floats(RQF[RQ_FIN, g]),
                preemptions=_ints("l", RQI[Q_NPRE, g]),
                ts_s=_floats(TSF[0, pts]),
                ts_waiting=_floats(TSF[1, pts]),
                ts_running=_floats(TSF[2, pts]),
                ts_kv_frac=_floats(TSF[3, pts]),
                busy_s=float(RF[e, R_BUSY]),
                prefill_s=float(RF[e, R_PREFILL]),
                iterations=int(RI[e, I_ITER]),
                total_preemptions=int(RI[e, I_PRE]),
                last_arrival_s=float(RF[e, R_LAST]),
                adapters=replica_adapters(e, g, loads[e], RQF, RQI, RF, RI) if loads is not None else None,
            )
        )
        gids.append(g)
    return parts, gids


def merged(parts: list[Records], gids: list[np.ndarray]) -> Records:
    """The deployment's records from its replicas' (as :meth:`core.serving.sim.replicas.ReplicaSet.records` merges
    an aggregated deployment's, over the requests issued; one replica's are the deployment's)."""
    from core.serving.sim.replicas import deployment_adapters, gathered, merged_records

    if len(parts) == 1:
        return parts[0]
    n = sum(len(g) for g in gids)
    adapters = None
    if all(p.adapters is not None for p in parts):
        of = np.zeros(n, dtype=np.int64)
        for p, g in zip(parts, gids):
            of[g] = np.asarray(p.adapters["adapter"], dtype=np.int64)  # type: ignore[index]
        adapters = deployment_adapters(_ints("l", of), parts, gids)
    return merged_records(gathered(n, parts, gids), parts, len(parts), adapters)


def _issued_at_most(spec, draws) -> int:
    """The most requests the run issues: its request count, or, for Poisson arrivals cut by a duration alone, those
    the duration lets in (:meth:`core.serving.sim.arrivals.ArrivalStream._pop_arrival`: the first always, each next
    while its time, the running sum of the gaps, stays within it; ``np.cumsum`` adds in the same order)."""
    if spec.num_requests is not None:
        return int(spec.num_requests)
    k = 4096
    while True:
        draws.ensure(k + 1)
        times = np.cumsum(np.asarray(draws.gaps[: k + 1], dtype=float))
        if times[-1] > spec.duration_s:
            return 1 + int(np.searchsorted(times[1:], spec.duration_s, side="right"))
        k *= 2


def numba_available() -> bool:
    """Whether numba imports here (a dependency; a platform without its wheels takes the Python loop)."""
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - only where numba is absent
        return False
    return True
