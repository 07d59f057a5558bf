"""The work of one video (or image) request on a diffusion transformer: its latent tokens and its FLOPs.

The formulas behind :func:`core.physics.video.estimate` that depend only on the model and the request (no GPU):
the latent grid of a causal video VAE, the sequence one block attends over, the GEMM and attention FLOPs of one
forward and of one denoising step, and the VAE decode's convolution FLOPs. The symbols are
:mod:`core.physics.video`'s.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from core.base import Trace
from core.catalog import DiffusionModel
from core.config import VideoDeployment


class VideoSize(NamedTuple):
    """The request's shape: its parallel degrees and its tokens."""

    frames: int  # F, decoded frames per video
    passes: int  # g, transformer forwards per step (2 with classifier-free guidance)
    cfg_degree: int  # c, the guidance passes side by side on c GPU halves
    sp_degree: int  # u, sequence-parallel degree
    batch: int  # b, videos per request
    gpus: int  # G, the replica's GPUs
    latent_frames: int  # F'
    latent_height: int
    latent_width: int
    latent_tokens: int  # N
    sequence_tokens: int  # S
    local_tokens: int  # ceil(S / u) b, the tokens one GPU holds in one forward


class VideoWork(NamedTuple):
    """FLOPs of one forward (the whole batch) and of one video's denoising step [FLOP]."""

    linear_flop_per_pass: float
    attn_flop_per_pass: float
    flop_per_step: float


def latent_shape(m: DiffusionModel, frames: int, height: int, width: int) -> tuple[int, int, int]:
    """(latent frames, latent height, latent width) of a clip: ``(F - 1) // c_t + 1``, ``H // c_s``, ``W // c_s``."""
    f = (frames - 1) // m.vae_temporal + 1 if m.kind == "video" else 1
    return f, height // m.vae_spatial, width // m.vae_spatial


def linear_flop_per_token(m: DiffusionModel) -> float:
    """GEMM FLOPs one token costs in one forward [FLOP]: ``2 L (4 d a + m d f)`` (+ ``2 L 2 d a`` for the
    cross-attention's query and output projections)."""
    d, a = m.hidden_size, m.attn_width
    per_block = 4 * d * a + m.mlp_matrices * d * m.ffn_dim + (2 * d * a if m.text_attention == "cross" else 0)
    return 2.0 * m.num_layers * per_block


def vae_decode_flop(m: DiffusionModel, frames: int, height: int, width: int) -> float:
    """Convolution FLOPs of one VAE decode [FLOP].

    .. math:: \\sum_i n_b \\cdot 2 \\cdot 2 k c_i^2 \\cdot F_i \\frac{H W}{4^{n - 1 - i}}

    Level ``i`` of ``n`` (coarsest first) runs ``n_b`` ResNet blocks of two ``k``-tap convolutions (k = 27 in 3D,
    9 in 2D) at ``c_i`` channels over ``F_i`` frames (doubled after each of the first temporal-upsampling levels)
    at 1/2^(n-1-i) of the output's height and width. The mid-block attention, the norms and the upsampling
    convolutions are left out (under 15 % of a decoder). Wan2.1's VAE at 720 x 1280 x 81: 5.7e14 FLOP.
    """
    f_lat, _, _ = latent_shape(m, frames, height, width)
    k = 27 if m.vae_conv_dims == 3 else 9
    n = len(m.vae_decoder_channels)
    total = 0.0
    for i, c in enumerate(m.vae_decoder_channels):
        f_i = 1 + (f_lat - 1) * 2 ** min(i, m.vae_temporal_up_levels)
        pixels = height * width / 4 ** (n - 1 - i)
        total += m.vae_blocks_per_level * 2 * 2 * k * c * c * f_i * pixels
    return total


