"""Optimizer: the cheapest configuration that meets a serving target, the Pareto front, and why.

Search (the RA-BIT spec "Search, Pareto front and market prices")::

    enumerate  GPU x GPUs per replica x (TP, PP, EP, attention parallelism) x weight format x KV precision
    prune      no price, does not validate, no room for a KV cache, misses a target even at batch 1,
               breaks a hard constraint (GPU kinds, max GPUs, max $/h, precisions, providers)
    screen     closed form: the largest batch whose decode step meets the ITL target, the replica's
               saturation throughput there (core.serving.simulation.max_throughput), replicas = ceil(rate / (cap x rho))
    simulate   at most ``max_simulations`` runs of the serving simulator (with the screen's batch cap as the
               engine's max_num_seqs), cheapest estimate first; replicas are sized from the simulated p95s
               in both directions: a candidate that misses gets more replicas, one that meets is bisected
               down towards the fewest replicas that can carry the rate at all, ceil(rate / cap)
    recommend  the cheapest simulated configuration that meets every target; the Pareto front on
               ($/h, p95 end-to-end, capacity) over the simulated ones

Each candidate is resolved once (:func:`core.decision.goal.candidate_deployment`: the shared config's settings
with the candidate's GPU kind, layout and precisions) and that deployment goes to every formula of its screen.

Branch and bound: a candidate is only simulated while its lower bound, ceil(rate / cap) replicas at full
utilisation, costs less than the cheapest verified cost of its own mode, aggregated or disaggregated (no replica
count below that bound keeps up, so no simulation can verify anything cheaper). Each mode is bounded by its own
cheapest, so the disaggregation verdict sets the cheapest of each that meets the same targets side by side, not
the pick against whichever layout of the other mode happened to be simulated. Simulations left over go to the cheapest candidate of each other GPU
kind, which feeds the alternatives and the Pareto front.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from core import catalog
from core.base import Assumptions, WorkBudget, fmt_latency, search_budget, sig
from core.catalog import GpuPrice, Price, gpu_price, unpriced
from core.config import Deployment, SimSpec, problems
from core.decision.disagg_search import (
    SCREEN_ITL_SHARE,
    batch_1_latencies,
    disagg_candidates,
    formula_input,
    itl_batch,
    pool_capacities,
)
from core.decision.explain import Explanation, explain
from core.decision.goal import (
    _F,
    SCREEN_SLOT_WAIT_SHARE,
    SCREEN_UTILISATION,
    Candidate,
    Constraints,
    Pick,
    ServingGoal,
    candidate_deployment,
    meets,
    worst_ratio,
)
from core.decision.session_sizing import simulate_session_candidate
from core.decision.sim_rounds import SimRounds
from core.physics import StepModel, kv_shard
from core.serving import (
    Layout,
    PoolLayout,
    effective_adapters,
    kv_pool,
    max_throughput,
    replica_scheduler,
    simulate_deployment,
)


class Recommendation(_F):
    goal: ServingGoal
    constraints: Constraints
    met: bool
    recommendation: Pick | None  # the cheapest that meets; None when nothing does
    nearest: Pick | None  # when nothing meets: the closest simulated option
    pareto: tuple[Pick, ...]
    explanation: Explanation
    candidates: tuple[Candidate, ...]
    evaluated: int
    simulated: int
    unpriced: tuple[str, ...] = ()  # GPU kinds searched for but with no price of the requested kind


# --- helpers -------------------------------------------------------------------------------------------


def _replica_layouts(gpu: catalog.GpuSpec, arch: catalog.ModelArch) -> list[tuple[int, int, int]]:
    """(GPUs per replica, TP, PP): TP inside the scale-up domain and dividing the heads; PP across nodes."""
    domain = gpu.scale_up_domain
    out = []
    for g in (1, 2, 4, 8, 16, 32):
        for tp in (1, 2, 4, 8, 16, 32):
            if g % tp or tp > domain or not arch.splits_heads(tp):
                continue
            pp = g // tp
            if pp > 1 and tp < min(g, domain):  # only pipeline when TP already fills the domain
                continue
            if pp > 4 or pp > arch.num_layers:
                continue
            out.append((g, tp, pp))
    return out


def _with_expert_parallel(arch, layouts: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Each layout with EP 1 and, for a MoE model, also with expert parallelism over its TP ranks.

    With EP the routed experts are spread whole over the ``tp`` GPUs of a stage (vLLM
    ``--enable-expert-parallel``: EP size = TP x DP, docs.vllm.ai "Expert Parallel Deployment"; SGLang
    ``--ep-size``; TensorRT-LLM ``moe_expert_parallel_size``) instead of every expert being split ``tp`` ways:
    each GPU reads whole experts, and each MoE layer adds a dispatch and a combine all-to-all over the
    fabric (:class:`core.physics.collectives.Collectives`, the same costs training EP uses). EP must divide the experts.
    """
    out = []
    for n, tp, pp in layouts:
        out.append((n, tp, pp, 1))
        if arch.is_moe and tp > 1 and arch.num_experts % tp == 0:
            out.append((n, tp, pp, tp))
    return out


