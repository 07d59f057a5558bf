"""Serving memory: what one GPU of a replica holds (weights, KV cache, workspace, overhead) and how many
sequences fit (the RA-BIT spec "Memory", the textbook example worked example)::

    weights   = (P_q x b_w + P_bf16 x 2) / (TP x PP)
    KV/token  = 2 x L x n_kv x d_head x b_kv        (MLA: (r_kv + d_rope) x L x b_kv)
    budget    = C x u - O - weights - workspace      (per GPU; u = 0.9, O = 1.5 GiB)
    sequences = floor(budget / KV per sequence)      (whole paged blocks)

Every function records its steps on a :class:`core.base.Trace`; the results are frozen. The weights, KV and
state-space formulas here are also the step model's (:mod:`core.physics.step`) and training memory's
(:mod:`core.physics.training_footprint`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, GiB, Step, Trace
from core.catalog import ModelArch
from core.config import Deployment, Problem, RabitConfig, as_deployment


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


def dense_weight_bytes(
    m: ModelArch, b_w: float, tp: int, pp: int, *, experts_apart: bool, streamed: bool = False
) -> tuple[float, float, float]:
    """Bytes of the weights one GPU holds outside the routed experts split their own way, and the parameters
    behind them: ``(bytes, P_q, P_bf16)`` [B, count, count].

    .. math:: W_d = \\frac{P_q b_w + P_{bf16} \\cdot 2}{t_p p_p}

    The block linears (``P_q``) take the weight format's ``b_w`` bytes; embeddings, LM head and norms
    (``P_bf16``) stay in BF16, as in published FP8/INT4/MXFP4 checkpoints. ``experts_apart`` leaves the routed
    experts out of ``P_q`` (EP places them whole; an iteration reads only the ones its tokens touch);
    ``streamed`` leaves the input embedding out of ``P_bf16`` (a lookup reads only the rows of its tokens).
    Llama-3.1-70B, BF16, TP 8: (68.45e9 x 2 + 2.10e9 x 2) / 8 = 17.64 GB held; streamed, without the 1.05e9
    embedding rows, 17.38 GB.
    """
    p_q = m.quantizable_params()
    p_bf16 = m.total_params() - p_q
    if experts_apart:
        p_q = p_q - m.moe_layers * m.num_experts * m.expert_params()
    if streamed:
        p_bf16 = p_bf16 - m.embedding_params()
    return (p_q * b_w + p_bf16 * 2.0) / (tp * pp), p_q, p_bf16


def weight_bytes_per_gpu(m: ModelArch, weights_b: float, tp: int, pp: int, ep: int = 1, tr: Trace = NO_TRACE) -> float:
    """Weights held by one GPU [B].

    Linear layers inside the blocks take the weight format's bytes; embeddings, LM head and
    norms stay in BF16 (:func:`dense_weight_bytes`). Routed experts are split over EP x PP when EP > 1,
    everything else over TP x PP.

    Llama-3.1-70B, BF16, TP 8: 70.55e9 x 2 / 8 = 17.6 GB (the textbook example).
    """
    split = ep > 1 and m.is_moe
    p_expert = m.moe_layers * m.num_experts * m.expert_params() if split else 0
    dense, p_q, p_rest = dense_weight_bytes(m, weights_b, tp, pp, experts_apart=split)
    record_params(m, tr)
    value = dense + p_expert * weights_b / (ep * pp)
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
            P_q=p_q,
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


def serving_memory(dep: Deployment | RabitConfig, tr: Trace | None = None) -> ServingMemory:
    """Serving memory per GPU and the sequences one replica holds (the RA-BIT spec, the textbook example)."""
    return _serving_memory(as_deployment(dep), tr if tr is not None else Trace())


def fit_problems(dep: Deployment | RabitConfig) -> tuple[Problem, ...]:
    """The serving model that cannot fit even at batch 1, as a non-blocking problem on TP (the pages still draw
    its memory breakdown); nothing for a config that fits or for training. Callers ask only once the field
    checks (:func:`core.config.problems`) found nothing."""
    dep = as_deployment(dep)
    cfg, m, g = dep.config, dep.model, dep.gpu
    if cfg.phase != "serve":
        return ()
    one = _serving_memory(dep.with_(batch=1), NO_TRACE)
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


def _serving_memory(dep: Deployment, tr: Trace) -> ServingMemory:
    cfg, m, g = dep.config, dep.model, dep.gpu
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


def sequences_vs_context(dep: Deployment | RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """(context, paged sequences, contiguous sequences) per replica for each total context length."""
    dep = as_deployment(dep)
    cfg = dep.config
    out = []
    for c in contexts:
        out_tokens = max(1, c - cfg.input_tokens) if c > cfg.input_tokens else 1
        in_tokens = c - out_tokens
        sub = cfg.model_copy(update={"input_tokens": max(1, in_tokens), "output_tokens": out_tokens})
        r = _serving_memory(dataclasses.replace(dep, config=sub), NO_TRACE)
        out.append((c, r.max_sequences, r.max_sequences_contiguous))
    return tuple(out)


def expert_params_total(m: ModelArch) -> float:
    """Routed-expert parameters of the whole model (0 for a dense model)."""
    return float(m.moe_layers * m.num_experts * m.expert_params()) if m.is_moe else 0.0


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
