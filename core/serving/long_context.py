"""The long-context view: what one sequence costs as its context grows, and what the model's own architecture saved.

For one sequence alone (batch 1) on the config's replica, at contexts from 1k tokens to the model's window:

* memory: the KV (and a hybrid's fixed state) of the sequence, in all and per GPU, the GPU's total and the fit
  (:func:`core.physics.serving_memory` at batch 1);
* the time to the first token, prefilled chunk by chunk when the prompt is longer than the token budget
  (:func:`core.serving.speed.prefill`), its compute split into the matmuls' share (linear in the context) and
  attention's (quadratic), and which dominates; the context where attention overtakes the matmuls;
* the longest sequence that fits, with the config's layout, with context parallelism over 2, 4 and 8 TP groups (the
  KV of the sequence split over their GPUs) and with a KV tier in host memory of 256 GiB to 2 TiB per replica (read
  back over the host link: the decode step at that length is shown beside it);
* what each of the model's choices saved at the longest context shown: grouped-query or multi-query attention
  against one KV head per query head, latent attention (MLA) against the full K and V of its heads, sliding-window
  or chunked layers against full attention in every layer, linear-attention or state-space layers against attention
  layers, each the KV of one sequence with that choice undone, the others kept.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE
from core.catalog import ModelArch
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import kv_bytes_per_token, serving_memory
from core.serving.speed import decode, prefill

__all__ = ["ArchitectureSaving", "ContextPoint", "FitWith", "LongContextView", "long_context_view"]

#: Context parallelism degrees and host tiers [GiB per replica] the view tries for the longest sequence.
CP_OPTIONS = (2, 4, 8)
OFFLOAD_GIB_OPTIONS = (256.0, 1024.0, 2048.0)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ContextPoint(_Frozen):
    """One sequence of ``context_tokens`` (prompt; one output token) alone on the replica."""

    context_tokens: int
    kv_bytes_per_seq: float  # all layers, before any split (a hybrid's state included)
    kv_bytes_per_seq_per_gpu: float
    total_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    fits: bool
    ttft_s: float
    linear_s: float  # the matmuls' share of the prefill's compute, over its chunks
    attention_s: float  # attention's share
    dominant: str  # "linear GEMMs" or "quadratic attention"
    chunks: int


class FitWith(_Frozen):
    """The longest single sequence that fits with one option [tokens], and what it costs."""

    option: str
    gpus: int  # GPUs of the replica
    max_context_tokens: int
    decode_step_s: float | None = None  # at that length (None when nothing fits)


class ArchitectureSaving(_Frozen):
    """One architectural choice of the model and the KV it saves at ``context_tokens``."""

    choice: str
    without: str  # what the counterfactual is
    kv_bytes_with: float  # one sequence, all layers
    kv_bytes_without: float
    saved_frac: float
    context_tokens: int


class LongContextView(_Frozen):
    points: tuple[ContextPoint, ...]
    attention_overtakes_at: int | None  # the first context where attention's compute passes the matmuls'
    fits: tuple[FitWith, ...]  # the config's layout first, then CP and host-tier options
    savings: tuple[ArchitectureSaving, ...]
    max_context: int  # the model's window


def _contexts(window: int) -> tuple[int, ...]:
    """Powers of two from 1k to the model's window, and the window itself."""
    out = [2**k for k in range(10, 40) if 2**k < window]
    return (*out, window)


def _one(cfg: RabitConfig, ctx: int) -> RabitConfig:
    return cfg.with_(batch=1, input_tokens=max(1, ctx - 1), output_tokens=1, prefix_cache_frac=0.0)


def seq_kv_bytes(m: ModelArch, context: int, kv_b: float) -> float:
    """One sequence's KV over all attention layers (window-clipped) plus a hybrid's fixed state [B]."""
    return kv_bytes_per_token(m, kv_b) * m.kv_context_tokens(context) + m.ssm_state_bytes_per_seq()


