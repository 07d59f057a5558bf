"""Training activations per layer (Korthikanti et al., arXiv 2205.05198, Table 2, with the attention kernel's own
term) and their recorded derivation: the activation part of :func:`core.physics.training_footprint.training_memory_parts`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.base import Trace
from core.catalog import ModelArch
from core.config import Deployment, RabitConfig

__all__ = ["activation_bytes_per_layer", "record_training_activations"]


def activation_bytes_per_layer(
    m: ModelArch, seq: int, micro_batch: Any, tp: int, recompute: Any, sp: bool, kernel: str = "flash"
) -> Any:
    """Activation memory of one transformer layer for one micro-batch [B] (Korthikanti et al., Table 2).

    With the eager softmax (``kernel="eager"``: the scores stored, Korthikanti et al.'s own case)::

        none:      s b h (34/t + 5 a s/(h t))        with SP;  s b h (10 + 24/t + 5 a s/(h t)) without
        selective: s b h 34/t                        with SP;  s b h (10 + 24/t) without
        full:      2 s b h / t                       with SP;  2 s b h without

    The 5 a s / h term is the s x s attention scores, their dropout mask and the dropped-out scores
    (2 + 1 + 2 bytes per score). A fused kernel (``kernel="flash"``: FlashAttention, PyTorch's
    ``scaled_dot_product_attention`` on its flash or memory-efficient backend, Transformer Engine's fused
    attention; what every current training stack runs) never stores the scores: it keeps its inputs Q, K, V and its
    output (already in the 34) and one FP32 log-sum-exp per head and query for its backward, and rebuilds the
    scores block by block there (Dao, FlashAttention-2, arXiv 2307.08691 sec. 3.1.2)::

        none:      s b h 34/t + 4 a s b / t          (with SP; 10 + 24/t without)
        selective: s b h 34/t                        Megatron's selective recomputation ("core_attn") reruns the
                                                     kernel from Q, K, V, so only its log-sum-exp goes
        full:      as eager

    The recomputation modes are what Megatron-LM means by ``--recompute-granularity`` (selective: the core
    attention of each layer; full: whole layers from their input, ``--recompute-method uniform``) and what PyTorch's
    ``torch.utils.checkpoint`` does around a whole block. Megatron Bridge's guide ("Activation Recomputation")
    says of fused and Flash attention that the backend "already rematerializes attention internals", which is why
    selective saves almost nothing here.

    Llama-3.1-70B at s = 8,192, b = 1, t = 1: 34 x 8192 x 8192 = 2.28 GB per layer before the attention
    term (the RA-BIT spec: "about 34 x sequence x hidden bytes per layer, 2.3 GB").

    ``micro_batch`` may be an array and ``recompute`` an array of mode names (the layout search's axes);
    they broadcast.
    """
    s, b, h, a, t = seq, micro_batch, m.hidden_size, m.num_heads, tp
    sbh = s * b * h
    if kernel == "eager":
        attn = 5 * a * s / (h * t)  # of s b h: the stored scores
    else:
        attn = 4 * a / (h * t)  # of s b h: one FP32 log-sum-exp per head and query
    base = 34 / t if sp else 10 + 24 / t
    if isinstance(recompute, str):
        if recompute == "full":
            return 2 * sbh / (t if sp else 1)
        return sbh * (base + (attn if recompute == "none" else 0.0))
    rc = np.asarray(recompute)
    return np.where(rc == "full", 2 * sbh / (t if sp else 1), sbh * (base + np.where(rc == "none", attn, 0.0)))


def record_training_activations(
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
    cp: int = 1,
) -> None:
    """The activation steps of :func:`training_memory_parts` (scalar inputs)."""
    cfg, m = dep.config, dep.model
    _record_layer_activations(tr, cfg, m, recompute, per_layer, tp, mb, cp)
    if L_s * pp == m.num_layers and in_flight == pp and vpp == 1 and cp == 1:
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
    cp_in: dict[str, Any] = {"cp": cp} if cp > 1 else {}
    tr.step(
        "activation_bytes_per_gpu",
        "Activations per GPU",
        "A_t",
        "a_l * L_s * n_f * f_v + 4 * s * b * V / (tp * cp)" if cp > 1 else "a_l * L_s * n_f * f_v + 4 * s * b * V / tp",
        act,
        unit="B",
        latex=r"[a_l] \cdot [L_s] \cdot [n_f] \cdot [f_v] + \frac{4 [s] [b] [V]}{[tp]" + (r" [cp]}" if cp > 1 else "}"),
        a_l=per_layer,
        L_s=L_s,
        n_f=in_flight,
        f_v=f_v,
        s=cfg.seq_len,
        b=mb,
        V=m.vocab_size,
        tp=tp,
        **cp_in,
        note=f"1F1B keeps min(PP, m) = {in_flight} micro-batches of {L_s} layers in flight on the "
        "first stage"
        + (f"; interleaving over {vpp} virtual stages adds (PP-1)/(PP v) (Korthikanti sec. 4.2.3)" if vpp > 1 else "")
        + (f"; context parallelism {cp} splits the sequence and the FP32 logits" if cp > 1 else "")
        + "; FP32 logits of the output layer",
    )


def _record_layer_activations(
    tr: Trace, cfg: RabitConfig, m: ModelArch, recompute: str, per_layer: float, tp: int, mb: int, cp: int
) -> None:
    """The per-layer activation step: Korthikanti et al. Table 2 with the attention kernel's own term."""
    s, h, a = cfg.seq_len, m.hidden_size, m.num_heads
    sp = cfg.sequence_parallel
    base, base_tex = ("34 / t", r"\frac{34}{[t]}") if sp else ("(10 + 24 / t)", r"\left(10 + \frac{24}{[t]}\right)")
    kv: dict[str, Any] = {"s": s, "b": mb, "h": h, "t": tp}
    if recompute == "full":
        expr = "2 * s * b * h / t" if sp else "2 * s * b * h"
        latex = r"\frac{2 [s] [b] [h]}{[t]}" if sp else r"2 [s] [b] [h]"
        what = "full recomputation keeps each layer's input only"
        if not sp:
            kv.pop("t")
    elif recompute == "selective":
        expr, latex = f"s * b * h * {base}", rf"[s] [b] [h] {base_tex}"
        what = "selective recomputation reruns the core attention: its scores and statistics are not kept"
    elif cfg.attention_kernel == "eager":
        expr = f"s * b * h * ({base} + 5 * a * s / (h * t))"
        latex = rf"[s] [b] [h] \left({base_tex} + \frac{{5 [a] [s]}}{{[h] [t]}}\right)"
        what = "the eager softmax stores the s x s scores, their dropout mask and the dropped-out scores (5 a s / h)"
        kv["a"] = a
    else:
        expr = f"s * b * h * {base} + 4 * a * s * b / t"
        latex = rf"[s] [b] [h] {base_tex} + \frac{{4 [a] [s] [b]}}{{[t]}}"
        what = "a fused (flash) kernel stores no scores, one FP32 log-sum-exp per head and query"
        kv["a"] = a
    if cp > 1:
        expr, latex, kv["cp"] = f"({expr}) / cp", rf"\left({latex}\right) / [cp]", cp
    tr.step(
        "activation_bytes_per_layer",
        "Activations per layer per micro-batch",
        "a_l",
        expr,
        per_layer,
        unit="B",
        latex=latex,
        **kv,
        note=f"Korthikanti et al. Table 2, {cfg.attention_kernel} attention kernel, recompute={recompute}, "
        f"sequence parallel={sp}: {what}" + (f"; context parallelism {cp} splits the sequence" if cp > 1 else ""),
    )
