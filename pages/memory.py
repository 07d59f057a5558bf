"""Memory: does it fit, and how many sequences can one replica hold?"""

import plotly.graph_objects as go
import streamlit as st

from dashboard import cache, charts, render, state
from core.units import GB

st.title("Memory")
st.caption("What fills one GPU — weights, KV cache, activations, overhead — and how many sequences a replica holds.")
cfg = render.bound_choice("memory", state.require_config())

serve, train = st.tabs(["Serving", "Training"])

with serve:
    mem = cache.serving_memory(cfg)
    rng = cache.memory_ranges(cfg)
    (st.success if mem.fits else st.error)(mem.reason)
    render.range_metrics(mem.steps, ["weights_bytes_per_gpu", "kv_bytes_per_gpu", "activation_bytes_per_gpu",
                                     "overhead_bytes_per_gpu", "total_bytes_per_gpu", "capacity_bytes_per_gpu"],
                         rng.ranges)
    render.range_metrics(mem.steps, ["kv_budget_bytes_per_gpu", "kv_bytes_per_seq_per_gpu", "max_sequences",
                                     "max_sequences_contiguous"], rng.ranges)
    st.caption(f"Replica = TP {cfg.tp} × PP {cfg.pp} = {mem.replica_gpus} GPUs; {mem.replicas} replica(s) on "
               f"{cfg.gpus} GPUs hold {mem.max_sequences * mem.replicas:,} sequences of "
               f"{cfg.context_tokens:,} tokens (paged).")
    st.plotly_chart(charts.stacked_bar(
        [("weights", mem.weights_bytes_per_gpu, charts.PALETTE["weights"]),
         ("KV cache", mem.kv_bytes_per_gpu, charts.PALETTE["kv"]),
         ("activations / workspace", mem.activation_bytes_per_gpu, charts.PALETTE["activations"]),
         ("overhead", mem.overhead_bytes_per_gpu, charts.PALETTE["overhead"]),
         ("free", mem.free_bytes_per_gpu, charts.PALETTE["free"])],
        mem.capacity_bytes_per_gpu, "What fills one GPU", mem.usable_bytes_per_gpu), width="stretch")

    c1, c2 = st.columns(2)
    ctxs = tuple(sorted({1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, cfg.context_tokens}))
    rows = cache.sequences_vs_context(cfg, ctxs)
    fig = go.Figure()
    fig.add_scatter(x=[r[0] for r in rows], y=[r[1] for r in rows], name="paged", mode="lines+markers")
    fig.add_scatter(x=[r[0] for r in rows], y=[r[2] for r in rows], name="contiguous (reserve max context)",
                    mode="lines+markers")
    fig.update_layout(title="Concurrent sequences per replica vs context", xaxis_type="log",
                      xaxis_title="context tokens (input + output)", yaxis_title="sequences", height=360)
    c1.plotly_chart(fig, width="stretch")
    kv_rows = cache.kv_per_token_across_catalog(cfg.kv_dtype)
    fig = go.Figure(go.Bar(x=[r[2] / 1e3 for r in kv_rows], y=[f"{r[0]} ({r[1]})" for r in kv_rows],
                           orientation="h", marker_color=[{"MHA": "#cf222e", "GQA": "#1f6feb", "MLA": "#2da44e"}
                                                          .get(r[1], "#8250df") for r in kv_rows]))
    fig.update_layout(title=f"KV bytes per token across the catalog ({cfg.kv_dtype})", xaxis_title="KB per token (log)",
                      xaxis_type="log", yaxis=dict(dtick=1),  # every bar labelled: no skipped models
                      height=max(360, 22 * len(kv_rows) + 110), margin=dict(l=10))
    c2.plotly_chart(fig, width="stretch")
    render.tornado_picker(rng.ranges, {"max_sequences": "max sequences per replica",
                                       "kv_budget_bytes_per_gpu": "the KV budget per GPU"}, "memory", "max_sequences")
    render.show_math(mem.steps)

with train:
    tm = cache.training_memory(cfg)
    trng = cache.training_memory_ranges(cfg)
    render.fit_or_options(tm.fits, tm.reason, cache.training_fit_options(cfg))
    render.range_metrics(tm.steps, ["weight_bytes_per_gpu", "gradient_bytes_per_gpu", "optimizer_bytes_per_gpu",
                                    "activation_bytes_per_gpu", "total_bytes_per_gpu", "capacity_bytes_per_gpu"],
                         trng.ranges)
    st.caption(f"TP {cfg.tp} × PP {cfg.pp} × DP {cfg.dp}, ZeRO-{cfg.zero}, micro-batch {cfg.micro_batch}, "
               f"sequence {cfg.seq_len:,}, recompute {cfg.recompute}"
               + (f", LoRA rank {cfg.lora_rank}" + (" (QLoRA)" if cfg.qlora else "") if cfg.lora_rank else ""))
    by_zero = cache.training_memory_by_zero(cfg)
    fig = go.Figure()
    for name, attr, color in (("weights", "weight_bytes_per_gpu", "weights"),
                              ("gradients", "gradient_bytes_per_gpu", "gradients"),
                              ("optimizer", "optimizer_bytes_per_gpu", "optimizer"),
                              ("activations", "activation_bytes_per_gpu", "activations"),
                              ("overhead", "overhead_bytes_per_gpu", "overhead")):
        fig.add_bar(x=[f"ZeRO-{z}" for z, _ in by_zero], y=[getattr(r, attr) / GB for _, r in by_zero],
                    name=name, marker_color=charts.PALETTE[color])
    fig.add_hline(y=tm.capacity_bytes_per_gpu / GB, line_dash="dash", annotation_text="capacity")
    fig.update_layout(barmode="stack", title="Training memory per GPU by ZeRO stage", yaxis_title="GB", height=380)
    st.plotly_chart(fig, width="stretch")
    render.show_math(tm.steps)
