"""Catalog: the GPU, fabric, model, diffusion-model and price tables under ``catalogs/`` (validated on load), model architectures, and the engines' defaults.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.catalog.arch import (
    ModelArch,
)
from core.catalog.diffusion import (
    AttentionKernel,
    DiffusionModel,
    attention_kernel,
    attention_kernels,
    diffusion_model,
    diffusion_models,
)
from core.catalog.engines import (
    CUDA_GRAPH_MAX_TOKENS,
    CUDA_GRAPH_PREFILL,
    ENGINE_LABELS,
    apply_engine,
    engine_defaults,
    kv_pool_refusal,
    lora_defaults,
    pool_vendor_note,
    rocm_attention,
)
from core.catalog.hf_config import (
    UnsupportedArchitecture,
    from_hf_config,
)
from core.catalog.power import (
    gpu_power,
    load_power,
)
from core.catalog.pricing import (
    GpuPrice,
    gpu_price,
    unpriced,
)
from core.catalog.tables import (
    CATALOG_DIR,
    CatalogError,
    Fabric,
    GpuSpec,
    Price,
    fabric,
    fabrics,
    gpu,
    gpus,
    load_fabrics,
    load_gpus,
    load_model_file,
    load_models,
    load_prices,
    model,
    models,
    parse_prices,
    prices,
)

__all__ = [
    "AttentionKernel",
    "CATALOG_DIR",
    "CUDA_GRAPH_MAX_TOKENS",
    "CUDA_GRAPH_PREFILL",
    "CatalogError",
    "DiffusionModel",
    "ENGINE_LABELS",
    "lora_defaults",
    "Fabric",
    "GpuPrice",
    "GpuSpec",
    "ModelArch",
    "Price",
    "UnsupportedArchitecture",
    "apply_engine",
    "attention_kernel",
    "attention_kernels",
    "diffusion_model",
    "diffusion_models",
    "engine_defaults",
    "rocm_attention",
    "kv_pool_refusal",
    "pool_vendor_note",
    "fabric",
    "fabrics",
    "from_hf_config",
    "gpu",
    "gpu_power",
    "gpu_price",
    "gpus",
    "load_fabrics",
    "load_gpus",
    "load_model_file",
    "load_models",
    "load_power",
    "load_prices",
    "model",
    "models",
    "parse_prices",
    "prices",
    "unpriced",
]