def video_size(dep: VideoDeployment, tr: Trace) -> VideoSize:
    """The latent grid and the sequence of one block: ``F' = (F - 1) // c_t + 1``,
    ``N = ceil(F' / p_t) (H // c_s // p_h) (W // c_s // p_w)``, ``S = N + T`` (joint attention) or ``N``.

    Wan2.1-T2V-14B at 720 x 1280, 81 frames: F' = 21, N = 21 x 45 x 80 = 75,600 = S (cross-attention)."""
    m, v = dep.model, dep.request
    frames = v.num_frames(m)
    T = m.text_tokens
    f_lat, h_lat, w_lat = latent_shape(m, frames, v.height, v.width)
    tr.step(
        "latent_frames",
        "Latent frames",
        "F'",
        "floor((F - 1) / c_t) + 1" if m.kind == "video" else "1 + 0 * F",
        f_lat,
        F=frames,
        c_t=m.vae_temporal,
        note=f"causal VAE: the first frame alone, then {m.vae_temporal} frames per latent frame",
    )
    n_tok = math.ceil(f_lat / m.patch_t) * (h_lat // m.patch_h) * (w_lat // m.patch_w)
    tr.step(
        "latent_tokens",
        "Latent tokens per video",
        "N",
        "ceil(F_lat / p_t) * floor(H / c_s / p_h) * floor(W / c_s / p_w)",
        n_tok,
        F_lat=f_lat,
        p_t=m.patch_t,
        H=v.height,
        W=v.width,
        c_s=m.vae_spatial,
        p_h=m.patch_h,
        p_w=m.patch_w,
        note=f"{f_lat} x {h_lat // m.patch_h} x {w_lat // m.patch_w} patches of the latent",
    )
    joint = m.text_attention == "joint"
    seq = n_tok + T if joint else n_tok
    tr.step(
        "sequence_tokens",
        "Sequence per block",
        "S",
        "N + T" if joint else "N + 0 * T",
        seq,
        N=n_tok,
        T=T,
        note="joint attention: the text tokens join every block's sequence"
        if joint
        else "cross-attention: the text is attended separately",
    )
    u, b = v.sp_degree(m), v.batch
    return VideoSize(
        frames=frames,
        passes=v.passes(m),
        cfg_degree=v.cfg_degree(m),
        sp_degree=u,
        batch=b,
        gpus=v.gpus,
        latent_frames=f_lat,
        latent_height=h_lat,
        latent_width=w_lat,
        latent_tokens=n_tok,
        sequence_tokens=seq,
        local_tokens=math.ceil(seq / u) * b,
    )


def video_work(m: DiffusionModel, size: VideoSize, tr: Trace) -> VideoWork:
    """FLOPs of one forward over the batch and of one video's denoising step (Kaplan et al. 2020 counting)::

        linear = 2 L (4 d a + m d f) S b  [+ 2 L 2 d a N b + 2 L 2 d a T b for a cross-attention's q/o and k/v]
        attn   = 4 L a S^2 b              [+ 4 L a N T b for the cross-attention]
        step   = g (linear + attn) / b

    Wan2.1-T2V-14B at 720p, 81 frames: 1.8096e15 + 4.7137e15 FLOP per forward, 1.3047e16 per step."""
    d, att, f_mlp, L, T = m.hidden_size, m.attn_width, m.ffn_dim, m.num_layers, m.text_tokens
    seq, n_tok, b, passes = size.sequence_tokens, size.latent_tokens, size.batch, size.passes
    per_token = linear_flop_per_token(m)
    cross = m.text_attention == "cross"
    lin = per_token * seq * b + (2.0 * L * 2 * d * att * T * b if cross else 0.0)
    tr.step(
        "linear_flop_per_pass",
        "GEMM FLOPs per forward",
        "F_{lin}",
        "2 * L * (4 * d * a + m * d * f + x * 2 * d * a) * S * b + x * 2 * L * 2 * d * a * T * b",
        lin,
        unit="FLOP",
        L=L,
        d=d,
        a=att,
        m=m.mlp_matrices,
        f=f_mlp,
        x=1 if cross else 0,
        S=seq,
        b=b,
        T=T,
        note="projections and MLP over every token (x = 1: the cross-attention's q/o over the video, k/v over "
        "the text)",
    )
    attn = 4.0 * L * att * seq * seq * b + (4.0 * L * att * n_tok * T * b if cross else 0.0)
    tr.step(
        "attn_flop_per_pass",
        "Attention FLOPs per forward",
        "F_{att}",
        "4 * L * a * S * S * b + x * 4 * L * a * N * T * b",
        attn,
        unit="FLOP",
        L=L,
        a=att,
        S=seq,
        b=b,
        x=1 if cross else 0,
        N=n_tok,
        T=T,
        note="full 3D attention, quadratic in the tokens (QK^T and PV)",
    )
    flop_step = tr.step(
        "flop_per_step",
        "FLOPs per denoising step (one video)",
        "F_{step}",
        "g * (F_lin + F_att) / b",
        passes * (lin + attn) / b,
        unit="FLOP",
        g=passes,
        F_lin=lin,
        F_att=attn,
        b=b,
        note="classifier-free guidance: a conditional and an unconditional forward"
        if passes == 2
        else "guidance-distilled: one forward",
    )
    return VideoWork(linear_flop_per_pass=lin, attn_flop_per_pass=attn, flop_per_step=flop_step)
