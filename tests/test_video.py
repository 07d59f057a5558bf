"""Video generation on a diffusion transformer (core.physics.video): tokens and FLOPs derived by hand, the time's
invariants (steps, guidance, resolution), the parallel speed-up's bounds, memory, and the catalog behind them."""

from __future__ import annotations

import pytest

from core import catalog
from core.base import REGISTRY, by_tag
from core.config import RabitConfig, VideoRequest, resolve_video, video_problems
from core.physics import latent_shape, vae_decode_flop, video_estimate, video_quick
from core.serving import HIDDEN_FRAC, parallel_speedup, stops_hiding


def est(gpu: str = "h100-sxm", **video):
    return video_quick(resolve_video(RabitConfig(gpu=gpu, video={"rate_per_hour": None, **video})))


def test_wan_14b_tokens_and_flops_per_step_by_hand():
    # Wan2.1-T2V-14B at 720 x 1280, 81 frames (wan/configs/wan_t2v_14B.py: L = 40, d = 5120, 40 heads x 128 = 5120,
    # f = 13824; VAE 4 x 8 x 8; patch 1 x 2 x 2; 512 text tokens in a cross-attention; 2 passes per step):
    #   latent frames F' = (81 - 1) // 4 + 1 = 21;  latent 720 / 8 = 90 by 1280 / 8 = 160
    #   tokens N = 21 x (90 / 2) x (160 / 2) = 21 x 45 x 80 = 75,600 (Wan's own seq_len for 720p)
    #   GEMM FLOPs per token = 2 L (4 d a + 2 d f + 2 d a)  [self-attention q,k,v,o; the GELU MLP; the
    #     cross-attention's q and o] = 2 x 40 x (104,857,600 + 141,557,760 + 52,428,800) = 23,907,532,800
    #   GEMM per forward = 23,907,532,800 x 75,600 + 2 L 2 d a T [cross k, v over the text]
    #     = 1,807,409,479,680,000 + 2,147,483,648,000 = 1,809,556,963,328,000
    #   attention per forward = 4 L a N^2 + 4 L a N T = 4,682,022,912,000,000 + 31,708,938,240,000
    #     = 4,713,731,850,240,000
    #   FLOPs per step = 2 x (1.809557e15 + 4.713732e15) = 13,046,577,627,136,000
    e = est(model="wan2.1-t2v-14b", height=720, width=1280, frames=81, gpus=1)
    assert (e.latent_frames, e.latent_tokens, e.sequence_tokens) == (21, 75_600, 75_600)
    assert e.linear_flop_per_pass == 1_809_556_963_328_000
    assert e.attn_flop_per_pass == 4_713_731_850_240_000
    assert e.flop_per_step == 13_046_577_627_136_000
    assert e.flop_per_video == 50 * e.flop_per_step


def test_joint_attention_puts_the_text_in_the_sequence():
    # CogVideoX-5b at 480 x 720, 49 frames: F' = 13, tokens 13 x 30 x 45 = 17,550, plus 226 text tokens in every block
    e = est(model="cogvideox-5b", height=480, width=720, frames=49, gpus=1)
    assert (e.latent_tokens, e.sequence_tokens) == (17_550, 17_776)
    # attention over the joint sequence: 4 L a S^2 = 4 x 42 x 3072 x 17,776^2
    assert e.attn_flop_per_pass == 4 * 42 * 3072 * 17_776**2
    # an image model: one frame, FLUX at 1024^2 -> (1024 / 16)^2 = 4,096 image tokens
    f = est(model="flux.1-dev", height=1024, width=1024, frames=1, steps=28, gpus=1)
    assert (f.latent_frames, f.latent_tokens, f.sequence_tokens) == (1, 4096, 4096 + 512)


def test_seconds_times_fps_snap_to_the_causal_vae_grid():
    m = catalog.diffusion_model("wan2.1-t2v-14b")
    assert VideoRequest(seconds=5.0).num_frames(m) == 81  # 5 x 16 + 1
    assert VideoRequest(seconds=5.0, fps=24).num_frames(m) == 121  # 121 = 4 x 30 + 1
    assert VideoRequest(seconds=1.1, fps=10).num_frames(m) == 13  # 11 + 1 = 12 -> up to 13 = 4 x 3 + 1
    assert latent_shape(m, 13, 480, 832) == (4, 60, 104)


def test_doubling_the_steps_doubles_the_denoising_time():
    a, b = est(steps=25), est(steps=50)
    assert b.denoise_s == pytest.approx(2 * a.denoise_s, rel=1e-12)
    assert b.step_s == a.step_s and b.text_encoder_s == a.text_encoder_s and b.vae_s == a.vae_s


