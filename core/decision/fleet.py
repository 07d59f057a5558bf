"""Fleet planning: the cheapest fleet for many serving workloads, the robust one that meets every scenario, and
what robustness costs.

A fleet (:class:`core.config.Fleet`) is planned in three rounds of independent units of work, each an optimizer
run (:func:`core.decision.optimizer.recommend`) handed to the executor the edge supplies
(:class:`core.base.Executor`: this process, a pool of worker processes, a Ray cluster) and merged by position,
so every executor gives the same plan byte for byte::

    1. per workload x case x GPU kind     the cheapest configuration of that kind that meets the workload's p95
                                          targets in that case (the nominal case: the workloads as described;
                                          each scenario: traffic, lengths, prices scaled, kinds withdrawn or capped)
    2. per workload x kind x configuration x case
                                          each configuration a case picked, sized under every other case (the
                                          search restricted to that layout and those precisions): the robust
                                          configuration of a kind is the one whose most demanding case costs least
    3. per chosen pick                    its cost range at the assumptions' bounds (core.decision.pick_ranges)

Identical units (a scenario that changes nothing a unit reads) run once. Each option carries the spare replicas
its kind's failure rate and repair time call for (:func:`core.physics.with_spares`) and what it draws
(:mod:`core.physics.power`); the assignment (:mod:`core.decision.fleet_assign`) picks one option per workload
within the fleet's GPU counts, budget and power budgets. The robust plan uses only kinds every case has, at the
smallest count any case allows, and costs at the nominal prices; each of its options meets the nominal case too
and is offered to the nominal plan, so the robust plan never costs less than the nominal one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import HOUR_S, KW, SERIAL, Executor, Range
from core.catalog import Price
from core.config import DEFAULT, NOMINAL, Fleet, FleetWorkload, RabitConfig, Scenario, Sessions
from core.decision.fleet_assign import Assignment, FleetLimits, FleetOption, assign
from core.decision.fleet_options import availability, option_of
from core.decision.goal import Constraints, Pick, ServingGoal, settings_of
from core.decision.optimizer import Recommendation, recommend
from core.decision.pick_ranges import recommendation_ranges
from core.decision.session_sizing import session_goal
from core.physics import (
    with_spares,
)

Progress = Callable[[int, int, str], None]
#: The key (in place of a GPU kind) of a workload's run over all its kinds at once for disaggregated layouts whose
#: prefill and decode pools are of two different kinds: the per-kind runs cannot find those.
MIXED = "mixed kinds"
#: The keys of a pick's ranges in a fleet plan (the recommendation's, with the plan's spares on the cost).
RANGE_KEYS = ("cost_per_hour", "p95_ttft_s", "p95_itl_s", "p95_e2e_s")


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetUnit(NamedTuple):
    """One optimizer run of a fleet plan, with all it reads (picklable, so any executor can run it)."""

    goal: ServingGoal
    constraints: Constraints
    prices: tuple[Price, ...]


class RangeUnit(NamedTuple):
    """One pick's ranges at the assumptions' bounds."""

    rec: Recommendation
    prices: tuple[Price, ...]


def run_unit(u: FleetUnit) -> Recommendation:
    """One optimizer run: the recommendation, its candidates cut to those simulated (what the ranges read)."""
    rec = recommend(u.goal, u.constraints, u.prices, alternatives=False)
    return rec.model_copy(update={"candidates": tuple(c for c in rec.candidates if c.simulated)})


def run_ranges(u: RangeUnit) -> dict[str, Range]:
    """The pick's ranges (cost per hour, p95s) at the assumptions' bounds."""
    rr = recommendation_ranges(u.rec, u.prices)
    return dict(rr.recommendation.ranges) if rr.recommendation is not None else {}


# --- the cases ---------------------------------------------------------------------------------------------------


class Case(_F):
    """The nominal case or one scenario, as the plan reads it."""

    name: str
    scenario: Scenario | None = None

    def rate_factor(self, w: FleetWorkload) -> float:
        s = self.scenario
        return s.rate_factor if s is not None and s.applies_to(w.name) else 1.0

    def lengths(self, w: FleetWorkload) -> tuple[int, int]:
        s = self.scenario
        if s is None or not s.applies_to(w.name):
            return w.input_tokens, w.output_tokens
        return max(1, round(w.input_tokens * s.input_factor)), max(1, round(w.output_tokens * s.output_factor))

    def withdrawn(self, gpu: str) -> bool:
        s = self.scenario
        return s is not None and (gpu in s.withdraw or dict(s.cap).get(gpu) == 0)

    def price_factor(self, gpu: str) -> float:
        return self.scenario.price_of(gpu) if self.scenario is not None else 1.0

    def cap(self, gpu: str) -> int | None:
        return dict(self.scenario.cap).get(gpu) if self.scenario is not None else None


def cases(fleet: Fleet) -> tuple[Case, ...]:
    """The nominal case, then each scenario in the file's order."""
    return (Case(name=NOMINAL),) + tuple(Case(name=s.name, scenario=s) for s in fleet.scenarios)


