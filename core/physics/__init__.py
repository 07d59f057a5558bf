"""Physics: memory (weights, KV cache, activations), the step model of one scheduler iteration, and the collectives.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.physics.collectives import (
    ACT_BYTES,
    Collectives,
)
from core.physics.memory import (
    fit_problems,
    ServingMemory,
    TrainingMemory,
    activation_bytes_per_layer,
    expert_params_total,
    kv_bytes_per_token,
    kv_per_token_across_catalog,
    kv_shard,
    lora_params,
    sequences_vs_context,
    serving_memory,
    training_fit_options,
    training_memory,
    training_memory_by_zero,
    training_memory_for,
    training_memory_parts,
)
from core.physics.step import (
    IterationParts,
    StepModel,
    consts,
    effective_peak_flop_per_s,
    iteration,
    per_query_head_kv_reads,
    record_iteration,
    record_weights_read,
)

__all__ = [
    "fit_problems",
    "ACT_BYTES",
    "Collectives",
    "IterationParts",
    "ServingMemory",
    "StepModel",
    "TrainingMemory",
    "activation_bytes_per_layer",
    "consts",
    "effective_peak_flop_per_s",
    "expert_params_total",
    "iteration",
    "kv_bytes_per_token",
    "kv_per_token_across_catalog",
    "kv_shard",
    "lora_params",
    "per_query_head_kv_reads",
    "record_iteration",
    "record_weights_read",
    "sequences_vs_context",
    "serving_memory",
    "training_fit_options",
    "training_memory",
    "training_memory_by_zero",
    "training_memory_for",
    "training_memory_parts",
]
