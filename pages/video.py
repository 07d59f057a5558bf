"""Video generation: memory, seconds per video, the parallel speed-up, the queue of minute-long jobs and their cost."""

import streamlit as st

from dashboard import cache, charts, render, state
from dashboard.api import VIDEO_ASSUMPTIONS, choices, fmt_bytes, fmt_num, fmt_sig, fmt_time, fmt_value

st.title("Video generation")
st.caption(
    "A video request is a text encoder run once, tens of denoising steps of one or two transformer forwards over "
    "the whole latent, then a VAE decode: minutes of GPU time per request, no KV cache, attention quadratic in "
    "the latent's tokens. The GPU and fabric come from the sidebar; the request lives here and in the link."
)
cfg = render.bound_choice("video", state.require_config())
E, B = state.edits, state.bounds
v = cfg.video
model = cache.diffusion_model(v.model)

with st.expander(f"The request: {model.name}, {v.width}x{v.height}, {v.gpus} x {cfg.gpu}", expanded=False):
    c1, c2, c3, c4 = st.columns(4)
    c1.selectbox("Model", cache.diffusion_models(), **E("video.model"))
    c1.button("Use the model's defaults", on_click=state.video_model_defaults, key="video.defaults")
    c2.number_input("Height [px]", **B("video.height", 16), **E("video.height"))
    c2.number_input("Width [px]", **B("video.width", 16), **E("video.width"))
    c3.number_input("Frames", **B("video.frames", 4), **E("video.frames"), disabled=model.kind == "image")
    c3.number_input("or seconds (0 = use frames)", **B("video.seconds"), **E("video.seconds"))
    c3.number_input(f"at fps (0 = the model's {fmt_sig(model.default_fps, 6)})", **B("video.fps"), **E("video.fps"))
    c4.number_input("Denoising steps", **B("video.steps"), **E("video.steps"))
    c4.selectbox("Guidance", choices.GUIDANCES, **E("video.guidance"), format_func=choices.GUIDANCE_LABELS.get)
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("GPUs per request", **B("video.gpus"), **E("video.gpus"))
    c1.number_input("Videos per batch", **B("video.batch"), **E("video.batch"))
    c2.radio("Sequence parallelism", choices.SP_MODES, **E("video.sp"), format_func=choices.SP_LABELS.get)
    c2.checkbox("CFG parallel (the two passes on two halves)", **E("video.cfg_parallel"))
    c3.checkbox("FSDP (shard the weights)", **E("video.fsdp"))
    c3.selectbox("Weights", choices.VIDEO_WEIGHTS, **E("video.weights"))
    c4.selectbox("Text encoder", choices.TEXT_ENCODER_PLACEMENTS, **E("video.text_encoder"))
    c4.selectbox(
        "Attention kernel",
        choices.ATTENTION_CHOICES,
        **E("video.attention"),
        format_func=choices.ATTENTION_LABELS.get,
    )
    for field in ("model", "height", "width", "frames", "steps", "gpus", "batch", "seconds", "fps"):
        state.field_error(f"video.{field}")

probs = cache.video_problems(cfg)
for field, message in probs:
    st.error(f"{field.removeprefix('video.')}: {message}")
if probs:
    st.stop()

rep = cache.video_report(cfg)
e, q = rep.estimate, rep.queue
rng = {**rep.ranges, **rep.queue_ranges}
cols = render.grid(3, ["Memory per GPU", "Time per video", "Cost per video"])
render.metric_range(
    cols[0],
    "Memory per GPU",
    fmt_bytes(e.memory_bytes_per_gpu),
    rng.get("memory_bytes_per_gpu"),
    fmt_bytes,
    help=e.reason,
)
cols[0].caption(("fits" if e.fits else "does not fit") + f" in {fmt_bytes(e.capacity_bytes_per_gpu)}")
render.metric_range(cols[1], "Time per video", fmt_time(e.video_s), rng.get("video_s"), fmt_time)
full = rep.cost_per_video_full_load_usd
render.metric_range(
    cols[2],
    "Cost per video",
    f"${fmt_sig(full)}" if full is not None else "unpriced",
    rng.get("cost_per_video_full_load_usd"),
    lambda x: f"${fmt_sig(x)}",
    help=f"The request's GPUs for the time of one video, kept busy. Price: {rep.price_basis}",
)
if q is not None and q.cost_per_video_usd is not None:
    cols[2].caption(
        f"at {fmt_sig(v.rate_per_hour, 6)} videos/h on {v.replicas} replica(s) of {v.gpus}: ${fmt_sig(q.cost_per_video_usd)} per "
        f"video, the fleet paid while {1 - q.utilisation:.0%} idle"
    )
