"""``rabit video``: one video (or image) request on a diffusion transformer: tokens, FLOPs, memory, time, queue, cost.

    rabit video --model wan2.1-t2v-14b --gpu h100-sxm --gpus 8 --height 720 --width 1280 --frames 81 --steps 50
                [--seconds S --fps F] [--guidance model|cfg|distilled] [--batch B] [--sp ulysses|ring]
                [--cfg-parallel] [--fsdp] [--weights bf16|fp16|fp32|fp8] [--text-encoder resident|offload]
                [--attention native|fa2] [--rate R [--replicas N] [--videos V] [--seed S]] [--recommend
                [--p95-target-s T]] --json

JSON keys (contract, issue 23): ``latent_tokens``, ``flop_per_step`` (one video's denoising step, every guidance
pass), ``step_s`` (one denoising step of the replica's batch), ``video_s``, ``memory_bytes_per_gpu`` (the busiest
GPU), ``fits``, and ``ranges`` (``video_s``, ``step_s``, ``denoise_s``, ``text_encoder_s``, ``vae_s``,
``memory_bytes_per_gpu``, ``attention_share``); with ``--rate`` (videos per hour): ``p95_latency_s``,
``cost_per_video_usd`` (the fleet's hourly price over the videos it serves), ``saturated``, and their ranges;
``--recommend`` adds ``recommendation`` (the cheapest GPU kind, GPUs per request and replicas meeting
``--p95-target-s`` at ``--rate``). Every flag left out takes the shared config's ``video`` group (the
``--config FILE``'s, else the defaults).
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from cli.common import (
    add_json,
    add_range_args,
    assumptions_from_args,
    config_file,
    die,
    emit,
    range_line,
    refuse_unused,
    with_ranges,
)
from core import catalog
from core.base import VIDEO_FLAG_FIELDS, choices, fmt_bytes, fmt_num, fmt_time, fmt_value, sig
from core.config import DEFAULT, RabitConfig, error_text, video_problems
from core.decision import QUEUE_KEYS, VIDEO_KEYS, recommend_video, video_report

V = DEFAULT.video
#: flag dest -> the video group's field: the numeric flags share their domains (core.base.limits), the choices and
#: switches are named as their fields
FIELD_OF = {
    "model": "model",
    **VIDEO_FLAG_FIELDS,
    **{f: f for f in ("guidance", "sp", "cfg_parallel", "fsdp", "weights", "text_encoder", "attention")},
}
FLAG_OF = {field: "--" + dest.replace("_", "-") for dest, field in FIELD_OF.items()}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "video", help="a video or image request on a diffusion transformer: memory, time per video, queue, cost"
    )
    p.add_argument("--model", choices=sorted(catalog.diffusion_models()), help=f"diffusion model (default {V.model})")
    p.add_argument("--gpu", help=f"catalog GPU slug (rabit gpus; default {DEFAULT.gpu})")
    p.add_argument("--fabric", help=f"inter-node fabric slug (default {DEFAULT.fabric})")
    p.add_argument("--gpus", type=int, help=f"GPUs per request (default {V.gpus})")
    r = p.add_argument_group("the request")
    r.add_argument("--height", type=int, help=f"pixels (default {V.height})")
    r.add_argument("--width", type=int, help=f"pixels (default {V.width})")
    r.add_argument("--frames", type=int, help=f"frames, 4k + 1 for the video VAEs (default {V.frames})")
    r.add_argument("--seconds", type=float, help="clip length [s]: frames = seconds x fps + 1 (replaces --frames)")
    r.add_argument("--fps", type=float, help="frames per second with --seconds (default: the model's)")
    r.add_argument("--steps", type=int, help=f"denoising steps (default {V.steps})")
    r.add_argument(
        "--guidance",
        choices=choices.GUIDANCES,
        help="forwards per step: the model's own (default), cfg (two) or distilled (one)",
    )
    r.add_argument("--batch", type=int, help=f"videos stepping together on one replica (default {V.batch})")
    r.add_argument("--weights", choices=choices.VIDEO_WEIGHTS, help=f"transformer weights (default {V.weights})")
    r.add_argument("--text-encoder", choices=choices.TEXT_ENCODER_PLACEMENTS, help="resident (default) or offload")
    r.add_argument("--attention", choices=choices.ATTENTION_CHOICES, help="native (default) or fa2")
    lay = p.add_argument_group("parallelism of one request")
    lay.add_argument("--sp", choices=choices.SP_MODES, help=f"sequence parallelism (default {V.sp})")
    lay.add_argument("--cfg-parallel", action="store_true", default=None, help="the two guidance passes on two halves")
    lay.add_argument("--fsdp", action="store_true", default=None, help="shard the weights over the request's GPUs")
    q = p.add_argument_group("queue and cost")
    q.add_argument(
        "--rate", type=float, help="videos per hour (Poisson); adds p95_latency_s, cost_per_video_usd, saturated"
    )
    q.add_argument("--replicas", type=int, help=f"replicas of --gpus GPUs (default {V.replicas})")
    q.add_argument("--videos", type=int, help=f"videos to simulate (default {V.num_videos})")
    q.add_argument("--seed", type=int, help=f"arrival seed (default {V.seed})")
    q.add_argument("--recommend", action="store_true", help="find the cheapest fleet for --rate at --p95-target-s")
    q.add_argument("--p95-target-s", type=float, help=f"p95 latency target [s] (default {sig(V.p95_target_s, 6)})")
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


def config_of(args: argparse.Namespace) -> RabitConfig:
    """The shared config the flags describe: ``--config FILE`` (or the defaults), each given flag on top."""
    base = config_file(args) or DEFAULT
    gpu = args.gpu or base.gpu
    if gpu not in catalog.gpus():
        die(f"rabit: error: argument --gpu: unknown GPU '{gpu}'; known: {', '.join(sorted(catalog.gpus()))}")
    fabric = args.fabric or base.fabric
    if fabric not in catalog.fabrics():
        die(
            f"rabit: error: argument --fabric: unknown fabric '{fabric}'; known: {', '.join(sorted(catalog.fabrics()))}"
        )
    video: dict[str, Any] = base.video.model_dump()
    if config_file(args) is None:
        video["rate_per_hour"] = None  # a queue only when asked for (--rate) or when the file has one
    for dest, field in FIELD_OF.items():
        value = getattr(args, dest, None)
        if value is not None:
            video[field] = value
    if args.seconds is None and args.frames is not None:
        video["seconds"] = None
    try:
        cfg = base.model_copy(update={"gpu": gpu, "fabric": fabric, "assumptions": assumptions_from_args(args)})
        cfg = RabitConfig.model_validate({**cfg.model_dump(), "video": video})
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][-1]) if e["loc"] else ""
        die(f"rabit: error: argument {FLAG_OF.get(field, '--' + field.replace('_', '-'))}: {error_text(e)}")
    probs = video_problems(cfg)
    if probs:
        field, message = probs[0]
        die(f"rabit: error: argument {FLAG_OF.get(field.removeprefix('video.'), field)}: {message}")
    return cfg


def payload_of(cfg: RabitConfig, report) -> dict[str, Any]:
    """The JSON object of one report (the page shows the same numbers from the same report)."""
    e, v = report.estimate, cfg.video
    out: dict[str, Any] = {
        "model": v.model,
        "gpu": cfg.gpu,
        "gpus": v.gpus,
        "sp": v.sp,
        "sp_degree": e.sp_degree,
        "cfg_parallel": e.cfg_degree == 2,
        "fsdp": v.fsdp,
        "height": v.height,
        "width": v.width,
        "frames": e.frames,
        "steps": v.steps,
        "passes": e.passes,
        "batch": v.batch,
        "latent_frames": e.latent_frames,
        "latent_tokens": e.latent_tokens,
        "sequence_tokens": e.sequence_tokens,
        "flop_per_step": e.flop_per_step,
        "flop_per_video": e.flop_per_video,
        "step_s": e.step_s,
        "denoise_s": e.denoise_s,
        "text_encoder_s": e.text_encoder_s,
        "vae_s": e.vae_s,
        "video_s": e.video_s,
        "attention_share": e.attention_share,
        "comm_s_per_forward": e.sp_comm_s + e.fsdp_exposed_s,
        "memory_bytes_per_gpu": e.memory_bytes_per_gpu,
        "capacity_bytes_per_gpu": e.capacity_bytes_per_gpu,
        "fits": e.fits,
        "memory_reason": e.reason,
        "cost_per_video_full_load_usd": report.cost_per_video_full_load_usd,
        "price": report.price_basis,
    }
    q = report.queue
    if q is not None:
        out.update(
            {
                "rate_per_hour": v.rate_per_hour,
                "replicas": v.replicas,
                "p50_latency_s": q.latency_s.p50,
                "p95_latency_s": q.latency_s.p95,
                "p95_wait_s": q.wait_s.p95,
                "capacity_per_hour": q.capacity_per_hour,
                "offered_load": q.offered_load,
                "utilisation": q.utilisation,
                "gpu_s_per_video": q.gpu_s_per_video,
                "usd_per_gpu_hour": q.usd_per_gpu_hour,
                "cost_per_video_usd": q.cost_per_video_usd,
                "saturated": q.saturated,
                "verdict": q.verdict,
                "saturated_inside_range": sorted(set(report.saturated_inside_range)),
            }
        )
    return out


def _fmt(key: str):
    if key.endswith("_bytes_per_gpu"):
        return fmt_bytes
    return fmt_time if key.endswith("_s") else fmt_num


def _unused(args: argparse.Namespace, cfg: RabitConfig) -> dict[str, str]:
    """The flags this run would not read, with why (refused when given: nothing is ignored silently)."""
    out: dict[str, str] = {}
    if args.seconds is not None:
        out["frames"] = "with --seconds (the clip's frames are seconds x fps + 1)"
    elif cfg.video.seconds is None:
        out["fps"] = "without --seconds (--frames sets the clip; --fps only turns --seconds into frames)"
    if cfg.video.rate_per_hour is None:
        out.update(dict.fromkeys(("replicas", "videos", "seed"), "without --rate (no queue is simulated)"))
    if not args.recommend:
        out["p95_target_s"] = "without --recommend (the target only steers the search)"
    return out


def run(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    if args.recommend and cfg.video.rate_per_hour is None:
        die("rabit: error: argument --recommend: needs --rate (videos per hour)")
    refuse_unused(args, "rabit video", _unused(args, cfg))
    report = video_report(cfg)
    payload = payload_of(cfg, report)
    with_ranges(payload, report.ranges, VIDEO_KEYS)
    if report.queue is not None:
        with_ranges(payload, report.queue_ranges, QUEUE_KEYS)
    e = report.estimate
    human = [
        f"{cfg.video.model} on {cfg.video.gpus} x {cfg.gpu} ({e.sp_degree}-way {cfg.video.sp}"
        + (", CFG parallel" if e.cfg_degree == 2 else "")
        + f"): {cfg.video.width}x{cfg.video.height}, {e.frames} frames, {cfg.video.steps} steps x {e.passes} pass(es)",
        f"  latent tokens {e.latent_tokens:,} (sequence {e.sequence_tokens:,}); {fmt_value(e.flop_per_step, 'FLOP')} per step",
        f"  time per video {fmt_time(e.video_s)}: text encoder {fmt_time(e.text_encoder_s)}, denoising "
        f"{fmt_time(e.denoise_s)} ({fmt_time(e.step_s)} a step), VAE decode {fmt_time(e.vae_s)}",
        f"  attention {e.attention_share:.0%} of the compute; memory {fmt_bytes(e.memory_bytes_per_gpu)} per GPU "
        f"({e.reason})",
    ]
    q = report.queue
    if q is not None:
        p95 = fmt_time(q.latency_s.p95) if q.latency_s.p95 is not None else "withheld (fewer than 20 videos)"
        cost = f"${sig(q.cost_per_video_usd)}" if q.cost_per_video_usd is not None else "unpriced"
        human.append(
            f"  at {sig(cfg.video.rate_per_hour, 6)} videos/h on {cfg.video.replicas} replica(s): p95 latency {p95}, "
            f"cost per video {cost}; {q.verdict}"
        )
    human += ["", "ranges (" + payload["range_basis"] + "):"]
    human += [range_line(k, report.ranges[k], _fmt(k)) for k in VIDEO_KEYS]
    if args.recommend:
        rec = recommend_video(cfg)
        payload["recommendation"] = (
            None
            if rec.pick is None
            else {
                "gpu": rec.pick.gpu,
                "gpus": rec.pick.gpus,
                "sp": rec.pick.sp,
                "cfg_parallel": rec.pick.cfg_parallel,
                "fsdp": rec.pick.fsdp,
                "replicas": rec.pick.replicas,
                "usd_per_hour": rec.pick.usd_per_hour,
                "cost_per_video_usd": rec.pick.cost_per_video_usd,
                "p95_latency_s": rec.pick.p95_latency_s,
                "video_s": rec.pick.video_s,
            }
        )
        payload["recommendation_why"] = rec.why
        payload["unpriced"] = list(rec.unpriced)
        human += ["", "recommendation: " + rec.why]
    emit(payload, args.json, "\n".join(human))
    return 0