def fleet_kinds(fleet: Fleet) -> tuple[str, ...]:
    """The GPU kinds the fleet may use: the constraints' (every kind of the catalog when none is named), hosted by a
    site."""
    named = fleet.constraints.gpus or tuple(sorted(catalog.gpus()))
    return tuple(g for g in named if fleet.constraints.site_of(g) is not None)


def workload_kinds(fleet: Fleet, w: FleetWorkload) -> tuple[str, ...]:
    return tuple(g for g in fleet_kinds(fleet) if not w.gpus or g in w.gpus)


def fleet_base(cfg: RabitConfig) -> RabitConfig:
    """What a fleet plan reads of the shared config: the settings every serving candidate inherits
    (:func:`core.decision.goal.settings_of`: assumptions, fabric, block size, cached prefix, speculative decoding,
    engine), the serving workload's scheduler and the optimizer's precisions and providers (``targets``); every
    other field at its default, so a change elsewhere (the sidebar's GPU, a training input) keeps a plan."""
    return settings_of(cfg).model_copy(update={"workload": cfg.workload, "targets": cfg.targets})


def workload_config(base: RabitConfig, fleet: Fleet, w: FleetWorkload, case: Case) -> RabitConfig:
    """The config one workload's optimizer runs take in one case: the shared settings of ``base`` (assumptions,
    engine, fabric, block size), the workload's model, mean lengths, peak rate and p95 targets, and the fleet's
    plan settings (the same path ``rabit recommend`` builds from its flags)."""
    s = fleet.settings
    i, o = case.lengths(w)
    return base.with_(
        model=w.model or DEFAULT.model,
        custom_model=w.custom_model,
        input_tokens=i,
        output_tokens=o,
        fleet=None,
        workload=base.workload.with_(
            rate_per_s=w.design_rate_per_s * case.rate_factor(w), lengths=w.lengths, spread=w.spread
        ),
        targets=base.targets.with_(
            p95_ttft_s=w.p95_ttft_s,
            p95_itl_s=w.p95_itl_s,
            p95_e2e_s=w.p95_e2e_s,
            requests_per_simulation=s.requests_per_simulation,
            max_simulations=s.max_simulations,
            price_kind=s.price_kind,
            price_policy=s.price_policy,
            gpus_allowed=workload_kinds(fleet, w),
            max_gpus=None,
            max_usd_per_hour=None,
        ),
    )


def mixed_unit(
    base: RabitConfig, fleet: Fleet, w: FleetWorkload, case: Case, prices: tuple[Price, ...]
) -> FleetUnit | None:
    """The run of one workload in one case over every kind it may use there, for disaggregated layouts whose two
    pools are of two kinds of one vendor (None: no two such kinds, or disaggregation switched off). Each kind's count in that
    case is kept by the assignment, which counts each pool against its own kind."""
    kinds = tuple(g for g in workload_kinds(fleet, w) if not case.withdrawn(g))
    cfg = workload_config(base, fleet, w, case)
    cons = Constraints.from_config(cfg)
    vendors = [catalog.gpu(g).vendor for g in kinds]
    if w.agents is not None or not cons.disagg or all(vendors.count(v) < 2 for v in vendors):
        return None  # no two kinds of one vendor: no engine moves a KV cache across vendors (kv_pool_refusal)
    cons = cons.model_copy(update={"gpus_allowed": kinds, "max_gpus": None, "mixed_pools": True})
    rows = tuple(r for g in kinds for r in _kind_prices(prices, g, case.price_factor(g)))
    return FleetUnit(ServingGoal.from_config(cfg), cons, rows)