if not e.fits:
    st.error(f"The request {e.reason}: shard the weights (FSDP), offload the text encoder or add GPUs.")

st.plotly_chart(cache.figure(charts.video_time_bar, e.time_parts, e.video_s), width="stretch")
render.range_metrics(e.steps_trace, ["latent_tokens", "flop_per_step", "step_s", "denoise_s"], rng)
st.caption(
    f"Attention is {e.attention_share:.0%} of the compute ({render.range_text(rng.get('attention_share'), lambda x: f'{x:.0%}')}); "
    f"{e.passes} forward(s) per step over {e.sequence_tokens:,} tokens, on {e.sp_degree}-way {v.sp}"
    + (" with the guidance passes on two halves" if e.cfg_degree == 2 else "")
    + "."
)

# lazy tabs: only the open one is computed and sent (the fleet search and the rate sweep run only when asked for)
speed, queue, fleet, memory, sens = st.tabs(
    ["Parallel speed-up", "Queue and cost", "Cheapest fleet", "Memory", "Sensitivity"],
    **state.view("video.tab"),  # its callback keeps the choice and makes the tabs rerun the page
)
if speed.open is not False:
    with speed:
        pts = cache.video_speedup(cfg)
        knees = cache.video_knees(cfg)
        st.plotly_chart(cache.figure(charts.video_speedup_chart, pts, v.gpus, knees), width="stretch")
        st.caption(
            "Ulysses moves each block's q, k, v and output through an all-to-all (its traffic per GPU falls with the "
            "GPU count; the degree must divide the heads); ring attention passes key/value blocks around while each "
            "GPU attends its own, so it hides until a hop takes longer than a block's attention, which happens once "
            "the ring leaves the node. The speed-up never exceeds the GPU count: the text encoder and the VAE do not "
            "split. "
            + "; ".join(f"{m}: communication stops hiding at {k} GPUs" for m, k in knees.items() if k is not None)
        )
if queue.open:
    with queue:
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input(
            "Videos per hour (0 = no queue)",
            **B("video.rate_per_hour", 1.0),
            **E("video.rate_per_hour"),
            format="%.4g",
        )
        c2.number_input("Replicas", **B("video.replicas"), **E("video.replicas"))
        c3.number_input("Videos simulated", **B("video.num_videos", 100), **E("video.num_videos"))
        c4.number_input("Seed", **B("video.seed"), **E("video.seed"))
        state.field_error("video.rate_per_hour")
        if q is None:
            st.info("Set a rate of videos per hour to queue them.")
        else:
            (st.error if q.saturated else st.success)(q.verdict)
            if len(set(rep.saturated_inside_range)) > 1:
                st.warning("The saturation verdict changes inside the range of the assumptions.")
            cols = render.grid(4, ["p50 latency", "p95 latency", "Utilisation", "GPU-seconds per video"])
            render.metric_range(cols[0], "p50 latency", fmt_time(q.latency_s.p50), rng.get("p50_latency_s"), fmt_time)
            p95 = q.latency_s.p95
            render.metric_range(
                cols[1],
                "p95 latency",
                fmt_time(p95) if p95 is not None else "withheld",
                rng.get("p95_latency_s"),
                fmt_time,
            )
            cols[2].metric("Utilisation", f"{q.utilisation:.0%}")
            cols[3].metric("GPU-seconds per video", fmt_num(q.gpu_s_per_video))
            st.caption(
                f"Capacity {fmt_sig(q.capacity_per_hour)} videos/h ({render.range_text(rng.get('capacity_per_hour'), fmt_num)})"
                f"; offered load {q.offered_load:.0%}; mean batch {fmt_sig(q.mean_batch, 2)}. A replica admits a request at a "
                "step boundary and every request in its batch advances one step per round: batching fills the GPUs, "
                "but a step of b videos takes about b times as long, so it buys little throughput."
            )
            sweep = cache.video_rate_sweep(cfg, (0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 1.05, 1.2))
            st.plotly_chart(
                cache.figure(charts.video_rate_chart, sweep, q.capacity_per_hour, v.rate_per_hour), width="stretch"
            )
            c1, c2 = st.columns(2)
            c1.plotly_chart(cache.figure(charts.video_timeline_chart, q.timeline), width="stretch")
            c2.plotly_chart(
                cache.figure(charts.video_progress_chart, q.progress, v.steps, q.progress_at_s), width="stretch"
            )
