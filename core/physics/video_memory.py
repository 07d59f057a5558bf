"""The memory of one video (or image) request on the busiest GPU of its replica.

The transformer's weights (``/G`` with FSDP, plus the blocks gathered ahead), the text encoder (resident) and the
VAE's, plus the larger of one forward's activations and the VAE decode's working set (only one runs at a time),
plus the runtime overhead. No KV cache: every step recomputes attention over the whole latent. The symbols are
:mod:`core.physics.video`'s.
"""

from __future__ import annotations

from typing import NamedTuple

from core.base import GB, GiB, Trace, choices, sig
from core.catalog import DiffusionModel
from core.config import VideoDeployment
from core.physics.collectives import ACT_BYTES
from core.physics.video_work import VideoSize

#: Tensors of the finest decoder level alive at once in the VAE decode: a block's input, its output and the
#: residual (the convolution's workspace is small beside them).
VAE_LIVE_TENSORS = 3
#: Frames a causal 3x3x3 convolution keeps from the previous chunk (its temporal kernel minus one; Wan's CACHE_T).
VAE_CACHE_FRAMES = 2
#: Blocks FSDP gathers ahead of the one computing (PyTorch FSDP's default forward prefetch of one).
FSDP_PREFETCH_BLOCKS = 2
#: Bytes per element of each VAE / text-encoder dtype.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


class VideoMemory(NamedTuple):
    """Bytes on the busiest GPU [B], and whether they fit."""

    weights_bytes_per_gpu: float
    text_encoder_bytes_per_gpu: float
    vae_weights_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    vae_decode_bytes: float
    overhead_bytes_per_gpu: float
    memory_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    fits: bool
    reason: str


def vae_cache_bytes(m: DiffusionModel, height: int, width: int) -> float:
    r"""What a chunked causal decode keeps between chunks [B]: every 3D convolution's last ``k_t - 1 = 2`` input
    frames (:data:`VAE_CACHE_FRAMES`), at each level's channels and resolution.

    .. math:: \sum_i 2 n_b \cdot 2 \cdot c_i \frac{H W}{4^{n - 1 - i}} b_v

    Wan2.1 at 720 x 1280 in FP32: 7.7 GB (the finest level alone 4.2 GB). A 2D VAE keeps nothing.
    """
    if m.vae_conv_dims != 3:
        return 0.0
    n = len(m.vae_decoder_channels)
    per_elem = DTYPE_BYTES[m.vae_dtype]
    return sum(
        2 * m.vae_blocks_per_level * VAE_CACHE_FRAMES * c * height * width / 4 ** (n - 1 - i) * per_elem
        for i, c in enumerate(m.vae_decoder_channels)
    )


def _weights_bytes(dep: VideoDeployment, size: VideoSize, text_encoder_bytes: float, tr: Trace) -> tuple[float, float]:
    """The transformer's weights per GPU (``P b_w / n``, plus :data:`FSDP_PREFETCH_BLOCKS` gathered blocks when
    sharded over ``n = G`` GPUs) and the text encoder's (none when offloaded) [B]."""
    m, v = dep.model, dep.request
    G, L = size.gpus, m.num_layers
    w_bytes = choices.VIDEO_WEIGHT_BYTES[v.weights]
    shard = G if (v.fsdp and G > 1) else 1
    block_bytes = m.params_b * 1e9 / L * min(w_bytes, 2.0)
    weights = tr.step(
        "weights_bytes_per_gpu",
        "Transformer weights per GPU",
        "W",
        "P * b_w / n + y * k * P / L * b_c",
        m.params_b * 1e9 * w_bytes / shard + (FSDP_PREFETCH_BLOCKS * block_bytes if shard > 1 else 0.0),
        unit="B",
        P=m.params_b * 1e9,
        b_w=w_bytes,
        n=shard,
        y=1 if shard > 1 else 0,
        k=FSDP_PREFETCH_BLOCKS,
        L=L,
        b_c=min(w_bytes, 2.0),
        units={"P": "", "b_w": "B", "b_c": "B"},
        note=f"{v.weights.upper()} weights" + (f", sharded over {G} GPUs (FSDP)" if shard > 1 else ", replicated"),
    )
    offload = v.text_encoder == "offload"
    te_mem = tr.step(
        "text_encoder_bytes_per_gpu",
        "Text encoder weights",
        "W_{te}",
        "r * W_te / n",
        (0.0 if offload else text_encoder_bytes / shard),
        unit="B",
        r=0 if offload else 1,
        W_te=text_encoder_bytes,
        n=shard,
        note="offloaded to CPU memory between prompts" if offload else "resident on the GPU",
    )
    return weights, te_mem


