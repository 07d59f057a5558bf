"""What serving replicas draw from a site, and what share of them is down for repair.

Power of ``G`` GPUs of one kind serving at utilisation ``u`` (offered load / capacity, 0 to 1) [W]::

    P_gpu  = TDP (f_floor + (f_busy - f_floor) u)          a GPU's draw (assumptions gpu_power_floor_frac, _busy_frac)
    P_node = N_rated f_node                                the node's non-GPU share per GPU (node_power_draw_frac)
    P_IT   = G (P_gpu + P_node)
    P_site = P_IT x PUE                                    what the site supplies (PUE = facility / IT power)
    E_tok  = P_site / tokens_per_s                         energy per token [J]

``TDP`` and ``N_rated`` come from ``catalogs/power.csv`` (:func:`core.catalog.gpu_power`). Worked number: 8 H100 SXM
at u = 0.5 with the base assumptions: P_gpu = 700 (0.43 + 0.43 x 0.5) = 451.5 W, P_node = 575 x 0.43 = 247.25 W,
P_IT = 8 x 698.75 = 5,590 W, at PUE 1.58: 8,832 W.

Availability of a node of ``g`` GPUs that fail at ``lambda`` per GPU-hour and take ``R`` hours to repair: the node
fails at ``g lambda`` per hour, so it is down a share ``d = g lambda R / (1 + g lambda R)`` of the time (MTTR over
MTBF + MTTR); a replica over ``m`` nodes is down when any of them is, ``q = 1 - (1 - d)^m``. Keeping ``n`` replicas
up on average takes ``ceil(n / (1 - q))``. Worked number: 8 GPUs at 2e-5 per GPU-hour and 24 h repairs,
d = 0.00384 / 1.00384 = 0.383 %; 10 one-node replicas need ceil(10 / 0.99617) = 11.

Every function takes scalars or numpy arrays and records its step when given a :class:`core.base.Trace`.
"""

from __future__ import annotations

import math

import numpy as np

from core.base import NO_TRACE, Trace


def gpu_power_w(tdp_w, util, floor_frac: float, busy_frac: float, tr: Trace = NO_TRACE):
    """One GPU's draw at utilisation ``util`` [W]: ``TDP (f_floor + (f_busy - f_floor) u)``.

    H100 SXM at u = 0.5, f_floor 0.43, f_busy 0.86: 700 x 0.645 = 451.5 W.
    """
    u = np.clip(util, 0.0, 1.0)
    value = tdp_w * (floor_frac + (busy_frac - floor_frac) * u)
    return tr.step(
        "gpu_power_w",
        "Power of one GPU at its utilisation",
        "P_{gpu}",
        "tdp_w * (f_floor + (f_busy - f_floor) * u)",
        value,
        unit="W",
        latex=r"[tdp_w] \cdot ([f_floor] + ([f_busy] - [f_floor]) [u])",
        note="u = offered load / capacity; the shares of the board power at no traffic and at full capacity",
        units={"tdp_w": "W"},
        tdp_w=tdp_w,
        f_floor=floor_frac,
        f_busy=busy_frac,
        u=u,
    )


def node_power_w_per_gpu(node_rating_w_per_gpu, draw_frac: float, tr: Trace = NO_TRACE):
    """The node's non-GPU draw per GPU [W]: its rated share times the share drawn in service.

    DGX H100 (575 W rated per GPU) at 0.43: 247.25 W.
    """
    value = node_rating_w_per_gpu * draw_frac
    return tr.step(
        "node_power_w_per_gpu",
        "The node's share per GPU (CPUs, memory, NICs, fans)",
        "P_{node}",
        "n_rated_w * f_node",
        value,
        unit="W",
        note="the system rating less the GPUs' board power, per GPU (catalogs/power.csv), times the share drawn",
        units={"n_rated_w": "W"},
        n_rated_w=node_rating_w_per_gpu,
        f_node=draw_frac,
    )


