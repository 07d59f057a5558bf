"""The rate a GEMM loses to its shape: a reduction (K) that is short against the part's ridge point.

Every GEMM tile runs a main loop over its reduction dimension ``K`` (``2 K`` FLOP per output element) and then writes
its output (2 B per element in BF16), a cost that does not shrink with ``K``. With the main loop at the compute
peak ``pi`` and the write at the HBM bandwidth ``BW`` one after the other, a GEMM of depth ``K`` reaches::

    eff(K) = K / (K + K0),     K0 = s_K x pi / BW          (pi / BW: the part's ridge point, FLOP per byte)

of its main loop's rate (``s_K``: assumption ``gemm_k0_ridge``). DeepGEMM's FP8 GEMMs on H800 (README tables,
deepseek-ai/DeepGEMM, 2025) follow it: at M = 4,096 the rate falls from 1,358 TFLOP/s at K = 16,384 and 1,304 at
7,168 to 1,025 at K = 2,048 and 590 at K = 512, i.e. K0 = 735 against the part's ridge of 1,979 / 3.35 = 591.

The step model's ceiling ``mfu_max`` is that of a layer's GEMMs that reduce over the hidden size ``h`` (the QKV and
gate / up projections, whole on every GPU under tensor parallelism). The row-parallel GEMMs reduce over a slice:
the attention output over ``H d_h / tp``, the MLP's down projection over ``I / tp``, a routed expert's down
projection over its own width ``I_e / tp`` (whole experts under EP: ``I_e``): 1,024 rows for Llama-3.1-70B's
output projection at TP 8, 192 for Qwen3-235B-A22B's experts at TP 8. Each runs at ``min(1, eff(K) / eff(h))``
of the ceiling, and a group of GEMMs with FLOP shares ``s_i`` at depths ``K_i`` at::

    eta = 1 / sum_i s_i / min(1, eff(K_i) / eff(h))

(:attr:`core.physics.step.StepModel.dense_gemm_eff` ``eta_d`` for the dense layers' projections,
:attr:`~core.physics.step.StepModel.expert_gemm_eff` ``eta_e`` for the routed experts, beside their rows ramps).
At TP 1 nothing reduces over fewer than ``h`` rows and both are 1.

A training step (:func:`training_gemm_eff`, ``eta_K``, applied by :mod:`core.training.layout` to the weight
GEMMs' share of a micro-batch's FLOPs) runs three GEMMs per weight: the forward (twice under full recomputation),
the data gradient ``dX = dY W^T`` and the weight gradient ``dW = X^T dY``. The forward reduces as above; the data
gradient reduces over the GEMM's output: a column-parallel GEMM's slice (QKV over ``(q + kv) / tp``, gate / up over
``2 I / tp``, the LM head over ``V / tp``), a row-parallel one's ``h``; the weight gradient reduces over the
micro-batch's tokens (thousands: the ceiling's rate). Llama-3.1-70B in BF16 at TP 8 on H100 (K0 = 989 / 3.35 = 295):
forward depths 1,024 and 3,584, data-gradient depths 1,280 and 7,168, ``eta_K`` = 0.983
(tests/test_training_gemm_shape.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from core.base import NO_TRACE, Trace
from core.catalog import ModelArch
from core.config import COMPUTE_PRECISION, Deployment

__all__ = [
    "GemmShapeEffs",
    "dense_gemm_eff",
    "expert_gemm_eff",
    "gemm_k0",
    "gemm_shape_effs",
    "k_depth_eff",
    "training_gemm_eff",
    "training_gemm_parts",
]


class GemmShapeEffs(TypedDict):
    """The step model's two shape fields (:class:`core.physics.step.StepModel`)."""

    dense_gemm_eff: float
    expert_gemm_eff: float


def k_depth_eff(k: float, k0: float) -> float:
    """A GEMM's rate at reduction depth ``k`` as a share of its main loop's: ``k / (k + k0)``."""
    return k / (k + k0) if k > 0 else 0.0