def test_guidance_distillation_halves_the_denoising_time():
    for gpus, sp in ((1, "ulysses"), (8, "ulysses"), (4, "ring")):
        cfg_, dist = est(gpus=gpus, sp=sp, guidance="cfg"), est(gpus=gpus, sp=sp, guidance="distilled")
        assert dist.passes == 1 and cfg_.passes == 2
        assert dist.denoise_s == pytest.approx(cfg_.denoise_s / 2, rel=1e-12)
        assert dist.flop_per_step == pytest.approx(cfg_.flop_per_step / 2, rel=1e-12)
    # HunyuanVideo is distilled already: its own mode is one pass
    assert est(model="hunyuanvideo", frames=129).passes == 1


def test_attention_share_rises_with_resolution():
    shares = [
        est(height=h, width=w, gpus=1).attention_share for h, w in ((240, 416), (480, 832), (720, 1280), (1088, 1920))
    ]
    assert shares == sorted(shares) and shares[0] < shares[-1]
    flops = [est(height=h, width=w, gpus=1) for h, w in ((480, 832), (720, 1280))]
    assert [e.attn_flop_per_pass / (e.attn_flop_per_pass + e.linear_flop_per_pass) for e in flops] == sorted(
        e.attn_flop_per_pass / (e.attn_flop_per_pass + e.linear_flop_per_pass) for e in flops
    )


def test_every_recorded_step_re_evaluates_to_its_value():
    for video in (
        {"gpus": 8, "sp": "ulysses", "fsdp": True},
        {"gpus": 4, "sp": "ring", "cfg_parallel": True, "text_encoder": "offload"},
        {"model": "flux.1-dev", "height": 1024, "width": 1024, "frames": 1, "steps": 28, "gpus": 1},
        {"model": "hunyuanvideo", "frames": 129, "gpus": 2, "attention": "fa2"},
    ):
        e = video_estimate(resolve_video(RabitConfig(video=video)))
        assert len(e.steps_trace) >= 20
        for s in e.steps_trace:
            assert s.evaluate() == pytest.approx(s.value, rel=1e-9, abs=1e-300), (video, s.key)
        by = {s.key: s.value for s in e.steps_trace}
        assert by["video_s"] == e.video_s and by["memory_bytes_per_gpu"] == e.memory_bytes_per_gpu


def test_speedup_never_exceeds_the_gpus_and_is_monotone_while_communication_hides():
    for cfg in (
        RabitConfig(),
        RabitConfig(video={"model": "cogvideox-2b", "height": 480, "width": 720, "frames": 49}),
        RabitConfig(gpu="l40s", video={"model": "hunyuanvideo", "frames": 129}),
        RabitConfig(gpu="a100-80gb", video={"model": "wan2.1-t2v-1.3b", "height": 480, "width": 832}),
    ):
        pts = parallel_speedup(resolve_video(cfg))
        for p in pts:
            assert 0 < p.speedup <= p.gpus * (1 + 1e-12), (cfg.video.model, p)
        for mode in dict.fromkeys(p.mode for p in pts):
            run = sorted((p for p in pts if p.mode == mode), key=lambda p: p.gpus)
            hidden = [p for p in run if p.hidden]
            # the leading counts where communication hides: more GPUs never slower
            lead = run[: next((i for i, p in enumerate(run) if not p.hidden), len(run))]
            for a, b in zip(lead, lead[1:]):
                assert b.speedup >= a.speedup, (cfg.video.model, mode, a.gpus, b.gpus)
            assert all(p.comm_s <= HIDDEN_FRAC * p.video_s for p in hidden)


def test_ring_attention_stops_hiding_when_it_leaves_the_node():
    # Wan 14B on H100: a ring hop of 2 (S/u) a 2 B hides behind one block's attention over NVLink (450 GB/s), not
    # over one 400 Gb/s NIC per GPU (50 GB/s): the first count past the 8-GPU node is exposed
    pts = parallel_speedup(resolve_video(RabitConfig()))
    assert stops_hiding(pts, "ring") == 10
    eight = next(p for p in pts if p.mode == "ring" and p.gpus == 8)
    ten = next(p for p in pts if p.mode == "ring" and p.gpus == 10)
    assert eight.comm_s == 0 and ten.comm_s > 0 and ten.speedup < eight.speedup
    # Ulysses' traffic per GPU falls as 1/u: it never dominates on these counts
    assert not any(p.comm_dominates for p in pts if p.mode == "ulysses")


def test_cfg_parallel_runs_the_two_passes_side_by_side():
    one, two = est(gpus=1), est(gpus=2, cfg_parallel=True)
    assert two.cfg_degree == 2 and two.sp_degree == 1
    # the same forward on each half, plus an all-gather of the noise prediction (16 x 21 x 90 x 160 x 4 B = 19 MB)
    assert two.forward_s == pytest.approx(one.forward_s, rel=1e-12)
    assert two.step_s == pytest.approx(one.step_s / 2 + two.cfg_comm_s, rel=1e-12)
    assert 0 < two.cfg_comm_s < 1e-3