def _max_fitting(dep: Deployment) -> int:
    """The longest sequence (batch 1) that fits the deployment [tokens], by bisection up to the model's window."""
    m = dep.model
    cfg = dep.config

    def fits(n: int) -> bool:
        return serving_memory(replace(dep, config=_one(cfg, n)), NO_TRACE).fits if n >= 2 else True

    hi = m.max_context
    if fits(hi):
        return hi
    lo = 1
    while hi - lo > max(1, lo // 1000):  # a part in a thousand
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _fit_with(dep: Deployment, option: str, **changes) -> FitWith:
    d = dep.with_(**changes) if changes else dep
    n = _max_fitting(d)
    step = decode(replace(d, config=_one(d.config, n)), NO_TRACE).step_s if n >= 2 else None
    return FitWith(option=option, gpus=d.config.replica_gpus, max_context_tokens=n, decode_step_s=step)


def architecture_savings(m: ModelArch, context: int, kv_b: float) -> tuple[ArchitectureSaving, ...]:
    """What each of the model's own attention choices saves in one sequence's KV at ``context`` (the choice undone,
    everything else kept)."""
    have = seq_kv_bytes(m, context, kv_b)
    out = []

    def add(choice: str, without: str, other: ModelArch | float) -> None:
        w = other if isinstance(other, float) else seq_kv_bytes(other, context, kv_b)
        out.append(
            ArchitectureSaving(
                choice=choice,
                without=without,
                kv_bytes_with=have,
                kv_bytes_without=w,
                saved_frac=1 - have / w if w > 0 else 0.0,
                context_tokens=context,
            )
        )

    if m.is_mla:  # the latent (r_kv + d_rope) instead of every head's K (d_nope + d_rope) and V (d_v)
        full = m.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * m.attention_layers * kv_b
        add("latent attention (MLA)", f"K and V of all {m.num_heads} heads", full * m.kv_context_tokens(context))
    elif m.num_kv_heads < m.num_heads:
        add(
            f"{m.attention_kind}: {m.num_kv_heads} KV heads for {m.num_heads} query heads",
            "one KV head per query head (MHA)",
            m.model_copy(update={"num_kv_heads": m.num_heads}),
        )
    if m.sliding_layers:
        add(
            f"{m.sliding_layers} of {m.attention_layers} layers attend a window of {m.sliding_window:,} tokens",
            "full attention in every layer",
            m.model_copy(update={"sliding_layers": 0, "sliding_window": 0}),
        )
    if m.ssm_layers:
        add(
            f"{m.ssm_layers} of {m.num_layers} layers are linear-attention / state-space (fixed state)",
            "attention in every layer",
            m.model_copy(update={"ssm_layers": 0, "ssm_d_inner": 0}),
        )
    return tuple(out)


def long_context_view(dep: Deployment | RabitConfig, contexts: tuple[int, ...] | None = None) -> LongContextView:
    """The long-context view of the config's model and replica (see the module docstring)."""
    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    ctxs = contexts or _contexts(m.max_context)
    points = []
    crossover = None
    for n in ctxs:
        d = replace(dep, config=_one(cfg, n))
        mem = serving_memory(d, NO_TRACE)
        pf = prefill(d, NO_TRACE)
        lin = sum(c.linear_s for c in pf.chunks)
        att = sum(c.attention_s for c in pf.chunks)
        if crossover is None and att > lin:
            crossover = n
        points.append(
            ContextPoint(
                context_tokens=n,
                kv_bytes_per_seq=seq_kv_bytes(m, n, dep.kv_bytes_per_elem),
                kv_bytes_per_seq_per_gpu=mem.kv_bytes_per_seq_per_gpu,
                total_bytes_per_gpu=mem.total_bytes_per_gpu,
                usable_bytes_per_gpu=mem.usable_bytes_per_gpu,
                fits=mem.fits,
                ttft_s=pf.ttft_s,
                linear_s=lin,
                attention_s=att,
                dominant="quadratic attention" if att > lin else "linear GEMMs",
                chunks=len(pf.chunks),
            )
        )
    base = dep.with_(dp_attention=False) if cfg.dp_attention else dep
    fits = [_fit_with(dep, f"as configured ({cfg.replica_gpus} GPUs)")]
    if not cfg.dp_attention:
        for k in CP_OPTIONS:
            if k > cfg.cp:
                fits.append(_fit_with(base, f"context parallelism {k}", cp=k))
    for gib in OFFLOAD_GIB_OPTIONS:
        if gib > cfg.kv_offload_gib:
            fits.append(_fit_with(base, f"host KV tier {gib:,.0f} GiB", kv_offload_gib=gib))
    return LongContextView(
        points=tuple(points),
        attention_overtakes_at=crossover,
        fits=tuple(fits),
        savings=architecture_savings(m, max(ctxs), dep.kv_bytes_per_elem),
        max_context=m.max_context,
    )
