"""Memory: weights, KV cache, activations and what is left, for serving and for training.

Every function records its steps on a :class:`core.base.trace.Trace`; the results are frozen.

Serving (the RA-BIT spec "Memory", the textbook example worked example)::

    weights   = (P_q x b_w + P_bf16 x 2) / (TP x PP)
    KV/token  = 2 x L x n_kv x d_head x b_kv        (MLA: (r_kv + d_rope) x L x b_kv)
    budget    = C x u - O - weights - workspace      (per GPU; u = 0.9, O = 1.5 GiB)
    sequences = floor(budget / KV per sequence)      (whole paged blocks)

Training: mixed-precision Adam at 16 B per trainable parameter (2 weights + 2 gradients +
12 FP32 master, momentum and variance; Rajbhandari et al., ZeRO, arXiv 1910.02054 sec. 3.1),
split by TP and PP, then ZeRO stages over DP; activations per Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198, Table 2.
:func:`training_memory_parts` is the one body of that formula: the traced view (:func:`training_memory_for`)
calls it on scalars, the training layout search (:func:`core.training.layout.layout_grid`) on arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, GiB, Step, Trace
from core.catalog import GpuSpec, ModelArch, gpu_of, model_of
from core.config import Deployment, Problem, RabitConfig, as_deployment

#: Bytes per parameter of a QLoRA NF4 base with double-quantised scales (Dettmers et al.,
#: arXiv 2305.14314 sec. 3: 4-bit NF4 + 0.127 bit of scales per parameter).
QLORA_BASE_BYTES = (4 + 0.127) / 8
#: Bytes per trainable parameter under mixed-precision Adam (ZeRO paper, sec. 3.1).
ADAM_WEIGHT_B, ADAM_GRAD_B, ADAM_OPTIM_B = 2.0, 2.0, 12.0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class ServingMemory(_Frozen):
    """What one GPU of a serving replica holds [bytes], and how many sequences fit."""

    weights_bytes_per_gpu: float
    kv_bytes_per_token: float  # whole model, all layers, one token, before sharding
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_seq_per_gpu: float  # one sequence at full context, whole blocks
    kv_bytes_per_gpu: float  # the configured batch
    activation_bytes_per_gpu: float
    overhead_bytes_per_gpu: float
    total_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    fits: bool
    reason: str
    max_sequences: int  # per replica, paged
    max_sequences_contiguous: int  # per replica, reserving the model's maximum context
    contiguous_reserved_tokens: int
    replica_gpus: int
    replicas: int
    steps: tuple[Step, ...] = ()
    #: a hybrid's state-space layers: the fixed state of one sequence on one GPU (in kv_bytes_per_seq_per_gpu)
    ssm_state_bytes_per_seq_per_gpu: float = 0.0

    @property
    def free_bytes_per_gpu(self) -> float:
        return max(0.0, self.capacity_bytes_per_gpu - self.total_bytes_per_gpu)


class TrainingMemory(_Frozen):
    """What one GPU of a training job holds [bytes]."""

    trainable_params: float
    weight_bytes_per_gpu: float
    gradient_bytes_per_gpu: float
    optimizer_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    overhead_bytes_per_gpu: float
    total_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    fits: bool
    reason: str
    steps: tuple[Step, ...] = ()
    fp8_weight_bytes_per_gpu: float = 0.0  # FP8 training: Transformer Engine's cached FP8 weight copies


# --- serving -------------------------------------------------------------------------------------


def record_params(m: ModelArch, tr: Trace = NO_TRACE) -> float:
    """Total parameters counted from the architecture, as one step [count].

    P = embeddings + LM head + final norm + L_dense x (dense layer) + L_moe x (MoE layer), each layer being
    attention + norms + MLP (all routed experts, shared experts and router for an MoE layer).
    Llama-3.1-70B: 1.05e9 + 1.05e9 + 8,192 + 80 x 855.7e6 = 70.55e9.
    """
    p_total = float(m.total_params())
    dense, moe = m.dense_layers, m.moe_layers
    return tr.step(
        "P",
        "Model parameters",
        "P",
        "P_emb + P_head + P_norm + L_d * P_ld + L_m * P_lm",
        p_total,
        unit="",
        P_emb=m.embedding_params(),
        P_head=m.lm_head_params(),
        P_norm=m.total_params()
        - m.embedding_params()
        - m.lm_head_params()
        - dense * m.layer_params(False)
        - moe * m.layer_params(True),
        L_d=dense,
        P_ld=m.layer_params(False) if dense else 0,
        L_m=moe,
        P_lm=m.layer_params(True) if moe else 0,
        note=f"{m.name}: counted from the architecture ({m.attention_kind} attention"
        + (f", {m.num_experts} experts top-{m.experts_per_tok}" if m.is_moe else "")
        + ")",
    )


def weight_bytes_per_gpu(m: ModelArch, weights_b: float, tp: int, pp: int, ep: int = 1, tr: Trace = NO_TRACE) -> float:
    """Weights held by one GPU [B].

    Linear layers inside the blocks take the weight format's bytes; embeddings, LM head and
    norms stay in BF16 (as in published FP8/INT4/MXFP4 checkpoints). Routed experts are split
    over EP x PP when EP > 1, everything else over TP x PP.

    Llama-3.1-70B, BF16, TP 8: 70.55e9 x 2 / 8 = 17.6 GB (the textbook example).
    """
    p_total = m.total_params()
    p_q = m.quantizable_params()
    p_expert = m.moe_layers * m.num_experts * m.expert_params() if (ep > 1 and m.is_moe) else 0
    p_rest = p_total - p_q
    dense_q = p_q - p_expert
    record_params(m, tr)
    value = (dense_q * weights_b + p_rest * 2.0) / (tp * pp) + p_expert * weights_b / (ep * pp)
    if p_expert:
        return tr.step(
            "weights_bytes_per_gpu",
            "Weights per GPU",
            "W",
            "(P_q * b_w + P_bf16 * 2) / (tp * pp) + P_exp * b_w / (ep * pp)",
            value,
            unit="B",
            latex=r"\frac{[P_q] \cdot [b_w] + [P_bf16] \cdot 2}{[tp] \cdot [pp]} + "
            r"\frac{[P_exp] \cdot [b_w]}{[ep] \cdot [pp]}",
            P_q=dense_q,
            b_w=weights_b,
            P_bf16=p_rest,
            tp=tp,
            pp=pp,
            P_exp=p_expert,
            ep=ep,
            note="routed experts split over EP; embeddings, head and norms stay BF16",
        )
    return tr.step(
        "weights_bytes_per_gpu",
        "Weights per GPU",
        "W",
        "(P_q * b_w + P_bf16 * 2) / (tp * pp)",
        value,
        unit="B",
        latex=r"\frac{[P_q] \cdot [b_w] + [P_bf16] \cdot 2}{[tp] \cdot [pp]}",
        P_q=p_q,
        b_w=weights_b,
        P_bf16=p_rest,
        tp=tp,
        pp=pp,
        note=f"b_w = {weights_b:g} B/param for block linears; embeddings, head and norms in BF16",
    )


def kv_bytes_per_token(m: ModelArch, kv_b: float, tr: Trace = NO_TRACE) -> float:
    """KV-cache bytes per token over all attention layers, before sharding [B].

    .. math:: 2 \\cdot L \\cdot n_{kv} \\cdot d_h \\cdot b_{kv}  (MLA: (r_{kv} + d_{rope}) \\cdot L \\cdot b_{kv})

    L counts the layers with attention (:attr:`core.catalog.arch.ModelArch.attention_layers`): a hybrid's state-space
    layers hold no KV cache. Llama-3.1-70B in BF16: 2 x 80 x 8 x 128 x 2 = 327,680 B; DeepSeek-V3:
    (512 + 64) x 61 x 2 = 70,272 B; Jamba-v0.1 (4 attention layers of 32): 2 x 4 x 8 x 128 x 2 = 16,384 B.
    """
    if m.is_mla:
        v = (m.kv_lora_rank + m.qk_rope_head_dim) * m.attention_layers * kv_b
        return tr.step(
            "kv_bytes_per_token",
            "KV cache per token (all layers)",
            "k_t",
            "(r_kv + d_rope) * L * b_kv",
            v,
            unit="B",
            r_kv=m.kv_lora_rank,
            d_rope=m.qk_rope_head_dim,
            L=m.attention_layers,
            b_kv=kv_b,
            note="MLA caches the compressed latent and the RoPE key, not per-head K and V",
        )
    v = 2 * m.attention_layers * m.num_kv_heads * m.head_dim * kv_b
    return tr.step(
        "kv_bytes_per_token",
        "KV cache per token (all layers)",
        "k_t",
        "2 * L * n_kv * d_h * b_kv",
        v,
        unit="B",
        L=m.attention_layers,
        n_kv=m.num_kv_heads,
        d_h=m.head_dim,
        b_kv=kv_b,
        note=f"{m.attention_kind}: {m.num_kv_heads} KV heads of {m.num_heads}"
        + (f"; {m.ssm_layers} state-space layers of {m.num_layers} hold no KV" if m.ssm_layers else ""),
    )


#: Bytes per element of a state-space layer's conv and SSM state: the model's dtype (BF16), as the HF cache and
#: vLLM's default mamba cache dtype ("auto": the model's) keep it.
SSM_STATE_BYTES = 2.0


def ssm_state_bytes_per_seq_per_gpu(m: ModelArch, tp: int, pp: int, tr: Trace = NO_TRACE) -> float:
    """A hybrid's fixed state per sequence on one GPU [B]: :meth:`core.catalog.arch.ModelArch.ssm_state_bytes_per_seq`
    split over TP (the mixer's d_inner is split across TP ranks) and PP (its layers across stages); 0 (and no
    step recorded) for a model without state-space layers.

    Jamba-v0.1 at TP 1, PP 1: 28 x 8,192 x (4 + 16) x 2 B = 9,175,040 B per sequence.
    """
    if not m.ssm_layers:
        return 0
    v = m.ssm_state_bytes_per_seq(SSM_STATE_BYTES) / (tp * pp)
    return tr.step(
        "ssm_state_bytes_per_seq_per_gpu",
        "State-space state per sequence on one GPU",
        "m_s",
        "L_ssm * d_in * (d_conv + d_state) * b_s / (tp * pp)",
        v,
        unit="B",
        L_ssm=m.ssm_layers,
        d_in=m.ssm_d_inner,
        d_conv=m.ssm_d_conv,
        d_state=m.ssm_d_state,
        b_s=SSM_STATE_BYTES,
        tp=tp,
        pp=pp,
        note="conv and SSM state of each Mamba layer: fixed per sequence, whatever its length",
    )


def kv_shard(m: ModelArch, tp: int) -> int:
    """How many ways TP splits the KV heads: min(TP, n_kv); heads are replicated beyond that; MLA is not split."""
    if m.is_mla:
        return 1
    return min(tp, m.num_kv_heads)


def serving_memory(cfg: RabitConfig, tr: Trace | None = None) -> ServingMemory:
    """Serving memory per GPU and the sequences one replica holds (the RA-BIT spec, the textbook example)."""
    tr = tr if tr is not None else Trace()
    m, g = model_of(cfg), gpu_of(cfg)
    return _serving_memory(m, g, cfg, tr)


def fit_problems(cfg: RabitConfig) -> tuple[Problem, ...]:
    """The serving model that cannot fit even at batch 1, as a non-blocking problem on TP (the pages still draw
    its memory breakdown); nothing for a config that fits or for training. Callers ask only once the field
    checks (:func:`core.config.problems`) found nothing."""
    if cfg.phase != "serve":
        return ()
    m, g = model_of(cfg), gpu_of(cfg)
    one = _serving_memory(m, g, cfg.with_(batch=1), NO_TRACE)
    if one.fits:
        return ()
    return (
        Problem(
            "tp",
            f"{m.name} cannot fit even at batch 1 on TP {cfg.tp} x PP {cfg.pp} "
            f"{g.name}: {one.reason.removeprefix('does not fit: ')}",
            blocking=False,
        ),
    )


def _serving_memory(m: ModelArch, g: GpuSpec, cfg: RabitConfig, tr: Trace) -> ServingMemory:
    a = cfg.assumptions
    tp, pp = cfg.tp, cfg.pp
    W = weight_bytes_per_gpu(m, cfg.weight_bytes_per_param, tp, pp, cfg.ep, tr)
    k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem, tr)
    shard = kv_shard(m, tp)
    k_gpu = tr.step(
        "kv_bytes_per_token_per_gpu",
        "KV per token on one GPU",
        "k_g",
        "k_t / (s_kv * pp)",
        k_t / (shard * pp),
        unit="B",
        latex=r"\frac{[k_t]}{[s_kv] \cdot [pp]}",
        k_t=k_t,
        s_kv=shard,
        pp=pp,
        note=f"KV heads split {shard}x by TP"
        + (" (replicated beyond n_kv)" if tp > shard else "")
        + f", layers {pp}x by PP",
    )
    ctx = cfg.context_tokens
    blocks = math.ceil(ctx / cfg.block_size)
    padded = blocks * cfg.block_size
    eff_ctx = m.kv_context_tokens(padded)
    shared = cfg.prefix_cache_frac * cfg.input_tokens
    shared_eff = m.kv_context_tokens(math.ceil(shared / cfg.block_size) * cfg.block_size) if shared else 0.0
    per_seq = tr.step(
        "kv_bytes_per_seq_per_gpu",
        "KV per sequence on one GPU",
        "k_s",
        "k_g * (S_pad - S_shared)",
        k_gpu * (eff_ctx - shared_eff),
        unit="B",
        latex=r"[k_g] \cdot ([S_pad] - [S_shared])",
        k_g=k_gpu,
        S_pad=eff_ctx,
        S_shared=shared_eff,
        note=f"{ctx:,} tokens in whole blocks of {cfg.block_size}"
        + (f"; sliding-window layers hold at most {m.sliding_window} tokens" if m.sliding_layers else "")
        + (f"; {cfg.prefix_cache_frac:.0%} of the prompt is a shared cached prefix" if shared else ""),
    )
    m_s = ssm_state_bytes_per_seq_per_gpu(m, tp, pp, tr)
    ssm_in: dict[str, Any] = {"m_s": m_s} if m_s else {}  # the state's input, in the steps it enters
    if m_s:  # a hybrid: each sequence also holds its state-space layers' fixed state
        per_seq = tr.step(
            "kv_state_bytes_per_seq_per_gpu",
            "KV and state per sequence on one GPU",
            "k_s",
            "k_g * (S_pad - S_shared) + m_s",
            per_seq + m_s,
            unit="B",
            k_g=k_gpu,
            S_pad=eff_ctx,
            S_shared=shared_eff,
            m_s=m_s,
            note="the KV of the attention layers grows with the context; the state-space layers' state does not",
        )
    prefix_once = k_gpu * shared_eff
    reserve = max(m.max_context, ctx)
    s_max = m.kv_context_tokens(reserve)
    if cfg.kv_alloc == "contiguous":
        KV = tr.step(
            "kv_bytes_per_gpu",
            "KV cache per GPU (batch)",
            "KV",
            "B * k_g * S_max" + (" + B * m_s" if m_s else ""),
            cfg.batch * k_gpu * s_max + cfg.batch * m_s,
            unit="B",
            B=cfg.batch,
            k_g=k_gpu,
            S_max=s_max,
            **ssm_in,
            note=f"contiguous allocation reserves the model's maximum context of {reserve:,} tokens "
            f"for each of the {cfg.batch} sequences",
        )
    else:
        KV = tr.step(
            "kv_bytes_per_gpu",
            "KV cache per GPU (batch)",
            "KV",
            "B * k_s + k_g * S_shared",
            cfg.batch * per_seq + prefix_once,
            unit="B",
            B=cfg.batch,
            k_s=per_seq,
            k_g=k_gpu,
            S_shared=shared_eff,
            note=f"paged allocation, batch {cfg.batch}",
        )
    A = tr.step(
        "activation_bytes_per_gpu",
        "Activations / workspace per GPU",
        "A",
        "2 * B * S * h * b_a / (tp * pp)",
        2 * cfg.batch * ctx * m.hidden_size * 2 / (tp * pp),
        unit="B",
        latex=r"\frac{2 \cdot [B] \cdot [S] \cdot [h] \cdot [b_a]}{[tp] \cdot [pp]}",
        B=cfg.batch,
        S=ctx,
        h=m.hidden_size,
        b_a=2,
        tp=tp,
        pp=pp,
        note="the textbook example workspace: two hidden-size buffers for the whole batch at full context "
        "(conservative; a chunked-prefill engine peaks lower)",
    )
    O = tr.step(
        "overhead_bytes_per_gpu",
        "Runtime overhead per GPU",
        "O",
        "O_gib * GiB",
        a.runtime_overhead_gib * GiB,
        unit="B",
        O_gib=a.runtime_overhead_gib,
        GiB=GiB,
        note="CUDA context + framework + fragmentation (assumption runtime_overhead_gib)",
    )
    U = tr.step(
        "total_bytes_per_gpu", "Total per GPU", "U", "W + KV + A + O", W + KV + A + O, unit="B", W=W, KV=KV, A=A, O=O
    )
    C = tr.step(
        "capacity_bytes_per_gpu",
        "HBM capacity per GPU",
        "C",
        "C_gib * GiB",
        g.memory_bytes,
        unit="B",
        C_gib=g.memory_gib,
        GiB=GiB,
        note=f"{g.name}: {g.memory_gib:g} GiB (vendor 'GB' of HBM is binary)",
    )
    usable = tr.step(
        "usable_bytes_per_gpu",
        "Usable by the engine",
        "C_u",
        "C * u",
        C * a.gpu_mem_util,
        unit="B",
        C=C,
        u=a.gpu_mem_util,
        note="gpu_memory_utilization",
    )
    budget = tr.step(
        "kv_budget_bytes_per_gpu",
        "Left for KV cache per GPU",
        "K_b",
        "max(0, C_u - O - W - A)",
        max(0.0, usable - O - W - A),
        unit="B",
        C_u=usable,
        O=O,
        W=W,
        A=A,
    )
    # a sequence always holds at least its newest token of its own (a prefix share close to 1 or an all-sliding
    # model must not make the per-sequence cost zero)
    n_paged: float = max(0, math.floor((budget - prefix_once) / max(per_seq, k_gpu)))
    n_paged = tr.step(
        "max_sequences",
        "Concurrent sequences per replica (paged)",
        "N",
        "max(0, floor((K_b - k_g * S_shared) / k_s))",
        n_paged,
        unit="seq",
        K_b=budget,
        k_g=k_gpu,
        S_shared=shared_eff,
        k_s=per_seq,
        note="whole paged blocks; every GPU of the replica holds its shard of each sequence",
    )
    n_contig = tr.step(
        "max_sequences_contiguous",
        "Concurrent sequences per replica (contiguous)",
        "N_c",
        "max(0, floor(K_b / (k_g * S_max)))" if not m_s else "max(0, floor(K_b / (k_g * S_max + m_s)))",
        max(0, math.floor(budget / (k_gpu * s_max + m_s))),
        unit="seq",
        K_b=budget,
        k_g=k_gpu,
        S_max=s_max,
        **ssm_in,
        note=f"reserves the model's maximum context of {reserve:,} tokens per sequence up front",
    )
    fits, reason = True, f"fits: {U / 1e9:.3g} GB of {usable / 1e9:.3g} GB usable ({C / 1e9:.3g} GB HBM)"
    if W + O + A > usable:
        fits = False
        reason = (
            f"does not fit: weights {W / 1e9:.3g} GB + overhead {O / 1e9:.3g} GB + workspace {A / 1e9:.3g} GB "
            f"exceed the {usable / 1e9:.3g} GB usable per GPU; raise TP/PP, quantise the weights or pick a "
            "larger GPU"
        )
    elif W + O > usable:
        fits = False
        reason = f"does not fit: the weights alone ({W / 1e9:.3g} GB per GPU) exceed usable memory"
    elif cfg.batch > (n_contig if cfg.kv_alloc == "contiguous" else n_paged):
        fits = False
        n_sel = n_contig if cfg.kv_alloc == "contiguous" else n_paged
        reason = (
            f"does not fit: batch {cfg.batch} needs {KV / 1e9:.3g} GB of KV per GPU but {budget / 1e9:.3g} GB "
            f"is left; at most {n_sel} sequences of {ctx:,} tokens fit under {cfg.kv_alloc} allocation"
            + (f" ({n_paged} with paged allocation)" if cfg.kv_alloc == "contiguous" else "")
        )
    return ServingMemory(
        weights_bytes_per_gpu=W,
        kv_bytes_per_token=k_t,
        kv_bytes_per_token_per_gpu=k_gpu,
        kv_bytes_per_seq_per_gpu=per_seq,
        kv_bytes_per_gpu=KV,
        activation_bytes_per_gpu=A,
        overhead_bytes_per_gpu=O,
        total_bytes_per_gpu=U,
        capacity_bytes_per_gpu=C,
        usable_bytes_per_gpu=usable,
        kv_budget_bytes_per_gpu=budget,
        fits=fits,
        reason=reason,
        max_sequences=int(n_paged),
        max_sequences_contiguous=int(n_contig),
        contiguous_reserved_tokens=reserve,
        replica_gpus=tp * pp,
        replicas=cfg.dp,
        ssm_state_bytes_per_seq_per_gpu=m_s,
        steps=tr.frozen(),
    )


def sequences_vs_context(cfg: RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """(context, paged sequences, contiguous sequences) per replica for each total context length."""
    m, g = model_of(cfg), gpu_of(cfg)
    out = []
    for c in contexts:
        out_tokens = max(1, c - cfg.input_tokens) if c > cfg.input_tokens else 1
        in_tokens = c - out_tokens
        sub = cfg.model_copy(update={"input_tokens": max(1, in_tokens), "output_tokens": out_tokens})
        r = _serving_memory(m, g, sub, NO_TRACE)
        out.append((c, r.max_sequences, r.max_sequences_contiguous))
    return tuple(out)


# --- training ------------------------------------------------------------------------------------


def lora_params(m: ModelArch, rank: int) -> float:
    """Trainable LoRA parameters: r x (d_in + d_out) on every attention and dense/shared MLP projection.

    Routed experts are left frozen (common practice; PEFT 'all-linear' on MoE adds them).
    """
    h = m.hidden_size
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attn = (h + m.num_heads * qk) + (h + m.kv_lora_rank + m.qk_rope_head_dim) + (m.num_heads * m.v_head_dim + h)
    else:
        q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
        attn = (h + q) + 2 * (h + kv) + (q + h)
    n_mats = 3 if m.mlp_kind == "swiglu" else 2
    dense_mlp = n_mats * (h + m.intermediate_size)
    shared_mlp = m.num_shared_experts * n_mats * (h + (m.shared_intermediate_size or m.moe_intermediate_size))
    return rank * (m.attention_layers * attn + m.dense_layers * dense_mlp + m.moe_layers * shared_mlp)


def activation_bytes_per_layer(m: ModelArch, seq: int, micro_batch: Any, tp: int, recompute: Any, sp: bool) -> Any:
    """Activation memory of one transformer layer for one micro-batch [B] (Korthikanti et al., Table 2).

    none:      s b h (34/t + 5 a s/(h t))        with SP;  s b h (10 + 24/t + 5 a s/(h t)) without
    selective: s b h 34/t                        with SP;  s b h (10 + 24/t) without
    full:      2 s b h / t                       with SP;  2 s b h without

    Llama-3.1-70B at s = 8,192, b = 1, t = 1: 34 x 8192 x 8192 = 2.28 GB per layer before the attention
    term (the RA-BIT spec: "about 34 x sequence x hidden bytes per layer, 2.3 GB").

    ``micro_batch`` may be an array and ``recompute`` an array of mode names (the layout search's axes);
    they broadcast.
    """
    s, b, h, a, t = seq, micro_batch, m.hidden_size, m.num_heads, tp
    sbh = s * b * h
    attn = 5 * a * s / (h * t)
    base = 34 / t if sp else 10 + 24 / t
    if isinstance(recompute, str):
        if recompute == "full":
            return 2 * sbh / (t if sp else 1)
        return sbh * (base + (attn if recompute == "none" else 0.0))
    rc = np.asarray(recompute)
    return np.where(rc == "full", 2 * sbh / (t if sp else 1), sbh * (base + np.where(rc == "none", attn, 0.0)))


def training_memory(dep: Deployment | RabitConfig, tr: Trace | None = None, *, dp: int | None = None) -> TrainingMemory:
    """Per-GPU training memory for the config's TP, PP, EP, ZeRO stage, micro-batch and recomputation."""
    dep = as_deployment(dep)
    return training_memory_for(dep, tr if tr is not None else Trace(), dp=dp if dp is not None else dep.config.dp)


def expert_params_total(m: ModelArch) -> float:
    """Routed-expert parameters of the whole model (0 for a dense model)."""
    return float(m.moe_layers * m.num_experts * m.expert_params()) if m.is_moe else 0.0


def stage_layers(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, float]:
    """(layers on the heaviest pipeline stage, effective PP split = L / that).

    PP need not divide the layers (DeepSeek-V3 trains 61 layers on PP 16): the heaviest stage holds
    ceil(L / PP) layers and sets both the per-GPU memory and the stage time, so per-GPU quantities divide
    by L / ceil(L / PP) instead of PP. Equal to PP when PP divides L. With ``vpp`` interleaved chunks per
    GPU each chunk holds ceil(L / (PP v)) layers, so a GPU holds v x that (Llama 3 405B: 126 layers on
    PP 16, v 4 -> 8 layers per GPU).
    """
    ls = vpp * math.ceil(num_layers / (pp * vpp))
    return ls, num_layers / ls


def _zero_div(zero: Any, stage: int, group: Any) -> Any:
    """The divisor ZeRO applies to a state: the DP ``group`` from ``stage`` on, else 1 (arrays broadcast)."""
    if isinstance(zero, (int, np.integer)):
        return group if zero >= stage else 1
    return np.where(np.asarray(zero) >= stage, group, 1.0)


@dataclass(frozen=True)
class TrainingMemoryParts:
    """Every quantity of :func:`training_memory_parts`: floats for scalar inputs, arrays for array inputs [B]."""

    trainable_params: float
    stage_layers: Any  # layers on the heaviest stage (v chunks included)
    pp_eff: Any  # L / stage_layers
    expert_dp: Any  # GPUs holding the same expert shard (= dp without EP)
    weight: Any
    fp8_weight: Any
    gradient: Any
    optimizer: Any
    optimizer_params: Any  # parameters one GPU's optimizer step updates
    activation_per_layer: Any
    interleave_factor: Any  # f_v
    activation: Any
    overhead: float
    total: Any
    capacity: float


def training_memory_parts(
    dep: Deployment,
    *,
    dp: Any,
    tp: int,
    pp: int,
    ep: int,
    zero: Any,
    micro_batch: Any,
    recompute: Any,
    vpp: Any = 1,
    micro_batches: Any = None,
    tr: Trace = NO_TRACE,
) -> TrainingMemoryParts:
    """Training memory per GPU [B]: the one body of the formula, for the traced view and the layout search.

    .. math:: U = W + W_8 + G + S + A_t + O

    Mixed-precision Adam holds 2 + 2 + 12 B per trainable parameter (weights, gradients, FP32 master with
    m and v; ZeRO, arXiv 1910.02054 sec. 3.1), split over TP x PP; ZeRO-1/2/3 shard the optimizer state,
    then the gradients, then the weights over DP. Beyond the config's layout:

      * ``ep``: expert parallelism. Routed experts are split over EP x PP (each expert whole on one GPU,
        expert-tensor-parallel 1) and their ZeRO shards go over the expert-data-parallel group
        TP x DP / EP; everything else over TP x PP and DP (Megatron-Core MoE layout).
      * ``vpp``: interleaved (virtual) pipeline stages; the first stage then holds
        (1 + (PP - 1) / (PP x v)) times the activations (Korthikanti et al. sec. 4.2.3).
      * ``micro_batches``: micro-batches per step; 1F1B holds min(PP, m) of them in flight (PP when None).
      * PP need not divide the layers: the heaviest stage holds ceil(L / PP) (see :func:`stage_layers`).
      * FP8 training (``train_precision``): Transformer Engine caches an FP8 copy of every weight it
        holds across micro-batches, 1 B per parameter on top of the BF16 weights.

    ``dp``, ``vpp``, ``micro_batch``, ``recompute`` (mode names), ``zero`` and ``micro_batches`` may be
    numpy arrays that broadcast (the search's grid); the steps are recorded on ``tr`` for scalar inputs.
    Llama-3.1-70B, TP 8, PP 2, DP 4, ZeRO-3: W = 70.55e9 x 2 / (8 x 2 x 4) = 2.20 GB.
    """
    cfg, m = dep.config, dep.model
    a = cfg.assumptions
    seq = cfg.seq_len
    L = m.num_layers
    L_s: Any
    pp_eff: Any
    if isinstance(vpp, (int, np.integer)):
        L_s, pp_eff = stage_layers(L, pp, int(vpp))
        f_v: Any = 1 + (pp - 1) / (pp * vpp) if vpp > 1 else 1.0
    else:
        V = np.asarray(vpp, dtype=float)
        L_s = V * np.ceil(L / (pp * V))
        pp_eff = L / L_s
        f_v = np.where(V > 1, 1 + (pp - 1) / (pp * V), 1.0)
    P = float(m.total_params())
    ppn = "pp"
    pv: dict[str, Any] = {}  # the pipeline split under the name the recorded steps use
    if tr.enabled:
        record_params(m, tr)
        if L_s * pp != L:
            ppn = "p_e"
            pp_eff = tr.step(
                "p_e",
                "Effective pipeline split (heaviest stage)",
                "p_e",
                "L / (v * ceil(L / (pp * v)))",
                pp_eff,
                L=L,
                pp=pp,
                v=vpp,
                note=f"PP {pp} x {vpp} chunk(s) does not divide {L} layers: the "
                f"heaviest stage holds {L_s} layers and sets memory and time",
            )
        pv[ppn] = pp_eff
    shard = tp * pp_eff
    split = m.is_moe and ep > 1
    P_e = expert_params_total(m) if split else 0.0
    P_d = P - P_e
    edp = tp * dp / ep if split else dp
    zw, zg, zo = _zero_div(zero, 3, dp), _zero_div(zero, 2, dp), _zero_div(zero, 1, dp)
    W8: Any = 0.0
    if cfg.lora_rank:
        n_train = lora_params(m, cfg.lora_rank)
        base_b = QLORA_BASE_BYTES if cfg.qlora else 2.0
        W = (P_d * base_b + n_train * ADAM_WEIGHT_B) / shard + (P_e * base_b / (ep * pp_eff) if split else 0.0)
        G = n_train * ADAM_GRAD_B / (shard * zg)
        S = n_train * ADAM_OPTIM_B / (shard * zo)
        upd = n_train / (shard * zo)
        if tr.enabled:
            note_w = (
                "QLoRA: frozen base in NF4 with double-quantised scales" if cfg.qlora else "LoRA: frozen BF16 base"
            ) + f"; rank-{cfg.lora_rank} adapters trainable"
            if split:
                tr.step(
                    "weight_bytes_per_gpu",
                    "Weights per GPU",
                    "W",
                    f"(P_d * b_base + N_t * 2) / (tp * {ppn}) + P_exp * b_base / (ep * {ppn})",
                    W,
                    unit="B",
                    P_d=P_d,
                    b_base=base_b,
                    N_t=n_train,
                    tp=tp,
                    P_exp=P_e,
                    ep=ep,
                    **pv,
                    note=note_w + "; routed experts split over EP",
                )
            else:
                tr.step(
                    "weight_bytes_per_gpu",
                    "Weights per GPU",
                    "W",
                    f"(P * b_base + N_t * 2) / (tp * {ppn})",
                    W,
                    unit="B",
                    latex=rf"\frac{{[P] \cdot [b_base] + [N_t] \cdot 2}}{{[tp] \cdot [{ppn}]}}",
                    P=P,
                    b_base=base_b,
                    N_t=n_train,
                    tp=tp,
                    **pv,
                    note=note_w,
                )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"N_t * 2 / (tp * {ppn} * z_g)",
                G,
                unit="B",
                N_t=n_train,
                tp=tp,
                **pv,
                z_g=zg,
                note="adapters only",
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"N_t * 12 / (tp * {ppn} * z_o)",
                S,
                unit="B",
                N_t=n_train,
                tp=tp,
                **pv,
                z_o=zo,
                note="FP32 master, momentum and variance of the adapters",
            )
    else:
        n_train = P
        if split:
            es = ep * pp_eff
            ew, eg, eo = _zero_div(zero, 3, edp), _zero_div(zero, 2, edp), _zero_div(zero, 1, edp)
            W = ADAM_WEIGHT_B * (P_d / (shard * zw) + P_e / (es * ew))
            G = ADAM_GRAD_B * (P_d / (shard * zg) + P_e / (es * eg))
            S = ADAM_OPTIM_B * (P_d / (shard * zo) + P_e / (es * eo))
            upd = P_d / (shard * zo) + P_e / (es * eo)
        else:
            W = ADAM_WEIGHT_B * (P_d / (shard * zw))
            G = ADAM_GRAD_B * (P_d / (shard * zg))
            S = ADAM_OPTIM_B * (P_d / (shard * zo))
            upd = P_d / (shard * zo)
        if cfg.train_precision == "fp8":
            W8 = W / 2
        if tr.enabled and split:
            tr.step(
                "expert_dp",
                "Expert data-parallel degree",
                "d_e",
                "tp * dp / ep",
                edp,
                tp=tp,
                dp=dp,
                ep=ep,
                note="GPUs holding the same expert shard: ZeRO shards expert state over them",
            )
            tr.step(
                "weight_bytes_per_gpu",
                "Weights per GPU",
                "W",
                f"2 * (P_d / (tp * {ppn} * z_w) + P_exp / (ep * {ppn} * z_we))",
                W,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_w=zw,
                z_we=ew,
                **pv,
                note="BF16; routed experts split over EP x PP, the rest over TP x PP"
                + ("; ZeRO-3 shards both over their DP groups" if zero >= 3 else ""),
            )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"2 * (P_d / (tp * {ppn} * z_g) + P_exp / (ep * {ppn} * z_ge))",
                G,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_g=zg,
                z_ge=eg,
                **pv,
                note="BF16 gradients",
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"12 * (P_d / (tp * {ppn} * z_o) + P_exp / (ep * {ppn} * z_oe))",
                S,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_o=zo,
                z_oe=eo,
                **pv,
                note="FP32 master + Adam m and v = 12 B/param",
            )
        elif tr.enabled:
            tr.step(
                "weight_bytes_per_gpu",
                "Weights per GPU",
                "W",
                f"P * 2 / (tp * {ppn} * z_w)",
                W,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_w=zw,
                note=f"BF16 weights; ZeRO-{zero} shards them over DP {dp}" if zero >= 3 else "BF16 weights",
            )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"P * 2 / (tp * {ppn} * z_g)",
                G,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_g=zg,
                note="BF16 gradients" + (f", sharded over DP {dp}" if zero >= 2 else ""),
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"P * 12 / (tp * {ppn} * z_o)",
                S,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_o=zo,
                note="FP32 master + Adam m and v = 12 B/param" + (f", sharded over DP {dp}" if zero >= 1 else ""),
            )
    per_layer = activation_bytes_per_layer(m, seq, micro_batch, tp, recompute, cfg.sequence_parallel)
    if micro_batches is None:
        in_flight: Any = pp
    elif isinstance(micro_batches, (int, np.integer)):
        in_flight = max(1, min(pp, micro_batches))
    else:
        in_flight = np.maximum(1, np.minimum(pp, micro_batches))
    logits = 4 * seq * micro_batch * m.vocab_size / tp
    Act = per_layer * L_s * in_flight * f_v + logits
    Ov = a.runtime_overhead_gib * GiB
    total = W + W8 + G + S + Act + Ov
    C = dep.gpu.memory_bytes
    if tr.enabled:
        _record_training_activations(
            tr, dep, recompute, per_layer, L_s, in_flight, f_v, logits, Act, tp, pp, vpp, micro_batch
        )
        tr.step(
            "overhead_bytes_per_gpu",
            "Runtime overhead per GPU",
            "O",
            "O_gib * GiB",
            Ov,
            unit="B",
            O_gib=a.runtime_overhead_gib,
            GiB=GiB,
        )
        if cfg.train_precision == "fp8" and not cfg.lora_rank:
            tr.step(
                "fp8_weight_bytes_per_gpu",
                "FP8 weight copies per GPU",
                "W_8",
                "W / 2",
                W8,
                unit="B",
                W=W,
                note="Transformer Engine caches an FP8 copy (1 B/param) of each weight across micro-batches",
            )
            tr.step(
                "total_bytes_per_gpu",
                "Total per GPU",
                "U",
                "W + W_8 + G + S + A_t + O",
                total,
                unit="B",
                W=W,
                W_8=W8,
                G=G,
                S=S,
                A_t=Act,
                O=Ov,
            )
        else:
            tr.step(
                "total_bytes_per_gpu",
                "Total per GPU",
                "U",
                "W + G + S + A_t + O",
                total,
                unit="B",
                W=W,
                G=G,
                S=S,
                A_t=Act,
                O=Ov,
            )
        tr.step(
            "capacity_bytes_per_gpu",
            "HBM capacity per GPU",
            "C",
            "C_gib * GiB",
            C,
            unit="B",
            C_gib=dep.gpu.memory_gib,
            GiB=GiB,
        )
    return TrainingMemoryParts(
        trainable_params=n_train,
        stage_layers=L_s,
        pp_eff=pp_eff,
        expert_dp=edp,
        weight=W,
        fp8_weight=W8,
        gradient=G,
        optimizer=S,
        optimizer_params=upd,
        activation_per_layer=per_layer,
        interleave_factor=f_v,
        activation=Act,
        overhead=Ov,
        total=total,
        capacity=C,
    )