def test_memory_terms():
    one = est(gpus=1)
    # BF16 weights replicated: 14e9 x 2 B; the umT5-XXL encoder resident in BF16: 5.68e9 x 2 B
    assert one.weights_bytes_per_gpu == 28e9 and one.text_encoder_bytes_per_gpu == pytest.approx(11.36e9)
    off = est(gpus=1, text_encoder="offload")
    assert off.text_encoder_bytes_per_gpu == 0 and off.text_encoder_s > one.text_encoder_s
    # FSDP over 8: a shard plus two blocks gathered ahead (2 x 14e9 / 40 x 2 B)
    f = est(gpus=8, fsdp=True)
    assert f.weights_bytes_per_gpu == pytest.approx(28e9 / 8 + 2 * 14e9 / 40 * 2)
    # FP32 weights (Wan's reference pipeline) double them; activations shrink with the sequence shard
    assert est(gpus=1, weights="fp32").weights_bytes_per_gpu == 56e9
    assert est(gpus=8).activation_bytes_per_gpu == pytest.approx(one.activation_bytes_per_gpu / 8)
    # the fit verdict is the total against the HBM
    assert one.fits == (one.memory_bytes_per_gpu <= one.capacity_bytes_per_gpu)
    assert not est(gpu="l4", gpus=1).fits


def test_vae_decode_flops_by_hand():
    # FLUX's 2D decoder at 1024^2: levels of 512, 512, 256, 128 channels at 128, 256, 512, 1024 px, 3 blocks of
    # two 3x3 convolutions each: sum 3 x 2 x 2 x 9 x c^2 x pixels
    m = catalog.diffusion_model("flux.1-dev")
    want = sum(108 * c * c * (1024 // 2**k) ** 2 for c, k in ((512, 3), (512, 2), (256, 1), (128, 0)))
    assert vae_decode_flop(m, 1, 1024, 1024) == pytest.approx(want)


def test_fa2_on_hopper_is_slower_but_native_on_ampere():
    h_native, h_fa2 = est(gpus=1), est(gpus=1, attention="fa2")
    a = REGISTRY
    assert h_fa2.attention_s == pytest.approx(h_native.attention_s * a["attn_eff"].base / a["attn_eff_legacy"].base)
    assert est(gpu="a100-80gb", gpus=1, attention="fa2").attention_s == est(gpu="a100-80gb", gpus=1).attention_s


def test_problems_name_the_field_and_the_fix():
    cfg = RabitConfig(video={"frames": 80, "gpus": 3, "height": 721})
    probs = dict(video_problems(cfg))
    assert "try 81" in probs["video.frames"] and "divide" in probs["video.gpus"] and "try 720" in probs["video.height"]
    distilled = RabitConfig(video={"model": "hunyuanvideo", "frames": 129, "cfg_parallel": True, "gpus": 2})
    assert "video.cfg_parallel" in dict(video_problems(distilled))
    assert video_problems(RabitConfig()) == []
    with pytest.raises(ValueError, match="unknown video model"):
        RabitConfig(video={"model": "sora"})


def test_catalog_rows_are_sourced_and_every_gpu_has_an_attention_kernel():
    for slug, m in catalog.diffusion_models().items():
        assert m.source and m.as_of, slug
        # the blocks' GEMM weights (what each token passes through) are the bulk of the published count, never more
        path = m.num_layers * (4 * m.hidden_size * m.attn_width + m.mlp_matrices * m.hidden_size * m.ffn_dim)
        assert 0.5 * m.params_b * 1e9 <= path <= 1.05 * m.params_b * 1e9, slug
        assert m.default_steps >= 1 and m.guidance_passes in (1, 2)
    assert set(catalog.attention_kernels()) == set(catalog.gpus())
    assert not catalog.attention_kernel("h100-sxm").fa2_native and catalog.attention_kernel("a100-80gb").fa2_native


def test_video_assumptions_are_in_the_registry():
    names = set(by_tag("video"))
    assert {"attn_eff", "attn_eff_legacy", "vae_conv_eff", "mfu_max", "comm_bw_eff", "offload_gb_per_s"} <= names
    assert REGISTRY["attn_eff"].low < REGISTRY["attn_eff"].base < REGISTRY["attn_eff"].high
    # a bound moves the time the right way
    lo = video_quick(resolve_video(RabitConfig(assumptions=RabitConfig().assumptions.at("low"))))
    hi = video_quick(resolve_video(RabitConfig(assumptions=RabitConfig().assumptions.at("high"))))
    assert lo.video_s > est().video_s > hi.video_s
