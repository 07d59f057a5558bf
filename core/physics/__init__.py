"""Physics: serving and training memory (weights, KV cache, activations, optimizer state), the step model of one scheduler iteration taken apart, and the collectives.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.physics.adapters import (
    AdapterFootprint,
    adapter_footprint,
    adapter_load_s,
    adapter_modules,
)
from core.physics.collectives import (
    ACT_BYTES,
    Collectives,
)
from core.physics.iteration_parts import (
    IterationParts,
    iteration,
)
from core.physics.memory import (
    AdapterKvCost,
    ServingMemory,
    adapter_kv_cost,
    dense_weight_bytes,
    expert_params_total,
    fit_problems,
    kv_bytes_per_token,
    kv_per_token_across_catalog,
    kv_shard,
    sequences_vs_context,
    serving_memory,
)
from core.physics.step import (
    StepModel,
    effective_peak_flop_per_s,
    per_query_head_kv_reads,
)
from core.physics.training_footprint import (
    TrainingMemory,
    activation_bytes_per_layer,
    lora_params,
    training_memory,
    training_memory_by_zero,
    training_memory_for,
    training_memory_parts,
)
from core.physics.video import (
    VideoEstimate,
    latent_shape,
    linear_flop_per_token,
    vae_cache_bytes,
    vae_decode_flop,
)
from core.physics.video import (
    estimate as video_estimate,
)
from core.physics.video import (
    quick as video_quick,
)

__all__ = [
    "AdapterKvCost",
    "adapter_kv_cost",
    "AdapterFootprint",
    "adapter_footprint",
    "adapter_load_s",
    "adapter_modules",
    "dense_weight_bytes",
    "fit_problems",
    "ACT_BYTES",
    "Collectives",
    "IterationParts",
    "ServingMemory",
    "StepModel",
    "TrainingMemory",
    "VideoEstimate",
    "activation_bytes_per_layer",
    "effective_peak_flop_per_s",
    "expert_params_total",
    "iteration",
    "kv_bytes_per_token",
    "kv_per_token_across_catalog",
    "kv_shard",
    "latent_shape",
    "linear_flop_per_token",
    "lora_params",
    "per_query_head_kv_reads",
    "sequences_vs_context",
    "serving_memory",
    "training_memory",
    "training_memory_by_zero",
    "training_memory_for",
    "training_memory_parts",
    "vae_cache_bytes",
    "vae_decode_flop",
    "video_estimate",
    "video_quick",
]