def _record_training_activations(
    tr: Trace,
    dep: Deployment,
    recompute: str,
    per_layer: float,
    L_s: int,
    in_flight: int,
    f_v: float,
    logits: float,
    act: float,
    tp: int,
    pp: int,
    vpp: int,
    mb: int,
) -> None:
    """The activation steps of :func:`training_memory_parts` (scalar inputs)."""
    cfg, m = dep.config, dep.model
    tr.step(
        "activation_bytes_per_layer",
        "Activations per layer per micro-batch",
        "a_l",
        "a_l",
        per_layer,
        unit="B",
        a_l=per_layer,
        note=f"Korthikanti et al. Table 2: recompute={recompute}, sequence parallel={cfg.sequence_parallel}, "
        f"s={cfg.seq_len}, b={mb}, h={m.hidden_size}, a={m.num_heads}, t={tp}",
    )
    if L_s * pp == m.num_layers and in_flight == pp and vpp == 1:
        # 1F1B: the first stage holds pp micro-batches of L/pp layers = L layers' worth (Korthikanti sec. 4.2.3).
        tr.step(
            "activation_bytes_per_gpu",
            "Activations per GPU",
            "A_t",
            "a_l * L + 4 * s * b * V / tp",
            act,
            unit="B",
            latex=r"[a_l] \cdot [L] + \frac{4 [s] [b] [V]}{[tp]}",
            a_l=per_layer,
            L=m.num_layers,
            s=cfg.seq_len,
            b=mb,
            V=m.vocab_size,
            tp=tp,
            note="1F1B keeps PP micro-batches of L/PP layers in flight on the first stage; "
            "FP32 logits of the output layer",
        )
        return
    tr.step(
        "activation_bytes_per_gpu",
        "Activations per GPU",
        "A_t",
        "a_l * L_s * n_f * f_v + 4 * s * b * V / tp",
        act,
        unit="B",
        latex=r"[a_l] \cdot [L_s] \cdot [n_f] \cdot [f_v] + \frac{4 [s] [b] [V]}{[tp]}",
        a_l=per_layer,
        L_s=L_s,
        n_f=in_flight,
        f_v=f_v,
        s=cfg.seq_len,
        b=mb,
        V=m.vocab_size,
        tp=tp,
        note=f"1F1B keeps min(PP, m) = {in_flight} micro-batches of {L_s} layers in flight on the "
        "first stage"
        + (f"; interleaving over {vpp} virtual stages adds (PP-1)/(PP v) (Korthikanti sec. 4.2.3)" if vpp > 1 else "")
        + "; FP32 logits of the output layer",
    )


