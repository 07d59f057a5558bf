"""Every efficiency assumption, declared once, with base, low and high values and a source.

The estimates take an :class:`Assumptions` object (frozen, hashable, part of the
shared config). :data:`REGISTRY` describes each field: what it means, its unit,
the low and high bound used for ranges and sensitivity, and where the base
value comes from. ``Assumptions.at("low")`` / ``.at("high")`` moves every field
to a bound; ``.with_(name=value)`` moves one.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.base.assumption_info import MOVES, AssumptionInfo
from core.base.assumptions_adapters import ADAPTER_ASSUMPTIONS
from core.base.assumptions_bandwidth import DECODE_BANDWIDTH_ASSUMPTIONS
from core.base.assumptions_collectives import COLLECTIVE_ASSUMPTIONS
from core.base.assumptions_front_end import FRONT_END_ASSUMPTIONS
from core.base.limits import checked, type_problem

_INFOS = (
    AssumptionInfo(
        "gpu_mem_util",
        "Share of HBM the serving engine may use",
        "frac",
        0.90,
        0.85,
        0.95,
        "vLLM's default gpu_memory_utilization=0.9 (docs.vllm.ai engine args); the RA-BIT spec.",
        +1,
        moves=("serving_memory",),
        min_value=0.05,
        max_value=1.0,
        domain_reason="a share of HBM: above 1 is more memory than the GPU has",
    ),
    AssumptionInfo(
        "runtime_overhead_gib",
        "Per-GPU runtime overhead (CUDA context, framework, fragmentation)",
        "GiB",
        1.5,
        2.5,  # pessimistic: more overhead, less room
        1.0,
        "The textbook example worked example (1.5 GiB); CUDA context is ~0.5 GiB on Hopper, NCCL and "
        "allocator slack add the rest.",
        -1,
        moves=("serving_memory", "training_memory", "training", "video"),
        min_value=0.0,
        max_value=64.0,
        domain_reason="beyond 64 GiB per GPU the overhead would be a model of its own, not a context and allocator slack",
    ),
    AssumptionInfo(
        "cuda_graph_gib",
        "Memory the engine's CUDA graphs take outside its memory share, per GPU",
        "GiB",
        1.0,
        3.0,  # pessimistic: more memory outside the share, so a lower safe share
        0.5,
        "vLLM captures its CUDA graphs after the KV cache is allocated, outside --gpu-memory-utilization: "
        "'CUDA graphs can take additional 1~3 GiB memory per GPU' (vLLM 0.6.4 worker/model_runner.py, printed "
        "at start-up); vLLM 0.10.1.1 logs show 0.50 GiB (Qwen2-7B, TP 1) and 0.65 GiB (TP 2) ('Graph capturing "
        "finished ... took'). The tuning loop keeps this much free above the share it proposes.",
        -1,
        moves=("serving_memory",),
        min_value=0.0,
        max_value=64.0,
        domain_reason="graphs larger than 64 GiB per GPU would be a model's worth of memory, not launch buffers",
    ),
    *DECODE_BANDWIDTH_ASSUMPTIONS,
    AssumptionInfo(
        "rocm_attn_bw_eff",
        "Paged-attention bandwidth on ROCm (vLLM, SGLang), as a share of the CUDA kernels' K/V reads",
        "frac",
        1.0,
        0.25,
        1.0,
        "No published kernel figure, so the base is the CUDA kernels' (1). AMD's MI300X results (ROCm vLLM "
        "0.9.0.1-0.11.1, Llama-3.1-70B / 405B FP8 TP 8; validation/serving_published.csv) hold within 12 % at "
        "batches of 1-4 and, with the dense-GEMM clock the catalog carries, run up to 1.5x below the step model "
        "at thousands of sequences, where the K/V reads bind; charged to those reads, the low bound (0.25) "
        "covers them. A vllm bench throughput on MI300X at the "
        "workload's lengths pins it.",
        +1,
        moves=("serving_speed",),
        min_value=0.05,
        max_value=1.0,
        domain_reason="a share of the achieved bandwidth: above 1 the kernel would beat the memory bus",
    ),
    AssumptionInfo(
        "mfu_max",
        "Compute-efficiency ceiling for large token counts (prefill)",
        "frac",
        0.65,
        0.50,
        0.75,
        "Large BF16 GEMMs on H100 SXM sustain ~600-700 of 989 TFLOP/s (cuBLASLt, NVIDIA Hopper "
        "tuning guide); prefill MFU of 50-65% is reported by vLLM/SGLang profiles.",
        +1,
        moves=("serving_speed", "video"),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak FLOP/s: never above the peak",
    ),
    AssumptionInfo(
        "mfu_ramp_tokens",
        "Tokens at which compute efficiency reaches half its ceiling (T/(T+T0))",
        "tokens",
        64.0,
        128.0,
        32.0,
        "the RA-BIT spec step-time formula (T/(T+64)); GEMM tiles of 64-128 rows underfill tensor cores "
        "at small batch.",
        -1,
        moves=("serving_speed", "training"),
        min_value=0.0,
        max_value=65536.0,
        domain_reason="beyond the largest iteration an engine runs (64k tokens) the ramp would never end",
    ),
    AssumptionInfo(
        "gemm_k0_ridge",
        "Reduction depth at which a GEMM reaches half its main loop's rate, as a multiple of the part's ridge point",
        "x",
        1.0,
        1.25,  # pessimistic: a deeper K0, a slower short-K GEMM
        0.5,
        "Each output tile of a GEMM runs 2 K FLOP per element and then writes it (2 B in BF16), so a GEMM of depth K "
        "reaches K / (K + K0) of its main loop's rate with K0 = the ridge point (dense peak / HBM bandwidth, FLOP "
        "per byte) when the write is not hidden (core.physics.gemm_shape). DeepGEMM's FP8 GEMMs on H800 (deepseek-ai/"
        "DeepGEMM README, 2025; M = 4,096): 1,358 / 1,304 / 1,025 / 990 / 590 TFLOP/s at K = 16,384 / 7,168 / 2,048 / "
        "1,536 / 512, within 4 % of K0 = 735, 1.24x the ridge (1,979 / 3.35 = 591): the pessimistic bound. Base: "
        "the ridge itself (1). Optimistic: half of it (0.5), a persistent kernel writing one tile while the next "
        "one's main loop runs (CUTLASS Hopper ping-pong schedule). Charged to the GEMMs that reduce over fewer rows "
        "than the hidden size, against those that reduce over it (mfu_max's): under TP the attention output and "
        "down projections (Llama-3.1-70B at TP 8: 1,024 and 3,584) and the routed experts' down projection "
        "(Qwen3-235B-A22B at TP 8: 192); in training also the column-parallel GEMMs' data gradients, which reduce "
        "over their output slice (Llama-3.1-70B's QKV at TP 8: 1,280).",
        -1,
        moves=("serving_speed", "training"),
        min_value=0.0,
        max_value=16.0,
        domain_reason="beyond 16 ridge points a GEMM of the model's own width would run at a few per cent of peak",
    ),
    AssumptionInfo(
        "fp8_speedup",
        "FP8 compute speed-up over BF16 (never the 2x peak ratio)",
        "x",
        1.4,
        1.3,
        1.5,
        "the RA-BIT spec; NVIDIA Transformer Engine / Megatron FP8 training reports 1.3-1.5x end-to-end over BF16 on "
        "H100. An end-to-end ratio, below the GEMM kernels' own (AMD's measured max-achievable FP8 / BF16 GEMM on "
        "MI300X: 1,273 / 708 TFLOP/s = 1.80x, ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', 2025-02): the "
        "steps' non-GEMM work does not speed up. Where the rate alone sets the time it is low: batch-1 first tokens "
        "of 2,048-token prompts on one GPU (validation short-prefill-batch1, vendor-first-token) come out 12-16 % "
        "slow (median) on H100 / H200 / L40S FP8 at 1.4, 3-7 % fast at 1.7 and 17-20 % fast at 2.0, against 9 % slow "
        "for the A100 BF16 cases; 128-token prompts already come out 10-22 % fast (median), as the A100 BF16 ones do "
        "(8 % fast): fixed costs, not the rate. It stays at 1.4 because the throughput tables over-predict more the "
        "wider the TP: trtllm-bench's H200 FP8 runs 16 % low at TP 1 and 10 % high at TP 8, B200 FP4 2 % low and 45 %"
        " high (at 2.0: 12 and 35 %, 20 and 73 % high). The trend follows the TP all-reduce's price: with in-switch "
        "reduction (NVLS) left out of the catalog the TP 8 runs come out 3 % low (H100), 10 % low (H200) and 25 % "
        "high (B200), and neither comm_bw_eff 0.6 nor collective_base_us 30 moves B200; a higher rate waits on that "
        "cost.",
        +1,
        moves=("serving_speed", "training", "video"),
        min_value=1.0,
        max_value=2.0,
        domain_reason="FP8 runs at most the 2x peak ratio over BF16",
    ),
    AssumptionInfo(
        "fp4_speedup",
        "FP4 compute speed-up over FP8",
        "x",
        1.5,
        1.3,
        1.8,
        "Blackwell NVFP4 GEMM measurements: 1.5-1.8x over FP8 at large shapes (NVIDIA "
        "TensorRT-LLM B200 blog); assumption, not the 2x peak ratio.",
        +1,
        moves=("serving_speed",),
        min_value=1.0,
        max_value=2.0,
        domain_reason="FP4 runs at most the 2x peak ratio over FP8",
    ),
    *COLLECTIVE_ASSUMPTIONS,
    AssumptionInfo(
        "step_overhead_ms",
        "Per-iteration scheduler and launch overhead",
        "ms",
        0.5,
        1.5,
        0.2,
        "vLLM V1 with CUDA graphs: sub-millisecond CPU overhead per step (vLLM V1 blog, 2025); "
        "V0 and eager mode pay 1-4 ms.",
        -1,
        moves=("serving_speed", "training"),
        min_value=0.0,
        max_value=1000.0,
        domain_reason="a scheduler overhead above one second per step is a stalled engine, not an overhead",
    ),
    AssumptionInfo(
        "graph_launch_us",
        "Per-kernel launch gap when the iteration replays a CUDA graph",
        "us",
        1.0,
        2.0,
        0.5,
        "A CUDA graph submits its kernels in one launch, so only the GPU-side gap between dependent kernels "
        "remains, about a microsecond each (NVIDIA CUDA Programming Guide 4.2 'CUDA Graphs'; Modal GPU "
        "glossary 'CUDA Graph': each stream launch costs microseconds). vLLM captures graphs for iterations of "
        "up to 512 tokens by default (compilation config cudagraph_capture_sizes).",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1000.0,
        domain_reason="a launch gap above a millisecond per kernel is a stalled stream, not a launch",
    ),
    AssumptionInfo(
        "eager_launch_us",
        "Per-kernel launch cost without CUDA graphs (eager mode: op dispatch + cudaLaunchKernel)",
        "us",
        5.0,
        10.0,
        3.0,
        "cudaLaunchKernel costs a few microseconds of host time per kernel and PyTorch's eager dispatch adds "
        "more (NVIDIA 'CUDA Graph' guide, docs.nvidia.com/dl-cuda-graph: launch overhead when the CPU cannot "
        "keep up); vLLM runs eager for iterations beyond the capture sizes or with --enforce-eager. "
        "Estimate: 3-10 us per kernel.",
        -1,
        moves=("serving_speed", "video"),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="a launch above 10 ms per kernel is a stalled host, not a launch",
    ),
    AssumptionInfo(
        "seq_overhead_us",
        "Per-sequence scheduler and input-preparation work per iteration",
        "us",
        2.0,
        6.0,
        0.5,
        "The scheduler walks every running request each step (block tables, positions, slot mappings, stop "
        "checks); vLLM V1's persistent batch applies only the diffs to cached input tensors to cut this "
        "host work (vLLM V1 blog, 2025-01). Estimate: 0.5-6 us per running sequence per step.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="more than 10 ms of bookkeeping per sequence per step is a stalled scheduler",
    ),
    AssumptionInfo(
        "sample_bytes_per_vocab",
        "HBM bytes moved per vocabulary entry per sampled sequence (logits, softmax, top-k/top-p)",
        "B",
        16.0,
        32.0,
        8.0,
        "FP32 logits (4 B per entry) are written by the LM head and read by the temperature, softmax and "
        "top-p/top-k passes of the sampler (vLLM v1/sample/sampler.py): about 4 passes = 16 B; greedy is "
        "one write and one read (8 B), a top-p sort doubles it (32 B).",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1024.0,
        domain_reason="beyond 1 KiB per vocabulary entry the sampler would re-read the logits hundreds of times",
    ),
    AssumptionInfo(
        "mfu_train",
        "Training compute-efficiency ceiling before bubble and exposed communication",
        "frac",
        0.55,
        0.42,
        0.65,
        "Llama 3 405B: 38-43% end-to-end BF16 MFU on 16k H100 (arXiv 2407.21783, Table 4); "
        "Megatron-LM GPT-3 175B ~47-52% on H100; the ceiling excludes bubble and comm.",
        +1,
        moves=("training",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak FLOP/s: never above the peak",
    ),
    AssumptionInfo(
        "dp_overlap",
        "Share of data-parallel gradient and ZeRO traffic hidden behind compute",
        "frac",
        0.70,
        0.40,
        0.90,
        "PyTorch DDP/FSDP bucketed overlap (Li et al., VLDB 2020; FSDP paper arXiv 2304.11277).",
        +1,
        moves=("training",),
        min_value=0.0,
        max_value=1.0,
        domain_reason="a share of the traffic",
    ),
    AssumptionInfo(
        "failure_rate_per_gpu_hour",
        "Job-interrupting failures per GPU-hour",
        "1/GPU-h",
        2.0e-5,
        4.0e-5,  # pessimistic: more failures
        1.0e-5,
        "Llama 3: 419 unexpected interruptions in 54 days on 16,384 H100 "
        "(arXiv 2407.21783 sec. 3.3.4) = 0.00002 per GPU-hour.",
        -1,
        moves=("training",),
        min_value=0.0,
        max_value=0.01,
        domain_reason="one failure per 100 GPU-hours already stops a 1,000-GPU job every six minutes",
    ),
    AssumptionInfo(
        "checkpoint_write_s",
        "Time to write one checkpoint (blocking part)",
        "s",
        60.0,
        300.0,
        15.0,
        "Asynchronous checkpointing blocks for tens of seconds (PyTorch DCP async save); "
        "synchronous saves of 70B+ take minutes.",
        -1,
        moves=("training",),
        min_value=0.0,
        max_value=86400.0,
        domain_reason="a checkpoint that blocks for more than a day is not a step",
    ),
    AssumptionInfo(
        "restart_s",
        "Time to detect a failure, reschedule and reload",
        "s",
        600.0,
        1800.0,
        300.0,
        "Llama 3 and OPT-175B logbooks: restarts of 10-30 minutes at scale.",
        -1,
        moves=("training",),
        min_value=0.0,
        max_value=86400.0,
        domain_reason="a restart longer than a day is an outage, not a restart",
    ),
    AssumptionInfo(
        "eagle_draft_frac",
        "Cost of one EAGLE draft step / one target decode step",
        "frac",
        0.05,
        0.10,
        0.03,
        "EAGLE (Li et al., arXiv 2401.15077): the draft head is one decoder layer plus the target's LM "
        "head, 2.7% (Llama-3.1-70B) to 9% (8B) of the target's weights, read once per draft step; "
        "launch costs make it no cheaper than ~3%.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1.0,
        domain_reason="a draft step costing more than a target step defeats EAGLE",
    ),
    AssumptionInfo(
        "ngram_draft_us",
        "CPU time of one n-gram (prompt-lookup) proposal round",
        "us",
        50.0,
        300.0,
        10.0,
        "Prompt-lookup decoding (Saxena 2023; vLLM's n-gram proposer) is a suffix match on the CPU: "
        "tens of microseconds per batch; estimate, not a measurement.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1000000.0,
        domain_reason="a suffix match slower than one second is not a proposer",
    ),
    AssumptionInfo(
        "tp_overlap_train",
        "Share of tensor-parallel communication hidden behind the layer's GEMMs when TP communication overlap is on "
        "(training)",
        "frac",
        0.75,
        0.5,
        0.9,
        "Transformer Engine userbuffers (Megatron-LM --tp-comm-overlap, NeMo tp_comm_overlap) split each TP GEMM "
        "into chunks and move one chunk's all-gather / reduce-scatter under the next chunk's GEMM, so the first or "
        "last chunk stays exposed: 1 - 1/4 with NeMo's pipelined overlap at num_splits 4 and the ring exchange at "
        "TP 4 (NeMo tp_overlap_configs/userbuffers.py, GPT-3 175B TP 4 presets; Wang et al. ASPLOS'23 "
        "'Overlap communication with dependent computation via decomposition'). Low: half (two splits); high: TP 8 "
        "ring exchange, 7/8 less launch costs. Only runs with tp_comm_overlap set hide any; the rest expose it all.",
        +1,
        moves=("training",),
        min_value=0.0,
        max_value=0.99,
        domain_reason="a share; all hidden (1) would make communication free",
    ),
    AssumptionInfo(
        "lora_flop_per_param",
        "LoRA: FLOPs per frozen base parameter per token (full training: 6)",
        "FLOP",
        4.0,
        4.5,
        4.0,
        "The frozen base runs forward (2N) and the activation-gradient backward (2N) but no weight-gradient "
        "GEMMs (2N): 4N. Hu et al., LoRA (arXiv 2106.09685 sec. 4.2) measured a 25% speed-up over full "
        "fine-tuning of GPT-3 175B, i.e. 6 / 1.33 = 4.5 effective.",
        -1,
        moves=("training",),
        min_value=2.0,
        max_value=6.0,
        domain_reason="between the forward pass alone (2) and full training (6)",
    ),
    AssumptionInfo(
        "qlora_slowdown",
        "QLoRA compute time / LoRA compute time (NF4 dequantisation before each GEMM)",
        "x",
        1.35,
        1.6,
        1.15,
        "Estimate: bitsandbytes dequantises the NF4 base to BF16 before every GEMM, forward and backward "
        "(Dettmers et al., arXiv 2305.14314); practitioner reports put QLoRA 15-60% slower than LoRA.",
        -1,
        moves=("training",),
        min_value=1.0,
        max_value=10.0,
        domain_reason="dequantisation cannot make QLoRA faster than LoRA; 10x is a broken kernel",
    ),
    AssumptionInfo(
        "attn_eff",
        "Attention kernel efficiency at video sequence lengths, the GPU's own kernel (achieved / dense BF16 peak)",
        "frac",
        0.60,
        0.45,
        0.75,
        "A kernel written for the GPU's tensor cores: FlashAttention-2 forward reaches 50-73% of the A100's peak "
        "(Dao, arXiv 2307.08691); FlashAttention-3 on H100 reaches 60-75% at head dimension 128 and long "
        "sequences (740 TFLOP/s FP16 at its best; Shah et al., arXiv 2407.08608). Video DiTs attend over "
        "10^4-10^5 tokens, the long-sequence end of both curves.",
        +1,
        moves=("video",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak FLOP/s: never above the peak",
    ),
    AssumptionInfo(
        "attn_eff_legacy",
        "Attention efficiency of FlashAttention-2 on Hopper or Blackwell (achieved / dense BF16 peak)",
        "frac",
        0.35,
        0.30,
        0.45,
        "FlashAttention-2 issues Ampere's mma.sync instructions and cannot use Hopper's asynchronous wgmma and TMA: "
        "35% of the H100's peak (Shah et al., arXiv 2407.08608, against FlashAttention-3's up to 75%); the "
        "catalog's attention-kernel table says on which GPUs FA2 is not the native kernel.",
        +1,
        moves=("video",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak FLOP/s: never above the peak",
    ),
    AssumptionInfo(
        "vae_conv_eff",
        "VAE decoder convolution efficiency (achieved / dense peak of its precision)",
        "frac",
        0.30,
        0.15,
        0.50,
        "Estimate: the video VAEs decode with cuDNN 3D convolutions (implicit GEMM) over a few hundred channels, "
        "chunk by chunk with a feature cache and eager normalisations between them; one published Wan 2.2 VAE "
        "decode (heygen-com/auto-model-optim leaderboard) takes 14.5 s in FP32 eager and 4.8 s fused in BF16 with "
        "torch.compile, a 3x spread from the kernels alone, which this range spans.",
        +1,
        moves=("video",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / peak FLOP/s: never above the peak",
    ),
    AssumptionInfo(
        "offload_gb_per_s",
        "Host-to-GPU bandwidth for a model offloaded to CPU memory between requests",
        "GB/s",
        25.0,
        12.0,
        50.0,
        "PCIe Gen4 x16 carries 32 GB/s per direction (about 25 GB/s from pinned memory), Gen5 x16 64 GB/s (about "
        "50); pageable memory halves it (NVIDIA CUDA C++ Best Practices Guide, 'Pinned Memory').",
        +1,
        moves=("video",),
        min_value=0.1,
        max_value=1000.0,
        domain_reason="from a slow host link to beyond any CPU-GPU link (Grace Hopper's NVLink-C2C is 450 GB/s)",
    ),
    AssumptionInfo(
        "train_mem_headroom_frac",
        "Share of HBM a training layout keeps free (allocator fragmentation, transient peaks)",
        "frac",
        0.05,
        0.10,  # pessimistic: more kept free, less room
        0.02,
        "PyTorch's caching allocator keeps freed blocks reserved, so the reserved peak exceeds the allocated peak "
        "by the fragmentation (PyTorch docs 'CUDA semantics: memory management', expandable_segments); Megatron "
        "Bridge's tuning guide ('Activation Recompute'): most borderline OOMs are allocator fragmentation, not "
        "capacity. Estimate 2-10 %; serving keeps 10 % (vLLM gpu_memory_utilization 0.9).",
        -1,
        moves=("training_memory", "training"),
        min_value=0.0,
        max_value=0.5,
        domain_reason="a share of HBM; keeping more than half free is a different GPU",
    ),
    AssumptionInfo(
        "gpu_power_floor_frac",
        "Share of a GPU's board power it draws serving with its model loaded and almost no traffic",
        "frac",
        0.43,
        0.50,  # pessimistic: more power
        0.15,
        "ML.ENERGY Benchmark v3.0 on H100 SXM: about 300 W of 700 at batch 1 (as quoted by the vLLM semantic "
        "router's fleet-sim power model reference); a GPU holding a model with no requests draws its bare idle plus "
        "26-50 W for the CUDA context (arXiv 2605.23918, H100 and A100), about 100 W of 700, the optimistic end.",
        -1,
        moves=("power",),
        min_value=0.0,
        max_value=1.0,
        domain_reason="a share of the board power",
    ),
    AssumptionInfo(
        "gpu_power_busy_frac",
        "Share of a GPU's board power it draws serving at its full capacity",
        "frac",
        0.86,
        1.0,  # pessimistic: the board power itself
        0.70,
        "ML.ENERGY Benchmark v3.0 on H100 SXM: about 600 W of 700 at batch 128 (as quoted by the vLLM semantic "
        "router's fleet-sim power model reference); never more than the board power (the TDP or TGP caps it); "
        "memory-bound decode runs well below it.",
        -1,
        moves=("power",),
        min_value=0.0,
        max_value=1.0,
        domain_reason="a share of the board power: the board caps it",
    ),
    AssumptionInfo(
        "node_power_draw_frac",
        "Share of a node's non-GPU power rating (CPUs, memory, NICs, fans) it draws in service",
        "frac",
        0.43,
        1.0,  # pessimistic: the rating
        0.35,
        "MLPerf Inference power runs (validation/power_measured.csv), with the GPUs at their cap: 8x H200 at 500 W, "
        "Llama-2-70B Offline, 6,153 W at the wall, 2,153 W beyond the GPUs, 0.47 of the DGX H200 rating's 4,600 W "
        "non-GPU share; 8x B200 air-cooled at 1,000 W, 10,401 W, 2,401 W, 0.38 of the DGX B200's 6,300 W. The "
        "rating itself is the pessimistic end.",
        -1,
        moves=("power",),
        min_value=0.0,
        max_value=1.0,
        domain_reason="a share of the rating",
    ),
    AssumptionInfo(
        "kv_transfer_eff",
        "Achieved KV-cache transfer bandwidth between a prefill and a decode instance / link peak (per direction)",
        "frac",
        0.70,
        0.35,
        0.87,
        "Mooncake Transfer Engine benchmarks (kvcache-ai/Mooncake docs): 87 GB/s of 100 GB/s over 4 x 200 Gbps "
        "RoCE, 168-172 GB/s of 200 GB/s over 8 EFA devices tuned and 69.5 GB/s with default slices (35 %); the base "
        "sits between the default and the tuned figures.",
        +1,
        moves=("serving_speed",),
        min_value=0.01,
        max_value=1.0,
        domain_reason="achieved / link peak: never above the peak",
    ),
    AssumptionInfo(
        "kv_transfer_setup_us",
        "Fixed cost of one KV-cache transfer beyond the wire (block tables to the peer, completion back)",
        "us",
        500.0,
        1500.0,
        150.0,
        "Engineering estimate: vLLM's NixlConnector and MooncakeConnector exchange block ids and a completion "
        "notice per request over a side channel (a round trip of a few hundred microseconds) before and after the "
        "RDMA reads; Splitwise reports 5-8 ms left un-overlapped per request for 70B-class KV (arXiv 2311.18677).",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=1e6,
        domain_reason="from nothing to a second per transfer",
    ),
)

REGISTRY: MappingProxyType[str, AssumptionInfo] = MappingProxyType(
    {a.name: a for a in (*_INFOS, *ADAPTER_ASSUMPTIONS, *FRONT_END_ASSUMPTIONS)}
)


def _field(name: str):
    """The pydantic field of one assumption: its base as default, its domain as the constraint."""
    i = REGISTRY[name]
    return Field(i.base, ge=i.min_value, le=i.max_value, allow_inf_nan=False, description=i.label)


def by_tag(*tags: str) -> tuple[str, ...]:
    """Names of the assumptions that can move any of ``tags`` (registry order)."""
    unknown = set(tags) - set(MOVES)
    if unknown:
        raise ValueError(f"unknown tag(s) {sorted(unknown)}; known: {', '.join(MOVES)}")
    return tuple(n for n, i in REGISTRY.items() if set(i.moves) & set(tags))


class Assumptions(BaseModel):
    """The values in force for every efficiency assumption (frozen, hashable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_mem_util: float = _field("gpu_mem_util")
    runtime_overhead_gib: float = _field("runtime_overhead_gib")
    cuda_graph_gib: float = _field("cuda_graph_gib")
    mbu: float = _field("mbu")
    fp8_stream_eff: float = _field("fp8_stream_eff")
    kv_read_bw_eff: float = _field("kv_read_bw_eff")
    rocm_attn_bw_eff: float = _field("rocm_attn_bw_eff")
    mfu_max: float = _field("mfu_max")
    mfu_ramp_tokens: float = _field("mfu_ramp_tokens")
    gemm_k0_ridge: float = _field("gemm_k0_ridge")
    fp8_speedup: float = _field("fp8_speedup")
    fp4_speedup: float = _field("fp4_speedup")
    comm_bw_eff: float = _field("comm_bw_eff")
    collective_base_us: float = _field("collective_base_us")
    custom_ar_base_us: float = _field("custom_ar_base_us")
    comm_overlap: float = _field("comm_overlap")
    nvls_bw_share: float = _field("nvls_bw_share")
    step_overhead_ms: float = _field("step_overhead_ms")
    graph_launch_us: float = _field("graph_launch_us")
    eager_launch_us: float = _field("eager_launch_us")
    seq_overhead_us: float = _field("seq_overhead_us")
    sample_bytes_per_vocab: float = _field("sample_bytes_per_vocab")
    mfu_train: float = _field("mfu_train")
    dp_overlap: float = _field("dp_overlap")
    failure_rate_per_gpu_hour: float = _field("failure_rate_per_gpu_hour")
    checkpoint_write_s: float = _field("checkpoint_write_s")
    restart_s: float = _field("restart_s")
    eagle_draft_frac: float = _field("eagle_draft_frac")
    ngram_draft_us: float = _field("ngram_draft_us")
    tp_overlap_train: float = _field("tp_overlap_train")
    lora_flop_per_param: float = _field("lora_flop_per_param")
    qlora_slowdown: float = _field("qlora_slowdown")
    attn_eff: float = _field("attn_eff")
    attn_eff_legacy: float = _field("attn_eff_legacy")
    vae_conv_eff: float = _field("vae_conv_eff")
    offload_gb_per_s: float = _field("offload_gb_per_s")
    lora_kernel_eff: float = _field("lora_kernel_eff")
    adapter_link_eff: float = _field("adapter_link_eff")
    adapter_storage_gb_per_s: float = _field("adapter_storage_gb_per_s")
    adapter_layer_load_us: float = _field("adapter_layer_load_us")
    train_mem_headroom_frac: float = _field("train_mem_headroom_frac")
    gpu_power_floor_frac: float = _field("gpu_power_floor_frac")
    gpu_power_busy_frac: float = _field("gpu_power_busy_frac")
    node_power_draw_frac: float = _field("node_power_draw_frac")
    kv_transfer_eff: float = _field("kv_transfer_eff")
    kv_transfer_setup_us: float = _field("kv_transfer_setup_us")
    api_request_ms: float = _field("api_request_ms")
    api_token_us: float = _field("api_token_us")

    @field_validator("*", mode="before")
    @classmethod
    def _a_number(cls, v: object) -> object:
        """A number, never a boolean or a text standing in for one (a link's or a file's ``"mbu": true``)."""
        return checked(v, type_problem(v))

    def at(self, bound: Literal["base", "low", "high"]) -> "Assumptions":
        """Every assumption at its base, pessimistic ("low") or optimistic ("high") bound (the registry's values)."""
        return Assumptions(**{n: getattr(i, bound) for n, i in REGISTRY.items()})

    def with_(self, **values: float) -> "Assumptions":
        """A copy with some assumptions moved, each checked against its domain (``ValueError`` naming it)."""
        return Assumptions.model_validate({**self.model_dump(), **values})
