"""A deployment's replicas stepping side by side behind a router (aggregated), or a prefill pool and a decode pool
with the KV cache moving between them (disaggregated).

Each replica is the one-replica engine (:class:`core.serving.sim.engine.Engine`) fed by the router instead of its
own arrival stream. One loop owns the deployment's clock and three kinds of event, taken in time order:

* an arrival (the deployment's Poisson stream or closed loop of users, drawn from the workload's draws in request
  order): the router picks a replica from the requests each one has in flight at that instant, which is exact
  because no replica has ended a step past it; the request waits in that replica's inbox until the end of the step
  in progress (as one replica absorbs what arrived during an iteration), and a run of decode iterations in
  progress is cut at the iteration the arrival falls in (:meth:`Engine.cut_run`), as one replica would have cut it;
* a replica's step ending (:meth:`Engine.end_step`): its requests emit, leave or start their KV transfer, and its
  next step is planned and timed (:meth:`Engine.begin_step`);
* a KV transfer's bytes all sent, and its arrival at the decode instance (disaggregated only).

Every replica plans a step only once, and a run of decode iterations is cut only when an arrival actually comes to
it, so a deployment of R replicas costs what its R replicas cost simulated alone, plus the routing. A deployment
of one replica reproduces :func:`core.serving.simulate` exactly (a test holds it to the byte).

Disaggregated: a request prefills on a prefill instance as a request of one output token; the instance keeps its
KV blocks until the transfer has left. The decode instance is chosen when the prefill ends; the transfer's wire
time (:func:`core.serving.kv_transfer.kv_transfer_s`, less what a layer-by-layer send hid behind the prefill) is
shared with the other transfers leaving the same prefill instance at the same time (processor sharing: ``n``
transfers in flight each get ``1 / n`` of its links); the fixed setup and latency follow. The decode instance then
admits the request only when blocks for its whole prompt are free (``Engine.remote_kv``), computes its last prompt
token (the first token the user sees) and decodes. TTFT runs from the arrival at the prefill pool to that first
token: prefill queue, prefill, transfer, decode queue.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.base import WorkBudget
from core.config import Draws, SimSpec
from core.serving.router import Policy, Request
from core.serving.sim.adapters import AdapterDraws, Adapters
from core.serving.sim.arrivals import ArrivalStream
from core.serving.sim.engine import DONE, NONE, RUN, UNFINISHED, Engine, Records
from core.serving.sim.pool import Pool
from core.serving.sim.timing import Timing

INF = math.inf
#: Draws of prefix groups taken at a time, from a generator of their own (the arrival and length draws stay put)
#: seeded ``[seed, GROUP_STREAM]``.
GROUP_CHUNK = 8192
GROUP_STREAM = 0x475250


class Replica(Engine):
    """One replica of a deployment: its requests come from the router, and it says when each one ends."""

    def __init__(
        self,
        index: int,
        spec: SimSpec,
        timing: Timing,
        pool: Pool,
        draws: Draws,
        load: list[int],
        *,
        hold_kv: bool = False,
        remote_kv: bool = False,
        lora: Callable[[list[int]], Adapters | None] | None = None,
    ) -> None:
        self.gids: list[int] = []  # the deployment's request number of each of this replica's requests
        # multi-LoRA serving: this replica's adapter slots, reading each request's adapter by its deployment number
        super().__init__(spec, timing, pool, draws, lora(self.gids) if lora is not None else None)
        self.index = index
        self.next_arr = self.next_poisson = INF
        self.arrivals = []
        self.inbox: deque[tuple[float, int, int, int, int]] = deque()
        self.load = load  # requests in flight per replica of this pool (shared with the router's view)
        self.ended: list[int] = []  # requests that ended in the step just ended (completion, rejection, timeout)
        self.hold_kv = hold_kv  # a prefill instance: a finished request keeps its blocks until its KV has left
        self.held: dict[int, int] = {}
        self.remote_kv = remote_kv
        self.in_flight = False  # a step planned, its end on the deployment's heap
        self.eid = index  # its place among the deployment's engines
        self.version = 0

    def _next_request(self) -> tuple[float, int, int, int]:
        t, i, o, hit, gid = self.inbox.popleft()
        self.gids.append(gid)
        self.next_arr = self.inbox[0][0] if self.inbox else INF
        return t, i, o, hit

    def deliver(self, t: float, i: int, o: int, hit: int, gid: int, counted: bool = False) -> None:
        """A request routed here at ``t`` (``counted``: already in this replica's load since it was chosen)."""
        self.inbox.append((t, i, o, hit, gid))
        if self.next_arr == INF:
            self.next_arr = t
        if not counted:
            self.load[self.index] += 1

    def _user_done(self, rid: int, t_end: float) -> None:
        self.load[self.index] -= 1
        self.ended.append(rid)

    def _complete(self, rid: int, c: int) -> None:
        if not self.hold_kv:
            super()._complete(rid, c)
            return
        self.running.remove(rid)
        self.held[rid] = c
        self._finish(rid, DONE)

    def release(self, rid: int) -> None:
        """The KV of ``rid`` has left: its blocks are free."""
        self._release(rid, self.held.pop(rid))


@dataclass
class Transfers:
    """The KV transfers leaving the prefill instances: each instance's links shared by its transfers in flight.

    Processor sharing by virtual time: instance ``p``'s clock ``v`` advances at ``1 / n`` per second with ``n``
    transfers in flight, and a transfer of wire time ``w`` started at ``v0`` has left at ``v = v0 + w``.
    """

    instances: int
    wire_s: Callable[[int, float], float]  # (prompt tokens, prefill time) -> wire time at full bandwidth [s]
    fixed_s: float  # setup + path latency [s]

    def __post_init__(self) -> None:
        self.v = [0.0] * self.instances
        self.t = [0.0] * self.instances
        self.active: list[list[tuple[float, int]]] = [[] for _ in range(self.instances)]
        self.version = [0] * self.instances

    def _catch_up(self, p: int, now: float) -> None:
        n = len(self.active[p])
        if n:
            self.v[p] += (now - self.t[p]) / n
        self.t[p] = now

    def add(self, p: int, now: float, wire_s: float, key: int) -> None:
        self._catch_up(p, now)
        heapq.heappush(self.active[p], (self.v[p] + wire_s, key))

    def next_done_s(self, p: int) -> float:
        a = self.active[p]
        return self.t[p] + (a[0][0] - self.v[p]) * len(a) if a else INF

    def pop_done(self, p: int, now: float) -> list[int]:
        self._catch_up(p, now)
        a, out = self.active[p], []
        while a and a[0][0] <= self.v[p] + 1e-12:
            out.append(heapq.heappop(a)[1])
        return out


class ReplicaSet:
    """The deployment's loop (see the module docstring): ``front`` takes the arrivals (the replicas, or the prefill
    pool), ``back`` the decoded requests of a disaggregated deployment (None: aggregated)."""

    def __init__(
        self,
        spec: SimSpec,
        draws: Draws,
        policy: Policy,
        front: list[Replica],
        back: list[Replica] | None = None,
        back_policy: Policy | None = None,
        transfers: Transfers | None = None,
        prefix_tokens: Callable[[int], int] | None = None,
        adapters: AdapterDraws | None = None,
    ) -> None:
        self.spec, self.draws, self.policy = spec, draws, policy
        self.adapters = adapters  # multi-LoRA serving: the adapter of each request (the router reads it)
        self.front, self.back, self.back_policy, self.xfer = front, back or [], back_policy, transfers
        self.engines = front + self.back
        for k, eng in enumerate(self.engines):
            eng.eid = k
        self.disagg = back is not None
        self.stream = ArrivalStream.__new__(ArrivalStream)
        st = self.stream
        st.spec, st.draws, st.issued, st.arrivals = spec, draws, 0, []
        st.next_poisson = draws.gaps[0] if spec.arrival == "poisson" else INF
        st.next_arr = st.next_poisson
        if spec.arrival == "closed":
            st.arrivals = [(0.0, u) for u in range(st._issue_cap(spec.users))]
            heapq.heapify(st.arrivals)
            st.next_arr = st.arrivals[0][0] if st.arrivals else INF
        self.prefix_tokens = prefix_tokens  # (prompt tokens) -> tokens a replica holding the group finds cached
        self.grouped = prefix_tokens is not None or policy.name == "prefix-affinity"
        self._groups: list[int] = []
        self._group_rng = np.random.default_rng([spec.seed, GROUP_STREAM])
        self.seen: list[set[int]] = [set() for _ in front]
        self.heap: list[tuple[float, int, int, int]] = []  # (step end, seq, engine, version)
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, a, b)
        self.seq = 0
        self._pumping: set[int] = set()  # replicas whose planning loop is running
        # per request of the deployment (disaggregated): where it is
        self.where: dict[int, tuple[int, int]] = {}  # gid -> (prefill instance, its request number there)
        self.decode_of: dict[int, int] = {}
        self.prefill_end_s: dict[int, float] = {}
        self.kv_s: dict[int, float] = {}

    # --- arrivals -------------------------------------------------------------------------------------------
    def _group(self, rid: int) -> int:
        while len(self._groups) <= rid:
            self._groups.extend(self._group_rng.integers(0, self.spec.prefix_groups, size=GROUP_CHUNK).tolist())
        return self._groups[rid]

    def _route(self) -> None:
        st = self.stream
        t = st._pop_arrival()
        gid = st.issued
        st.issued += 1
        self.draws.ensure(gid + 1)
        i, o = self.draws.inp[gid], self.draws.out[gid]
        group = self._group(gid) if self.grouped else -1
        load = self.front[0].load
        adapter = self.adapters.adapter(gid) if self.adapters is not None else -1
        j = self.policy.pick(Request(gid, t, i, o, group, adapter), load)
        hit = 0
        if group >= 0 and self.prefix_tokens is not None:
            seen = self.seen[j]
            if group in seen:
                hit = self.prefix_tokens(i)
            else:
                seen.add(group)
        eng = self.front[j]
        eng.deliver(t, i, 1 if self.disagg else o, hit, gid)
        self._wake(eng, t)

    # --- stepping -------------------------------------------------------------------------------------------
    def _push(self, eng: Replica, end: float) -> None:
        eng.in_flight = True
        eng.version += 1
        self.seq += 1
        heapq.heappush(self.heap, (end, self.seq, eng.eid, eng.version))

    def _wake(self, eng: Replica, t: float) -> None:
        """Something came to ``eng`` at ``t``: cut its decode run, or start it if it was idle or waiting for KV."""
        if eng.eid in self._pumping:
            return  # the loop pumping it absorbs the arrival before it plans
        if eng.in_flight:
            if eng.pend_kind == RUN:
                old = eng.pend_end_s
                new = eng.cut_run(t)
                if new != old:
                    self._push(eng, new)
            return
        if t > eng.now_s:
            eng._record(t)  # idle until now
            eng.now_s = t
        self._pump(eng)

    def _pump(self, eng: Replica) -> None:
        """Absorb, expire and plan ``eng``'s next step (as one replica's loop does), until one is in flight."""
        stuck = 0
        self._pumping.add(eng.eid)
        try:
            self._pump_loop(eng, stuck)
        finally:
            self._pumping.discard(eng.eid)

    def _pump_loop(self, eng: Replica, stuck: int) -> None:
        st = self.stream
        while True:
            while st.next_arr <= eng.now_s:  # every arrival due by now is routed before this replica plans
                self._route()
            if eng.next_arr <= eng.now_s:
                eng._absorb_arrivals()
            if eng.dl_heap and eng.dl_heap[0][0] <= eng.now_s:
                eng._expire()
            if eng.ended:
                self._ended(eng)
            if not eng.running and not eng.waiting:
                return
            waiting = len(eng.waiting)
            end = eng.begin_step()
            if eng.pend_kind != NONE:
                self._push(eng, end)
                return
            eng.end_step()
            if eng.ended:
                self._ended(eng)
            if eng.waiting and not eng.running and eng.held:
                return  # the pool is full of KV waiting to leave: a release wakes it
            stuck = stuck + 1 if len(eng.waiting) == waiting else 0
            if stuck > 2:
                raise RuntimeError("a replica can neither admit nor reject the head of its queue")

    def _ended(self, eng: Replica) -> None:
        ended, eng.ended = eng.ended, []
        for rid in ended:
            gid = eng.gids[rid]
            if eng.hold_kv and eng.status[rid] == DONE:
                self._start_transfer(eng, rid, gid)
            else:
                self.stream._user_done(gid, eng.fin_s[rid])
            if self.adapters is not None:  # it leaves the instance its pool's router chose
                policy = self.policy if eng.eid < len(self.front) else self.back_policy
                a = self.adapters.adapter(gid)
                policy.ended(eng.index, Request(gid, eng.fin_s[rid], eng.inp[rid], eng.out[rid], -1, a))  # type: ignore[union-attr]

    # --- KV transfers (disaggregated) -----------------------------------------------------------------------
    def _start_transfer(self, eng: Replica, rid: int, gid: int) -> None:
        assert self.xfer is not None and self.back_policy is not None
        now = eng.now_s
        p = eng.index
        self.where[gid] = (p, rid)
        self.prefill_end_s[gid] = now
        load = self.back[0].load
        a = self.adapters.adapter(gid) if self.adapters is not None else -1
        d = self.back_policy.pick(Request(gid, now, eng.inp[rid], eng.out[rid], -1, a), load)
        load[d] += 1  # in flight towards it from now
        self.decode_of[gid] = d
        self.xfer.add(p, now, self.xfer.wire_s(eng.inp[rid], now - eng.admit_s[rid]), gid)
        self._schedule_transfer(p)

    def _schedule_transfer(self, p: int) -> None:
        assert self.xfer is not None
        self.xfer.version[p] += 1
        t = self.xfer.next_done_s(p)
        if t < INF:
            self.seq += 1
            heapq.heappush(self.events, (t, self.seq, 0, p, self.xfer.version[p]))

    def _event(self, t: float, kind: int, a: int, b: int) -> None:
        assert self.xfer is not None
        if kind == 0:  # wire time done on prefill instance a (version b)
            if b != self.xfer.version[a]:
                return
            for gid in self.xfer.pop_done(a, t):
                self.seq += 1
                heapq.heappush(self.events, (t + self.xfer.fixed_s, self.seq, 1, gid, 0))
            self._schedule_transfer(a)
            return
        gid = a  # the KV of gid has arrived: the prefill instance frees it, the decode instance queues the request
        p, rid = self.where.pop(gid)
        pe = self.front[p]
        pe.release(rid)
        self.kv_s[gid] = t - self.prefill_end_s.pop(gid)
        if not pe.in_flight:
            self._wake(pe, t)
        de = self.back[self.decode_of.pop(gid)]
        i = pe.inp[rid]
        de.deliver(t, i, self.draws.out[gid], i, gid, counted=True)
        self._wake(de, t)

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self, budget: WorkBudget | None = None) -> None:
        budget = budget or WorkBudget()
        for eng in self.engines:
            eng._record()
        heap, events, st = self.heap, self.events, self.stream
        passes = 0
        while True:
            passes += 1
            if not passes & 1023:
                # the next moment anything happens; none (the pass that ends the loop) is no clock to check
                nxt = min(st.next_arr, heap[0][0] if heap else INF, events[0][0] if events else INF)
                budget.check(passes, nxt if nxt < INF else 0.0)
            while heap and heap[0][3] != self.engines[heap[0][2]].version:
                heapq.heappop(heap)  # a run cut short since
            t_r = heap[0][0] if heap else INF
            t_e = events[0][0] if events else INF
            t_a = st.next_arr
            if t_r < t_a and t_r <= t_e:
                _, _, k, _ = heapq.heappop(heap)
                eng = self.engines[k]
                eng.in_flight = False
                eng.end_step()
                if eng.ended:
                    self._ended(eng)
                self._pump(eng)
            elif t_e <= t_a and t_e < INF:
                t, _, kind, a, b = heapq.heappop(events)
                self._event(t, kind, a, b)
            elif t_a < INF:
                if t_a > budget.max_clock_s:
                    budget.check(passes, t_a)
                self._route()
            else:
                break

    # --- what it leaves behind ------------------------------------------------------------------------------
    def records(self) -> tuple[Records, list[Records], np.ndarray]:
        """(the deployment's records, each engine's, the KV transfer time of each request [s], NaN if none).

        Per request of the deployment: its arrival, lengths and, aggregated, its replica's times; disaggregated,
        the prefill pool's admission (queue) and the decode pool's first token, end and status (the prefill
        pool's, for a request that never left it). Time series: requests waiting and running summed over the
        engines at every point any of them recorded, the KV share held averaged over them."""
        n = self.stream.issued
        parts = [eng.records() for eng in self.engines]
        gids = [np.asarray(eng.gids, dtype=np.int64) for eng in self.engines]
        kv = np.full(n, np.nan)
        if self.kv_s:
            keys = np.fromiter(self.kv_s.keys(), dtype=np.int64, count=len(self.kv_s))
            kv[keys] = np.fromiter(self.kv_s.values(), dtype=float, count=len(self.kv_s))
        out = np.asarray(self.draws.out[:n], dtype=np.int64) if self.disagg else None
        merged = deployment_records(n, parts, gids, len(self.front), out, self._adapter_records(n, parts))
        return merged, parts, kv

    def _adapter_records(self, n: int, parts: list[Records]) -> dict[str, Any] | None:
        """The deployment's adapter records (:func:`deployment_adapters`)."""
        if self.adapters is None or any(p.adapters is None for p in parts):
            return None
        gids = [np.asarray(eng.gids, dtype=np.int64) for eng in self.engines]
        return deployment_adapters(array("l", (self.adapters.adapter(i) for i in range(n))), parts, gids)


