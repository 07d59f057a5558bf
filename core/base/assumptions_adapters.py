"""The assumptions of multi-LoRA serving (the adapter kernels, the host link and storage an adapter is loaded
over): rows of :data:`core.base.assumptions.REGISTRY`, declared here beside the rest of the registry's rows."""

from __future__ import annotations

from core.base.assumption_info import AssumptionInfo

__all__ = ["ADAPTER_ASSUMPTIONS"]

ADAPTER_ASSUMPTIONS = (
    AssumptionInfo(
        "lora_kernel_eff",
        "Adapter (LoRA shrink / expand) kernel efficiency, as a share of the step's MFU and MBU",
        "frac",
        0.50,
        0.17,
        1.00,
        "Two published ends. Low: Punica's SGMV operator alone (Chen et al., arXiv 2310.18547, sec. 7, figs. 8-9; "
        "A100, h = 4,096 in and out) takes about 42 us at batch 1 and 72 / 75 / 89 / 118 us at batch 64 with a "
        "distinct adapter per request at rank 8 / 16 / 32 / 64: 0.48-1.21 us per extra adapter, whose 0.13-1.05 MB "
        "would stream in 0.08-0.66 us at 80 % of the A100's bandwidth, i.e. 17-54 % of the step's efficiency. High: "
        "in Punica's end-to-end runs (same paper) 32 distinct rank-16 adapters cost Llama-2-7B 8 % of its throughput, "
        "what reading their weights at the step's full efficiency costs. The base is between the two.",
        +1,
        moves=("serving_speed",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="a share of the step's own efficiency: the adapter kernels never run faster than the base's",
    ),
    AssumptionInfo(
        "adapter_link_eff",
        "Share of the host link's bandwidth an adapter copy to the GPU achieves",
        "frac",
        0.70,
        0.35,
        0.90,
        "Pinned host memory reaches most of PCIe's bandwidth and pageable memory about half (NVIDIA CUDA C++ Best "
        "Practices Guide, 'Pinned Memory'); vLLM PR #31317 cut CPU-to-GPU LoRA transfer time by about 40 % by "
        "making the copies pinned and contiguous, so the pageable path ran at about 0.6 of the pinned one.",
        +1,
        moves=("serving_speed",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="a share of the link's bandwidth",
    ),
    AssumptionInfo(
        "adapter_storage_gb_per_s",
        "Read bandwidth for an adapter that is not in host memory (beyond max_cpu_loras)",
        "GB/s",
        2.0,
        0.5,
        6.0,
        "Estimate: a local NVMe SSD reads 3-7 GB/s sequentially (PCIe Gen4 / Gen5 x4), less through safetensors "
        "parsing and the file system; a network file system or object store 0.1-1 GB/s.",
        +1,
        moves=("serving_speed",),
        min_value=0.01,
        max_value=100.0,
        domain_reason="from a slow network share to beyond any local NVMe array",
    ),
    AssumptionInfo(
        "adapter_layer_load_us",
        "Fixed cost of loading an adapter into one LoRA-wrapped layer (copies launched, bookkeeping)",
        "us",
        100.0,
        5000.0,
        10.0,
        "LoRAX issue #433: about 20 ms per LoRA layer when each layer's weights are loaded and moved to the GPU one "
        "at a time, 0.5 to more than 1 s per adapter; the pessimistic 5 ms per wrapped layer puts a 128-layer adapter "
        "(Llama-3.1-8B, all linear layers) at 0.64 s, inside that span. A batched copy into pre-allocated slots "
        "(vLLM's set_lora) costs tens of microseconds per layer. The base is an estimate between the two.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1e6,
        domain_reason="beyond a second per layer an adapter would take minutes to load",
    ),
)
