"""The time of one video (or image) request on a diffusion transformer: one forward, the denoising steps, the text
encoder and the VAE decode.

The stages of :func:`core.physics.video.estimate` that read the GPU (its peaks, its memory bandwidth, its fabric
through :class:`core.physics.collectives.Collectives`); the formulas and symbols are :mod:`core.physics.video`'s::

    t_fwd   = t_gemm + t_att + t_ew + t_k + t_sp + t_fsdp
    t_step  = (g / c) t_fwd + t_cfg,   t_dn = s t_step
    t_video = t_te + t_dn + t_vae
"""

from __future__ import annotations

from typing import NamedTuple

from core.base import GB, US, Trace, choices, sig
from core.config import VideoDeployment
from core.physics.collectives import ACT_BYTES, Collectives
from core.physics.peak import effective_peak_flop_per_s
from core.physics.video_work import VideoSize, VideoWork, vae_decode_flop

#: Elements each token reads or writes per block outside the GEMMs and attention, in units of d and f: two
#: LayerNorms (2 x 2 d), their scale/shift modulation (2 x 2 d), two gates (2 x 2 d), two residual adds (2 x 3 d),
#: RoPE on q and k (2 x 2 d) and their norms (2 x 2 d, Wan and HunyuanVideo), the GELU over the MLP (2 f): 26 d + 2 f
#: in eager PyTorch, where each is its own kernel (diffusers' and the reference code's blocks).
ELEMENTWISE_D = 26
ELEMENTWISE_F = 2
#: Kernels one block launches in eager mode (the GEMMs, attention, and the element-wise kernels above).
KERNELS_PER_BLOCK = 24


class GpuRates(NamedTuple):
    """What one GPU of the replica sustains for this request."""

    precision: str  # the GEMMs' compute precision
    gemm_flop_per_s: float  # pi_gemm: the dense peak at that precision, at the clock a matrix kernel holds
    bf16_flop_per_s: float  # pi_bf16: the BF16 dense peak (attention, text encoder, VAE)
    memory_bytes_per_s: float  # bw: memory bandwidth at the assumptions' utilisation


class ComputeTime(NamedTuple):
    """One forward's kernels on one GPU [s]."""

    gemm_s: float
    attention_s: float
    elementwise_s: float
    launch_s: float


class CommTime(NamedTuple):
    """One forward's sequence-parallel and FSDP traffic [s]: what is exposed and what moves in all."""

    sp_comm_s: float  # exposed
    sp_total_s: float  # all of it, hidden or not
    fsdp_exposed_s: float
    gather_s: float  # FSDP's all-gathers, hidden or not


class DenoiseTime(NamedTuple):
    """A step of the replica over its batch and the whole denoising [s]."""

    forward_s: float
    cfg_comm_s: float
    step_s: float
    denoise_s: float


class EndsTime(NamedTuple):
    """The text encoder before the denoising and the VAE decode after it."""

    text_encoder_s: float
    text_encoder_bytes: float  # the encoder's BF16 weights [B]
    vae_flop: float
    vae_s: float


def gpu_rates(dep: VideoDeployment) -> GpuRates:
    """The GEMM and BF16 peaks at the clock a dense matrix kernel holds (MI300X: 0.58 of the peak's clock) and
    the memory bandwidth at the assumptions' ``mbu``."""
    g, a, v = dep.gpu, dep.assumptions, dep.request
    prec = choices.VIDEO_COMPUTE_PRECISION[v.weights]
    pi_gemm = effective_peak_flop_per_s(g, prec, a.fp8_speedup, a.fp4_speedup) * g.dense_clock_share(prec)
    pi_bf16 = g.peak_flop_per_s("bf16") * g.dense_clock_share("bf16")
    return GpuRates(prec, pi_gemm, pi_bf16, g.memory_bw_bytes_per_s * a.mbu)