def gemm_k0(dep: Deployment, precision: str | None = None) -> float:
    """``K0``: ``gemm_k0_ridge`` x the part's ridge point (dense peak / HBM bandwidth) at ``precision`` (default:
    the serving compute precision of the weights)."""
    g = dep.gpu
    pi = g.peak_flop_per_s(precision or COMPUTE_PRECISION[dep.weights])
    return dep.assumptions.gemm_k0_ridge * pi / g.memory_bw_bytes_per_s


def _group_eff(parts: Sequence[tuple[float, float]], h: float, k0: float) -> float:
    """``eta`` of GEMMs given as (FLOPs, depth K) against the ceiling at depth ``h``."""
    ref = k_depth_eff(h, k0)
    total = sum(f for f, _ in parts)
    slow = sum(f / min(1.0, k_depth_eff(k, k0) / ref) if k > 0 else f for f, k in parts)
    return total / slow if slow > 0 else 1.0


def _attention_gemms(m: ModelArch, tp: int) -> list[tuple[float, float, float]]:
    """One layer's attention projections as (weights, forward depth, data-gradient depth): the fused QKV
    (column-parallel: forward over ``h``, data gradient over its output slice ``(q + kv) / tp``) and the output
    projection (row-parallel: forward over ``q / tp``, data gradient over ``h``). MLA and sliding layers read as
    these."""
    h = m.hidden_size
    q, kv = m.num_heads * m.head_dim, 2 * m.num_kv_heads * m.head_dim
    return [((q + kv) * h, h, (q + kv) / tp), (q * h, q / tp, h)]


def _mlp_gemms(m: ModelArch, width: int, split: int) -> list[tuple[float, float, float]]:
    """An MLP of ``width`` split over ``split`` ranks as (weights, forward depth, data-gradient depth): the fused
    gate / up projection (column-parallel: forward over ``h``, data gradient over ``up x width / split``, Megatron-Core's
    ``linear_fc1`` holds both) and the down projection (row-parallel: forward over ``width / split``, data gradient
    over ``h``)."""
    h = m.hidden_size
    up = 2 if m.mlp_kind == "swiglu" else 1
    return [(up * h * width, h, up * width / split), (h * width, width / split, h)]


def dense_gemm_eff(dep: Deployment) -> float:
    """``eta_d``: the dense layers' projections (QKV, attention output, the dense MLP) against the ceiling."""
    m, tp = dep.model, dep.tp
    parts = [(f, k) for f, k, _ in _attention_gemms(m, tp)]
    width = m.intermediate_size
    if width and m.dense_layers:
        share = m.dense_layers / m.num_layers
        parts += [(f * share, k) for f, k, _ in _mlp_gemms(m, width, tp)]
    return _group_eff(parts, m.hidden_size, gemm_k0(dep))


def expert_gemm_eff(dep: Deployment) -> float:
    """``eta_e``: the routed experts' GEMMs against the ceiling (1 for a dense model)."""
    m = dep.model
    if not m.is_moe:
        return 1.0
    parts = [(f, k) for f, k, _ in _mlp_gemms(m, m.moe_intermediate_size, 1 if dep.ep > 1 else dep.tp)]
    return _group_eff(parts, m.hidden_size, gemm_k0(dep))


