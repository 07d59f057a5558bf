"""Optimizer: the cheapest configuration that meets a serving target, the Pareto front, and why.

Search (the RA-BIT spec "Search, Pareto front and market prices")::

    enumerate  GPU x GPUs per replica x (TP, PP) x weight format x KV precision
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

Branch and bound: a candidate is only simulated while its lower bound, ceil(rate / cap) replicas at full
utilisation, costs less than the cheapest verified cost (no replica count below that bound keeps up, so no
simulation can verify anything cheaper). Simulations left over go to the cheapest candidate of each other GPU
kind, which feeds the alternatives and the Pareto front.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core import catalog
from core.base import choices
from core.catalog import Price
from core.base import Assumptions
from core.config import RabitConfig, Workload, resolve
from core.base import WorkBudget, search_budget
from core.catalog import ModelArch
from core.catalog import GpuPrice, gpu_price, unpriced
from core.serving import SimSpec, kv_pool, max_throughput, sim_spec, simulate
from core.physics import StepModel
from core.config import problems

#: Target utilisation of each replica when sizing the replica count in closed form: queues need headroom
#: (M/D/1 waiting time grows as rho / (1 - rho); at 0.8 the queue stays short against second-scale targets).
SCREEN_UTILISATION = 0.8
#: Share of the ITL target the screen's decode step may use (the rest is left for prefill interference).
SCREEN_ITL_SHARE = 0.8
#: Formats the search tries (defined once in core.base.choices).
WEIGHT_FORMATS = choices.SEARCH_WEIGHT_FORMATS
KV_FORMATS = choices.SEARCH_KV_DTYPES


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServingGoal(_F):
    """What the service must do: the workload (its arrival rate is ``workload.rate_per_s``), and its p95
    targets [s] (None = no target)."""

    model: str = "llama-3.1-70b"
    custom_model: ModelArch | None = None
    workload: SimSpec = SimSpec(num_requests=2000, rate_per_s=10.0)
    p95_ttft_s: float | None = Field(None, gt=0)
    p95_itl_s: float | None = Field(None, gt=0)
    p95_e2e_s: float | None = Field(None, gt=0)
    # the shared config's settings every candidate inherits (the sidebar's, or the CLI's --assume/--config)
    assumptions: Assumptions = Assumptions()
    fabric: str = "ib-ndr"
    block_size: int = Field(16, ge=1, le=1024)
    cuda_graphs: bool = True  # the config's workload.cuda_graphs: False = eager mode (launch configs say so)
    #: per GPU kind overrides of ``assumptions`` (slug, values): one accelerator measured faster or slower
    gpu_assumptions: tuple[tuple[str, Assumptions], ...] = ()

    def assumptions_for(self, gpu: str) -> Assumptions:
        return dict(self.gpu_assumptions).get(gpu, self.assumptions)

    @model_validator(mode="before")
    @classmethod
    def _rate_into_workload(cls, data: Any) -> Any:
        """Accept ``rate_per_s=`` as a shorthand for the workload's arrival rate (one value, one home)."""
        if isinstance(data, dict) and "rate_per_s" in data:
            data = dict(data)
            rate = data.pop("rate_per_s")
            spec = data.get("workload", cls.model_fields["workload"].default)
            if isinstance(spec, dict):
                data["workload"] = {**spec, "rate_per_s": rate}
            else:
                data["workload"] = spec.with_(rate_per_s=rate)
        return data

    @property
    def rate_per_s(self) -> float:
        """Arrival rate the service must sustain [requests/s]."""
        return self.workload.rate_per_s

    @classmethod
    def from_config(cls, cfg: RabitConfig) -> "ServingGoal":
        """The goal the shared config describes: its model, workload (with ``targets.requests_per_simulation``
        requests per simulation) and p95 targets."""
        t = cfg.targets
        spec = sim_spec(cfg).with_(num_requests=t.requests_per_simulation, duration_s=None)
        return cls(
            model=cfg.model,
            custom_model=cfg.custom_model,
            workload=spec,
            p95_ttft_s=t.p95_ttft_s,
            p95_itl_s=t.p95_itl_s,
            p95_e2e_s=t.p95_e2e_s,
            assumptions=cfg.assumptions,
            fabric=cfg.fabric,
            block_size=cfg.block_size,
            cuda_graphs=cfg.workload.cuda_graphs,
        )


