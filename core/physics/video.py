"""One video (or image) request on a diffusion transformer: latent tokens, FLOPs, memory per GPU and its time.

A request is a text encoder run once, ``s`` denoising steps of ``g`` transformer forwards each (``g = 2`` with
classifier-free guidance, 1 guidance-distilled) over the whole latent, then one VAE decode. Symbols: ``L`` blocks,
``d`` hidden, ``a = H d_h`` attention width, ``f`` MLP width, ``m`` MLP matrices, ``T`` text tokens.

Latent tokens (a causal video VAE of compression ``c_t`` in time and ``c_s`` in space, patch ``p_t x p_h x p_w``)::

    F' = (F - 1) // c_t + 1,   N = ceil(F' / p_t) (H // c_s // p_h) (W // c_s // p_w)
    S  = N + T (joint attention: the text is part of every block's sequence),  S = N (cross-attention)

FLOPs of one forward, batch ``b`` (Kaplan et al. 2020 counting, 2 FLOP per multiply-add; attention is full 3D and
non-causal, so ``QK^T`` and ``PV`` cost ``2 S^2 a`` each)::

    linear = 2 L (4 d a + m d f) S b  [+ 2 L 2 d a N b + 2 L 2 d a T b for a cross-attention's q/o and k/v]
    attn   = 4 L a S^2 b              [+ 4 L a N T b for the cross-attention]

One forward on ``u``-way sequence parallelism (``G = u`` GPUs, or ``2u`` with the guidance passes on two halves)::

    t_fwd = linear / (u pi_gemm mfu) + attn / (u pi_bf16 eta_attn) + e L (S/u) b (26 d + 2 f) 2 B / (BW eta_bw)
            + L k t_launch + t_sp + max(0, t_fsdp - t_compute)
    t_sp  = Ulysses: 4 L all-to-all((S/u) b a 2 B, u)           (exposed: q, k, v and the output change layout)
            ring:    L (u - 1) max(0, p2p(2 (S/u) b a 2 B) - t_attn/(L u))   (each hop hides behind one block)
    t_step = (g / c) t_fwd + [c = 2: all-gather of the noise prediction]
    t_video = t_text + s t_step + t_vae

The VAE decodes on one GPU (the reference pipelines decode on rank 0), the text encoder runs once per prompt (and
once more for the negative prompt under classifier-free guidance). Communication times come from
:class:`core.physics.collectives.Collectives` on the GPU's scale-up fabric (the inter-node fabric beyond a node).

Memory per GPU: the transformer's weights (``/G`` with FSDP, plus two layers gathered ahead), the text encoder
(resident) and the VAE's, plus the larger of one forward's activations and the VAE decode's working set (only
one runs at a time), plus the runtime overhead. No KV cache: every step recomputes attention over the whole latent.

Worked number (the test's hand derivation): Wan2.1-T2V-14B at 720 x 1280, 81 frames: F' = 21, N = 21 x 45 x 80 =
75,600 tokens; linear = 2 x 40 x (4 x 5120^2 + 2 x 5120 x 13824 + 2 x 5120^2) x 75,600 = 1.807e15 FLOP per forward.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from core.base import GB, NO_TRACE, US, GiB, Step, Trace, choices, sig
from core.catalog import DiffusionModel
from core.config import VideoDeployment
from core.physics.collectives import ACT_BYTES, Collectives
from core.physics.peak import effective_peak_flop_per_s

#: Elements each token reads or writes per block outside the GEMMs and attention, in units of d and f: two
#: LayerNorms (2 x 2 d), their scale/shift modulation (2 x 2 d), two gates (2 x 2 d), two residual adds (2 x 3 d),
#: RoPE on q and k (2 x 2 d) and their norms (2 x 2 d, Wan and HunyuanVideo), the GELU over the MLP (2 f): 26 d + 2 f
#: in eager PyTorch, where each is its own kernel (diffusers' and the reference code's blocks).
ELEMENTWISE_D = 26
ELEMENTWISE_F = 2
#: Kernels one block launches in eager mode (the GEMMs, attention, and the element-wise kernels above).
KERNELS_PER_BLOCK = 24
#: Tensors of the finest decoder level alive at once in the VAE decode: a block's input, its output and the
#: residual (the convolution's workspace is small beside them).
VAE_LIVE_TENSORS = 3
#: Frames a causal 3x3x3 convolution keeps from the previous chunk (its temporal kernel minus one; Wan's CACHE_T).
VAE_CACHE_FRAMES = 2
#: Blocks FSDP gathers ahead of the one computing (PyTorch FSDP's default forward prefetch of one).
FSDP_PREFETCH_BLOCKS = 2
#: Bytes per element of each VAE / text-encoder dtype.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VideoEstimate(_Frozen):
    """One request (a batch of ``batch`` videos on one replica of ``gpus`` GPUs): tokens, FLOPs, time, memory.

    Times [s], FLOPs [FLOP], bytes [B]. ``flop_per_step`` is one video's denoising step (every guidance pass);
    ``step_s`` is the replica's step over its batch; ``video_s`` the time from prompt to decoded video.
    """

    model: str
    gpu: str
    gpus: int
    sp: str
    sp_degree: int
    cfg_degree: int
    batch: int
    frames: int
    latent_frames: int
    latent_tokens: int
    sequence_tokens: int
    passes: int
    steps: int
    linear_flop_per_pass: float
    attn_flop_per_pass: float
    flop_per_step: float
    flop_per_video: float
    attention_share: float  # of one forward's time on one GPU
    gemm_s: float  # one forward, one GPU
    attention_s: float
    elementwise_s: float
    launch_s: float
    sp_comm_s: float  # exposed sequence-parallel communication of one forward
    fsdp_exposed_s: float
    comm_total_s: float  # all sequence-parallel and FSDP traffic of one forward, hidden or not
    compute_s: float  # one forward's GEMMs + attention + element-wise, one GPU
    forward_s: float
    cfg_comm_s: float
    step_s: float
    denoise_s: float
    text_encoder_s: float
    vae_flop: float
    vae_s: float
    video_s: float
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
    steps_trace: tuple[Step, ...] = ()

    @property
    def comm_dominates(self) -> bool:
        """True when exposed communication takes longer than the forward's compute."""
        return self.sp_comm_s + self.fsdp_exposed_s > self.compute_s

    @property
    def time_parts(self) -> dict[str, float]:
        """The request's time by stage: text encoder, denoising, VAE decode [s]."""
        return {"text encoder": self.text_encoder_s, "denoising": self.denoise_s, "VAE decode": self.vae_s}


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


