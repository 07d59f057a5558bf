"""Physics: serving and training memory (weights, KV cache, activations, optimizer state), the step model of one scheduler iteration taken apart, and the collectives.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.physics.activations import (
    activation_bytes_per_layer,
)
from core.physics.adapters import (
    adapter_footprint,
    adapter_load_s,
)
from core.physics.collectives import (
    ACT_BYTES,
    Collectives,
)
from core.physics.footprint import (
    expert_params_total,
    kv_bytes_per_token,
    kv_shard,
    prefill_chunk_tokens,
)
from core.physics.gemm_shape import (
    dense_gemm_eff,
    expert_gemm_eff,
    gemm_k0,
    k_depth_eff,
    training_gemm_eff,
    training_gemm_parts,
)
from core.physics.iteration_parts import (
    IterationParts,
    iteration,
)
from core.physics.memory import (
    AdapterKvCost,
    ServingMemory,
    adapter_kv_cost,
    fit_problems,
    kv_per_token_across_catalog,
    sequences_vs_context,
    serving_memory,
)
from core.physics.peak import (
    effective_peak_flop_per_s,
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
from core.physics.read_factors import PAGED_2023_KV_SHARE, per_query_head_kv_reads
from core.physics.step import (
    StepModel,
)
from core.physics.training_footprint import (
    TrainingMemory,
    training_memory,
    training_memory_by_zero,
    training_memory_for,
    training_memory_parts,
)
from core.physics.training_state import (
    lora_params,
)
from core.physics.video import (
    VideoEstimate,
)
from core.physics.video import (
    estimate as video_estimate,
)
from core.physics.video import (
    quick as video_quick,
)
from core.physics.video_work import (
    latent_shape,
    vae_decode_flop,
)

__all__ = [
    "AdapterKvCost",
    "adapter_kv_cost",
    "adapter_footprint",
    "adapter_load_s",
    "fit_problems",
    "ACT_BYTES",
    "Collectives",
    "IterationParts",
    "ServingMemory",
    "StepModel",
    "TrainingMemory",
    "VideoEstimate",
    "activation_bytes_per_layer",
    "dense_gemm_eff",
    "effective_peak_flop_per_s",
    "energy_j_per_token",
    "expert_gemm_eff",
    "expert_params_total",
    "gemm_k0",
    "gpu_power_w",
    "it_power_w",
    "iteration",
    "k_depth_eff",
    "kv_bytes_per_token",
    "kv_per_token_across_catalog",
    "kv_shard",
    "prefill_chunk_tokens",
    "latent_shape",
    "lora_params",
    "node_down_frac",
    "node_power_w_per_gpu",
    "PAGED_2023_KV_SHARE",
    "per_query_head_kv_reads",
    "replica_down_frac",
    "sequences_vs_context",
    "serving_memory",
    "site_power_w",
    "training_memory",
    "training_memory_by_zero",
    "training_memory_for",
    "training_memory_parts",
    "training_gemm_eff",
    "training_gemm_parts",
    "vae_decode_flop",
    "video_estimate",
    "video_quick",
    "with_spares",
]
