"""Training: how many GPUs, how long, how much — the fastest layout that fits, the deadline search, goodput."""

import pandas as pd
import streamlit as st

from dashboard import cache, charts, render, state
from dashboard.api import (
    DAY_S,
    choices,
    fmt_bytes,
    fmt_sig,
    fmt_time,
    fmt_usd,
)

st.title("Training")
st.caption(
    "Model, GPU, tokens, precision, sequence length and global batch come from the sidebar (Training section); "
    "every TP × PP × DP × EP × micro-batch × ZeRO × recompute × virtual-stage layout that fits is tried."
)
cfg = render.bound_choice("training", state.require_config())
head = st.container()  # the answer first; how the run is sized under it

E = state.edits
with st.expander("How the run is sized: a deadline or a GPU budget, the search, the pins, checkpoints", expanded=True):
    c1, c2, c3 = st.columns(3)
    mode = c1.radio(
        "Size the run by",
        choices.TRAIN_MODES,
        format_func=choices.TRAIN_MODE_LABELS.get,
        **E("training.mode"),
        horizontal=True,
    )
    if mode == "deadline":
        c2.number_input("Deadline [days]", **state.bounds("targets.deadline_days"), **E("targets.deadline_days"))
        state.field_error("targets.deadline_days")
        shown = st.session_state.get(state.key("training.max_gpus"), cfg.training.max_gpus)
        c3.selectbox(
            "Search GPU counts up to",
            sorted({*choices.TRAIN_SEARCH_LIMITS, shown}),
            **E("training.max_gpus"),
        )
    else:
        c2.number_input(
            f"GPU budget (GPUs to train on; 0 = the sidebar's {cfg.gpus:,})",
            **state.bounds("training.budget_gpus"),
            **E("training.budget_gpus"),
        )
        state.field_error("training.budget_gpus")
        problem = cache.budget_problem(cfg)
        if problem:
            c2.error(problem)
            st.stop()
    c1, c2 = st.columns(2)
    c1.checkbox(
        "Pin the sidebar's ZeRO, recompute, micro-batch",
        **E("training.pin"),
        help="use the sidebar's ZeRO stage, recomputation and micro-batch instead of searching them",
    )
    c2.number_input(
        "Checkpoint interval [min] (0 = Daly optimum)",
        **state.bounds("training.checkpoint_interval_s"),
        **E("training.checkpoint_interval_s"),
    )
    state.field_error("training.checkpoint_interval_s")

goal = cache.training_goal(cfg)
with st.spinner("Searching layouts over every GPU count…"):
    plan = cache.training_plan(cfg, goal)
with st.spinner("Evaluating the chosen layout at each assumption's bounds…"):
    rng = cache.training_ranges(cfg, goal)

with head:
    render.say("error" if plan.best is None else "warning" if plan.deadline_met is False else "success", plan.message)

    if plan.best is not None:
        b, gp = plan.best, plan.goodput
        cols = render.grid(
            5,
            ("GPUs", "Wall-clock with failures", "Runtime without failures", "GPU-hours with failures", "Cost"),
            (f"${plan.cost_usd or 0:,.0f}",),
        )

        render.metric_range(
            cols[0],
            "GPUs",
            f"{plan.gpus:,}",
            rng.get("gpus"),
            lambda x: f"{x:,.0f}",
            unbounded="the deadline cannot be met at the pessimistic bound",
            help=b.layout.label()
            + (
                " — the range is the count that meets the deadline with every "
                "assumption at its optimistic / pessimistic bound"
                if "gpus" in rng
                else ""
            ),
        )
        render.metric_range(
            cols[1],
            "Wall-clock with failures",
            fmt_time(gp.wall_clock_s),
            rng.get("wall_clock_s"),
            fmt_time,
            help="expected; Daly's model",
        )
        render.metric_range(cols[2], "Runtime without failures", fmt_time(b.runtime_s), rng.get("runtime_s"), fmt_time)
        render.metric_range(
            cols[3],
            "GPU-hours with failures",
            f"{plan.gpu_hours_with_failures or b.gpu_hours:,.0f}",
            rng.get("gpu_hours_with_failures"),
            lambda x: f"{x:,.0f}",
            help=f"GPUs × the expected wall-clock with failures (what the cost is priced on); "
            f"{b.gpu_hours:,.0f} without failures, checkpoint writes and restarts",
        )
        render.metric_range(
            cols[4],
            "Cost",
            fmt_usd(plan.cost_usd) if plan.cost_usd is not None else "no price",
            rng.get("cost_usd"),
            fmt_usd,
            help=(
                f"on-demand price ({plan.price.provider}, ${fmt_sig(plan.price.usd_per_gpu_hour, 6)}"
                f"/GPU-h ({plan.price.as_of}), times the wall-clock with failures"
                if plan.price
                else "the price catalog has no on-demand row for this GPU"
            ),
        )
        if plan.price is None:
            st.info(f"No on-demand price for {cfg.gpu} in the catalog: cost is not shown.")

