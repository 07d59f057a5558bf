"""Every efficiency assumption, declared once, with base, low and high values and a source.

The estimates take an :class:`Assumptions` object (frozen, hashable, part of the
shared config). :data:`REGISTRY` describes each field: what it means, its unit,
the low and high bound used for ranges and sensitivity, and where the base
value comes from. ``Assumptions.at("low")`` / ``.at("high")`` moves every field
to a bound; ``.with_(name=value)`` moves one.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class AssumptionInfo:
    name: str
    label: str
    unit: str
    base: float
    low: float
    high: float
    source: str
    #: +1 when a larger value makes the system faster / roomier, -1 when slower.
    direction: int = 1


_INFOS = (
    AssumptionInfo(
        "gpu_mem_util", "Share of HBM the serving engine may use", "frac", 0.90, 0.85, 0.95,
        "vLLM's default gpu_memory_utilization=0.9 (docs.vllm.ai engine args); the RA-BIT spec.", +1),
    AssumptionInfo(
        "runtime_overhead_gib", "Per-GPU runtime overhead (CUDA context, framework, fragmentation)",
        "GiB", 1.5, 1.0, 2.5,
        "The textbook example worked example (1.5 GiB); CUDA context is ~0.5 GiB on Hopper, NCCL and "
        "allocator slack add the rest.", -1),
    AssumptionInfo(
        "mbu", "Decode memory-bandwidth utilisation (achieved / peak HBM bandwidth)", "frac", 0.75, 0.60, 0.85,
        "Databricks 'LLM Inference Performance Engineering' (2023): MBU 60-70% at small batch on "
        "A100/H100; TensorRT-LLM/FlashInfer GEMV kernels reach ~80-85% of peak HBM bandwidth. "
        "The textbook example uses 0.8.", +1),
    AssumptionInfo(
        "mfu_max", "Compute-efficiency ceiling for large token counts (prefill)", "frac", 0.65, 0.50, 0.75,
        "Large BF16 GEMMs on H100 SXM sustain ~600-700 of 989 TFLOP/s (cuBLASLt, NVIDIA Hopper "
        "tuning guide); prefill MFU of 50-65% is reported by vLLM/SGLang profiles.", +1),
    AssumptionInfo(
        "mfu_ramp_tokens", "Tokens at which compute efficiency reaches half its ceiling (T/(T+T0))",
        "tokens", 64.0, 128.0, 32.0,
        "the RA-BIT spec step-time formula (T/(T+64)); GEMM tiles of 64-128 rows underfill tensor cores "
        "at small batch.", -1),
    AssumptionInfo(
        "fp8_speedup", "FP8 compute speed-up over BF16 (never the 2x peak ratio)", "x", 1.4, 1.3, 1.5,
        "the RA-BIT spec; NVIDIA Transformer Engine / Megatron FP8 training reports 1.3-1.5x end-to-end "
        "over BF16 on H100.", +1),
    AssumptionInfo(
        "fp4_speedup", "FP4 compute speed-up over FP8", "x", 1.5, 1.3, 1.8,
        "Blackwell NVFP4 GEMM measurements: 1.5-1.8x over FP8 at large shapes (NVIDIA "
        "TensorRT-LLM B200 blog); assumption, not the 2x peak ratio.", +1),
    AssumptionInfo(
        "comm_bw_eff", "Achieved collective bus bandwidth / link peak (per direction)", "frac", 0.80, 0.60, 0.95,
        "nccl-tests all_reduce busbw on DGX H100: ~360-480 GB/s of 450 GB/s per direction "
        "(NVIDIA NCCL performance notes).", +1),
    AssumptionInfo(
        "collective_base_us", "Fixed launch and synchronisation cost of one collective", "us", 8.0, 15.0, 4.0,
        "NCCL's tuning model charges a base latency of 6.6 us per collective (LL protocol) before "
        "per-hop terms (src/graph/tuning.cc, quoted in NVIDIA/nccl issue #1334); custom one-shot "
        "all-reduce kernels (TensorRT-LLM) reach ~4 us.", -1),
    AssumptionInfo(
        "comm_overlap", "Share of tensor-parallel communication hidden behind compute (serving)",
        "frac", 0.0, 0.0, 0.5,
        "the RA-BIT spec adds TP all-reduces to the step (no overlap); fused GEMM+collective kernels "
        "hide up to half (TensorRT-LLM, 'Flux' arXiv 2406.06858).", +1),
    AssumptionInfo(
        "step_overhead_ms", "Per-iteration scheduler and launch overhead", "ms", 0.5, 1.5, 0.2,
        "vLLM V1 with CUDA graphs: sub-millisecond CPU overhead per step (vLLM V1 blog, 2025); "
        "V0 and eager mode pay 1-4 ms.", -1),
    AssumptionInfo(
        "mfu_train", "Training compute-efficiency ceiling before bubble and exposed communication",
        "frac", 0.55, 0.42, 0.65,
        "Llama 3 405B: 38-43% end-to-end BF16 MFU on 16k H100 (arXiv 2407.21783, Table 4); "
        "Megatron-LM GPT-3 175B ~47-52% on H100; the ceiling excludes bubble and comm.", +1),
    AssumptionInfo(
        "dp_overlap", "Share of data-parallel gradient and ZeRO traffic hidden behind compute",
        "frac", 0.70, 0.40, 0.90,
        "PyTorch DDP/FSDP bucketed overlap (Li et al., VLDB 2020; FSDP paper arXiv 2304.11277).", +1),
    AssumptionInfo(
        "failure_rate_per_gpu_hour", "Job-interrupting failures per GPU-hour", "1/GPU-h",
        2.0e-5, 1.0e-5, 4.0e-5,
        "Llama 3: 419 unexpected interruptions in 54 days on 16,384 H100 "
        "(arXiv 2407.21783 sec. 3.3.4) = 2.0e-5 per GPU-hour.", -1),
    AssumptionInfo(
        "checkpoint_write_s", "Time to write one checkpoint (blocking part)", "s", 60.0, 300.0, 15.0,
        "Asynchronous checkpointing blocks for tens of seconds (PyTorch DCP async save); "
        "synchronous saves of 70B+ take minutes.", -1),
    AssumptionInfo(
        "restart_s", "Time to detect a failure, reschedule and reload", "s", 600.0, 1800.0, 300.0,
        "Llama 3 and OPT-175B logbooks: restarts of 10-30 minutes at scale.", -1),
    AssumptionInfo(
        "eagle_draft_frac", "Cost of one EAGLE draft step / one target decode step", "frac", 0.05, 0.10, 0.03,
        "EAGLE (Li et al., arXiv 2401.15077): the draft head is one decoder layer plus the target's LM "
        "head, 2.7% (Llama-3.1-70B) to 9% (8B) of the target's weights, read once per draft step; "
        "launch costs make it no cheaper than ~3%.", -1),
    AssumptionInfo(
        "ngram_draft_us", "CPU time of one n-gram (prompt-lookup) proposal round", "us", 50.0, 300.0, 10.0,
        "Prompt-lookup decoding (Saxena 2023; vLLM's n-gram proposer) is a suffix match on the CPU: "
        "tens of microseconds per batch; estimate, not a measurement.", -1),
    AssumptionInfo(
        "tp_overlap_train", "Share of tensor-parallel communication hidden behind compute (training)",
        "frac", 0.0, 0.0, 0.5,
        "Megatron-LM/Transformer Engine --tp-comm-overlap (userbuffers) splits GEMMs to overlap the TP "
        "all-gather/reduce-scatter; off by default, so the base exposes it all.", +1),
    AssumptionInfo(
        "lora_flop_per_param", "LoRA: FLOPs per frozen base parameter per token (full training: 6)",
        "FLOP", 4.0, 4.5, 4.0,
        "The frozen base runs forward (2N) and the activation-gradient backward (2N) but no weight-gradient "
        "GEMMs (2N): 4N. Hu et al., LoRA (arXiv 2106.09685 sec. 4.2) measured a 25% speed-up over full "
        "fine-tuning of GPT-3 175B, i.e. 6 / 1.33 = 4.5 effective.", -1),
    AssumptionInfo(
        "qlora_slowdown", "QLoRA compute time / LoRA compute time (NF4 dequantisation before each GEMM)",
        "x", 1.35, 1.6, 1.15,
        "Estimate: bitsandbytes dequantises the NF4 base to BF16 before every GEMM, forward and backward "
        "(Dettmers et al., arXiv 2305.14314); practitioner reports put QLoRA 15-60% slower than LoRA.", -1),
)

REGISTRY: MappingProxyType[str, AssumptionInfo] = MappingProxyType({a.name: a for a in _INFOS})


class Assumptions(BaseModel):
    """The values in force for every efficiency assumption (frozen, hashable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_mem_util: float = Field(REGISTRY["gpu_mem_util"].base, gt=0, le=1)
    runtime_overhead_gib: float = Field(REGISTRY["runtime_overhead_gib"].base, ge=0)
    mbu: float = Field(REGISTRY["mbu"].base, gt=0, le=1)
    mfu_max: float = Field(REGISTRY["mfu_max"].base, gt=0, le=1)
    mfu_ramp_tokens: float = Field(REGISTRY["mfu_ramp_tokens"].base, ge=0)
    fp8_speedup: float = Field(REGISTRY["fp8_speedup"].base, ge=1)
    fp4_speedup: float = Field(REGISTRY["fp4_speedup"].base, ge=1)
    comm_bw_eff: float = Field(REGISTRY["comm_bw_eff"].base, gt=0, le=1)
    collective_base_us: float = Field(REGISTRY["collective_base_us"].base, ge=0)
    comm_overlap: float = Field(REGISTRY["comm_overlap"].base, ge=0, lt=1)
    step_overhead_ms: float = Field(REGISTRY["step_overhead_ms"].base, ge=0)
    mfu_train: float = Field(REGISTRY["mfu_train"].base, gt=0, le=1)
    dp_overlap: float = Field(REGISTRY["dp_overlap"].base, ge=0, le=1)
    failure_rate_per_gpu_hour: float = Field(REGISTRY["failure_rate_per_gpu_hour"].base, ge=0)
    checkpoint_write_s: float = Field(REGISTRY["checkpoint_write_s"].base, ge=0)
    restart_s: float = Field(REGISTRY["restart_s"].base, ge=0)
    eagle_draft_frac: float = Field(REGISTRY["eagle_draft_frac"].base, ge=0, le=1)
    ngram_draft_us: float = Field(REGISTRY["ngram_draft_us"].base, ge=0)
    tp_overlap_train: float = Field(REGISTRY["tp_overlap_train"].base, ge=0, lt=1)
    lora_flop_per_param: float = Field(REGISTRY["lora_flop_per_param"].base, ge=2, le=6)
    qlora_slowdown: float = Field(REGISTRY["qlora_slowdown"].base, ge=1)

    def at(self, bound: Literal["base", "low", "high"]) -> "Assumptions":
        """Every assumption at its base, pessimistic ("low") or optimistic ("high") bound."""
        return Assumptions(**{n: getattr(i, bound) for n, i in REGISTRY.items()})

    def with_(self, **values: float) -> "Assumptions":
        return self.model_copy(update=values)