def _kind_prices(prices: tuple[Price, ...], gpu: str, factor: float) -> tuple[Price, ...]:
    rows = tuple(p for p in prices if p.gpu == gpu)
    if factor == 1.0:
        return rows
    return tuple(p.model_copy(update={"usd_per_gpu_hour": p.usd_per_gpu_hour * factor}) for p in rows)


def _cap(fleet: Fleet, case: Case, gpu: str) -> int | None:
    caps = [c for c in (dict(fleet.constraints.max_gpus).get(gpu), case.cap(gpu)) if c is not None]
    return min(caps) if caps else None


def unit_for(
    base: RabitConfig, fleet: Fleet, w: FleetWorkload, case: Case, gpu: str, prices: tuple[Price, ...]
) -> FleetUnit:
    """The optimizer run of one workload in one case on one GPU kind (the kind's count in that case as its
    ``max_gpus``)."""
    cfg = workload_config(base, fleet, w, case)
    cons = Constraints.from_config(cfg).model_copy(update={"gpus_allowed": (gpu,), "max_gpus": _cap(fleet, case, gpu)})
    return FleetUnit(workload_goal(cfg, w, case), cons, _kind_prices(prices, gpu, case.price_factor(gpu)))


def workload_goal(cfg: RabitConfig, w: FleetWorkload, case: Case) -> ServingGoal:
    """The optimizer's goal of one workload in one case: its requests, or for a workload of agents their sessions
    (:func:`core.decision.session_sizing.session_goal`) with the agents scaled as the peak and the case's traffic
    scale the rate (rounded up) and the sessions' tokens as the case scales the lengths."""
    if w.agents is None:
        return ServingGoal.from_config(cfg)
    assert w.p95_ttft_s is not None  # FleetWorkload requires it with agents
    s = w.sessions or Sessions()
    sc = case.scenario
    if sc is not None and sc.applies_to(w.name):
        s = s.with_(
            first_input=s.first_input.model_copy(update={"mean": s.first_input.mean * sc.input_factor}),
            new_input=s.new_input.model_copy(update={"mean": s.new_input.mean * sc.input_factor}),
            output=s.output.model_copy(update={"mean": s.output.mean * sc.output_factor}),
        )
    # rounded up; a product's floating-point excess over a whole number (10 x 1.1) is not one agent more
    agents = max(1, math.ceil(w.agents * w.peak_over_mean * case.rate_factor(w) - 1e-9))
    return session_goal(cfg, s, agents=agents, ttft_p95_s=w.p95_ttft_s)


Layout4 = tuple[int, int, int, int]  # GPUs, TP, PP, EP of one replica or instance
#: a configuration: (its layout: one replica's, or the prefill and decode instances'), weights, KV cache, and the
#: GPU kind of the replica or of each pool
Shape = tuple[tuple[Layout4, ...], str, str, tuple[str, ...]]


def _shape(p: Pick) -> Shape:
    if p.prefill is not None and p.decode is not None:
        q, d = p.prefill, p.decode
        layout: tuple[Layout4, ...] = (
            (q.gpus_per_instance, q.tp, q.pp, q.ep),
            (d.gpus_per_instance, d.tp, d.pp, d.ep),
        )
        kinds: tuple[str, ...] = (q.gpu, d.gpu)
    else:
        layout = ((p.gpus_per_replica, p.tp, p.pp, p.ep),)
        kinds = (p.gpu,)
    return (layout, p.weights, p.kv_dtype, kinds)


def _narrowed(u: FleetUnit, shape: Shape) -> FleetUnit:
    """The run sized for one configuration only: its layout (aggregated replicas, or the disaggregated pools'
    instance shapes and kinds) and precisions."""
    layout, wf, kv, kinds = shape
    update: dict = {"layouts_allowed": tuple(dict.fromkeys(layout)), "weights_allowed": (wf,), "kv_allowed": (kv,)}
    if len(layout) == 2:
        update.update(disagg=True, pools_allowed=(layout[0], layout[1]), pool_kinds=(kinds[0], kinds[1]))
    else:
        update.update(disagg=False, pools_allowed=None, pool_kinds=None)
    return FleetUnit(u.goal, u.constraints.model_copy(update=update), u.prices)