if plan.best is not None:
    render.range_metrics(
        plan.steps,
        ["step_s", "mfu", "hfu", "goodput_frac", "total_bytes_per_gpu"],
        rng,
        alias={"goodput_frac": "goodput"},
    )
    render.tornado_picker(
        rng,
        {"wall_clock_s": "the wall-clock", "cost_usd": "the cost", "step_s": "the step time", "mfu": "MFU"},
        "training",
        "wall_clock_s",
    )
    st.subheader(f"Chosen layout: {b.layout.label()}")
    st.caption(
        f"{b.global_batch_tokens:,} tokens per step = {b.micro_batches} micro-batches × DP {b.layout.dp} × "
        f"{b.layout.micro_batch} × {cfg.seq_len:,}; {b.steps:,} steps; pipeline bubble "
        f"{b.bubble_frac:.1%} of the step."
    )
    m = plan.memory
    c1, c2 = st.columns(2)
    c1.plotly_chart(
        charts.stacked_bar(
            [
                ("weights", m.weight_bytes_per_gpu, charts.PALETTE["weights"]),
                ("gradients", m.gradient_bytes_per_gpu, charts.PALETTE["gradients"]),
                ("optimizer", m.optimizer_bytes_per_gpu, charts.PALETTE["optimizer"]),
                ("activations", m.activation_bytes_per_gpu, charts.PALETTE["activations"]),
                ("overhead", m.overhead_bytes_per_gpu, charts.PALETTE["overhead"]),
                ("FP8 weight copies", m.fp8_weight_bytes_per_gpu, "#57606a"),
            ],
            m.capacity_bytes_per_gpu,
            "Memory per GPU",
        ),
        width="stretch",
    )
    c2.plotly_chart(charts.training_time_bar(b.time_parts(), b.step_s), width="stretch")

if plan.alternatives:
    st.subheader("Layouts on this GPU count")
    render.table(
        pd.DataFrame(
            [
                {
                    "layout": a.layout.label(),
                    "why it lost": a.why,
                    "runtime": fmt_time(a.runtime_s) if a.feasible else "—",
                    "MFU": f"{a.mfu:.1%}" if a.feasible else "—",
                    "step": fmt_time(a.step_s),
                    "memory / GPU": fmt_bytes(a.memory_bytes_per_gpu),
                    "bubble": f"{a.bubble_frac:.1%}",
                    "fits": "yes" if a.fits else "no",
                }
                for a in plan.alternatives
            ]
        ),
        "layouts on this GPU count",
        column_config=render.widths(
            layout=225, runtime=75, MFU=55, step=55, bubble=55, fits=40, **{"why it lost": 225, "memory / GPU": 80}
        ),
    )

choice = cache.deadline_choice(cfg, goal)
if choice is not None:
    st.subheader("Smallest or cheapest count that meets the deadline")
    render.say("info" if choice.smallest.gpus == choice.cheapest.gpus else "success", choice.message)
    st.plotly_chart(charts.deadline_cost_chart(plan.curve, choice), width="stretch", key="deadline_cost_chart")

st.subheader("Runtime against GPU count")
fig = charts.training_curve(plan.curve, plan.gpus, plan.goal.deadline_s)
with st.spinner("The same search at the pessimistic and optimistic bounds…"):
    bands = cache.training_bands(cfg, goal)
if bands["wall_clock_s"][0]:
    charts.add_band(
        fig,
        *bands["wall_clock_s"],
        name="wall-clock, every assumption at its optimistic / pessimistic bound",
        scale=DAY_S,
    )
    charts.log_axis(fig, "y")
st.plotly_chart(fig, width="stretch")
slow = [c for c in plan.curve if c.slower_reason]
if slow:
    st.caption(
        "More GPUs are not always faster: a fixed global batch leaves fewer micro-batches per pipeline "
        "(more bubble) and more data-parallel traffic. Where the curve rises:"
    )
    render.table(
        pd.DataFrame([{"GPUs": c.gpus, "why slower": c.slower_reason, "layout": c.layout.label()} for c in slow[:50]]),
        "counts slower than a smaller count",
        column_config=render.widths(GPUs=60, **{"why slower": 420}),
    )
missing = sum(1 for c in plan.curve if not c.feasible)
if missing:
    st.caption(
        f"{missing:,} of {len(plan.curve):,} counts have no layout: the model does not fit, or the global "
        "batch cannot be split evenly over that many GPUs (raise the global batch to use more)."
    )

if plan.goodput is not None:
    st.subheader("Goodput: failures, checkpoints, restarts")
    render.metrics(
        plan.steps, ["mtbf_s", "checkpoint_interval_s", "expected_interruptions", "goodput_frac", "wall_clock_s"]
    )
    st.caption(
        f"Failures at {fmt_sig(cfg.assumptions.failure_rate_per_gpu_hour, 6)} per GPU-hour; checkpoint writes block "
        f"{fmt_time(cfg.assumptions.checkpoint_write_s)}; a restart costs "
        f"{fmt_time(cfg.assumptions.restart_s)} plus the work since the last checkpoint."
    )
    render.show_math(plan.steps)

with st.expander("Evaluate the sidebar's layout instead (TP, PP, EP, ZeRO, micro-batch, recompute)"):
    own = cache.training_layout(cfg)
    render.fit_or_options(
        own.fits,
        f"{own.layout.label()} on {own.gpus:,} GPUs: {fmt_bytes(own.memory_bytes_per_gpu)} of "
        f"{fmt_bytes(own.capacity_bytes_per_gpu)} per GPU — {'fits' if own.fits else 'does not fit'}",
        cache.training_fit_options(cfg),
    )
    mine = cache.training_math(cfg)
    render.metrics(mine, ["step_s", "runtime_s", "gpu_hours", "mfu", "total_bytes_per_gpu"])
    render.metrics(mine, ["bubble_frac", "wall_clock_s", "goodput_frac", "capacity_bytes_per_gpu"])
