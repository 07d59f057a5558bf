"""Catalog: the GPU, fabric, model, diffusion-model and price tables under ``catalogs/`` (validated on load), model architectures, and the engines' defaults.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.catalog.arch import (
    ModelArch,
    UnsupportedArchitecture,
    from_hf_config,
)
from core.catalog.diffusion import (
    AttentionKernel,
    DiffusionModel,
    attention_kernel,
    attention_kernels,
    diffusion_model,
    diffusion_models,
    load_attention_kernels,
    load_diffusion_models,
)
from core.catalog.engines import (
    CUDA_GRAPH_MAX_TOKENS,
    ENGINE_LABELS,
    LoraDefaults,
    apply_engine,
    engine_defaults,
    lora_defaults,
)
from core.catalog.power import (
    GpuPower,
    PowerRow,
    gpu_power,
    load_power,
    power_rows,
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
    "CatalogError",
    "DiffusionModel",
    "ENGINE_LABELS",
    "LoraDefaults",
    "lora_defaults",
    "Fabric",
    "GpuPower",
    "GpuPrice",
    "GpuSpec",
    "ModelArch",
    "PowerRow",
    "Price",
    "UnsupportedArchitecture",
    "apply_engine",
    "attention_kernel",
    "attention_kernels",
    "diffusion_model",
    "diffusion_models",
    "engine_defaults",
    "fabric",
    "fabrics",
    "from_hf_config",
    "gpu",
    "gpu_power",
    "gpu_price",
    "gpus",
    "load_attention_kernels",
    "load_diffusion_models",
    "load_fabrics",
    "load_gpus",
    "load_model_file",
    "load_models",
    "load_power",
    "load_prices",
    "model",
    "models",
    "parse_prices",
    "power_rows",
    "prices",
    "unpriced",
]