def training_gemm_parts(dep: Deployment, tp: int, ep: int = 1) -> list[tuple[float, float, float]]:
    """Every weight GEMM one trained token runs, as (weights, forward depth, data-gradient depth), at TP ``tp`` and
    EP ``ep``: the attention projections of each attention layer (scaled to the block's parameter count), the dense
    MLPs, the ``k`` routed experts (whole under EP, sliced over TP without it) and shared experts (sliced over TP)
    of each MoE layer, the LM head (column-parallel over the vocabulary: data gradient over ``V / tp``), and the
    rest of the active matmul parameters (router, SSM mixers, biases) at the ceiling's depth ``h``."""
    m = dep.model
    h = m.hidden_size
    attn = _attention_gemms(m, tp)
    scale = m.attention_params() / sum(f for f, _, _ in attn)  # MLA's latent chain: its own parameter count
    parts = [(f * scale * m.attention_layers, kf, kd) for f, kf, kd in attn]
    if m.intermediate_size and m.dense_layers:
        parts += [(f * m.dense_layers, kf, kd) for f, kf, kd in _mlp_gemms(m, m.intermediate_size, tp)]
    if m.is_moe:
        n_e = m.moe_layers * m.experts_per_tok
        parts += [(f * n_e, kf, kd) for f, kf, kd in _mlp_gemms(m, m.moe_intermediate_size, 1 if ep > 1 else tp)]
        if m.num_shared_experts:
            n_s = m.moe_layers * m.num_shared_experts
            w_s = m.shared_intermediate_size or m.moe_intermediate_size
            parts += [(f * n_s, kf, kd) for f, kf, kd in _mlp_gemms(m, w_s, tp)]
    parts.append((m.vocab_size * h, h, m.vocab_size / tp))
    rest = m.active_matmul_params() - sum(f for f, _, _ in parts)
    if rest > 0:
        parts.append((rest, h, h))
    return parts


def training_gemm_eff(
    dep: Deployment, tp: int, ep: int = 1, recompute: str = "selective", precision: str = "bf16"
) -> float:
    """``eta_K``: the rate of a training step's weight GEMMs against the ceiling at TP ``tp``, EP ``ep``.

    Each weight runs three GEMMs per micro-batch: the forward (twice under full recomputation) at its forward
    depth, the data gradient ``dX = dY W^T`` at its data-gradient depth (a column-parallel GEMM's output slice, a
    row-parallel one's ``h``), and the weight gradient ``dW = X^T dY``, which reduces over the micro-batch's tokens
    (long: the ceiling's rate) and which a frozen LoRA base does not run. ``K0`` at the training precision's peak.
    """
    m = dep.model
    n_fwd = 2.0 if recompute == "full" else 1.0
    n_wgrad = 0.0 if dep.config.lora_rank else 1.0
    flat: list[tuple[float, float]] = []
    for f, kf, kd in training_gemm_parts(dep, tp, ep):
        flat += [(n_fwd * f, kf), (f, kd), (n_wgrad * f, m.hidden_size)]
    return _group_eff(flat, m.hidden_size, gemm_k0(dep, precision))


def gemm_shape_effs(dep: Deployment, tr: Trace = NO_TRACE) -> GemmShapeEffs:
    """``dense_gemm_eff`` and ``expert_gemm_eff`` of a deployment (the step model's fields), each recorded when
    below 1."""
    out = GemmShapeEffs(dense_gemm_eff=dense_gemm_eff(dep), expert_gemm_eff=expert_gemm_eff(dep))
    if tr.enabled:
        k0 = gemm_k0(dep)
        for key, sym, what, eta in (
            (
                "dense_gemm_eff",
                r"\eta_d",
                "Dense layers' GEMM rate: the row-parallel projections reduce over h / tp",
                out["dense_gemm_eff"],
            ),
            (
                "expert_gemm_eff",
                r"\eta_e",
                "Routed experts' GEMM rate: the down projection reduces over I_e / tp",
                out["expert_gemm_eff"],
            ),
        ):
            if eta < 1.0:
                tr.step(
                    key,
                    what,
                    sym,
                    "eta",
                    eta,
                    unit="frac",
                    units={"eta": "frac"},
                    eta=eta,
                    note=f"K / (K + K0) against the ceiling's K = h = {dep.model.hidden_size}, K0 = {k0:,.0f} "
                    f"(gemm_k0_ridge x {dep.gpu.name}'s ridge point, dense peak / HBM bandwidth); "
                    "core.physics.gemm_shape",
                )
    return out
