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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from core.base import NO_TRACE, Trace
from core.config import COMPUTE_PRECISION, Deployment

__all__ = ["GemmShapeEffs", "dense_gemm_eff", "expert_gemm_eff", "gemm_shape_effs", "k_depth_eff"]


class GemmShapeEffs(TypedDict):
    """The step model's two shape fields (:class:`core.physics.step.StepModel`)."""

    dense_gemm_eff: float
    expert_gemm_eff: float


def k_depth_eff(k: float, k0: float) -> float:
    """A GEMM's rate at reduction depth ``k`` as a share of its main loop's: ``k / (k + k0)``."""
    return k / (k + k0) if k > 0 else 0.0


def _k0(dep: Deployment) -> float:
    """``K0``: ``gemm_k0_ridge`` x the part's ridge point at the compute precision (dense peak / HBM bandwidth)."""
    g = dep.gpu
    return dep.assumptions.gemm_k0_ridge * g.peak_flop_per_s(COMPUTE_PRECISION[dep.weights]) / g.memory_bw_bytes_per_s


def _group_eff(parts: Sequence[tuple[float, float]], h: float, k0: float) -> float:
    """``eta`` of GEMMs given as (FLOPs, depth K) against the ceiling at depth ``h``."""
    ref = k_depth_eff(h, k0)
    total = sum(f for f, _ in parts)
    slow = sum(f / min(1.0, k_depth_eff(k, k0) / ref) if k > 0 else f for f, k in parts)
    return total / slow if slow > 0 else 1.0


def dense_gemm_eff(dep: Deployment) -> float:
    """``eta_d``: the dense layers' projections (QKV, attention output, the dense MLP) against the ceiling."""
    m, tp = dep.model, dep.tp
    h = m.hidden_size
    q, kv = m.num_heads * m.head_dim, 2 * m.num_kv_heads * m.head_dim
    parts: list[tuple[float, float]] = [
        ((q + kv) * h, h),
        (q * h, q / tp),
    ]  # MLA and sliding layers: their projections read as these
    width = m.intermediate_size
    if width and m.dense_layers:
        up = 2 if m.mlp_kind == "swiglu" else 1
        share = m.dense_layers / m.num_layers
        parts += [(up * h * width * share, h), (h * width * share, width / tp)]
    return _group_eff(parts, h, _k0(dep))


def expert_gemm_eff(dep: Deployment) -> float:
    """``eta_e``: the routed experts' GEMMs against the ceiling (1 for a dense model)."""
    m = dep.model
    if not m.is_moe:
        return 1.0
    h, width = m.hidden_size, m.moe_intermediate_size
    up = 2 if m.mlp_kind == "swiglu" else 1
    parts: list[tuple[float, float]] = [(up * h * width, h), (h * width, width / (1 if dep.ep > 1 else dep.tp))]
    return _group_eff(parts, h, _k0(dep))


def gemm_shape_effs(dep: Deployment, tr: Trace = NO_TRACE) -> GemmShapeEffs:
    """``dense_gemm_eff`` and ``expert_gemm_eff`` of a deployment (the step model's fields), each recorded when
    below 1."""
    out = GemmShapeEffs(dense_gemm_eff=dense_gemm_eff(dep), expert_gemm_eff=expert_gemm_eff(dep))
    if tr.enabled:
        k0 = _k0(dep)
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
