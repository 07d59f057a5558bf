"""One deployment per variant (merged weights) against many adapters over one base: GPUs and cost, and where a
variant earns a replica of its own.

Merging an adapter into the base (``W + B A``) gives a plain model of the base's size: each variant is then a
deployment of its own, sized for its share of the traffic (at least one replica, however little it gets), with
no adapter overhead and no slot limit. The comparison sizes both sides the same way, in closed form: the screen
of :mod:`core.decision.optimizer` (replicas = ceil(rate / (capacity x rho)) at the screen's batch). Per variant
the cheapest screened shape for its own rate is taken (a variant with little traffic runs on the smallest
deployment that fits and meets the targets at batch 1).

A variant earns its own replica in two cases:

* **its traffic alone fills a replica**: its rate is at least what one dedicated (merged) replica of the shared
  deployment's shape carries at the screen's utilisation, so serving it apart loses nothing to idle GPUs and frees
  the shared batch of its adapter;
* **its rank makes mixed batches slower than a dedicated copy**: every slot is allocated, and every adapter
  kernel runs, at the largest rank of the set; when the adapters of the largest rank are served apart (merged,
  on their own replicas) the shared deployment runs at the next rank, and if that costs less in total than
  the shared deployment at the largest rank, those variants earn their own replicas.
"""

from __future__ import annotations

import math

from core.base import sig
from core.catalog import GpuPrice, Price, gpu_price
from core.config import AdapterSet
from core.decision.goal import _F, SCREEN_UTILISATION, Candidate, Constraints, Pick, ServingGoal
from core.decision.optimizer import screen, screen_candidate

__all__ = ["PerVariant", "VariantReplica", "per_variant"]

adapter_name = AdapterSet.name_of


class VariantReplica(_F):
    """A variant that earns a replica of its own, and why."""

    adapter: str
    share: float  # of the requests
    rate_per_s: float
    rank: int
    replicas: int  # dedicated (merged) replicas it needs
    reason: str


class PerVariant(_F):
    """ "One deployment per variant" beside the multi-adapter deployment (closed form, see the module docstring)."""

    variants: int
    gpus: int  # every variant's own deployment, added up
    cost_per_hour: float
    replicas: int
    shapes: tuple[tuple[str, int], ...]  # (shape label, variants served on it), most used first
    multi_lora_gpus: int
    multi_lora_cost_per_hour: float
    multi_lora_label: str
    dedicated_capacity_rps: float  # one merged replica of the shared deployment's shape
    own_replica: tuple[VariantReplica, ...]
    basis: str

    @property
    def gpus_saved(self) -> int:
        return self.gpus - self.multi_lora_gpus

    @property
    def cost_ratio(self) -> float:
        """Per-variant cost over multi-adapter cost (how many times dearer)."""
        return self.cost_per_hour / self.multi_lora_cost_per_hour if self.multi_lora_cost_per_hour else math.inf


def _replicas(rate: float, cap: float | None) -> int:
    """Replicas of capacity ``cap`` that carry ``rate`` at the screen's utilisation (at least one)."""
    return max(1, math.ceil(rate / (cap * SCREEN_UTILISATION))) if cap else 1


def _cheapest(rate: float, base: list[Candidate]) -> tuple[float, int, Candidate]:
    """The cheapest screened (merged, base-only) shape for ``rate``: (cost per hour, replicas, candidate)."""
    best: tuple[float, int, Candidate] | None = None
    for c in base:
        n = _replicas(rate, c.capacity_per_replica_rps)
        cost = n * c.gpus_per_replica * (c.usd_per_gpu_hour or 0.0)
        if best is None or (cost, c.gpus_per_replica) < (best[0], best[2].gpus_per_replica):
            best = (cost, n, c)
    assert best is not None
    return best


