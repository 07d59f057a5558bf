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

Identical units (a scenario that changes nothing a unit reads) run once. The units themselves (the cases, one
run's config, a run narrowed to one configuration, the runner) are :mod:`core.decision.fleet_units`; each round
and each step between them below is its own function, handing the runs on in small frozen records. Each option carries the spare replicas
its kind's failure rate and repair time call for (:func:`core.physics.with_spares`) and what it draws
(:mod:`core.physics.power`); the assignment (:mod:`core.decision.fleet_assign`) picks one option per workload
within the fleet's GPU counts, budget and power budgets. The robust plan uses only kinds every case has, at the
smallest count any case allows, and costs at the nominal prices; each of its options meets the nominal case too
and is offered to the nominal plan, so the robust plan never costs less than the nominal one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import KW, SERIAL, Assumptions, Executor, Range
from core.catalog import Price
from core.config import DEFAULT, NOMINAL, Fleet, FleetWorkload, RabitConfig
from core.decision.fleet_assign import Assignment, FleetLimits, FleetOption, assign
from core.decision.fleet_options import availability, option_of
from core.decision.fleet_units import (
    MIXED,
    Case,
    FleetUnit,
    Progress,
    RangeUnit,
    Shape,
    UnitRunner,
    cases,
    fleet_base,
    fleet_kinds,
    kind_cap,
    mixed_unit,
    narrowed,
    run_ranges,
    run_unit,
    shape_label,
    shape_of,
    unit_for,
    workload_kinds,
)
from core.decision.goal import Pick
from core.decision.optimizer import Recommendation
from core.physics import (
    with_spares,
)

#: The keys of a pick's ranges in a fleet plan (the recommendation's, with the plan's spares on the cost).
RANGE_KEYS = ("cost_per_hour", "p95_ttft_s", "p95_itl_s", "p95_e2e_s")

RunKey = tuple[str, str, str]  # (workload, case, GPU kind or MIXED)
SizeKey = tuple[str, str, Shape, str]  # (workload, GPU kind or MIXED, configuration, case)
Options = dict[str, dict[str, list[FleetOption]]]  # case -> workload -> the options offered


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class _Runs(NamedTuple):
    """The optimizer runs of rounds 1 and 2, and the units they ran."""

    recs: dict[RunKey, Recommendation]  # round 1: each workload x case x kind's own pick
    unit_of: dict[RunKey, FleetUnit]
    sized: dict[SizeKey, Recommendation]  # round 2: a configuration one case picked, sized under another case
    robust_kinds: dict[str, list[str]]  # workload -> the kinds every case has a pick on
    distinct: int  # distinct optimizer runs made

    def rec_for(self, w: str, g: str, shape: Shape, c: str) -> Recommendation:
        """The run of ``shape`` on kind ``g`` for workload ``w`` in case ``c``: the case's own when it picked that
        configuration, else its sizing."""
        r = self.recs[(w, c, g)]
        if r.recommendation is not None and shape_of(r.recommendation) == shape:
            return r
        return self.sized[(w, g, shape, c)]

    def run_of(self, o: FleetOption) -> Recommendation | None:
        """The run an option of a plan came from (None: none with a pick)."""
        g = _key(o)
        r = self.recs.get((o.workload, o.case, g))
        if r is None or r.recommendation is None or shape_of(r.recommendation) != shape_of(o.pick):
            r = self.sized.get((o.workload, g, shape_of(o.pick), o.case))
        return r if r is not None and r.recommendation is not None else None


class _Offers(NamedTuple):
    """The options each case offers each workload, the robust ones, and the workloads left without."""

    options: Options
    robust: dict[str, list[FleetOption]]
    infeasible: tuple[tuple[str, str], ...]
    robust_infeasible: tuple[tuple[str, str], ...]


def _first_round(
    fleet: Fleet, base: RabitConfig, cs: tuple[Case, ...], prices: tuple[Price, ...], runner: UnitRunner
) -> tuple[dict[RunKey, Recommendation], dict[RunKey, FleetUnit]]:
    """Round 1: every workload x case x kind not withdrawn in that case, and each workload x case over two kinds'
    pools (:func:`core.decision.fleet_units.mixed_unit`)."""
    keys: list[RunKey] = []
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
    return dict(zip(keys, runner.run(run_unit, units, labels))), dict(zip(keys, units))


def _picked_everywhere(
    fleet: Fleet, w: FleetWorkload, g: str, cs: tuple[Case, ...], recs: dict[RunKey, Recommendation]
) -> list[Pick] | None:
    """Each case's pick of kind ``g`` for ``w``, in the cases' order (None: a case withdraws the kind, has no
    run of it or no pick)."""
    if any(c.withdrawn(g) or (w.name, c.name, g) not in recs for c in cs):
        return None
    picks = [recs[(w.name, c.name, g)].recommendation for c in cs]
    return None if any(p is None for p in picks) else picks  # type: ignore[return-value]


def _second_round(
    fleet: Fleet,
    cs: tuple[Case, ...],
    recs: dict[RunKey, Recommendation],
    unit_of: dict[RunKey, FleetUnit],
    runner: UnitRunner,
) -> _Runs:
    """Round 2: each configuration a case picked, sized under every other case of the same kind (the run narrowed
    to that configuration); the kinds every case picks on are the robust plan's candidates."""
    size_keys: list[SizeKey] = []
    size_units: list[FleetUnit] = []
    size_labels: list[str] = []
    robust_kinds: dict[str, list[str]] = {}
    for w in fleet.workloads:
        robust_kinds[w.name] = []
        for g in (*workload_kinds(fleet, w), MIXED):
            picks = _picked_everywhere(fleet, w, g, cs, recs)
            if picks is None:
                continue
            robust_kinds[w.name].append(g)
            for shape in dict.fromkeys(shape_of(p) for p in picks):
                for c, p in zip(cs, picks):
                    if shape_of(p) == shape:
                        continue
                    size_keys.append((w.name, g, shape, c.name))
                    size_units.append(narrowed(unit_of[(w.name, c.name, g)], shape))
                    size_labels.append(f"{w.name} / {c.name} / {g}: sizing {shape_label(shape)}")
    sized = dict(zip(size_keys, runner.run(run_unit, size_units, size_labels)))
    distinct = len(set(unit_of.values())) + len(set(size_units))
    return _Runs(recs, unit_of, sized, robust_kinds, distinct)


def _robust_option(
    fleet: Fleet, a: Assumptions, w: FleetWorkload, cs: tuple[Case, ...], per_case: list[Recommendation]
) -> tuple[FleetOption, FleetOption]:
    """One configuration sized for every case: (the option at each pool's most replicas over the cases, costed at
    the nominal prices and drawing at the peak load; the same configuration at the nominal load, which meets it)."""
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
    return opt, option_of(fleet, a, w, base_rec, NOMINAL)


def _robust_of_kind(
    fleet: Fleet,
    a: Assumptions,
    w: FleetWorkload,
    g: str,
    cs: tuple[Case, ...],
    runs: _Runs,
    nominal: list[FleetOption],
) -> FleetOption | None:
    """The robust option of kind ``g`` for ``w``: of the configurations the cases picked, the one whose most
    demanding case costs least (None: none is sized in every case). Each configuration at the nominal load is
    appended to ``nominal``, the nominal plan's options for ``w``."""
    best: FleetOption | None = None
    picked = [runs.recs[(w.name, c.name, g)].recommendation for c in cs]
    for shape in dict.fromkeys(shape_of(p) for p in picked if p is not None):
        per_case = [runs.rec_for(w.name, g, shape, c.name) for c in cs]
        if any(r.recommendation is None for r in per_case):
            continue
        opt, at_nominal = _robust_option(fleet, a, w, cs, per_case)
        nominal.append(at_nominal)
        if best is None or opt.key() < best.key():
            best = opt
    return best


def _case_options(
    fleet: Fleet, a: Assumptions, w: FleetWorkload, cs: tuple[Case, ...], recs: dict[RunKey, Recommendation]
) -> dict[str, list[FleetOption]]:
    """Case -> the options of ``w``: each kind's (and the two-kind run's) pick in that case."""
    out: dict[str, list[FleetOption]] = {}
    for c in cs:
        opts = []
        for g in (*workload_kinds(fleet, w), MIXED):
            r = recs.get((w.name, c.name, g))
            if r is not None and r.recommendation is not None:
                opts.append(option_of(fleet, a, w, r, c.name))
        out[c.name] = opts
    return out


def _offers(fleet: Fleet, a: Assumptions, cs: tuple[Case, ...], runs: _Runs) -> _Offers:
    """The options each case offers each workload (the nominal case also every robust configuration at the
    nominal load), each workload's robust options, and the workloads no kind can serve, nominally or robustly."""
    options: Options = {c.name: {} for c in cs}
    robust_options: dict[str, list[FleetOption]] = {}
    infeasible: list[tuple[str, str]] = []
    robust_infeasible: list[tuple[str, str]] = []
    for w in fleet.workloads:
        for case, opts in _case_options(fleet, a, w, cs, runs.recs).items():
            options[case][w.name] = opts
        if not options[NOMINAL][w.name]:
            why = "; ".join(_why_none(runs.recs.get((w.name, NOMINAL, g)), g, cs[0]) for g in workload_kinds(fleet, w))
            infeasible.append((w.name, why or "no GPU kind is allowed for it"))
        robust = [
            o
            for g in runs.robust_kinds[w.name]
            if (o := _robust_of_kind(fleet, a, w, g, cs, runs, options[NOMINAL][w.name])) is not None
        ]
        if robust:
            robust_options[w.name] = robust
        elif options[NOMINAL][w.name]:
            robust_infeasible.append(
                (w.name, "no GPU kind has a configuration that meets every scenario (withdrawn, capped or missed)")
            )
    return _Offers(_deduplicated(options), robust_options, tuple(infeasible), tuple(robust_infeasible))


def _deduplicated(options: Options) -> Options:
    """Each workload's options without duplicates (the same configuration offered twice: the first kept), in the
    assignment's order."""
    out: Options = {}
    for case, by_workload in options.items():
        out[case] = {}
        for wn, opts in by_workload.items():
            seen: dict = {}
            for o in opts:
                seen.setdefault((o.gpu, shape_of(o.pick), o.groups()), o)
            out[case][wn] = sorted(seen.values(), key=lambda o: o.key())
    return out


def _limits(fleet: Fleet, case_list: tuple[Case, ...]) -> FleetLimits:
    """What binds a plan that must hold in every case of ``case_list``: each kind's smallest count, the sites'
    power budgets and the fleet's budget."""
    caps = {}
    for g in fleet_kinds(fleet):
        vals = [v for c in case_list if (v := kind_cap(fleet, c, g)) is not None]
        if vals:
            caps[g] = min(vals)
    sites = tuple((s.name, s.power_budget_kw * KW) for s in fleet.constraints.sites if s.power_budget_kw)
    return FleetLimits(
        gpus=tuple(sorted(caps.items())), site_power_w=sites, usd_per_hour=fleet.constraints.max_usd_per_hour
    )


Ranges = dict[str, tuple[tuple[str, Range], ...]]  # workload -> its pick's ranges


def _range_round(
    fleet: Fleet, plans: tuple[Assignment, Assignment], runs: _Runs, runner: UnitRunner
) -> tuple[Ranges, Ranges, int]:
    """Round 3: the nominal and the robust picks' ranges at the assumptions' bounds, the cost's moved onto the
    option's replicas and spares: (nominal ranges, robust ranges, units run)."""
    range_keys: list[tuple[str, bool]] = []
    range_units: list[RangeUnit] = []
    range_labels: list[str] = []
    if fleet.settings.ranges:
        for is_robust, plan in zip((False, True), plans):
            for o in plan.picks:
                r = runs.run_of(o)
                if r is None:
                    continue
                range_keys.append((o.workload, is_robust))
                range_units.append(RangeUnit(r, runs.unit_of[(o.workload, o.case, _key(o))].prices))
                range_labels.append(f"{o.workload}: cost range ({'robust' if is_robust else 'nominal'})")
    got = runner.run(run_ranges, range_units, range_labels) if range_units else []
    ranges: dict[bool, Ranges] = {False: {}, True: {}}
    for (wn, is_robust), rg in zip(range_keys, got):
        chosen = plans[is_robust].pick_of(wn)
        assert chosen is not None
        moved = {k: (_scaled_range(v, chosen) if k == "cost_per_hour" else v) for k, v in rg.items() if k in RANGE_KEYS}
        ranges[is_robust][wn] = tuple(sorted(moved.items()))
    return ranges[False], ranges[True], len(range_units)


def _robust_note(
    o: FleetOption, n: FleetOption, cs: tuple[Case, ...], recs: dict[RunKey, Recommendation]
) -> RobustNote:
    """What the robust pick ``o`` of a workload costs over its nominal pick ``n``, and which case binds it: a kind
    withdrawn or missed in some case, or a case that needs more replicas."""
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
    return RobustNote(workload=o.workload, extra_per_hour=extra, case=case, why=why)


def _robust_notes(
    nominal: Assignment, robust: Assignment, cs: tuple[Case, ...], recs: dict[RunKey, Recommendation]
) -> tuple[RobustNote, ...]:
    """Every workload's robustness cost, the dearest first."""
    notes = [_robust_note(o, n, cs, recs) for o in robust.picks if (n := nominal.pick_of(o.workload)) is not None]
    notes.sort(key=lambda e: (-e.extra_per_hour, e.workload))
    return tuple(notes)


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
    runner = UnitRunner(executor, progress)
    recs, unit_of = _first_round(fleet, base, cs, prices, runner)
    runs = _second_round(fleet, cs, recs, unit_of, runner)
    offers = _offers(fleet, a, cs, runs)
    downs = {g: (availability(fleet, g).node_down, availability(fleet, g).gpus_per_node) for g in fleet_kinds(fleet)}
    plans = {c.name: assign(offers.options[c.name], _limits(fleet, (c,)), downs) for c in cs}
    robust_plan = assign(offers.robust, _limits(fleet, cs), downs)
    ranges, robust_ranges, range_units = _range_round(fleet, (plans[NOMINAL], robust_plan), runs, runner)
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
        infeasible=offers.infeasible,
        robust_infeasible=offers.robust_infeasible,
        ranges=tuple(sorted(ranges.items())),
        robust_ranges=tuple(sorted(robust_ranges.items())),
        expensive=_robust_notes(plans[NOMINAL], robust_plan, cs, runs.recs),
        units=runs.distinct + range_units,
        notes=tuple(notes),
    )


def _key(o: FleetOption) -> str:
    """The key of the runs an option came from: its GPU kind, or :data:`MIXED`."""
    return MIXED if o.mixed else o.gpu


def _what(o: FleetOption) -> str:
    if o.pools:
        return " + ".join(f"{q.instances} {q.role} x {q.gpus_per_instance} {q.gpu or o.gpu}" for q in o.pools)
    return f"{o.replicas} replicas of {o.pick.gpus_per_replica} x {o.gpu}"
