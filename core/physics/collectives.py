"""Collectives: an alpha-beta model per fabric and topology.

For a group of ``p`` GPUs moving ``n`` bytes (the full buffer each GPU holds), with per-hop
latency alpha [s] and achieved per-GPU bandwidth beta [B/s] (per direction):

    (every collective also pays a fixed launch/synchronisation cost t0, the assumption collective_base_us)

    ring all-reduce        2 (p-1) alpha + 2 (p-1)/p x n / beta
    tree all-reduce        2 log2(p) alpha + 2 n / beta          (double binary tree; NCCL)
    NVLS all-reduce        2 alpha + n / beta                     (NVLink SHARP switches, Hopper/Blackwell)
    all-reduce             min(ring, tree[, NVLS])                (the RA-BIT spec: the cheaper of ring and tree)
    all-gather / reduce-scatter   (p-1) alpha + (p-1)/p x n / beta
    all-to-all             (p-1) alpha + (p-1)/p x n / beta
    point-to-point         alpha + n / beta

(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005; NCCL's ring/tree algorithms.)

Topology sets beta per part (the RA-BIT spec "Parallelism and topology"):
  * NVSwitch parts reach any peer at the full per-GPU bandwidth, for any group inside the NVLink domain;
  * full-mesh parts (MI300X-class, 7 Infinity Fabric links) give a group of p GPUs p-1 direct links,
    so beta = (p-1) x link bandwidth;
  * PCIe parts go over the host bus at the PCIe per-direction bandwidth;
  * a group larger than the scale-up domain is hierarchical: reduce-scatter inside the node, the
    inter-node fabric for the node-level part (one NIC per GPU), all-gather inside the node.
Bandwidths are multiplied by the named assumption ``comm_bw_eff``.

NVLS: third-generation NVSwitch (H100/H200) and NVLink 5 switches reduce in the switch, so each GPU
moves n bytes instead of 2(p-1)/p x n (NCCL 2.17+; nccl-tests all_reduce busbw on DGX H100 rises from
~360 to ~480 GB/s). A100's NVSwitch has no SHARP. This is why TP-8 prefill on H100 spends ~1 s, not
~1.7 s, of a 4k x 32 batch in all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.base import US
from core.catalog import Fabric, GpuSpec
from core.config import Deployment

#: Bytes per element of the activations that TP all-reduces, EP all-to-alls and pipeline sends move (BF16).
ACT_BYTES = 2.0


@dataclass(frozen=True)
class Level:
    """One level of the network as seen by one GPU: achieved bandwidth and per-hop latency."""

    bw_bytes_per_s: float
    latency_s: float
    in_switch_reduction: bool = False
    base_s: float = 0.0  # fixed cost of launching and synchronising one collective


def _scalar(x):
    """A 0-d result as a Python float; arrays unchanged."""
    return float(x) if np.ndim(x) == 0 else x


@dataclass(frozen=True)
class Collectives:
    """Collective times for one cluster shape. Build with :meth:`for_cluster`; all times in seconds."""

    gpu: GpuSpec
    fabric: Fabric
    domain: int  # GPUs reachable over the scale-up fabric
    bw_eff: float
    base_s: float = 0.0

    @classmethod
    def for_cluster(
        cls, gpu: GpuSpec, fabric: Fabric, gpus_per_node: int, bw_eff: float, base_s: float = 0.0
    ) -> "Collectives":
        # a rack-scale domain spans trays whatever the node size; otherwise the configured node bounds it
        dom = gpu.scale_up_domain
        domain = dom if dom > gpu.gpus_per_node else min(gpus_per_node, dom)
        return cls(gpu=gpu, fabric=fabric, domain=max(1, domain), bw_eff=bw_eff, base_s=base_s)

    @classmethod
    def of(cls, dep: Deployment) -> "Collectives":
        """The collectives of a deployment's cluster: its GPU and fabric, GPUs per node, and the assumptions
        ``comm_bw_eff`` (achieved share of the link bandwidth) and ``collective_base_us`` (launch cost)."""
        a = dep.assumptions
        return cls.for_cluster(dep.gpu, dep.fabric, dep.gpus_per_node, a.comm_bw_eff, a.collective_base_us * US)

    # --- levels ------------------------------------------------------------------------------------
    def intra(self, p) -> Level:
        """The scale-up level for a group of ``p`` GPUs inside one domain (``p`` may be an array)."""
        g = self.gpu
        if g.topology == "mesh" and g.mesh_links:
            links = np.minimum(np.maximum(np.asarray(p) - 1, 1), g.mesh_links)
            bw = links * g.link_bw_gb_per_s * 1e9
        else:
            bw = g.scale_up_bw_bytes_per_s
        return Level(
            bw * self.bw_eff, g.scale_up_latency_s, g.in_switch_reduction and g.topology == "nvswitch", self.base_s
        )

    def inter(self) -> Level:
        return Level(self.fabric.bw_bytes_per_s * self.bw_eff, self.fabric.latency_s, False, self.base_s)

    # --- primitives on one level (group sizes ``p`` >= 1, scalars or arrays) ------------------------------
    @staticmethod
    def _ring_ar(n, p, lv: Level):
        return lv.base_s + 2 * (p - 1) * lv.latency_s + 2 * (p - 1) / p * n / lv.bw_bytes_per_s

    @staticmethod
    def _tree_ar(n, p, lv: Level):
        return lv.base_s + 2 * np.ceil(np.log2(p)) * lv.latency_s + 2 * n / lv.bw_bytes_per_s

    @staticmethod
    def _nvls_ar(n, p, lv: Level):
        """NVLink SHARP: each GPU sends its buffer once to the switch, which reduces and multicasts."""
        return lv.base_s + 2 * lv.latency_s + n / lv.bw_bytes_per_s

    @classmethod
    def _ar(cls, n, p, lv: Level):
        p = np.asarray(p, dtype=float)
        ps = np.maximum(p, 1.0)
        t = np.minimum(cls._ring_ar(n, ps, lv), cls._tree_ar(n, ps, lv))
        if lv.in_switch_reduction:
            t = np.minimum(t, cls._nvls_ar(n, ps, lv))
        return np.where(p > 1, t, 0.0) * (np.asarray(n) > 0)

    @staticmethod
    def _gather(n, p, lv: Level):
        p = np.asarray(p, dtype=float)
        ps = np.maximum(p, 1.0)
        t = lv.base_s + (ps - 1) * lv.latency_s + (ps - 1) / ps * n / lv.bw_bytes_per_s
        return np.where(p > 1, t, 0.0) * (np.asarray(n) > 0)

    # --- public API --------------------------------------------------------------------------------
    def spans_nodes(self, p: int) -> bool:
        return p > self.domain

    def all_reduce_s(self, n_bytes, p):
        """All-reduce of an ``n_bytes`` buffer over groups of ``p`` GPUs [s]; 0 for p = 1.

        ``n_bytes`` and ``p`` may be numpy arrays (the training search prices every group size at once).
        A group larger than the domain is hierarchical: reduce-scatter in the node, all-reduce of 1/q of
        the data across nodes, all-gather in the node.
        """
        p = np.asarray(p, dtype=float)
        q = self.domain
        inside = self._ar(n_bytes, np.minimum(p, q), self.intra(np.minimum(p, q)))
        hier = 2 * self._gather(n_bytes, q, self.intra(q)) + self._ar(n_bytes / q, np.ceil(p / q), self.inter())
        return _scalar(np.where(p > q, hier, inside))

    def all_gather_s(self, n_bytes, p):
        """All-gather producing ``n_bytes`` on every GPU [s] (reduce-scatter costs the same); arrays welcome."""
        p = np.asarray(p, dtype=float)
        q = self.domain
        inside = self._gather(n_bytes, np.minimum(p, q), self.intra(np.minimum(p, q)))
        hier = self._gather(n_bytes, q, self.intra(q)) + self._gather(n_bytes / q, np.ceil(p / q), self.inter())
        return _scalar(np.where(p > q, hier, inside))

    reduce_scatter_s = all_gather_s

    def all_to_all_s(self, n_bytes, p: int):
        """All-to-all where each GPU sends ``n_bytes`` in total, split evenly over the group [s]."""
        if p <= 1:
            return 0.0 * n_bytes
        if not self.spans_nodes(p):
            return self._gather(n_bytes, p, self.intra(p))
        q = self.domain
        # the share leaving the node crosses the fabric; the rest stays on the scale-up links
        out_frac = (p - q) / p
        return (
            self.base_s
            + (p - 1) * self.inter().latency_s
            + out_frac * n_bytes / self.inter().bw_bytes_per_s
            + (q - 1) / p * n_bytes / self.intra(q).bw_bytes_per_s
        ) * (np.asarray(n_bytes) > 0)

    def p2p_s(self, n_bytes, cross_node: bool = False):
        """Point-to-point send of ``n_bytes`` to one peer [s]."""
        if cross_node:
            lv = self.inter()
        else:
            g = self.gpu
            bw = (
                g.link_bw_gb_per_s * 1e9 if g.topology == "mesh" and g.link_bw_gb_per_s else g.scale_up_bw_bytes_per_s
            ) * self.bw_eff
            lv = Level(bw, g.scale_up_latency_s)
        return (self.base_s + lv.latency_s + n_bytes / lv.bw_bytes_per_s) * (np.asarray(n_bytes) > 0)