class Constraints(_F):
    """Hard constraints and the price basis."""

    gpus_allowed: tuple[str, ...] = ()  # empty: the whole catalog
    max_gpus: int | None = Field(None, ge=1)
    max_usd_per_hour: float | None = Field(None, gt=0)
    weights_allowed: tuple[str, ...] = WEIGHT_FORMATS
    kv_allowed: tuple[str, ...] = KV_FORMATS
    providers: tuple[str, ...] = ()
    price_kind: choices.PriceKind = "on-demand"
    price_policy: choices.PricePolicy = "median"
    max_simulations: int = Field(16, ge=1, le=64)

    @classmethod
    def from_config(cls, cfg: RabitConfig, *, training: bool = False) -> "Constraints":
        """The hard constraints of the shared config (``training``: the training run's GPU kinds)."""
        t = cfg.targets
        return cls(
            gpus_allowed=t.train_gpus_allowed if training else t.gpus_allowed,
            max_gpus=t.max_gpus,
            max_usd_per_hour=t.max_usd_per_hour,
            weights_allowed=t.weights_allowed,
            kv_allowed=t.kv_allowed,
            providers=t.providers,
            price_kind=t.price_kind,
            price_policy=t.price_policy,
            max_simulations=t.max_simulations,
        )


class _Replica(_F):
    """The shape of one serving replica."""

    gpu: str
    gpus_per_replica: int
    tp: int
    pp: int
    weights: str
    kv_dtype: str
    ep: int = 1  # expert parallelism (MoE): the routed experts spread over the TP ranks instead of split by TP


class Candidate(_Replica):
    """One evaluated configuration (screened, and possibly simulated)."""

    usd_per_gpu_hour: float | None = None
    price_basis: str = ""
    price_unverified: bool = False
    pruned: str = ""  # why it left the search; empty if it survived the screen
    batch_1_ttft_s: float | None = None
    batch_1_itl_s: float | None = None
    screen_batch: int | None = None
    capacity_per_replica_rps: float | None = None
    replicas: int | None = None
    cost_per_hour: float | None = None
    simulated: bool = False
    meets: bool | None = None
    p95_ttft_s: float | None = None
    p95_itl_s: float | None = None
    p95_e2e_s: float | None = None
    bottleneck: str = ""
    sim_notes: str = ""

    @property
    def label(self) -> str:
        layout = (
            f"TP {self.tp}" + (f" x PP {self.pp}" if self.pp > 1 else "") + (f", EP {self.ep}" if self.ep > 1 else "")
        )
        n = f"{self.replicas} replica{'s' if self.replicas != 1 else ''} of " if self.replicas else ""
        return f"{n}{self.gpus_per_replica} x {self.gpu} ({layout}, {self.weights} weights, {self.kv_dtype} KV)"


class Pick(_Replica):
    """A recommended (or alternative) configuration with the figures the CLI contract names."""

    replicas: int
    cost_per_hour: float
    cost_per_million_tokens: float
    p95_ttft_s: float | None
    p95_itl_s: float | None
    p95_e2e_s: float | None
    capacity_requests_per_s: float
    bottleneck: str
    meets_target: bool
    label: str
    max_num_seqs: int = 0  # the batch cap the screen chose and the simulation ran with (engine max_num_seqs)


class Explanation(_F):
    summary: str
    why_gpu: str
    why_count: str
    bottleneck: str
    assumptions: tuple[str, ...]
    risks: tuple[str, ...]
    cheaper_alternative: str
    faster_alternative: str
    relax: str = ""  # when nothing meets the target: which constraint to relax


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


def _ratio(value: float | None, target: float | None) -> float:
    if target is None:
        return 0.0
    if value is None:
        return math.inf
    return value / target


def _meets(c: Candidate, goal: ServingGoal) -> bool:
    return all(
        _ratio(v, t) <= 1.0
        for v, t in ((c.p95_ttft_s, goal.p95_ttft_s), (c.p95_itl_s, goal.p95_itl_s), (c.p95_e2e_s, goal.p95_e2e_s))
    )


def _worst_ratio(c: Candidate, goal: ServingGoal) -> float:
    return max(
        _ratio(c.p95_ttft_s, goal.p95_ttft_s), _ratio(c.p95_itl_s, goal.p95_itl_s), _ratio(c.p95_e2e_s, goal.p95_e2e_s)
    )