def compute_time(dep: VideoDeployment, size: VideoSize, work: VideoWork, rates: GpuRates, tr: Trace) -> ComputeTime:
    """One forward's GEMMs, attention, element-wise kernels and launches on one of ``u`` sequence shards::

    t_gemm = F_lin / (u pi_gemm mfu r),  t_att = F_att / (u pi_bf16 eta),  t_ew = L s_l (26 d + 2 f) 2 B / bw,
    t_k = L k t_launch   (r: the GEMM efficiency's ramp over the s_l tokens one GPU holds)
    """
    m, a, v = dep.model, dep.assumptions, dep.request
    L, d, f_mlp, u = m.num_layers, m.hidden_size, m.ffn_dim, size.sp_degree
    local = size.local_tokens
    lin, attn = work.linear_flop_per_pass, work.attn_flop_per_pass
    ramp = local / (local + a.mfu_ramp_tokens)
    t_gemm = tr.step(
        "gemm_s",
        "GEMM time per forward",
        "t_{gemm}",
        "F_lin / (u * pi * mfu * r)",
        lin / (u * rates.gemm_flop_per_s * a.mfu_max * ramp),
        unit="s",
        F_lin=lin,
        u=u,
        pi=rates.gemm_flop_per_s,
        mfu=a.mfu_max,
        r=ramp,
        units={"F_lin": "FLOP", "pi": "FLOP/s"},
        note=f"{rates.precision.upper()} GEMMs at the efficiency ceiling mfu_max, {local:,} tokens per GPU (ramp r)",
    )
    legacy = v.attention == "fa2" and not dep.kernel.fa2_native
    eta = a.attn_eff_legacy if legacy else a.attn_eff
    t_attn = tr.step(
        "attention_s",
        "Attention time per forward",
        "t_{att}",
        "F_att / (u * pi * eta)",
        attn / (u * rates.bf16_flop_per_s * eta),
        unit="s",
        F_att=attn,
        u=u,
        pi=rates.bf16_flop_per_s,
        eta=eta,
        units={"F_att": "FLOP", "pi": "FLOP/s"},
        note="FlashAttention-2 on a GPU it was not written for (attn_eff_legacy)"
        if legacy
        else f"BF16 attention, {dep.kernel.native} (attn_eff)",
    )
    elem_bytes = L * local * (ELEMENTWISE_D * d + ELEMENTWISE_F * f_mlp) * ACT_BYTES
    bw = rates.memory_bytes_per_s
    t_elem = tr.step(
        "elementwise_s",
        "Element-wise time per forward",
        "t_{ew}",
        "L * s_l * (26 * d + 2 * f) * 2 / bw",
        elem_bytes / bw,
        unit="s",
        L=L,
        s_l=local,
        d=d,
        f=f_mlp,
        bw=bw,
        units={"bw": "B/s"},
        note="norms, modulation, gates, residuals, RoPE and GELU as separate memory-bound kernels",
    )
    t_launch = tr.step(
        "launch_s",
        "Kernel launches per forward",
        "t_{k}",
        "L * k * t_l",
        L * KERNELS_PER_BLOCK * a.eager_launch_us * US,
        unit="s",
        L=L,
        k=KERNELS_PER_BLOCK,
        t_l=a.eager_launch_us * US,
        units={"t_l": "s"},
    )
    return ComputeTime(t_gemm, t_attn, t_elem, t_launch)


