"""The diffusion-transformer catalog (``catalogs/diffusion.toml``): video and image generators, validated on load.

Each row is one model's transformer shape, its VAE's compression and decoder, its text encoder and its sampling
defaults, with ``source`` and ``as_of`` (the file's header says what every field means). Loading is memoised
per process like the other catalogs; a bad row fails with :class:`core.catalog.CatalogError` naming the file,
the row and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import Field, model_validator

from core.catalog.tables import CATALOG_DIR, _load_table, _Row

VaeDtype = Literal["fp32", "bf16", "fp16"]


class DiffusionModel(_Row):
    """One diffusion transformer with its VAE and text encoder (frozen; counts have no unit)."""

    slug: str
    name: str
    kind: Literal["video", "image"]
    # transformer
    num_layers: int = Field(gt=0, le=1000)
    hidden_size: int = Field(gt=0, le=65_536)
    num_heads: int = Field(gt=0, le=1024)
    head_dim: int = Field(gt=0, le=1024)
    ffn_dim: int = Field(gt=0, le=1_048_576)
    mlp_matrices: Literal[2, 3] = 2
    text_attention: Literal["cross", "joint"]
    text_tokens: int = Field(ge=0, le=65_536)
    params_b: float = Field(gt=0, le=10_000)
    patch_t: int = Field(ge=1, le=16)
    patch_h: int = Field(ge=1, le=64)
    patch_w: int = Field(ge=1, le=64)
    # VAE
    vae_temporal: int = Field(ge=1, le=64)
    vae_spatial: int = Field(ge=1, le=64)
    latent_channels: int = Field(ge=1, le=1024)
    vae_decoder_channels: tuple[int, ...] = Field(min_length=1, max_length=8)
    vae_blocks_per_level: int = Field(ge=1, le=16)
    vae_conv_dims: Literal[2, 3]
    vae_temporal_up_levels: int = Field(ge=0, le=8)
    vae_chunk_latent_frames: int = Field(ge=0, le=1024)
    vae_tile_px: int = Field(ge=0, le=16_384)
    vae_params_m: float = Field(gt=0, le=100_000)
    vae_dtype: VaeDtype
    # text encoder
    text_encoder: str
    text_encoder_params_b: float = Field(ge=0, le=10_000)
    # sampling defaults
    default_steps: int = Field(ge=1, le=1000)
    guidance_passes: Literal[1, 2]
    default_height: int = Field(ge=8, le=16_384)
    default_width: int = Field(ge=8, le=16_384)
    default_frames: int = Field(ge=1, le=10_000)
    default_fps: float = Field(gt=0, le=240)
    reference_weights: Literal["fp32", "bf16", "fp16"]
    verification: Literal["V", "S", "U"] = "S"
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "DiffusionModel":
        if self.kind == "image" and (self.vae_temporal != 1 or self.default_frames != 1):
            raise ValueError("an image model has vae_temporal 1 and one frame")
        if self.vae_temporal_up_levels >= len(self.vae_decoder_channels):
            raise ValueError("vae_temporal_up_levels must be fewer than the decoder's levels")
        return self

    @property
    def attn_width(self) -> int:
        """Attention width H x d_h (query, key and value projections each map d to it)."""
        return self.num_heads * self.head_dim

    @property
    def cfg(self) -> bool:
        """True when sampling runs classifier-free guidance (two forwards per step)."""
        return self.guidance_passes == 2


class AttentionKernel(_Row):
    """Which attention kernel is written for one GPU's tensor-core generation (``slug`` is the GPU's)."""

    slug: str
    native: str
    #: True where FlashAttention-2 is that native kernel (Ampere, Ada, ROCm); False on Hopper and Blackwell.
    fa2_native: bool
    verification: Literal["V", "S", "U"] = "S"


def load_diffusion_models(path: Path | None = None) -> dict[str, DiffusionModel]:
    return _load_table(path or CATALOG_DIR / "diffusion.toml", "diffusion", DiffusionModel)


def load_attention_kernels(path: Path | None = None) -> dict[str, AttentionKernel]:
    return _load_table(path or CATALOG_DIR / "diffusion.toml", "attention_kernel", AttentionKernel)


# read-only, shared by every session thread
@lru_cache(maxsize=1)
def diffusion_models() -> Mapping[str, DiffusionModel]:
    return MappingProxyType(load_diffusion_models())


@lru_cache(maxsize=1)
def attention_kernels() -> Mapping[str, AttentionKernel]:
    return MappingProxyType(load_attention_kernels())


def attention_kernel(gpu: str) -> AttentionKernel:
    try:
        return attention_kernels()[gpu]
    except KeyError:
        raise KeyError(f"no attention-kernel row for GPU {gpu!r} in diffusion.toml") from None


def diffusion_model(slug: str) -> DiffusionModel:
    try:
        return diffusion_models()[slug]
    except KeyError:
        raise KeyError(f"unknown video model {slug!r}; known: {', '.join(sorted(diffusion_models()))}") from None
