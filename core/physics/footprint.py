"""What one weight, one token and one pass cost in memory: the formulas serving memory
(:mod:`core.physics.memory`), the step model (:mod:`core.physics.step`) and training memory share.

Weights per GPU (the block linears in the weight format, the rest in BF16, routed experts over EP, whole attention
blocks per rank under data-parallel attention), KV bytes per token and how a TP group splits them (heads, decode
context parallelism, data-parallel attention), a hybrid's fixed state per sequence, and the activation workspace of
the largest forward pass (a long prompt's chunk).
"""

from __future__ import annotations

import math
from typing import Any

from core.base import NO_TRACE, Trace
from core.catalog import ModelArch
from core.config import RabitConfig

__all__ = [
    "SSM_STATE_BYTES",
    "attention_replica_bytes",
    "dense_weight_bytes",
    "expert_params_total",
    "kv_bytes_per_token",
    "kv_shard",
    "kv_split_note",
    "prefill_chunk_tokens",
    "record_params",
    "ssm_state_bytes_per_seq_per_gpu",
    "weight_bytes_per_gpu",
    "workspace_bytes_per_gpu",
]


def record_params(m: ModelArch, tr: Trace = NO_TRACE) -> float:
    """Total parameters counted from the architecture, as one step [count].

    P = embeddings + LM head + final norm + L_dense x (dense layer) + L_moe x (MoE layer), each layer being
    attention + norms + MLP (all routed experts, shared experts and router for an MoE layer).
    Llama-3.1-70B: 1.05e9 + 1.05e9 + 8,192 + 80 x 855.7e6 = 70.55e9.
    """
    p_total = float(m.total_params())
    if not tr.enabled:  # the step's inputs are eight more counts over the architecture: only for a trace
        return p_total
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


def attention_replica_bytes(m: ModelArch, weights_b: float, tp: int, pp: int) -> float:
    """What data-parallel attention adds to one GPU's weights [B]: every rank holds whole attention blocks, not
    1/TP of them: ``P_a b_w (1 - 1/tp) / pp`` with ``P_a`` = the attention parameters of all attention layers.

    DeepSeek-V3 (61 MLA layers of 187.1M), FP8, TP 8: 11.41e9 x 1 x 7/8 = 9.99 GB per GPU.
    """
    return m.attention_layers * m.attention_params() * weights_b * (1 - 1 / tp) / pp


def weight_bytes_per_gpu(
    m: ModelArch, weights_b: float, tp: int, pp: int, ep: int = 1, tr: Trace = NO_TRACE, dp_attention: bool = False
) -> float:
    """Weights held by one GPU [B].

    Linear layers inside the blocks take the weight format's bytes; embeddings, LM head and
    norms stay in BF16 (:func:`dense_weight_bytes`). Routed experts are split over EP x PP when EP > 1,
    everything else over TP x PP; with data-parallel attention every rank holds whole attention blocks
    (:func:`attention_replica_bytes` on top).

    Llama-3.1-70B, BF16, TP 8: 70.55e9 x 2 / 8 = 17.6 GB (the textbook example).
    """
    split = ep > 1 and m.is_moe
    p_expert = m.moe_layers * m.num_experts * m.expert_params() if split else 0
    dense, p_q, p_rest = dense_weight_bytes(m, weights_b, tp, pp, experts_apart=split)
    if tr.enabled:
        record_params(m, tr)
    value = dense + p_expert * weights_b / (ep * pp)
    if dp_attention and tp > 1:
        W_a = attention_replica_bytes(m, weights_b, tp, pp)
        return tr.step(
            "weights_bytes_per_gpu",
            "Weights per GPU",
            "W",
            "(P_q * b_w + P_bf16 * 2) / (tp * pp) + P_exp * b_w / (ep * pp) + P_a * b_w * (1 - 1 / tp) / pp",
            value + W_a,
            unit="B",
            latex=r"\frac{[P_q] [b_w] + [P_bf16] \cdot 2}{[tp] [pp]} + \frac{[P_exp] [b_w]}{[ep] [pp]} + "
            r"\frac{[P_a] [b_w] (1 - 1/[tp])}{[pp]}",
            P_q=p_q,
            b_w=weights_b,
            P_bf16=p_rest,
            tp=tp,
            pp=pp,
            P_exp=p_expert,
            ep=ep,
            P_a=m.attention_layers * m.attention_params(),
            note="data-parallel attention: each rank holds whole attention blocks (P_a over all attention layers); "
            + ("routed experts split over EP; " if p_expert else "")
            + "the rest split over TP",
        )
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