def _shape_label(shape: Shape) -> str:
    layout, kinds = shape[0], shape[3]
    if len(layout) == 2:
        on = (f" {kinds[0]}", f" {kinds[1]}") if kinds[0] != kinds[1] else ("", "")
        return (
            f"prefill {layout[0][0]}{on[0]} GPUs TP {layout[0][1]} + decode {layout[1][0]}{on[1]} GPUs TP "
            f"{layout[1][1]}"
        )
    return f"{layout[0][0]} GPUs TP {layout[0][1]}"


class _Runner:
    """Runs units through the executor, each distinct unit once, reporting every finished one."""

    def __init__(self, executor: Executor, progress: Progress | None) -> None:
        self.executor, self.progress = executor, progress
        self.done = 0
        self.total = 0

    def run(self, fn, tasks: list, labels: list[str], expected_more: int = 0) -> list:
        index: dict = {}
        distinct: list = []
        where: list[int] = []
        for t in tasks:
            key = t if isinstance(t, FleetUnit) else id(t)
            if key not in index:
                index[key] = len(distinct)
                distinct.append(t)
            where.append(index[key])
        first = {i: labels[k] for k, i in reversed(list(enumerate(where)))}
        self.total = self.done + len(distinct) + expected_more
        out = []
        for i, res in enumerate(self.executor.map(fn, distinct)):
            out.append(res)
            self.done += 1
            if self.progress:
                self.progress(self.done, self.total, first[i])
        return [out[i] for i in where]


# --- options -----------------------------------------------------------------------------------------------------


# --- the plan ----------------------------------------------------------------------------------------------------


class RobustNote(_F):
    """What making one workload robust costs, and which case binds it."""

    workload: str
    extra_per_hour: float
    case: str
    why: str


class FleetPlan(_F):
    """The plans (nominal, robust, each scenario's own), what robustness costs, the workloads no allowed kind can
    serve, and the cost ranges of the nominal and robust picks."""

    fleet: Fleet
    nominal: Assignment
    robust: Assignment
    scenarios: tuple[tuple[str, Assignment], ...]
    infeasible: tuple[tuple[str, str], ...]  # (workload, why): no allowed GPU kind can serve it
    robust_infeasible: tuple[tuple[str, str], ...]  # (workload, why): no configuration meets every case
    ranges: tuple[tuple[str, tuple[tuple[str, Range], ...]], ...] = ()  # nominal picks' ranges, by workload
    robust_ranges: tuple[tuple[str, tuple[tuple[str, Range], ...]], ...] = ()
    expensive: tuple[RobustNote, ...] = ()
    units: int = 0  # distinct optimizer runs made
    notes: tuple[str, ...] = ()

    @property
    def robustness_cost_per_hour(self) -> float:
        return self.robust.cost_per_hour - self.nominal.cost_per_hour

    def ranges_of(self, workload: str, robust: bool = False) -> dict[str, Range]:
        return dict(dict(self.robust_ranges if robust else self.ranges).get(workload, ()))

    def scenario(self, name: str) -> Assignment:
        return dict(self.scenarios)[name]


def _counts(p: Pick) -> tuple[int, ...]:
    """A pick's replicas, or its prefill and decode instances."""
    return (p.prefill.instances, p.decode.instances) if p.prefill and p.decode else (p.replicas,)


def _sizes(p: Pick) -> tuple[int, ...]:
    """The GPUs of one replica, or of one prefill and one decode instance."""
    return (
        (p.prefill.gpus_per_instance, p.decode.gpus_per_instance) if p.prefill and p.decode else (p.gpus_per_replica,)
    )


def _why_none(rec: Recommendation | None, gpu: str, case: Case) -> str:
    if rec is None:
        return f"{gpu}: withdrawn in {case.name}"
    e = rec.explanation
    return f"{gpu}: {e.relax or e.summary}"


