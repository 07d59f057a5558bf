"""The model state one GPU holds in training [B]: weights, gradients and optimizer state, for full training and
for LoRA / QLoRA, split over TP x PP (routed experts over EP x PP) and sharded by ZeRO over the data-parallel group
(the experts' over the expert data-parallel group): the part of training memory
(:func:`core.physics.training_memory_parts`) that the ZeRO paper's accounting gives (Rajbhandari et al., arXiv
1910.02054 sec. 3.1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from core.base import Trace
from core.catalog import ModelArch
from core.config import RabitConfig

#: Bytes per parameter of a QLoRA NF4 base with double-quantised scales (Dettmers et al.,
#: arXiv 2305.14314 sec. 3: 4-bit NF4 + 0.127 bit of scales per parameter).
QLORA_BASE_BYTES = (4 + 0.127) / 8
#: Bytes per trainable parameter under mixed-precision Adam (ZeRO paper, sec. 3.1).
ADAM_WEIGHT_B, ADAM_GRAD_B, ADAM_OPTIM_B = 2.0, 2.0, 12.0


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


def zero_div(zero: Any, stage: int, group: Any) -> Any:
    """The divisor ZeRO applies to a state: the DP ``group`` from ``stage`` on, else 1 (arrays broadcast)."""
    if isinstance(zero, (int, np.integer)):
        return group if zero >= stage else 1
    return np.where(np.asarray(zero) >= stage, group, 1.0)


class StateSizes(NamedTuple):
    """What the state's formulas share: the parameters (all, dense, routed experts), how they split over TP x PP
    (and EP), the ZeRO groups, and the pipeline split's name in the recorded steps."""

    P: float
    P_d: Any
    P_e: Any
    split: bool  # routed experts split over EP
    shard: Any  # tp x pp_eff
    tp: int
    ep: int
    pp_eff: Any
    dp: Any  # ZeRO's group: dp x cp
    edp: Any  # the expert data-parallel group
    ppn: str
    pv: dict[str, Any]


def lora_state(cfg: RabitConfig, m: ModelArch, z: StateSizes, zs: tuple[Any, Any, Any], tr: Trace) -> tuple[Any, ...]:
    """(trainable parameters, W, G, S, parameters the optimizer steps) of LoRA / QLoRA: the frozen base (NF4 with
    double-quantised scales under QLoRA, else BF16) and the adapters' weights, gradients and Adam state."""
    P, P_d, P_e, split, shard = z.P, z.P_d, z.P_e, z.split, z.shard
    tp, ep, pp_eff, ppn, pv = z.tp, z.ep, z.pp_eff, z.ppn, z.pv
    _, zg, zo = zs
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
    return n_train, W, G, S, upd


def full_state(cfg: RabitConfig, z: StateSizes, zero: Any, zs: tuple[Any, Any, Any], tr: Trace) -> tuple[Any, ...]:
    """(trainable parameters, W, G, S, parameters the optimizer steps, FP8 weight copies) of full training: mixed
    precision Adam's 2 + 2 + 12 B per parameter, the routed experts over EP x PP and their ZeRO shards over the
    expert data-parallel group."""
    P, P_d, P_e, split, shard = z.P, z.P_d, z.P_e, z.split, z.shard
    tp, ep, pp_eff, dp, edp, ppn, pv = z.tp, z.ep, z.pp_eff, z.dp, z.edp, z.ppn, z.pv
    zw, zg, zo = zs
    W8: Any = 0.0
    n_train = P
    if split:
        es = ep * pp_eff
        ew, eg, eo = zero_div(zero, 3, edp), zero_div(zero, 2, edp), zero_div(zero, 1, edp)
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
    return n_train, W, G, S, upd, W8
