"""Collectives: an alpha-beta model per fabric and topology.

For a group of ``p`` GPUs moving ``n`` bytes (the full buffer each GPU holds), with per-hop
latency alpha [s] and achieved per-GPU bandwidth beta [B/s] (per direction):

    ring all-reduce        2 (p-1) alpha + 2 (p-1)/p x n / beta
    tree all-reduce        2 log2(p) alpha + 2 n / beta          (double binary tree; NCCL)
    all-reduce             min(ring, tree)                        (seed 000: the cheaper of the two)
    all-gather / reduce-scatter   (p-1) alpha + (p-1)/p x n / beta
    all-to-all             (p-1) alpha + (p-1)/p x n / beta
    point-to-point         alpha + n / beta

(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005; NCCL's ring/tree algorithms.)

Topology sets beta per part (seed 000 "Parallelism and topology"):
  * NVSwitch parts reach any peer at the full per-GPU bandwidth, for any group inside the NVLink domain;
  * full-mesh parts (MI300X-class, 7 Infinity Fabric links) give a group of p GPUs p-1 direct links,
    so beta = (p-1) x link bandwidth;
  * PCIe parts go over the host bus at the PCIe per-direction bandwidth;
  * a group larger than the scale-up domain is hierarchical: reduce-scatter inside the node, the
    inter-node fabric for the node-level part (one NIC per GPU), all-gather inside the node.
Bandwidths are multiplied by the named assumption ``comm_bw_eff``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.catalog import Fabric, GpuSpec


@dataclass(frozen=True)
class Level:
    """One level of the network as seen by one GPU: achieved bandwidth and per-hop latency."""

    bw_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Collectives:
    """Collective times for one cluster shape. Build with :meth:`for_cluster`; all times in seconds."""

    gpu: GpuSpec
    fabric: Fabric
    domain: int  # GPUs reachable over the scale-up fabric
    bw_eff: float

    @classmethod
    def for_cluster(cls, gpu: GpuSpec, fabric: Fabric, gpus_per_node: int, bw_eff: float) -> "Collectives":
        if gpu.topology == "nvswitch" and gpu.nvlink_domain > gpu.gpus_per_node:
            domain = gpu.nvlink_domain  # GB200 NVL72: trays of 4 share one 72-GPU NVLink domain
        else:
            domain = min(gpus_per_node, gpu.nvlink_domain)
        return cls(gpu=gpu, fabric=fabric, domain=max(1, domain), bw_eff=bw_eff)

    # --- levels ------------------------------------------------------------------------------------
    def intra(self, p: int) -> Level:
        """The scale-up level for a group of ``p`` GPUs inside one domain."""
        g = self.gpu
        if g.topology == "mesh" and g.mesh_links:
            links = min(max(p - 1, 1), g.mesh_links)
            bw = links * g.link_bw_gb_per_s * 1e9
        else:
            bw = g.scale_up_bw_bytes_per_s
        return Level(bw * self.bw_eff, g.scale_up_latency_s)

    def inter(self) -> Level:
        return Level(self.fabric.bw_bytes_per_s * self.bw_eff, self.fabric.latency_s)

    # --- primitives on one level -----------------------------------------------------------------------
    @staticmethod
    def _ring_ar(n: float, p: int, lv: Level) -> float:
        return 2 * (p - 1) * lv.latency_s + 2 * (p - 1) / p * n / lv.bw_bytes_per_s

    @staticmethod
    def _tree_ar(n: float, p: int, lv: Level) -> float:
        return 2 * math.ceil(math.log2(p)) * lv.latency_s + 2 * n / lv.bw_bytes_per_s

    @classmethod
    def _ar(cls, n: float, p: int, lv: Level) -> float:
        if p <= 1 or n <= 0:
            return 0.0
        return min(cls._ring_ar(n, p, lv), cls._tree_ar(n, p, lv))

    @staticmethod
    def _gather(n: float, p: int, lv: Level) -> float:
        if p <= 1 or n <= 0:
            return 0.0
        return (p - 1) * lv.latency_s + (p - 1) / p * n / lv.bw_bytes_per_s

    # --- public API --------------------------------------------------------------------------------
    def spans_nodes(self, p: int) -> bool:
        return p > self.domain

    def all_reduce_s(self, n_bytes: float, p: int) -> float:
        """All-reduce of an ``n_bytes`` buffer over ``p`` GPUs [s]; 0 for p = 1."""
        if p <= 1 or n_bytes <= 0:
            return 0.0
        if not self.spans_nodes(p):
            return self._ar(n_bytes, p, self.intra(p))
        q = self.domain
        nodes = math.ceil(p / q)
        lv = self.intra(q)
        # hierarchical: reduce-scatter in the node, all-reduce of 1/q of the data across nodes, all-gather.
        return 2 * self._gather(n_bytes, q, lv) + self._ar(n_bytes / q, nodes, self.inter())

    def all_gather_s(self, n_bytes: float, p: int) -> float:
        """All-gather producing ``n_bytes`` on every GPU [s] (reduce-scatter costs the same)."""
        if p <= 1 or n_bytes <= 0:
            return 0.0
        if not self.spans_nodes(p):
            return self._gather(n_bytes, p, self.intra(p))
        q = self.domain
        nodes = math.ceil(p / q)
        return self._gather(n_bytes, q, self.intra(q)) + self._gather(n_bytes / q, nodes, self.inter())

    reduce_scatter_s = all_gather_s

    def all_to_all_s(self, n_bytes: float, p: int) -> float:
        """All-to-all where each GPU sends ``n_bytes`` in total, split evenly over the group [s]."""
        if p <= 1 or n_bytes <= 0:
            return 0.0
        if not self.spans_nodes(p):
            return self._gather(n_bytes, p, self.intra(p))
        q = self.domain
        # the share leaving the node crosses the fabric; the rest stays on the scale-up links
        out_frac = (p - q) / p
        return ((p - 1) * self.inter().latency_s + out_frac * n_bytes / self.inter().bw_bytes_per_s
                + (q - 1) / p * n_bytes / self.intra(q).bw_bytes_per_s)

    def p2p_s(self, n_bytes: float, cross_node: bool = False) -> float:
        """Point-to-point send of ``n_bytes`` to one peer [s]."""
        if n_bytes <= 0:
            return 0.0
        if cross_node:
            lv = self.inter()
        else:
            g = self.gpu
            bw = (g.link_bw_gb_per_s * 1e9 if g.topology == "mesh" and g.link_bw_gb_per_s else
                  g.scale_up_bw_bytes_per_s) * self.bw_eff
            lv = Level(bw, g.scale_up_latency_s)
        return lv.latency_s + n_bytes / lv.bw_bytes_per_s