def _sp_time(
    dep: VideoDeployment, size: VideoSize, coll: Collectives, attention_s: float, tr: Trace
) -> tuple[float, float]:
    """Sequence parallelism's traffic of one forward: (exposed, all) [s].

    Ulysses: ``4 L all-to-all((S/u) b a 2 B, u)``, all exposed (q, k, v and the output change layout). Ring:
    ``L (u - 1) max(0, p2p(2 (S/u) b a 2 B) - t_att / (L u))``, each hop hidden behind one block's attention."""
    m, v = dep.model, dep.request
    L, att, u = m.num_layers, m.attn_width, size.sp_degree
    if u > 1 and v.sp == "ulysses":
        msg = size.local_tokens * att * ACT_BYTES
        one = float(coll.all_to_all_s(msg, u))
        sp_total = 4 * L * one
        t_sp = tr.step(
            "sp_comm_s",
            "Ulysses all-to-alls per forward",
            "t_{sp}",
            "4 * L * t_a2a",
            sp_total,
            unit="s",
            L=L,
            t_a2a=one,
            units={"t_a2a": "s"},
            note=f"q, k, v and the output switch between sequence and head shards: {sig(msg / 1e6)} MB per GPU each",
        )
        return t_sp, sp_total
    if u > 1:
        msg = 2 * size.local_tokens * att * ACT_BYTES
        hop = float(coll.p2p_s(msg, cross_node=coll.spans_nodes(u)))
        block = attention_s / (L * u)
        t_sp = tr.step(
            "sp_comm_s",
            "Ring attention exposed per forward",
            "t_{sp}",
            "L * (u - 1) * max(0, t_hop - t_blk)",
            L * (u - 1) * max(0.0, hop - block),
            unit="s",
            L=L,
            u=u,
            t_hop=hop,
            t_blk=block,
            units={"t_hop": "s", "t_blk": "s"},
            note=f"each hop passes a {sig(msg / 1e6)} MB key/value block while one query block attends",
        )
        return t_sp, L * (u - 1) * hop
    return 0.0, 0.0


def _fsdp_time(
    dep: VideoDeployment, size: VideoSize, coll: Collectives, compute_s: float, tr: Trace
) -> tuple[float, float]:
    """FSDP's weight gathers of one forward: (exposed, all) [s]: ``max(0, t_ag - t_compute)``, every block's
    weights gathered once and prefetched behind the compute."""
    m, v = dep.model, dep.request
    if not (v.fsdp and size.gpus > 1):
        return 0.0, 0.0
    w_bytes = choices.VIDEO_WEIGHT_BYTES[v.weights]
    gather = float(coll.all_gather_s(m.params_b * 1e9 * min(w_bytes, 2.0), size.gpus))
    t_fsdp = tr.step(
        "fsdp_exposed_s",
        "FSDP weight gathers exposed per forward",
        "t_{fsdp}",
        "max(0, t_ag - t_c)",
        max(0.0, gather - compute_s),
        unit="s",
        t_ag=gather,
        t_c=compute_s,
        units={"t_ag": "s", "t_c": "s"},
        note="every block's weights gathered once per forward, prefetched behind the compute",
    )
    return t_fsdp, gather


def comm_time(dep: VideoDeployment, size: VideoSize, coll: Collectives, compute: ComputeTime, tr: Trace) -> CommTime:
    """One forward's sequence-parallel and FSDP traffic (:func:`_sp_time`, :func:`_fsdp_time`)."""
    t_sp, sp_total = _sp_time(dep, size, coll, compute.attention_s, tr)
    busy = compute.gemm_s + compute.attention_s + compute.elementwise_s
    t_fsdp, gather = _fsdp_time(dep, size, coll, busy, tr)
    return CommTime(t_sp, sp_total, t_fsdp, gather)


def denoise_time(
    dep: VideoDeployment, size: VideoSize, coll: Collectives, compute: ComputeTime, comm: CommTime, tr: Trace
) -> DenoiseTime:
    """One forward, one step (``g / c`` forwards one after the other, plus the all-gather of the noise prediction
    when the guidance passes run on two GPU halves) and the ``s`` steps of the denoising."""
    m, v = dep.model, dep.request
    passes, c, b = size.passes, size.cfg_degree, size.batch
    t_gemm, t_attn, t_elem, t_launch = compute
    t_fwd = tr.step(
        "forward_s",
        "One forward",
        "t_{fwd}",
        "t_gemm + t_att + t_ew + t_k + t_sp + t_fsdp",
        t_gemm + t_attn + t_elem + t_launch + comm.sp_comm_s + comm.fsdp_exposed_s,
        unit="s",
        t_gemm=t_gemm,
        t_att=t_attn,
        t_ew=t_elem,
        t_k=t_launch,
        t_sp=comm.sp_comm_s,
        t_fsdp=comm.fsdp_exposed_s,
    )
    lat_bytes = m.latent_channels * size.latent_frames * size.latent_height * size.latent_width * 4.0 * b
    t_cfg = float(coll.all_gather_s(lat_bytes, 2)) if c == 2 else 0.0
    step = tr.step(
        "step_s",
        "Denoising step",
        "t_{step}",
        "g / c * t_fwd + t_cfg",
        passes / c * t_fwd + t_cfg,
        unit="s",
        g=passes,
        c=c,
        t_fwd=t_fwd,
        t_cfg=t_cfg,
        units={"t_cfg": "s"},
        note="the two guidance passes side by side on two GPU halves"
        if c == 2
        else f"{passes} forward(s) one after the other",
    )
    denoise = tr.step(
        "denoise_s",
        "Denoising",
        "t_{dn}",
        "s * t_step",
        v.steps * step,
        unit="s",
        s=v.steps,
        t_step=step,
    )
    return DenoiseTime(t_fwd, t_cfg, step, denoise)


