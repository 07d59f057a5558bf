"""The step model: the per-deployment constants of one scheduler iteration, and its formula, written once
(the RA-BIT spec "Speed").

One iteration processes ``T`` new tokens (any mix of prefill-chunk and decode tokens), over ``A``
attended (query, key) pairs, reading the cached K/V of ``R`` context tokens::

    t_c = (f_t - f_e) T / (peak x mfu_max x eta_d x T / (T + T0))       compute, one stage: dense matmuls,
          + f_e T / (peak x mfu_max x eta_e x t_e / (t_e + T0))         routed experts at t_e = T k / E_T rows,
          + f_a A / (peak x mfu_max)                                   attention
    t_m = (W_r(T) + (R + T) k_g + T r_b) / (BW x eta_bw)                memory, one stage (r_b: MoE permute)
    t_x = (n_ar min(ring(T), tree(T), one(T)) + n_a2a a2a(T)) x (1 - overlap)   exposed communication, one stage
                                                                        (one-shot below T_o tokens only)
    t_k = n_k x (t_graph if T <= T_graph else t_eager)                  kernel launches, one stage (eager for a
                                                                        prefill on an engine graphing decode only)
    t_b = max(t_c - t_ca, t_m - t_ma) + max(t_ca, t_ma)                 busy time: the linear layers and attention
          t_ca = f_a A / (peak x mfu_max),  t_ma = R k_g / (BW x eta_bw)  each at their own roofline
    t   = pp (t_b + t_x) + (pp - 1) hop(T) + t_o
    t_o = t_step + pp t_k + S (t_seq + V y_v / (BW x eta_bw))             fixed costs of the iteration

``S`` is the number of sequences the iteration schedules and samples (a decode iteration: ``S = T``).

Attention parallelism and the host KV tier change the body (:mod:`core.physics.attention_split`).

:meth:`StepModel.from_deployment` computes every constant of that formula once per deployment, recording each
on a :class:`core.base.Trace` as it computes it (the communication lines come from
:class:`core.physics.collectives.Collectives`). :meth:`StepModel.stage_parts` is the one body of the formula:
scalars in, floats out (the simulator's inner loop), arrays in, arrays out (sweeps, the simulator's timing
table in :mod:`core.serving.sim.timing`, the optimizer's screen). :func:`core.physics.iteration_parts.iteration` takes
one iteration apart and records it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.base import MS, NO_TRACE, US, Trace
from core.catalog import CUDA_GRAPH_MAX_TOKENS, CUDA_GRAPH_PREFILL, ModelArch
from core.config import COMPUTE_PRECISION, Deployment
from core.physics.adapters import expected_distinct, lora_constants
from core.physics.attention_split import attention_split, split_parts
from core.physics.collectives import ACT_BYTES, Collectives
from core.physics.footprint import (
    SSM_STATE_BYTES,
    attention_replica_bytes,
    dense_weight_bytes,
    kv_bytes_per_token,
    kv_shard,
)
from core.physics.gemm_shape import gemm_shape_effs
from core.physics.peak import dense_clock_share, effective_peak_flop_per_s
from core.physics.read_factors import kv_read_factor, weight_read_factor

__all__ = [
    "KERNELS_PER_ITERATION",
    "KERNELS_PER_LAYER",
    "StepModel",
]

#: Kernels one decoder layer launches: input RMSNorm, QKV GEMM, RoPE, KV-cache write, attention, output GEMM,
#: residual + post-attention RMSNorm, gate/up GEMM, SiLU x mul, down GEMM (the vLLM Llama layer,
#: ``vllm/model_executor/models/llama.py``). TP adds its 2 all-reduces, a MoE layer its router GEMM, top-k /
#: permute and un-permute (``fused_moe``), EP its dispatch and combine.
KERNELS_PER_LAYER = 10
#: Kernels of an iteration outside the layers: embedding lookup, final norm, LM head (counted once).
KERNELS_PER_ITERATION = 3

_SCALAR = (int, float, np.integer, np.floating)


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
    tp_ar_alpha_one: float  # the serving engines' one-shot all-reduce (core.physics.collectives.one_shot_ar_line)
    tp_ar_beta_one: float
    tp_ar_one_max_tokens: float  # ... taken below this many tokens (Collectives.one_shot_max_tokens)
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
    dense_gemm_eff: float = 1.0  # eta_d: the dense projections' rate against the ceiling (core.physics.gemm_shape)
    expert_gemm_eff: float = 1.0  # eta_e: the routed experts' GEMM rate against the ceiling (the same module)
    # fixed per-step costs: kernel launches, per-sequence work, sampling
    kernels_per_stage: float = 0.0  # n_k
    graph_launch_s: float = 0.0  # per kernel, inside a CUDA graph
    eager_launch_s: float = 0.0  # per kernel, eager
    graph_max_tokens: float = 0.0  # iterations up to this many tokens replay a graph
    graph_prefill: bool = True  # the graphs also cover iterations with prompt tokens (False: decode-only graphs)
    seq_overhead_s: float = 0.0  # host work per scheduled sequence
    sample_s_per_seq: float = 0.0  # V y_v / (BW eta_bw): sampling one sequence's logits
    # a hybrid's state-space layers (Jamba): one sequence's fixed state on one TP rank, summed over the stages
    # (M_s / tp); each decode step reads and rewrites it (HF HybridMambaAttentionDynamicCache: conv and SSM states)
    state_bytes_per_seq: float = 0.0  # m_s
    # K/V reads per cached token relative to once per KV head: 1 for grouped decode-attention kernels (XQA,
    # FlashInfer, FlashAttention read each KV head once for its query group); H / H_kv for a kernel that loads
    # a KV head once per query head (TensorRT-LLM's masked MHA for GQA before its XQA kernels; see
    # :func:`per_query_head_kv_reads`); divided by the paged reads' bandwidth share (kv_read_bw_eff, and
    # rocm_attn_bw_eff for vLLM and SGLang on AMD GPUs: :func:`core.physics.read_factors.kv_read_factor`)
    kv_read_factor: float = 1.0
    # weight bytes-equivalents per weight byte read (g_w): 1 / fp8_stream_eff for FP8 weights, whose small-batch GEMMs
    # stream them below the BF16 streams' bandwidth; 1 otherwise
    weight_read_factor: float = 1.0
    # what the recorded derivation shows beside the body's constants: the MFU ceiling inside peak_flop_per_s,
    # MBU and the datasheet bandwidth inside mem_bw_bytes_per_s, the sampler's bytes per vocabulary entry
    mfu_max: float = 1.0
    mbu: float = 1.0
    hbm_bw_bytes_per_s: float = 0.0
    sample_bytes_per_vocab: float = 0.0
    # multi-LoRA serving (core.physics.adapters): the shrink and expand GEMMs of every token at the slot rank, the
    # weights of each distinct adapter of the batch (padded to the slot rank) and the activations the adapter
    # kernels move, at the step's efficiencies times eta_l; 0 without adapters
    lora_flop_per_token: float = 0.0  # f_l = 2 r_s n_g
    lora_bytes_per_adapter: float = 0.0  # w_l = r_s n_g b_a, one GPU of one stage
    lora_act_bytes_per_token: float = 0.0  # a_l
    lora_eff: float = 1.0  # eta_l (assumption lora_kernel_eff)
    lora_slots: float = 0.0  # K = max_loras: at most this many distinct adapters in one batch
    lora_count: float = 0.0  # N adapters served
    #: the attention kernels' ceiling (effective peak x mfu_max at the KV cache's precision: FP8 with an FP8 cache,
    #: else BF16); the GEMMs' ``peak_flop_per_s`` where the two precisions agree
    attn_peak_flop_per_s: float = 0.0
    lora_popularity: tuple[float, ...] = ()  # each adapter's share of the requests (empty: uniform)
    # attention parallelism and the host KV tier (stage_parts): any of them set -> the split path
    attention_split: bool = False
    cp: int = 1  # context parallelism: TP groups an iteration's tokens are split over
    attn_layers_stage: float = 0.0  # L_a: attention layers of one stage
    cp_alpha_s: float = 0.0  # one ring send: a_cp + b_cp x bytes
    cp_beta_s_per_byte: float = 0.0
    cp_kv_bytes_per_token_layer: float = 0.0  # k_l: K and V of one token in one layer on one GPU (pass-KV)
    cp_q_bytes_per_token_layer: float = 0.0  # q_l: one token's queries out and partial outputs back (pass-Q)
    dcp_alpha_s: float = 0.0  # one decode-context-parallel collective: a_d + b_d x tokens
    dcp_beta_s: float = 0.0
    dcp: int = 1  # decode context parallelism: TP ranks the KV is split over
    dcp_kv_beta_s: float = 0.0  # gathering one cached token's KV of one layer over the DCP group
    host_tier: bool = False  # a KV tier in host memory
    hbm_kv_tokens: float = float("inf")  # N_h: cached tokens one GPU's HBM holds before the host tier
    host_bw_bytes_per_s: float = 0.0  # the host link's achieved bandwidth (assumption offload_gb_per_s)

    @classmethod
    def from_deployment(cls, dep: Deployment, tr: Trace = NO_TRACE) -> StepModel:
        """Every per-deployment constant of the iteration formula, computed once; each recorded on ``tr`` as it
        is computed (the Speed page's "Per-GPU constants of the iteration model")."""
        m, g = dep.model, dep.gpu
        a = dep.assumptions
        tp, pp, ep = dep.tp, dep.pp, dep.ep
        on = tr.enabled
        # --- compute: FLOPs per token and per attended pair, the compute peak ---------------------------------
        P_act = m.active_matmul_params()
        f_t = 2.0 * P_act / (tp * pp)
        f_a = 4.0 * (m.attention_layers / pp) * m.attn_qk_dim / tp  # a hybrid's SSM layers attend nothing
        if on:
            tr.step(
                "active_matmul_params",
                "Active parameters doing matmuls per token",
                "P_act",
                "P_act",
                P_act,
                P_act=P_act,
                note="the input embedding is a lookup, not a matmul"
                + (f"; MoE: {m.experts_per_tok} of {m.num_experts} routed experts per token" if m.is_moe else ""),
            )
            tr.step(
                "flop_per_token",
                "Matmul FLOPs per token per GPU",
                "f_t",
                "2 * P_act / (tp * pp)",
                f_t,
                unit="FLOP",
                latex=r"\frac{2 [P_act]}{[tp] \cdot [pp]}",
                P_act=P_act,
                tp=tp,
                pp=pp,
            )
            tr.step(
                "attn_flop_per_pair",
                "Attention FLOPs per (query, key) pair per GPU",
                "f_a",
                "4 * L * H_dh / (tp * pp)",
                f_a,
                unit="FLOP",
                latex=r"\frac{4 [L] \cdot [H_dh]}{[tp] \cdot [pp]}",
                L=m.attention_layers,
                H_dh=m.attn_qk_dim,
                tp=tp,
                pp=pp,
                note="QK^T and PV, 2 FLOP per multiply-add, every layer"
                + ("; MLA: H (d_qk + d_v) / 2" if m.is_mla else "")
                + (
                    f" with attention ({m.attention_layers} of {m.num_layers}; the rest are state-space)"
                    if m.ssm_layers
                    else ""
                ),
            )
        peak = effective_peak_flop_per_s(g, dep.weights, a.fp8_speedup, a.fp4_speedup, tr) * a.mfu_max
        peak *= dense_clock_share(g, dep.weights, tr)  # 1 where the part holds its peak clock
        # attention's own math rate: its QK^T and PV run in the precision of the K/V they read, not the weights'.
        # An FP8 KV cache is attended in FP8 (queries quantized too: vLLM's FlashAttention-3 backend, docs
        # "Quantized KV Cache"; TensorRT-LLM's FP8 context FMHA); a BF16 one in BF16 however the GEMMs run, so an
        # FP8-weights deployment with a BF16 cache prefills long prompts at the BF16 rate (Meta's context-
        # parallelism runs, validation/longctx.csv: FP8 FFN weights, BF16 attention)
        att_prec = "fp8" if dep.config.kv_dtype == "fp8" else "bf16"
        if att_prec == COMPUTE_PRECISION[dep.weights]:
            attn_peak = peak
        else:
            attn_peak = effective_peak_flop_per_s(g, att_prec, a.fp8_speedup, a.fp4_speedup) * a.mfu_max
            attn_peak *= dense_clock_share(g, att_prec)
        # --- memory: weights read, one routed expert's bytes, KV bytes per cached token ---------------------
        hbm = g.memory_bw_bytes_per_s
        if on:
            tr.step(
                "pi_bw",
                "HBM bandwidth per GPU",
                r"\pi_{bw}",
                "pi_bw",
                hbm,
                unit="B/s",
                units={"pi_bw": "B/s"},
                pi_bw=hbm,
                note=f"{g.name} datasheet",
            )
        b_w = dep.weight_bytes_per_param
        # the input embedding is a lookup: only the rows used are read, so leave it out of the traffic
        dense_bytes, P_q, P_r = dense_weight_bytes(m, b_w, tp, pp, experts_apart=True, streamed=True)
        dp_att = dep.config.dp_attention and tp > 1
        if dp_att:  # every rank reads whole attention blocks
            dense_bytes = dense_bytes + attention_replica_bytes(m, b_w, tp, pp)
        if on:
            dpa: dict[str, Any] = {"P_a": m.attention_layers * m.attention_params()} if dp_att else {}
            tr.step(
                "weights_read_bytes",
                "Dense weights read per iteration per GPU",
                "W_d",
                "(P_q * b_w + P_r * 2) / (tp * pp)" + (" + P_a * b_w * (1 - 1 / tp) / pp" if dp_att else ""),
                dense_bytes,
                unit="B",
                latex=r"\frac{[P_q] \cdot [b_w] + [P_r] \cdot 2}{[tp] \cdot [pp]}"
                + (r" + \frac{[P_a] [b_w] (1 - 1/[tp])}{[pp]}" if dp_att else ""),
                P_q=P_q,
                b_w=b_w,
                P_r=P_r,
                tp=tp,
                pp=pp,
                **dpa,
                note="block linears in the weight format; LM head and norms in BF16; the input embedding is a "
                "lookup and is not streamed"
                + ("; routed experts below" if m.is_moe else "")
                + ("; data-parallel attention: each rank also reads whole attention blocks (P_a)" if dp_att else ""),
            )
        expert_split = ep if ep > 1 else tp
        expert_bytes = m.expert_params() * b_w * (m.moe_layers / pp) / expert_split
        if on and m.is_moe:
            tr.step(
                "expert_bytes",
                "One routed expert's bytes per GPU (stage layers)",
                "w_e",
                "P_e * b_w * L_moe / (pp * s_e)",
                expert_bytes,
                unit="B",
                latex=r"\frac{[P_e] \cdot [b_w] \cdot [L_moe]}{[pp] \cdot [s_e]}",
                P_e=m.expert_params(),
                b_w=b_w,
                L_moe=m.moe_layers,
                pp=pp,
                s_e=expert_split,
                note=f"experts split {expert_split} ways by "
                + ("EP (whole experts per GPU)" if ep > 1 else "TP (slices)"),
            )
        cfg = dep.config
        k_all = kv_bytes_per_token(m, dep.kv_bytes_per_elem)
        shard = kv_shard(m, tp, cfg.dcp, cfg.dp_attention)
        k_t = k_all / (shard * pp)
        if on:
            tr.step(
                "kv_read_bytes_per_token",
                "KV bytes per cached token per GPU",
                "k_g",
                "k_t / (s_kv * pp)",
                k_t,
                unit="B",
                latex=r"\frac{[k_t]}{[s_kv] \cdot [pp]}",
                units={"k_t": "B"},
                k_t=k_all,
                s_kv=shard,
                pp=pp,
                note=(
                    f"data-parallel attention: each rank reads the KV of its own sequences, 1/{tp} of the batch's"
                    if cfg.dp_attention
                    else f"decode context parallelism: the KV split {shard} ways over the TP ranks"
                    if cfg.dcp > 1
                    else "MLA: the compressed latent, not split by TP"
                    if m.is_mla
                    else f"{m.num_kv_heads} KV heads split {shard} ways by TP"
                ),
            )
        # --- communication: TP all-reduces of T x h x 2 B, EP all-to-alls, pipeline hops (lines in T) ------
        coll = Collectives.of(dep)
        h = m.hidden_size
        ar_a_ring, ar_b_ring, ar_a_tree, ar_b_tree = coll.tp_all_reduce_lines(tp, h, ACT_BYTES, tr)
        ar_a_one, ar_b_one = coll.one_shot_ar_line(tp, h, ACT_BYTES, a.custom_ar_base_us * US, tr)
        ar_one_max = coll.one_shot_max_tokens(tp, h, ACT_BYTES)
        if ep > 1 and m.is_moe:
            # dispatch + combine: each GPU sends its 1/ep share of the tokens x top-k x h x 2 B
            a2a_a, a2a_b = coll.all_to_all_line(m.experts_per_tok * h * ACT_BYTES / ep, ep, tr)
            a2a_n = 2 * m.moe_layers / pp
        else:
            a2a_a = a2a_b = a2a_n = 0.0
        if pp > 1:
            hop_a, hop_b = coll.hop_line(h, ACT_BYTES, tp * pp > coll.domain, tr)
        else:
            hop_a = hop_b = 0.0
        # kernel launches of one stage (module constants above) and the engine's CUDA-graph capture limit
        k_layer = KERNELS_PER_LAYER + (2 if tp > 1 else 0)
        k_moe = (3 + (2 if ep > 1 else 0)) if m.is_moe else 0
        n_k = (m.num_layers * k_layer + m.moe_layers * k_moe + KERNELS_PER_ITERATION) / pp
        lora = lora_constants(dep, tr) if dep.config.adapters.enabled else {}
        if lora:  # a shrink and an expand kernel per LoRA-wrapped layer (vLLM's lora_shrink / lora_expand)
            n_k += 2 * lora.pop("wrapped_layers") / pp
        w = dep.config.workload
        graph_max = CUDA_GRAPH_MAX_TOKENS.get(w.engine, 512) if w.cuda_graphs else 0
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
            flop_per_token=f_t,
            attn_flop_per_pair=f_a,
            peak_flop_per_s=peak,
            attn_peak_flop_per_s=attn_peak,
            ramp_tokens=a.mfu_ramp_tokens,
            dense_weight_bytes=dense_bytes,
            expert_bytes_per_gpu_per_expert=expert_bytes,
            kv_bytes_per_token=k_t,
            mem_bw_bytes_per_s=hbm * a.mbu,
            tp_ar_alpha_ring=ar_a_ring,
            tp_ar_beta_ring=ar_b_ring,
            tp_ar_alpha_tree=float(ar_a_tree),
            tp_ar_beta_tree=ar_b_tree,
            tp_ar_alpha_one=ar_a_one,
            tp_ar_beta_one=ar_b_one,
            tp_ar_one_max_tokens=ar_one_max,
            # 2 all-reduces per layer (attention, MLP); with EP a MoE layer's MLP all-reduce gives way to its
            # dispatch + combine all-to-alls (vLLM --enable-expert-parallel, DeepSeek-V3 report arXiv 2412.19437);
            # data-parallel attention has no all-reduce after attention, and gathers the batch for the MLP
            # (all-gather + reduce-scatter: one all-reduce's volume; SGLang --enable-dp-attention)
            ar_per_iter=(
                ((m.num_layers if not dp_att else 0) + m.num_layers - (m.moe_layers if a2a_n else 0)) / pp
                if tp > 1
                else 0.0
            ),
            ep_a2a_alpha=a2a_a,
            ep_a2a_beta=a2a_b,
            a2a_per_iter=a2a_n,
            pp_hop_alpha=hop_a,
            pp_hop_beta=hop_b,
            comm_exposed=1.0 - a.comm_overlap,
            overhead_s=a.step_overhead_ms * MS,
            expert_flop_per_token=f_e,
            route_bytes_per_token=r_b,
            **gemm_shape_effs(dep, tr),
            kernels_per_stage=n_k,
            graph_launch_s=a.graph_launch_us * 1e-6,
            eager_launch_s=a.eager_launch_us * 1e-6,
            graph_max_tokens=float(graph_max),
            graph_prefill=CUDA_GRAPH_PREFILL.get(w.engine, True),
            kv_read_factor=kv_read_factor(dep, tr),
            weight_read_factor=weight_read_factor(dep, tr),
            seq_overhead_s=a.seq_overhead_us * 1e-6,
            sample_s_per_seq=m.vocab_size * a.sample_bytes_per_vocab / (hbm * a.mbu),
            state_bytes_per_seq=m.ssm_state_bytes_per_seq(SSM_STATE_BYTES) / tp,
            mfu_max=a.mfu_max,
            mbu=a.mbu,
            hbm_bw_bytes_per_s=hbm,
            sample_bytes_per_vocab=a.sample_bytes_per_vocab,
            **lora,
            **attention_split(dep, coll, k_t, tr),
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

    def distinct_adapters(self, seqs):
        """Expected distinct adapters among ``seqs`` requests (:func:`core.physics.adapters.expected_distinct`)."""
        return expected_distinct(
            self.lora_slots, self.lora_count, self.lora_popularity, self.lora_bytes_per_adapter, seqs
        )

    def stage_parts(self, T, A, R, D=0.0):
        """(compute, memory, exposed communication, kernel launches) of one pipeline stage [s]: the formula.

        The one body of the step time (the RA-BIT spec "Speed"); scalars in, floats out (pure Python, for
        the simulator's inner loop), arrays in, arrays out. ``T`` new tokens, ``A`` attended (query, key)
        pairs, ``R`` cached tokens whose K/V are read, summed over the sequences of the batch (the formula below).

        The T/(T+T0) ramp is a GEMM-tiling effect of the matmuls; attention runs on its own (query, key)
        pairs at the ceiling (its own roofline), so a long context at batch 1 is not made compute-bound by it.
        A MoE layer's routed experts run as one small GEMM per touched expert: each sees only its ``t_e = T k /
        E_T`` rows (``E_T = E (1 - (1 - k/E)^T)`` experts touched), so the ramp applies per expert (grouped-GEMM
        kernels tile each expert separately: vLLM ``fused_moe``, MegaBlocks arXiv 2211.15841), at ``eta_e`` of the
        ceiling (``eta_d`` the dense projections': GEMMs reducing over fewer rows than ``h``, :mod:`.gemm_shape`);
        the gate GEMM is in ``f_t``, the permute / un-permute copies add ``r_b`` bytes per token; with adapters, the
        ``D`` adapters of the batch (:meth:`distinct_adapters`) add their shrink and expand GEMMs and weights, at the
        step's efficiencies times ``eta_l``::

            t_c += f_l T / (pi eta_l);   t_m += (D w_l + T a_l) / (BW eta_bw eta_l)

        and, without adapters::

            t_c = (f_t - f_e) T / (pi eta_d eff(T)) + f_e T / (pi eta_e eff(t_e)) + f_a A / pi
            t_m = (W_d + E_T w_e + (R + T) k_g + T r_b) / (BW x eta_bw)
            t_x = (n_ar min(a_r + b_r T, a_t + b_t T, a_o + b_o T [T < T_o]) + n_a2a (a_e + b_e T)) x (1 - overlap)
            t_k = n_k x (t_graph if T <= T_graph else t_eager)

        The launch term is the fixed cost that dominates small batches: an iteration of up to the engine's capture
        size replays a CUDA graph (about a microsecond per kernel), a larger one launches each of the stage's ``n_k``
        kernels from the host (NVIDIA CUDA Programming Guide, "CUDA Graphs"). No new tokens: nothing computed.
        """
        if self.attention_split:
            return split_parts(self, T, A, R, D)
        return self.stage_body(T, A, R, D)

    def tp_all_reduce_s(self, T, arr: bool):
        """One TP all-reduce of ``T`` tokens [s]: the cheapest of the ring, the tree or NVLS and, below
        ``tp_ar_one_max_tokens``, the engine's one-shot kernel (:mod:`core.physics.collectives`)."""
        ring = self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T
        tree = self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T
        one = self.tp_ar_alpha_one + self.tp_ar_beta_one * T
        if arr:
            return np.minimum(np.minimum(ring, tree), np.where(T < self.tp_ar_one_max_tokens, one, ring))
        ar = ring if ring < tree else tree
        return one if one < ar and T < self.tp_ar_one_max_tokens else ar

    def stage_body(self, T, A, R, D=0.0):
        """The step formula on one GPU of one stage (:meth:`stage_parts` without attention parallelism)."""
        arr = type(T) is np.ndarray
        if arr:
            eff = np.maximum(T / (T + self.ramp_tokens), 1e-12)
        else:
            eff = T / (T + self.ramp_tokens) if T > 0 else 1.0
            eff = eff if eff > 1e-12 else 1e-12
        f_e = self.expert_flop_per_token
        t_cmp = (self.flop_per_token - f_e) * T / (
            self.peak_flop_per_s * self.dense_gemm_eff * eff
        ) + self.attn_flop_per_pair * A / self.attn_peak_flop_per_s
        # E_T: distinct routed experts the T tokens touch per MoE layer (their GEMMs and their weight reads)
        if f_e or self.expert_bytes_per_gpu_per_expert:
            m = self.model
            touched = m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T)
        if f_e:  # each touched expert's GEMM sees t_e = T k / E_T rows: the tiling ramp per expert
            rows: Any  # an array of rows per expert, or one float on the scalar path
            eff_e: Any
            if arr:
                rows = np.where(T > 0, T * m.experts_per_tok / np.maximum(touched, 1e-300), 1.0)
                eff_e = np.maximum(rows / (rows + self.ramp_tokens), 1e-12)
            else:
                rows = T * m.experts_per_tok / touched if T > 0 else 1.0
                eff_e = rows / (rows + self.ramp_tokens) if rows > 0 else 1e-12
                eff_e = eff_e if eff_e > 1e-12 else 1e-12
            t_cmp = t_cmp + f_e * T / (self.peak_flop_per_s * self.expert_gemm_eff * eff_e)
        if self.lora_flop_per_token:  # the adapters' shrink and expand GEMMs at the slot rank
            t_cmp = t_cmp + self.lora_flop_per_token * T / (self.peak_flop_per_s * self.lora_eff)
        ar = self.tp_all_reduce_s(T, arr)
        t_comm = (
            ar * self.ar_per_iter + (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter
        ) * self.comm_exposed
        w = self.dense_weight_bytes
        if self.expert_bytes_per_gpu_per_expert:  # touched experts x one expert's bytes on this GPU
            w = w + touched * self.expert_bytes_per_gpu_per_expert
        t_mem = (
            self.weight_read_factor * w
            + (self.kv_read_factor * R + T) * self.kv_bytes_per_token
            + T * self.route_bytes_per_token
        ) / self.mem_bw_bytes_per_s
        if self.lora_bytes_per_adapter:  # each distinct adapter's weights + the activations its kernels move
            t_mem = t_mem + (D * self.lora_bytes_per_adapter + T * self.lora_act_bytes_per_token) / (
                self.mem_bw_bytes_per_s * self.lora_eff
            )
        n_k = self.kernels_per_stage
        if arr:
            t_k = np.where(T > 0, np.where(T <= self.graph_max_tokens, self.graph_launch_s, self.eager_launch_s), 0.0)
            return np.where(T > 0, t_cmp, 0.0), t_mem, np.where(T > 0, t_comm, 0.0), n_k * t_k
        if T <= 0:
            return 0.0, t_mem, 0.0, 0.0
        return t_cmp, t_mem, t_comm, n_k * (self.graph_launch_s if T <= self.graph_max_tokens else self.eager_launch_s)

    def attention_s(self, A, R):
        """(compute, memory) of the attention kernels on one GPU of one stage [s]: ``f_a A / (peak x mfu_max)`` over
        the attended pairs and ``g_r R k_g / (BW x eta_bw)`` for the cached K/V they read, on one context-parallel
        rank's share ``A / cp``, ``R / cp`` as :meth:`stage_parts` (all of them without CP); arrays welcome."""
        if self.cp > 1:
            A, R = A / self.cp, R / self.cp
        return self.attn_flop_per_pair * A / self.attn_peak_flop_per_s, (
            self.kv_read_factor * R * self.kv_bytes_per_token / self.mem_bw_bytes_per_s
        )

    def busy_s(self, t_cmp, t_mem, A, R):
        """Busy time of one stage [s]: the linear layers and attention each at their own roofline, one after the
        other::

            t_b = max(t_c - t_ca, t_m - t_ma) + max(t_ca, t_ma)

        A layer's GEMMs (compute against the weights they stream) and its attention (compute against the cached K/V
        it reads) are separate kernels that run in turn, so each takes the slower of its own two limits and the
        times add (the per-operator roofline of LLM-Viewer, Yuan et al. "LLM Inference Unveiled", arXiv
        2402.16363). Where both are memory-bound (decode at small batch) or both compute-bound (long prefills)
        this is ``max(t_c, t_m)``; at large decode batches the GEMMs turn compute-bound while attention stays
        bound by its K/V reads, and the sum is slower than the whole-step maximum. Worked number (Llama-3.1-8B
        on one H100, BF16, 1,024 sequences at 1,100 cached tokens): the GEMMs 25.4 ms of compute against 6.0 ms
        of weights, attention 58.8 ms of K/V reads against 0.9 ms of FLOPs: 84.2 ms, not max(26.3, 64.8) = 64.8 ms.
        ``t_c`` and ``t_m`` are :meth:`stage_parts`' (the adapters' GEMMs and bytes on the GEMMs' side), ``A`` and
        ``R`` the iteration's: with context parallelism :meth:`attention_s` takes one rank's share, as the body
        does; a host KV tier's stream is in ``t_m`` (:func:`core.physics.attention_split.split_parts`), so where
        attention is bound by its reads it runs beside the whole stage: ``max(t_c - t_ca + t_ma, t_host)``.
        Arrays welcome."""
        c_a, m_a = self.attention_s(A, R)
        if type(t_cmp) is np.ndarray or type(t_mem) is np.ndarray or type(c_a) is np.ndarray:
            return np.maximum(t_cmp - c_a, t_mem - m_a) + np.maximum(c_a, m_a)
        lin_c, lin_m = t_cmp - c_a, t_mem - m_a
        return (lin_c if lin_c > lin_m else lin_m) + (c_a if c_a > m_a else m_a)

    def launch_s(self, t_k, T, S):
        """Kernel launches of one stage [s]: ``t_k`` (by the capture size), or every kernel eager when the iteration
        carries prompt tokens (``S < T``) on an engine whose graphs cover decode iterations only; arrays welcome."""
        if self.graph_prefill:
            return t_k
        eager = self.kernels_per_stage * self.eager_launch_s
        if type(t_k) is np.ndarray or type(T) is np.ndarray or type(S) is np.ndarray:
            return np.where((np.asarray(S) < np.asarray(T)) & (np.asarray(T) > 0), eager, t_k)
        return eager if S < T and T > 0 else t_k

    @property
    def seq_cost_s(self) -> float:
        """Fixed cost of one scheduled sequence per iteration [s]: host bookkeeping + sampling its logits + (a
        hybrid) reading and rewriting its state-space state, 2 m_s / (BW eta_bw)."""
        return self.seq_overhead_s + self.sample_s_per_seq + 2.0 * self.state_bytes_per_seq / self.mem_bw_bytes_per_s

    def fixed_s(self, launch_s, seqs):
        """Fixed costs of one iteration [s]: t_step + pp t_k + S (t_seq + (V y_v + 2 m_s) / (BW eta_bw)); arrays
        welcome."""
        return self.overhead_s + self.pp * launch_s + seqs * self.seq_cost_s

    def parts(self, tokens, pairs, kv_tokens, seqs=None, adapters=None):
        """(compute, memory, exposed communication, fixed costs) [s]: the first three of one stage, the fixed
        costs of the whole iteration (:meth:`fixed_s`; ``seqs`` defaults to ``tokens``; ``adapters``, the
        distinct adapters of the batch, to :meth:`distinct_adapters` of ``seqs``); arrays welcome."""
        T = np.asarray(tokens, dtype=float)
        S = T if seqs is None else np.asarray(seqs, dtype=float)
        D = self.distinct_adapters(S) if adapters is None else np.asarray(adapters, dtype=float)
        t_cmp, t_mem, t_comm, t_k = self.stage_parts(
            T, np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float), D
        )
        return t_cmp, t_mem, t_comm, self.fixed_s(t_k, S)

    def scalar_parts(self, T: float, A: float, R: float) -> tuple[float, float, float]:
        """(compute, memory, exposed communication) of one stage for scalar arguments [s] (``stage_parts``; a
        decode iteration's ``T`` sequences carry their expected distinct adapters)."""
        c, m, x, _ = self.stage_parts(float(T), float(A), float(R), self.distinct_adapters(float(T)))
        return c, m, x

    def hops_s(self, tokens):
        """Pipeline stage-to-stage sends of one iteration, all ``pp - 1`` hops [s]."""
        return (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * tokens)

    def iteration_s(self, tokens, pairs, kv_tokens, seqs=None, adapters=None):
        """Wall time of one iteration through all ``pp`` stages [s] (latency of the batch)::

            t = pp (t_b + t_x) + (pp - 1)(a_h + b_h T) + t_o(T, S)

        with the stage's busy time ``t_b`` (:meth:`busy_s`) and launches by :meth:`launch_s`. ``seqs`` (S) is the
        number of sequences scheduled (and sampled); it defaults to ``tokens``, which is exact for decode.
        ``adapters`` (D) is the number of distinct adapters among them; it defaults to :meth:`distinct_adapters`
        of ``S`` (0 without adapters). Scalars in, float out (pure Python, for the simulator's inner loop); arrays
        in, array out.
        """
        T: Any  # one float on the simulator's scalar path, else an array
        A: Any
        R: Any
        if isinstance(tokens, _SCALAR) and isinstance(pairs, _SCALAR) and isinstance(kv_tokens, _SCALAR):
            T, A, R = float(tokens), float(pairs), float(kv_tokens)
        else:
            T = np.asarray(tokens, dtype=float)
            A, R = np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float)
        S = T if seqs is None else seqs
        D = adapters if adapters is not None else self.distinct_adapters(S) if self.lora_bytes_per_adapter else 0.0
        t_cmp, t_mem, t_comm, t_k = self.stage_parts(T, A, R, D)
        stage = self.busy_s(t_cmp, t_mem, A, R) + t_comm
        hops = (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T)
        return self.pp * stage + hops + self.fixed_s(self.launch_s(t_k, T, S), S)

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

    def pipelined_s(self, tokens, pairs, kv_tokens, seqs=None, adapters=None):
        """Time for a whole batch to advance one iteration with the pipeline kept busy [s]::

            m = min(pp, S);   t = pp (t_b + t_x)(T/m) + (pp - 1) hop(T/m) + t_o(T/m, S/m)

        The batch of ``S`` sequences runs as ``m`` micro-batches of ``T/m`` tokens. Each stage works through the
        ``m`` micro-batches in turn while the other stages work on the others, so in steady state (engines keep
        the micro-batches cycling from one iteration to the next) a stage is busy ``m t_stage(T/m)`` of every
        ``pp t_stage(T/m) + hops`` -- the pipeline bubble is ``(pp - m) / pp``, zero once there are ``pp``
        micro-batches -- and a sequence gets its next token after one trip through all ``pp`` stages and
        ``pp - 1`` activation sends. Each micro-batch re-reads the stage's weights, which is what a pipeline
        pays for its lower per-GPU traffic. Without a pipeline (``pp = 1``) this is :meth:`iteration_s`.
        (GPipe, Huang et al. arXiv 1811.06965, for the bubble of ``m`` micro-batches over ``pp`` stages; vLLM
        docs "Distributed inference and serving": pipeline parallelism with virtual engines.)
        A micro-batch reads the distinct adapters of its own ``S / m`` sequences (given ``adapters``, ``D / m``).
        """
        if self.pp == 1:
            return self.iteration_s(tokens, pairs, kv_tokens, seqs, adapters)
        S = tokens if seqs is None else seqs
        m = self.micro_batches(S)
        if all(isinstance(v, _SCALAR) for v in (tokens, pairs, kv_tokens, S)):
            return self.iteration_s(
                float(tokens) / m,
                float(pairs) / m,
                float(kv_tokens) / m,
                float(S) / m,
                None if adapters is None else adapters / m,
            )
        T = np.asarray(tokens, dtype=float)
        return self.iteration_s(
            T / m,
            np.asarray(pairs, dtype=float) / m,
            np.asarray(kv_tokens, dtype=float) / m,
            np.asarray(S) / m,
            None if adapters is None else np.asarray(adapters, dtype=float) / m,
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
