"""Speed: how fast — prefill is compute, decode is memory; the roofline, batch, collectives, speculation."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, charts, render, state
from dashboard.api import choices, fmt_num, fmt_time

st.title("Speed")
st.caption(
    "One scheduler iteration is the slower of compute and memory traffic, plus the collectives the "
    "layout needs and a fixed overhead. Every number below comes from that one formula; "
    "**Show the math** has the whole chain."
)
cfg = render.bound_choice("speed", state.require_config())

with st.spinner("Timing prefill and decode…"):
    s = cache.speed_summary(cfg)
    rng = cache.speed_ranges(cfg)
pf, d = s.prefill, s.decode
mem = cache.serving_memory(cfg)
if not mem.fits:
    st.warning(
        f"These timings assume the batch is resident, but it {mem.reason.removeprefix('does not fit: ')} (see Memory)."
    )
render.say(
    "info",
    f"Prefill is **{pf.bound}**-bound, decode is **{d.bound}**-bound for **{cfg.input_tokens:,} in + "
    f"{cfg.output_tokens:,} out tokens** at batch {d.batch} (a mean context of {d.mean_context_tokens:,.0f} cached "
    "tokens).",
)
RANGE_OF = {"ttft_one_s": "ttft_one_prompt_s", "decode_comm_per_step_s": "comm_s_per_step"}
# one request's TTFT leads (what a user asks), then the whole batch's
render.range_metrics(s.steps, ["ttft_one_s", "prefill_s", "decode_step_s", "e2e_s"], rng.ranges, alias=RANGE_OF)
render.range_metrics(
    s.steps,
    ["tokens_per_s", "tokens_per_s_per_user", "tokens_per_s_per_gpu", "decode_comm_per_step_s"],
    rng.ranges,
    alias=RANGE_OF,
)
render.length_warning(cfg)
binds = [b for b in rng.labels("bound") if b]
if len(binds) > 1:
    other = [b for b in binds if b != d.bound]
    st.warning(
        f"The decode step's binding limit changes inside the range: **{d.bound}**-bound here, "
        f"**{' / '.join(other)}**-bound at the bound of "
        + ", ".join(f"`{n}`" for b in other for n in rng.moved_by("bound", b))
        + "."
    )
analyses.show_calibrated(
    [
        ("TTFT", "ttft_s.p50", pf.ttft_s),
        ("Decode step (ITL)", "itl_s.p50", d.step_s),
        ("Tokens/s", "throughput_tokens_per_s", d.tokens_per_s),
    ],
    cfg,
)
if s.compute_bound_batch is None:
    st.caption(
        (
            "Decode is communication-bound here; of compute and memory traffic, memory stays the larger at "
            "every batch at this context"
            if d.bound == "communication"
            else "Decode stays memory-bound at every batch at this context"
        )
        + ": each extra sequence adds more KV bytes than its FLOPs can cover."
        + (
            f" With an almost empty cache it would turn compute-bound at batch {s.compute_bound_batch_short:,}."
            if s.compute_bound_batch_short
            else ""
        )
    )
else:
    st.caption(
        (
            "Decode is communication-bound here; setting communication aside, it"
            if d.bound == "communication"
            else "Decode"
        )
        + f" turns compute-bound at batch {s.compute_bound_batch:,} per replica at this context."
    )

tabs = st.tabs(["Roofline", "Batch", "One iteration", "Context", "Collectives", "Speculative decoding", "Sensitivity"])

with tabs[0]:
    st.plotly_chart(cache.figure(charts.roofline_chart, cache.roofline(cfg)), width="stretch")
    st.caption(
        "Prefill runs many tokens per weight read, so it sits right of the ridge; decode reads every weight "
        "and the KV cache for one token per sequence, so it sits left of it."
    )

with tabs[1]:
    top = st.select_slider(
        "Sweep batches up to",
        options=choices.SWEEP_BATCH_LIMITS,
        value=choices.DEFAULT_SWEEP_BATCH_LIMIT,
        key="speed.max_batch",
    )
    with st.spinner("Sweeping batch sizes…"):
        points = cache.batch_sweep(cfg, cache.sweep_batches(cfg, top))
    c1, c2 = st.columns(2)
    band = cache.batch_band(cfg, tuple(p.batch for p in points))
    # figures shared across sessions and reruns: a rerun that leaves their inputs alone does not rebuild them
    c1.plotly_chart(cache.figure(charts.batch_band_chart, points, cfg.batch, band), width="stretch")
    c2.plotly_chart(cache.figure(charts.tradeoff_chart, points), width="stretch")
    st.caption(
        "Shaded: the aggregate tokens/s at each batch, as a heuristic range from the assumption bounds (each "
        "assumption alone at its low and high bound, the moves combined as for the numbers above)."
    )

with tabs[2]:
    st.plotly_chart(
        cache.figure(
            charts.breakdown_chart,
            ((f"prefill (batch {pf.batch})", pf.iteration), (f"decode step (batch {d.batch})", d.at_mean)),
        ),
        width="stretch",
    )
    render.metrics(s.steps, ["decode_mid_compute_s", "decode_mid_memory_s", "decode_mid_comm_s", "decode_mid_s"])

with tabs[3]:
    st.plotly_chart(charts.decode_curve_chart(cache.decode_curve(cfg)), width="stretch")
    st.caption(
        f"First decode step {fmt_time(d.step_first_s)}, last {fmt_time(d.step_last_s)}; "
        f"the mean over the output is {fmt_time(d.step_s)}."
    )

with tabs[4]:
    view = cache.collective_view(cfg)
    st.markdown(view.topology)
    render.table(render.collective_table(view), "collectives")
    sizes = tuple(float(2**k) for k in range(10, 33))
    st.plotly_chart(cache.figure(charts.allreduce_chart, sizes, cache.allreduce_curve(cfg, sizes)), width="stretch")
    render.attention_options_table(cache.attention_options(cfg))
    eps = cache.ep_options(cfg)
    if eps:
        st.subheader("Expert parallelism (MoE)")
        st.caption(
            "The same configuration with the routed experts split by TP (EP 1) or placed whole on their GPUs "
            "(EP): each MoE layer then swaps its MLP all-reduce for a dispatch and a combine all-to-all over "
            "this GPU's fabric. Set EP in the sidebar."
        )
        render.table(
            pd.DataFrame(
                [
                    {
                        "EP": o.ep,
                        "decode step": fmt_time(o.decode_step_s) if not o.problem else "",
                        "TTFT (batch)": fmt_time(o.prefill_s) if not o.problem else "",
                        "communication per step": fmt_time(o.comm_s_per_step) if not o.problem else "",
                        "tokens/s": fmt_num(o.tokens_per_s) if not o.problem else "",
                        "note": o.problem or ("current" if o.ep == cfg.ep else ""),
                    }
                    for o in eps
                ]
            ),
            "expert parallelism",
        )

with tabs[5]:
    if s.spec is None:
        st.info("Speculative decoding is off. Pick a method under **Speculative decoding** in the sidebar.")
    else:
        render.metrics(
            s.steps, ["spec_tokens_per_pass", "spec_speedup", "spec_break_even_alpha", "spec_tokens_per_s_per_user"]
        )
        alphas = tuple(i / 50 for i in range(51))
        st.plotly_chart(
            charts.spec_chart(cache.spec_vs_alpha(cfg, alphas), s.spec.alpha, s.spec.break_even_alpha), width="stretch"
        )
        if s.spec.break_even_alpha != s.spec.break_even_alpha:  # NaN
            st.warning("A speculative round costs more than k + 1 plain steps here: speculation never wins.")

with tabs[6]:
    render.tornado_picker(
        rng.ranges,
        {
            "decode_step_s": "the decode step",
            "prefill_s": "TTFT (batch)",
            "tokens_per_s": "aggregate tokens/s",
            "tokens_per_s_per_user": "tokens/s per user",
            "e2e_s": "end-to-end latency",
        },
        "speed",
        "decode_step_s",
    )

with st.expander("Assumptions behind these numbers, with sources"):
    render.table(
        render.assumption_sources(
            cfg,
            (
                "mbu",
                "fp8_stream_eff",
                "mfu_max",
                "mfu_ramp_tokens",
                "gemm_k0_ridge",
                "fp8_speedup",
                "fp4_speedup",
                "comm_bw_eff",
                "collective_base_us",
                "custom_ar_base_us",
                "comm_overlap",
                "step_overhead_ms",
                "eagle_draft_frac",
                "ngram_draft_us",
            ),
        ),
        "assumptions",
    )
render.show_math(s.steps)