def _config(goal: ServingGoal, c: Candidate) -> RabitConfig:
    g = catalog.gpu(c.gpu)
    gpn = min(c.gpus_per_replica, g.scale_up_domain)
    i, o = goal.workload.mean_lengths()
    return RabitConfig(
        model=goal.model,
        custom_model=goal.custom_model,
        gpu=c.gpu,
        gpus_per_node=gpn,
        nodes=max(1, c.gpus_per_replica // gpn),
        tp=c.tp,
        pp=c.pp,
        ep=c.ep,
        weights=c.weights,
        kv_dtype=c.kv_dtype,
        batch=1,
        input_tokens=max(1, round(i)),
        output_tokens=max(1, round(o)),
        assumptions=goal.assumptions_for(c.gpu),
        fabric=goal.fabric,
        block_size=goal.block_size,
        workload=Workload(cuda_graphs=goal.cuda_graphs),  # eager mode: the step model launches every kernel
    )


def _itl_batch(sm: StepModel, context: float, itl_target: float | None, cap: int) -> int:
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


# --- search --------------------------------------------------------------------------------------------


def screen(
    goal: ServingGoal, cons: Constraints, prices: tuple[Price, ...], budget: WorkBudget | None = None
) -> list[Candidate]:
    """Enumerate and screen every configuration in closed form (no simulation); each one is an evaluation
    of ``budget`` (:func:`core.base.limits.search_budget` when None)."""
    budget = budget if budget is not None else search_budget()
    arch = goal.custom_model if goal.custom_model is not None else catalog.model(goal.model)
    spec = goal.workload
    i_mean, o_mean = spec.mean_lengths()
    out: list[Candidate] = []
    for slug, g in sorted(catalog.gpus().items()):
        if cons.gpus_allowed and slug not in cons.gpus_allowed:
            continue
        price: GpuPrice | None = gpu_price(
            slug, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers
        )
        for n, tp, pp, ep in _with_expert_parallel(arch, _replica_layouts(g, arch)):
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
                        weights=w,
                        kv_dtype=kv,
                        usd_per_gpu_hour=price.usd_per_gpu_hour if price else None,
                        price_basis=price.basis if price else "",
                        price_unverified=bool(price and any(r.verification == "U" for r in price.rows)),
                    )
                    out.append(_screen_one(goal, cons, c, spec, i_mean, o_mean, price))
                    budget.tick()
    return out


def _screen_one(
    goal: ServingGoal,
    cons: Constraints,
    c: Candidate,
    spec: SimSpec,
    i_mean: float,
    o_mean: float,
    price: GpuPrice | None,
) -> Candidate:
    if price is None:
        return c.model_copy(update={"pruned": f"no {cons.price_kind} price for {c.gpu}"})
    if cons.max_gpus is not None and c.gpus_per_replica > cons.max_gpus:
        return c.model_copy(update={"pruned": f"one replica needs {c.gpus_per_replica} GPUs > max {cons.max_gpus}"})
    cfg = _config(goal, c)
    blocking = [p for p in problems(cfg) if p.blocking]
    if blocking:
        return c.model_copy(update={"pruned": blocking[0].message})
    try:
        pool = kv_pool(cfg, spec)
    except ValueError as exc:
        return c.model_copy(update={"pruned": f"does not fit: {exc}"})
    if pool.blocks * pool.block < i_mean + o_mean:
        return c.model_copy(update={"pruned": "does not fit: KV pool smaller than one mean request"})
    sm = StepModel.from_deployment(resolve(cfg))
    I = max(1, round(i_mean))
    ctx = i_mean + o_mean / 2
    ttft1 = float(sm.iteration_s(I, I * (I + 1) / 2, 0, 1))
    itl1 = float(sm.iteration_s(1, ctx, ctx))
    upd = {"batch_1_ttft_s": ttft1, "batch_1_itl_s": itl1, "bottleneck": sm.bound(1, ctx, ctx)}
    misses = []
    if goal.p95_ttft_s is not None and ttft1 > goal.p95_ttft_s:
        misses.append(f"TTFT {ttft1:.3g} s > {goal.p95_ttft_s:g} s")
    if goal.p95_itl_s is not None and itl1 > goal.p95_itl_s:
        misses.append(f"ITL {itl1 * 1e3:.3g} ms > {goal.p95_itl_s * 1e3:g} ms")
    if goal.p95_e2e_s is not None and ttft1 + (o_mean - 1) * itl1 > goal.p95_e2e_s:
        misses.append(f"end-to-end {ttft1 + (o_mean - 1) * itl1:.3g} s > {goal.p95_e2e_s:g} s")
    if misses:
        return c.model_copy(update={**upd, "pruned": "misses the target even at batch 1: " + "; ".join(misses)})
    b_itl = _itl_batch(sm, ctx, goal.p95_itl_s, spec.max_batch)
    if goal.p95_e2e_s is not None:
        per_tok = (goal.p95_e2e_s * SCREEN_ITL_SHARE - ttft1) / max(o_mean - 1, 1)
        b_itl = min(b_itl, _itl_batch(sm, ctx, per_tok / SCREEN_ITL_SHARE, spec.max_batch) or 1)
    b = max(1, b_itl)
    cap = max_throughput(cfg, spec.with_(max_batch=b, token_budget=max(spec.token_budget, b)), pool=pool, sm=sm)
    replicas = max(1, math.ceil(goal.rate_per_s / (cap.requests_per_s * SCREEN_UTILISATION)))
    cost = replicas * c.gpus_per_replica * price.usd_per_gpu_hour
    upd.update(
        screen_batch=cap.batch,
        capacity_per_replica_rps=cap.requests_per_s,
        replicas=replicas,
        cost_per_hour=cost,
        bottleneck=sm.bound(cap.batch, cap.batch * ctx, cap.batch * ctx),
    )
    if cons.max_gpus is not None and replicas * c.gpus_per_replica > cons.max_gpus:
        upd["pruned"] = f"needs about {replicas * c.gpus_per_replica} GPUs > max {cons.max_gpus}"
    elif cons.max_usd_per_hour is not None and cost > cons.max_usd_per_hour:
        upd["pruned"] = f"about ${cost:,.0f}/h > max ${cons.max_usd_per_hour:,.0f}/h"
    return c.model_copy(update=upd)