#: Prompts at least this long also try context parallelism (ring attention over 2 and 4 TP groups): below it a
#: prefill is short enough that splitting it buys less than the ring and the extra GPUs cost.
CP_MIN_PROMPT_TOKENS = 32_768


def _with_attention_parallel(
    arch, layouts: list[tuple[int, int, int, int]], prompt_tokens: float, pin: tuple[bool, int, int] | None = None
) -> list[tuple[int, int, int, int, bool, int, int]]:
    """Each layout with plain attention and, where they help, its attention-parallel variants:
    ``(GPUs per replica, TP, PP, EP, DP attention, CP, DCP)``.

    * data-parallel attention for an MLA model at TP > 1 (its latent is not split by TP), with expert parallelism
      over the TP ranks for a MoE model (SGLang ``--enable-dp-attention``; vLLM ``--data-parallel-size`` with
      ``--enable-expert-parallel``, docs.vllm.ai "Data Parallel Deployment");
    * decode context parallelism where TP replicates the KV (MLA, or more TP ranks than KV heads): the tokens split
      over the replicas instead (vLLM ``--decode-context-parallel-size``);
    * context parallelism over 2 and 4 TP groups for prompts of :data:`CP_MIN_PROMPT_TOKENS` and more, one stage.

    ``pin`` (the settings' own DP attention, CP and DCP when any is set: ``rabit recommend --dp-attention``, ``--cp``,
    ``--dcp``): only that attention layout, on every replica layout.
    """
    if pin is not None:
        dpa, cp, dcp = pin
        return [(n * cp, tp, pp, ep, dpa, cp, dcp) for n, tp, pp, ep in layouts]
    out = []
    for n, tp, pp, ep in layouts:
        out.append((n, tp, pp, ep, False, 1, 1))
        if tp > 1 and arch.is_mla and (not arch.is_moe or ep == tp or arch.num_experts % tp):
            out.append((n, tp, pp, ep, True, 1, 1))
        shard = kv_shard(arch, tp)
        if tp > shard and (ep == 1 or ep == tp):
            out.append((n, tp, pp, ep, False, 1, tp // shard))
        if prompt_tokens >= CP_MIN_PROMPT_TOKENS and pp == 1 and ep == 1:
            out += [(n * cp, tp, pp, ep, False, cp, 1) for cp in (2, 4)]
    return out


# --- search --------------------------------------------------------------------------------------------


def screen(
    goal: ServingGoal, cons: Constraints, prices: tuple[Price, ...], budget: WorkBudget | None = None
) -> list[Candidate]:
    """Enumerate and screen every configuration in closed form (no simulation); each one is an evaluation
    of ``budget`` (:func:`core.base.limits.search_budget` when None)."""
    budget = budget if budget is not None else search_budget()
    arch = goal.arch()
    spec = goal.workload
    st = goal.settings
    pin = (st.dp_attention, st.cp, st.dcp) if (st.dp_attention or st.cp > 1 or st.dcp > 1) else None
    out: list[Candidate] = []
    for slug, g in sorted(catalog.gpus().items()):
        if cons.gpus_allowed and slug not in cons.gpus_allowed:
            continue
        price: GpuPrice | None = gpu_price(
            slug, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers
        )
        layouts = _with_expert_parallel(arch, _replica_layouts(g, arch))
        if cons.layouts_allowed:  # a plan's robust option keeps the shapes its nominal one picked
            layouts = [lay for lay in layouts if tuple(lay) in cons.layouts_allowed]
        for n, tp, pp, ep, dpa, cp, dcp in _with_attention_parallel(arch, layouts, spec.mean_lengths()[0], pin):
            for w in cons.weights_allowed:
                if w == "nvfp4" and not g.supports("fp4"):
                    continue
                for kv in cons.kv_allowed:
                    c = Candidate(
                        gpu=slug,
                        gpus_per_replica=n,
                        tp=tp,
                        pp=pp,
                        ep=ep,
                        dp_attention=dpa,
                        cp=cp,
                        dcp=dcp,
                        weights=w,
                        kv_dtype=kv,
                        usd_per_gpu_hour=price.usd_per_gpu_hour if price else None,
                        price_basis=price.basis if price else "",
                        price_unverified=bool(price and any(r.verification == "U" for r in price.rows)),
                    )
                    out.append(screen_candidate(goal, cons, c, price, spec))
                    budget.tick()
    return out


def screen_candidate(
    goal: ServingGoal,
    cons: Constraints,
    c: Candidate,
    price: GpuPrice | None,
    spec: SimSpec | None = None,
    dep: Deployment | None = None,
) -> Candidate:
    """One candidate in closed form: pruned (no price, a hard constraint, does not validate or fit, misses a
    target even at batch 1), or sized (the screen's batch cap, the capacity there, the replicas and their cost).

    The candidate is resolved once (``dep``, :func:`core.decision.goal.candidate_deployment` when None) and that
    deployment goes to the field checks, the KV pool, the step model and the capacity. Batch 1: the time to the
    first token prefills the prompt past the config's cached prefix share; with speculative decoding the time
    between tokens is a draft-and-verify round over the tokens it yields (:func:`core.serving.speculative`). The
    simulation does not model either, so they move the screen's batch-1 figures, not the simulated p95s.
    """
    spec = spec if spec is not None else goal.workload
    if price is None:
        return c.model_copy(update={"pruned": f"no {cons.price_kind} price for {c.gpu}"})
    if cons.max_gpus is not None and c.gpus_per_replica > cons.max_gpus:
        return c.model_copy(update={"pruned": f"one replica needs {c.gpus_per_replica} GPUs > max {cons.max_gpus}"})
    a = goal.settings.adapters
    if a.enabled and a.max_loras is None and not c.adapter_slots:
        return _screen_slots(goal, cons, c, price, spec)
    return _screen_at(goal, cons, c, price, spec, dep)


#: The adapter slots (max_loras) the screen tries: powers of two up to the adapters served, and all of them.
SLOT_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def slot_choices(count: int) -> tuple[int, ...]:
    """The ``max_loras`` values the search weighs for ``count`` adapters: the grid below it, and ``count``."""
    return tuple(k for k in SLOT_GRID if k < count) + (count,)


def _screen_slots(goal: ServingGoal, cons: Constraints, c: Candidate, price: GpuPrice, spec: SimSpec) -> Candidate:
    """The screen with ``max_loras`` searched: the fewest slots whose mean wait for a slot
    (:func:`core.serving.simulation.adapter_sessions`, at the capacity's residence time) stays within
    :data:`SCREEN_SLOT_WAIT_SHARE` of the latency target; more slots only take KV memory and add reads. Without a
    latency target, every adapter gets a slot."""
    a = goal.settings.adapters
    grid = slot_choices(a.count)
    target = goal.p95_ttft_s if goal.p95_ttft_s is not None else goal.p95_e2e_s
    if target is None:
        return _screen_at(goal, cons, c.model_copy(update={"adapter_slots": a.count}), price, spec)
    first = _screen_at(goal, cons, c.model_copy(update={"adapter_slots": min(a.count, 16)}), price, spec)
    if first.pruned and first.capacity_per_replica_rps is None:
        return first
    t_r = (first.screen_batch or 1) / first.capacity_per_replica_rps if first.capacity_per_replica_rps else 0.0
    n_e = effective_adapters(a.popularity())
    limit = SCREEN_SLOT_WAIT_SHARE * target
    want = next((k for k in grid if k >= n_e or t_r * (n_e - k) / k <= limit), a.count)
    if want == first.adapter_slots:
        return first
    for k in (kk for kk in grid if kk >= want):
        r = _screen_at(goal, cons, c.model_copy(update={"adapter_slots": k}), price, spec)
        if not r.pruned.startswith("does not fit"):
            return r
    return first


def _screen_at(
    goal: ServingGoal,
    cons: Constraints,
    c: Candidate,
    price: GpuPrice,
    spec: SimSpec,
    dep: Deployment | None = None,
) -> Candidate:
    """The screen of one candidate as it is (its adapter slots set): see :func:`screen_candidate`."""
    dep = dep if dep is not None else candidate_deployment(goal, c)
    spec = replica_scheduler(spec, dep.config)  # data-parallel attention: the limits are per rank
    blocking = [p for p in problems(dep) if p.blocking]
    if blocking:
        return c.model_copy(update={"pruned": blocking[0].message})
    i_mean, o_mean = spec.mean_lengths()
    try:
        pool = kv_pool(formula_input(dep), spec)
    except ValueError as exc:
        return c.model_copy(update={"pruned": f"does not fit: {exc}"})
    if pool.blocks * pool.block < i_mean + o_mean:
        return c.model_copy(update={"pruned": "does not fit: KV pool smaller than one mean request"})
    sm = StepModel.from_deployment(dep)
    ttft1, itl1 = batch_1_latencies(dep, sm, i_mean, o_mean)
    ctx = i_mean + o_mean / 2
    upd: dict = {"batch_1_ttft_s": ttft1, "batch_1_itl_s": itl1, "bottleneck": sm.bound(1, ctx, ctx)}
    if cons.disagg and spec.trace is None and c.pp == 1 and c.ep == 1:
        upd.update(pool_capacities(goal, dep, sm, pool, spec, ctx))
    misses = []
    if goal.p95_ttft_s is not None and ttft1 > goal.p95_ttft_s:
        misses.append(f"TTFT {sig(ttft1)} s > {sig(goal.p95_ttft_s, 6)} s")
    if goal.p95_itl_s is not None and itl1 > goal.p95_itl_s:
        misses.append(f"ITL {sig(itl1 * 1e3)} ms > {sig(goal.p95_itl_s * 1e3, 6)} ms")
    if goal.p95_e2e_s is not None and ttft1 + (o_mean - 1) * itl1 > goal.p95_e2e_s:
        misses.append(f"end-to-end {sig(ttft1 + (o_mean - 1) * itl1)} s > {sig(goal.p95_e2e_s, 6)} s")
    if misses:
        return c.model_copy(update={**upd, "pruned": "misses the target even at batch 1: " + "; ".join(misses)})
    b_itl = itl_batch(sm, ctx, goal.p95_itl_s, spec.max_batch)
    if goal.p95_e2e_s is not None:
        per_tok = (goal.p95_e2e_s * SCREEN_ITL_SHARE - ttft1) / max(o_mean - 1, 1)
        b_itl = min(b_itl, itl_batch(sm, ctx, per_tok / SCREEN_ITL_SHARE, spec.max_batch) or 1)
    b = max(1, b_itl)
    cap = max_throughput(
        formula_input(dep), spec.with_(max_batch=b, token_budget=max(spec.token_budget, b)), pool=pool, sm=sm
    )
    upd.update(
        screen_batch=cap.batch,
        capacity_per_replica_rps=cap.requests_per_s,
        bottleneck=sm.bound(cap.batch, cap.batch * ctx, cap.batch * ctx),
    )
    return at_rate(c.model_copy(update=upd), goal.rate_per_s, cons, price.usd_per_gpu_hour)


def at_rate(c: Candidate, rate_per_s: float, cons: Constraints, usd_per_gpu_hour: float | None = None) -> Candidate:
    """A screened candidate at an arrival rate: the replicas its capacity needs at :data:`SCREEN_UTILISATION`,
    their cost, and the GPU and cost caps. Everything else the screen finds (the KV pool, the step model, batch
    1, the capacity) does not depend on the rate, so a search that moves only the rate re-prices the screen's rows
    instead of screening again (:func:`_screen_shared`). A candidate pruned before its capacity is known stays as
    it is. ``usd_per_gpu_hour``: the price the screen found (default: the candidate's own)."""
    usd = usd_per_gpu_hour if usd_per_gpu_hour is not None else c.usd_per_gpu_hour
    if c.capacity_per_replica_rps is None or usd is None:
        return c
    replicas = max(1, math.ceil(rate_per_s / (c.capacity_per_replica_rps * SCREEN_UTILISATION)))
    cost = replicas * c.gpus_per_replica * usd
    pruned = ""
    if cons.max_gpus is not None and replicas * c.gpus_per_replica > cons.max_gpus:
        pruned = f"needs about {replicas * c.gpus_per_replica} GPUs > max {cons.max_gpus}"
    elif cons.max_usd_per_hour is not None and cost > cons.max_usd_per_hour:
        pruned = f"about ${cost:,.0f}/h > max ${cons.max_usd_per_hour:,.0f}/h"
    return c.model_copy(update={"replicas": replicas, "cost_per_hour": cost, "pruned": pruned})


def simulate_candidate(
    goal: ServingGoal, c: Candidate, budget: WorkBudget | None = None, dep: Deployment | None = None
) -> Candidate:
    """The candidate's p95s from the serving simulator: its whole deployment (its replicas behind the goal's router,
    or its prefill and decode pools) at the goal's rate, with the screen's batch cap (``dep``: the candidate
    resolved, :func:`core.decision.goal.candidate_deployment` when None); whether it meets the goal."""
    dep = dep if dep is not None else candidate_deployment(goal, c)
    base = replica_scheduler(goal.workload, dep.config)  # data-parallel attention: the limits are per rank
    b = c.screen_batch or base.max_batch
    # the screen's batch cap is the engine's max_num_seqs: simulate with it, so the p95s belong to the
    # configuration the launch config starts
    spec = base.with_(
        arrival="poisson",
        max_batch=b,
        token_budget=max(base.token_budget, b),
    )
    if goal.sessions is not None:
        return simulate_session_candidate(goal, c, dep, spec, budget)
    r = simulate_deployment(
        formula_input(dep), spec, layout_of_candidate(goal, c), budget=budget.child() if budget is not None else None
    )
    s = r.summary
    done = c.model_copy(
        update={
            "simulated": True,
            "p95_ttft_s": s.ttft_s.p95,
            "p95_itl_s": s.itl_s.p95,
            "p95_e2e_s": s.e2e_s.p95,
            "sim_notes": (
                f"{s.completed}/{s.requests} completed, {s.preemptions} preemptions"
                + (" (KV thrash)" if s.thrash else "")
                + (", saturated" if s.saturated else "")
                + f", batch cap {b}"
            ),
        }
    )
    met = meets(done, goal) and not s.saturated and s.rejected == 0
    extra: dict = {"meets": met}
    if r.pools:
        extra.update(
            prefill_busy=r.pools["prefill"].utilization,
            decode_busy=r.pools["decode"].utilization,
            prefill_queue_p95_s=r.pools["prefill"].queue_s.p95,
            decode_queue_p95_s=r.pools["decode"].queue_s.p95,
        )
        kv = r.kv_transfer_s
        extra["sim_notes"] = (
            done.sim_notes
            + (f", KV transfer p95 {fmt_latency(kv.p95)}" if kv is not None and kv.p95 is not None else "")
            + f", prefill busy {extra['prefill_busy']:.0%}, decode busy {extra['decode_busy']:.0%}"
        )
    return done.model_copy(update=extra)


def layout_of_candidate(goal: ServingGoal, c: Candidate) -> Layout:
    """The deployment a candidate describes, behind the goal's router."""
    if c.prefill is not None and c.decode is not None:
        return Layout(
            mode="disaggregated",
            router=goal.router,
            prefill=PoolLayout(instances=c.prefill.instances, gpu=c.prefill.gpu, tp=c.prefill.tp, pp=c.prefill.pp),
            decode=PoolLayout(instances=c.decode.instances, gpu=c.decode.gpu, tp=c.decode.tp, pp=c.decode.pp),
        )
    return Layout(mode="aggregated", router=goal.router, replicas=c.n_replicas)


def pick_of(goal: ServingGoal, c: Candidate) -> Pick:
    """The figures of one simulated candidate the CLI contract names (cost per million output tokens, capacity)."""
    _, o_mean = goal.workload.mean_lengths()
    tokens_per_hour = goal.rate_per_s * o_mean * 3600
    return Pick(
        gpu=c.gpu,
        gpus_per_replica=c.gpus_per_replica,
        tp=c.tp,
        pp=c.pp,
        ep=c.ep,
        dp_attention=c.dp_attention,
        cp=c.cp,
        dcp=c.dcp,
        weights=c.weights,
        kv_dtype=c.kv_dtype,
        replicas=c.replicas or 0,
        cost_per_hour=c.cost_per_hour or 0.0,
        cost_per_million_tokens=(c.cost_per_hour or 0.0) / tokens_per_hour * 1e6,
        p95_ttft_s=c.p95_ttft_s,
        p95_itl_s=c.p95_itl_s,
        p95_e2e_s=c.p95_e2e_s,
        capacity_requests_per_s=(c.replicas or 0) * (c.capacity_per_replica_rps or 0.0),
        bottleneck=c.bottleneck,
        meets_target=bool(c.meets),
        label=c.label,
        max_num_seqs=int(c.screen_batch or goal.workload.max_batch),
        adapter_slots=c.adapter_slots,
        mode=c.mode,
        prefill=c.prefill,
        decode=c.decode,
    )


def pareto(picks: list[Pick]) -> tuple[Pick, ...]:
    """Non-dominated picks: lower cost, lower p95 end-to-end and higher capacity are better."""

    def key(p: Pick) -> tuple[float, float, float]:
        return (p.cost_per_hour, p.p95_e2e_s if p.p95_e2e_s is not None else math.inf, -p.capacity_requests_per_s)

    front = []
    for p in picks:
        kp = key(p)
        dominated = any(all(a <= b for a, b in zip(key(q), kp)) and key(q) != kp for q in picks)
        if not dominated:
            front.append(p)
    return tuple(sorted(front, key=lambda p: p.cost_per_hour))


def recommend(
    goal: ServingGoal,
    cons: Constraints = Constraints(),
    prices: tuple[Price, ...] | None = None,
    progress=None,
    *,
    memo: dict | None = None,
    alternatives: bool = True,
    budget: WorkBudget | None = None,
) -> Recommendation:
    """The cheapest priced configuration that meets ``goal`` under ``cons`` (see the module docstring).

    ``progress``: optional callable ``(done, total, label)`` for a progress bar (called, never stored).
    ``memo``: a dict the caller owns and passes to several calls with the same prices (re-runs at moved
    assumptions): screens per GPU kind and simulations are shared between them. ``alternatives=False`` skips
    the leftover-budget simulations, which feed the alternatives and the Pareto front but never the pick.
    ``budget``: the work budget of the whole search (every screened configuration and every simulation is an
    evaluation; each simulation ends no later than the search); :func:`core.base.limits.search_budget` when None.
    Past it, :class:`core.base.limits.BudgetExceeded` (a ``ValueError``) says what to change.
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else search_budget()
    cands = _candidates(goal, cons, prices, memo, wb)
    survivors = sorted((c for c in cands if not c.pruned), key=lambda c: (c.cost, c.gpus_per_replica))
    rounds = SimRounds(goal, cons, _simulator(goal, memo, wb), progress, wb)
    results = rounds.branch_and_bound(survivors)
    if alternatives:
        rounds.leftover(survivors, results)
    simulated = [results[i] for i in sorted(results)]
    all_cands = [results.get(i, c) for i, c in enumerate(survivors)] + [c for c in cands if c.pruned]
    meeting = sorted((c for c in simulated if c.meets), key=lambda c: c.cost)
    best = meeting[0] if meeting else None
    nearest = None if best is not None else _nearest(goal, simulated, cands)
    no_price, expl = _explained(goal, cons, prices, best, nearest, simulated, all_cands)
    return Recommendation(
        goal=goal,
        constraints=cons,
        met=best is not None,
        unpriced=no_price,
        recommendation=pick_of(goal, best) if best else None,
        nearest=pick_of(goal, nearest) if nearest else None,
        pareto=pareto([pick_of(goal, c) for c in simulated]),
        explanation=expl,
        candidates=tuple(all_cands),
        evaluated=len(cands),
        simulated=rounds.sims,
    )


def _candidates(
    goal: ServingGoal, cons: Constraints, prices: tuple[Price, ...], memo: dict | None, wb: WorkBudget
) -> list[Candidate]:
    """The screened candidates of a search: every aggregated layout, then (request traffic only: the session
    simulator runs aggregated replicas) the disaggregated ones the prefill-capable rows pair into; only the
    disaggregated ones when the constraints name pools."""
    cands = screen(goal, cons, prices, wb) if memo is None else _screen_shared(goal, cons, prices, memo, wb)
    if goal.sessions is None:
        cands = cands + disagg_candidates(goal, cons, [c for c in cands if c.prefill_capacity_rps])
    if cons.pools_allowed is not None or cons.pool_kinds is not None or cons.mixed_pools:
        cands = [c for c in cands if c.mode == "disaggregated"]
    return cands


def _simulator(goal: ServingGoal, memo: dict | None, wb: WorkBudget) -> Callable[[Candidate], Candidate]:
    """How a search simulates one candidate: afresh, or shared through ``memo`` across re-runs (keyed by the goal
    as the candidate's GPU kind sees it, without the collectives' assumptions for a one-GPU replica)."""

    def simulate(c: Candidate) -> Candidate:
        if memo is None:
            return simulate_candidate(goal, c, wb)
        key = ("sim", _goal_for(goal, c.gpu, collectives=c.gpus_per_replica > 1), c)
        return _shared(memo, key, lambda: simulate_candidate(goal, c, wb))

    return simulate


def _nearest(goal: ServingGoal, simulated: list[Candidate], cands: list[Candidate]) -> Candidate | None:
    """When nothing meets: the simulated candidate closest to the targets, or, when nothing was simulated, the
    best batch-1 latency among the priced candidates whose closed form has one (None when none has)."""
    if simulated:
        return min(simulated, key=lambda c: (worst_ratio(c, goal), c.cost))
    o_mean = goal.workload.mean_lengths()[1]
    near = [
        c.model_copy(
            update={
                "p95_ttft_s": c.batch_1_ttft_s,
                "p95_itl_s": c.batch_1_itl_s,
                "p95_e2e_s": c.batch_1_ttft_s + (o_mean - 1) * c.batch_1_itl_s,
                "replicas": c.replicas or 1,
                "cost_per_hour": c.cost_per_hour or (c.gpus_per_replica * (c.usd_per_gpu_hour or 0)),
                "sim_notes": "batch-1 closed form (not simulated)",
            }
        )
        for c in cands
        if c.batch_1_ttft_s is not None and c.batch_1_itl_s is not None and c.usd_per_gpu_hour is not None
    ]
    return min(near, key=lambda c: (worst_ratio(c, goal), c.cost_per_hour or 0.0)) if near else None


def _explained(
    goal: ServingGoal,
    cons: Constraints,
    prices: tuple[Price, ...],
    best: Candidate | None,
    nearest: Candidate | None,
    simulated: list[Candidate],
    all_cands: list[Candidate],
) -> tuple[tuple[str, ...], Explanation]:
    """(the allowed GPU kinds without a price, the search's explanation, which names them as left out)."""
    kinds = tuple(g for g in sorted(catalog.gpus()) if not cons.gpus_allowed or g in cons.gpus_allowed)
    no_price = unpriced(kinds, prices, kind=cons.price_kind, providers=cons.providers)
    expl = explain(goal, cons, best, nearest, simulated, all_cands)
    if no_price:
        left_out = (
            f"no {cons.price_kind} price for {', '.join(no_price)}: left out of the search (add a price row to "
            "include them)"
        )
        expl = expl.model_copy(update={"assumptions": expl.assumptions + (left_out,)})
    return no_price, expl


#: Assumptions only collectives read: a one-GPU replica's simulation does not depend on them.
COLLECTIVE_ASSUMPTIONS = ("comm_bw_eff", "collective_base_us", "comm_overlap")


def _goal_for(goal: ServingGoal, gpu: str, collectives: bool = True) -> ServingGoal:
    """``goal`` as one GPU kind sees it (its assumptions resolved): the key of what it shares across re-runs."""
    a = goal.assumptions_for(gpu)
    if not collectives:
        a = a.with_(**{n: getattr(Assumptions(), n) for n in COLLECTIVE_ASSUMPTIONS})
    return goal.model_copy(
        update={"settings": goal.settings.model_copy(update={"assumptions": a}), "gpu_assumptions": ()}
    )


def _shared(memo: dict, key, compute):
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _screen_shared(
    goal: ServingGoal, cons: Constraints, prices: tuple[Price, ...], memo: dict, budget: WorkBudget | None = None
) -> list[Candidate]:
    """:func:`screen`, one GPU kind at a time, each kind's rows shared through ``memo``."""
    out: list[Candidate] = []
    for slug in sorted(catalog.gpus()):
        if cons.gpus_allowed and slug not in cons.gpus_allowed:
            continue
        one = cons.model_copy(update={"gpus_allowed": (slug,)})
        # keyed at one rate: the rows are re-priced at the goal's (at_rate), so the rate's points share them
        at_one = _goal_for(goal, slug).model_copy(update={"workload": goal.workload.with_(rate_per_s=1.0)})
        rows = _shared(
            memo, ("screen", at_one, one), lambda at_one=at_one, one=one: tuple(screen(at_one, one, prices, budget))
        )
        out.extend(at_rate(c, goal.rate_per_s, one) for c in rows)
    return out