def training_memory_for(
    dep: Deployment | RabitConfig,
    tr: Trace,
    *,
    dp: int,
    tp: int | None = None,
    pp: int | None = None,
    zero: int | None = None,
    micro_batch: int | None = None,
    recompute: str | None = None,
    ep: int | None = None,
    vpp: int = 1,
    micro_batches: int | None = None,
) -> TrainingMemory:
    """As :func:`training_memory` with the layout given explicitly: :func:`training_memory_parts` on
    scalars, its steps recorded on ``tr`` (unset knobs come from the config)."""
    dep = as_deployment(dep)
    cfg = dep.config
    zero = cfg.zero if zero is None else zero
    p = training_memory_parts(
        dep,
        dp=dp,
        tp=tp or cfg.tp,
        pp=pp or cfg.pp,
        ep=ep or cfg.ep,
        zero=zero,
        micro_batch=micro_batch or cfg.micro_batch,
        recompute=recompute or cfg.recompute,
        vpp=vpp,
        micro_batches=micro_batches,
        tr=tr,
    )
    total, C = float(p.total), float(p.capacity)
    fits = total <= C
    reason = (
        f"fits: {total / 1e9:.3g} GB of {C / 1e9:.3g} GB"
        if fits
        else f"does not fit: {total / 1e9:.3g} GB per GPU exceeds {C / 1e9:.3g} GB; " + _training_levers(cfg, dp, zero)
    )
    return TrainingMemory(
        trainable_params=float(p.trainable_params),
        weight_bytes_per_gpu=float(p.weight),
        gradient_bytes_per_gpu=float(p.gradient),
        optimizer_bytes_per_gpu=float(p.optimizer),
        activation_bytes_per_gpu=float(p.activation),
        overhead_bytes_per_gpu=float(p.overhead),
        total_bytes_per_gpu=total,
        capacity_bytes_per_gpu=C,
        fits=fits,
        reason=reason,
        steps=tr.frozen(),
        fp8_weight_bytes_per_gpu=float(p.fp8_weight),
    )


