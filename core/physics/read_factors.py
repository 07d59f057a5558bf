"""What a byte a memory-bound step reads costs against the weight streams' bandwidth ``BW x mbu``: the paged K/V
gathers (``g_r``, :func:`kv_read_factor`; a kernel that loads each KV head once per query head,
:func:`per_query_head_kv_reads`) and the FP8 weights' small-batch GEMMs (``g_w``, :func:`weight_read_factor`). The step
model (:class:`core.physics.step.StepModel`) reads ``g_w W + g_r R k_g`` bytes-equivalents at ``BW x mbu``."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from core.base import NO_TRACE, Trace
from core.catalog import rocm_attention
from core.config import COMPUTE_PRECISION, Deployment

if TYPE_CHECKING:
    from core.physics.step import StepModel

__all__ = ["PAGED_2023_KV_SHARE", "kv_read_factor", "per_query_head_kv_reads", "weight_read_factor"]

#: The K/V read rate of the 2023 generation of paged decode-attention kernels (vLLM's PagedAttention v1/v2,
#: LightLLM's token attention, which S-LoRA ran) as a share of today's (``kv_read_bw_eff``: FlashInfer,
#: FlashAttention 2/3 with block tables, TensorRT-LLM's XQA). vLLM's paper measured its paged kernel 20-26 % slower
#: than FasterTransformer's contiguous-cache kernel (Kwon et al., SOSP 2023, sec. 7.1: the block-table lookups and
#: extra branches), i.e. at 1 / 1.23 = 0.81 of a contiguous read, where FlashInfer's paged kernels reach 0.90 of
#: their dense kernels' bandwidth (Ye et al., arXiv 2501.01005): 0.81 / 0.90 = 0.90. A row of ``validation/`` that
#: names such a kernel (``decode_attention`` ``paged-2023``) is predicted with ``kv_read_bw_eff`` times this.
PAGED_2023_KV_SHARE = (1.0 / 1.23) / 0.90


def kv_read_factor(dep: Deployment, tr: Trace = NO_TRACE) -> float:
    """K/V read cost per cached token relative to the weight streams' bandwidth ``BW x mbu`` [-]::

        g_r = 1 / (eta_kv x eta_rocm)          (eta_rocm = 1 off ROCm)

    Decode attention gathers each sequence's cached K/V from 16-token pages (vLLM ``--block-size`` 16), short
    bursts with a per-sequence split and reduce, where the weights stream as long contiguous GEMV reads; the K/V
    reads reach ``eta_kv`` (assumption ``kv_read_bw_eff``) of the weights' bandwidth, and vLLM's and SGLang's
    paged-attention kernels on ROCm ``eta_rocm`` (``rocm_attn_bw_eff``) of that. The step formula reads
    ``g_r R k_g`` bytes at ``BW x mbu``, i.e. the ``R k_g`` bytes at ``BW x mbu x eta_kv x eta_rocm``.
    Worked number (base, CUDA): 1 / 1.05 = 0.952; at mbu 0.78 the K/V stream runs at 0.78 x 1.05 = 0.819 of peak.
    """
    a = dep.assumptions
    rocm = rocm_attention(dep.gpu, dep.config.workload.engine)
    g_r = 1.0 / (a.kv_read_bw_eff * (a.rocm_attn_bw_eff if rocm else 1.0))
    if not tr.enabled:
        return g_r
    note = "paged attention gathers K/V from 16-token pages at eta_kv of the weight streams' bandwidth"
    if rocm:
        return tr.step(
            "kv_read_factor",
            "K/V read cost per cached token, relative to the weight streams' bandwidth",
            "g_r",
            "1 / (eta_kv * eta_rocm)",
            g_r,
            latex=r"\frac{1}{[eta_kv] \cdot [eta_rocm]}",
            eta_kv=a.kv_read_bw_eff,
            eta_rocm=a.rocm_attn_bw_eff,
            note=note + "; ROCm paged-attention kernels at eta_rocm of that",
        )
    return tr.step(
        "kv_read_factor",
        "K/V read cost per cached token, relative to the weight streams' bandwidth",
        "g_r",
        "1 / eta_kv",
        g_r,
        latex=r"\frac{1}{[eta_kv]}",
        eta_kv=a.kv_read_bw_eff,
        note=note,
    )


def weight_read_factor(dep: Deployment, tr: Trace = NO_TRACE) -> float:
    """Weight bytes-equivalents per weight byte a memory-bound step reads, against the weight streams' bandwidth
    ``BW x mbu`` [-]::

        g_w = 1 / eta_w8        (FP8 weights; 1 for every other format)

    FP8 weights are read by FP8 tensor-core GEMMs even at decode batch sizes, which stream them at ``eta_w8``
    (assumption ``fp8_stream_eff``) of the BF16 GEMV kernels' rate. Worked number (base): 1 / 0.87 = 1.149, the FP8
    weights at 0.78 x 0.87 = 0.68 of peak.
    """
    if COMPUTE_PRECISION[dep.weights] != "fp8":
        return 1.0
    eta = dep.assumptions.fp8_stream_eff
    g_w = 1.0 / eta
    if not tr.enabled:
        return g_w
    return tr.step(
        "weight_read_factor",
        "FP8 weight streams: bytes-equivalents per weight byte read",
        "g_w",
        "1 / eta_w8",
        g_w,
        latex=r"\frac{1}{[eta_w8]}",
        eta_w8=eta,
        note="FP8 GEMMs at small batch stream the weights at eta_w8 of the BF16 streams' bandwidth (fp8_stream_eff)",
    )


def per_query_head_kv_reads(sm: StepModel) -> StepModel:
    """``sm`` with a decode-attention kernel that loads each KV head once per query head (H / H_kv reads).

    TensorRT-LLM's masked multi-head attention kernel served GQA models this way until its XQA kernels, which
    read a KV head once for its whole query group (TensorRT-LLM v0.10.0 release notes: "Integrated the new
    NVIDIA Hopper XQA kernels for LLaMA 2 70B model"; docs "Multi-Head, Multi-Query, and Group-Query
    Attention"). The engines sized by default (vLLM, SGLang, TensorRT-LLM today) read each KV head once.
    """
    m = sm.model
    return replace(sm, kv_read_factor=sm.kv_read_factor * (m.num_heads / m.num_kv_heads if m.num_kv_heads else 1.0))