def deployment_adapters(adapter: array, parts: list[Records], gids: list[np.ndarray]) -> dict[str, Any]:
    """A deployment's adapter records from its engines' (``parts``, with adapters; ``gids[k]`` the deployment's
    number of each of ``parts[k]``'s requests): each request's ``adapter`` and its wait for a slot (summed over the
    instances it waited on), every load of every engine, the busy time x distinct adapters summed."""
    each: list[dict[str, Any]] = [p.adapters for p in parts if p.adapters is not None]
    wait = np.full(len(adapter), np.nan)
    for g, r in zip(gids, each):
        w = np.asarray(r["adapter_wait_s"], dtype=float)
        m = np.isfinite(w)
        if g.size and m.any():
            wait[g[m]] = np.where(np.isnan(wait[g[m]]), 0.0, wait[g[m]]) + w[m]
    loads = array("d")
    for r in each:
        loads.extend(r["adapter_load_s"])
    return {
        "adapter": adapter,
        "adapter_load_s": loads,
        "adapter_storage_loads": sum(r["adapter_storage_loads"] for r in each),
        "adapter_wait_s": _arr("d", wait),
        "adapter_distinct_s": sum(r["adapter_distinct_s"] for r in each),
        "adapter_engines": len(each),
    }


def deployment_records(
    n: int,
    parts: list[Records],
    gids: list[np.ndarray],
    front: int,
    out: np.ndarray | None = None,
    adapters: dict[str, Any] | None = None,
) -> Records:
    """The deployment's records of its ``n`` requests (see :meth:`ReplicaSet.records`) from each engine's
    ``parts[k]`` and the deployment's number of each of its requests ``gids[k]``, the first ``front`` engines those
    that take the arrivals; ``out``: disaggregated, every request's output tokens (the decode pool's engines, after
    the front ones, give the times of the requests that reached them)."""
    arrival, inp, out_tokens, status, admitted, first, finish, pre = gathered(n, parts[:front], gids[:front])
    if out is not None:
        out_tokens[:] = out
        moved = status == DONE
        first[moved] = np.nan
        finish[moved] = np.nan
        status[moved] = UNFINISHED
        for g, rec in zip(gids[front:], parts[front:]):
            if not g.size:
                continue
            status[g] = np.frombuffer(rec.status, dtype=np.int8)
            first[g] = np.frombuffer(rec.first_token_s, dtype=float)
            finish[g] = np.frombuffer(rec.finish_s, dtype=float)
            pre[g] += np.asarray(rec.preemptions, dtype=np.int64)
    columns = (arrival, inp, out_tokens, status, admitted, first, finish, pre)
    return merged_records(columns, parts, front, adapters)


