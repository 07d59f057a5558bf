"""The optimizer's disaggregated layouts and the screen's shared pieces (:mod:`core.decision.optimizer` uses them):
each prefill and decode pool's closed-form capacity, the pairings of pool shapes per precision into candidates, a
candidate with its pool counts, and the largest batch a decode step may hold within the ITL target."""

from __future__ import annotations

import math
from collections.abc import Callable

from core import catalog
from core.base import NO_TRACE
from core.config import Deployment, Lengths, RabitConfig, SimSpec
from core.decision.goal import (
    SCREEN_UTILISATION,
    Candidate,
    Constraints,
    PoolChoice,
    ServingGoal,
    candidate_deployment,
)
from core.physics import StepModel, serving_memory
from core.serving import (
    chunked_prompt_s,
    decode_capacity,
    kv_path,
    kv_transfer_s,
    max_throughput,
    prompt_chunks,
    speculative,
)

__all__ = [
    "DISAGG_ITL_SHARE",
    "DISAGG_MIN_DECODE_BATCH",
    "DISAGG_POOL_OPTIONS",
    "decode_batches",
    "SCREEN_ITL_SHARE",
    "batch_1_latencies",
    "disagg_candidates",
    "formula_input",
    "itl_batch",
    "pool_capacities",
    "with_pools",
]

#: Share of the ITL target the screen's decode step may use (the rest is left for prefill interference).
SCREEN_ITL_SHARE = 0.8
#: The same share for a disaggregated decode pool: its iterations carry no prompts (only each request's last prompt
#: token), so almost all of the target is the decode step's.
DISAGG_ITL_SHARE = 0.95
#: Pool shapes paired per precision into disaggregated layouts: the cheapest per request/s of each role.
DISAGG_POOL_OPTIONS = 3
#: The smallest decode-pool batch cap (``max_num_seqs``) the search weighs: each decode shape is tried at the largest
#: batch the ITL target allows and at that cap halved down to this one. The closed form's decode capacity grows with
#: the batch, but a full decode batch also holds each sequence longer, so a smaller cap on more instances can be the
#: cheaper layout once simulated; the halvings of the engine's cap are the same for every target, so a looser target
#: is offered every decode pool a tighter one is (its own ITL-bound batch aside), and the cheapest disaggregated
#: layout of a looser question never costs more for want of a candidate.
DISAGG_MIN_DECODE_BATCH = 16


def itl_batch(sm: StepModel, context: float, itl_target: float | None, cap: int) -> int:
    """Largest batch whose decode step at ``context`` stays within SCREEN_ITL_SHARE of the ITL target."""
    if itl_target is None:
        return cap
    limit = SCREEN_ITL_SHARE * itl_target
    lo, hi = 1, cap
    if float(sm.pipelined_s(1, context, context)) > limit:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if float(sm.pipelined_s(mid, mid * context, mid * context)) <= limit:  # pp micro-batches in flight
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_batches(itl_bound: int, cap: int) -> tuple[int, ...]:
    """The decode-pool batch caps weighed for one shape, largest first: ``itl_bound`` (the largest batch the ITL
    target allows, ``cap`` without one) and the engine's ``cap`` halved while at least
    :data:`DISAGG_MIN_DECODE_BATCH` and below ``itl_bound``: with ``cap`` 256 and no target (256, 128, 64, 32, 16);
    with a target that allows 65, (65, 64, 32, 16)."""
    if itl_bound < 1:
        return ()
    out = [itl_bound]
    b = cap
    while b >= DISAGG_MIN_DECODE_BATCH:
        if b < itl_bound:
            out.append(b)
        b //= 2
    return tuple(out)


def formula_input(dep: Deployment) -> RabitConfig:
    """What the serving formulas take of a resolved candidate: its config (they resolve it once more) until they
    take the deployment itself."""
    return dep.config


