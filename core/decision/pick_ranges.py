"""Ranges of the optimizer's answer: the recommendation's cost, p95s and capacity at each assumption's bounds, the
runner-up's cost, whether the choice is settled and which measurement would settle it; and the ranges of a
recommended training run.

Only the recommendation and the runner-up are evaluated at the bounds (each with the optimizer's own screen and
a shortened simulation), never the whole search again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core import catalog
from core.base import REGISTRY, Range, by_tag, fmt_latency
from core.catalog import gpu_price
from core.config import RabitConfig, resolve
from core.decision.goal import candidate_config
from core.decision.optimizer import layout_of_candidate, pick_of, screen_candidate, simulate_candidate
from core.decision.range_rule import Estimate, rebase, spread
from core.decision.uncertainty import serving_screen, training_ranges
from core.serving import simulate_deployment
from core.training import TrainingGoal, plan

#: Pick keys with a range (``rabit recommend --json``: ``recommendation.<key>``).
PICK_KEYS = (
    "cost_per_hour",
    "cost_per_million_tokens",
    "p95_e2e_s",
    "p95_ttft_s",
    "p95_itl_s",
    "capacity_requests_per_s",
)


#: Requests per simulated deployment at an assumption's bound for a pick's p95 ranges (the base keeps the full
#: workload). Fewer than the Serving page's bound runs (:data:`core.decision.uncertainty.RANGE_SIM_REQUESTS`): a pick's
#: ranges simulate its whole deployment once per bound of every assumption that moves it, and the Optimizer and Next
#: experiment views draw them at once; the pick is also simulated on the full workload with every assumption at its
#: pessimistic bound (:func:`_pessimistic`), which is where a queue that grows at a bound shows.
PICK_RANGE_SIM_REQUESTS = 256
#: The p95 targets of a serving goal: (field of the goal and of a pick, how a page names it).
TARGETS = (("p95_ttft_s", "p95 TTFT"), ("p95_itl_s", "p95 ITL"), ("p95_e2e_s", "p95 end-to-end"))


@dataclass(frozen=True)
class TargetCheck:
    """One p95 target against the recommendation: at base, across its heuristic range (each assumption alone at
    its bounds, the moves combined) and simulated with every assumption at its pessimistic bound at once.
    Times in seconds; None where the simulation withheld the percentile."""

    key: str
    label: str
    target_s: float
    value_s: float | None
    low_s: float | None
    high_s: float | None
    pessimistic_s: float | None

    @property
    def meets_at_pessimistic(self) -> bool:
        return self.pessimistic_s is not None and self.pessimistic_s <= self.target_s

    @property
    def range_crosses(self) -> bool:
        """Whether the heuristic range reaches past the target (the target may be missed inside the range)."""
        return self.high_s is not None and self.high_s > self.target_s

    def text(self) -> str:
        """ "p95 TTFT 3.04 s misses the 2 s target at the pessimistic bound" or "... meets ... even at ..."."""
        at = fmt_latency(self.pessimistic_s) if self.pessimistic_s is not None else "withheld"
        verb = "meets" if self.meets_at_pessimistic else "misses"
        return f"{self.label} {at} {verb} the {fmt_latency(self.target_s)} target"


@dataclass(frozen=True)
class PickRanges:
    label: str
    ranges: dict[str, Range]
    misses_at_pessimistic: bool | None  # None: not checked (the runner-up)
    pessimistic_note: str
    targets: tuple[TargetCheck, ...] = ()  # each target set, checked at the bounds (the recommendation only)

    @property
    def failing(self) -> tuple[TargetCheck, ...]:
        """The targets the recommendation misses with every assumption at its pessimistic bound."""
        return tuple(t for t in self.targets if not t.meets_at_pessimistic)


@dataclass(frozen=True)
class RecommendationRanges:
    recommendation: PickRanges | None
    runner_up: PickRanges | None
    settled: bool
    settled_by: str  # the assumption whose measurement would settle an open choice ("" when settled)
    note: str


def _candidate_for(rec, pick):
    shape = ("gpu", "gpus_per_replica", "tp", "pp", "weights", "kv_dtype")
    for c in rec.candidates:
        if (
            c.simulated
            and all(getattr(c, k) == getattr(pick, k) for k in shape)
            and c.replicas == pick.replicas
            and (c.mode, c.prefill, c.decode) == (pick.mode, pick.prefill, pick.decode)
        ):
            return c
    return None


def _pick_estimate(goal, cons, prices, cand, *, simulate_p95: bool) -> Estimate:
    """Replicas and cost from the optimizer's closed-form screen at this bound; p95 from a shortened simulation
    with the pick's replica count fixed."""
    _, o_mean = goal.workload.mean_lengths()
    price = gpu_price(cand.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    tokens_per_hour = goal.rate_per_s * o_mean * 3600
    short = goal.workload.with_(num_requests=min(goal.workload.num_requests, PICK_RANGE_SIM_REQUESTS))

    def est(cfg: RabitConfig) -> dict[str, Any]:
        dep = resolve(cfg)  # the candidate at this bound, resolved once for its screen and its simulation
        bare = cand.model_copy(update={"pruned": "", "simulated": False, "meets": None})
        sc = screen_candidate(goal, cons, bare, price, dep=dep)
        replicas = max(sc.replicas or 0, cand.replicas or 0) if sc.replicas else None
        cap_rep = sc.capacity_per_replica_rps
        cost = replicas * cand.gpus_per_replica * price.usd_per_gpu_hour if (replicas and price) else None
        out: dict[str, Any] = {
            "cost_per_hour": cost,
            "cost_per_million_tokens": cost / tokens_per_hour * 1e6 if cost else None,
            "capacity_requests_per_s": (cand.replicas or 0) * cap_rep if cap_rep else None,
        }
        if simulate_p95:
            try:
                s = simulate_deployment(
                    dep.config, short.with_(arrival="poisson"), layout_of_candidate(goal, cand)
                ).summary
                out.update(p95_e2e_s=s.e2e_s.p95, p95_ttft_s=s.ttft_s.p95, p95_itl_s=s.itl_s.p95)
            except ValueError:
                out.update(p95_e2e_s=math.inf, p95_ttft_s=math.inf, p95_itl_s=math.inf)
        return out

    return est


def _pools_narrowed(cons, pick):
    """The search narrowed to the pick's own configuration: its GPU kinds, its two pool shapes, its precisions."""
    q, d = pick.prefill, pick.decode
    shapes = ((q.gpus_per_instance, q.tp, q.pp, q.ep), (d.gpus_per_instance, d.tp, d.pp, d.ep))
    return cons.model_copy(
        update={
            "gpus_allowed": tuple(dict.fromkeys((q.gpu, d.gpu))),
            "layouts_allowed": tuple(dict.fromkeys(shapes)),
            "weights_allowed": (pick.weights,),
            "kv_allowed": (pick.kv_dtype,),
            "disagg": True,
            "pools_allowed": shapes,
            "pool_kinds": (q.gpu, d.gpu),
        }
    )


def _disagg_ranges(rec, best, prices) -> RecommendationRanges:
    """A disaggregated pick, with every assumption at each bound at once (its pools are sized by simulation, not
    by one replica's closed-form screen, so the one-assumption-at-a-time rule of :func:`spread` does not apply).

    Cost: the optimizer narrowed to the pick's GPU kinds, pool shapes and precisions sizes the pools again at the
    bound (more prefill or decode instances where the bound needs them); a bound at which no pool count meets the
    target has no cost, and the range's end is then infinite. The p95s: the pick's own pools simulated at the bound
    on a shortened workload, rebased on the pick's figures (as the aggregated picks' are)."""
    from core.decision.optimizer import recommend

    goal, cons, pick = rec.goal, rec.constraints, rec.recommendation
    narrowed = _pools_narrowed(cons, pick)
    tokens_per_hour = goal.rate_per_s * goal.workload.mean_lengths()[1] * 3600
    short = goal.workload.with_(num_requests=min(goal.workload.num_requests, PICK_RANGE_SIM_REQUESTS))
    at: dict[str, dict[str, float]] = {}
    low = None
    for bound in ("base", "low", "high"):
        g = goal if bound == "base" else goal.with_(assumptions=goal.assumptions.at(bound))
        vals: dict[str, float] = {"cost_per_hour": pick.cost_per_hour}
        if bound != "base":
            try:
                rb = recommend(g, narrowed, prices, alternatives=False)
                vals["cost_per_hour"] = rb.recommendation.cost_per_hour if rb.recommendation else math.inf
            except ValueError:
                vals["cost_per_hour"] = math.inf
        try:
            s = simulate_deployment(
                candidate_config(g, best), short.with_(arrival="poisson"), layout_of_candidate(g, best)
            ).summary
            vals.update(p95_e2e_s=s.e2e_s.p95, p95_ttft_s=s.ttft_s.p95, p95_itl_s=s.itl_s.p95)
        except ValueError:
            vals.update(p95_e2e_s=math.inf, p95_ttft_s=math.inf, p95_itl_s=math.inf)
        vals["cost_per_million_tokens"] = vals["cost_per_hour"] / tokens_per_hour * 1e6
        at[bound] = vals
        if bound == "low":
            try:
                low = simulate_candidate(g, best)  # the full workload: the pessimistic check
            except ValueError:
                low = None
    ranges: dict[str, Range] = {}
    for k in ("cost_per_hour", "cost_per_million_tokens", "p95_e2e_s", "p95_ttft_s", "p95_itl_s"):
        v0, lo, hi = (at[b].get(k) for b in ("base", "low", "high"))
        if v0 is None or lo is None or hi is None or not math.isfinite(v0):
            continue
        rg = Range(value=v0, low=min(lo, hi, v0), high=max(lo, hi, v0))
        # the p95s at the bounds are of a shortened run: the same moves about the pick's own full-run figure
        ranges[k] = rebase(rg, getattr(pick, k, None)) if k.startswith("p95") else rg
    misses = low is None or not low.meets
    why = "misses the target" if misses else "meets the target even"
    note = f"{why} with every assumption at its pessimistic bound at once"
    rp = PickRanges(label=pick.label, ranges=ranges, misses_at_pessimistic=misses, pessimistic_note=note)
    basis = (
        "a disaggregated pick: every assumption at each bound at once; the cost from its pools sized again at "
        "the bound, the p95s from its own pools simulated there"
    )
    return RecommendationRanges(rp, None, True, "", basis)


def _pessimistic(goal, best, base_pick, ranges: dict[str, Range]) -> tuple[tuple[TargetCheck, ...], bool, str]:
    """The pick simulated with every assumption at its pessimistic bound at once, full workload: (each target's
    check, whether it misses there, the sentence that says so)."""
    g_low = goal.with_(assumptions=goal.assumptions.at("low"))
    try:
        low = simulate_candidate(g_low, best)
    except ValueError as exc:  # the model no longer fits at the pessimistic memory bounds
        low, why = None, str(exc)
    misses = low is None or not low.meets
    checks = tuple(
        TargetCheck(
            key=k,
            label=label,
            target_s=float(getattr(goal, k)),
            value_s=getattr(base_pick, k),
            low_s=ranges[k].low if k in ranges else None,
            high_s=ranges[k].high if k in ranges else None,
            pessimistic_s=getattr(low, k) if low is not None else None,
        )
        for k, label in TARGETS
        if getattr(goal, k) is not None
    )
    rule = "with every assumption at its pessimistic bound at once"
    if low is None:
        note = f"misses the target {rule}: {why}"
    elif misses:
        failing = [t.text() for t in checks if not t.meets_at_pessimistic]
        note = f"misses {'its target' if len(failing) == 1 else 'its targets'} {rule}: " + "; ".join(
            failing or ["a p95 is withheld there"]
        )
    else:
        note = f"meets every target even {rule}" + (": " + "; ".join(t.text() for t in checks) if checks else "")
    return checks, misses, note


def _runners_up(rec, best) -> list:
    """The other simulated configurations that meet the target (not the pick's shape), cheapest first."""
    return sorted(
        (
            c
            for c in rec.candidates
            if c.simulated
            and c.meets
            and c is not best
            and (c.gpu, c.gpus_per_replica, c.tp, c.pp, c.weights, c.kv_dtype)
            != (best.gpu, best.gpus_per_replica, best.tp, best.pp, best.weights, best.kv_dtype)
        ),
        key=lambda c: c.cost_per_hour or math.inf,
    )


def _settling_assumption(sp, sp2, a: Range, b: Range) -> str:
    """The assumption whose measurement settles the choice between the pick (cost range ``a``) and the runner-up
    (``b``): the one that moves their cost ratio most (the runs line up: same names, same bound values), else the
    one that moves both costs most."""
    base_ratio = math.log(b.value / a.value) if a.value and b.value else 0.0
    move: dict[str, float] = {}
    for (n, _, o1), (_, _, o2) in zip(sp.runs, sp2.runs):
        c1, c2 = o1.get("cost_per_hour"), o2.get("cost_per_hour")
        if c1 and c2:
            move[n] = max(move.get(n, 0.0), abs(math.log(c2 / c1) - base_ratio))
    by = max(move, key=lambda n: move[n]) if move and max(move.values()) > 0 else ""
    if not by:  # both costs move together: the assumption that moves them most is the one to measure
        contribs = sorted(a.contributions + b.contributions, key=lambda c: c.d_down - c.d_up)
        by = contribs[0].name if contribs else ""
    return by


def recommendation_ranges(rec, prices=None) -> RecommendationRanges:
    """Ranges of the recommendation (cost, cost per million tokens, p95s, capacity) and of the runner-up's cost.

    The replica count at a bound follows the optimizer's own screen (capacity at 80% utilisation), so a cost
    moves only where a bound needs another replica; the p95s come from shortened simulations at each bound with
    the recommended replica count. The recommendation is also simulated with every assumption at its pessimistic
    bound (full workload): a miss there is said. When the runner-up's cost range overlaps the recommendation's,
    the choice is not settled, and the assumption that moves the cost ratio between the two most is the one
    whose measurement settles it.
    """
    if rec.recommendation is None:
        return RecommendationRanges(None, None, True, "", "nothing meets the target: no range to show")
    prices = prices if prices is not None else catalog.prices()
    goal, cons = rec.goal, rec.constraints
    best = _candidate_for(rec, rec.recommendation)
    if best is None:
        return RecommendationRanges(None, None, True, "", "")
    names = by_tag("serving_memory", "serving_speed")
    if best.mode == "disaggregated":
        return _disagg_ranges(rec, best, prices)
    cfg = candidate_config(goal, best)
    sp = spread(cfg, _pick_estimate(goal, cons, prices, best, simulate_p95=True), names=names, screen=serving_screen)
    base_pick = rec.recommendation
    ranges = {
        k: rebase(sp.ranges[k], getattr(base_pick, k)) if k.startswith("p95") else sp.ranges[k]
        for k in PICK_KEYS
        if k in sp.ranges
    }
    checks, misses, note = _pessimistic(goal, best, base_pick, ranges)
    rp = PickRanges(
        label=base_pick.label, ranges=ranges, misses_at_pessimistic=misses, pessimistic_note=note, targets=checks
    )
    others = _runners_up(rec, best)
    if not others:
        return RecommendationRanges(rp, None, True, "", "no runner-up meets the target")
    ru = others[0]
    sp2 = spread(
        candidate_config(goal, ru),
        _pick_estimate(goal, cons, prices, ru, simulate_p95=False),
        names=names,
        screen=serving_screen,
    )
    ru_pick = pick_of(goal, ru)
    rr = PickRanges(
        label=ru_pick.label,
        ranges={
            k: sp2.ranges[k]
            for k in ("cost_per_hour", "cost_per_million_tokens", "capacity_requests_per_s")
            if k in sp2.ranges
        },
        misses_at_pessimistic=None,
        pessimistic_note="",
    )
    a, b = ranges.get("cost_per_hour"), rr.ranges.get("cost_per_hour")
    if a is None or b is None or a.high < b.low:
        return RecommendationRanges(
            rp, rr, True, "", f"settled: the runner-up ({ru_pick.label}) costs more even at the ends of both ranges"
        )
    by = _settling_assumption(sp, sp2, a, b)
    label = REGISTRY[by].label if by else ""
    return RecommendationRanges(
        rp,
        rr,
        False,
        by,
        (
            f"not settled: the runner-up ({ru_pick.label}) has an overlapping cost range"
            + (f"; measuring {label.split(' (')[0].lower()} ({by}) would settle it" if by else "")
        ),
    )


def training_option_ranges(cfg: RabitConfig, option) -> dict[str, Range]:
    """Ranges of a recommended training option (runtime, wall-clock, GPU-hours, cost) at its GPU count."""
    g = catalog.gpu(option.gpu)
    cg = cfg.with_(
        gpu=option.gpu, gpus_per_node=g.gpus_per_node, nodes=max(1, option.gpus // g.gpus_per_node), tp=1, pp=1, ep=1
    )
    p = plan(cg, TrainingGoal(gpus=option.gpus))
    rg = training_ranges(cg, p)
    return {
        k: rebase(rg[k], getattr(option, k))
        for k in ("runtime_s", "wall_clock_s", "gpu_hours", "cost_usd", "mfu")
        if k in rg
    }
