"""The rate a routed expert's GEMMs lose to their shape: a reduction (K) that is short against the part's ridge point.

Every GEMM tile runs a main loop over its reduction dimension ``K`` (``2 K`` FLOP per output element) and then writes
its output (2 B per element in BF16), a cost that does not shrink with ``K``. With the main loop at the compute
peak ``pi`` and the write at the HBM bandwidth ``BW`` one after the other, a GEMM of depth ``K`` reaches::

    eff(K) = K / (K + K0),     K0 = s_K x pi / BW          (pi / BW: the part's ridge point, FLOP per byte)

of its main loop's rate (``s_K``: assumption ``gemm_k0_ridge``). DeepGEMM's FP8 GEMMs on H800 (README tables,
deepseek-ai/DeepGEMM, 2025) follow it: at M = 4,096 the rate falls from 1,358 TFLOP/s at K = 16,384 and 1,304 at
7,168 to 1,025 at K = 2,048 and 590 at K = 512, i.e. K0 = 735 against the part's ridge of 1,979 / 3.35 = 591.

The step model's ceiling ``mfu_max`` is a dense layer's, whose GEMMs reduce over the hidden size ``h`` (the
QKV and gate / up projections). A routed expert's down projection reduces over the expert's own width ``I_e``,
sliced ``tp`` ways when tensor parallelism slices the experts (whole experts per GPU under EP): 192 rows for
Qwen3-235B-A22B at TP 8 (1,536 / 8), 1,792 for Mixtral-8x7B. Its rate relative to the ceiling is
``eff(K_d) / eff(h)`` (capped at 1), and the experts' GEMMs together (the gate / up share ``s_u`` of their FLOPs at
``K = h``, the down share ``s_d`` at ``K_d``) run at::

    eta_e = 1 / (s_u + s_d x min(1, eff(h) / eff(K_d)))          (SwiGLU: s_u = 2/3, s_d = 1/3; GELU: 1/2, 1/2)

of the dense rate (:attr:`core.physics.step.StepModel.expert_gemm_eff`, beside the per-expert rows ramp
``t_e / (t_e + T0)``). The same physics on the dense layers' row-parallel GEMMs (the output and down projections,
``K = h / tp`` and ``I / tp``) is not applied: with it the batch-1 first tokens of ``short-prefill-batch1`` move
13.2 -> 16.5 % (validation/README.md).
"""

from __future__ import annotations

from core.base import NO_TRACE, Trace
from core.config import COMPUTE_PRECISION, Deployment

__all__ = ["expert_gemm_eff", "k_depth_eff"]


def k_depth_eff(k: float, k0: float) -> float:
    """A GEMM's rate at reduction depth ``k`` as a share of its main loop's: ``k / (k + k0)``."""
    return k / (k + k0) if k > 0 else 0.0


def expert_gemm_eff(dep: Deployment, tr: Trace = NO_TRACE) -> float:
    """``eta_e``: the routed experts' GEMM rate as a share of the dense layers' (1 for a dense model, or where the
    expert's down projection reduces over at least ``h``); recorded as ``expert_gemm_eff`` when below 1."""
    m, g, a = dep.model, dep.gpu, dep.assumptions
    if not m.is_moe:
        return 1.0
    h = m.hidden_size
    k_d = m.moe_intermediate_size / (1 if dep.ep > 1 else dep.tp)  # EP holds whole experts, TP slices them
    ridge = g.peak_flop_per_s(COMPUTE_PRECISION[dep.weights]) / g.memory_bw_bytes_per_s
    k0 = a.gemm_k0_ridge * ridge
    rel = k_depth_eff(h, k0) / max(k_depth_eff(k_d, k0), 1e-12)
    if rel <= 1.0:
        return 1.0
    s_d = 1.0 / 3.0 if m.mlp_kind == "swiglu" else 0.5
    eta = 1.0 / ((1.0 - s_d) + s_d * rel)
    if tr.enabled:
        tr.step(
            "expert_gemm_eff",
            "Routed experts' GEMM rate, as a share of the dense layers' (short down-projection reduction)",
            r"\eta_e",
            "1 / (s_u + s_d * (h / (h + K0)) / (K_d / (K_d + K0)))",
            eta,
            unit="frac",
            units={"h": "", "K_d": "", "K0": "", "s_u": "frac", "s_d": "frac"},
            h=h,
            K_d=k_d,
            K0=k0,
            s_u=1.0 - s_d,
            s_d=s_d,
            note=f"K0 = gemm_k0_ridge x ridge point ({ridge:,.0f} FLOP/B: {g.name}'s dense peak / HBM bandwidth); "
            "the expert's down projection reduces over K_d = I_e"
            + (" (whole experts under EP)" if dep.ep > 1 else f" / tp = {m.moe_intermediate_size} / {dep.tp}"),
        )
    return eta
