"""Every enumerated choice of RA-BIT, in one place: its allowed values, their labels and what they mean.

The config (:mod:`core.config`), the simulator's workload, the optimizer, the sidebar's widgets and the CLI's
``choices=`` are all built from these names, so a new weight format or scheduler is added here once. Each
choice is a ``Literal`` type (for pydantic and mypy) and a tuple of its values in display order
(``values(T)``); the default of each setting is the default of its field in :class:`core.config.RabitConfig`.

Bytes per element of each format are facts of the format, so they live here too:

* INT4 at group 128 with one FP16 scale per group: 0.5 + 2/128 = 0.5156 B per parameter.
* MXFP4: 4-bit E2M1 + one 8-bit E8M0 scale per 32: 0.5 + 1/32 = 0.53125 B (OCP MX spec v1.0).
* NVFP4: 4-bit E2M1 + one FP8 E4M3 scale per 16: 0.5 + 1/16 = 0.5625 B (NVIDIA Blackwell docs).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Literal, get_args


def values(choice: Any) -> tuple[Any, ...]:
    """The allowed values of a ``Literal`` choice (or an ``Optional`` of one), in declaration order."""
    out: list[Any] = []
    for a in get_args(choice):
        if a is type(None):
            continue
        out.extend(values(a) if get_args(a) else [a])
    return tuple(out)


# --- what runs -----------------------------------------------------------------------------------------
Phase = Literal["serve", "train"]
WeightFormat = Literal["bf16", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
KvDtype = Literal["bf16", "fp8"]
KvAlloc = Literal["paged", "contiguous"]
SpecMethod = Literal["none", "draft", "ngram", "eagle"]
TrainPrecision = Literal["bf16", "fp8"]
ZeroStage = Literal[0, 1, 2, 3]
Recompute = Literal["none", "selective", "full"]
#: How training computes attention: a fused kernel that never stores the s x s scores (FlashAttention, PyTorch
#: scaled_dot_product_attention's flash / memory-efficient backends, Transformer Engine's fused attention: what every
#: current training stack runs), or the eager softmax of Korthikanti et al. (arXiv 2205.05198) that stores them.
AttentionKernel = Literal["flash", "eager"]

#: Spellings the CLI accepts besides the canonical ones (``fp4`` is NVFP4).
WEIGHT_ALIASES = MappingProxyType({"fp4": "nvfp4"})
#: Paged-KV block sizes [tokens] (the block sizes the paged-attention kernels take; core.base.limits checks them).
BLOCK_SIZES = (8, 16, 32, 64, 128, 256)

#: Bytes per parameter by weight format, scales included.
WEIGHT_BYTES = MappingProxyType(
    {
        "bf16": 2.0,
        "fp8": 1.0,
        "int8": 1.0,
        "int4": 0.5 + 2 / 128,
        "mxfp4": 0.5 + 1 / 32,
        "nvfp4": 0.5 + 1 / 16,
    }
)
#: Bytes per cached K or V element by KV dtype.
KV_BYTES = MappingProxyType({"bf16": 2.0, "fp8": 1.0})
#: Compute precision a weight format runs its GEMMs in (weight-only INT4 dequantises to BF16).
COMPUTE_PRECISION = MappingProxyType(
    {
        "bf16": "bf16",
        "fp8": "fp8",
        "int8": "int8",
        "int4": "bf16",
        "mxfp4": "fp4",
        "nvfp4": "fp4",
    }
)

# --- how requests arrive and are scheduled (the serving simulator) --------------------------------------
Arrival = Literal["poisson", "closed"]
LengthKind = Literal["fixed", "uniform", "lognormal"]
SchedulerPolicy = Literal["chunked", "prefill_priority"]
Admission = Literal["preempt", "reserve"]
#: Serving engines whose documented scheduler defaults core.catalog.engines knows.
Engine = Literal["vllm", "sglang", "trtllm"]

ARRIVAL_LABELS = MappingProxyType({"poisson": "Poisson (open)", "closed": "closed loop"})
POLICY_LABELS = MappingProxyType({"chunked": "chunked prefill", "prefill_priority": "prefill priority"})
ADMISSION_LABELS = MappingProxyType({"preempt": "paged, preempt + recompute", "reserve": "reserve prompt + max output"})
#: How a deployment's router assigns each arriving request to a replica (core.serving.router says which production
#: router each one mimics). The default is least-outstanding: fewest requests in flight.
RouterPolicy = Literal["round-robin", "least-outstanding", "power-of-two", "prefix-affinity", "adapter-affinity"]
ROUTER_LABELS = MappingProxyType(
    {
        "round-robin": "round-robin",
        "least-outstanding": "least outstanding requests",
        "power-of-two": "power of two choices",
        "prefix-affinity": "prefix affinity",
        "adapter-affinity": "adapter affinity (multi-LoRA)",
    }
)
#: A deployment serves with every replica doing prefill and decode (aggregated), or with separate prefill and
#: decode pools and the KV cache moved between them (disaggregated).
ServingMode = Literal["aggregated", "disaggregated"]

# --- low-rank adapters served over one base (multi-LoRA: the config's ``adapters`` group) -------------------
#: The linear layers an adapter targets: the attention projections (q, k, v, o), the MLP's (gate, up, down), or
#: every linear layer of the blocks (PEFT's ``all-linear``; routed experts are left out, as in training).
LoraTargets = Literal["qkvo", "mlp", "all"]
#: The dtype adapter weights are held and computed in (vLLM ``--lora-dtype``: "auto" is the base model's dtype).
AdapterDtype = Literal["bf16", "fp16", "fp32"]
ADAPTER_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "fp32": 4.0})
LORA_TARGET_LABELS = MappingProxyType(
    {"qkvo": "attention (q, k, v, o)", "mlp": "MLP (gate, up, down)", "all": "all linear layers"}
)

# --- the Speed page's batch sweep ----------------------------------------------------------------------
#: The largest batch a throughput-against-batch sweep may reach (core.serving.default_batches), and the default:
#: four times vLLM's default max_num_seqs (256), well past where one replica stops gaining throughput.
SWEEP_BATCH_LIMITS = (64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_SWEEP_BATCH_LIMIT = 1024

# --- how a training run is sized (the Training page and ``rabit train``) ---------------------------------
#: To a deadline (``targets.deadline_days``: the smallest GPU count that finishes in time) or on a GPU budget.
TrainMode = Literal["deadline", "budget"]
TRAIN_MODE_LABELS = MappingProxyType({"deadline": "Deadline", "budget": "GPU budget"})
#: The GPU counts the deadline search may stop at (the last is the search's ceiling, core.training.MAX_GPUS).
TRAIN_SEARCH_LIMITS = (512, 4096, 16384, 32768)

# --- the next experiment: how far the workload's means may be off ------------------------------------------
#: Relative spread of the mean prompt length, output length and arrival rate (the spec's default +-30 %).
DEFAULT_WORKLOAD_SPREAD_FRAC = 0.3

# --- video generation (a diffusion transformer's request: core.config.VideoRequest) ------------------------
#: How one request's sequence is split across its GPUs: Ulysses (an all-to-all turns a sequence shard into a head
#: shard around attention; the degree must divide the heads) or ring attention (key/value blocks pass around a ring
#: while each GPU attends its query block).
SpMode = Literal["ulysses", "ring"]
#: Forwards per denoising step: the model's own mode, classifier-free guidance (a conditional and an unconditional
#: forward) or a guidance-distilled sampler (one forward, the scale an input).
Guidance = Literal["model", "cfg", "distilled"]
#: The dtype the transformer's weights are held in (FP16 runs at the BF16 rate; FP32 under BF16 autocast is what some
#: reference code does: its GEMMs run in BF16).
VideoWeights = Literal["bf16", "fp16", "fp32", "fp8"]
#: The text encoder stays on the GPU, or is moved there for each prompt and back (CPU offload).
TextEncoderPlacement = Literal["resident", "offload"]
#: The attention kernel: the one written for the GPU's tensor cores, or FlashAttention-2 whatever the GPU (what
#: many published runs used on Hopper; core.catalog.attention_kernel says where that differs).
AttentionChoice = Literal["native", "fa2"]

ATTENTION_KERNEL_LABELS = MappingProxyType(
    {"flash": "fused (FlashAttention): scores never stored", "eager": "eager: softmax scores stored"}
)
ATTENTION_LABELS = MappingProxyType({"native": "the GPU's own kernel", "fa2": "FlashAttention-2"})
SP_LABELS = MappingProxyType({"ulysses": "Ulysses (all-to-all)", "ring": "ring attention"})
GUIDANCE_LABELS = MappingProxyType(
    {"model": "the model's own", "cfg": "classifier-free (2 passes)", "distilled": "distilled (1 pass)"}
)
#: Bytes per transformer weight by video weight format, and the precision its GEMMs run in.
VIDEO_WEIGHT_BYTES = MappingProxyType({"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0})
VIDEO_COMPUTE_PRECISION = MappingProxyType({"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "fp8": "fp8"})

# --- what it costs (prices and the optimizer) ------------------------------------------------------------
PriceKind = Literal["on-demand", "spot", "reserved", "marketplace"]
PricePolicy = Literal["median", "cheapest"]

#: Formats the serving optimizer searches over (the others are sized, not searched).
SEARCH_WEIGHT_FORMATS: tuple[WeightFormat, ...] = ("bf16", "fp8", "int4", "nvfp4")
SEARCH_KV_DTYPES: tuple[KvDtype, ...] = ("bf16", "fp8")

PHASES = values(Phase)
WEIGHT_FORMATS = values(WeightFormat)
KV_DTYPES = values(KvDtype)
KV_ALLOCS = values(KvAlloc)
SPEC_METHODS = values(SpecMethod)
TRAIN_PRECISIONS = values(TrainPrecision)
ZERO_STAGES = values(ZeroStage)
RECOMPUTE_MODES = values(Recompute)
ATTENTION_KERNELS = values(AttentionKernel)
ARRIVALS = values(Arrival)
LENGTH_KINDS = values(LengthKind)
SCHEDULER_POLICIES = values(SchedulerPolicy)
ADMISSIONS = values(Admission)
ENGINES = values(Engine)
ROUTERS = values(RouterPolicy)
SERVING_MODES = values(ServingMode)
TRAIN_MODES = values(TrainMode)
PRICE_KINDS = values(PriceKind)
PRICE_POLICIES = values(PricePolicy)
SP_MODES = values(SpMode)
GUIDANCES = values(Guidance)
VIDEO_WEIGHTS = values(VideoWeights)
TEXT_ENCODER_PLACEMENTS = values(TextEncoderPlacement)
ATTENTION_CHOICES = values(AttentionChoice)
LORA_TARGETS = values(LoraTargets)
ADAPTER_DTYPES = values(AdapterDtype)
