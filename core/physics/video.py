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

The stages live apart: the work (tokens, FLOPs) in :mod:`core.physics.video_work`, the time in
:mod:`core.physics.video_time`, the memory in :mod:`core.physics.video_memory`; :func:`estimate` runs them in
turn and gathers one record.

Worked number (the test's hand derivation): Wan2.1-T2V-14B at 720 x 1280, 81 frames: F' = 21, N = 21 x 45 x 80 =
75,600 tokens; linear = 2 x 40 x (4 x 5120^2 + 2 x 5120 x 13824 + 2 x 5120^2) x 75,600 = 1.807e15 FLOP per forward.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Step, Trace
from core.config import VideoDeployment
from core.physics.collectives import Collectives
from core.physics.video_memory import video_memory
from core.physics.video_time import comm_time, compute_time, denoise_time, ends_time, gpu_rates, video_time
from core.physics.video_work import video_size, video_work


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


def _collectives(dep: VideoDeployment) -> Collectives:
    """The request's GPUs talk inside a node of the part's own size."""
    return Collectives.of(dep, gpus_per_node=dep.gpu.gpus_per_node)


def estimate(dep: VideoDeployment, tr: Trace | None = None) -> VideoEstimate:
    """Tokens, FLOPs, time and memory of the request ``dep.config.video`` on ``dep.gpu`` (one formula body).

    ``tr``: record the derivation (default: a fresh trace; the sweeps, the queue and the searches pass NO_TRACE).
    The stages in the order the derivation reads: the latent tokens, the FLOPs, one forward's compute and
    communication, the denoising, the text encoder and the VAE, the memory.
    """
    tr = tr if tr is not None else Trace()
    m, v = dep.model, dep.request
    size = video_size(dep, tr)
    work = video_work(m, size, tr)
    coll = _collectives(dep)
    rates = gpu_rates(dep)
    compute = compute_time(dep, size, work, rates, tr)
    comm = comm_time(dep, size, coll, compute, tr)
    denoise = denoise_time(dep, size, coll, compute, comm, tr)
    ends = ends_time(dep, size, rates, tr)
    video = video_time(ends, denoise, size.batch, tr)
    mem = video_memory(dep, size, ends.text_encoder_bytes, tr)
    busy = compute.gemm_s + compute.attention_s + compute.elementwise_s
    return VideoEstimate(
        model=m.slug,
        gpu=dep.gpu.slug,
        gpus=size.gpus,
        sp=v.sp,
        sp_degree=size.sp_degree,
        cfg_degree=size.cfg_degree,
        batch=size.batch,
        frames=size.frames,
        latent_frames=size.latent_frames,
        latent_tokens=size.latent_tokens,
        sequence_tokens=size.sequence_tokens,
        passes=size.passes,
        steps=v.steps,
        linear_flop_per_pass=work.linear_flop_per_pass,
        attn_flop_per_pass=work.attn_flop_per_pass,
        flop_per_step=work.flop_per_step,
        flop_per_video=v.steps * work.flop_per_step,
        attention_share=compute.attention_s / busy if busy > 0 else 0.0,
        gemm_s=compute.gemm_s,
        attention_s=compute.attention_s,
        elementwise_s=compute.elementwise_s,
        launch_s=compute.launch_s,
        sp_comm_s=comm.sp_comm_s,
        fsdp_exposed_s=comm.fsdp_exposed_s,
        comm_total_s=comm.sp_total_s + comm.gather_s,
        compute_s=busy,
        forward_s=denoise.forward_s,
        cfg_comm_s=denoise.cfg_comm_s,
        step_s=denoise.step_s,
        denoise_s=denoise.denoise_s,
        text_encoder_s=ends.text_encoder_s,
        vae_flop=ends.vae_flop,
        vae_s=ends.vae_s,
        video_s=video,
        **mem._asdict(),
        steps_trace=tr.frozen(),
    )


def quick(dep: VideoDeployment) -> VideoEstimate:
    """:func:`estimate` without the derivation (the sweeps, the queue and the searches)."""
    return estimate(dep, NO_TRACE)
