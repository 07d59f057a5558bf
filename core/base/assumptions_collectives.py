"""The assumptions of collective communication (the achieved link bandwidth, the launch cost, the overlap with
compute, the in-switch all-reduce's share): rows of :data:`core.base.assumptions.REGISTRY`, declared here beside the
rest of the registry's rows and spliced into it in their place."""

from __future__ import annotations

from core.base.assumption_info import AssumptionInfo

__all__ = ["COLLECTIVE_ASSUMPTIONS"]

COLLECTIVE_ASSUMPTIONS = (
    AssumptionInfo(
        "comm_bw_eff",
        "Achieved collective bus bandwidth / link peak (per direction)",
        "frac",
        0.80,
        0.60,
        0.95,
        "nccl-tests all_reduce busbw on DGX H100: ~360-480 GB/s of 450 GB/s per direction "
        "(NVIDIA NCCL performance notes).",
        +1,
        moves=("serving_speed", "training", "video"),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / link peak: never above the peak",
    ),
    AssumptionInfo(
        "collective_base_us",
        "Fixed launch and synchronisation cost of one collective",
        "us",
        8.0,
        15.0,
        4.0,
        "NCCL's tuning model charges a base latency of 6.6 us per collective (LL protocol) before "
        "per-hop terms (src/graph/tuning.cc, quoted in NVIDIA/nccl issue #1334); custom one-shot "
        "all-reduce kernels (TensorRT-LLM) reach ~4 us.",
        -1,
        moves=("serving_speed", "training", "video"),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="a 10 ms launch cost is a hung collective, not a latency",
    ),
    AssumptionInfo(
        "custom_ar_base_us",
        "Fixed cost of a serving engine's one-shot all-reduce (each GPU reads every peer's buffer and sums)",
        "us",
        3.0,
        8.0,
        1.5,
        "vLLM, SGLang and TensorRT-LLM all-reduce a TP group's small buffers with their own one-shot kernel (IPC "
        "buffers over NVLink, one flag barrier, replayed from a CUDA graph), not NCCL (NVSwitch parts; not on PCIe, "
        "across nodes or on AMD's mesh, whose ROCm kernels have no published cost here). vLLM's "
        "H100 table (vllm-project/vllm PRs 24111 and 24532, hidden 8,192, BF16, ca_1stage) follows t = t0 + alpha "
        "+ (p - 1) n / beta at t0 + alpha = 5.3-5.9 us over TP 2 / 4 / 6 and 0.5-2 MB (7 us at TP 2 and 0.5 MB, 10 "
        "at TP 4, 13 at TP 6; 19 at TP 4 and 1.5 MB), with alpha = 2.5 us (the H100 catalog's hop) and beta = 360 "
        "GB/s: t0 = 3 us. SGLang's port of TensorRT-LLM's kernel: 3.7-4.5 us for buffers up to 32 KB at TP 2 "
        "without a CUDA graph (sgl-project/sglang PR 2904). Low: NCCL's launch cost (collective_base_us); high: "
        "the barrier alone.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="a 10 ms launch cost is a hung collective, not a latency",
    ),
    AssumptionInfo(
        "comm_overlap",
        "Share of tensor-parallel communication hidden behind compute (serving)",
        "frac",
        0.0,
        0.0,
        0.5,
        "the RA-BIT spec adds TP all-reduces to the step (no overlap); fused GEMM+collective kernels "
        "hide up to half (TensorRT-LLM, 'Flux' arXiv 2406.06858).",
        +1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=0.99,
        domain_reason="a share; all hidden (1) would make communication free",
    ),
    AssumptionInfo(
        "nvls_bw_share",
        "Wire bandwidth an in-switch (NVLS) all-reduce achieves, as a share of what the ring achieves",
        "frac",
        0.84,
        0.78,
        1.0,
        "NCCL's NVLink SHARP all-reduce moves n (1 + 1/p) bytes per GPU each way (its slice gathered reduced, then "
        "multicast) but reaches a lower share of the link than the ring: on 8 H100s nccl-tests shows busbw 480 GB/s "
        "(algbw ~275 GB/s) against the ring's 370 GB/s (NCCL maintainer, NVIDIA/nccl-tests issue #212, 2024-05), "
        "i.e. 275 x 9/8 = 309 GB/s on the wire against 370: 0.84. Low: 8 B300s, busbw 845 against 695 GB/s "
        "(NVIDIA/nccl issue #2140, 2026-04): 483 x 9/8 = 543 against 695 GB/s, 0.78. High: the ring's own share.",
        +1,
        moves=("serving_speed", "training", "video"),
        min_value=0.05,
        max_value=1.5,
        domain_reason="a ratio of achieved bandwidths; above 1.5 NVLS would beat the wire",
    ),
)