def _simulate(goal: ServingGoal, c: Candidate, budget: WorkBudget | None = None) -> Candidate:
    cfg = _config(goal, c)
    b = c.screen_batch or goal.workload.max_batch
    # the screen's batch cap is the engine's max_num_seqs: simulate with it, so the p95s belong to the
    # configuration the launch config starts
    spec = goal.workload.with_(
        rate_per_s=goal.rate_per_s / c.replicas,
        arrival="poisson",
        max_batch=b,
        token_budget=max(goal.workload.token_budget, b),
    )
    r = simulate(cfg, spec, budget=budget.child() if budget is not None else None)
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
    met = _meets(done, goal) and not s.saturated and s.rejected == 0
    return done.model_copy(update={"meets": met})


def _pick(goal: ServingGoal, c: Candidate) -> Pick:
    _, o_mean = goal.workload.mean_lengths()
    tokens_per_hour = goal.rate_per_s * o_mean * 3600
    return Pick(
        gpu=c.gpu,
        gpus_per_replica=c.gpus_per_replica,
        tp=c.tp,
        pp=c.pp,
        ep=c.ep,
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
    cands = screen(goal, cons, prices, wb) if memo is None else _screen_shared(goal, cons, prices, memo, wb)
    survivors = sorted((c for c in cands if not c.pruned), key=lambda c: (c.cost_per_hour, c.gpus_per_replica))
    results: dict[int, Candidate] = {}
    sims = 0
    best_cost = math.inf
    budget = cons.max_simulations

    def run(c: Candidate) -> Candidate:
        nonlocal sims
        sims += 1
        if progress:
            progress(sims, budget, c.label)
        wb.tick()
        return (
            _simulate(goal, c, wb)
            if memo is None
            else _shared(
                memo,
                ("sim", _goal_for(goal, c.gpu, collectives=c.gpus_per_replica > 1), c),
                lambda: _simulate(goal, c, wb),
            )
        )

    def floor_replicas(c: Candidate) -> int:  # fewer replicas than this cannot carry the rate at all
        return max(1, math.ceil(goal.rate_per_s / c.capacity_per_replica_rps)) if c.capacity_per_replica_rps else 1

    def with_replicas(c: Candidate, n: int) -> Candidate:
        return c.model_copy(
            update={"replicas": n, "cost_per_hour": n * c.gpus_per_replica * (c.usd_per_gpu_hour or 0.0)}
        )

    # 1. branch and bound over the cheapest estimates
    for idx, c in enumerate(survivors):
        if sims >= budget:
            break
        if with_replicas(c, floor_replicas(c)).cost_per_hour >= best_cost:
            continue
        r = run(c)
        while not r.meets and sims < budget and r.replicas is not None and r.replicas < 1024:
            more = r.replicas + max(1, r.replicas // 4)
            cost = more * r.gpus_per_replica * (r.usd_per_gpu_hour or 0.0)
            if (
                cost >= best_cost
                or (cons.max_gpus is not None and more * r.gpus_per_replica > cons.max_gpus)
                or (cons.max_usd_per_hour is not None and cost > cons.max_usd_per_hour)
            ):
                break
            r = run(r.model_copy(update={"replicas": more, "cost_per_hour": cost}))
        # the simulation met the targets: bisect down to the fewest replicas whose simulated p95s still meet
        lo = floor_replicas(r)
        while r.meets and sims < budget and r.replicas is not None and lo < r.replicas:
            mid = (lo + r.replicas) // 2
            trial = run(with_replicas(r, mid))
            if trial.meets:
                r = trial
            else:
                lo = mid + 1
        results[idx] = r
        if r.meets:
            best_cost = min(best_cost, r.cost_per_hour or math.inf)
    # 2. leftover budget: the cheapest unsimulated candidate of each other GPU kind, then of each replica
    #    size (faster, dearer layouts), so the alternatives and the Pareto front have something to show
    for key in (lambda c: c.gpu, lambda c: (c.gpu, c.gpus_per_replica)) if alternatives else ():
        seen = {key(results[i]) for i in results}
        for idx, c in enumerate(survivors):
            if sims >= budget:
                break
            if idx in results or key(c) in seen:
                continue
            seen.add(key(c))
            results[idx] = run(c)
    simulated = [results[i] for i in sorted(results)]
    all_cands = [results.get(i, c) for i, c in enumerate(survivors)] + [c for c in cands if c.pruned]
    meeting = sorted((c for c in simulated if c.meets), key=lambda c: c.cost_per_hour)
    best = meeting[0] if meeting else None
    picks = [_pick(goal, c) for c in simulated]
    front = pareto(picks)
    nearest = None
    if best is None and simulated:
        nearest = min(simulated, key=lambda c: (_worst_ratio(c, goal), c.cost_per_hour))
    elif best is None:
        # nothing survived to a simulation: the nearest is the best batch-1 latency among those that fit
        near = [
            c.model_copy(
                update={
                    "p95_ttft_s": c.batch_1_ttft_s,
                    "p95_itl_s": c.batch_1_itl_s,
                    "p95_e2e_s": c.batch_1_ttft_s + (goal.workload.mean_lengths()[1] - 1) * c.batch_1_itl_s,
                    "replicas": c.replicas or 1,
                    "cost_per_hour": c.cost_per_hour or (c.gpus_per_replica * (c.usd_per_gpu_hour or 0)),
                    "sim_notes": "batch-1 closed form (not simulated)",
                }
            )
            for c in cands
            if c.batch_1_ttft_s is not None and c.usd_per_gpu_hour is not None
        ]
        if near:
            nearest = min(near, key=lambda c: (_worst_ratio(c, goal), c.cost_per_hour or 0.0))
    kinds = tuple(g for g in sorted(catalog.gpus()) if not cons.gpus_allowed or g in cons.gpus_allowed)
    no_price = unpriced(kinds, prices, kind=cons.price_kind, providers=cons.providers)
    expl = explain(goal, cons, best, nearest, simulated, all_cands)
    if no_price:
        expl = expl.model_copy(
            update={
                "assumptions": expl.assumptions
                + (
                    f"no {cons.price_kind} price for {', '.join(no_price)}: left out of the search (add a price row to "
                    "include them)",
                )
            }
        )
    return Recommendation(
        goal=goal,
        constraints=cons,
        met=best is not None,
        unpriced=no_price,
        recommendation=_pick(goal, best) if best else None,
        nearest=_pick(goal, nearest) if nearest else None,
        pareto=front,
        explanation=expl,
        candidates=tuple(all_cands),
        evaluated=len(cands),
        simulated=sims,
    )


#: Assumptions only collectives read: a one-GPU replica's simulation does not depend on them.
_COLLECTIVE_ASSUMPTIONS = ("comm_bw_eff", "collective_base_us", "comm_overlap")


def _goal_for(goal: ServingGoal, gpu: str, collectives: bool = True) -> ServingGoal:
    """``goal`` as one GPU kind sees it (its assumptions resolved): the key of what it shares across re-runs."""
    a = goal.assumptions_for(gpu)
    if not collectives:
        a = a.with_(**{n: getattr(Assumptions(), n) for n in _COLLECTIVE_ASSUMPTIONS})
    return goal.model_copy(update={"assumptions": a, "gpu_assumptions": ()})


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
        out.extend(
            _shared(
                memo,
                ("screen", _goal_for(goal, slug), one),
                lambda slug=slug, one=one: tuple(screen(_goal_for(goal, slug), one, prices, budget)),
            )
        )
    return out


def explain(
    goal: ServingGoal,
    cons: Constraints,
    best: Candidate | None,
    nearest: Candidate | None,
    simulated: list[Candidate],
    cands: list[Candidate],
) -> Explanation:
    """The structured why: GPU, count, bottleneck, assumptions, risks, alternatives, what to relax."""
    from core.base import REGISTRY

    a = goal.assumptions
    assumptions = (
        f"decode memory-bandwidth utilisation {a.mbu:g} ({REGISTRY['mbu'].low:g}-{REGISTRY['mbu'].high:g})",
        f"prefill compute efficiency ceiling {a.mfu_max:g} ({REGISTRY['mfu_max'].low:g}-{REGISTRY['mfu_max'].high:g})",
        f"replicas sized in the screen at {SCREEN_UTILISATION:.0%} utilisation, then checked by simulation",
        f"prices: {cons.price_policy} {cons.price_kind} listing per GPU-hour",
    )
    targets = (
        ", ".join(
            f"p95 {n} <= {v:g} s"
            for n, v in (("TTFT", goal.p95_ttft_s), ("ITL", goal.p95_itl_s), ("end-to-end", goal.p95_e2e_s))
            if v is not None
        )
        or "no latency target (cheapest that keeps up)"
    )
    if best is None:
        near = (
            f"{nearest.label} (p95 TTFT {_s(nearest.p95_ttft_s)}, ITL {_s(nearest.p95_itl_s)}, end-to-end "
            f"{_s(nearest.p95_e2e_s)}{'; ' + nearest.sim_notes if not nearest.simulated else ''})"
            if nearest
            else "no configuration fits under these constraints"
        )
        pruned = [c for c in cands if c.pruned]
        reasons: dict[str, int] = {}
        for c in pruned:
            key = c.pruned.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        top = max(reasons, key=reasons.get) if reasons else ""
        relax = _relax_hint(goal, cons, nearest, top)
        return Explanation(
            summary=f"Nothing meets {targets} at {goal.rate_per_s:g} requests/s. Closest: {near}.",
            why_gpu="",
            why_count="",
            bottleneck=nearest.bottleneck if nearest else "",
            assumptions=assumptions,
            risks=(),
            cheaper_alternative="",
            faster_alternative="",
            relax=relax,
        )
    others = [c for c in simulated if c.meets and c.gpu != best.gpu]
    runner = min(others, key=lambda c: c.cost_per_hour) if others else None
    why_gpu = f"{best.gpu} meets the target at ${best.cost_per_hour:,.2f}/h" + (
        f"; the best other GPU, {runner.gpu}, needs ${runner.cost_per_hour:,.2f}/h "
        f"({runner.cost_per_hour / best.cost_per_hour - 1:+.0%})"
        if runner
        else "; no other GPU kind met the target within the simulation budget"
    )
    why_count = (
        f"{best.replicas} replica(s) of {best.gpus_per_replica} GPU(s): each carries "
        f"{goal.rate_per_s / best.replicas:.3g} of the {goal.rate_per_s:g} requests/s against a closed-form "
        f"capacity of {best.capacity_per_replica_rps:.3g}/s at batch {int(best.screen_batch or 0)}; simulated p95 "
        f"TTFT {_s(best.p95_ttft_s)}, ITL {_s(best.p95_itl_s)}, end-to-end {_s(best.p95_e2e_s)}"
    )
    bott = f"decode at batch {int(best.screen_batch or 0)} is {best.bottleneck}-bound" + (
        "; the weights and KV cache stream from HBM every step" if best.bottleneck == "memory" else ""
    )
    risks = []
    margin = _worst_ratio(best, goal)
    if margin > 0.9:
        risks.append(f"the tightest p95 is at {margin:.0%} of its target: little headroom for burstier traffic")
    if best.weights in ("int4", "nvfp4") or best.kv_dtype == "fp8":
        risks.append(f"{best.weights} weights / {best.kv_dtype} KV need a quality evaluation before shipping")
    if best.price_unverified:
        risks.append(f"the price rests on unverified listings: {best.price_basis}")
    if "KV thrash" in best.sim_notes:
        from core.serving import THRASH_REMEDIES

        risks.append(
            "the simulation preempts at least once per request (KV thrash); remedies: " + "; ".join(THRASH_REMEDIES)
        )
    if goal.rate_per_s / best.replicas > 0.85 * (best.capacity_per_replica_rps or math.inf):
        risks.append("replicas run above 85% of their closed-form capacity")
    cheaper = [c for c in simulated if not c.meets and c.cost_per_hour < best.cost_per_hour]
    cheap_txt = ""
    if cheaper:
        ch = min(cheaper, key=lambda c: c.cost_per_hour)
        cheap_txt = (
            f"{ch.label} at ${ch.cost_per_hour:,.2f}/h gives up the target: p95 end-to-end "
            f"{_s(ch.p95_e2e_s)}, TTFT {_s(ch.p95_ttft_s)}, ITL {_s(ch.p95_itl_s)}"
        )
    faster = [
        c
        for c in simulated
        if c.meets and c.p95_e2e_s is not None and best.p95_e2e_s is not None and c.p95_e2e_s < best.p95_e2e_s
    ]
    fast_txt = ""
    if faster:
        fa = min(faster, key=lambda c: c.p95_e2e_s)
        fast_txt = (
            f"{fa.label}: p95 end-to-end {_s(fa.p95_e2e_s)} instead of {_s(best.p95_e2e_s)} for "
            f"${fa.cost_per_hour:,.2f}/h ({fa.cost_per_hour / best.cost_per_hour - 1:+.0%})"
        )
    return Explanation(
        summary=f"Use {best.label}: ${best.cost_per_hour:,.2f}/h, meeting {targets} at {goal.rate_per_s:g} requests/s.",
        why_gpu=why_gpu,
        why_count=why_count,
        bottleneck=bott,
        assumptions=assumptions,
        risks=tuple(risks),
        cheaper_alternative=cheap_txt,
        faster_alternative=fast_txt,
    )


def _s(x: float | None) -> str:
    if x is None:
        return "withheld"
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def _relax_hint(goal: ServingGoal, cons: Constraints, nearest: Candidate | None, top_reason: str) -> str:
    hints = []
    if nearest is not None:
        for name, v, t in (
            ("p95 TTFT", nearest.p95_ttft_s, goal.p95_ttft_s),
            ("p95 ITL", nearest.p95_itl_s, goal.p95_itl_s),
            ("p95 end-to-end", nearest.p95_e2e_s, goal.p95_e2e_s),
        ):
            if t is not None and v is not None and v > t:
                hints.append(f"raise the {name} target to at least {_s(v)}")
    if cons.max_gpus is not None:
        hints.append(f"raise the GPU limit above {cons.max_gpus}")
    if cons.max_usd_per_hour is not None:
        hints.append(f"raise the price limit above ${cons.max_usd_per_hour:,.0f}/h")
    if cons.gpus_allowed:
        hints.append("allow more GPU kinds")
    if set(cons.weights_allowed) != set(WEIGHT_FORMATS):
        hints.append("allow FP8 or 4-bit weights")
    if top_reason:
        hints.append(f"most configurations were pruned because: {top_reason}")
    return "; ".join(hints)


# --- training ------------------------------------------------------------------------------------------


class TrainingOption(_F):
    """The cheapest run of one GPU kind that meets the deadline (or its fastest, when none does)."""

    gpu: str
    gpus: int
    layout: str
    runtime_s: float  # failure-free
    wall_clock_s: float  # expected, with failures
    gpu_hours: float  # failure-free
    cost_usd: float | None
    usd_per_gpu_hour: float | None
    price_basis: str
    mfu: float
    meets_deadline: bool
    note: str = ""


class TrainingRecommendation(_F):
    deadline_s: float
    met: bool
    recommendation: TrainingOption | None
    options: tuple[TrainingOption, ...]  # one per GPU kind searched, cheapest first
    skipped: tuple[str, ...]  # GPU kinds left out, with the reason
    summary: str
    why_gpu: str
    relax: str = ""


def recommend_training(
    cfg: RabitConfig,
    deadline_s: float,
    cons: Constraints = Constraints(),
    prices: tuple[Price, ...] | None = None,
    progress=None,
    budget: WorkBudget | None = None,
) -> TrainingRecommendation:
    """The cheapest training run that meets ``deadline_s`` across GPU kinds and prices.

    For each allowed GPU kind with a price, the training deadline search (:func:`core.training.plan`) gives
    the runtime of every node-aligned count up to 32,768 GPUs; the cheapest count that meets the deadline
    (expected wall-clock with failures x GPUs x price) is that kind's option; the cheapest option wins.
    ``budget``: each kind's search is an evaluation (:func:`core.base.limits.search_budget` when None).
    """
    from core import training

    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else search_budget()
    kinds = [g for g in sorted(catalog.gpus()) if not cons.gpus_allowed or g in cons.gpus_allowed]
    options: list[TrainingOption] = []
    skipped: list[str] = []
    for i, slug in enumerate(kinds):
        if progress:
            progress(i, len(kinds), slug)
        wb.tick()
        price = gpu_price(slug, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
        if price is None:
            skipped.append(f"{slug}: no {cons.price_kind} price")
            continue
        g = catalog.gpu(slug)
        try:
            cg = cfg.with_(gpu=slug, gpus_per_node=g.gpus_per_node, nodes=1, tp=1, pp=1, ep=1)
        except Exception as exc:  # noqa: BLE001 - a config the part cannot hold is a skip, said
            skipped.append(f"{slug}: {exc}")
            continue
        p = training.plan(
            cg,
            training.TrainingGoal(
                deadline_s=deadline_s, max_gpus=min(cons.max_gpus or training.MAX_GPUS, training.MAX_GPUS)
            ),
        )
        pts = [pt for pt in p.curve if pt.feasible and np.isfinite(pt.wall_clock_s)]
        if not pts:
            skipped.append(f"{slug}: no layout fits ({p.message})")
            continue
        usd = price.usd_per_gpu_hour

        def cost(pt, usd: float = usd) -> float:  # this GPU kind's price, bound now
            return usd * pt.gpus * pt.wall_clock_s / 3600.0

        meeting = [pt for pt in pts if pt.meets_deadline]
        if cons.max_usd_per_hour is not None:
            meeting = [pt for pt in meeting if usd * pt.gpus <= cons.max_usd_per_hour]
        pt = min(meeting, key=cost) if meeting else min(pts, key=lambda q: q.wall_clock_s)
        options.append(
            TrainingOption(
                gpu=slug,
                gpus=pt.gpus,
                layout=pt.layout.label() if pt.layout else "",
                runtime_s=pt.runtime_s,
                wall_clock_s=pt.wall_clock_s,
                gpu_hours=pt.gpu_hours,
                cost_usd=cost(pt),
                usd_per_gpu_hour=usd,
                price_basis=price.basis,
                mfu=pt.mfu,
                meets_deadline=bool(meeting),
                note="" if meeting else f"fastest is {pt.wall_clock_s / 86400:.3g} days on {pt.gpus:,} GPUs",
            )
        )
    options.sort(key=lambda o: (not o.meets_deadline, o.cost_usd if o.meets_deadline else o.wall_clock_s))
    best = options[0] if options and options[0].meets_deadline else None
    days = deadline_s / 86400
    if best is None:
        fastest = min(options, key=lambda o: o.wall_clock_s) if options else None
        return TrainingRecommendation(
            deadline_s=deadline_s,
            met=False,
            recommendation=None,
            options=tuple(options),
            skipped=tuple(skipped),
            summary=f"No priced GPU kind finishes within {days:.3g} days"
            + (
                f"; the fastest is {fastest.gpus:,} x {fastest.gpu} at {fastest.wall_clock_s / 86400:.3g} days"
                if fastest
                else ""
            ),
            why_gpu="",
            relax="move the deadline, raise the global batch (it caps useful data parallelism), "
            "train in FP8, or allow more GPUs",
        )
    others = [o for o in options if o.meets_deadline and o.gpu != best.gpu]
    why = f"{best.gpu} costs ${best.cost_usd:,.0f} for the run" + (
        f"; the next kind, {others[0].gpu}, costs ${others[0].cost_usd:,.0f} ({others[0].cost_usd / best.cost_usd - 1:+.0%})"
        if others
        else "; no other priced kind meets the deadline"
    )
    return TrainingRecommendation(
        deadline_s=deadline_s,
        met=True,
        recommendation=best,
        options=tuple(options),
        skipped=tuple(skipped),
        summary=(
            f"Train on {best.gpus:,} x {best.gpu} ({best.layout}): {best.wall_clock_s / 86400:.3g} days expected "
            f"with failures, {best.gpu_hours:,.0f} GPU-hours, ${best.cost_usd:,.0f} at {best.price_basis}"
        ),
        why_gpu=why,
    )


def pareto_reasons(points) -> dict[str, str]:
    """Why each point of a three-criterion front is on it, in the terms a cost-against-p95 chart shows.

    ``points``: ``(label, cost_per_hour, p95_e2e_s, capacity_requests_per_s)`` of the front's members and the
    points they are compared with. A member no other point beats on both cost and p95 is on the plotted
    (two-criterion) front; a member that some cheaper-and-faster point beats is on the front only because it
    has more capacity than every one of those, which marker size alone does not make visible.
    """
    pts = [(lbl, c, p if p is not None else math.inf, cap) for lbl, c, p, cap in points]
    out: dict[str, str] = {}
    for lbl, c, p, cap in pts:
        beat = [q for q in pts if q[0] != lbl and q[1] <= c and q[2] <= p and (q[1] < c or q[2] < p)]
        if not beat:
            out[lbl] = "no other configuration is both cheaper and faster"
        else:
            out[lbl] = (
                f"{len(beat)} cheaper-and-faster configuration(s) hold at most "
                f"{max(q[3] for q in beat):.3g} requests/s; this one holds {cap:.3g}"
            )
    return out
