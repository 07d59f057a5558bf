"""The step model: the time of one scheduler iteration, written once (the RA-BIT spec "Speed").

One iteration processes ``T`` new tokens (any mix of prefill-chunk and decode tokens), over ``A``
attended (query, key) pairs, reading the cached K/V of ``R`` context tokens::

    t_c = (f_t - f_e) T / (peak x mfu_max x T / (T + T0))               compute, one stage: dense matmuls,
          + f_e T / (peak x mfu_max x t_e / (t_e + T0))                 routed experts at t_e = T k / E_T rows,
          + f_a A / (peak x mfu_max)                                   attention
    t_m = (W_r(T) + (R + T) k_g + T r_b) / (BW x eta_bw)                memory, one stage (r_b: MoE permute)
    t_x = (n_ar min(ring(T), tree(T)) + n_a2a a2a(T)) x (1 - overlap)   exposed communication, one stage
    t_k = n_k x (t_graph if T <= T_graph else t_eager)                  kernel launches, one stage
    t   = pp (max(t_c, t_m) + t_x) + (pp - 1) hop(T) + t_o
    t_o = t_step + pp t_k + S (t_seq + V y_v / (BW x eta_bw))             fixed costs of the iteration

``S`` is the number of sequences the iteration schedules and samples (a decode iteration: ``S = T``).

:meth:`StepModel.stage_parts` is the one body of that formula: scalars in, floats out (the simulator's
inner loop), arrays in, arrays out (sweeps, the simulator's timing table in :mod:`core.serving.sim.timing`, the
optimizer's screen). :func:`record_iteration` records the same iteration as derivation steps whose values
come from that body; the expressions it shows are the ones below, and a test re-evaluates each.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict

from core import catalog
from core.config import Deployment
from core.catalog import CUDA_GRAPH_MAX_TOKENS
from core.physics.collectives import ACT_BYTES, Collectives
from core.config import COMPUTE_PRECISION
from core.physics.memory import SSM_STATE_BYTES, kv_bytes_per_token, kv_shard
from core.catalog import ModelArch
from core.base import Trace
from core.base import MS

__all__ = [
    "IterationParts",
    "StepModel",
    "effective_peak_flop_per_s",
    "iteration",
    "record_iteration",
    "record_weights_read",
]

#: Kernels one decoder layer launches: input RMSNorm, QKV GEMM, RoPE, KV-cache write, attention, output GEMM,
#: residual + post-attention RMSNorm, gate/up GEMM, SiLU x mul, down GEMM (the vLLM Llama layer,
#: ``vllm/model_executor/models/llama.py``). TP adds its 2 all-reduces, a MoE layer its router GEMM, top-k /
#: permute and un-permute (``fused_moe``), EP its dispatch and combine.
KERNELS_PER_LAYER = 10
#: Kernels of an iteration outside the layers: embedding lookup, final norm, LM head (counted once).
KERNELS_PER_ITERATION = 3

_SCALAR = (int, float, np.integer, np.floating)


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
    overhead_s: float  # t_step: the per-iteration scheduler overhead
    # MoE: the routed experts' share of f_t, and the permute / un-permute traffic per token
    expert_flop_per_token: float = 0.0  # f_e = 2 k P_e L_moe / (tp pp)
    route_bytes_per_token: float = 0.0  # r_b = L_moe / pp x 2 (k + 1) h x 2 B / ep
    # fixed per-step costs: kernel launches, per-sequence work, sampling
    kernels_per_stage: float = 0.0  # n_k
    graph_launch_s: float = 0.0  # per kernel, inside a CUDA graph
    eager_launch_s: float = 0.0  # per kernel, eager
    graph_max_tokens: float = 0.0  # iterations up to this many tokens replay a graph
    seq_overhead_s: float = 0.0  # host work per scheduled sequence
    sample_s_per_seq: float = 0.0  # V y_v / (BW eta_bw): sampling one sequence's logits
    # a hybrid's state-space layers (Jamba): one sequence's fixed state on one TP rank, summed over the stages
    # (M_s / tp); each decode step reads and rewrites it (HF HybridMambaAttentionDynamicCache: conv and SSM states)
    state_bytes_per_seq: float = 0.0  # m_s
    # K/V reads per cached token relative to once per KV head: 1 for grouped decode-attention kernels (XQA,
    # FlashInfer, FlashAttention read each KV head once for its query group); H / H_kv for a kernel that loads
    # a KV head once per query head (TensorRT-LLM's masked MHA for GQA before its XQA kernels; see
    # :func:`per_query_head_kv_reads`)
    kv_read_factor: float = 1.0

    @classmethod
    def from_deployment(cls, dep: Deployment) -> "StepModel":
        """Every per-deployment constant of the iteration formula, computed once."""
        cfg = dep
        m, g = dep.model, dep.gpu
        a = dep.assumptions
        tp, pp, ep = dep.tp, dep.pp, dep.ep
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
        coll = Collectives.of(dep)
        h = m.hidden_size
        # TP all-reduce of T x h x 2 B: a min of two affine functions of T (ring, tree); see core.physics.collectives.
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
        # kernel launches of one stage (module constants above) and the engine's CUDA-graph capture limit
        k_layer = KERNELS_PER_LAYER + (2 if tp > 1 else 0)
        k_moe = (3 + (2 if ep > 1 else 0)) if m.is_moe else 0
        n_k = (m.num_layers * k_layer + m.moe_layers * k_moe + KERNELS_PER_ITERATION) / pp
        w = dep.config.workload
        graph_max = CUDA_GRAPH_MAX_TOKENS.get(w.engine, 512) if w.cuda_graphs else 0
        if pp > 1:
            cross = cfg.tp * pp > coll.domain
            t1, t2 = coll.p2p_s(h * ACT_BYTES, cross), coll.p2p_s(2 * h * ACT_BYTES, cross)
            hop_a, hop_b = float(2 * t1 - t2), float(t2 - t1)
        else:
            hop_a = hop_b = 0.0
        if m.is_moe:
            f_e = 2.0 * m.experts_per_tok * m.expert_params() * m.moe_layers / (tp * pp)
            # permute gathers each token's k copies (read 1 row of h, write k), un-permute scatters them back
            # (read k, write 1): 2 (k + 1) h x 2 B per token per MoE layer; with EP each GPU moves its 1/ep share
            r_b = (m.moe_layers / pp) * 2 * (m.experts_per_tok + 1) * h * ACT_BYTES / (ep if ep > 1 else 1)
        else:
            f_e = r_b = 0.0
        return cls(
            model=m,
            tp=tp,
            pp=pp,
            ep=ep,
            flop_per_token=2.0 * m.active_matmul_params() / (tp * pp),
            attn_flop_per_pair=4.0 * (m.attention_layers / pp) * m.attn_qk_dim / tp,  # a hybrid's SSM layers: none
            peak_flop_per_s=peak,
            ramp_tokens=a.mfu_ramp_tokens,
            dense_weight_bytes=dense_bytes,
            expert_bytes_per_gpu_per_expert=expert_bytes,
            kv_bytes_per_token=k_t,
            mem_bw_bytes_per_s=g.memory_bw_bytes_per_s * a.mbu,
            tp_ar_alpha_ring=ar_a_ring,
            tp_ar_beta_ring=ar_b_ring,
            tp_ar_alpha_tree=float(ar_a_tree),
            tp_ar_beta_tree=ar_b_tree,
            # 2 all-reduces per layer (attention, MLP); with EP a MoE layer's MLP all-reduce gives way to its
            # dispatch + combine all-to-alls (vLLM --enable-expert-parallel, DeepSeek-V3 report arXiv 2412.19437)
            ar_per_iter=(2 * m.num_layers - (m.moe_layers if a2a_n else 0)) / pp if tp > 1 else 0.0,
            ep_a2a_alpha=a2a_a,
            ep_a2a_beta=a2a_b,
            a2a_per_iter=a2a_n,
            pp_hop_alpha=hop_a,
            pp_hop_beta=hop_b,
            comm_exposed=1.0 - a.comm_overlap,
            overhead_s=a.step_overhead_ms * MS,
            expert_flop_per_token=f_e,
            route_bytes_per_token=r_b,
            kernels_per_stage=n_k,
            graph_launch_s=a.graph_launch_us * 1e-6,
            eager_launch_s=a.eager_launch_us * 1e-6,
            graph_max_tokens=float(graph_max),
            seq_overhead_s=a.seq_overhead_us * 1e-6,
            sample_s_per_seq=m.vocab_size * a.sample_bytes_per_vocab / (g.memory_bw_bytes_per_s * a.mbu),
            state_bytes_per_seq=m.ssm_state_bytes_per_seq(SSM_STATE_BYTES) / tp,
        )

    # --- the model -------------------------------------------------------------------------------------
    def experts_touched(self, tokens):
        """Expected distinct routed experts per MoE layer for ``tokens`` tokens (uniform top-k)."""
        m = self.model
        if not m.is_moe:
            return 0.0 * tokens
        return m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** tokens)

    def weights_read_bytes(self, tokens):
        """Weight bytes one GPU reads in an iteration of ``tokens`` tokens [B] (dense + touched experts)."""
        return self.dense_weight_bytes + self.experts_touched(tokens) * self.expert_bytes_per_gpu_per_expert

    def stage_parts(self, T, A, R):
        """(compute, memory, exposed communication, kernel launches) of one pipeline stage [s]: the formula.

        The one body of the step time (the RA-BIT spec "Speed"); scalars in, floats out (pure Python, for
        the simulator's inner loop), arrays in, arrays out. ``T`` new tokens, ``A`` attended (query, key)
        pairs, ``R`` cached tokens whose K/V are read, summed over the sequences of the batch::

            t_c = f_t T / (peak x mfu_max x T / (T + T0)) + f_a A / (peak x mfu_max)

        The T/(T+T0) ramp is a GEMM-tiling effect of the matmuls; attention runs on its own (query, key)
        pairs at the ceiling (its own roofline), so a long context at batch 1 is not made compute-bound by it.
        A MoE layer's routed experts run as one small GEMM per touched expert: each sees only its
        ``t_e = T k / E_T`` rows (``E_T = E (1 - (1 - k/E)^T)`` experts touched), so the ramp applies per expert
        (grouped-GEMM kernels tile each expert separately: vLLM ``fused_moe``, MegaBlocks arXiv 2211.15841);
        the gate GEMM is in ``f_t`` (router parameters), and the permute / un-permute copies add ``r_b`` bytes
        per token::

            t_c = (f_t - f_e) T / (pi eff(T)) + f_e T / (pi eff(t_e)) + f_a A / pi
            t_m = (W_d + E_T w_e + (R + T) k_g + T r_b) / (BW x eta_bw)
            t_x = (n_ar min(a_r + b_r T, a_t + b_t T) + n_a2a (a_e + b_e T)) x (1 - overlap)
            t_k = n_k x (t_graph if T <= T_graph else t_eager)

        The launch term is the fixed cost that dominates small batches: an iteration of up to the engine's
        capture size replays a CUDA graph (about a microsecond per kernel), a larger one launches each of the
        stage's ``n_k`` kernels from the host (NVIDIA CUDA Programming Guide, "CUDA Graphs"). An iteration
        without new tokens computes, communicates and launches nothing.
        """
        arr = type(T) is np.ndarray
        if arr:
            eff = np.maximum(T / (T + self.ramp_tokens), 1e-12)
        else:
            eff = T / (T + self.ramp_tokens) if T > 0 else 1.0
            eff = eff if eff > 1e-12 else 1e-12
        f_e = self.expert_flop_per_token
        t_cmp = (self.flop_per_token - f_e) * T / (
            self.peak_flop_per_s * eff
        ) + self.attn_flop_per_pair * A / self.peak_flop_per_s
        # E_T: distinct routed experts the T tokens touch per MoE layer (their GEMMs and their weight reads)
        if f_e or self.expert_bytes_per_gpu_per_expert:
            m = self.model
            touched = m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T)
        if f_e:  # each touched expert's GEMM sees t_e = T k / E_T rows: the tiling ramp per expert
            if arr:
                rows = np.where(T > 0, T * m.experts_per_tok / np.maximum(touched, 1e-300), 1.0)
                eff_e = np.maximum(rows / (rows + self.ramp_tokens), 1e-12)
            else:
                rows = T * m.experts_per_tok / touched if T > 0 else 1.0
                eff_e = rows / (rows + self.ramp_tokens) if rows > 0 else 1e-12
                eff_e = eff_e if eff_e > 1e-12 else 1e-12
            t_cmp = t_cmp + f_e * T / (self.peak_flop_per_s * eff_e)
        ring = self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T
        tree = self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T
        t_comm = (
            (np.minimum(ring, tree) if arr else (ring if ring < tree else tree)) * self.ar_per_iter
            + (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter
        ) * self.comm_exposed
        w = self.dense_weight_bytes
        if self.expert_bytes_per_gpu_per_expert:  # touched experts x one expert's bytes on this GPU
            w = w + touched * self.expert_bytes_per_gpu_per_expert
        t_mem = (
            w + (self.kv_read_factor * R + T) * self.kv_bytes_per_token + T * self.route_bytes_per_token
        ) / self.mem_bw_bytes_per_s
        n_k = self.kernels_per_stage
        if arr:
            t_k = np.where(T > 0, np.where(T <= self.graph_max_tokens, self.graph_launch_s, self.eager_launch_s), 0.0)
            return np.where(T > 0, t_cmp, 0.0), t_mem, np.where(T > 0, t_comm, 0.0), n_k * t_k
        if T <= 0:
            return 0.0, t_mem, 0.0, 0.0
        return t_cmp, t_mem, t_comm, n_k * (self.graph_launch_s if T <= self.graph_max_tokens else self.eager_launch_s)

    @property
    def seq_cost_s(self) -> float:
        """Fixed cost of one scheduled sequence per iteration [s]: host bookkeeping + sampling its logits + (a
        hybrid) reading and rewriting its state-space state, 2 m_s / (BW eta_bw)."""
        return self.seq_overhead_s + self.sample_s_per_seq + 2.0 * self.state_bytes_per_seq / self.mem_bw_bytes_per_s

    def fixed_s(self, launch_s, seqs):
        """Fixed costs of one iteration [s]: t_step + pp t_k + S (t_seq + (V y_v + 2 m_s) / (BW eta_bw)); arrays
        welcome."""
        return self.overhead_s + self.pp * launch_s + seqs * self.seq_cost_s

    def parts(self, tokens, pairs, kv_tokens, seqs=None):
        """(compute, memory, exposed communication, fixed costs) [s]: the first three of one stage, the fixed
        costs of the whole iteration (:meth:`fixed_s`; ``seqs`` defaults to ``tokens``); arrays welcome."""
        T = np.asarray(tokens, dtype=float)
        t_cmp, t_mem, t_comm, t_k = self.stage_parts(
            T, np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float)
        )
        return t_cmp, t_mem, t_comm, self.fixed_s(t_k, T if seqs is None else np.asarray(seqs, dtype=float))

    def scalar_parts(self, T: float, A: float, R: float) -> tuple[float, float, float]:
        """(compute, memory, exposed communication) of one stage for scalar arguments [s] (``stage_parts``)."""
        c, m, x, _ = self.stage_parts(float(T), float(A), float(R))
        return c, m, x

    def hops_s(self, tokens):
        """Pipeline stage-to-stage sends of one iteration, all ``pp - 1`` hops [s]."""
        return (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * tokens)

    def iteration_s(self, tokens, pairs, kv_tokens, seqs=None):
        """Wall time of one iteration through all ``pp`` stages [s] (latency of the batch)::

            t = pp (max(t_c, t_m) + t_x) + (pp - 1)(a_h + b_h T) + t_o(T, S)

        ``seqs`` (S) is the number of sequences scheduled (and sampled); it defaults to ``tokens``, which
        is exact for decode. Scalars in, float out (pure Python, for the simulator's inner loop); arrays in,
        array out.
        """
        if isinstance(tokens, _SCALAR) and isinstance(pairs, _SCALAR) and isinstance(kv_tokens, _SCALAR):
            T = float(tokens)
            t_cmp, t_mem, t_comm, t_k = self.stage_parts(T, float(pairs), float(kv_tokens))
            stage = (t_cmp if t_cmp > t_mem else t_mem) + t_comm
        else:
            T = np.asarray(tokens, dtype=float)
            t_cmp, t_mem, t_comm, t_k = self.stage_parts(
                T, np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float)
            )
            stage = np.maximum(t_cmp, t_mem) + t_comm
        S = T if seqs is None else seqs
        hops = (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T)
        return self.pp * stage + hops + self.fixed_s(t_k, S)

    def micro_batches(self, seqs):
        """Micro-batches in flight through the pipeline: ``min(pp, S)`` (at least 1); arrays welcome.

        Pipeline-parallel engines split the running batch by sequences into micro-batches that follow one
        another through the stages (vLLM runs ``pipeline_parallel_size`` virtual engines, one micro-batch each;
        TensorRT-LLM in-flight batching likewise), so while one stage works on a micro-batch the others work on
        the rest. A single sequence cannot be split: with fewer sequences than stages, stages idle.
        """
        if self.pp == 1:
            return 1.0 if isinstance(seqs, _SCALAR) else np.ones_like(np.asarray(seqs, dtype=float))
        if isinstance(seqs, _SCALAR):
            s = float(seqs)
            return float(self.pp) if s >= self.pp else (s if s >= 1.0 else 1.0)
        return np.clip(np.minimum(float(self.pp), np.asarray(seqs, dtype=float)), 1.0, None)

    def pipelined_s(self, tokens, pairs, kv_tokens, seqs=None):
        """Time for a whole batch to advance one iteration with the pipeline kept busy [s]::

            m = min(pp, S);   t = pp (max(t_c, t_m) + t_x)(T/m) + (pp - 1) hop(T/m) + t_o(T/m, S/m)

        The batch of ``S`` sequences runs as ``m`` micro-batches of ``T/m`` tokens. Each stage works through the
        ``m`` micro-batches in turn while the other stages work on the others, so in steady state (engines keep
        the micro-batches cycling from one iteration to the next) a stage is busy ``m t_stage(T/m)`` of every
        ``pp t_stage(T/m) + hops`` -- the pipeline bubble is ``(pp - m) / pp``, zero once there are ``pp``
        micro-batches -- and a sequence gets its next token after one trip through all ``pp`` stages and
        ``pp - 1`` activation sends. Each micro-batch re-reads the stage's weights, which is what a pipeline
        pays for its lower per-GPU traffic. Without a pipeline (``pp = 1``) this is :meth:`iteration_s`.
        (GPipe, Huang et al. arXiv 1811.06965, for the bubble of ``m`` micro-batches over ``pp`` stages; vLLM
        docs "Distributed inference and serving": pipeline parallelism with virtual engines.)
        """
        if self.pp == 1:
            return self.iteration_s(tokens, pairs, kv_tokens, seqs)
        S = tokens if seqs is None else seqs
        m = self.micro_batches(S)
        if all(isinstance(v, _SCALAR) for v in (tokens, pairs, kv_tokens, S)):
            return self.iteration_s(float(tokens) / m, float(pairs) / m, float(kv_tokens) / m, float(S) / m)
        T = np.asarray(tokens, dtype=float)
        return self.iteration_s(
            T / m, np.asarray(pairs, dtype=float) / m, np.asarray(kv_tokens, dtype=float) / m, np.asarray(S) / m
        )

    def bound(self, tokens, pairs, kv_tokens) -> str:
        """Which limit binds a (scalar) iteration: "compute", "memory" or "communication"."""
        t_cmp, t_mem, t_comm, _ = self.parts(tokens, pairs, kv_tokens)
        vals = {"compute": float(t_cmp), "memory": float(t_mem), "communication": float(t_comm)}
        return max(vals, key=lambda k: vals[k])

    def kv_read_tokens(self, context):
        """Cached tokens read per sequence at ``context`` tokens, sliding-window layers clipped; arrays welcome."""
        m = self.model
        if not m.sliding_layers:
            return context
        c = np.asarray(context, dtype=float)
        out = (m.full_attention_layers * c + m.sliding_layers * np.minimum(c, m.sliding_window)) / m.attention_layers
        return float(out) if out.ndim == 0 else out


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class IterationParts(_Frozen):
    """One iteration, taken apart. Work is per GPU of one stage; times in seconds."""

    tokens: float  # T
    pairs: float  # A
    kv_tokens: float  # R
    flop: float  # per GPU of one stage
    bytes: float  # per GPU of one stage: weights read + KV read + KV written
    compute_s: float  # one stage
    memory_s: float  # one stage
    comm_s: float  # one stage, exposed
    hops_s: float  # all pp - 1 stage hops
    overhead_s: float  # fixed costs of the iteration: scheduler step + pp x launches + per-sequence work
    time_s: float  # pp (max(compute, memory) + comm) + hops + overhead
    pp: int
    bound: str
    seqs: float = 0.0  # S: sequences scheduled and sampled
    launch_s: float = 0.0  # kernel launches of one stage

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes if self.bytes else math.inf


def iteration(sm: StepModel, T: float, A: float, R: float, S: float | None = None) -> IterationParts:
    """One iteration of ``T`` tokens, ``A`` pairs, ``R`` cached tokens and ``S`` sequences (default ``T``)."""
    c, mm, x, k = sm.stage_parts(float(T), float(A), float(R))
    S = float(T) if S is None else float(S)
    hops = sm.hops_s(T)
    time = sm.iteration_s(float(T), float(A), float(R), S)
    vals = {"compute": c, "memory": mm, "communication": x}
    return IterationParts(
        tokens=T,
        pairs=A,
        kv_tokens=R,
        flop=sm.flop_per_token * T + sm.attn_flop_per_pair * A,
        bytes=sm.weights_read_bytes(T)
        + (sm.kv_read_factor * R + T) * sm.kv_bytes_per_token
        + T * sm.route_bytes_per_token,
        compute_s=c,
        memory_s=mm,
        comm_s=x,
        hops_s=hops,
        overhead_s=sm.fixed_s(k, S),
        time_s=time,
        pp=sm.pp,
        bound=max(vals, key=lambda n: vals[n]),
        seqs=S,
        launch_s=k,
    )


_U_ITER = {
    "T": "tokens",
    "A": "pairs",
    "R": "tokens",
    "f_t": "FLOP",
    "f_a": "FLOP",
    "pi_flops": "FLOP/s",
    "mfu": "frac",
    "T0": "tokens",
    "W_r": "B",
    "k_g": "B",
    "pi_bw": "B/s",
    "eta_bw": "frac",
    "n_ar": "",
    "a_r": "s",
    "a_t": "s",
    "b_r": "s",
    "b_t": "s",
    "n_a2a": "",
    "a_e": "s",
    "b_e": "s",
    "x_c": "frac",
    "pp": "",
    "a_h": "s",
    "b_h": "s",
    "t_o": "s",
    "t_s": "s",
    "n_k": "",
    "t_k": "s",
    "S": "",
    "t_q": "s",
    "V": "",
    "y_v": "B",
    "m_s": "B",
    "t_c": "s",
    "t_m": "s",
    "t_x": "s",
    "F": "FLOP",
    "Y": "B",
    "f_e": "FLOP",
    "t_e": "tokens",
    "r_b": "B",
    "g_r": "x",
}

#: The recorded expressions of one iteration, in the symbols of :func:`consts` (each re-evaluated by a test).
EXPR_FLOP = "f_t * T + f_a * A"
EXPR_COMPUTE = (
    "(f_t - f_e) * T / (pi_flops * mfu * T / (T + T0)) + f_e * T / (pi_flops * mfu * t_e / (t_e + T0))"
    " + f_a * A / (pi_flops * mfu)"
)
EXPR_BYTES = "W_r + (g_r * R + T) * k_g + T * r_b"
EXPR_MEMORY = "Y / (pi_bw * eta_bw)"
EXPR_COMM = "(n_ar * min(a_r + b_r * T, a_t + b_t * T) + n_a2a * (a_e + b_e * T)) * x_c"
EXPR_FIXED = "t_s + pp * n_k * t_k + S * (t_q + (V * y_v + 2 * m_s) / (pi_bw * eta_bw))"
EXPR_TIME = "pp * (max(t_c, t_m) + t_x) + (pp - 1) * (a_h + b_h * T) + t_o"


def _inline(expr: str, **parts: str) -> str:
    """``expr`` with each named intermediate replaced by its own expression, in parentheses."""
    for name, sub in parts.items():
        expr = re.sub(rf"\b{name}\b", f"({sub})", expr)
    return expr


#: The whole iteration in one expression (the compact record), built from the parts above.
_FULL_ITER = _inline(
    EXPR_TIME,
    t_c=_inline(EXPR_COMPUTE, F=EXPR_FLOP),
    t_m=_inline(EXPR_MEMORY, Y=EXPR_BYTES),
    t_x=EXPR_COMM,
    t_o=EXPR_FIXED,
)


def consts(sm: StepModel, dep: Deployment) -> dict[str, float]:
    """The StepModel constants as the named inputs of the recorded expressions."""
    a = dep.assumptions
    g = dep.gpu
    return dict(
        f_t=sm.flop_per_token,
        f_e=sm.expert_flop_per_token,
        r_b=sm.route_bytes_per_token,
        g_r=sm.kv_read_factor,
        f_a=sm.attn_flop_per_pair,
        mfu=a.mfu_max,
        pi_flops=sm.peak_flop_per_s / a.mfu_max,
        T0=sm.ramp_tokens,
        k_g=sm.kv_bytes_per_token,
        pi_bw=g.memory_bw_bytes_per_s,
        eta_bw=a.mbu,
        n_ar=sm.ar_per_iter,
        a_r=sm.tp_ar_alpha_ring,
        b_r=sm.tp_ar_beta_ring,
        a_t=sm.tp_ar_alpha_tree,
        b_t=sm.tp_ar_beta_tree,
        n_a2a=sm.a2a_per_iter,
        a_e=sm.ep_a2a_alpha,
        b_e=sm.ep_a2a_beta,
        x_c=sm.comm_exposed,
        pp=sm.pp,
        a_h=sm.pp_hop_alpha,
        b_h=sm.pp_hop_beta,
        t_s=sm.overhead_s,
        n_k=sm.kernels_per_stage,
        t_q=sm.seq_overhead_s,
        V=sm.model.vocab_size,
        y_v=a.sample_bytes_per_vocab,
        m_s=sm.state_bytes_per_seq,
    )


def per_query_head_kv_reads(sm: StepModel) -> StepModel:
    """``sm`` with a decode-attention kernel that loads each KV head once per query head (H / H_kv reads).

    TensorRT-LLM's masked multi-head attention kernel served GQA models this way until its XQA kernels, which
    read a KV head once for its whole query group (TensorRT-LLM v0.10.0 release notes: "Integrated the new
    NVIDIA Hopper XQA kernels for LLaMA 2 70B model"; docs "Multi-Head, Multi-Query, and Group-Query
    Attention"). The engines sized by default (vLLM, SGLang, TensorRT-LLM today) read each KV head once.
    """
    m = sm.model
    return replace(sm, kv_read_factor=m.num_heads / m.num_kv_heads if m.num_kv_heads else 1.0)


def launch_per_kernel_s(sm: StepModel, T: float) -> float:
    """The launch cost of one kernel in an iteration of ``T`` tokens: a graph replay or an eager launch [s]."""
    return sm.graph_launch_s if T <= sm.graph_max_tokens else sm.eager_launch_s


def rows_per_expert(sm: StepModel, T: float) -> float:
    """Rows each touched routed expert's GEMM sees in an iteration of ``T`` tokens: T k / E_T (T for dense)."""
    m = sm.model
    if not m.is_moe or T <= 0:
        return float(T) if T > 0 else 1.0
    return T * m.experts_per_tok / (m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T))


def record_weights_read(tr: Trace, sm: StepModel, key: str, T: float) -> float:
    m = sm.model
    if not sm.expert_bytes_per_gpu_per_expert:
        return sm.dense_weight_bytes
    return tr.step(
        key,
        "Weights read (dense + experts touched)",
        "W_r",
        "W_d + E * (1 - (1 - k / E) ** T) * w_e",
        sm.weights_read_bytes(T),
        unit="B",
        latex=r"[W_d] + [E] \left(1 - \left(1 - \frac{[k]}{[E]}\right)^{[T]}\right) [w_e]",
        units={"W_d": "B", "w_e": "B", "T": "tokens"},
        W_d=sm.dense_weight_bytes,
        E=m.num_experts,
        k=m.experts_per_tok,
        T=T,
        w_e=sm.expert_bytes_per_gpu_per_expert,
        note="expected distinct experts for T tokens with uniform top-k routing, per MoE layer",
    )


def record_iteration(
    tr: Trace,
    sm: StepModel,
    dep: Deployment,
    p: str,
    what: str,
    T: float,
    A: float,
    R: float,
    it: IterationParts,
    *,
    compact: bool = False,
    final_label: str | None = None,
    final_symbol: str = "t",
    final_key: str | None = None,
    note: str = "",
) -> None:
    """Record the chain of one iteration under key prefix ``p`` (the last step ``final_key``, default
    ``{p}_s``); the values come from ``it``."""
    k = consts(sm, dep)
    k["t_k"] = launch_per_kernel_s(sm, T) if T > 0 else 0.0
    k["t_e"] = rows_per_expert(sm, T)
    k["S"] = it.seqs
    if compact:
        W_r = sm.weights_read_bytes(T)
        tr.step(
            f"{p}_s",
            final_label or f"{what}: iteration time",
            final_symbol,
            _FULL_ITER,
            it.time_s,
            unit="s",
            latex=r"t_{iter}([T], [A], [R])",
            units=_U_ITER,
            T=T,
            A=A,
            R=R,
            W_r=W_r,
            **k,
            note=note or "the same iteration formula as above, with these T, A and R",
        )
        return
    W_r = record_weights_read(tr, sm, f"{p}_weights_read_bytes", T)
    tr.step(
        f"{p}_flop",
        f"{what}: FLOPs per GPU",
        "F",
        EXPR_FLOP,
        it.flop,
        unit="FLOP",
        latex=r"[f_t] \cdot [T] + [f_a] \cdot [A]",
        units=_U_ITER,
        f_t=k["f_t"],
        T=T,
        f_a=k["f_a"],
        A=A,
        note="matmuls (2 FLOP per active parameter per token) + attention (QK^T and PV per pair)",
    )
    t_c = tr.step(
        f"{p}_compute_s",
        f"{what}: compute time",
        "t_c",
        EXPR_COMPUTE,
        it.compute_s,
        unit="s",
        latex=r"\frac{([f_t] - [f_e]) \cdot [T]}{[pi_flops] \cdot [mfu] \cdot \frac{[T]}{[T] + [T0]}} + "
        r"\frac{[f_e] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot \frac{[t_e]}{[t_e] + [T0]}} + "
        r"\frac{[f_a] \cdot [A]}{[pi_flops] \cdot [mfu]}",
        units=_U_ITER,
        f_t=k["f_t"],
        f_e=k["f_e"],
        t_e=k["t_e"],
        T=T,
        f_a=k["f_a"],
        A=A,
        pi_flops=k["pi_flops"],
        mfu=k["mfu"],
        T0=k["T0"],
        note="the matmul efficiency ramps with tokens per iteration as T/(T+T0) (GEMM tiling; the RA-BIT spec, "
        "T0 = 64); attention runs at the ceiling on its own pairs"
        + (f"; routed experts (f_e) ramp on their own t_e = T k / E_T = {k['t_e']:,.3g} rows each" if k["f_e"] else ""),
    )
    Y = tr.step(
        f"{p}_bytes",
        f"{what}: bytes moved per GPU",
        "Y",
        EXPR_BYTES,
        it.bytes,
        unit="B",
        latex=r"[W_r] + ([g_r] \cdot [R] + [T]) \cdot [k_g] + [T] \cdot [r_b]",
        units=_U_ITER,
        W_r=W_r,
        g_r=k["g_r"],
        R=R,
        T=T,
        k_g=k["k_g"],
        r_b=k["r_b"],
        note="weights read + KV read (R cached tokens) + KV written (T new tokens)"
        + (" + MoE permute / un-permute copies (r_b per token)" if k["r_b"] else ""),
    )
    t_m = tr.step(
        f"{p}_memory_s",
        f"{what}: memory time",
        "t_m",
        EXPR_MEMORY,
        it.memory_s,
        unit="s",
        latex=r"\frac{[Y]}{[pi_bw] \cdot [eta_bw]}",
        units=_U_ITER,
        Y=Y,
        pi_bw=k["pi_bw"],
        eta_bw=k["eta_bw"],
        note="achieved HBM bandwidth = datasheet x MBU",
    )
    t_x = tr.step(
        f"{p}_comm_s",
        f"{what}: exposed communication per stage",
        "t_x",
        EXPR_COMM,
        it.comm_s,
        unit="s",
        latex=r"\left([n_ar] \min([a_r] + [b_r] \cdot [T],\ [a_t] + [b_t] \cdot [T]) + "
        r"[n_a2a] ([a_e] + [b_e] \cdot [T])\right) \cdot [x_c]",
        units=_U_ITER,
        n_ar=k["n_ar"],
        a_r=k["a_r"],
        b_r=k["b_r"],
        T=T,
        a_t=k["a_t"],
        b_t=k["b_t"],
        n_a2a=k["n_a2a"],
        a_e=k["a_e"],
        b_e=k["b_e"],
        x_c=k["x_c"],
        note="TP all-reduces of T x h x 2 B (2 per layer; the cheaper of ring and tree/NVLS) + EP "
        "all-to-alls, times the share not hidden behind compute",
    )
    graph = T <= sm.graph_max_tokens
    t_o = tr.step(
        f"{p}_fixed_s",
        f"{what}: fixed costs (scheduler, kernel launches, per-sequence work and sampling)",
        "t_o",
        EXPR_FIXED,
        it.overhead_s,
        unit="s",
        latex=r"[t_s] + [pp] \cdot [n_k] \cdot [t_k] + [S] \left([t_q] + \frac{[V] \cdot [y_v] + 2 [m_s]}{[pi_bw] \cdot [eta_bw]}\right)",
        units=_U_ITER,
        t_s=k["t_s"],
        pp=sm.pp,
        n_k=k["n_k"],
        t_k=k["t_k"],
        S=k["S"],
        t_q=k["t_q"],
        V=k["V"],
        y_v=k["y_v"],
        m_s=k["m_s"],
        pi_bw=k["pi_bw"],
        eta_bw=k["eta_bw"],
        note=f"{k['n_k']:.0f} kernels per stage, {'replayed from a CUDA graph' if graph else 'launched eagerly'} "
        f"({T:,.0f} tokens {'<=' if graph else '>'} the engine's capture size {sm.graph_max_tokens:,.0f}); "
        "per sequence: scheduler bookkeeping and sampling its logits over the vocabulary"
        + (", and a hybrid's state-space state read and rewritten" if k["m_s"] else ""),
    )
    tr.step(
        final_key or f"{p}_s",
        final_label or f"{what}: iteration time",
        final_symbol,
        EXPR_TIME,
        it.time_s,
        unit="s",
        latex=r"[pp] \left(\max([t_c], [t_m]) + [t_x]\right) + ([pp] - 1)([a_h] + [b_h] \cdot [T]) + [t_o]",
        units=_U_ITER,
        pp=sm.pp,
        t_c=t_c,
        t_m=t_m,
        t_x=t_x,
        a_h=k["a_h"],
        b_h=k["b_h"],
        T=T,
        t_o=t_o,
        note=note or f"bound: {it.bound}; stages run in turn, plus stage hops and the fixed costs",
    )
