"""The decode step's two bandwidth assumptions: the weight streams' share of peak HBM bandwidth (``mbu``) and the
paged K/V gathers' share of that (``kv_read_bw_eff``), the FP8 GEMMs' share of it at small batch
(``fp8_stream_eff``); part of :data:`core.base.assumptions.REGISTRY`, in its
order."""

from __future__ import annotations

from core.base.assumption_info import AssumptionInfo

__all__ = ["DECODE_BANDWIDTH_ASSUMPTIONS"]

DECODE_BANDWIDTH_ASSUMPTIONS = (
    AssumptionInfo(
        "mbu",
        "Decode memory-bandwidth utilisation of the weight streams (achieved / peak HBM bandwidth)",
        "frac",
        0.78,
        0.70,
        0.90,
        "Long contiguous reads: a decode step's GEMV / skinny-GEMM weight streams, the sampler's logits, an "
        "optimizer's state. TensorRT-LLM / FlashInfer GEMV kernels reach ~80-85 % of peak HBM bandwidth; STREAM "
        "triad and device-to-device copy on H100 SXM sustain 3.0-3.1 of 3.35 TB/s (90-92 %, the high bound); "
        "Databricks 'LLM Inference Performance Engineering' (2023) reports MBU 60-70 % for whole small-batch "
        "steps, launch gaps and K/V reads included (the low bound). vLLM V1's Llama-2-7B decode on H100 SXM "
        "(validation/vllm_lifecycle.csv) streamed >= 83 % of peak over whole steps. Base 0.78: just below the "
        "GEMV kernels' figure, a step's weights being streamed as each layer's short GEMMs, each with its own "
        "ramp and tail; higher moves the TensorRT-LLM / S-LoRA families (validation/) away by over 2 points.",
        +1,
        moves=("serving_speed", "training", "video"),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak bandwidth: never above the peak",
    ),
    AssumptionInfo(
        "fp8_stream_eff",
        "Weight-stream bandwidth of FP8 GEMMs at small batch, as a share of the weight streams' (mbu)",
        "frac",
        0.87,
        0.63,
        1.0,
        "FP8 weights are read by FP8 tensor-core GEMM kernels (no GEMV path: e4m3 operands in K-major tiles of 64 "
        "rows, scaled in the epilogue), which at decode batch sizes stream the weights below the BF16 GEMV "
        "kernels' rate: CUTLASS's best SM90 e4m3 kernels for 16-64 x 14,336 x 4,096 on H100 reach ~2.2 TB/s, "
        "68-70 % of peak by Nsight Compute (NVIDIA/cutlass issue 1139), against mbu 0.78 for the BF16 streams: "
        "base 0.68 / 0.78 = 0.87. Low: an FP8 weight-only GEMV on H200 at 2.35 TB/s of 4.8, 0.49 of peak "
        "(microsoft/onnxruntime PR 31155): 0.63 of mbu. High: as fast as the BF16 streams. It moves only the "
        "weights read by a memory-bound step (decode, small batches); a compute-bound step is set by the FP8 "
        "rate (fp8_speedup).",
        +1,
        moves=("serving_speed",),
        min_value=0.05,
        max_value=1.0,
        domain_reason="a share of the weight streams' bandwidth: above 1 an FP8 GEMM would beat the GEMV's stream",
    ),
    AssumptionInfo(
        "kv_read_bw_eff",
        "Paged-attention K/V read bandwidth, as a share of the weight streams' (mbu)",
        "frac",
        1.05,
        0.70,
        1.15,
        "Decode attention gathers each sequence's cached K/V from 16-token pages (vLLM --block-size 16) in one "
        "kernel per layer, where a step's weights stream as many short GEMMs, each with its own ramp and tail "
        "(mbu). Base 1.05: the K/V at 0.82 of peak, a contiguous stream's 0.91 (STREAM triad and "
        "device-to-device copy on H100 SXM, 3.0-3.1 of 3.35 TB/s, mbu's high bound) times the 90 % of their "
        "dense kernels' bandwidth that FlashInfer's paged (vector-sparse) decode kernels reach on the same problem "
        "(Ye et al., FlashInfer, arXiv 2501.01005): 0.91 x 0.90 / 0.78 = 1.05. The kernels of today's engines "
        "(FlashInfer, FlashAttention 2/3 with block tables, TensorRT-LLM's XQA) are of that kind; the 2023 "
        "generation (vLLM's PagedAttention v1/v2, LightLLM's token attention) ran 20-26 % slower than a "
        "contiguous-cache kernel (Kwon et al., SOSP 2023, sec. 7.1; core.physics.read_factors.PAGED_2023_KV_SHARE). "
        "Low 0.70: Nsight profiles of paged K/V reads on H100 at 42-57 % of peak against 78-84 % for weight loads "
        "(~0.55 of peak at mbu 0.78). High 1.15: the K/V at mbu's high bound, 0.90 of peak (a contiguous stream, as STREAM).",
        +1,
        moves=("serving_speed",),
        min_value=0.05,
        max_value=1.42,
        domain_reason="a share of the weight streams' bandwidth, which run below peak (mbu >= 0.70, its low bound): "
        "above 1.42 (about 1 / 0.70) the gather would read faster than the peak at that mbu",
    ),
)
