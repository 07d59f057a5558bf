"""Collectives: an alpha-beta model per fabric and topology.

For a group of ``p`` GPUs moving ``n`` bytes (the full buffer each GPU holds), with per-hop
latency alpha [s] and achieved per-GPU bandwidth beta [B/s] (per direction):

    (every collective also pays a fixed launch/synchronisation cost t0, the assumption collective_base_us)

    ring all-reduce        2 (p-1) alpha + 2 (p-1)/p x n / beta
    tree all-reduce        2 log2(p) alpha + 2 n / beta          (double binary tree; NCCL)
    NVLS all-reduce        2 alpha + (1 + 1/p) n / (s beta)       (NVLink SHARP switches, Hopper/Blackwell)
    all-reduce             min(ring, tree[, NVLS])                (the RA-BIT spec: the cheaper of ring and tree)
    one-shot all-reduce    t0' + alpha + (p-1) n / beta           (serving engines' own kernel, small buffers)
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
moves n (1 + 1/p) bytes each way (its share of every slice up to the switch, its reduced slice back; its own
slice up, every slice back by multicast) instead of 2(p-1)/p x n, at a lower share of the wire than the ring
(``s``, the assumption nvls_bw_share). On 8 H100s at comm_bw_eff 0.8 and s 0.84: algbw 450 x 0.8 x 0.84 / (9/8)
= 269 GB/s, busbw 470 GB/s, against nccl-tests' ~275 / ~480 GB/s (NCCL 2.17+; NVIDIA/nccl-tests issue #212)
and the ring's 206 / 360. A100's NVSwitch has no SHARP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.base import NO_TRACE, US, Trace
from core.catalog import Fabric, GpuSpec
from core.config import Deployment, VideoDeployment

#: Bytes per activation element (BF16): what TP all-reduces, EP all-to-alls, pipeline and sequence-parallel sends move.
ACT_BYTES = 2.0
#: Largest buffers the serving engines all-reduce in one shot over 3-4 and 5-8 GPUs (vLLM custom_all_reduce.cuh);
#: over two GPUs every buffer (ONE_SHOT_ALWAYS tokens: no iteration reaches it).
ONE_SHOT_MAX_BYTES_4 = 512 * 1024
ONE_SHOT_MAX_BYTES_8 = 256 * 1024
ONE_SHOT_ALWAYS = 1e15


@dataclass(frozen=True)
class Level:
    """One level of the network as seen by one GPU: achieved bandwidth and per-hop latency."""

    bw_bytes_per_s: float
    latency_s: float
    in_switch_reduction: bool = False
    base_s: float = 0.0  # fixed cost of launching and synchronising one collective
    nvls_share: float = 1.0  # the in-switch all-reduce's achieved wire bandwidth over the ring's (nvls_bw_share)


def _scalar(x):
    """A 0-d result as a Python float; arrays unchanged."""
    return float(x) if np.ndim(x) == 0 else x


@dataclass(frozen=True)
class Collectives:
    """Collective times for one cluster shape. Build with :meth:`of` (a deployment) or :meth:`for_cluster`; all
    times in seconds."""

    gpu: GpuSpec
    fabric: Fabric
    domain: int  # GPUs reachable over the scale-up fabric
    bw_eff: float
    base_s: float = 0.0
    nvls_share: float = 1.0

    @classmethod
    def for_cluster(
        cls,
        gpu: GpuSpec,
        fabric: Fabric,
        gpus_per_node: int,
        bw_eff: float,
        base_s: float = 0.0,
        nvls_share: float = 1.0,
    ) -> "Collectives":
        # a rack-scale domain spans trays whatever the node size; otherwise the configured node bounds it
        dom = gpu.scale_up_domain
        domain = dom if dom > gpu.gpus_per_node else min(gpus_per_node, dom)
        return cls(gpu=gpu, fabric=fabric, domain=max(1, domain), bw_eff=bw_eff, base_s=base_s, nvls_share=nvls_share)

    @classmethod
    def of(cls, dep: Deployment | VideoDeployment, gpus_per_node: int | None = None) -> "Collectives":
        """The collectives of a deployment's cluster: its GPU and fabric, its GPUs per node (or ``gpus_per_node``),
        and the assumptions ``comm_bw_eff`` (achieved share of the link bandwidth), ``collective_base_us``
        (launch cost) and ``nvls_bw_share`` (the in-switch all-reduce's share of the ring's bandwidth)."""
        a = dep.assumptions
        node = dep.config.gpus_per_node if gpus_per_node is None else gpus_per_node
        return cls.for_cluster(dep.gpu, dep.fabric, node, a.comm_bw_eff, a.collective_base_us * US, a.nvls_bw_share)

    # --- levels ------------------------------------------------------------------------------------
    def intra(self, p, tr: Trace = NO_TRACE) -> Level:
        """The scale-up level for a group of ``p`` GPUs inside one domain (``p`` may be an array); records the
        group's bandwidth when traced (a TP group of scalar ``p``)."""
        g = self.gpu
        mesh = g.topology == "mesh" and g.mesh_links
        if mesh:
            links = np.minimum(np.maximum(np.asarray(p) - 1, 1), g.mesh_links)
            bw = links * g.link_bw_gb_per_s * 1e9
        else:
            bw = g.scale_up_bw_bytes_per_s
        lv = Level(
            bw * self.bw_eff,
            g.scale_up_latency_s,
            g.in_switch_reduction and g.topology == "nvswitch",
            self.base_s,
            self.nvls_share,
        )
        if not tr.enabled:
            return lv
        if mesh:
            tr.step(
                "tp_bw_bytes_per_s",
                f"TP group bandwidth per GPU ({int(links)} mesh links)",
                r"\beta",
                "n_l * l_bw * eta_c",
                lv.bw_bytes_per_s,
                unit="B/s",
                units={"l_bw": "B/s", "eta_c": "frac"},
                n_l=links,
                l_bw=g.link_bw_gb_per_s * 1e9,
                eta_c=self.bw_eff,
                note=f"{g.scale_up}: a full mesh; a group of p = {p} GPUs uses p - 1 direct links",
            )
        else:
            tr.step(
                "tp_bw_bytes_per_s",
                "TP group bandwidth per GPU",
                r"\beta",
                "bw_su * eta_c",
                lv.bw_bytes_per_s,
                unit="B/s",
                units={"bw_su": "B/s", "eta_c": "frac"},
                bw_su=g.scale_up_bw_bytes_per_s,
                eta_c=self.bw_eff,
                note=(
                    f"{g.scale_up}: any peer at the full per-GPU bandwidth"
                    if g.topology == "nvswitch"
                    else f"{g.scale_up}: over the host bus"
                )
                + " (per direction) x achieved share comm_bw_eff",
            )
        return lv

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
        """NVLink SHARP: the switch reduces each GPU's slice from every GPU and multicasts it back, n (1 + 1/p)
        bytes each way per GPU at the share ``nvls_share`` of the ring's achieved bandwidth."""
        return lv.base_s + 2 * lv.latency_s + (1 + 1 / p) * n / (lv.bw_bytes_per_s * lv.nvls_share)

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

    # --- the step model's communication: straight lines in the tokens T of an iteration ------------------
    def tp_all_reduce_lines(self, p: int, h: int, b_a: float = ACT_BYTES, tr: Trace = NO_TRACE):
        """The all-reduce of ``T`` tokens of ``h`` elements of ``b_a`` bytes over a TP group of ``p`` GPUs as
        two straight lines in ``T``: ``(a_r, b_r, a_t, b_t)`` with cost ``min(a_r + b_r T, a_t + b_t T)`` [s, s per
        token]; their derivation recorded on ``tr``.

        Inside the domain: the ring ``t0 + 2 (p-1) alpha + 2 (p-1)/p x T h b_a / beta`` and the double binary
        tree ``t0 + 2 ceil(log2 p) alpha + 2 T h b_a / beta``, or NVLS ``t0 + 2 alpha + (1 + 1/p) T h b_a / (s beta)``
        in its place on switches that reduce. Across nodes: the hierarchical cost (:meth:`all_reduce_s`), linearised
        from its value at 1 and 2 tokens (both lines the same). All zero for ``p = 1``.
        H100 SXM, TP 8, h = 8,192: NVLS a_t = 8 + 2 x 2.5 = 13 us,
        b_t = 9/8 x 16,384 B / (360 GB/s x 0.84) = 61.0 ns.
        """
        if p <= 1:
            return 0.0, 0.0, 0.0, 0.0
        if self.spans_nodes(p):
            t1, t2 = self.all_reduce_s(h * b_a, p), self.all_reduce_s(2 * h * b_a, p)
            a, b = _line(
                tr,
                ("ar_ring_alpha_s", "All-reduce across nodes: fixed time", "a_r"),
                ("ar_ring_beta_s", "All-reduce across nodes: time per token", "b_r"),
                t1,
                t2,
                f"TP {p} spans nodes: reduce-scatter in the node, all-reduce over {self.fabric.name}, all-gather; "
                "linearised from its cost at 1 and 2 tokens",
            )
            return a, b, a, b
        lv = self.intra(p, tr)
        u = {"t0": "s", "alpha": "s", "beta": "B/s", "b_a": "B"}
        a_r = lv.base_s + 2 * (p - 1) * lv.latency_s
        b_r = 2 * (p - 1) / p * h * b_a / lv.bw_bytes_per_s
        if tr.enabled:
            tr.step(
                "ar_ring_alpha_s",
                "Ring all-reduce: fixed time",
                "a_r",
                "t0 + 2 * (p - 1) * alpha",
                a_r,
                unit="s",
                units=u,
                t0=lv.base_s,
                p=p,
                alpha=lv.latency_s,
                note="2(p-1) hops of alpha after the launch cost t0 (collective_base_us)",
            )
            tr.step(
                "ar_ring_beta_s",
                "Ring all-reduce: time per token",
                "b_r",
                "2 * (p - 1) / p * h * b_a / beta",
                b_r,
                unit="s",
                latex=r"\frac{2 ([p] - 1)}{[p]} \cdot \frac{[h] \cdot [b_a]}{[beta]}",
                units=u,
                p=p,
                h=h,
                b_a=b_a,
                beta=lv.bw_bytes_per_s,
                note="each token adds h x 2 B to the buffer",
            )
        if lv.in_switch_reduction:  # NVLS replaces the tree line: 2 alpha + (1 + 1/p) n / (s beta)
            a_t = lv.base_s + 2 * lv.latency_s
            b_t = (1 + 1 / p) * h * b_a / (lv.bw_bytes_per_s * lv.nvls_share)
            if tr.enabled:
                tr.step(
                    "ar_tree_alpha_s",
                    "NVLS all-reduce: fixed time",
                    "a_t",
                    "t0 + 2 * alpha",
                    a_t,
                    unit="s",
                    units=u,
                    t0=lv.base_s,
                    alpha=lv.latency_s,
                    note="NVLink SHARP: one hop to the switch, which reduces and multicasts back",
                )
                tr.step(
                    "ar_tree_beta_s",
                    "NVLS all-reduce: time per token",
                    "b_t",
                    "(1 + 1 / p) * h * b_a / (beta * s)",
                    b_t,
                    unit="s",
                    latex=r"\frac{(1 + 1/[p]) [h] \cdot [b_a]}{[beta] \cdot [s]}",
                    units=u,
                    p=p,
                    h=h,
                    b_a=b_a,
                    beta=lv.bw_bytes_per_s,
                    s=lv.nvls_share,
                    note="each GPU sends its slice of every other GPU's buffer up and gets every reduced slice back "
                    "(NCCL 2.17+ NVLS), at the share s of the ring's bandwidth (nvls_bw_share)",
                )
            return a_r, b_r, a_t, b_t
        depth = np.ceil(np.log2(p))
        a_t = float(lv.base_s + 2 * depth * lv.latency_s)
        b_t = 2 * h * b_a / lv.bw_bytes_per_s
        if tr.enabled:
            tr.step(
                "ar_tree_alpha_s",
                "Tree all-reduce: fixed time",
                "a_t",
                "t0 + 2 * d * alpha",
                a_t,
                unit="s",
                units=u,
                t0=lv.base_s,
                d=int(depth),
                alpha=lv.latency_s,
                note="double binary tree of depth d = ceil(log2 p): fewer hops, twice the bytes",
            )
            tr.step(
                "ar_tree_beta_s",
                "Tree all-reduce: time per token",
                "b_t",
                "2 * h * b_a / beta",
                b_t,
                unit="s",
                latex=r"\frac{2 [h] \cdot [b_a]}{[beta]}",
                units=u,
                h=h,
                b_a=b_a,
                beta=lv.bw_bytes_per_s,
            )
        return a_r, b_r, a_t, b_t

    def one_shot_available(self, p: int) -> bool:
        """Whether the serving engines' one-shot all-reduce runs over a TP group of ``p`` GPUs: inside one NVLink
        switch domain only (the kernel reads its peers' IPC buffers over NVLink)."""
        return not self.spans_nodes(p) and self.gpu.topology == "nvswitch"

    def one_shot_max_tokens(self, p: int, h: int, b_a: float) -> float:
        """Tokens below which the serving engines all-reduce a TP group's buffer in one shot [tokens]: every buffer
        over two GPUs, under 512 KB over three or four, under 256 KB over five to eight; larger buffers take the
        two-stage kernel or NCCL (vLLM ``csrc/custom_all_reduce.cuh``, ``CustomAllreduce::allreduce``).
        TP 4, h = 8,192, BF16: 524,288 / 16,384 = 32 tokens; TP 8: 16. None (0) where the kernel does not run:
        outside an NVLink switch domain (PCIe, across nodes) the engines fall back to NCCL, and AMD's mesh has no
        published cost of its ROCm kernel here."""
        if p <= 1 or not self.one_shot_available(p):
            return 0.0
        if p <= 2:
            return ONE_SHOT_ALWAYS
        cap = ONE_SHOT_MAX_BYTES_4 if p <= 4 else ONE_SHOT_MAX_BYTES_8
        return cap / (h * b_a)

    def one_shot_ar_line(self, p: int, h: int, b_a: float, base_s: float, tr: Trace = NO_TRACE):
        """The serving engines' one-shot all-reduce of ``T`` tokens of ``h`` elements over a TP group of ``p`` GPUs
        as a straight line in ``T``: ``(a_o, b_o)`` with cost ``a_o + b_o T`` [s, s per token].

        vLLM, SGLang and TensorRT-LLM all-reduce a decode batch with their own kernel, not NCCL: each GPU copies
        its buffer into a registered IPC buffer, waits on one flag barrier and reads every peer's buffer over
        NVLink (or Infinity Fabric) to sum it, ``t0' + alpha + (p - 1) n / beta`` with ``t0'`` the kernel's fixed
        cost (assumption ``custom_ar_base_us``) against NCCL's ``t0``: the cheapest line at small buffers, and the
        only one of the three that gains from fewer hops rather than fewer bytes. Inside an NVLink switch domain
        only: the engines fall back to NCCL over PCIe and across nodes, and the ROCm kernels' fixed cost on an
        Infinity Fabric mesh has no published measurement here (there :meth:`one_shot_max_tokens` is 0, so the line,
        returned as zero, is never taken).
        H100 SXM, TP 2, h = 8,192, 32 tokens (0.5 MB): 3 + 2.5 + 1 x 524,288 B / 360 GB/s = 6.96 us (vLLM's
        ca_1stage: 7 us); the ring 8 + 5 + 1.46 = 14.5 us.
        """
        if p <= 1 or not self.one_shot_available(p):
            return 0.0, 0.0
        lv = self.intra(p)
        a_o = base_s + lv.latency_s
        b_o = (p - 1) * h * b_a / lv.bw_bytes_per_s
        if tr.enabled:
            u = {"t0c": "s", "alpha": "s", "beta": "B/s", "b_a": "B"}
            tr.step(
                "ar_one_alpha_s",
                "One-shot all-reduce: fixed time",
                "a_o",
                "t0c + alpha",
                a_o,
                unit="s",
                units=u,
                t0c=base_s,
                alpha=lv.latency_s,
                note="the engine's own kernel: one barrier and one hop after its fixed cost (custom_ar_base_us)",
            )
            tr.step(
                "ar_one_beta_s",
                "One-shot all-reduce: time per token",
                "b_o",
                "(p - 1) * h * b_a / beta",
                b_o,
                unit="s",
                latex=r"\frac{([p] - 1) [h] \cdot [b_a]}{[beta]}",
                units=u,
                p=p,
                h=h,
                b_a=b_a,
                beta=lv.bw_bytes_per_s,
                note="each GPU reads every peer's whole buffer and sums it",
            )
        return a_o, b_o

    def all_to_all_line(self, n_per_token: float, p: int, tr: Trace = NO_TRACE) -> tuple[float, float]:
        """An EP all-to-all (dispatch or combine) of ``T`` tokens, each GPU sending ``n_per_token`` bytes per token,
        over ``p`` GPUs, as the straight line ``a_e + b_e T`` through its cost at 1 and 2 tokens [s, s per token];
        recorded on ``tr``."""
        t1, t2 = self.all_to_all_s(n_per_token, p), self.all_to_all_s(2 * n_per_token, p)
        return _line(
            tr,
            ("a2a_alpha_s", "EP all-to-all: fixed time", "a_e"),
            ("a2a_beta_s", "EP all-to-all: time per token", "b_e"),
            t1,
            t2,
            f"(p-1) alpha + (p-1)/p x n / beta over EP {p}; n = top-k x h x 2 B per token / ep; "
            "dispatch and combine per MoE layer",
        )

    def hop_line(self, h: int, b_a: float, cross_node: bool, tr: Trace = NO_TRACE) -> tuple[float, float]:
        """A pipeline stage's send of ``T`` tokens of ``h`` elements of ``b_a`` bytes to the next stage as the
        straight line ``a_h + b_h T`` through its cost at 1 and 2 tokens [s, s per token]; recorded on ``tr``."""
        t1, t2 = self.p2p_s(h * b_a, cross_node), self.p2p_s(2 * h * b_a, cross_node)
        return _line(
            tr,
            ("hop_alpha_s", "Pipeline hop: fixed time", "a_h"),
            ("hop_beta_s", "Pipeline hop: time per token", "b_h"),
            t1,
            t2,
            "point-to-point send of the activations to the next stage: alpha + n / beta"
            + (f" over {self.fabric.name}" if cross_node else " over the scale-up fabric"),
        )


def _line(tr: Trace, fixed: tuple[str, str, str], per_token: tuple[str, str, str], t1, t2, note: str):
    """``(2 t_1 - t_2, t_2 - t_1)``: the straight line through a cost at 1 and 2 tokens [s, s per token], its two
    steps recorded under the (key, label, symbol) of ``fixed`` and ``per_token``."""
    a, b = float(2 * t1 - t2), float(t2 - t1)
    if tr.enabled:
        u = {"t_1": "s", "t_2": "s"}
        tr.step(*fixed, "2 * t_1 - t_2", a, unit="s", units=u, t_1=float(t1), t_2=float(t2), note=note)
        tr.step(*per_token, "t_2 - t_1", b, unit="s", units=u, t_1=float(t1), t_2=float(t2))
    return a, b