def _activation_bytes(dep: VideoDeployment, size: VideoSize, tr: Trace) -> float:
    """One block's live tensors of one forward over the ``s_l`` tokens one GPU holds, plus ring attention's
    key/value buffer [B]: ``s_l (2 d + 4 a + 2 f) 2 B + A_ring``."""
    m, v = dep.model, dep.request
    d, att, f_mlp, u, local = m.hidden_size, m.attn_width, m.ffn_dim, size.sp_degree, size.local_tokens
    act_per_token = (2 * d + 4 * att + 2 * f_mlp) * ACT_BYTES
    ring_buf = 2 * local * att * ACT_BYTES if (u > 1 and v.sp == "ring") else 0.0
    return tr.step(
        "activation_bytes_per_gpu",
        "Activations of one forward",
        "A",
        "s_l * (2 * d + 4 * a + 2 * f) * 2 + A_ring",
        local * act_per_token + ring_buf,
        unit="B",
        s_l=local,
        d=d,
        a=att,
        f=f_mlp,
        A_ring=ring_buf,
        units={"A_ring": "B"},
        note="one block's live tensors: residual, normed input, q/k/v, attention output, MLP hidden and its "
        "GELU (no KV cache, no autograd)",
    )


def _vae_decode_bytes(dep: VideoDeployment, size: VideoSize, tr: Trace) -> float:
    """The VAE decode's working set [B]: :data:`VAE_LIVE_TENSORS` tensors of the finest level over a chunk of
    frames (the whole clip when the model decodes it at once) in tiles, plus the causal convolutions' cache of the
    frames before the chunk (:func:`vae_cache_bytes`)."""
    m, v = dep.model, dep.request
    frames = size.frames
    chunk_frames = frames if m.vae_chunk_latent_frames == 0 else min(frames, m.vae_chunk_latent_frames * m.vae_temporal)
    th = min(v.height, m.vae_tile_px) if m.vae_tile_px else v.height
    tw = min(v.width, m.vae_tile_px) if m.vae_tile_px else v.width
    cache = vae_cache_bytes(m, th, tw) if chunk_frames < frames else 0.0
    return tr.step(
        "vae_decode_bytes",
        "VAE decode working set",
        "A_{vae}",
        "n_t * c * F_c * h * w * b_v + K",
        VAE_LIVE_TENSORS * m.vae_decoder_channels[-1] * chunk_frames * th * tw * DTYPE_BYTES[m.vae_dtype] + cache,
        unit="B",
        n_t=VAE_LIVE_TENSORS,
        c=m.vae_decoder_channels[-1],
        F_c=chunk_frames,
        h=th,
        w=tw,
        b_v=DTYPE_BYTES[m.vae_dtype],
        K=cache,
        units={"K": "B"},
        note="the finest decoder level, "
        + (f"{chunk_frames} frames at a time" if chunk_frames < frames else "the whole clip")
        + (f" in {m.vae_tile_px}-pixel tiles" if m.vae_tile_px else "")
        + (", plus every causal convolution's cache of the frames before the chunk (K)" if cache else ""),
    )


def video_memory(dep: VideoDeployment, size: VideoSize, text_encoder_bytes: float, tr: Trace) -> VideoMemory:
    """Memory of the busiest GPU: ``M = W + W_te + W_vae + max(A, A_vae) + O`` (the denoising and the decode do not
    overlap, so the larger working set counts), against the GPU's capacity."""
    m, a, g = dep.model, dep.assumptions, dep.gpu
    weights, te_mem = _weights_bytes(dep, size, text_encoder_bytes, tr)
    vae_w = m.vae_params_m * 1e6 * DTYPE_BYTES[m.vae_dtype]
    act = _activation_bytes(dep, size, tr)
    vae_act = _vae_decode_bytes(dep, size, tr)
    overhead = a.runtime_overhead_gib * GiB
    total = tr.step(
        "memory_bytes_per_gpu",
        "Memory per GPU",
        "M",
        "W + W_te + W_vae + max(A, A_vae) + O",
        weights + te_mem + vae_w + max(act, vae_act) + overhead,
        unit="B",
        W=weights,
        W_te=te_mem,
        W_vae=vae_w,
        A=act,
        A_vae=vae_act,
        O=overhead,
        units={"W_vae": "B", "O": "B"},
        note="the denoising and the decode do not overlap, so the larger working set counts",
    )
    cap = g.memory_bytes
    fits = total <= cap
    reason = (
        f"fits: {sig(total / GB)} GB of {sig(cap / GB)} GB per GPU"
        if fits
        else f"does not fit: {sig(total / GB)} GB needed per GPU, {sig(cap / GB)} GB available"
    )
    return VideoMemory(weights, te_mem, vae_w, act, vae_act, overhead, total, cap, fits, reason)