def pool_capacities(goal: ServingGoal, dep: Deployment, sm: StepModel, pool, spec: SimSpec, ctx: float) -> dict:
    """One instance of this shape as a prefill pool (one-token requests at its token budget) and as a decode pool
    (decodes at the largest batch whose step fits :data:`DISAGG_ITL_SHARE` of the ITL target, and at each smaller
    batch cap of :func:`decode_batches`), closed form."""
    one = spec.with_(output=Lengths(kind="fixed", mean=1))
    pf = max_throughput(formula_input(dep), one, pool=pool, sm=sm).requests_per_s
    itl = goal.p95_itl_s * DISAGG_ITL_SHARE / SCREEN_ITL_SHARE if goal.p95_itl_s is not None else None
    batches = decode_batches(itl_batch(sm, ctx, itl, spec.max_batch), spec.max_batch)
    if not batches:
        return {"prefill_capacity_rps": pf}
    options = tuple(
        (b, decode_capacity(sm, pool, spec.with_(max_batch=b, token_budget=max(spec.token_budget, b)))) for b in batches
    )
    b, dc = options[0]
    return {"prefill_capacity_rps": pf, "decode_capacity_rps": dc, "decode_batch": b, "decode_options": options}


def _per_kind(ranked: list[Candidate]) -> list[Candidate]:
    """The :data:`DISAGG_POOL_OPTIONS` first of each GPU kind, in the ranking's order."""
    seen: dict[str, int] = {}
    out = []
    for c in ranked:
        if seen.get(c.gpu, 0) < DISAGG_POOL_OPTIONS:
            seen[c.gpu] = seen.get(c.gpu, 0) + 1
            out.append(c)
    return out


def disagg_candidates(goal: ServingGoal, cons: Constraints, cands: list[Candidate]) -> list[Candidate]:
    """Disaggregated layouts from the screened shapes, in closed form: per weight and KV format, the
    :data:`DISAGG_POOL_OPTIONS` cheapest shapes per request/s as a prefill pool (their batch-1 TTFT within the
    target) paired with the cheapest as a decode pool (their decode step within the ITL target); each pool sized
    at :data:`SCREEN_UTILISATION`; the TTFT estimate is the prefill instance's batch-1 TTFT, the prompt's KV
    transfer (:func:`core.serving.kv_transfer_s`) and one decode step. Pairs whose estimate misses a target or
    that break a hard constraint are dropped. The pools are shapes with plain attention (data-parallel attention
    and context parallelism are searched as replicas)."""
    if not cons.disagg or goal.workload.trace is not None:
        return []
    out: list[Candidate] = []
    formats = sorted({(c.weights, c.kv_dtype) for c in cands})
    deps: dict = {}

    def dep_of(c: Candidate) -> Deployment:
        key = c.shape() + (c.ep,)
        if key not in deps:
            deps[key] = candidate_deployment(goal, c)
        return deps[key]

    for w, kv in formats:
        pre, dec = _pool_shapes(goal, cons, cands, w, kv)
        for p in pre:
            for d in dec:
                if _pair_allowed(cons, p, d) and (pair := _paired(goal, cons, p, d, dep_of)) is not None:
                    out.append(pair)
    return out


def _usd(c: Candidate) -> float:
    return c.gpus_per_replica * (c.usd_per_gpu_hour or 0.0)