def _scaled_range(r: Range, option: FleetOption) -> Range:
    """The recommendation's cost range moved onto the option: each end is a replica count (``cost / (GPUs per
    replica x price)``, never below the option's own at the pessimistic end) given its spares, times the price. A
    disaggregated option's ends scale with its cost (its pools' counts at the bounds are not one number)."""
    per_replica = option.pick.gpus_per_replica * option.usd_per_gpu_hour
    base = option.pick.cost_per_hour

    def end(cost: float, pessimistic: bool) -> float:
        if option.pools:
            moved = cost * option.cost_per_hour / base if base > 0 else cost
            return max(moved, option.cost_per_hour) if pessimistic else min(moved, option.cost_per_hour)
        if not math.isfinite(cost) or per_replica <= 0:
            return cost
        n = max(1, round(cost / per_replica))
        n = max(n, option.replicas) if pessimistic else min(n, option.replicas)
        return with_spares(n, option.replica_down_frac) * per_replica

    return r.model_copy(update={"value": option.cost_per_hour, "low": end(r.low, False), "high": end(r.high, True)})


def plan_fleet(
    fleet: Fleet,
    base: RabitConfig = DEFAULT,
    prices: tuple[Price, ...] | None = None,
    *,
    executor: Executor = SERIAL,
    progress: Progress | None = None,
) -> FleetPlan:
    """Plan ``fleet`` (see the module docstring) with the shared settings of ``base`` (its assumptions, engine,
    fabric, block size) and ``prices`` (the catalog's when None).

    ``executor``: runs the units (this process, one after another, when none is supplied; every executor gives
    the same plan). ``progress``: an optional ``(done, total, label)`` callable, called as each unit finishes
    (never stored); the total grows as each round's units become known.
    """
    prices = prices if prices is not None else catalog.prices()
    base = fleet_base(base)
    a = base.assumptions
    cs = cases(fleet)
    runner = _Runner(executor, progress)
    # 1. every workload x case x kind
    keys: list[tuple[str, str, str]] = []
    units: list[FleetUnit] = []
    labels: list[str] = []
    for w in fleet.workloads:
        for c in cs:
            for g in workload_kinds(fleet, w):
                if c.withdrawn(g):
                    continue
                keys.append((w.name, c.name, g))
                units.append(unit_for(base, fleet, w, c, g, prices))
                labels.append(f"{w.name} / {c.name} / {g}")
            mu = mixed_unit(base, fleet, w, c, prices)
            if mu is not None:
                keys.append((w.name, c.name, MIXED))
                units.append(mu)
                labels.append(f"{w.name} / {c.name} / prefill and decode on two kinds")
    recs: dict[tuple[str, str, str], Recommendation] = dict(zip(keys, runner.run(run_unit, units, labels)))
    unit_of = dict(zip(keys, units))

    # 2. each configuration a case picked, sized under every other case of the same kind
    size_keys: list[tuple[str, str, tuple, str]] = []
    size_units: list[FleetUnit] = []
    size_labels: list[str] = []
    robust_kinds: dict[str, list[str]] = {}
    for w in fleet.workloads:
        robust_kinds[w.name] = []
        for g in (*workload_kinds(fleet, w), MIXED):
            if any(c.withdrawn(g) or (w.name, c.name, g) not in recs for c in cs):
                continue
            picks = [recs[(w.name, c.name, g)].recommendation for c in cs]
            if any(p is None for p in picks):
                continue
            robust_kinds[w.name].append(g)
            shapes = list(dict.fromkeys(_shape(p) for p in picks if p is not None))
            for shape in shapes:
                for c, p in zip(cs, picks):
                    if p is not None and _shape(p) == shape:
                        continue
                    size_keys.append((w.name, g, shape, c.name))
                    size_units.append(_narrowed(unit_of[(w.name, c.name, g)], shape))
                    size_labels.append(f"{w.name} / {c.name} / {g}: sizing {_shape_label(shape)}")
    sized = dict(zip(size_keys, runner.run(run_unit, size_units, size_labels)))

    def rec_for(w: str, g: str, shape: tuple, c: str) -> Recommendation:
        r = recs[(w, c, g)]
        if r.recommendation is not None and _shape(r.recommendation) == shape:
            return r
        return sized[(w, g, shape, c)]

    # the options of every case, and the robust ones
    nominal = cs[0]
    options: dict[str, dict[str, list[FleetOption]]] = {c.name: {} for c in cs}
    robust_options: dict[str, list[FleetOption]] = {}
    infeasible: list[tuple[str, str]] = []
    robust_infeasible: list[tuple[str, str]] = []
    for w in fleet.workloads:
        for c in cs:
            opts = []
            for g in (*workload_kinds(fleet, w), MIXED):
                r = recs.get((w.name, c.name, g))
                if r is not None and r.recommendation is not None:
                    opts.append(option_of(fleet, a, w, r, c.name))
            options[c.name][w.name] = opts
        if not options[NOMINAL][w.name]:
            kinds = workload_kinds(fleet, w)
            why = "; ".join(_why_none(recs.get((w.name, NOMINAL, g)), g, nominal) for g in kinds)
            infeasible.append((w.name, why or "no GPU kind is allowed for it"))
        robust: list[FleetOption] = []
        for g in robust_kinds[w.name]:
            best: FleetOption | None = None
            picked = [recs[(w.name, c.name, g)].recommendation for c in cs]
            nominal_price = None
            for shape in dict.fromkeys(_shape(p) for p in picked if p is not None):
                per_case = [rec_for(w.name, g, shape, c.name) for c in cs]
                if any(r.recommendation is None for r in per_case):
                    continue
                # each case's replicas (or prefill and decode instances); the robust count is each one's most
                counts = [_counts(r.recommendation) for r in per_case]  # type: ignore[arg-type]
                most = tuple(max(c[i] for c in counts) for i in range(len(counts[0])))
                need = [sum(c) for c in counts]
                binding = cs[need.index(max(need))].name
                base_rec = per_case[0]
                bp = base_rec.recommendation
                assert bp is not None
                nominal_price = bp.cost_per_hour / sum(k * g for k, g in zip(_counts(bp), _sizes(bp)))
                nominal_pools = (
                    (bp.prefill.usd_per_gpu_hour, bp.decode.usd_per_gpu_hour)
                    if bp.prefill is not None and bp.decode is not None
                    else None
                )
                # the peak load: the case with the most traffic per replica of this configuration
                peak = max(r.goal.rate_per_s for r in per_case)
                opt = option_of(
                    fleet,
                    a,
                    w,
                    per_case[need.index(max(need))],
                    binding,
                    replicas=most,
                    peak_rate_per_s=peak,
                    usd_per_gpu_hour=nominal_price,
                    pool_prices=nominal_pools,
                )
                # the same configuration at the nominal load: offered to the nominal plan (it meets it)
                at_nominal = option_of(fleet, a, w, base_rec, NOMINAL)
                options[NOMINAL][w.name].append(at_nominal)
                if best is None or opt.key() < best.key():
                    best = opt
            if best is not None:
                robust.append(best)
        if robust:
            robust_options[w.name] = robust
        elif options[NOMINAL][w.name]:
            robust_infeasible.append(
                (w.name, "no GPU kind has a configuration that meets every scenario (withdrawn, capped or missed)")
            )
    # drop duplicates (the same configuration offered twice) keeping the first
    for c in cs:
        for wn, opts in options[c.name].items():
            seen: dict = {}
            for o in opts:
                seen.setdefault((o.gpu, _shape(o.pick), o.groups()), o)
            options[c.name][wn] = sorted(seen.values(), key=lambda o: o.key())

    downs = {g: (availability(fleet, g).node_down, availability(fleet, g).gpus_per_node) for g in fleet_kinds(fleet)}

    def limits(case_list: tuple[Case, ...]) -> FleetLimits:
        caps = {}
        for g in fleet_kinds(fleet):
            vals = [v for c in case_list if (v := _cap(fleet, c, g)) is not None]
            if vals:
                caps[g] = min(vals)
        sites = tuple((s.name, s.power_budget_kw * KW) for s in fleet.constraints.sites if s.power_budget_kw)
        return FleetLimits(
            gpus=tuple(sorted(caps.items())), site_power_w=sites, usd_per_hour=fleet.constraints.max_usd_per_hour
        )

    plans = {c.name: assign(options[c.name], limits((c,)), downs) for c in cs}
    robust_plan = assign(robust_options, limits(cs), downs)

    # 3. the chosen picks' ranges
    range_keys: list[tuple[str, bool]] = []
    range_units: list[RangeUnit] = []
    range_labels: list[str] = []
    if fleet.settings.ranges:
        for is_robust, plan in ((False, plans[NOMINAL]), (True, robust_plan)):
            for o in plan.picks:
                w = fleet.workload(o.workload)
                g = _key(o)
                r = recs.get((o.workload, o.case, g))
                if r is None or r.recommendation is None or _shape(r.recommendation) != _shape(o.pick):
                    r = sized.get((o.workload, g, _shape(o.pick), o.case))
                if r is None or r.recommendation is None:
                    continue
                range_keys.append((o.workload, is_robust))
                range_units.append(RangeUnit(r, unit_of[(w.name, o.case, g)].prices))
                range_labels.append(f"{o.workload}: cost range ({'robust' if is_robust else 'nominal'})")
    got = runner.run(run_ranges, range_units, range_labels) if range_units else []
    ranges: dict[bool, dict[str, tuple[tuple[str, Range], ...]]] = {False: {}, True: {}}
    for (wn, is_robust), rg in zip(range_keys, got):
        plan = robust_plan if is_robust else plans[NOMINAL]
        chosen = plan.pick_of(wn)
        assert chosen is not None
        moved = {k: (_scaled_range(v, chosen) if k == "cost_per_hour" else v) for k, v in rg.items() if k in RANGE_KEYS}
        ranges[is_robust][wn] = tuple(sorted(moved.items()))

    expensive = []
    for o in robust_plan.picks:
        n = plans[NOMINAL].pick_of(o.workload)
        if n is None:
            continue
        extra = o.cost_per_hour - n.cost_per_hour
        case = o.case
        what = _what(o)
        if o.kinds != n.kinds:
            kn = _key(n)
            out_kind = next((k for k in n.kinds if any(c.withdrawn(k) for c in cs)), None)
            gone = [c.name for c in cs if (out_kind and c.withdrawn(out_kind)) or (o.workload, c.name, kn) not in recs]
            missed = [c.name for c in cs if (r := recs.get((o.workload, c.name, kn))) and r.recommendation is None]
            case = (gone + missed + [o.case])[0]
            names = " + ".join(n.kinds)
            why = (
                f"{out_kind or names} is withdrawn in {', '.join(gone)}"
                if gone
                else f"no {names} configuration meets {', '.join(missed)}"
            ) + f": {what} instead of {_what(n)}"
        elif extra > 0:
            why = f"{o.case} needs {what} where the nominal plan runs {n.replicas}"
        else:
            why = "the nominal configuration meets every scenario"
        expensive.append(RobustNote(workload=o.workload, extra_per_hour=extra, case=case, why=why))
    expensive.sort(key=lambda e: (-e.extra_per_hour, e.workload))
    notes = []
    if any(a_.failure_rate_per_gpu_hour for a_ in fleet.availability):
        notes.append(
            "spare replicas keep the targets with the expected share of nodes down; the totals pool the spares of "
            "the workloads that share a GPU kind"
        )
    return FleetPlan(
        fleet=fleet,
        nominal=plans[NOMINAL],
        robust=robust_plan,
        scenarios=tuple((c.name, plans[c.name]) for c in cs[1:]),
        infeasible=tuple(infeasible),
        robust_infeasible=tuple(robust_infeasible),
        ranges=tuple(sorted(ranges[False].items())),
        robust_ranges=tuple(sorted(ranges[True].items())),
        expensive=tuple(expensive),
        units=len(set(units)) + len(set(size_units)) + len(range_units),
        notes=tuple(notes),
    )


def _key(o: FleetOption) -> str:
    """The key of the runs an option came from: its GPU kind, or :data:`MIXED`."""
    return MIXED if o.mixed else o.gpu


def _what(o: FleetOption) -> str:
    if o.pools:
        return " + ".join(f"{q.instances} {q.role} x {q.gpus_per_instance} {q.gpu or o.gpu}" for q in o.pools)
    return f"{o.replicas} replicas of {o.pick.gpus_per_replica} x {o.gpu}"


def tokens_per_hour(w: FleetWorkload) -> float:
    """Output tokens one workload produces per hour at its mean rate."""
    return w.rate_per_s * w.output_tokens * HOUR_S