def kv_per_token_across_catalog(kv_dtype: str = "bf16") -> tuple[tuple[str, str, float], ...]:
    """(model slug, attention layout, KV bytes per token over all layers) for every catalog model."""
    from core import catalog
    from core.config import KV_BYTES

    return tuple(
        sorted(
            (
                (s, e.arch.attention_kind, kv_bytes_per_token(e.arch, KV_BYTES[kv_dtype]))
                for s, e in catalog.models().items()
            ),
            key=lambda r: r[2],
        )
    )


def training_memory_by_zero(dep: Deployment | RabitConfig) -> tuple[tuple[int, TrainingMemory], ...]:
    """Training memory per GPU at ZeRO stages 0-3, everything else as configured."""
    dep = as_deployment(dep)
    return tuple((z, training_memory(dep.with_(zero=z))) for z in (0, 1, 2, 3))


def _training_levers(cfg: RabitConfig, dp: int, zero: int) -> str:
    """The levers that can lower this layout's memory per GPU (ZeRO shards over DP, so not at DP 1)."""
    levers = []
    if dp > 1 and zero < 3:
        levers.append("raise the ZeRO stage")
    elif dp == 1:
        levers.append("add GPUs so ZeRO can shard over data parallelism (DP is 1 here)")
    levers.append("raise TP/PP")
    if cfg.recompute != "full":
        levers.append("recompute more")
    if cfg.micro_batch > 1:
        levers.append("lower the micro-batch")
    return ", ".join(levers[:-1]) + (" or " if len(levers) > 1 else "") + levers[-1]