def per_variant(
    goal: ServingGoal, cons: Constraints, prices: tuple[Price, ...], pick: Pick | None
) -> PerVariant | None:
    """The per-variant comparison for ``pick`` (the recommendation, or the nearest option); None without adapters,
    without a pick, or when no merged deployment survives the screen."""
    a = goal.settings.adapters
    if not a.enabled or pick is None:
        return None
    merged = goal.with_(settings=goal.settings.with_(adapters=AdapterSet()))
    base = [c for c in screen(merged, cons, prices) if not c.pruned and c.capacity_per_replica_rps]
    if not base:
        return None
    pop = a.popularity()
    rate = goal.rate_per_s
    price = gpu_price(pick.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    shape = Candidate(
        gpu=pick.gpu,
        gpus_per_replica=pick.gpus_per_replica,
        tp=pick.tp,
        pp=pick.pp,
        ep=pick.ep,
        weights=pick.weights,
        kv_dtype=pick.kv_dtype,
        usd_per_gpu_hour=price.usd_per_gpu_hour if price else None,
    )
    dedicated = screen_candidate(merged, cons, shape, price)
    cap = dedicated.capacity_per_replica_rps or 0.0
    gpus = replicas = 0
    cost = 0.0
    used: dict[str, int] = {}
    for p in pop:
        c_i, n_i, cand = _cheapest(rate * p, base)
        gpus += n_i * cand.gpus_per_replica
        replicas += n_i
        cost += c_i
        key = cand.model_copy(update={"replicas": None}).label
        used[key] = used.get(key, 0) + 1
    own: list[VariantReplica] = []
    if cap:
        for i, p in enumerate(pop):
            if rate * p >= cap * SCREEN_UTILISATION:
                own.append(
                    VariantReplica(
                        adapter=adapter_name(i),
                        share=p,
                        rate_per_s=rate * p,
                        rank=a.rank_of(i),
                        replicas=_replicas(rate * p, cap),
                        reason=f"its traffic alone ({sig(rate * p)} requests/s, {p:.0%} of the total) fills a "
                        f"dedicated replica of {shape.label} (about {sig(cap * SCREEN_UTILISATION)} requests/s at "
                        f"{SCREEN_UTILISATION:.0%} utilisation)",
                    )
                )
    own += _rank_split(goal, cons, shape, price, cap, {v.adapter for v in own})
    return PerVariant(
        variants=a.count,
        gpus=gpus,
        cost_per_hour=cost,
        replicas=replicas,
        shapes=tuple(sorted(used.items(), key=lambda kv: -kv[1])),
        multi_lora_gpus=pick.replicas * pick.gpus_per_replica,
        multi_lora_cost_per_hour=pick.cost_per_hour,
        multi_lora_label=pick.label,
        dedicated_capacity_rps=cap,
        own_replica=tuple(own),
        basis=f"closed form: each variant's own deployment is the cheapest screened shape for its rate, replicas "
        f"sized at {SCREEN_UTILISATION:.0%} utilisation, at least one per variant; the multi-adapter deployment is "
        "the recommendation (simulated)",
    )


def _rank_split(
    goal: ServingGoal,
    cons: Constraints,
    shape: Candidate,
    price: GpuPrice | None,
    cap: float,
    taken: set[str],
) -> list[VariantReplica]:
    """The adapters of the set's largest rank, when serving them apart (merged) and the rest at the next rank costs
    less than the shared deployment at the largest rank (the second case of the module docstring)."""
    a = goal.settings.adapters
    ranks = a.ranks[: min(a.count, len(a.ranks))]
    top = max(ranks)
    rest_ranks = tuple(r for r in ranks if r < top)
    if not rest_ranks or price is None or not cap:
        return []
    pop = a.popularity()
    tops = [i for i in range(a.count) if a.rank_of(i) == top and adapter_name(i) not in taken]
    if not tops:
        return []
    share = sum(pop[i] for i in tops)
    full = screen_candidate(goal, cons, shape, price)
    rest_set = a.with_(count=a.count - len(tops), ranks=rest_ranks, max_lora_rank=None)
    rest_goal = goal.with_(
        settings=goal.settings.with_(adapters=rest_set),
        workload=goal.workload.with_(rate_per_s=goal.rate_per_s * (1 - share)),
    )
    rest = screen_candidate(rest_goal, cons, shape, price)
    if full.pruned or rest.pruned or full.cost_per_hour is None or rest.cost_per_hour is None:
        return []
    per_gpu = price.usd_per_gpu_hour
    apart = {i: _replicas(goal.rate_per_s * pop[i], cap) for i in tops}
    split_cost = rest.cost_per_hour + sum(apart.values()) * shape.gpus_per_replica * per_gpu
    if split_cost >= full.cost_per_hour:
        return []
    return [
        VariantReplica(
            adapter=adapter_name(i),
            share=pop[i],
            rate_per_s=goal.rate_per_s * pop[i],
            rank=top,
            replicas=apart[i],
            reason=f"rank {top} sets every slot's rank: the shared deployment at rank {top} costs "
            f"${full.cost_per_hour:,.2f}/h, with the rank-{top} adapters on replicas of their own and the rest at rank "
            f"{max(rest_ranks)} ${split_cost:,.2f}/h",
        )
        for i in tops
    ]
