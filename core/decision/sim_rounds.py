"""The simulation rounds of the optimizer's search (:func:`core.decision.optimizer.recommend`).

The screened candidates that survive, cheapest estimate first, go through two rounds of simulations that share
one budget (``max_simulations``) and one record of what ran (a bisection may come back to a replica count):

1. branch and bound: a candidate is simulated only while its lower bound (the fewest replicas, or prefill and
   decode instances, that can carry the rate at all) costs less than the cheapest verified cost of its own mode;
   an aggregated one then gets more replicas until its simulated p95s meet and is bisected down to the fewest
   that still meet, a disaggregated one grows the pool that misses and then sheds one instance of each pool
   while the p95s still meet;
2. the leftover budget: the cheapest unsimulated candidate of each other GPU kind, then of each replica size,
   so the alternatives and the Pareto front have something to show.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from core.base import WorkBudget
from core.decision.disagg_search import with_pools
from core.decision.goal import Candidate, Constraints, ServingGoal

#: The replica count past which an aggregated candidate that still misses is given up.
MAX_REPLICAS = 1024


class SimRounds:
    """One search's simulations: how many ran, what each returned, and each mode's cheapest verified cost."""

    def __init__(
        self,
        goal: ServingGoal,
        cons: Constraints,
        simulate: Callable[[Candidate], Candidate],
        progress: Callable | None,
        budget: WorkBudget,
    ) -> None:
        self.goal = goal
        self.cons = cons
        self._simulate = simulate
        self._progress = progress
        self._budget = budget
        self.sims = 0
        self.max_sims = cons.max_simulations
        self.bound: dict[str, float] = {"aggregated": math.inf, "disaggregated": math.inf}
        self._done: dict = {}

    def run(self, c: Candidate) -> Candidate:
        """``c`` simulated, once per search: a candidate already run is answered from the record."""
        key = (c.shape(), c.ep, c.mode, c.replicas, c.prefill, c.decode, c.screen_batch)
        if key not in self._done:
            self.sims += 1
            if self._progress:
                self._progress(self.sims, self.max_sims, c.label)
            self._budget.tick()
            self._done[key] = self._simulate(c)
        return self._done[key]

    def spent(self) -> bool:
        """Whether the search used up its simulations."""
        return self.sims >= self.max_sims

    def floor_replicas(self, c: Candidate) -> int:
        """The fewest replicas that can carry the rate at all (one for agent sessions, which no rate bounds)."""
        if self.goal.sessions is not None:  # agents send turns as fast as they are answered
            return 1
        if not c.capacity_per_replica_rps:
            return 1
        return max(1, math.ceil(self.goal.rate_per_s / c.capacity_per_replica_rps))

    def floor_pools(self, c: Candidate) -> tuple[int, int]:
        """The fewest (prefill, decode) instances that can carry the rate at all."""
        assert c.prefill is not None and c.decode is not None
        return (
            max(1, math.ceil(self.goal.rate_per_s / c.prefill.capacity_per_instance_rps)),
            max(1, math.ceil(self.goal.rate_per_s / c.decode.capacity_per_instance_rps)),
        )

    def _over_caps(self, gpus: int, cost: float) -> bool:
        """Whether a layout of ``gpus`` GPUs at ``cost`` $/h breaks the GPU or the cost cap."""
        cons = self.cons
        return (cons.max_gpus is not None and gpus > cons.max_gpus) or (
            cons.max_usd_per_hour is not None and cost > cons.max_usd_per_hour
        )

    def allowed(self, c: Candidate) -> bool:
        """Whether ``c`` is worth a simulation: cheaper than its mode's bound and within the caps."""
        gpus = (c.replicas or 0) * c.gpus_per_replica
        if c.prefill is not None and c.decode is not None:
            gpus = c.prefill.instances * c.prefill.gpus_per_instance + c.decode.instances * c.decode.gpus_per_instance
        return c.cost < self.bound[c.mode] and not self._over_caps(gpus, c.cost)

    # -- round 1: branch and bound -------------------------------------------------------------------------

    def branch_and_bound(self, survivors: list[Candidate]) -> dict[int, Candidate]:
        """Round 1: each survivor (index -> its sized simulation) whose lower bound beats its mode's bound."""
        results: dict[int, Candidate] = {}
        for idx, c in enumerate(survivors):
            if self.spent():
                break
            r = self._sized_pools(c) if c.mode == "disaggregated" else self._sized_replicas(c)
            if r is None:
                continue
            results[idx] = r
            if r.meets:
                self.bound[c.mode] = min(self.bound[c.mode], r.cost_per_hour or math.inf)
        return results

    def _sized_replicas(self, c: Candidate) -> Candidate | None:
        """An aggregated candidate simulated and sized (None when its lower bound cannot beat the bound)."""
        if with_replicas(c, self.floor_replicas(c)).cost >= self.bound[c.mode]:
            return None
        return self._bisect_replicas(self._grow_replicas(self.run(c), c.mode))

    def _grow_replicas(self, r: Candidate, mode: str) -> Candidate:
        """A quarter more replicas at a time until the simulated p95s meet, the bound or a cap stops it."""
        while not r.meets and not self.spent() and r.replicas is not None and r.replicas < MAX_REPLICAS:
            more = r.replicas + max(1, r.replicas // 4)
            cost = more * r.gpus_per_replica * (r.usd_per_gpu_hour or 0.0)
            if cost >= self.bound[mode] or self._over_caps(more * r.gpus_per_replica, cost):
                break
            r = self.run(r.model_copy(update={"replicas": more, "cost_per_hour": cost}))
        return r

    def _bisect_replicas(self, r: Candidate) -> Candidate:
        """A candidate that meets, bisected down to the fewest replicas whose simulated p95s still meet."""
        lo = self.floor_replicas(r)
        while r.meets and not self.spent() and r.replicas is not None and lo < r.replicas:
            mid = (lo + r.replicas) // 2
            trial = self.run(with_replicas(r, mid))
            if trial.meets:
                r = trial
            else:
                lo = mid + 1
        return r

    def _sized_pools(self, c: Candidate) -> Candidate | None:
        """A disaggregated candidate simulated and sized (None when its lower bound cannot beat the bound)."""
        if with_pools(c, *self.floor_pools(c)).cost >= self.bound[c.mode]:
            return None
        return self._shrink_pools(self._grow_pools(self.run(c)))

    def _pools_to_grow(self, r: Candidate) -> tuple[bool, bool]:
        """(prefill, decode): which pools a missing disaggregated candidate grows.

        A TTFT that misses grows the pool whose queue holds it longer (prefill queue vs decode admission); an ITL
        or end-to-end miss, or a TTFT one the decode queue holds, grows decode."""
        g = self.goal
        ttft = r.p95_ttft_s is None or (g.p95_ttft_s is not None and r.p95_ttft_s > g.p95_ttft_s)
        itl = r.p95_itl_s is None or (g.p95_itl_s is not None and r.p95_itl_s > g.p95_itl_s)
        e2e = r.p95_e2e_s is None or (g.p95_e2e_s is not None and r.p95_e2e_s > g.p95_e2e_s)
        grow_p = ttft and (r.prefill_queue_p95_s or math.inf) >= (r.decode_queue_p95_s or 0.0)
        return grow_p, itl or e2e or not grow_p

    def _grow_pools(self, r: Candidate) -> Candidate:
        """Up to four times a quarter more instances of the pools that miss, while allowed."""
        for _ in range(4):
            if r.meets or self.spent() or r.prefill is None or r.decode is None:
                break
            P, D = r.prefill.instances, r.decode.instances
            grow_p, grow_d = self._pools_to_grow(r)
            nxt = with_pools(r, P + (max(1, P // 4) if grow_p else 0), D + (max(1, D // 4) if grow_d else 0))
            if not self.allowed(nxt):
                break
            r = self.run(nxt)
        return r

    def _shrink_pools(self, r: Candidate) -> Candidate:
        """One prefill instance fewer at a time, then one decode, while the simulated p95s still meet."""
        lo_p, lo_d = self.floor_pools(r)
        for role, lo in (("prefill", lo_p), ("decode", lo_d)):
            while r.meets and not self.spent() and r.prefill is not None and r.decode is not None:
                P, D = r.prefill.instances, r.decode.instances
                if (P if role == "prefill" else D) <= lo:
                    break
                trial = self.run(with_pools(r, P - (role == "prefill"), D - (role == "decode")))
                if not trial.meets:
                    break
                r = trial
        return r

    # -- round 2: the leftover budget ----------------------------------------------------------------------

    def leftover(self, survivors: list[Candidate], results: dict[int, Candidate]) -> None:
        """Round 2, into ``results``: the cheapest unsimulated survivor of each GPU kind not simulated yet, then
        of each (GPU kind, replica size), while simulations are left."""
        keys: tuple[Callable[[Candidate], object], ...] = (lambda c: c.gpu, lambda c: (c.gpu, c.gpus_per_replica))
        for key in keys:
            seen = {key(results[i]) for i in results}
            for idx, c in enumerate(survivors):
                if self.spent():
                    break
                if idx in results or key(c) in seen:
                    continue
                seen.add(key(c))
                results[idx] = self.run(c)


def with_replicas(c: Candidate, n: int) -> Candidate:
    """An aggregated candidate at ``n`` replicas (its cost follows)."""
    return c.model_copy(update={"replicas": n, "cost_per_hour": n * c.gpus_per_replica * (c.usd_per_gpu_hour or 0.0)})