def kv_shard(m: ModelArch, tp: int, dcp: int = 1, dp_attention: bool = False) -> int:
    """How many ways a TP group splits one token's KV across its ranks [ways].

    Plain TP: min(TP, n_kv) (heads are replicated beyond n_kv); MLA's latent is not split (1). Decode context
    parallelism (vLLM ``--decode-context-parallel-size``) splits the tokens over ``dcp`` of the TP ranks and the heads
    over the TP / dcp groups: min(TP / dcp, n_kv) x dcp (MLA: dcp), which recovers the replication and nothing
    more. Data-parallel attention gives each rank its own sequences, whole: on average one GPU holds 1/TP of the
    replica's KV (TP).

    Llama-3.1-70B (8 KV heads) at TP 8: 8; DeepSeek-V3 at TP 8: 1, with DCP 8 or DP attention: 8.
    """
    if dp_attention:
        return tp
    if m.is_mla:
        return dcp
    return min(tp // dcp, m.num_kv_heads) * dcp


def expert_params_total(m: ModelArch) -> float:
    """Routed-expert parameters of the whole model (0 for a dense model)."""
    return float(m.moe_layers * m.num_experts * m.expert_params()) if m.is_moe else 0.0


def prefill_chunk_tokens(cfg: RabitConfig) -> int | None:
    """The chunk a long prompt is prefilled in [tokens]: the engine's token budget (``workload.token_budget``,
    vLLM's ``max_num_batched_tokens``) when one prompt's uncached part is longer than it, else None (the prompt in
    one pass). vLLM and SGLang chunk a prompt that exceeds the budget and run one chunk per iteration; the Qwen2.5-1M
    blog recommends a budget of 131,072 for 1M-token prompts."""
    uncached = cfg.input_tokens - math.floor(cfg.prefix_cache_frac * cfg.input_tokens)
    C = cfg.workload.token_budget
    return C if uncached > C else None


def workspace_bytes_per_gpu(m: ModelArch, cfg: RabitConfig, tr: Trace = NO_TRACE) -> float:
    """The activation workspace of one GPU [B]: two hidden-size buffers of BF16 for the largest forward pass.

    .. math:: A = 2 \\cdot T_w \\cdot h \\cdot b_a / (t_p p_p c_p)

    ``T_w`` is the whole batch at full context, B x S (the textbook example: conservative), unless a prompt is
    longer than the chunk (:func:`prefill_chunk_tokens`): then no pass holds more than one chunk, ``T_w = C``.
    Context parallelism splits the pass's tokens over ``cp`` groups. Llama-3.1-70B, TP 8, B 32, S 8,192:
    2 x 32 x 8,192 x 8,192 x 2 / 8 = 1.07 GB; one prompt of 1M tokens in chunks of 8,192: 33.6 MB.
    """
    tp, pp, cp = cfg.tp, cfg.pp, cfg.cp
    chunk = prefill_chunk_tokens(cfg)
    ctx = cfg.context_tokens
    div: dict[str, Any] = {"tp": tp, "pp": pp}
    d_expr, d_tex = "(tp * pp)", r"[tp] \cdot [pp]"
    if cp > 1:
        div["cp"] = cp
        d_expr, d_tex = "(tp * pp * cp)", r"[tp] \cdot [pp] \cdot [cp]"
    T_w: dict[str, Any] = {"B": cfg.batch, "S": ctx} if chunk is None else {"C": chunk}
    t_expr, t_tex = ("B * S", r"[B] \cdot [S]") if chunk is None else ("C", "[C]")
    if chunk is None:
        note = "the textbook example workspace: two hidden-size buffers for the whole batch at full context "
        note += "(conservative; a chunked-prefill engine peaks lower)"
    else:
        note = f"the {cfg.input_tokens:,}-token prompt is prefilled in chunks of C = {chunk:,} tokens (the token "
        note += "budget): no pass holds more than one chunk, whatever the context"
    return tr.step(
        "activation_bytes_per_gpu",
        "Activations / workspace per GPU",
        "A",
        f"2 * {t_expr} * h * b_a / {d_expr}",
        2 * (cfg.batch * ctx if chunk is None else chunk) * m.hidden_size * 2 / (tp * pp * cp),
        unit="B",
        latex=rf"\frac{{2 \cdot {t_tex} \cdot [h] \cdot [b_a]}}{{{d_tex}}}",
        **T_w,
        h=m.hidden_size,
        b_a=2,
        **div,
        note=note + (f"; context parallelism {cp} splits the pass over {cp} TP groups" if cp > 1 else ""),
    )


def kv_split_note(m: ModelArch, tp: int, cp: int, dcp: int, dp_attention: bool, shard: int) -> str:
    """How one token's KV is split over a replica's GPUs, in words (the note of the per-token step)."""
    if dp_attention:
        what = f"data-parallel attention: each of the {tp} ranks holds its own sequences' KV whole"
    elif dcp > 1:
        what = f"decode context parallelism {dcp}: tokens split {dcp}x over the TP ranks, heads {shard // dcp}x"
    elif m.is_mla:
        what = "MLA's latent is not split by TP: every rank holds it"
    else:
        what = f"KV heads split {shard}x by TP" + (" (replicated beyond n_kv)" if tp > shard else "")
    return what + (f"; context parallelism {cp}: each sequence's tokens split over {cp} TP groups" if cp > 1 else "")
