"""Show the math: the calculation chain behind the current config, from the same core calls as every page."""

import streamlit as st

from dashboard import cache, render, state

st.title("Show the math")
st.caption(
    "Every formula symbolically, then with your numbers, then the result. The steps are recorded by the "
    "same functions the Memory and Speed pages and the `rabit` CLI call, so they cannot drift apart; "
    "change the config in the sidebar and the chain follows."
)
cfg = render.bound_choice("math", state.require_config())
view = st.radio(
    "View",
    ["Inference", "Training"],
    horizontal=True,
    key="math.view",
    help="Inference: memory fit, step time, throughput, TTFT. Training: memory and step time of the configured layout.",
)

if view == "Inference":
    with st.spinner("Building the chain…"):
        mem = cache.serving_memory(cfg)
        s = cache.speed_summary(cfg)
        gaps = cache.textbook_comparison(cfg)
    st.markdown("#### Final numbers")
    srng, mrng = cache.speed_ranges(cfg), cache.memory_ranges(cfg)
    render.range_metrics(s.steps, ["prefill_s", "decode_step_s", "tokens_per_s", "tokens_per_s_per_user"], srng.ranges)
    render.range_metrics(
        mem.steps, ["weights_bytes_per_gpu", "kv_bytes_per_gpu", "total_bytes_per_gpu", "max_sequences"], mrng.ranges
    )
    (st.success if mem.fits else st.error)(mem.reason)

    render.math_section("Memory per GPU", mem.steps)
    if cfg.adapters.enabled:  # the adapter chain in one place: bytes, slots, the KV left; the step's FLOPs and reads
        render.math_section("Adapters over one base", render.adapter_steps(mem.steps, s.steps))
    for title, keys in s.sections:
        render.math_section(title, render.steps_by_key(s.steps, keys))

    st.subheader("Ranges: each assumption at its bounds")
    st.markdown(
        r"For each assumption *i* that can move a number, the number is recomputed with that assumption "
        r"alone at its low and at its high bound; $d_i = \ln(\text{result}_i / \text{base})$. "
        r"The downward and upward moves combine as $\text{low} = \text{base} \cdot e^{-\sqrt{\sum_i "
        r"(d_i^{\downarrow})^2}}$ and $\text{high} = \text{base} \cdot e^{+\sqrt{\sum_i (d_i^{\uparrow})^2}}$ "
        "— a heuristic range from the assumption bounds, not a confidence interval."
    )
    for key, steps in (("decode_step_s", s.steps), ("prefill_s", s.steps), ("tokens_per_s", s.steps)):
        st_ = render.steps_by_key(steps, (key,))[0]
        render.range_derivation(srng.ranges[key], st_.label, lambda v, u=st_.unit: render.fmt_value(v, u))
    ms = render.steps_by_key(mem.steps, ("max_sequences",))[0]
    render.range_derivation(mrng.ranges["max_sequences"], ms.label, lambda v: f"{v:,.1f}")
    render.tornado(srng.ranges["decode_step_s"], "What moves the decode step")

    st.subheader("Our chain against the textbook chain")
    st.markdown(
        "The textbook example times a decode step as *(weights + KV at full context) / (bandwidth × 0.8)* plus an "
        "unstated communication term, and TTFT as *2 × B × prompt × P / (peak × 0.74)*. The tables change "
        "one assumption at a time from the textbook chain, recomputed for this config, into ours."
    )
    st.markdown("**Decode step**")
    st.table(render.gap_table(gaps.decode).set_index("change (cumulative)"))
    st.markdown("**Time to first token (one batch)**")
    st.table(render.gap_table(gaps.prefill).set_index("change (cumulative)"))
    st.caption(
        "The textbook example lists the H100's peak as '99 TFLOP/s'; its own 3,159 ms needs 989 TFLOP/s (2,313 TFLOP per "
        "GPU ÷ (989 × 0.74)). Physics wins: we use the datasheet's 989 TFLOP/s dense BF16."
    )
    with st.expander("Efficiency assumptions in force, with sources"):
        st.dataframe(
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
            hide_index=True,
            width="stretch",
        )
else:
    with st.spinner("Building the chain…"):
        steps = cache.training_math(cfg)
    trng = cache.training_layout_ranges(cfg)
    render.range_metrics(steps, ["step_s", "runtime_s", "gpu_hours", "mfu"], trng.ranges)
    render.math_section("Training: memory, work, step time, runtime", steps)
    st.subheader("Ranges: each assumption at its bounds")
    for key in ("step_s", "runtime_s", "cost_usd"):
        if key in trng.ranges:
            lab = {"step_s": "Step time", "runtime_s": "Runtime without failures", "cost_usd": "Cost"}[key]
            unit = "USD" if key == "cost_usd" else "s"
            render.range_derivation(trng.ranges[key], lab, lambda v, u=unit: render.fmt_value(v, u))
    render.tornado(trng.ranges["runtime_s"], "What moves the runtime")
