"""Speed: the time of one scheduler iteration, the roofline every other estimate calls.

One iteration processes ``T`` new tokens (any mix of prefill-chunk and decode tokens), over
``A`` attended (query, key) pairs, reading the cached K/V of ``R`` context tokens (seed 000)::

    FLOPs = 2 N_active T + 4 L (H d_head) A
    Bytes = weights read + KV read + KV written
    t     = max( FLOPs / (tp x peak x mfu_max x T/(T+T0)),  Bytes / (tp x BW x eta_bw) )
            + 2 L AllReduce(T h 2 B, tp) x (1 - overlap) + EP all-to-all + PP hops + step overhead

All quantities here are per GPU of one pipeline stage; a batch passes the ``pp`` stages in turn.

Modelling choices (physics over the seed where they differ):
  * FP8/FP4 compute runs at the BF16 peak times the named speed-up assumptions (1.3-1.5x for FP8),
    never at the 2x datasheet ratio; the peak of the precision caps it. Parts without FP8 tensor
    cores (A100, ...) run FP8 weights as weight-only (W8A16) at the BF16 rate.
  * MoE: compute follows active parameters; weight traffic follows the experts the batch actually
    touches, E (1 - (1 - k/E)^T) per layer for uniform top-k routing; EP adds a dispatch and a
    combine all-to-all per MoE layer.
  * MLA reads its compressed latent cache (the KV bytes per token of :func:`core.memory.kv_bytes_per_token`).
  * Sliding-window layers read at most the window (the caller passes ``R`` already clipped via
    :meth:`StepModel.kv_read_tokens`).

:class:`StepModel` precomputes every per-config constant once, so that one evaluation is a few
arithmetic operations and accepts numpy arrays (the simulator evaluates runs of iterations at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import catalog
from core.collectives import Collectives
from core.config import COMPUTE_PRECISION, RabitConfig
from core.memory import kv_bytes_per_token, kv_shard
from core.model import ModelArch
from core.units import MS
from core.validate import fabric_of, gpu_of, model_of

#: Bytes per element of the activations moved by TP all-reduces and EP all-to-alls (BF16).
ACT_BYTES = 2.0


def effective_peak_flop_per_s(gpu: catalog.GpuSpec, weights: str, fp8_speedup: float, fp4_speedup: float) -> float:
    """Dense compute rate a weight format achieves on a part, before MFU [FLOP/s].

    BF16 peak x the named FP8 (and FP4) speed-up, capped by that precision's datasheet peak.
    H100 SXM FP8: min(989 x 1.4, 1979) = 1,385 TFLOP/s.
    """
    prec = COMPUTE_PRECISION[weights]
    bf16 = gpu.peak_flop_per_s("bf16")
    if prec in ("fp8", "int8") and gpu.supports(prec):
        return min(bf16 * fp8_speedup, gpu.peak_flop_per_s(prec))
    if prec == "fp4" and gpu.supports("fp4"):
        return min(bf16 * fp8_speedup * fp4_speedup, gpu.peak_flop_per_s("fp4"))
    if prec == "fp4" and gpu.supports("fp8"):
        return min(bf16 * fp8_speedup, gpu.peak_flop_per_s("fp8"))
    return bf16


@dataclass(frozen=True)
class StepModel:
    """Per-config constants of the iteration-time model. Times in seconds, per iteration."""

    model: ModelArch
    tp: int
    pp: int
    ep: int
    # compute
    flop_per_token: float  # 2 N_active_matmul / (tp pp): per GPU of one stage
    attn_flop_per_pair: float  # 4 L_stage (H d_head) / tp
    peak_flop_per_s: float  # effective peak x mfu_max
    ramp_tokens: float
    # memory
    dense_weight_bytes: float  # non-expert weights on one GPU
    expert_bytes_per_gpu_per_expert: float  # bytes of one routed expert held by one GPU, over the stage's layers
    kv_bytes_per_token: float  # per GPU (sharded, one stage)
    mem_bw_bytes_per_s: float  # BW x eta
    # communication
    tp_ar_alpha_ring: float
    tp_ar_beta_ring: float  # s per token
    tp_ar_alpha_tree: float
    tp_ar_beta_tree: float
    ar_per_iter: float  # all-reduces per iteration on one stage (2 per layer)
    ep_a2a_alpha: float
    ep_a2a_beta: float  # s per token
    a2a_per_iter: float
    pp_hop_alpha: float
    pp_hop_beta: float  # s per token
    comm_exposed: float  # 1 - overlap
    overhead_s: float

    @classmethod
    def from_config(cls, cfg: RabitConfig) -> "StepModel":
        m, g, f = model_of(cfg), gpu_of(cfg), fabric_of(cfg)
        a = cfg.assumptions
        tp, pp, ep = cfg.tp, cfg.pp, cfg.ep
        layers_stage = m.num_layers / pp
        peak = effective_peak_flop_per_s(g, cfg.weights, a.fp8_speedup, a.fp4_speedup) * a.mfu_max
        b_w = cfg.weight_bytes_per_param
        p_expert_all = m.moe_layers * m.num_experts * m.expert_params()
        dense_q = m.quantizable_params() - p_expert_all
        dense_rest = m.total_params() - m.quantizable_params()
        # the input embedding is a lookup: only the rows used are read, so leave it out of the traffic
        dense_bytes = (dense_q * b_w + (dense_rest - m.embedding_params()) * 2.0) / (tp * pp)
        expert_split = ep if ep > 1 else tp
        expert_bytes = m.expert_params() * b_w * (m.moe_layers / pp) / expert_split
        k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem) / (kv_shard(m, tp) * pp)
        coll = Collectives.for_cluster(g, f, cfg.gpus_per_node, a.comm_bw_eff, a.collective_base_us * 1e-6)
        h = m.hidden_size
        # TP all-reduce of T x h x 2 B: a min of two affine functions of T (ring, tree); see core.collectives.
        if tp > 1 and not coll.spans_nodes(tp):
            lv = coll.intra(tp)
            ar_a_ring = lv.base_s + 2 * (tp - 1) * lv.latency_s
            ar_b_ring = 2 * (tp - 1) / tp * h * ACT_BYTES / lv.bw_bytes_per_s
            ar_a_tree = lv.base_s + 2 * np.ceil(np.log2(tp)) * lv.latency_s
            ar_b_tree = 2 * h * ACT_BYTES / lv.bw_bytes_per_s
            if lv.in_switch_reduction:  # NVLS replaces the tree line: 2 alpha + n / beta
                ar_a_tree, ar_b_tree = lv.base_s + 2 * lv.latency_s, h * ACT_BYTES / lv.bw_bytes_per_s
        elif tp > 1:  # spans nodes: hierarchical cost, linearised from two evaluations
            t1, t2 = coll.all_reduce_s(h * ACT_BYTES, tp), coll.all_reduce_s(2 * h * ACT_BYTES, tp)
            ar_a_ring = ar_a_tree = float(2 * t1 - t2)
            ar_b_ring = ar_b_tree = float(t2 - t1)
        else:
            ar_a_ring = ar_b_ring = ar_a_tree = ar_b_tree = 0.0
        if ep > 1 and m.is_moe:
            # dispatch + combine: each GPU sends its 1/ep share of the tokens x top-k x h x 2 B
            per_tok = m.experts_per_tok * h * ACT_BYTES / ep
            t1, t2 = coll.all_to_all_s(per_tok, ep), coll.all_to_all_s(2 * per_tok, ep)
            a2a_a, a2a_b = float(2 * t1 - t2), float(t2 - t1)
            a2a_n = 2 * m.moe_layers / pp
        else:
            a2a_a = a2a_b = a2a_n = 0.0
        if pp > 1:
            cross = cfg.tp * pp > coll.domain
            t1, t2 = coll.p2p_s(h * ACT_BYTES, cross), coll.p2p_s(2 * h * ACT_BYTES, cross)
            hop_a, hop_b = float(2 * t1 - t2), float(t2 - t1)
        else:
            hop_a = hop_b = 0.0
        return cls(
            model=m, tp=tp, pp=pp, ep=ep,
            flop_per_token=2.0 * m.active_matmul_params() / (tp * pp),
            attn_flop_per_pair=4.0 * layers_stage * m.attn_qk_dim / tp,
            peak_flop_per_s=peak, ramp_tokens=a.mfu_ramp_tokens,
            dense_weight_bytes=dense_bytes, expert_bytes_per_gpu_per_expert=expert_bytes,
            kv_bytes_per_token=k_t, mem_bw_bytes_per_s=g.memory_bw_bytes_per_s * a.mbu,
            tp_ar_alpha_ring=ar_a_ring, tp_ar_beta_ring=ar_b_ring, tp_ar_alpha_tree=float(ar_a_tree),
            tp_ar_beta_tree=ar_b_tree, ar_per_iter=2 * layers_stage if tp > 1 else 0.0,
            ep_a2a_alpha=a2a_a, ep_a2a_beta=a2a_b, a2a_per_iter=a2a_n,
            pp_hop_alpha=hop_a, pp_hop_beta=hop_b,
            comm_exposed=1.0 - a.comm_overlap, overhead_s=a.step_overhead_ms * MS,
        )

    # --- the model -------------------------------------------------------------------------------------
    def experts_touched(self, tokens):
        """Expected distinct routed experts per MoE layer for ``tokens`` tokens (uniform top-k)."""
        m = self.model
        if not m.is_moe:
            return 0.0 * tokens
        return m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** tokens)

    def parts(self, tokens, pairs, kv_tokens):
        """(compute, memory, exposed communication, overhead) time of one stage [s]; arrays welcome.

        tokens: new tokens in the iteration (T); pairs: attended (query, key) pairs (A);
        kv_tokens: cached tokens whose K/V are read (R), summed over the sequences in the batch.
        """
        T = np.asarray(tokens, dtype=float)
        eff = T / (T + self.ramp_tokens)
        flops = self.flop_per_token * T + self.attn_flop_per_pair * np.asarray(pairs, dtype=float)
        t_cmp = np.where(T > 0, flops / (self.peak_flop_per_s * np.maximum(eff, 1e-12)), 0.0)
        # touched experts x one expert's bytes on this GPU (1/ep of the experts whole, or 1/tp of each)
        bytes_w = self.dense_weight_bytes + self.experts_touched(T) * self.expert_bytes_per_gpu_per_expert
        bytes_kv = (np.asarray(kv_tokens, dtype=float) + T) * self.kv_bytes_per_token
        t_mem = (bytes_w + bytes_kv) / self.mem_bw_bytes_per_s
        ar = np.minimum(self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T,
                        self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T) * self.ar_per_iter
        a2a = (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter
        t_comm = np.where(T > 0, (ar + a2a) * self.comm_exposed, 0.0)
        return t_cmp, t_mem, t_comm, self.overhead_s

    def iteration_s(self, tokens, pairs, kv_tokens):
        """Wall time of one iteration through all ``pp`` stages [s] (latency of the batch)."""
        t_cmp, t_mem, t_comm, ovh = self.parts(tokens, pairs, kv_tokens)
        T = np.asarray(tokens, dtype=float)
        stage = np.maximum(t_cmp, t_mem) + t_comm
        hops = (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T)
        return self.pp * stage + hops + ovh

    def bound(self, tokens, pairs, kv_tokens) -> str:
        """Which limit binds a (scalar) iteration: "compute", "memory" or "communication"."""
        t_cmp, t_mem, t_comm, _ = self.parts(tokens, pairs, kv_tokens)
        vals = {"compute": float(t_cmp), "memory": float(t_mem), "communication": float(t_comm)}
        return max(vals, key=vals.get)

    def kv_read_tokens(self, context) -> float:
        """Cached tokens read per sequence at ``context`` tokens, sliding-window layers clipped."""
        return self.model.kv_context_tokens(context) if self.model.sliding_layers else context
