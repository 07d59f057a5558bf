"""A deployment, not one replica: replicas behind a router, or disaggregated prefill and decode pools.

``simulate_deployment(cfg, spec)`` simulates what the config describes: ``cfg.replicas`` replicas (the config's
GPUs / (TP x PP) unless ``workload.replicas`` says otherwise) behind ``workload.router``
(:mod:`core.serving.router`), each one the one-replica engine; or, with ``disagg.enabled``, ``P`` prefill and
``D`` decode instances of their own GPU kind and TP with the KV cache moved between them
(:mod:`core.serving.kv_transfer`). The loop is :mod:`core.serving.sim.replicas`. Same config, spec and seed:
the same bytes.

Per deployment: the percentiles and counters of :class:`core.serving.Summary` over every request. Per replica (or
pool instance): requests, arrival rate, utilisation (busy time / the deployment's span), queue and latency p95.
``load_imbalance`` = max / mean requests per replica (1 = even). Disaggregated: the KV transfer time of each
request (prefill end to its KV at the decode instance) and its share of the mean TTFT, each pool's utilisation and
queue.

Closed-form capacity of the deployment: ``R`` x one replica's (:func:`core.serving.max_throughput`); disaggregated,
``min(P x c_p, D x c_d)`` with a prefill instance's capacity for one-token requests and a decode instance's
``B / ((O - 1) t_B)`` at the largest batch ``B`` its KV pool and ``max_batch`` allow (``t_B`` the decode step at the
mean context).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, WorkBudget, choices
from core.config import Deployment, Draws, Lengths, RabitConfig, SimSpec, as_deployment
from core.physics import serving_memory
from core.serving.front_end import with_front_end
from core.serving.kv_transfer import KvPath, kv_path, kv_transfer_s, wire_share
from core.serving.router import make_policy
from core.serving.sim import compiled, compiled_disagg
from core.serving.sim.adapters import AdapterDraws, Adapters
from core.serving.sim.compiled_disagg import KvWire
from core.serving.sim.engine import DONE, Engine, Records
from core.serving.sim.metrics import Percentiles
from core.serving.sim.pool import prefix_hit_tokens
from core.serving.sim.replicas import Replica, ReplicaSet, Transfers
from core.serving.simulation import (
    Capacity,
    SimResult,
    adapter_draws,
    check_loop,
    kv_pool,
    max_throughput,
    replica_adapters,
    replica_timing,
    result_of,
)


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PoolLayout(_F):
    """One pool of identical instances: how many, of which GPU kind and layout."""

    instances: int
    gpu: str
    tp: int
    pp: int


class Layout(_F):
    """What serves: aggregated replicas behind a router, or a prefill and a decode pool."""

    mode: choices.ServingMode = "aggregated"
    router: choices.RouterPolicy = "least-outstanding"
    replicas: int = 1  # aggregated
    prefill: PoolLayout | None = None  # disaggregated
    decode: PoolLayout | None = None
    overlap: bool = True  # disaggregated: the KV leaves layer by layer during the prefill

    @property
    def instances(self) -> int:
        """Replicas, or prefill + decode instances."""
        if self.mode == "aggregated":
            return self.replicas
        assert self.prefill is not None and self.decode is not None
        return self.prefill.instances + self.decode.instances

    @property
    def gpus(self) -> int:
        """GPUs of one pool's instances times their count, summed (aggregated: needs the replica's GPUs)."""
        if self.prefill is None or self.decode is None:
            raise ValueError("an aggregated layout's GPUs are replicas x the replica's GPUs")
        return sum(p.instances * p.tp * p.pp for p in (self.prefill, self.decode))


def layout_of(cfg: RabitConfig) -> Layout:
    """The layout the shared config describes (its replicas, router and ``disagg`` group)."""
    w, d = cfg.workload, cfg.disagg
    if not d.enabled:
        return Layout(mode="aggregated", router=w.router, replicas=cfg.replicas)
    return Layout(
        mode="disaggregated",
        router=w.router,
        replicas=d.prefill_instances + d.decode_instances,
        prefill=PoolLayout(
            instances=d.prefill_instances, gpu=d.prefill_gpu or cfg.gpu, tp=d.prefill_tp or cfg.tp, pp=cfg.pp
        ),
        decode=PoolLayout(
            instances=d.decode_instances, gpu=d.decode_gpu or cfg.gpu, tp=d.decode_tp or cfg.tp, pp=cfg.pp
        ),
        overlap=d.overlap,
    )


class ReplicaStats(_F):
    """One replica (or pool instance) of a simulated deployment."""

    replica: int
    pool: str  # "replica", "prefill" or "decode"
    requests: int
    rate_per_s: float  # requests it received / the deployment's arrival period
    utilization: float  # busy time / the deployment's span
    queue_p95_s: float | None
    ttft_p95_s: float | None  # aggregated only (a pool instance serves part of a request)
    e2e_p95_s: float | None
    # the same percentiles as the deployment's (p50 / p95 / p99, count, mean) of its finished requests; TTFT,
    # ITL and E2E aggregated only
    queue_s: Percentiles
    ttft_s: Percentiles | None = None
    itl_s: Percentiles | None = None
    e2e_s: Percentiles | None = None


class PoolStats(_F):
    """One pool of a disaggregated deployment."""

    instances: int
    gpu: str
    tp: int
    pp: int
    utilization: float  # mean over its instances
    queue_s: Percentiles  # waiting in this pool's queues
    requests: int


@dataclass(frozen=True)
class DeploymentResult:
    """One simulated deployment: its layout, the deployment-wide result (every request, summed time series) and
    what each replica or pool did."""

    layout: Layout
    result: SimResult
    replicas: tuple[ReplicaStats, ...]
    per_replica_rate_per_s: float  # the offered rate / the instances that take arrivals
    load_imbalance: float  # max / mean requests per replica (1: even)
    kv_transfer_s: Percentiles | None = None  # disaggregated: prefill end -> KV at the decode instance
    kv_transfer_share_of_ttft: float | None = None  # mean transfer / mean TTFT
    pools: dict[str, PoolStats] | None = None
    kv_path: str = ""

    @property
    def summary(self):
        return self.result.summary

    @property
    def mode(self) -> str:
        return self.layout.mode

    @property
    def utilization(self) -> tuple[float, ...]:
        return tuple(r.utilization for r in self.replicas)


def pool_deployment(dep: Deployment, gpu: str, tp: int) -> Deployment:
    """``dep`` with one pool's GPU kind and TP, its instance's GPUs in as few nodes as they fit."""
    d = dep.with_(gpu=gpu, tp=tp) if gpu != dep.config.gpu else dep.with_(tp=tp)
    n = tp * d.config.pp
    per = min(n, d.gpu.gpus_per_node)
    return d.with_(gpus_per_node=per, nodes=max(1, math.ceil(n / per)))


def _replica_stats(k: int, pool: str, rec: Records, span: float, period: float, with_latency: bool) -> ReplicaStats:
    arr = np.frombuffer(rec.arrival_s, dtype=float)
    st = np.frombuffer(rec.status, dtype=np.int8)
    adm = np.frombuffer(rec.admitted_s, dtype=float)
    done = st == DONE
    first = np.frombuffer(rec.first_token_s, dtype=float)
    fin = np.frombuffer(rec.finish_s, dtype=float)
    queue = Percentiles.of(adm[done] - arr[done])
    ttft = itl = e2e = None
    if with_latency:
        out = np.frombuffer(rec.output_tokens, dtype=np.int64)
        multi = done & (out >= 2)  # as the deployment's ITL (core.serving.sim.metrics)
        ttft = Percentiles.of(first[done] - arr[done])
        itl = Percentiles.of((fin[multi] - first[multi]) / (out[multi] - 1))
        e2e = Percentiles.of(fin[done] - arr[done])
    return ReplicaStats(
        replica=k,
        pool=pool,
        requests=int(arr.size),
        rate_per_s=arr.size / period if period > 0 else 0.0,
        utilization=rec.busy_s / span if span > 0 else 0.0,
        queue_p95_s=queue.p95,
        ttft_p95_s=ttft.p95 if ttft is not None else None,
        e2e_p95_s=e2e.p95 if e2e is not None else None,
        queue_s=queue,
        ttft_s=ttft,
        itl_s=itl,
        e2e_s=e2e,
    )


def decode_capacity(sm, pool, spec: SimSpec) -> float:
    """Requests/s one decode instance drains at its largest batch (see the module docstring): ``sm`` its step
    model, ``pool`` its KV pool, ``spec`` the workload (its ``max_batch`` caps the batch)."""
    i_mean, o_mean = spec.mean_lengths()
    I, O = max(1, round(i_mean)), max(1, round(o_mean))
    per_seq = pool.blocks_for(I + O - 1)
    B = max(1, min(spec.max_batch, int(pool.blocks // per_seq) if per_seq > 0 else spec.max_batch))
    c = I + max(O - 2, 0) / 2
    t = float(sm.pipelined_s(B, B * pool.eff(c + 1), B * pool.eff(c)))
    return B / (max(O - 1, 1) * t)


def simulate_deployment(
    dep: Deployment | RabitConfig,
    spec: SimSpec,
    layout: Layout | None = None,
    *,
    budget: WorkBudget | None = None,
    timing: str = "auto",
    loop: str = "auto",
) -> DeploymentResult:
    """Simulate the deployment ``layout`` (default: :func:`layout_of` the config) serving ``spec`` (its rate is
    the whole deployment's). Raises ``ValueError`` when an instance has no room for a KV cache, and
    :class:`core.base.limits.BudgetExceeded` past the work ``budget``. ``loop``: as :func:`core.serving.simulate`'s
    (either layout takes the compiled loop where it can)."""
    check_loop(loop)
    dep = as_deployment(dep)
    layout = layout or layout_of(dep.config)
    if layout.mode == "aggregated":
        return _aggregated(dep, spec, layout, budget, timing, loop)
    return _disaggregated(dep, spec, layout, budget, timing, loop)


def warm_simulator() -> None:
    """Load (or, in a fresh install, compile) every compiled loop with a tiny simulation: one replica's, a
    deployment's with adapters, a disaggregated deployment's and a session run's. The dashboard's start-up calls
    this in the background so that no page's first simulation waits for them, and CI before its test processes."""
    from core.config import AdapterSet, Sessions
    from core.serving.session_result import simulate_sessions  # above this module in the wing

    cfg, spec = RabitConfig(), SimSpec(num_requests=4, rate_per_s=1.0)
    simulate_deployment(cfg, spec, Layout(replicas=1))
    simulate_deployment(cfg.with_(adapters=AdapterSet(count=2, max_loras=1)), spec, Layout(replicas=1))
    pool = PoolLayout(instances=1, gpu=cfg.gpu, tp=cfg.tp, pp=1)
    simulate_deployment(cfg, spec, Layout(mode="disaggregated", prefill=pool, decode=pool))
    simulate_sessions(cfg, Sessions(num_sessions=2))


def _prefix_tokens(dep: Deployment, spec: SimSpec, pool) -> Callable[[int], int] | None:
    if spec.prefix_cache_frac <= 0 or pool.slide_share > 0:
        return None
    frac = spec.prefix_cache_frac

    def tokens(i: int) -> int:
        return prefix_hit_tokens(frac, i)

    return tokens


def _aggregated(dep, spec, layout, budget, timing, loop="auto") -> DeploymentResult:
    sm, tm = replica_timing(dep, spec, timing)
    pool = kv_pool(dep, spec)
    R = layout.replicas
    draws = Draws(spec, np.random.default_rng(spec.seed))
    prefix = _prefix_tokens(dep, spec, pool)
    ad = adapter_draws(dep, spec)
    fast = None
    why = compiled.ASKED if loop == "python" else None
    why = why or compiled.fallback_reason(spec, tm, pool, R, layout.router, adapters=ad, extended=True)
    if why is None:
        # the compiled loop: the same records as the Python one (tests/test_compiled_loop.py), faster
        fast = compiled.run(
            spec,
            tm,
            pool,
            draws,
            R,
            layout.router,
            spec.seed,
            budget,
            shared=prefix is not None,
            lora=replica_adapters(dep, ad),
        )
        if fast is None:
            why = compiled.PAST_TABLE
    if fast is not None:
        parts = fast[0]
        merged = compiled.merged(parts, fast[1])
    elif R == 1 and prefix is None:
        # one replica and nothing to route: the one-replica loop itself (the same records, without the deployment's
        # event heap; tests/test_cluster.py holds the two to the byte)
        merged = Engine(spec, tm, pool, draws, replica_adapters(dep, ad)).run(budget)
        parts = [merged]
    else:
        load = [0] * R
        lora = _lora(dep, ad)
        front = []
        for k in range(R):  # a search may ask for tens of thousands of replicas: building them counts as work
            if budget is not None and k % 256 == 0:
                budget.check(0)
            front.append(Replica(k, spec, tm, pool, draws, load, lora=lora))
        policy = make_policy(layout.router, R, spec.seed, _slots(dep))
        rs = ReplicaSet(spec, draws, policy, front, prefix_tokens=prefix, adapters=ad)
        rs.run(budget)
        merged, parts, _ = rs.records()
    one = max_throughput(dep, spec, pool=pool, sm=sm)
    cap = one.model_copy(
        update={"requests_per_s": R * one.requests_per_s, "output_tokens_per_s": R * one.output_tokens_per_s}
    )
    res = result_of(
        spec, merged, cap, int(pool.blocks * pool.block), tm.exact_shape, one.residence_s, front_end=dep.assumptions
    )
    res = replace(res, loop="compiled" if fast is not None else "python", fallback_reason=why)
    return _with_stats(res, layout, [with_front_end(p, dep.assumptions) for p in parts], ["replica"] * R, R)


def _lora(dep: Deployment, ad: AdapterDraws | None) -> Callable[[list[int]], Adapters | None] | None:
    """How each replica of ``dep`` builds its adapter slots from the deployment's numbers of its requests."""
    if ad is None:
        return None
    return lambda gids: replica_adapters(dep, ad, gids)


def _slots(dep: Deployment) -> int:
    """The engine's adapter slots per replica (``max_loras``; 1 without adapters)."""
    a = dep.config.adapters
    return a.slots(dep.config.workload.engine) if a.enabled else 1


def _with_stats(res: SimResult, layout: Layout, parts: list[Records], kinds: list[str], front: int, **extra):
    s = res.summary
    ts = res.ts_s
    span = float(ts[-1] - ts[0]) if ts.size > 1 else 0.0
    arr = res.arrival_s
    period = float(arr.max() - arr.min()) if arr.size > 1 else 0.0
    stats = tuple(
        _replica_stats(k if p != "decode" else k - front, p, rec, span, period, p == "replica")
        for k, (p, rec) in enumerate(zip(kinds, parts))
    )
    counts = np.array([r.requests for r in stats[:front]], dtype=float)
    imbalance = float(counts.max() / counts.mean()) if counts.size and counts.mean() > 0 else 1.0
    rate = s.arrival_rate_per_s if spec_rate(res.spec) is None else spec_rate(res.spec)
    return DeploymentResult(
        layout=layout,
        result=res,
        replicas=stats,
        per_replica_rate_per_s=(rate or 0.0) / front,
        load_imbalance=imbalance,
        **extra,
    )


def _disaggregated_python(spec, pspec, timings, pools, draws, layout, deps, ad, wire, prefix, budget):
    """The disaggregated deployment on the Python loop (:class:`core.serving.sim.replicas.ReplicaSet`): its
    records, each engine's and each request's KV transfer time; ``wire``: (prompt tokens, prefill time) -> wire time,
    and the fixed setup + latency of a transfer."""
    (ptm, dtm), (ppool, dpool), (pdep, ddep) = timings, pools, deps
    P, D = layout.prefill, layout.decode
    pload, dload = [0] * P.instances, [0] * D.instances
    front, back = [], []
    for k in range(P.instances + D.instances):  # building tens of thousands of instances counts as work
        if budget is not None and k % 256 == 0:
            budget.check(0)
        if k < P.instances:
            front.append(Replica(k, pspec, ptm, ppool, draws, pload, hold_kv=True, lora=_lora(pdep, ad)))
        else:
            j = k - P.instances
            back.append(Replica(j, spec, dtm, dpool, draws, dload, remote_kv=True, lora=_lora(ddep, ad)))
    back_router = "least-outstanding" if layout.router == "prefix-affinity" else layout.router
    rs = ReplicaSet(
        spec,
        draws,
        make_policy(layout.router, P.instances, spec.seed, _slots(pdep)),
        front,
        back,
        make_policy(back_router, D.instances, spec.seed + 1, _slots(ddep)),
        Transfers(P.instances, *wire),
        prefix_tokens=prefix,
        adapters=ad,
    )
    rs.run(budget)
    return rs.records()


def spec_rate(spec: SimSpec) -> float | None:
    """The offered rate [requests/s] of a Poisson workload (None for a closed loop)."""
    return spec.rate_per_s if spec.arrival == "poisson" else None


def _disaggregated(dep, spec, layout, budget, timing, loop="auto") -> DeploymentResult:
    assert layout.prefill is not None and layout.decode is not None
    P, D = layout.prefill, layout.decode
    pdep, ddep = pool_deployment(dep, P.gpu, P.tp), pool_deployment(dep, D.gpu, D.tp)
    pspec = spec.with_(output=Lengths(kind="fixed", mean=1), trace=None) if spec.trace is None else spec
    if spec.trace is not None:
        pspec = spec.with_(trace=tuple((a, 1) for a, _ in spec.trace))
    _, ptm = replica_timing(pdep, pspec, timing)
    dsm, dtm = replica_timing(ddep, spec, timing)
    ppool, dpool = kv_pool(pdep, pspec), kv_pool(ddep, spec)
    draws = Draws(spec, np.random.default_rng(spec.seed))
    ad = adapter_draws(dep, spec)
    a = dep.config.assumptions
    path: KvPath = kv_path(pdep.gpu, ddep.gpu, P.tp * P.pp, D.tp * D.pp, dep.fabric)
    k_p = serving_memory(pdep, NO_TRACE).kv_bytes_per_token_per_gpu
    k_d = serving_memory(ddep, NO_TRACE).kv_bytes_per_token_per_gpu
    fixed = a.kv_transfer_setup_us * 1e-6 + path.latency_s
    stage_layers = max(1, dep.model.num_layers // max(P.pp, 1))

    def wire(tokens: int, prefill_s: float) -> float:
        w = kv_transfer_s(tokens, k_p, k_d, path.bw_bytes_per_s, 0.0, a.kv_transfer_eff, 0.0)
        return w * wire_share(w, prefill_s, stage_layers, layout.overlap)

    prefix = _prefix_tokens(dep, spec, ppool)
    fast = None
    why = compiled.ASKED if loop == "python" else None
    n = P.instances + D.instances
    why = why or compiled_disagg.fallback_reason(
        spec, ptm, dtm, ppool, dpool, n, layout.router, adapters=ad, prefix=prefix
    )
    if why is None:
        # the compiled loop: the same records as the Python one (tests/test_compiled_disagg.py), faster
        k_max = max(k_p, k_d)
        kw = KvWire(k_max, path.bw_bytes_per_s * a.kv_transfer_eff, stage_layers, layout.overlap, fixed)
        fast = compiled_disagg.run(spec, ptm, dtm, ppool, dpool, draws, P.instances, D.instances, layout.router, spec.seed, kw, budget, shared=prefix is not None)  # fmt: skip
        if fast is None:
            why = compiled.PAST_TABLE
    if fast is not None:
        merged, parts, kv = fast
    else:
        merged, parts, kv = _disaggregated_python(spec, pspec, (ptm, dtm), (ppool, dpool), draws, layout, (pdep, ddep), ad, (wire, fixed), prefix, budget)  # fmt: skip
    c_p = max_throughput(pdep, pspec, pool=ppool).requests_per_s
    c_d = decode_capacity(dsm, dpool, spec)
    rps = min(P.instances * c_p, D.instances * c_d)
    _, o_mean = spec.mean_lengths()
    cap = Capacity(
        batch=0,
        requests_per_s=rps,
        output_tokens_per_s=rps * o_mean,
        iteration_s=0.0,
        limited_by="prefill pool" if P.instances * c_p <= D.instances * c_d else "decode pool",
    )
    res = result_of(
        spec,
        merged,
        cap,
        int(dpool.blocks * dpool.block),
        ptm.exact_shape and dtm.exact_shape,
        front_end=dep.assumptions,
    )
    res = replace(res, loop="compiled" if fast is not None else "python", fallback_reason=why)
    done = res.status == DONE
    kv_done = kv[done]
    ttft = res.samples("ttft_s")
    share = float(np.nanmean(kv_done) / ttft.mean()) if ttft.size and np.isfinite(kv_done).any() else None
    n_p = P.instances
    ts = res.ts_s
    span = float(ts[-1] - ts[0]) if ts.size > 1 else 0.0

    def pool_stats(lay: PoolLayout, recs: list[Records]) -> PoolStats:
        q = [
            np.frombuffer(r.admitted_s, dtype=float)[m] - np.frombuffer(r.arrival_s, dtype=float)[m]
            for r in recs
            if (m := np.frombuffer(r.status, dtype=np.int8) == DONE).any()
        ]
        return PoolStats(
            instances=lay.instances,
            gpu=lay.gpu,
            tp=lay.tp,
            pp=lay.pp,
            utilization=float(np.mean([r.busy_s for r in recs])) / span if span > 0 else 0.0,
            queue_s=Percentiles.of(np.concatenate(q) if q else np.zeros(0)),
            requests=sum(len(r.arrival_s) for r in recs),
        )

    return _with_stats(
        res,
        layout,
        parts,
        ["prefill"] * n_p + ["decode"] * D.instances,
        n_p,
        kv_transfer_s=Percentiles.of(kv_done[np.isfinite(kv_done)]),
        kv_transfer_share_of_ttft=share,
        pools={"prefill": pool_stats(P, parts[:n_p]), "decode": pool_stats(D, parts[n_p:])},
        kv_path=path.name,
    )
