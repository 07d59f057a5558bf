"""The units of work of a fleet plan (:mod:`core.decision.fleet`): the cases it plans for, the config and the
optimizer run of one workload in one case on one GPU kind (or over two kinds' pools at once), a run narrowed to
one configuration, and the runner that hands distinct units to the executor and merges their results by position.

A unit is picklable and carries all it reads, so any executor (this process, worker processes, a Ray cluster)
gives the same result for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import Executor, Range
from core.catalog import Price
from core.config import DEFAULT, NOMINAL, Fleet, FleetWorkload, RabitConfig, Scenario, Sessions
from core.decision.goal import Constraints, Pick, ServingGoal, settings_of
from core.decision.optimizer import Recommendation, recommend
from core.decision.pick_ranges import recommendation_ranges
from core.decision.session_sizing import session_goal

Progress = Callable[[int, int, str], None]
#: The key (in place of a GPU kind) of a workload's run over all its kinds at once for disaggregated layouts whose
#: prefill and decode pools are of two different kinds: the per-kind runs cannot find those.
MIXED = "mixed kinds"


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
    rows = tuple(r for g in kinds for r in kind_prices(prices, g, case.price_factor(g)))
    return FleetUnit(ServingGoal.from_config(cfg), cons, rows)


def kind_prices(prices: tuple[Price, ...], gpu: str, factor: float) -> tuple[Price, ...]:
    rows = tuple(p for p in prices if p.gpu == gpu)
    if factor == 1.0:
        return rows
    return tuple(p.model_copy(update={"usd_per_gpu_hour": p.usd_per_gpu_hour * factor}) for p in rows)


def kind_cap(fleet: Fleet, case: Case, gpu: str) -> int | None:
    caps = [c for c in (dict(fleet.constraints.max_gpus).get(gpu), case.cap(gpu)) if c is not None]
    return min(caps) if caps else None


def unit_for(
    base: RabitConfig, fleet: Fleet, w: FleetWorkload, case: Case, gpu: str, prices: tuple[Price, ...]
) -> FleetUnit:
    """The optimizer run of one workload in one case on one GPU kind (the kind's count in that case as its
    ``max_gpus``)."""
    cfg = workload_config(base, fleet, w, case)
    cons = Constraints.from_config(cfg).model_copy(
        update={"gpus_allowed": (gpu,), "max_gpus": kind_cap(fleet, case, gpu)}
    )
    return FleetUnit(workload_goal(cfg, w, case), cons, kind_prices(prices, gpu, case.price_factor(gpu)))


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


def shape_of(p: Pick) -> Shape:
    """A pick's configuration: its layout (one replica's, or its two pools' instances), precisions and kinds."""
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


def narrowed(u: FleetUnit, shape: Shape) -> FleetUnit:
    """The run sized for one configuration only: its layout (aggregated replicas, or the disaggregated pools'
    instance shapes and kinds) and precisions."""
    layout, wf, kv, kinds = shape
    update: dict = {"layouts_allowed": tuple(dict.fromkeys(layout)), "weights_allowed": (wf,), "kv_allowed": (kv,)}
    if len(layout) == 2:
        update.update(disagg=True, pools_allowed=(layout[0], layout[1]), pool_kinds=(kinds[0], kinds[1]))
    else:
        update.update(disagg=False, pools_allowed=None, pool_kinds=None)
    return FleetUnit(u.goal, u.constraints.model_copy(update=update), u.prices)


def shape_label(shape: Shape) -> str:
    """A configuration as a progress line names it."""
    layout, kinds = shape[0], shape[3]
    if len(layout) == 2:
        on = (f" {kinds[0]}", f" {kinds[1]}") if kinds[0] != kinds[1] else ("", "")
        return (
            f"prefill {layout[0][0]}{on[0]} GPUs TP {layout[0][1]} + decode {layout[1][0]}{on[1]} GPUs TP "
            f"{layout[1][1]}"
        )
    return f"{layout[0][0]} GPUs TP {layout[0][1]}"


class UnitRunner:
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