def it_power_w(gpus, gpu_w, node_w, tr: Trace = NO_TRACE):
    """IT power of ``gpus`` GPUs and their nodes' share [W]: ``G (P_gpu + P_node)``."""
    value = gpus * (gpu_w + node_w)
    return tr.step(
        "it_power_w",
        "IT power",
        "P_{IT}",
        "gpus * (gpu_power_w + node_power_w_per_gpu)",
        value,
        unit="W",
        gpus=gpus,
        gpu_power_w=gpu_w,
        node_power_w_per_gpu=node_w,
    )


def site_power_w(it_w, pue: float, tr: Trace = NO_TRACE):
    """What the site supplies for ``it_w`` of IT power [W]: ``P_IT x PUE``."""
    value = it_w * pue
    return tr.step(
        "site_power_w",
        "Site power (IT power x PUE)",
        "P_{site}",
        "it_power_w * pue",
        value,
        unit="W",
        note="PUE = total facility power / IT power: cooling, power conversion, lighting",
        it_power_w=it_w,
        pue=pue,
    )


def energy_j_per_token(site_w, tokens_per_s, tr: Trace = NO_TRACE):
    """Energy per token at the site [J]: ``P_site / tokens_per_s``."""
    value = site_w / tokens_per_s
    return tr.step(
        "energy_j_per_token",
        "Energy per output token",
        "E_{tok}",
        "site_power_w / tokens_per_s",
        value,
        unit="J",
        units={"tokens_per_s": "tok/s"},
        site_power_w=site_w,
        tokens_per_s=tokens_per_s,
    )


def node_down_frac(failure_rate_per_gpu_hour, repair_hours, gpus_per_node, tr: Trace = NO_TRACE):
    """Share of the time one node is down for repair: ``g lambda R / (1 + g lambda R)``.

    8 GPUs at 2e-5 per GPU-hour, 24 h repairs: 0.00384 / 1.00384 = 0.00383.
    """
    x = gpus_per_node * failure_rate_per_gpu_hour * repair_hours
    value = x / (1 + x)
    return tr.step(
        "node_down_frac",
        "Share of the time a node is down",
        "d",
        "g * lam * R / (1 + g * lam * R)",
        value,
        unit="",
        latex=r"\frac{[g] [lam] [R]}{1 + [g] [lam] [R]}",
        note="MTTR / (MTBF + MTTR) with MTBF = 1 / (g lambda): a GPU failure takes its node out",
        units={"R": "h"},
        g=gpus_per_node,
        lam=failure_rate_per_gpu_hour,
        R=repair_hours,
    )


def replica_down_frac(node_down, nodes_per_replica, tr: Trace = NO_TRACE):
    """Share of the time a replica over ``m`` nodes is down: ``1 - (1 - d)^m`` (a replica inside one node: d)."""
    value = 1 - (1 - node_down) ** nodes_per_replica
    return tr.step(
        "replica_down_frac",
        "Share of the time a replica is down",
        "q",
        "1 - (1 - d) ** m",
        value,
        unit="",
        latex=r"1 - (1 - [d])^{[m]}",
        d=node_down,
        m=nodes_per_replica,
    )


def with_spares(replicas: int, down_frac: float, tr: Trace = NO_TRACE) -> int:
    """Replicas to run so ``replicas`` are up on average: ``ceil(n / (1 - q))``.

    10 replicas at q = 0.00383: ceil(10.04) = 11.
    """
    value = math.ceil(replicas / (1 - down_frac) - 1e-9)
    tr.step(
        "replicas_with_spares",
        "Replicas with spares for the expected share down",
        "n_{spare}",
        "ceil(n / (1 - q) - 1e-9)",
        value,
        unit="",
        latex=r"\lceil [n] / (1 - [q]) \rceil",
        n=replicas,
        q=down_frac,
    )
    return int(value)
