"""Speed: time to first token, the decode step, throughput and end-to-end latency of one batch, one chain.

Every number comes from the step model (:class:`core.physics.StepModel`, one scheduler iteration of ``T`` new
tokens over ``A`` attended (query, key) pairs reading the cached K/V of ``R`` tokens; the RA-BIT spec)::

    FLOPs = 2 N_active T + 4 L (H d_head) A
    Bytes = weights read + KV read + KV written
    t     = max( FLOPs / (tp x peak x mfu_max x T/(T+T0)),  Bytes / (tp x BW x eta_bw) )
            + 2 L AllReduce(T h 2 B, tp) x (1 - overlap) + EP all-to-all + PP hops + step overhead

All quantities there are per GPU of one pipeline stage; a batch passes the ``pp`` stages in turn.

Modelling choices (physics over the textbook chain where they differ):
  * FP8/FP4 compute runs at the BF16 peak times the named speed-up assumptions (1.3-1.5x for FP8),
    never at the 2x datasheet ratio; the peak of the precision caps it. Parts without FP8 tensor
    cores (A100, ...) run FP8 weights as weight-only (W8A16) at the BF16 rate.
  * MoE: compute follows active parameters; weight traffic follows the experts the batch actually
    touches, E (1 - (1 - k/E)^T) per layer for uniform top-k routing; EP adds a dispatch and a
    combine all-to-all per MoE layer.
  * MLA reads its compressed latent cache (the KV bytes per token of :func:`core.physics.kv_bytes_per_token`).
  * Sliding-window layers read at most the window (``R`` clipped by ``StepModel.kv_read_tokens``).

The views, each computing its numbers and, given a :class:`core.base.Trace`, recording them as it goes (the
Speed page, the CLI and "show the math" read the same steps; the hot paths pass :data:`core.base.NO_TRACE`):

  * :func:`prefill_numbers` / :func:`prefill` -- TTFT of one batch of ``B`` prompts of ``I`` tokens, the
    cached-prefix share removed: ``T = B (I - c)``, ``A = B sum_{j=c+1..I} j`` (causal attention, each query
    sees itself). With ``pp`` stages the prompts run as ``m = min(pp, B)`` micro-batches through an empty
    pipeline: ``(m + pp - 1)`` stage times of one micro-batch, the hops and the fixed costs
    (:func:`pipeline_fill_s`).
  * :func:`decode_numbers` / :func:`decode` -- the mean decode step over the output as the context grows.
    Decode step ``n`` (n = 1 .. O-1; the prefill pass emits output token 1) feeds token ``n`` with
    ``I + n - 1`` tokens cached. With ``pp`` stages the batch runs as ``pp`` micro-batches of ``b = ceil(B/pp)``
    in flight, so one sequence gets a token every ``pp t_stage(b) + (pp-1) t_hop + t_overhead`` (the textbook
    example's per-user formula) and the replica emits ``B`` tokens in that time. Aggregate throughput is
    ``B / t_step x replicas`` (the textbook example: T = n_tok / t_step x d_p); :func:`decode_rates`.
  * :func:`speed_summary` -- the step model's constants, both, speculative decoding
    (:mod:`core.serving.speculative_decoding`) and end-to-end latency, as one chain of :class:`core.base.Step`.
  * :func:`compute_bound_batch` -- where decode turns compute-bound. The chart sweeps (batch, context,
    roofline, collectives) and the textbook comparison live in :mod:`core.serving.speed_views`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Step, Trace, fmt_time, sig
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import IterationParts, StepModel, iteration, prefill_chunk_tokens
from core.serving.prefill_chunks import (
    ChunkPart,
    PrefillNumbers,
    PromptChunks,
    attended_pairs,
    chunk_parts,
    chunked_prefill,
)
from core.serving.speculative_decoding import SpecResult, speculation

#: Decode steps evaluated exactly up to this many; beyond, a uniform grid with the trapezoid rule.
MAX_DECODE_POINTS = 4097


# --- results ---------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class PrefillResult(_Frozen):
    """Time to first token of one batch of prompts (prefilled together, or chunk by chunk when a prompt is longer
    than the token budget)."""

    batch: int
    prompt_tokens: int
    cached_tokens: int  # per prompt, read from the prefix cache
    uncached_tokens: int  # per prompt, computed
    iteration: IterationParts  # one pipeline micro-batch (the whole batch without a pipeline)
    ttft_s: float  # the whole batch
    micro_batches: int = 1  # min(pp, batch)
    ttft_one_s: float  # one prompt alone
    bound: str
    steps: tuple[Step, ...] = ()
    chunk_tokens: int | None = None  # the chunk a long prompt is prefilled in (None: one pass)
    #: one prompt's prefill, chunk by chunk (a single part when it runs in one pass): TTFT_1 = sum of their times
    chunks: tuple[ChunkPart, ...] = ()


class DecodeResult(_Frozen):
    """Decode over the output as the context grows."""

    batch: int
    micro_batch: int  # sequences per pipeline micro-batch, ceil(B / pp)
    decode_steps: int
    mean_context_tokens: float  # tokens cached before the mean step
    at_mean: IterationParts  # the iteration at the mean context
    step_s: float  # mean over the output: time between two tokens of one sequence
    step_first_s: float
    step_last_s: float
    convexity_gap_s: float  # step_s - at_mean.time_s
    tokens_per_s: float  # all replicas
    tokens_per_s_replica: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    comm_s_per_step: float  # exposed TP/EP communication and PP hops in one step
    bound: str
    replicas: int
    steps: tuple[Step, ...] = ()


class SpeedSummary(_Frozen):
    """Every number the Speed page, the CLI and the math page show, with the chain behind them."""

    prefill: PrefillResult
    decode: DecodeResult
    spec: SpecResult | None
    e2e_s: float  # one request of the batch: TTFT + (O - 1) decode steps
    compute_bound_batch: int | None  # at the mean decode context; None: never
    compute_bound_batch_short: int | None  # with (almost) nothing cached: the weights-only crossover
    steps: tuple[Step, ...]
    sections: tuple[tuple[str, tuple[str, ...]], ...]  # (title, step keys) in order


# --- prefill ---------------------------------------------------------------------------------------


def pipeline_fill_s(t_micro_s, m, busy_s, comm_s):
    """A batch of ``m`` micro-batches through an empty pipeline [s]: one micro-batch's trip through the
    ``pp`` stages (``StepModel.pipelined_s``) plus the ``m - 1`` stage times the last micro-batch waits to
    enter the first stage::

        t = t_mb + (m - 1)(t_b + t_x) = (m + pp - 1)(t_b + t_x) + (pp - 1) hop + t_o

    with the stage times of one micro-batch (GPipe, Huang et al. arXiv 1811.06965: ``m + pp - 1`` stage
    slots for ``m`` micro-batches over ``pp`` stages). The simulator's iterations follow one another with the
    pipeline already full, so they charge ``pipelined_s`` alone; a lone batch (the Speed page's TTFT) also
    pays the fill. Arrays welcome."""
    return t_micro_s + (m - 1) * (busy_s + comm_s)


def prefill_numbers(sm: StepModel, cfg: RabitConfig, batch: int, tr: Trace = NO_TRACE) -> PrefillNumbers:
    """The batch's prompts prefilled together, recorded on ``tr``: with a pipeline, as ``m = min(pp, B)``
    micro-batches of ``B / m`` prompts that follow one another through the stages (``StepModel.pipelined_s``)."""
    on = tr.enabled
    B, I = batch, cfg.input_tokens
    c = math.floor(cfg.prefix_cache_frac * I)  # < I because the share is < 1
    if on:
        tr.step(
            "prefill_cached_tokens",
            "Cached prefix per prompt",
            "c",
            "floor(f_c * s_in)",
            c,
            unit="tokens",
            f_c=cfg.prefix_cache_frac,
            s_in=I,
            note="read from the prefix cache, not recomputed",
        )
    u = I - c
    mdl = sm.model
    chunk = prefill_chunk_tokens(cfg)
    if chunk is not None:
        return chunked_prefill(sm, cfg, B, c, chunk, tr)
    a_seq = attended_pairs(mdl, c, I)
    r_seq = float(sm.kv_read_tokens(c))
    T, A, R = float(B * u), B * a_seq, B * r_seq
    m = float(sm.micro_batches(float(B)))
    if on:
        tr.step(
            "prefill_tokens",
            "Prefill: new tokens in the iteration",
            "T_p",
            "B * (s_in - c)",
            T,
            unit="tokens",
            B=B,
            s_in=I,
            c=c,
            note="all prompts of the batch in one iteration"
            if m == 1
            else f"all prompts of the batch, in {sig(m, 6)} pipeline micro-batches",
        )
        if mdl.sliding_layers:
            tr.step(
                "prefill_pairs",
                "Prefill: attended (query, key) pairs",
                "A_p",
                "B * a_s",
                A,
                unit="pairs",
                B=B,
                a_s=a_seq,
                note=f"causal attention; {mdl.sliding_layers} of {mdl.attention_layers} layers see at most "
                f"{mdl.sliding_window} keys",
            )
            tr.step(
                "prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * r_s", R, unit="tokens", B=B, r_s=r_seq
            )
        else:
            tr.step(
                "prefill_pairs",
                "Prefill: attended (query, key) pairs",
                "A_p",
                "B * (s_in * (s_in + 1) - c * (c + 1)) / 2",
                A,
                unit="pairs",
                latex=r"[B] \cdot \frac{[s_in] ([s_in] + 1) - [c] ([c] + 1)}{2}",
                B=B,
                s_in=I,
                c=c,
                note="causal attention: the query at position j sees j keys (itself included)",
            )
            tr.step("prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * c", R, unit="tokens", B=B, c=c)
    pp = sm.pp
    whole = m == 1  # the whole batch in one iteration, else one micro-batch of B / m prompts
    if on and not whole:
        tr.step(
            "prefill_micro_batches",
            "Prefill: micro-batches in the pipeline",
            "m",
            "min(pp, B)",
            m,
            B=B,
            pp=pp,
            note=f"the {B} prompts split by sequence into micro-batches that follow one another through the "
            f"{pp} stages; below, one micro-batch of T = T_p / m = {T / m:,.0f} tokens",
        )
    it = iteration(
        sm,
        T / m,
        A / m,
        R / m,
        B / m,
        tr=tr,
        key="prefill",
        what="Prefill" if whole else "Prefill micro-batch",
        final_key=None if whole else "prefill_micro_s",
        final_label="Time to first token (one batch)" if whole else "Prefill: one micro-batch through all stages",
        final_symbol=r"\mathrm{TTFT}" if whole else r"t_{mb}",
        note="the whole batch prefilled in one iteration"
        if whole
        else f"the micro-batch passes the {pp} stages in turn (each stage re-reads its weights for every micro-batch)",
    )
    t_mb = float(sm.pipelined_s(T, A, R, float(B)))  # = it.time_s: one micro-batch through all stages
    ttft = float(pipeline_fill_s(t_mb, m, it.busy_s, it.comm_s))
    if on and not whole:
        tr.step(
            "prefill_s",
            "Time to first token (one batch)",
            r"\mathrm{TTFT}",
            "t_mb + (m - 1) * (t_b + t_x)",
            ttft,
            unit="s",
            latex=r"[t_mb] + ([m] - 1) \left([t_b] + [t_x]\right)",
            units={"t_mb": "s", "t_b": "s", "t_x": "s"},
            t_mb=it.time_s,
            m=m,
            t_b=it.busy_s,
            t_x=it.comm_s,
            note=f"the last micro-batch enters the first stage {sig(m - 1, 6)} stage time(s) after the first: "
            f"(m + pp - 1) = {sig(m + pp - 1, 6)} stage times + the hops + the fixed costs, against {pp} x the "
            f"whole batch's stage time with the stages in turn (GPipe, arXiv 1811.06965)",
        )
    one = iteration(
        sm,
        float(u),
        a_seq,
        r_seq,
        1.0,
        tr=tr,
        key="ttft_one",
        what="Prefill of one prompt",
        compact=True,
        final_label="Time to first token (one prompt alone)",
        final_symbol=r"\mathrm{TTFT}_1",
        note="the same iteration with B = 1",
    )
    one_pass = PromptChunks(u, np.array([float(c)]), np.array([float(u)]), np.array([a_seq]), np.array([r_seq]))
    return PrefillNumbers(B, I, c, u, T, A, R, it, one, m, ttft, chunks=one_pass)


# --- decode ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Decode:
    batch: int
    b: int
    N: int
    ctx: float  # cached tokens before the mean step
    s_read: float  # cached tokens read per sequence (window-clipped)
    s_att: float  # keys attended per sequence
    mid: IterationParts
    mean_s: float
    first_s: float
    last_s: float


def decode_times(sm: StepModel, b: int, I: int, N: int, points: int = MAX_DECODE_POINTS):
    """(n, step times) for decode steps n = 1 .. N (exact up to ``points``, else a uniform grid)."""
    n = np.arange(1, N + 1, dtype=float) if N <= points else np.linspace(1.0, float(N), points)
    R = I + n - 1
    t = sm.iteration_s(
        np.full_like(n, float(b)),
        b * np.asarray(sm.kv_read_tokens(R + 1), dtype=float),
        b * np.asarray(sm.kv_read_tokens(R), dtype=float),
    )
    return n, np.asarray(t, dtype=float)


def mean_over_steps(n: np.ndarray, t: np.ndarray, N: int) -> float:
    """The mean of N decode step times from their values ``t`` at steps ``n`` (:func:`decode_times`): the plain
    mean when every step is there, else the trapezoid on the uniform grid [s]."""
    if len(n) == N:
        return float(t.mean())
    return float(((t[1:] + t[:-1]) / 2).mean())  # trapezoid on a uniform grid


def decode_numbers(sm: StepModel, cfg: RabitConfig, batch: int, tr: Trace = NO_TRACE) -> _Decode:
    """The decode steps of the batch over its output, their mean and the step at the mean context, recorded
    on ``tr``: ``b = ceil(B / pp)`` sequences per micro-batch, step ``n`` finding ``I + n - 1`` tokens cached."""
    on = tr.enabled
    pp = sm.pp
    b = math.ceil(batch / pp)
    I = cfg.input_tokens
    N = max(cfg.output_tokens - 1, 1)
    ctx = I + (N - 1) / 2
    if on:
        tr.step(
            "decode_micro_batch",
            "Decode: sequences per micro-batch",
            "b",
            "ceil(B / pp)",
            b,
            unit="seq",
            B=batch,
            pp=pp,
            note="pp micro-batches in flight, one per pipeline stage" if pp > 1 else "no pipeline: the whole batch",
        )
        tr.step(
            "decode_steps",
            "Decode steps per request",
            "N",
            "max(s_out - 1, 1)",
            N,
            unit="steps",
            s_out=cfg.output_tokens,
            note="the prefill pass emits the first output token",
        )
        tr.step(
            "decode_context_tokens",
            "Cached tokens before the mean step",
            r"\bar{s}",
            "s_in + (N - 1) / 2",
            ctx,
            unit="tokens",
            s_in=I,
            N=N,
            note="step n (n = 1..N) finds s_in + n - 1 tokens cached; this is their mean",
        )
    s_read, s_att = float(sm.kv_read_tokens(ctx)), float(sm.kv_read_tokens(ctx + 1))
    A, R = b * s_att, b * s_read
    mdl = sm.model
    if on and mdl.sliding_layers:
        tr.step(
            "decode_pairs",
            "Decode: attended pairs",
            "A_d",
            "b * s_a",
            A,
            unit="pairs",
            b=b,
            s_a=s_att,
            note=f"sliding-window layers see at most {mdl.sliding_window} keys",
        )
        tr.step("decode_kv_tokens", "Decode: cached tokens read", "R_d", "b * s_r", R, unit="tokens", b=b, s_r=s_read)
    elif on:
        tr.step(
            "decode_pairs",
            "Decode: attended pairs",
            "A_d",
            "b * (s_ctx + 1)",
            A,
            unit="pairs",
            b=b,
            s_ctx=ctx,
            note="each new token attends the cache and itself",
        )
        tr.step("decode_kv_tokens", "Decode: cached tokens read", "R_d", "b * s_ctx", R, unit="tokens", b=b, s_ctx=ctx)
    mid = iteration(
        sm,
        float(b),
        A,
        R,
        tr=tr,
        key="decode_mid",
        what="Decode",
        final_label="Decode step at the mean context",
        final_symbol=r"t_{mid}",
        note="time between two tokens of one sequence",
    )
    n, t = decode_times(sm, b, I, N)
    mean_s, first_s, last_s = mean_over_steps(n, t, N), float(t[0]), float(t[-1])
    if on:
        gap = mean_s - mid.time_s
        gap = 0.0 if abs(gap) <= 1e-9 * mean_s else gap  # float noise when one limit binds throughout
        tr.step(
            "decode_step_s",
            "Decode step (mean over the output)",
            "t_d",
            "t_mid + delta",
            mean_s,
            unit="s",
            units={"t_mid": "s", "delta": "s"},
            t_mid=mid.time_s,
            delta=gap,
            note=f"mean of the N per-step times as the context grows ({fmt_time(first_s)} first, "
            f"{fmt_time(last_s)} last); equals the mid step while one limit binds throughout, since every "
            "part is linear in the context; delta is the gap when the bound switches",
        )
    return _Decode(batch, b, N, ctx, s_read, s_att, mid, mean_s, first_s, last_s)


def replicas_of(cfg: RabitConfig) -> int:
    return cfg.dp


@dataclass(frozen=True)
class _Rates:
    replicas: int
    comm_s_per_step: float
    per_user: float  # tokens/s of one sequence
    replica: float  # tokens/s of one replica
    total: float  # tokens/s of all replicas
    per_gpu: float
    e2e_s: float


def decode_rates(cfg: RabitConfig, sm: StepModel, d: _Decode, prefill_s: float, tr: Trace = NO_TRACE) -> _Rates:
    """Communication per decode step, the per-user, replica, aggregate and per-GPU decode rates, and the
    end-to-end latency of one request of the batch (TTFT + (O - 1) decode steps), recorded on ``tr``."""
    on = tr.enabled
    B, b, pp = d.batch, d.b, sm.pp
    comm = pp * d.mid.comm_s + d.mid.hops_s
    r_u = 1 / d.mean_s
    r_r = B / d.mean_s
    dp = replicas_of(cfg)
    r = r_r * dp
    r_g = r / cfg.gpus
    e2e = prefill_s + (cfg.output_tokens - 1) * d.mean_s
    if not on:
        return _Rates(dp, comm, r_u, r_r, r, r_g, e2e)
    tr.step(
        "decode_comm_per_step_s",
        "Communication per decode step",
        "t_{x,d}",
        "pp * t_x + (pp - 1) * (a_h + b_h * b)",
        comm,
        unit="s",
        units={"t_x": "s", "a_h": "s", "b_h": "s"},
        pp=pp,
        t_x=d.mid.comm_s,
        a_h=sm.pp_hop_alpha,
        b_h=sm.pp_hop_beta,
        b=b,
        note="at the mean context",
    )
    tr.step(
        "tokens_per_s_per_user",
        "Per-user decode rate",
        "r_u",
        "1 / t_d",
        r_u,
        unit="tokens/s",
        t_d=d.mean_s,
        note="the textbook example: s_tok / (pp t_step + (pp - 1) t_pp)" if pp > 1 else "",
    )
    tr.step(
        "tokens_per_s_replica",
        "Decode throughput per replica",
        "r_r",
        "B / t_d",
        r_r,
        unit="tokens/s",
        B=B,
        t_d=d.mean_s,
        note="every sequence of the batch gets a token per step",
    )
    tr.step(
        "tokens_per_s",
        "Aggregate decode throughput",
        "r",
        "r_r * d_p",
        r,
        unit="tokens/s",
        r_r=r_r,
        d_p=dp,
        note=f"{dp} replica(s) of TP {cfg.tp} x PP {cfg.pp} on {cfg.gpus} GPUs",
    )
    tr.step("tokens_per_s_per_gpu", "Decode throughput per GPU", "r_g", "r / G", r_g, unit="tokens/s", r=r, G=cfg.gpus)
    tr.step(
        "e2e_s",
        "End-to-end latency of one request",
        "t_{e2e}",
        "TTFT + (s_out - 1) * t_d",
        e2e,
        unit="s",
        units={"TTFT": "s", "t_d": "s"},
        TTFT=prefill_s,
        s_out=cfg.output_tokens,
        t_d=d.mean_s,
        note="the batch prefilled together, then decoded together (no queueing)",
    )
    return _Rates(dp, comm, r_u, r_r, r, r_g, e2e)


# --- public views ------------------------------------------------------------------------------------


def _prefill_result(pf: PrefillNumbers, sm: StepModel, steps: tuple[Step, ...] = ()) -> PrefillResult:
    return PrefillResult(
        batch=pf.batch,
        prompt_tokens=pf.prompt,
        cached_tokens=pf.cached,
        uncached_tokens=pf.uncached,
        iteration=pf.it,
        ttft_s=pf.ttft_s,
        micro_batches=int(pf.m),
        ttft_one_s=pf.ttft_one_s if pf.chunked else pf.one.time_s,
        bound=pf.it.bound,
        steps=steps,
        chunk_tokens=pf.chunks.chunk if pf.chunked else None,
        chunks=chunk_parts(sm, pf.chunks),
    )


def _decode_result(d: _Decode, rates: _Rates, steps: tuple[Step, ...] = ()) -> DecodeResult:
    return DecodeResult(
        batch=d.batch,
        micro_batch=d.b,
        decode_steps=d.N,
        mean_context_tokens=d.ctx,
        at_mean=d.mid,
        step_s=d.mean_s,
        step_first_s=d.first_s,
        step_last_s=d.last_s,
        convexity_gap_s=d.mean_s - d.mid.time_s,
        tokens_per_s=rates.total,
        tokens_per_s_replica=rates.replica,
        tokens_per_s_per_user=rates.per_user,
        tokens_per_s_per_gpu=rates.per_gpu,
        comm_s_per_step=rates.comm_s_per_step,
        bound=d.mid.bound,
        replicas=rates.replicas,
        steps=steps,
    )


def prefill(dep: Deployment | RabitConfig, tr: Trace | None = None) -> PrefillResult:
    """TTFT of one batch of ``cfg.batch`` prompts of ``cfg.input_tokens``, cached prefix removed [s].

    The textbook example (Llama-3.1-70B, H100 SXM, TP 8, B 32, 4k prompts): about 4.6 s (the textbook chain: 3.16 s).
    """
    tr = tr if tr is not None else Trace()
    dep = as_deployment(dep)
    sm = StepModel.from_deployment(dep)
    pf = prefill_numbers(sm, dep.config, dep.config.batch, tr)
    return _prefill_result(pf, sm, tr.frozen())


def decode(dep: Deployment | RabitConfig, tr: Trace | None = None) -> DecodeResult:
    """Mean decode step over the output, throughput and per-user rate.

    The textbook example: about 12.9 ms per step, memory-bound (the textbook chain: 11.8 ms).
    """
    tr = tr if tr is not None else Trace()
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    pf = prefill_numbers(sm, cfg, cfg.batch)
    d = decode_numbers(sm, cfg, cfg.batch, tr)
    return _decode_result(d, decode_rates(cfg, sm, d, pf.ttft_s, tr), tr.frozen())


def speculative(dep: Deployment | RabitConfig) -> SpecResult | None:
    """Speculative decoding at the mean decode context (None when ``cfg.spec_method`` is "none")."""
    dep = as_deployment(dep)
    sm = StepModel.from_deployment(dep)
    d = decode_numbers(sm, dep.config, dep.config.batch)
    return speculation(dep, sm, d.batch, d.b, d.ctx, d.s_read, d.mid)


def speed_summary(dep: Deployment | RabitConfig) -> SpeedSummary:
    """The step model's constants, prefill, decode, speculative decoding and end-to-end latency, as one
    traced chain in sections."""
    tr = Trace()
    dep = as_deployment(dep)
    cfg = dep.config
    sections: list[tuple[str, tuple[str, ...]]] = []

    def section(title: str, start: int) -> None:
        sections.append((title, tuple(s.key for s in tr.steps[start:])))

    sm = StepModel.from_deployment(dep, tr)
    section("Per-GPU constants of the iteration model", 0)
    n0 = len(tr.steps)
    pf = prefill_numbers(sm, cfg, cfg.batch, tr)
    section("Prefill: time to first token", n0)
    n0 = len(tr.steps)
    d = decode_numbers(sm, cfg, cfg.batch, tr)
    rates = decode_rates(cfg, sm, d, pf.ttft_s, tr)
    section("Decode: step time, throughput and latency", n0)
    n0 = len(tr.steps)
    sp = speculation(dep, sm, d.batch, d.b, d.ctx, d.s_read, d.mid, tr)
    if sp is not None:
        section(f"Speculative decoding ({cfg.spec_method}, k = {cfg.spec_k}, alpha = {sig(cfg.spec_alpha, 6)})", n0)
    steps = tr.frozen()
    return SpeedSummary(
        prefill=_prefill_result(pf, sm, steps),
        decode=_decode_result(d, rates, steps),
        spec=sp,
        e2e_s=rates.e2e_s,
        compute_bound_batch=compute_bound_batch(dep),
        compute_bound_batch_short=compute_bound_batch(dep, context=1.0),
        steps=steps,
        sections=tuple(sections),
    )


# --- where decode turns compute-bound ------------------------------------------------------------


def compute_bound_batch(dep: Deployment | RabitConfig, context: float | None = None) -> int | None:
    """The smallest batch per replica at which a decode step is compute- rather than memory-bound.

    Evaluated at ``context`` cached tokens (default: the mean decode context). Compute grows as
    (f_t + f_a s)(b + T0) / pi and memory as (W + b k_g (s + 1)) / bw: when each sequence adds more
    KV bytes than its FLOPs cover (long contexts with GQA), the lines never cross and this is None.
    """
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    s = context if context is not None else cfg.input_tokens + (max(cfg.output_tokens - 1, 1) - 1) / 2
    s_r, s_a = float(sm.kv_read_tokens(s)), float(sm.kv_read_tokens(s + 1))

    def compute_wins(b: int) -> bool:
        c, mm, _ = sm.scalar_parts(float(b), b * s_a, b * s_r)
        return c >= mm

    hi = 1
    while not compute_wins(hi):
        hi *= 2
        if hi > 2**24:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if compute_wins(mid):
            hi = mid
        else:
            lo = mid
    return hi * sm.pp
