"""One fleet option: a recommendation's pick with the spares its GPU kinds' availability calls for, its cost
at its pools' prices and what it draws (:mod:`core.physics.power`), as :func:`core.decision.fleet.plan_fleet`
offers it to the assignment (:mod:`core.decision.fleet_assign`)."""

from __future__ import annotations

import math
from typing import NamedTuple

from core import catalog
from core.base import Assumptions
from core.config import Fleet, FleetWorkload
from core.decision.fleet_assign import FleetOption, PoolCount, node_down
from core.decision.goal import Pick
from core.decision.optimizer import Recommendation
from core.physics import (
    energy_j_per_token,
    gpu_power_w,
    it_power_w,
    node_power_w_per_gpu,
    replica_down_frac,
    site_power_w,
    with_spares,
)

__all__ = ["Availability", "availability", "down_frac", "is_mixed", "option_of", "power_of"]


def is_mixed(p: Pick) -> bool:
    return p.prefill is not None and p.decode is not None and p.prefill.gpu != p.decode.gpu


class Availability(NamedTuple):
    node_down: float
    gpus_per_node: int


def availability(fleet: Fleet, gpu: str) -> Availability:
    g = catalog.gpu(gpu)
    a = fleet.availability_of(gpu)
    d = node_down(a.failure_rate_per_gpu_hour, a.repair_hours, g.gpus_per_node) if a is not None else 0.0
    return Availability(d, g.gpus_per_node)


def down_frac(av: Availability, gpus_per_replica: int) -> float:
    """The share of the time one replica (or instance) of that many GPUs is down (0 without availability figures)."""
    if av.node_down <= 0:
        return 0.0
    nodes = max(1, math.ceil(gpus_per_replica / av.gpus_per_node))
    return float(replica_down_frac(av.node_down, nodes))


def power_of(
    fleet: Fleet, a: Assumptions, gpu: str, gpus: int, util: float, tokens_per_s: float
) -> tuple[float, float | None]:
    """(site power at ``util`` [W], energy per output token at ``tokens_per_s`` [J])."""
    pw = catalog.gpu_power(gpu)
    site = fleet.constraints.site_of(gpu)
    pue = site.pue if site is not None else 1.0
    g_w = gpu_power_w(pw.tdp_w, util, a.gpu_power_floor_frac, a.gpu_power_busy_frac)
    n_w = node_power_w_per_gpu(pw.node_rating_w_per_gpu, a.node_power_draw_frac)
    p = float(site_power_w(it_power_w(gpus, g_w, n_w), pue))
    return p, (float(energy_j_per_token(p, tokens_per_s)) if tokens_per_s > 0 else None)