def _pool_shapes(
    goal: ServingGoal, cons: Constraints, cands: list[Candidate], w: str, kv: str
) -> tuple[list[Candidate], list[Candidate]]:
    """(prefill shapes, decode shapes) of one weight and KV format, cheapest per request/s first: the prefill
    shapes within the TTFT target at batch 1, each decode shape at each of its batch caps; the pools' kinds when the
    run names them, every kind's cheapest when pairs across kinds are the point, else the
    :data:`DISAGG_POOL_OPTIONS` cheapest."""
    # a pool's instances run plain attention (a pool layout names TP, PP and EP only)
    mine = [
        c
        for c in cands
        if (c.weights, c.kv_dtype) == (w, kv) and c.usd_per_gpu_hour is not None and not c.attention_label
    ]
    pre = [
        c
        for c in mine
        if c.prefill_capacity_rps and (goal.p95_ttft_s is None or (c.batch_1_ttft_s or 0) <= goal.p95_ttft_s)
    ]
    dec = [c for c in mine if c.decode_capacity_rps]
    pre = sorted(pre, key=lambda c: (_usd(c) / (c.prefill_capacity_rps or 1), c.gpus_per_replica))
    dec = sorted(dec, key=lambda c: (_usd(c) / (c.decode_capacity_rps or 1), c.gpus_per_replica))
    if cons.pool_kinds is not None:
        pre = [c for c in pre if c.gpu == cons.pool_kinds[0]]
        dec = [c for c in dec if c.gpu == cons.pool_kinds[1]]
    if cons.mixed_pools:  # the cheapest shapes of every kind: the pairs across kinds are the point
        pre, dec = _per_kind(pre), _per_kind(dec)
    else:
        pre, dec = pre[:DISAGG_POOL_OPTIONS], dec[:DISAGG_POOL_OPTIONS]
    # each decode shape at each of its batch caps (the largest the ITL target allows first)
    dec = [
        d.model_copy(update={"decode_batch": b, "decode_capacity_rps": cap})
        for d in dec
        for b, cap in (d.decode_options or ((d.decode_batch, d.decode_capacity_rps),))
    ]
    return pre, dec


def _pair_allowed(cons: Constraints, p: Candidate, d: Candidate) -> bool:
    """Whether a prefill and a decode shape may pair: one vendor's runtime, the kinds and the pool layouts the run
    asks for."""
    if catalog.kv_pool_refusal(catalog.gpu(p.gpu), catalog.gpu(d.gpu)):
        return False  # no engine moves a KV cache across vendors' runtimes
    if (cons.mixed_pools and p.gpu == d.gpu) or (cons.pool_kinds is not None and cons.pool_kinds != (p.gpu, d.gpu)):
        return False
    return cons.pools_allowed is None or cons.pools_allowed == (
        (p.gpus_per_replica, p.tp, p.pp, p.ep),
        (d.gpus_per_replica, d.tp, d.pp, d.ep),
    )


def _paired(
    goal: ServingGoal, cons: Constraints, p: Candidate, d: Candidate, dep_of: Callable[[Candidate], Deployment]
) -> Candidate | None:
    """The two pools sized at :data:`SCREEN_UTILISATION` of the rate, with the TTFT estimate (batch-1 prefill, the
    prompt's KV transfer, one decode step); None when it misses a target or breaks a hard constraint."""
    rate = goal.rate_per_s
    i_mean, o_mean = goal.workload.mean_lengths()
    a = goal.assumptions
    P = max(1, math.ceil(rate / ((p.prefill_capacity_rps or 1) * SCREEN_UTILISATION)))
    D = max(1, math.ceil(rate / ((d.decode_capacity_rps or 1) * SCREEN_UTILISATION)))
    dp, dd = dep_of(p), dep_of(d)
    path = kv_path(dp.gpu, dd.gpu, p.gpus_per_replica, d.gpus_per_replica, dd.fabric)
    x = kv_transfer_s(
        i_mean,
        serving_memory(dp, NO_TRACE).kv_bytes_per_token_per_gpu,
        serving_memory(dd, NO_TRACE).kv_bytes_per_token_per_gpu,
        path.bw_bytes_per_s,
        path.latency_s,
        a.kv_transfer_eff,
        a.kv_transfer_setup_us * 1e-6,
    )
    ttft = (p.batch_1_ttft_s or 0.0) + x + (d.batch_1_itl_s or 0.0)
    itl = d.batch_1_itl_s or 0.0
    if goal.p95_ttft_s is not None and ttft > goal.p95_ttft_s:
        return None
    if goal.p95_e2e_s is not None and ttft + (o_mean - 1) * itl > goal.p95_e2e_s:
        return None
    pool_p = _pool(p, "prefill", P, p.prefill_capacity_rps or 0.0, goal.workload.max_batch)
    pool_d = _pool(d, "decode", D, d.decode_capacity_rps or 0.0, d.decode_batch or 1)
    cost = pool_p.cost_per_hour + pool_d.cost_per_hour
    gpus = P * p.gpus_per_replica + D * d.gpus_per_replica
    if (cons.max_gpus is not None and gpus > cons.max_gpus) or (
        cons.max_usd_per_hour is not None and cost > cons.max_usd_per_hour
    ):
        return None
    return d.model_copy(
        update={
            "mode": "disaggregated",
            "prefill": pool_p,
            "decode": pool_d,
            "replicas": P + D,
            "cost_per_hour": cost,
            "screen_batch": d.decode_batch,
            "capacity_per_replica_rps": min(P * pool_p.capacity_per_instance_rps, D * pool_d.capacity_per_instance_rps)
            / (P + D),
            "batch_1_ttft_s": ttft,
            "pruned": "",
            "price_unverified": p.price_unverified or d.price_unverified,
        }
    )


