"""The fleet's assignment: one option per workload, the cheapest set that keeps every constraint of the whole fleet.

Each workload has up to one option per GPU kind, and one whose disaggregated pools are of two kinds of one vendor
(prefill on one, decode on another), (:class:`FleetOption`: a configuration, its replicas and spares, cost and power; a
mixed-kind option counts each pool's GPUs, price and power against its own kind and site). Without a constraint across workloads the cheapest option of each workload is the plan. With
GPU counts per kind, a budget per hour or a power budget per site, the plan is the integer program::

    minimise   sum_w sum_o c_wo x_wo
    subject to sum_o x_wo = 1                                  every workload served once
               sum_{w,o} g_wok x_wo <= cap_k                  GPUs available of each kind (g_wok: o's GPUs of kind k)
               sum_{w,o} p_wos x_wo <= budget_s                each site's power budget [W] (p_wos: o's draw at s)
               sum_w sum_o c_wo x_wo <= budget                 the budget per hour
               x_wo in {0, 1}

solved exactly (HiGHS through :func:`scipy.optimize.milp`). When no assignment keeps them, the workload of the
lowest priority (the largest ``priority``; of equal priority the one whose cheapest option needs the most GPUs) is
left out and said so, until one does.

Pooling: workloads that share a GPU kind share its spare capacity. A spare node can take the replicas of any of
them whose replicas fit in one node, so the pool keeps ``ceil(N / (1 - d)) - N`` spare nodes for its ``N`` nodes
(:func:`core.physics.with_spares`) instead of each workload's own spare replicas; the totals say what the pool
saves (a plan's cost is the sum of its picks', each with its own spares; the pooled cost is beside it).
Replicas over several nodes keep their own spares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import HOUR_S, KWH_J
from core.decision.goal import Pick
from core.physics import node_down_frac, with_spares


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PoolCount(_F):
    """One pool of a disaggregated option: its serving instances, their size and its spares; in a mixed-kind option
    (prefill on one GPU kind, decode on another) also its own kind, price, site and power."""

    role: str  # "prefill" or "decode"
    instances: int
    gpus_per_instance: int
    spares: int = 0
    gpu: str = ""  # empty: the option's kind
    usd_per_gpu_hour: float | None = None  # None: the option's price
    site: str = ""
    power_w: float = 0.0  # at the design load (a mixed-kind option's; otherwise the option's power_w is the sum)


class FleetOption(_F):
    """One way to serve one workload: the recommendation's pick on one GPU kind, its spares, cost and power. A
    disaggregated pick counts its prefill and decode pools apart (``pools``: instances, size and spares of each);
    ``replicas`` and ``spare_replicas`` are then both pools' sums."""

    workload: str
    gpu: str
    #: the optimizer's pick (every field its recommendation carries: layout, precisions, replicas, p95s, ...)
    pick: Pick
    #: serving replicas (a robust option: the most any case needs)
    replicas: int
    spare_replicas: int = 0
    usd_per_gpu_hour: float
    site: str
    #: what the site supplies at the design (peak) load, and the energy per million output tokens at the mean load
    power_w: float
    energy_j_per_token: float | None = None
    mean_tokens_per_s: float = 0.0  # output tokens at the workload's mean rate
    replica_down_frac: float = 0.0  # the share of the time one replica is down (its spares follow it)
    utilisation: float
    #: the case whose recommendation this option is (its cost range comes from there); for a robust option, the
    #: case that needs the most replicas
    case: str
    priority: int = 1
    adapters: int = 0
    pools: tuple[PoolCount, ...] = ()

    @property
    def gpus_per_replica(self) -> int:
        return self.pick.gpus_per_replica

    @property
    def mixed(self) -> bool:
        """A disaggregated option whose prefill and decode pools are of two GPU kinds."""
        return any(q.gpu and q.gpu != self.gpu for q in self.pools)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The GPU kinds it uses (one, or a mixed-kind option's two)."""
        return tuple(dict.fromkeys(q.gpu or self.gpu for q in self.pools)) if self.pools else (self.gpu,)

    def groups_on(self, kind: str) -> tuple[tuple[int, int, int], ...]:
        """:meth:`groups` of one GPU kind."""
        if self.pools:
            return tuple(
                (q.instances, q.gpus_per_instance, q.spares) for q in self.pools if (q.gpu or self.gpu) == kind
            )
        return self.groups() if kind == self.gpu else ()

    def gpus_of(self, kind: str) -> int:
        """GPUs with spares of one kind."""
        return sum((n + s) * g for n, g, s in self.groups_on(kind))

    def price_of(self, kind: str) -> float:
        """USD per GPU-hour of one of its kinds."""
        for q in self.pools:
            if (q.gpu or self.gpu) == kind and q.usd_per_gpu_hour is not None:
                return q.usd_per_gpu_hour
        return self.usd_per_gpu_hour

    def power_on(self, kind: str) -> float:
        """What its GPUs of one kind draw at the design load [W]."""
        if self.mixed:
            return sum(q.power_w for q in self.pools if (q.gpu or self.gpu) == kind)
        return self.power_w if kind == self.gpu else 0.0

    def power_at(self, site: str) -> float:
        """What it draws at one site at the design load [W]."""
        if self.mixed:
            return sum(q.power_w for q in self.pools if q.site == site)
        return self.power_w if site == self.site else 0.0

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(q.site for q in self.pools)) if self.mixed else (self.site,)

    def groups(self) -> tuple[tuple[int, int, int], ...]:
        """(serving instances, GPUs each, spares) of each group of equal instances: the replicas, or each pool."""
        if self.pools:
            return tuple((q.instances, q.gpus_per_instance, q.spares) for q in self.pools)
        return ((self.replicas, self.pick.gpus_per_replica, self.spare_replicas),)

    @property
    def mode(self) -> str:
        """``aggregated`` (replicas) or ``disaggregated`` (prefill and decode pools)."""
        return "disaggregated" if self.pools else "aggregated"

    @property
    def label(self) -> str:
        """The configuration with this option's counts (a robust option's replicas are not its pick's)."""
        p = self.pick
        fmt = f"{p.weights} weights, {p.kv_dtype} KV"
        if self.pools:
            parts = []
            for q in self.pools:
                pool = p.prefill if q.role == "prefill" else p.decode
                tp = pool.tp if pool is not None else 1
                parts.append(f"{q.instances} {q.role} x {q.gpus_per_instance} {q.gpu or self.gpu} (TP {tp})")
            return f"disaggregated {' + '.join(parts)} ({fmt})"
        layout = f"TP {p.tp}" + (f" x PP {p.pp}" if p.pp > 1 else "") + (f", EP {p.ep}" if p.ep > 1 else "")
        n = self.replicas
        return f"{n} replica{'s' if n != 1 else ''} of {p.gpus_per_replica} x {self.gpu} ({layout}, {fmt})"

    @property
    def serving_gpus(self) -> int:
        return sum(n * g for n, g, _ in self.groups())

    @property
    def spare_gpus(self) -> int:
        return sum(s * g for _, g, s in self.groups())

    @property
    def gpus(self) -> int:
        """GPUs with spares."""
        return self.serving_gpus + self.spare_gpus

    @property
    def cost_per_hour(self) -> float:
        """With spares [USD/h]."""
        return sum(self.gpus_of(k) * self.price_of(k) for k in self.kinds)

    @property
    def cost_per_million_tokens(self) -> float | None:
        """With spares, per million output tokens at the workload's mean rate [USD]."""
        return self.cost_per_hour / (self.mean_tokens_per_s * HOUR_S) * 1e6 if self.mean_tokens_per_s > 0 else None

    @property
    def energy_kwh_per_million_tokens(self) -> float | None:
        """The site's energy per million output tokens at the mean load [kWh]."""
        return self.energy_j_per_token * 1e6 / KWH_J if self.energy_j_per_token is not None else None

    def key(self) -> tuple[float, int, str]:
        """The order among a workload's options: cheaper, then fewer GPUs, then the kinds' names."""
        return (round(self.cost_per_hour, 9), self.gpus, "+".join(self.kinds))


