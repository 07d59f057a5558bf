"""Show the math: the calculation chain behind the current config, from the same core calls as every page."""

import streamlit as st

from dashboard import cache, render, state

st.title("Show the math")
#: What the page is, said under the answer: above it, it pushed the final numbers' verdict below a 720 px screen.
INTRO = (
    "Every formula symbolically, then with your numbers, then the result. The steps are recorded by the "
    "same functions the Memory and Speed pages and the `rabit` CLI call, so they cannot drift apart; "
    "change the config in the sidebar and the chain follows."
)
cfg = render.bound_choice("math", state.require_config())
view = st.radio(
    "View",
    ["Inference", "Training"],
    horizontal=True,
    **state.view("math.view"),
    help="Inference: memory fit, step time, throughput, TTFT. Training: memory and step time of the configured layout.",
)

if view == "Inference":
    with st.spinner("Building the chain…"):
        mem = cache.serving_memory(cfg)
        s = cache.speed_summary(cfg)
        gaps = cache.textbook_comparison(cfg)
    st.markdown("#### Final numbers")
    srng, mrng = cache.speed_ranges(cfg), cache.memory_ranges(cfg)
    render.say("success" if mem.fits else "error", mem.reason)  # the verdict first, inside the first screen
    render.range_metrics(s.steps, ["prefill_s", "decode_step_s", "tokens_per_s", "tokens_per_s_per_user"], srng.ranges)
    render.range_metrics(
        mem.steps, ["weights_bytes_per_gpu", "kv_bytes_per_gpu", "total_bytes_per_gpu", "max_sequences"], mrng.ranges
    )
    st.caption(INTRO)
    RANGES, TEXTBOOK = "Ranges: each assumption at its bounds", "Our chain against the textbook chain"
    render.contents(["Memory per GPU", *[t for t, _ in s.sections], RANGES, TEXTBOOK])
    st.caption("Each section folds: open it for its formulas, first in symbols, then with this view's numbers.")

    render.math_section("Memory per GPU", mem.steps)
    if cfg.adapters.enabled:  # the adapter chain in one place: bytes, slots, the KV left; the step's FLOPs and reads
        render.math_section("Adapters over one base", render.adapter_steps(mem.steps, s.steps))
    for title, keys in s.sections:
        render.math_section(title, render.steps_by_key(s.steps, keys))

    st.subheader(RANGES, anchor=render.anchor(RANGES))
    st.markdown(
        r"For each assumption *i* that can move a number, the number is recomputed with that assumption "
        r"alone at its low and at its high bound; $d_i = \ln(\text{result}_i / \text{base})$. "
        r"The downward and upward moves combine as $\text{low} = \text{base} \cdot e^{-\sqrt{\sum_i "
        r"(d_i^{\downarrow})^2}}$ and $\text{high} = \text{base} \cdot e^{+\sqrt{\sum_i (d_i^{\uparrow})^2}}$ "
        "— a heuristic range from the assumption bounds, not a confidence interval."
    )
    with st.expander("Each number's moves d_i, the two sums and the result"):
        for key, steps in (("decode_step_s", s.steps), ("prefill_s", s.steps), ("tokens_per_s", s.steps)):
            st_ = render.steps_by_key(steps, (key,))[0]
            render.range_derivation(srng.ranges[key], st_.label, lambda v, u=st_.unit: render.fmt_value(v, u))
        ms = render.steps_by_key(mem.steps, ("max_sequences",))[0]
        render.range_derivation(mrng.ranges["max_sequences"], ms.label, lambda v: f"{v:,.1f}")
    render.tornado(srng.ranges["decode_step_s"], "What moves the decode step")

    st.subheader(TEXTBOOK, anchor=render.anchor(TEXTBOOK))
    st.markdown(
        "The textbook example times a decode step as *(weights + KV at full context) / (bandwidth × 0.8)* plus an "
        "unstated communication term, and TTFT as *2 × B × prompt × P / (peak × 0.74)*. The tables change "
        "one assumption at a time from the textbook chain, recomputed for this config, into ours."
    )
    st.markdown("**Decode step**")
    render.table(render.gap_table(gaps.decode), "textbook decode step", static=True)
    st.markdown("**Time to first token (one batch)**")
    render.table(render.gap_table(gaps.prefill), "textbook time to first token", static=True)
    st.caption(
        "The textbook example lists the H100's peak as '99 TFLOP/s'; its own 3,159 ms needs 989 TFLOP/s (2,313 TFLOP per "
        "GPU ÷ (989 × 0.74)). Physics wins: we use the datasheet's 989 TFLOP/s dense BF16."
    )
    with st.expander("Efficiency assumptions in force, with sources"):
        render.table(
            render.assumption_sources(
                cfg,
                (
                    "mbu",
                    "mfu_max",
                    "mfu_ramp_tokens",
                    "fp8_speedup",
                    "fp4_speedup",
                    "comm_bw_eff",
                    "collective_base_us",
                    "comm_overlap",
                    "step_overhead_ms",
                    "gpu_mem_util",
                    "runtime_overhead_gib",
                ),
            ),
            "assumptions in force",
        )
else:
    with st.spinner("Building the chain…"):
        steps = cache.training_math(cfg)
    trng = cache.training_layout_ranges(cfg)
    render.range_metrics(steps, ["step_s", "runtime_s", "gpu_hours", "mfu"], trng.ranges)
    st.caption(INTRO)
    TRAIN, RANGES = "Training: memory, work, step time, runtime", "Ranges: each assumption at its bounds"
    render.contents([TRAIN, RANGES])
    render.math_section(TRAIN, steps, expanded=True)
    st.subheader(RANGES, anchor=render.anchor(RANGES))
    for key in ("step_s", "runtime_s", "cost_usd"):
        if key in trng.ranges:
            lab = {"step_s": "Step time", "runtime_s": "Runtime without failures", "cost_usd": "Cost"}[key]
            unit = "USD" if key == "cost_usd" else "s"
            render.range_derivation(trng.ranges[key], lab, lambda v, u=unit: render.fmt_value(v, u))
    render.tornado(trng.ranges["runtime_s"], "What moves the runtime")