def _collectives(dep: VideoDeployment) -> Collectives:
    """The request's GPUs talk inside a node of the part's own size."""
    return Collectives.of(dep, gpus_per_node=dep.gpu.gpus_per_node)


def estimate(dep: VideoDeployment, tr: Trace | None = None) -> VideoEstimate:
    """Tokens, FLOPs, time and memory of the request ``dep.config.video`` on ``dep.gpu`` (one formula body).

    ``tr``: record the derivation (default: a fresh trace; the sweeps, the queue and the searches pass NO_TRACE).
    """
    tr = tr if tr is not None else Trace()
    m, g, a, v = dep.model, dep.gpu, dep.assumptions, dep.request
    frames = v.num_frames(m)
    passes, c, u, b = v.passes(m), v.cfg_degree(m), v.sp_degree(m), v.batch
    G = v.gpus
    d, att, f_mlp, L, T = m.hidden_size, m.attn_width, m.ffn_dim, m.num_layers, m.text_tokens

    # --- tokens ----------------------------------------------------------------------------------------------
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

    # --- FLOPs of one forward --------------------------------------------------------------------------------
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

    # --- time of one forward on one GPU --------------------------------------------------------------------------
    prec = choices.VIDEO_COMPUTE_PRECISION[v.weights]
    # a dense matrix kernel runs at the clock the part holds under it (MI300X: 0.58 of the peak's clock)
    pi_gemm = effective_peak_flop_per_s(g, prec, a.fp8_speedup, a.fp4_speedup) * g.dense_clock_share(prec)
    pi_bf16 = g.peak_flop_per_s("bf16") * g.dense_clock_share("bf16")
    local = math.ceil(seq / u) * b
    ramp = local / (local + a.mfu_ramp_tokens)
    t_gemm = tr.step(
        "gemm_s",
        "GEMM time per forward",
        "t_{gemm}",
        "F_lin / (u * pi * mfu * r)",
        lin / (u * pi_gemm * a.mfu_max * ramp),
        unit="s",
        F_lin=lin,
        u=u,
        pi=pi_gemm,
        mfu=a.mfu_max,
        r=ramp,
        units={"F_lin": "FLOP", "pi": "FLOP/s"},
        note=f"{prec.upper()} GEMMs at the efficiency ceiling mfu_max, {local:,} tokens per GPU (ramp r)",
    )
    legacy = v.attention == "fa2" and not dep.kernel.fa2_native
    eta = a.attn_eff_legacy if legacy else a.attn_eff
    t_attn = tr.step(
        "attention_s",
        "Attention time per forward",
        "t_{att}",
        "F_att / (u * pi * eta)",
        attn / (u * pi_bf16 * eta),
        unit="s",
        F_att=attn,
        u=u,
        pi=pi_bf16,
        eta=eta,
        units={"F_att": "FLOP", "pi": "FLOP/s"},
        note="FlashAttention-2 on a GPU it was not written for (attn_eff_legacy)"
        if legacy
        else f"BF16 attention, {dep.kernel.native} (attn_eff)",
    )
    elem_bytes = L * local * (ELEMENTWISE_D * d + ELEMENTWISE_F * f_mlp) * ACT_BYTES
    bw = g.memory_bw_bytes_per_s * a.mbu
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
    coll = _collectives(dep)
    if u > 1 and v.sp == "ulysses":
        msg = math.ceil(seq / u) * b * att * ACT_BYTES
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
    elif u > 1:
        msg = 2 * math.ceil(seq / u) * b * att * ACT_BYTES
        hop = float(coll.p2p_s(msg, cross_node=coll.spans_nodes(u)))
        block = t_attn / (L * u)
        sp_total = L * (u - 1) * hop
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
    else:
        sp_total = t_sp = 0.0
    compute = t_gemm + t_attn + t_elem
    w_bytes = choices.VIDEO_WEIGHT_BYTES[v.weights]
    if v.fsdp and G > 1:
        gather = float(coll.all_gather_s(m.params_b * 1e9 * min(w_bytes, 2.0), G))
        t_fsdp = tr.step(
            "fsdp_exposed_s",
            "FSDP weight gathers exposed per forward",
            "t_{fsdp}",
            "max(0, t_ag - t_c)",
            max(0.0, gather - compute),
            unit="s",
            t_ag=gather,
            t_c=compute,
            units={"t_ag": "s", "t_c": "s"},
            note="every block's weights gathered once per forward, prefetched behind the compute",
        )
    else:
        gather = t_fsdp = 0.0
    t_fwd = tr.step(
        "forward_s",
        "One forward",
        "t_{fwd}",
        "t_gemm + t_att + t_ew + t_k + t_sp + t_fsdp",
        t_gemm + t_attn + t_elem + t_launch + t_sp + t_fsdp,
        unit="s",
        t_gemm=t_gemm,
        t_att=t_attn,
        t_ew=t_elem,
        t_k=t_launch,
        t_sp=t_sp,
        t_fsdp=t_fsdp,
    )
    lat_bytes = m.latent_channels * f_lat * h_lat * w_lat * 4.0 * b
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

    # --- text encoder and VAE ---------------------------------------------------------------------------------
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
    vae_flop = vae_decode_flop(m, frames, v.height, v.width)
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
    video = tr.step(
        "video_s",
        "Time per video",
        "t_{video}",
        "t_te + t_dn + t_vae",
        t_te + denoise + t_vae,
        unit="s",
        t_te=t_te,
        t_dn=denoise,
        t_vae=t_vae,
        note=f"every video of the batch of {b} finishes together" if b > 1 else "",
    )

    # --- memory of the busiest GPU ---------------------------------------------------------------------------
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
    te_mem = tr.step(
        "text_encoder_bytes_per_gpu",
        "Text encoder weights",
        "W_{te}",
        "r * W_te / n",
        (0.0 if offload else te_bytes / shard),
        unit="B",
        r=0 if offload else 1,
        W_te=te_bytes,
        n=shard,
        note="offloaded to CPU memory between prompts" if offload else "resident on the GPU",
    )
    vae_w = m.vae_params_m * 1e6 * DTYPE_BYTES[m.vae_dtype]
    act_per_token = (2 * d + 4 * att + 2 * f_mlp) * ACT_BYTES
    ring_buf = 2 * math.ceil(seq / u) * b * att * ACT_BYTES if (u > 1 and v.sp == "ring") else 0.0
    act = tr.step(
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
    chunk_frames = frames if m.vae_chunk_latent_frames == 0 else min(frames, m.vae_chunk_latent_frames * m.vae_temporal)
    th = min(v.height, m.vae_tile_px) if m.vae_tile_px else v.height
    tw = min(v.width, m.vae_tile_px) if m.vae_tile_px else v.width
    cache = vae_cache_bytes(m, th, tw) if chunk_frames < frames else 0.0
    vae_act = tr.step(
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
    share = t_attn / compute if compute > 0 else 0.0
    return VideoEstimate(
        model=m.slug,
        gpu=g.slug,
        gpus=G,
        sp=v.sp,
        sp_degree=u,
        cfg_degree=c,
        batch=b,
        frames=frames,
        latent_frames=f_lat,
        latent_tokens=n_tok,
        sequence_tokens=seq,
        passes=passes,
        steps=v.steps,
        linear_flop_per_pass=lin,
        attn_flop_per_pass=attn,
        flop_per_step=flop_step,
        flop_per_video=v.steps * flop_step,
        attention_share=share,
        gemm_s=t_gemm,
        attention_s=t_attn,
        elementwise_s=t_elem,
        launch_s=t_launch,
        sp_comm_s=t_sp,
        fsdp_exposed_s=t_fsdp,
        comm_total_s=sp_total + gather,
        compute_s=compute,
        forward_s=t_fwd,
        cfg_comm_s=t_cfg,
        step_s=step,
        denoise_s=denoise,
        text_encoder_s=t_te,
        vae_flop=vae_flop,
        vae_s=t_vae,
        video_s=video,
        weights_bytes_per_gpu=weights,
        text_encoder_bytes_per_gpu=te_mem,
        vae_weights_bytes_per_gpu=vae_w,
        activation_bytes_per_gpu=act,
        vae_decode_bytes=vae_act,
        overhead_bytes_per_gpu=overhead,
        memory_bytes_per_gpu=total,
        capacity_bytes_per_gpu=cap,
        fits=fits,
        reason=reason,
        steps_trace=tr.frozen(),
    )


def quick(dep: VideoDeployment) -> VideoEstimate:
    """:func:`estimate` without the derivation (the sweeps, the queue and the searches)."""
    return estimate(dep, NO_TRACE)
