"""Training work: the FLOPs of one trained token and of the whole run.

Kaplan et al. 2020; Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21, FLOP count of a GPT iteration::

    model FLOPs / token    F_m  = 6 N + 12 d_qk A_t                 (full training)
                                = c_L N + 6 N_lora + 12 d_qk A_t     (LoRA: frozen base, c_L = 4, assumption)
    hardware FLOPs / token F_hw = F_m                                (no recomputation)
                                = F_m + 4 d_qk A_t                    (selective: attention core again)
                                = F_m + 2 N + 4 d_qk A_t              (full: a whole extra forward)
                                  + 2 d_qk A_t                        (a fused kernel, any mode)

``N`` = active parameters that do matrix work (LM head in, embedding lookup out), ``d_qk = H x d_head``,
``A_t`` = attended (query, key) pairs per token summed over layers = L (s + 1) / 2 for causal attention
(sliding-window layers see at most the window). Narayanan et al. write the same work as
72 B s l h^2 (1 + s / 6h + V / 12hl) per iteration without recomputation; its attention term counts the
full s x s score matrix, twice what a causal FlashAttention kernel computes, so ours is half of it
(physics over convention: a causal kernel skips the masked blocks). With recomputation the same paper
writes 96 B s l h^2 (...): our hardware FLOPs. MFU divides model FLOPs, HFU hardware
FLOPs, by the BF16 dense peak (the convention of Llama 3 and Megatron; Korthikanti et al. sec. 5).

A fused (flash) attention kernel stores no scores, so its backward computes Q K^T again before the four
gradient matmuls: five matmuls where the forward has two (Dao, FlashAttention-2, arXiv 2307.08691 sec. 3.1.2),
2 d_qk A_t more hardware FLOPs per token than the eager softmax whatever the recomputation mode; the model FLOPs
(what MFU divides) stay the convention's 12 d_qk A_t.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.catalog import ModelArch
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import lora_params

__all__ = [
    "RECOMPUTES",
    "Work",
    "attention_flops_per_token",
    "attention_pairs_per_token",
    "flops_per_token",
    "work",
]

#: Recomputation modes, in the order of the layout search's recompute axis.
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")


class Work(BaseModel):
    """FLOPs of the run (per token and in total)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    active_matmul_params: float
    trainable_params: float
    attention_pairs_per_token: float  # summed over layers
    model_flop_per_token: float
    hardware_flop_per_token: dict[str, float]  # by recomputation mode
    tokens: float
    total_model_flop: float


def attention_pairs_per_token(m: ModelArch, seq: int) -> float:
    """Attended (query, key) pairs per token, summed over layers, for causal attention over ``seq`` tokens.

    Full layers: the mean of 1..s = (s + 1) / 2. Sliding layers with window w < s: (w (w + 1) / 2 + (s - w) w) / s.
    Llama-3.1-70B at s = 4,096: 80 x 2,048.5 = 163,880.
    """
    full = m.full_attention_layers * (seq + 1) / 2
    if not m.sliding_layers:
        return float(full)
    w = min(m.sliding_window, seq)
    per = (w * (w + 1) / 2 + (seq - w) * w) / seq
    return float(full + m.sliding_layers * per)


def attention_flops_per_token(
    m: ModelArch, seq: int, *, recompute: str = "none", kernel: str = "flash"
) -> tuple[float, float]:
    """(model, hardware) FLOPs per trained token of the attention core (Q K^T and the scores times V, forward and
    backward) [FLOP]: the part of :func:`flops_per_token` that is not a weight GEMM.

    .. math:: F_a = 12 d_{qk} A_t, \\quad F_{a,hw} = F_a (1 + [\\text{recompute}] / 3 + [\\text{flash}] / 6)

    Llama-3.1-70B, s = 4,096, selective, fused kernel: 12 x 8,192 x 163,880 = 1.611e10 model FLOPs;
    hardware 1.611e10 x (1 + 1/3 + 1/6) = 2.417e10.
    """
    attn = 12.0 * m.attn_qk_dim * attention_pairs_per_token(m, seq)
    again = attn / 3 if recompute in ("selective", "full") else 0.0  # the forward's Q K^T and scores x V again
    fused = attn / 6 if kernel == "flash" else 0.0  # the kernel's backward rebuilds Q K^T: 2 of the 12 d_qk
    return attn, attn + again + fused


def flops_per_token(
    m: ModelArch,
    seq: int,
    *,
    lora_rank: int = 0,
    lora_flop_per_param: float = 4.0,
    recompute: str = "none",
    kernel: str = "flash",
) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per trained token [FLOP]; see the module docstring.

    Llama-3.1-70B, s = 4,096, full training: 6 x 69.50e9 + 12 x 8,192 x 163,880 = 4.33e11 FLOP/token; a fused
    kernel's backward adds 2 x 8,192 x 163,880 = 2.69e9 hardware FLOPs (0.6 %).
    """
    n = float(m.active_matmul_params())
    attn, attn_hw = attention_flops_per_token(m, seq, recompute=recompute, kernel=kernel)
    if lora_rank:
        model = lora_flop_per_param * n + 6.0 * lora_params(m, lora_rank) + attn
        extra_full = 2.0 * n + 2.0 * lora_params(m, lora_rank)
    else:
        model = 6.0 * n + attn
        extra_full = 2.0 * n
    if recompute == "full":
        return model, model + extra_full + attn_hw - attn
    return model, model + attn_hw - attn


def work(dep: Deployment | RabitConfig) -> Work:
    """Model and hardware FLOPs of the run (the config's model, sequence length, LoRA rank and tokens)."""
    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    a = cfg.assumptions
    hw = {
        r: flops_per_token(
            m,
            cfg.seq_len,
            lora_rank=cfg.lora_rank,
            lora_flop_per_param=a.lora_flop_per_param,
            recompute=r,
            kernel=cfg.attention_kernel,
        )[1]
        for r in RECOMPUTES
    }
    fm = flops_per_token(m, cfg.seq_len, lora_rank=cfg.lora_rank, lora_flop_per_param=a.lora_flop_per_param)[0]
    return Work(
        active_matmul_params=float(m.active_matmul_params()),
        trainable_params=float(lora_params(m, cfg.lora_rank) if cfg.lora_rank else m.total_params()),
        attention_pairs_per_token=attention_pairs_per_token(m, cfg.seq_len),
        model_flop_per_token=fm,
        hardware_flop_per_token=hw,
        tokens=cfg.train_tokens,
        total_model_flop=fm * cfg.train_tokens,
    )