def gathered(n: int, parts: list[Records], gids: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Each of a deployment's ``n`` requests' arrival, lengths, status, times and preemptions from the records of the
    replicas (or prefill instances) that took them, ``gids[k]`` the deployment's number of each of ``parts[k]``'s."""
    arrival = np.full(n, np.nan)
    inp = np.zeros(n, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    status = np.full(n, UNFINISHED, dtype=np.int8)
    admitted, first, finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    pre = np.zeros(n, dtype=np.int64)
    for g, rec in zip(gids, parts):
        if not g.size:
            continue
        arrival[g] = np.frombuffer(rec.arrival_s, dtype=float)
        inp[g] = np.frombuffer(rec.input_tokens, dtype=np.int64)
        status[g] = np.frombuffer(rec.status, dtype=np.int8)
        admitted[g] = np.frombuffer(rec.admitted_s, dtype=float)
        first[g] = np.frombuffer(rec.first_token_s, dtype=float)
        finish[g] = np.frombuffer(rec.finish_s, dtype=float)
        pre[g] = np.asarray(rec.preemptions, dtype=np.int64)
        out[g] = np.frombuffer(rec.output_tokens, dtype=np.int64)
    return arrival, inp, out, status, admitted, first, finish, pre


def merged_records(
    columns: tuple[np.ndarray, ...], parts: list[Records], front: int, adapters: dict[str, Any] | None = None
) -> Records:
    """The deployment's :class:`Records`: the per-request ``columns`` (:func:`gathered`'s), the engines' time series
    merged (:func:`merge_series`), their busy and prefill times averaged and their counts summed; the last arrival
    of the ``front`` engines (those that take the arrivals)."""
    arrival, inp, out, status, admitted, first, finish, pre = columns
    ts, w, r, f = merge_series(parts)
    m = len(parts)
    return Records(
        arrival_s=_arr("d", arrival),
        input_tokens=_arr("q", inp),
        output_tokens=_arr("q", out),
        status=_arr("b", status),
        admitted_s=_arr("d", admitted),
        first_token_s=_arr("d", first),
        finish_s=_arr("d", finish),
        preemptions=_arr("l", pre),
        ts_s=_arr("d", ts),
        ts_waiting=_arr("d", w),
        ts_running=_arr("d", r),
        ts_kv_frac=_arr("d", f),
        busy_s=sum(p.busy_s for p in parts) / m,
        prefill_s=sum(p.prefill_s for p in parts) / m,
        iterations=sum(p.iterations for p in parts),
        total_preemptions=sum(p.total_preemptions for p in parts),
        last_arrival_s=max(p.last_arrival_s for p in parts[:front]),
        adapters=adapters,
    )


def _arr(code: str, x: np.ndarray):
    a = array(code)
    a.frombytes(np.ascontiguousarray(x, dtype={"d": float, "q": np.int64, "b": np.int8, "l": np.int64}[code]).tobytes())
    return a


def merge_series(parts: list[Records]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sum of sample-and-hold series over engines (waiting, running) and their mean (KV share), at every point."""
    if len(parts) == 1:
        p = parts[0]
        return tuple(np.frombuffer(a, dtype=float) for a in (p.ts_s, p.ts_waiting, p.ts_running, p.ts_kv_frac))  # type: ignore[return-value]
    ts: list[np.ndarray] = []
    dw: list[np.ndarray] = []
    dr: list[np.ndarray] = []
    dk: list[np.ndarray] = []
    for p in parts:
        t = np.frombuffer(p.ts_s, dtype=float)
        if not t.size:
            continue
        for src, dst in ((p.ts_waiting, dw), (p.ts_running, dr), (p.ts_kv_frac, dk)):
            v = np.frombuffer(src, dtype=float)
            dst.append(np.diff(v, prepend=0.0))
        ts.append(t)
    t = np.concatenate(ts)
    order = np.argsort(t, kind="stable")
    m = len(parts)
    return (
        t[order],
        np.cumsum(np.concatenate(dw)[order]),
        np.cumsum(np.concatenate(dr)[order]),
        # the KV share re-summed from its steps carries their rounding (a pool emptied reads -2e-16): held to [0, 1]
        np.clip(np.cumsum(np.concatenate(dk)[order]) / m, 0.0, 1.0),
    )
