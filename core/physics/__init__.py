"""Physics: serving and training memory (weights, KV cache, activations, optimizer state), the step model of one scheduler iteration taken apart, and the collectives.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.physics.collectives import (
    ACT_BYTES,
    Collectives,
)
from core.physics.iteration_parts import (
    IterationParts,
    iteration,
)
from core.physics.memory import (
    ServingMemory,
    dense_weight_bytes,
    expert_params_total,
    fit_problems,
    kv_bytes_per_token,
    kv_per_token_across_catalog,
    kv_shard,
    sequences_vs_context,
    serving_memory,
)
from core.physics.power import (
    energy_j_per_token,
    gpu_power_w,
    it_power_w,
    node_down_frac,
    node_power_w_per_gpu,
    replica_down_frac,
    site_power_w,
    with_spares,
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
    "ACT_BYTES",
    "Collectives",
    "IterationParts",
    "ServingMemory",
    "StepModel",
    "TrainingMemory",
    "VideoEstimate",
    "activation_bytes_per_layer",
    "dense_weight_bytes",
    "effective_peak_flop_per_s",
    "energy_j_per_token",
    "expert_params_total",
    "fit_problems",
    "gpu_power_w",
    "it_power_w",
    "iteration",
    "kv_bytes_per_token",
    "kv_per_token_across_catalog",
    "kv_shard",
    "latent_shape",
    "linear_flop_per_token",
    "lora_params",
    "node_down_frac",
    "node_power_w_per_gpu",
    "per_query_head_kv_reads",
    "replica_down_frac",
    "sequences_vs_context",
    "serving_memory",
    "site_power_w",
    "training_memory",
    "training_memory_by_zero",
    "training_memory_for",
    "training_memory_parts",
    "vae_cache_bytes",
    "vae_decode_flop",
    "video_estimate",
    "video_quick",
    "with_spares",
]