if fleet.open:
    with fleet:
        st.number_input("p95 latency target [s]", **B("video.p95_target_s", 60.0), **E("video.p95_target_s"))
        if not v.rate_per_hour:
            st.info("Set a rate of videos per hour on the Queue tab to size a fleet.")
        else:
            rec = cache.video_recommendation(cfg, cache.catalog_prices())
            (st.success if rec.pick else st.warning)(rec.why)
            if rec.pick is not None:
                cols = render.grid(3, ["GPUs", "Fleet cost per hour", "Fleet cost per video"])
                cols[0].metric("GPUs", f"{rec.pick.replicas} x {rec.pick.gpus} {rec.pick.gpu}")
                cols[1].metric("Fleet cost per hour", f"${rec.pick.usd_per_hour:,.2f}")
                cols[2].metric("Fleet cost per video", f"${fmt_sig(rec.pick.cost_per_video_usd)}")
            render.table(
                [
                    {
                        "fleet": o.label,
                        "$/h": round(o.usd_per_hour, 2),
                        "$/video": round(o.cost_per_video_usd, 3),
                        "p95 [s]": round(o.p95_latency_s, 1) if o.p95_latency_s is not None else None,
                        "one video [s]": round(o.video_s, 1),
                        "meets": o.meets,
                    }
                    for o in rec.options
                ],
                "fleets",
            )
            if rec.unpriced:
                st.caption(f"No {cfg.targets.price_kind} price for {', '.join(rec.unpriced)}: left out of the search.")
if memory.open:
    with memory:
        st.plotly_chart(
            cache.figure(
                charts.stacked_bar,
                [
                    ("transformer weights", e.weights_bytes_per_gpu, charts.PALETTE["weights"]),
                    ("text encoder", e.text_encoder_bytes_per_gpu, charts.PALETTE["optimizer"]),
                    ("VAE weights", e.vae_weights_bytes_per_gpu, charts.PALETTE["gradients"]),
                    (
                        "activations" if e.activation_bytes_per_gpu >= e.vae_decode_bytes else "VAE decode",
                        max(e.activation_bytes_per_gpu, e.vae_decode_bytes),
                        charts.PALETTE["activations"],
                    ),
                    ("overhead", e.overhead_bytes_per_gpu, charts.PALETTE["overhead"]),
                ],
                e.capacity_bytes_per_gpu,
                "What fills the busiest GPU",
            ),
            width="stretch",
        )
        render.metrics(e.steps_trace, ["activation_bytes_per_gpu", "vae_decode_bytes", "text_encoder_bytes_per_gpu"])
if sens.open:
    with sens:
        render.tornado_picker(
            rng,
            {
                "video_s": "the time per video",
                "step_s": "one denoising step",
                "memory_bytes_per_gpu": "memory per GPU",
                "p95_latency_s": "p95 latency",
                "cost_per_video_full_load_usd": "cost per video kept busy",
            },
            "video",
            "video_s",
        )
        render.table(
            render.assumption_sources(cfg, VIDEO_ASSUMPTIONS),
            "video assumptions",
        )
st.caption(f"FLOPs per step {fmt_value(e.flop_per_step, 'FLOP')}; price: {rep.price_basis}.")
render.show_math(e.steps_trace)
