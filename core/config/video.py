"""The shared config's ``video`` group: one video (or image) generation request, and the deployment it resolves to.

:class:`VideoRequest` is what a diffusion-transformer request asks for (model, resolution, length, steps,
guidance, batch) and how it runs (GPUs per request and how they split it, weight format, text-encoder
placement), plus the queue it is sized for (videos per hour, replicas, a p95 target). It travels in the link as
``video.<field>`` like the other groups. :func:`resolve_video` looks the catalog up once (the diffusion model,
the GPU, the fabric) for the formulas in :mod:`core.physics.video`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from core.base import VIDEO_DOMAINS, Assumptions, choices, in_domain
from core.catalog import (
    AttentionKernel,
    DiffusionModel,
    Fabric,
    GpuSpec,
    attention_kernel,
    diffusion_model,
)
from core.config.deployment import fabric_of, gpu_of

if TYPE_CHECKING:
    from core.config.settings import RabitConfig


def _f(name: str, default: Any) -> Any:
    """A field with its one domain (core.base.limits.VIDEO_DOMAINS), shared with the page and the CLI."""
    d = VIDEO_DOMAINS[name]
    if default is None:
        return Field(None, ge=d.lo, le=d.hi, allow_inf_nan=False)
    return Field(default, ge=d.lo, le=d.hi, allow_inf_nan=False)


class VideoRequest(BaseModel):
    """One diffusion-transformer request and the queue it is sized for (frozen).

    Sizes in pixels and frames; ``seconds`` (when set) replaces ``frames`` with ``seconds x fps`` snapped up to the
    model's causal-VAE grid (``fps`` None: the model's own). ``guidance`` "model" runs the model's own mode.
    ``gpus`` split one request: sequence parallelism of degree ``gpus`` (``sp``), or ``gpus / 2`` with the two
    guidance passes on two halves (``cfg_parallel``). ``fsdp`` shards the weights over those GPUs (gathered layer by
    layer). ``attention`` "fa2" runs FlashAttention-2 whatever the GPU. ``rate_per_hour`` (None: no queue) arrives at ``replicas`` replicas; ``p95_target_s`` is what the
    optimizer must meet.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = "wan2.1-t2v-14b"
    height: int = _f("height", 720)
    width: int = _f("width", 1280)
    frames: int = _f("frames", 81)
    seconds: float | None = _f("seconds", None)
    fps: float | None = _f("fps", None)
    steps: int = _f("steps", 50)
    guidance: choices.Guidance = "model"
    batch: int = _f("batch", 1)
    gpus: int = _f("gpus", 8)
    sp: choices.SpMode = "ulysses"
    cfg_parallel: bool = False
    fsdp: bool = False
    weights: choices.VideoWeights = "bf16"
    text_encoder: choices.TextEncoderPlacement = "resident"
    attention: choices.AttentionChoice = "native"
    rate_per_hour: float | None = _f("rate_per_hour", 10.0)
    replicas: int = _f("replicas", 1)
    p95_target_s: float | None = _f("p95_target_s", 600.0)
    num_videos: int = _f("num_videos", 400)
    seed: int = _f("seed", 0)

    @field_validator(*VIDEO_DOMAINS, mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: ValidationInfo) -> Any:
        """Every number inside its one domain, type included (``video.<field>``, core.base.limits)."""
        return in_domain(f"video.{info.field_name}", v)

    @field_validator("model")
    @classmethod
    def _known(cls, v: str) -> str:
        try:
            diffusion_model(v)
        except KeyError as exc:  # a message naming the known slugs, as a field error
            raise ValueError(exc.args[0]) from None
        return v

    def with_(self, **changes: Any) -> "VideoRequest":
        return type(self).model_validate({**self.model_dump(), **changes})

    def num_frames(self, m: DiffusionModel) -> int:
        """Frames generated: ``frames``, or ``seconds x fps + 1`` rounded up to ``vae_temporal x k + 1`` (the causal
        VAE decodes its first latent frame to one frame and every other to ``vae_temporal``); an image model: 1.

        Wan at 16 fps, 5 s: 5 x 16 + 1 = 81 = 4 x 20 + 1 frames.
        """
        if m.kind == "image":
            return 1
        if self.seconds is None:
            return self.frames
        fps = self.fps if self.fps is not None else m.default_fps
        n = max(1, round(self.seconds * fps) + 1)
        t = m.vae_temporal
        return (math.ceil((n - 1) / t)) * t + 1

    def passes(self, m: DiffusionModel) -> int:
        """Transformer forwards per denoising step: 2 with classifier-free guidance, 1 distilled."""
        if self.guidance == "model":
            return m.guidance_passes
        return 2 if self.guidance == "cfg" else 1

    def cfg_degree(self, m: DiffusionModel) -> int:
        """GPU groups the guidance passes run on side by side: 2 with ``cfg_parallel`` and two passes, else 1."""
        return 2 if self.cfg_parallel and self.passes(m) == 2 else 1

    def sp_degree(self, m: DiffusionModel) -> int:
        """Sequence-parallel degree: the request's GPUs over the guidance groups."""
        return max(1, self.gpus // self.cfg_degree(m))


@dataclass(frozen=True, eq=False)
class VideoDeployment:
    """One video request resolved once: the diffusion model, the GPU and the fabric it runs on, the assumptions.

    Hashes and compares as the config it was resolved from, so it can key a cache.
    """

    config: RabitConfig
    model: DiffusionModel
    gpu: GpuSpec
    fabric: Fabric
    kernel: AttentionKernel

    @property
    def request(self) -> VideoRequest:
        return self.config.video

    @property
    def assumptions(self) -> Assumptions:
        return self.config.assumptions

    def __hash__(self) -> int:
        return hash(self.config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VideoDeployment) and other.config == self.config


def resolve_video(cfg: RabitConfig) -> VideoDeployment:
    """Look the request's diffusion model, the config's GPU and fabric up once."""
    return VideoDeployment(
        config=cfg,
        model=diffusion_model(cfg.video.model),
        gpu=gpu_of(cfg),
        fabric=fabric_of(cfg),
        kernel=attention_kernel(cfg.gpu),
    )


def video_problems(cfg: RabitConfig) -> list[tuple[str, str]]:
    """(``video.<field>``, message) for a request that cannot run as asked; each message says how to fix it."""
    v = cfg.video
    m = diffusion_model(v.model)
    out: list[tuple[str, str]] = []
    grid = m.vae_spatial * max(m.patch_h, m.patch_w)
    for name in ("height", "width"):
        px = getattr(v, name)
        if px % grid:
            out.append(
                (
                    f"video.{name}",
                    f"{name} {px} is not a multiple of {grid} (the VAE's {m.vae_spatial}x times the {m.patch_h}x"
                    f"{m.patch_w} patch); try {max(grid, px // grid * grid)}",
                )
            )
    if m.kind == "video" and v.seconds is None and (v.frames - 1) % m.vae_temporal:
        k = -(-(v.frames - 1) // m.vae_temporal)
        out.append(
            (
                "video.frames",
                f"{v.frames} frames is not {m.vae_temporal}k + 1 (the causal VAE's grid); try {m.vae_temporal * k + 1}",
            )
        )
    if v.cfg_parallel and v.passes(m) == 1:
        out.append(
            (
                "video.cfg_parallel",
                f"{m.name} runs one forward per step here (guidance-distilled): there is no second pass to put on "
                "other GPUs; turn CFG parallelism off",
            )
        )
    if v.cfg_parallel and v.gpus % 2:
        out.append(("video.gpus", f"CFG parallelism splits the GPUs in two halves: {v.gpus} GPUs is odd"))
    u = v.sp_degree(m)
    if v.sp == "ulysses" and m.num_heads % u:
        ok = [d for d in range(1, m.num_heads + 1) if m.num_heads % d == 0]
        out.append(
            (
                "video.gpus",
                f"Ulysses splits the {m.num_heads} attention heads: degree {u} does not divide them (degrees: "
                f"{', '.join(map(str, ok))}); use ring attention or another GPU count",
            )
        )
    return out
