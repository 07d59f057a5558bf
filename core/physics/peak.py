"""The compute peak of the step model: the dense rate a weight format reaches on a part, before MFU, and the share
of the datasheet peak's clock the part holds under dense matrix work (:class:`core.physics.step.StepModel`, the
video estimate and the training layouts scale with both)."""

from __future__ import annotations

from core import catalog
from core.base import NO_TRACE, Trace
from core.config import COMPUTE_PRECISION

__all__ = ["dense_clock_share", "effective_peak_flop_per_s"]


def effective_peak_flop_per_s(
    gpu: catalog.GpuSpec, weights: str, fp8_speedup: float, fp4_speedup: float, tr: Trace = NO_TRACE
) -> float:
    """Dense compute rate a weight format achieves on a part, before MFU [FLOP/s]; recorded as ``pi_flops``.

    BF16 peak x the named FP8 (and FP4) speed-up, capped by that precision's datasheet peak; parts without
    FP8 tensor cores run FP8 weights weight-only at the BF16 rate, parts without FP4 run FP4 weights at FP8.
    H100 SXM FP8: min(989 x 1.4, 1979) = 1,385 TFLOP/s.
    """
    prec = COMPUTE_PRECISION[weights]
    bf16 = gpu.peak_flop_per_s("bf16")
    if (
        prec in ("fp8", "int8")
        and gpu.supports(prec)
        or (prec == "fp4" and not gpu.supports("fp4") and gpu.supports("fp8"))
    ):
        p8 = gpu.peak_flop_per_s("fp8" if prec == "fp4" else prec)
        pi = min(bf16 * fp8_speedup, p8)
        return tr.step(
            "pi_flops",
            f"Compute peak per GPU ({prec.upper()})",
            r"\pi_{flops}",
            "min(pi_bf16 * s_8, pi_8)",
            pi,
            unit="FLOP/s",
            units={"pi_bf16": "FLOP/s", "pi_8": "FLOP/s", "s_8": "x"},
            pi_bf16=bf16,
            s_8=fp8_speedup,
            pi_8=p8,
            note="FP8 gains what measured kernels give (assumption fp8_speedup), not the 2x datasheet ratio"
            + ("; this part has no FP4 tensor cores, so FP4 weights run at FP8" if prec == "fp4" else ""),
        )
    if prec == "fp4" and gpu.supports("fp4"):
        p4 = gpu.peak_flop_per_s("fp4")
        return tr.step(
            "pi_flops",
            "Compute peak per GPU (FP4)",
            r"\pi_{flops}",
            "min(pi_bf16 * s_8 * s_4, pi_4)",
            min(bf16 * fp8_speedup * fp4_speedup, p4),
            unit="FLOP/s",
            units={"pi_bf16": "FLOP/s", "pi_4": "FLOP/s", "s_8": "x", "s_4": "x"},
            pi_bf16=bf16,
            s_8=fp8_speedup,
            s_4=fp4_speedup,
            pi_4=p4,
            note="FP4 = BF16 x fp8_speedup x fp4_speedup, capped by the FP4 datasheet peak",
        )
    if not tr.enabled:
        return bf16
    return tr.step(
        "pi_flops",
        "Compute peak per GPU (BF16)",
        r"\pi_{flops}",
        "pi_bf16",
        bf16,
        unit="FLOP/s",
        units={"pi_bf16": "FLOP/s"},
        pi_bf16=bf16,
        note=f"{gpu.name}: dense BF16 datasheet peak"
        + (f"; {weights} weights are dequantised to BF16 (weight-only)" if weights != "bf16" else ""),
    )


def dense_clock_share(gpu: catalog.GpuSpec, weights: str, tr: Trace = NO_TRACE) -> float:
    """The clock a dense matrix kernel of ``weights``' compute precision holds, as a share of the datasheet peak's
    (1 where no clock is published or the part holds its peak); recorded as ``dense_clock_share`` when below 1."""
    clk = gpu.dense_clock_share(COMPUTE_PRECISION[weights])
    if clk < 1.0 and tr.enabled:
        tr.step(
            "dense_clock_share",
            "Clock a dense matrix kernel holds, as a share of the datasheet peak's",
            r"f_{clk}",
            "f_dense / f_peak",
            clk,
            unit="x",
            units={"f_dense": "MHz", "f_peak": "MHz"},
            f_dense=clk * (gpu.peak_clock_mhz or 0.0),
            f_peak=gpu.peak_clock_mhz or 0.0,
            note=f"{gpu.name}: the vendor's median clock under a dense GEMM (catalog); the peak and the "
            "compute ceiling scale with it",
        )
    return clk
