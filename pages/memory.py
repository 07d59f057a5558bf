"""Memory: does it fit, and how many sequences can one replica hold?"""

import streamlit as st

from dashboard import cache, charts, render, startup_log, state

st.title("Memory")
st.caption("What fills one GPU — weights, KV cache, activations, overhead — and how many sequences a replica holds.")
cfg = render.bound_choice("memory", state.require_config())

# lazy tabs: only the chosen tab is computed and sent (on this default page a first load costs about half);
# the choice is the session's (st.session_state["memory.tab"])
serve, train, longctx, log_tab = st.tabs(
    ["Serving", "Training", "Long context", "Start-up log"], **state.view("memory.tab")
)

if serve.open is not False:
    with serve:
        mem = cache.serving_memory(cfg)
        rng = cache.memory_ranges(cfg)
        render.say("success" if mem.fits else "error", mem.reason)
        render.range_metrics(
            mem.steps,
            [
                "weights_bytes_per_gpu",
                "kv_bytes_per_gpu",
                "activation_bytes_per_gpu",
                "overhead_bytes_per_gpu",
                "total_bytes_per_gpu",
                "capacity_bytes_per_gpu",
            ],
            rng.ranges,
        )
        render.range_metrics(
            mem.steps,
            [
                "kv_bytes_per_token",
                "kv_budget_bytes_per_gpu",
                "kv_bytes_per_seq_per_gpu",
                "max_sequences",
                "max_sequences_contiguous",
            ],
            rng.ranges,
        )
        if cfg.adapters.enabled:
            st.markdown(f"**{cfg.adapters.count:,} adapters over one base**")
            render.adapter_memory(mem, cache.adapter_kv_cost(cfg))
            slots = cache.adapter_slot_limit(cfg)  # the sidebar's workload simulated: do requests wait for a slot?
            if slots is not None and slots.is_cause:
                render.say("warning", slots.text() + " (the Serving simulation of the sidebar's workload)")
        st.caption(
            f"Replica = TP {cfg.tp} × PP {cfg.pp} = {mem.replica_gpus} GPUs; {mem.replicas} replica(s) on "
            f"{cfg.gpus} GPUs hold {mem.max_sequences * mem.replicas:,} sequences of "
            f"{cfg.context_tokens:,} tokens (paged)."
        )
        st.plotly_chart(
            cache.figure(
                charts.stacked_bar,
                [
                    ("weights", mem.weights_bytes_per_gpu, charts.PALETTE["weights"]),
                    ("KV cache", mem.kv_bytes_per_gpu, charts.PALETTE["kv"]),
                    ("activations / workspace", mem.activation_bytes_per_gpu, charts.PALETTE["activations"]),
                    ("overhead", mem.overhead_bytes_per_gpu, charts.PALETTE["overhead"]),
                    *(
                        [("adapter slots", mem.adapter_reserved_bytes_per_gpu, charts.PALETTE["adapters"])]
                        if mem.adapter_reserved_bytes_per_gpu
                        else []
                    ),
                    ("free", mem.free_bytes_per_gpu, charts.PALETTE["free"]),
                ],
                mem.capacity_bytes_per_gpu,
                "What fills one GPU",
                mem.usable_bytes_per_gpu,
            ),
            width="stretch",
        )

        c1, c2 = st.columns(2)
        ctxs = tuple(sorted({1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, cfg.context_tokens}))
        rows = cache.sequences_vs_context(cfg, ctxs)
        c1.plotly_chart(cache.figure(charts.sequences_vs_context_chart, rows), width="stretch")
        kv_rows = cache.kv_per_token_across_catalog(cfg.kv_dtype)
        c2.plotly_chart(cache.figure(charts.kv_per_token_chart, kv_rows, cfg.kv_dtype), width="stretch")
        render.tornado_picker(
            rng.ranges,
            {"max_sequences": "max sequences per replica", "kv_budget_bytes_per_gpu": "the KV budget per GPU"},
            "memory",
            "max_sequences",
        )
        render.show_math(mem.steps)

if train.open:
    with train:
        tm = cache.training_memory(cfg)
        trng = cache.training_memory_ranges(cfg)
        render.fit_or_options(tm.fits, tm.reason, cache.training_fit_options(cfg))
        render.range_metrics(
            tm.steps,
            [
                "weight_bytes_per_gpu",
                "gradient_bytes_per_gpu",
                "optimizer_bytes_per_gpu",
                "activation_bytes_per_gpu",
                "total_bytes_per_gpu",
                "capacity_bytes_per_gpu",
            ],
            trng.ranges,
        )
        st.caption(
            f"TP {cfg.tp} × PP {cfg.pp} × DP {cfg.dp}, ZeRO-{cfg.zero}, micro-batch {cfg.micro_batch}, "
            f"sequence {cfg.seq_len:,}, recompute {cfg.recompute}"
            + (f", LoRA rank {cfg.lora_rank}" + (" (QLoRA)" if cfg.qlora else "") if cfg.lora_rank else "")
        )
        by_zero = cache.training_memory_by_zero(cfg)
        st.plotly_chart(
            cache.figure(charts.training_by_zero_chart, by_zero, tm.capacity_bytes_per_gpu), width="stretch"
        )
        render.show_math(tm.steps)

if longctx.open:
    with longctx:
        view = cache.long_context(cfg)
        st.caption(
            "One sequence alone on this replica, its prompt from 1k tokens to the model's window: what it holds, how "
            "long its first token takes (a prompt longer than the token budget is prefilled chunk by chunk, each "
            "chunk attending every earlier token), and which term dominates."
        )
        cross = view.attention_overtakes_at
        st.info(
            f"Attention's quadratic compute overtakes the linear matmuls at about {cross:,} tokens."
            if cross
            else "The linear matmuls dominate the first token at every context up to the window."
        )
        c1, c2 = st.columns(2)
        c1.plotly_chart(cache.figure(charts.long_context_memory_chart, view.points), width="stretch")
        c2.plotly_chart(cache.figure(charts.long_context_ttft_chart, view.points), width="stretch")
        render.long_context_tables(view)

if log_tab.open:
    with log_tab:
        startup_log.section(cfg)