class KindTotal(_F):
    """One GPU kind's share of a plan."""

    gpu: str
    workloads: tuple[str, ...]
    serving_gpus: int
    spare_gpus_unpooled: int
    spare_gpus: int  # pooled where that needs fewer
    usd_per_gpu_hour: float
    power_w: float

    @property
    def gpus(self) -> int:
        return self.serving_gpus + self.spare_gpus

    @property
    def cost_per_hour(self) -> float:
        return self.gpus * self.usd_per_gpu_hour

    @property
    def cost_per_hour_unpooled(self) -> float:
        return (self.serving_gpus + self.spare_gpus_unpooled) * self.usd_per_gpu_hour


class Assignment(_F):
    """A plan: the option chosen for each workload, those left out and why, and the totals."""

    picks: tuple[FleetOption, ...]
    left_out: tuple[tuple[str, str], ...] = ()  # (workload, why)
    totals: tuple[KindTotal, ...] = ()

    @property
    def cost_per_hour(self) -> float:
        """The sum of the picks' costs, each with its own spares [USD/h] (what the assignment minimises)."""
        return sum(p.cost_per_hour for p in self.picks)

    @property
    def pooling_saves_per_hour(self) -> float:
        """What pooling the spares of the workloads that share a GPU kind saves [USD/h]."""
        return sum((t.spare_gpus_unpooled - t.spare_gpus) * t.usd_per_gpu_hour for t in self.totals)

    @property
    def cost_per_hour_pooled(self) -> float:
        """With the spares pooled per GPU kind [USD/h]: at most :attr:`cost_per_hour`."""
        return self.cost_per_hour - self.pooling_saves_per_hour

    @property
    def power_w(self) -> float:
        return sum(p.power_w for p in self.picks)

    @property
    def gpus(self) -> int:
        """Every GPU the plan holds: each kind's serving GPUs and its spares, pooled where workloads share it."""
        return sum(t.gpus for t in self.totals)

    @property
    def spare_gpus(self) -> int:
        return sum(t.spare_gpus for t in self.totals)

    @property
    def energy_kwh_per_million_tokens(self) -> float | None:
        """The plan's energy per million output tokens at the workloads' mean loads [kWh]."""
        tokens = sum(p.mean_tokens_per_s for p in self.picks)
        if tokens <= 0 or any(p.energy_j_per_token is None for p in self.picks):
            return None
        joules = sum((p.energy_j_per_token or 0.0) * p.mean_tokens_per_s for p in self.picks)
        return joules / tokens * 1e6 / KWH_J

    def power_w_by_site(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in self.picks:
            for site in p.sites:
                out[site] = out.get(site, 0.0) + p.power_at(site)
        return out

    def pick_of(self, workload: str) -> FleetOption | None:
        return next((p for p in self.picks if p.workload == workload), None)


class FleetLimits(_F):
    """The constraints across workloads: GPUs of each kind, power per site [W], the budget [USD/h]."""

    gpus: tuple[tuple[str, int], ...] = ()
    site_power_w: tuple[tuple[str, float], ...] = ()
    usd_per_hour: float | None = None

    @property
    def binding(self) -> bool:
        return bool(self.gpus or self.site_power_w or self.usd_per_hour is not None)


def _solve(options: Sequence[Sequence[FleetOption]], limits: FleetLimits) -> list[int] | None:
    """The index of the chosen option of each workload (the integer program of the module docstring), or None
    when no assignment keeps the limits."""
    if not limits.binding:
        return [min(range(len(opts)), key=lambda i: opts[i].key()) for opts in options]
    from scipy.optimize import Bounds, LinearConstraint, milp

    flat = [(w, i, o) for w, opts in enumerate(options) for i, o in enumerate(opts)]
    n = len(flat)
    cost = np.array([o.cost_per_hour for _, _, o in flat])
    rows, lo, hi = [], [], []
    for w in range(len(options)):
        rows.append([1.0 if fw == w else 0.0 for fw, _, _ in flat])
        lo.append(1.0)
        hi.append(1.0)
    for kind, cap in limits.gpus:
        rows.append([float(o.gpus_of(kind)) for _, _, o in flat])
        lo.append(-np.inf)
        hi.append(float(cap))
    for site, budget in limits.site_power_w:
        rows.append([o.power_at(site) for _, _, o in flat])
        lo.append(-np.inf)
        hi.append(budget)
    if limits.usd_per_hour is not None:
        rows.append(list(cost))
        lo.append(-np.inf)
        hi.append(limits.usd_per_hour)
    # the tie-break of the module (cheaper, fewer GPUs) as a cost too small to outweigh a cent
    tie = np.array([o.gpus for _, _, o in flat]) * 1e-7
    res = milp(
        c=cost + tie,
        constraints=LinearConstraint(np.array(rows), np.array(lo), np.array(hi)),
        integrality=np.ones(n),
        bounds=Bounds(np.zeros(n), np.ones(n)),
    )
    if res.status != 0 or res.x is None:
        return None
    chosen = [0] * len(options)
    for (w, i, _), x in zip(flat, res.x):
        if x > 0.5:
            chosen[w] = i
    return chosen


def _why_left_out(limits: FleetLimits) -> str:
    parts = [f"{n:,} {k}" for k, n in limits.gpus]
    parts += [f"{w / 1e3:,.1f} kW at {s}" for s, w in limits.site_power_w]
    if limits.usd_per_hour is not None:
        parts.append(f"${limits.usd_per_hour:,.2f}/h")
    return "the constraints (" + ", ".join(parts) + ") cannot hold it with the workloads of higher priority"


def assign(
    options: dict[str, list[FleetOption]],
    limits: FleetLimits,
    down_frac: dict[str, tuple[float, int]],
) -> Assignment:
    """The cheapest choice of one option per workload within ``limits`` (workloads without an option are not in
    ``options``); ``down_frac``: each kind's node down share and GPUs per node, for the pooled spares."""
    names = [w for w in options if options[w]]
    left: list[tuple[str, str]] = []
    while names:
        chosen = _solve([options[w] for w in names], limits)
        if chosen is not None:
            picks = tuple(options[w][i] for w, i in zip(names, chosen))
            return Assignment(picks=picks, left_out=tuple(left), totals=totals(picks, down_frac))

        def drop_order(w: str) -> tuple[int, int, str]:
            cheapest = min(options[w], key=lambda o: o.key())
            return (cheapest.priority, cheapest.gpus, w)

        out = max(names, key=drop_order)
        names.remove(out)
        left.append((out, _why_left_out(limits)))
    return Assignment(picks=(), left_out=tuple(left), totals=())


def totals(picks: Sequence[FleetOption], down_frac: dict[str, tuple[float, int]]) -> tuple[KindTotal, ...]:
    """Each GPU kind's GPUs, spares (pooled where that needs fewer, see the module docstring), cost and power."""
    out = []
    for kind in sorted({k for p in picks for k in p.kinds}):
        mine = [p for p in picks if kind in p.kinds]
        groups = [x for p in mine for x in p.groups_on(kind)]
        serving = sum(n * g for n, g, _ in groups)
        unpooled = sum(s * g for _, g, s in groups)
        d, gpn = down_frac.get(kind, (0.0, 1))
        spare = unpooled
        if d > 0:
            nodes = math.ceil(sum(n * g for n, g, _ in groups if g <= gpn) / gpn)
            pooled = (with_spares(nodes, d) - nodes) * gpn if nodes else 0
            own = sum(s * g for _, g, s in groups if g > gpn)
            spare = min(unpooled, pooled + own)
        out.append(
            KindTotal(
                gpu=kind,
                workloads=tuple(p.workload for p in mine),
                serving_gpus=serving,
                spare_gpus_unpooled=unpooled,
                spare_gpus=spare,
                usd_per_gpu_hour=mine[0].price_of(kind),
                power_w=sum(p.power_on(kind) for p in mine),
            )
        )
    return tuple(out)


def node_down(failure_rate_per_gpu_hour: float, repair_hours: float, gpus_per_node: int) -> float:
    """One node's down share (:func:`core.physics.node_down_frac`), as a float."""
    return float(node_down_frac(failure_rate_per_gpu_hour, repair_hours, gpus_per_node))