def _pool(c: Candidate, role: str, n: int, cap: float, max_seqs: int) -> PoolChoice:
    return PoolChoice(
        role=role,
        instances=n,
        gpu=c.gpu,
        gpus_per_instance=c.gpus_per_replica,
        tp=c.tp,
        pp=c.pp,
        ep=c.ep,
        usd_per_gpu_hour=c.usd_per_gpu_hour or 0.0,
        capacity_per_instance_rps=cap,
        max_num_seqs=max_seqs,
    )


def with_pools(c: Candidate, prefill: int, decode: int) -> Candidate:
    """A disaggregated candidate with other instance counts (its cost and capacity follow)."""
    assert c.prefill is not None and c.decode is not None
    p = c.prefill.model_copy(update={"instances": prefill})
    d = c.decode.model_copy(update={"instances": decode})
    n = prefill + decode
    return c.model_copy(
        update={
            "prefill": p,
            "decode": d,
            "replicas": n,
            "cost_per_hour": p.cost_per_hour + d.cost_per_hour,
            "capacity_per_replica_rps": min(prefill * p.capacity_per_instance_rps, decode * d.capacity_per_instance_rps)
            / n,
        }
    )


def batch_1_latencies(dep: Deployment, sm: StepModel, i_mean: float, o_mean: float) -> tuple[float, float]:
    """(time to the first token, time between tokens) [s] of one request alone at the mean lengths.

    The first token prefills the prompt's ``I - c`` tokens past its cached prefix ``c = floor(f_c I)``
    (``prefix_cache_frac``), attending ``I (I + 1) / 2 - c (c + 1) / 2`` (query, key) pairs and reading the
    ``c`` cached tokens; a decode step runs at the mean context ``I + O / 2``, or, with speculative decoding,
    a draft-and-verify round per the ``E`` tokens it yields (``round_s / E``).
    """
    I = max(1, round(i_mean))
    c = math.floor(dep.config.prefix_cache_frac * I)  # < I because the share is < 1
    R = float(sm.kv_read_tokens(c)) if c else 0
    chunk = dep.config.workload.token_budget
    if I - c > chunk:  # a prompt longer than the token budget is prefilled chunk by chunk (core.serving.speed)
        ttft = float(chunked_prompt_s(sm, prompt_chunks(sm, c, I, chunk)))
    else:
        ttft = float(sm.iteration_s(I - c, I * (I + 1) / 2 - c * (c + 1) / 2, R, 1))
    ctx = i_mean + o_mean / 2
    spec = speculative(formula_input(dep)) if dep.config.spec_method != "none" else None
    itl = spec.round_s / spec.tokens_per_pass if spec is not None else float(sm.iteration_s(1, ctx, ctx))
    return ttft, itl