def option_of(
    fleet: Fleet,
    a: Assumptions,
    w: FleetWorkload,
    rec: Recommendation,
    case: str,
    *,
    replicas: tuple[int, ...] | None = None,
    peak_rate_per_s: float | None = None,
    usd_per_gpu_hour: float | None = None,
    pool_prices: tuple[float, float] | None = None,
) -> FleetOption:
    """The option of one recommendation: its pick with spares (``replicas``: the serving replicas, or the prefill
    and decode instances, when not the pick's own); power at the peak rate (the pick's own unless given) and energy
    at the workload's mean rate. A disaggregated pick's pools take their spares apart (each at its own kind's
    failure rate), and its capacity is the smaller pool's (the closed form the optimizer screens with); a
    mixed-kind pick's pools also keep their own prices (``pool_prices`` when not the pick's), sites and power, each
    pool at its own utilisation."""
    p = rec.recommendation
    assert p is not None
    av = availability(fleet, p.gpu)
    pools: tuple[PoolCount, ...] = ()
    rate = peak_rate_per_s if peak_rate_per_s is not None else rec.goal.rate_per_s
    if p.prefill is not None and p.decode is not None:
        counts = replicas if replicas is not None else (p.prefill.instances, p.decode.instances)
        mixed = is_mixed(p)
        own = pool_prices or (p.prefill.usd_per_gpu_hour, p.decode.usd_per_gpu_hour)
        for q, k, usd in zip((p.prefill, p.decode), counts, own):
            spares = with_spares(k, down_frac(availability(fleet, q.gpu), q.gpus_per_instance)) - k
            extra: dict = {}
            if mixed:
                site_q = fleet.constraints.site_of(q.gpu)
                g_q = (k + spares) * q.gpus_per_instance
                cap_q = (k + spares) * q.capacity_per_instance_rps
                util_q = min(1.0, rate / cap_q) if cap_q > 0 else 1.0
                extra = {
                    "gpu": q.gpu,
                    "usd_per_gpu_hour": usd,
                    "site": site_q.name if site_q is not None else "",
                    "power_w": power_of(fleet, a, q.gpu, g_q, util_q, 0.0)[0],
                }
            pools += (
                PoolCount(role=q.role, instances=k, gpus_per_instance=q.gpus_per_instance, spares=spares, **extra),
            )
        n = sum(q.instances for q in pools)
        spare = sum(q.spares for q in pools)
        down = 0.0
        capacity = min(
            (pools[0].instances + pools[0].spares) * p.prefill.capacity_per_instance_rps,
            (pools[1].instances + pools[1].spares) * p.decode.capacity_per_instance_rps,
        )
        gpus = sum((q.instances + q.spares) * q.gpus_per_instance for q in pools)
        pick_gpus = p.prefill.instances * p.prefill.gpus_per_instance + p.decode.instances * p.decode.gpus_per_instance
    else:
        n = replicas[0] if replicas is not None else p.replicas
        down = down_frac(av, p.gpus_per_replica)
        spare = with_spares(n, down) - n
        cap_per_replica = p.capacity_requests_per_s / p.replicas if p.replicas else 0.0
        capacity = (n + spare) * cap_per_replica
        gpus = (n + spare) * p.gpus_per_replica
        pick_gpus = p.replicas * p.gpus_per_replica
    util = min(1.0, rate / capacity) if capacity > 0 else 1.0
    mean_util = min(1.0, w.rate_per_s / capacity) if capacity > 0 else 1.0
    tokens_per_s = w.rate_per_s * w.output_tokens
    if pools and pools[0].gpu:  # mixed kinds: each pool at its own kind, utilisation and site
        peak_w = sum(q.power_w for q in pools)
        mean_w = 0.0
        for qc, pool in zip(pools, (p.prefill, p.decode)):
            assert pool is not None
            cap_q = (qc.instances + qc.spares) * pool.capacity_per_instance_rps
            u_q = min(1.0, w.rate_per_s / cap_q) if cap_q > 0 else 1.0
            mean_w += power_of(fleet, a, qc.gpu, (qc.instances + qc.spares) * qc.gpus_per_instance, u_q, 0.0)[0]
        e_tok = float(energy_j_per_token(mean_w, tokens_per_s)) if tokens_per_s > 0 else None
    else:
        peak_w, _ = power_of(fleet, a, p.gpu, gpus, util, 0.0)
        mean_w, e_tok = power_of(fleet, a, p.gpu, gpus, mean_util, tokens_per_s)
    site = fleet.constraints.site_of(p.gpu)
    if pools and pools[0].gpu:  # shown only: the cost is each pool's GPUs at its own price
        price = (
            sum((qc.usd_per_gpu_hour or 0.0) * (qc.instances + qc.spares) * qc.gpus_per_instance for qc in pools) / gpus
        )
    else:
        price = usd_per_gpu_hour if usd_per_gpu_hour is not None else p.cost_per_hour / pick_gpus
    return FleetOption(
        workload=w.name,
        gpu=p.gpu,
        pick=p,
        replicas=n,
        spare_replicas=spare,
        usd_per_gpu_hour=price,
        site=site.name if site is not None else "",
        power_w=peak_w,
        energy_j_per_token=e_tok,
        mean_tokens_per_s=w.rate_per_s * w.output_tokens,
        replica_down_frac=down,
        utilisation=util,
        case=case,
        priority=w.priority,
        adapters=w.adapters,
        pools=pools,
    )