def ends_time(dep: VideoDeployment, size: VideoSize, rates: GpuRates, tr: Trace) -> EndsTime:
    """The text encoder (once per prompt and once per negative prompt, compute- or weight-bound, plus its move
    from CPU memory when offloaded) and the VAE decode on one GPU (FP32 convolutions on TF32 tensor cores at half
    the BF16 rate)."""
    m, a, v = dep.model, dep.assumptions, dep.request
    b, passes, T = size.batch, size.passes, m.text_tokens
    pi_bf16, bw = rates.bf16_flop_per_s, rates.memory_bytes_per_s
    te_bytes = m.text_encoder_params_b * 1e9 * 2.0
    te_flop = 2.0 * m.text_encoder_params_b * 1e9 * T
    offload = v.text_encoder == "offload"
    te_move = te_bytes / (a.offload_gb_per_s * GB) if offload else 0.0
    t_te = tr.step(
        "text_encoder_s",
        "Text encoder",
        "t_{te}",
        "b * g * max(F_te / (pi * mfu), W_te / bw) + t_load",
        b * passes * max(te_flop / (pi_bf16 * a.mfu_max), te_bytes / bw) + te_move,
        unit="s",
        b=b,
        g=passes,
        F_te=te_flop,
        pi=pi_bf16,
        mfu=a.mfu_max,
        W_te=te_bytes,
        bw=bw,
        t_load=te_move,
        units={"F_te": "FLOP", "pi": "FLOP/s", "W_te": "B", "bw": "B/s", "t_load": "s"},
        note=(f"{m.text_encoder}, once per prompt" + (" and once for the negative prompt" if passes == 2 else ""))
        + (", moved from CPU memory for each request" if offload else ", resident"),
    )
    vae_flop = vae_decode_flop(m, size.frames, v.height, v.width)
    pi_vae = pi_bf16 * (0.5 if m.vae_dtype == "fp32" else 1.0)
    t_vae = tr.step(
        "vae_s",
        "VAE decode",
        "t_{vae}",
        "b * F_vae / (pi * eta)",
        b * vae_flop / (pi_vae * a.vae_conv_eff),
        unit="s",
        b=b,
        F_vae=vae_flop,
        pi=pi_vae,
        eta=a.vae_conv_eff,
        units={"F_vae": "FLOP", "pi": "FLOP/s"},
        note=f"{m.vae_dtype.upper()} convolutions"
        + (" on TF32 tensor cores (half the BF16 rate)" if m.vae_dtype == "fp32" else "")
        + ", on one GPU",
    )
    return EndsTime(t_te, te_bytes, vae_flop, t_vae)


def video_time(ends: EndsTime, denoise: DenoiseTime, batch: int, tr: Trace) -> float:
    """Prompt to decoded video [s]: ``t_te + t_dn + t_vae`` (every video of a batch finishes together)."""
    return tr.step(
        "video_s",
        "Time per video",
        "t_{video}",
        "t_te + t_dn + t_vae",
        ends.text_encoder_s + denoise.denoise_s + ends.vae_s,
        unit="s",
        t_te=ends.text_encoder_s,
        t_dn=denoise.denoise_s,
        t_vae=ends.vae_s,
        note=f"every video of the batch of {batch} finishes together" if batch > 1 else "",
    )