def _smallest_nodes(dep: Deployment, zero: int, max_nodes: int = 8192) -> tuple[int, TrainingMemory] | None:
    """The fewest nodes (same GPUs per node and TP/PP) on which the layout fits at this ZeRO stage, or None."""
    cfg = dep.config

    def at(n: int) -> TrainingMemory | None:
        try:
            return training_memory(dep.with_(nodes=n, zero=zero))
        except ValueError:
            return None

    lo, hi = cfg.nodes, cfg.nodes
    while True:
        tm = at(hi)
        if tm is not None and tm.fits:
            break
        if hi >= max_nodes:
            return None
        lo, hi = hi, min(hi * 2, max_nodes)
    best = (hi, tm)
    while hi - lo > 1:  # memory per GPU falls as DP grows: bisect for the smallest count that fits
        mid = (lo + hi) // 2
        tm = at(mid)
        if tm is not None and tm.fits:
            hi, best = mid, (mid, tm)
        else:
            lo = mid
    return best


def training_fit_options(dep: Deployment | RabitConfig) -> tuple[str, ...]:
    """Changes to the sidebar's training layout that make it fit, each checked by computing it.

    Tried one at a time: ZeRO-3 on the GPUs there are (when DP > 1), full recomputation, micro-batch 1,
    the fewest nodes on which ZeRO-3 (and the configured stage) fits, LoRA rank 16 and QLoRA. Empty when the
    layout already fits or nothing tried helps.
    """
    dep = as_deployment(dep)
    cfg = dep.config
    if training_memory(dep).fits:
        return ()
    gb = lambda tm: f"{tm.total_bytes_per_gpu / 1e9:.3g} GB per GPU"  # noqa: E731
    out: list[str] = []

    def try_(label: str, **changes) -> None:
        try:
            tm = training_memory(dep.with_(**changes))
        except ValueError:
            return
        if tm.fits:
            out.append(f"{label}: {gb(tm)}")

    if cfg.dp > 1 and cfg.zero < 3:
        try_("ZeRO-3 on these GPUs", zero=3)
    if cfg.recompute != "full":
        try_("full recomputation", recompute="full")
    if cfg.micro_batch > 1:
        try_("micro-batch 1", micro_batch=1)
    for zero in dict.fromkeys((3, cfg.zero)):
        found = _smallest_nodes(dep, zero)
        if found is not None and found[0] != cfg.nodes:
            n, tm = found
            gpus = n * cfg.gpus_per_node
            out.append(f"ZeRO-{zero} over {gpus:,} GPUs ({n:,} nodes, DP {gpus // (cfg.tp * cfg.pp):,}): {gb(tm)}")
    if not cfg.lora_rank:
        try_("LoRA rank 16 (a fine-tune, not pre-training)", lora_rank=16)
    elif not cfg.qlora:
        try_("QLoRA (4-bit base weights)", qlora=True)
    return tuple(out)
