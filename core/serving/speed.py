"""Speed: the time of one scheduler iteration, the roofline every other estimate calls.

One iteration processes ``T`` new tokens (any mix of prefill-chunk and decode tokens), over
``A`` attended (query, key) pairs, reading the cached K/V of ``R`` context tokens (the RA-BIT spec)::

    FLOPs = 2 N_active T + 4 L (H d_head) A
    Bytes = weights read + KV read + KV written
    t     = max( FLOPs / (tp x peak x mfu_max x T/(T+T0)),  Bytes / (tp x BW x eta_bw) )
            + 2 L AllReduce(T h 2 B, tp) x (1 - overlap) + EP all-to-all + PP hops + step overhead

All quantities here are per GPU of one pipeline stage; a batch passes the ``pp`` stages in turn.

Modelling choices (physics over the textbook chain where they differ):
  * FP8/FP4 compute runs at the BF16 peak times the named speed-up assumptions (1.3-1.5x for FP8),
    never at the 2x datasheet ratio; the peak of the precision caps it. Parts without FP8 tensor
    cores (A100, ...) run FP8 weights as weight-only (W8A16) at the BF16 rate.
  * MoE: compute follows active parameters; weight traffic follows the experts the batch actually
    touches, E (1 - (1 - k/E)^T) per layer for uniform top-k routing; EP adds a dispatch and a
    combine all-to-all per MoE layer.
  * MLA reads its compressed latent cache (the KV bytes per token of :func:`core.physics.memory.kv_bytes_per_token`).
  * Sliding-window layers read at most the window (the caller passes ``R`` already clipped via
    :meth:`StepModel.kv_read_tokens`).

:class:`StepModel` precomputes every per-config constant once, so that one evaluation is a few
arithmetic operations and accepts numpy arrays (the simulator evaluates runs of iterations at once);
scalar arguments take a pure-Python path (about 1-2 us per call).

The views built on it (traced, for the Speed page, the CLI and "show the math"):

  * :func:`prefill` -- TTFT of one batch of ``B`` prompts of ``I`` tokens, the cached-prefix share
    removed: ``T = B (I - c)``, ``A = B sum_{j=c+1..I} j`` (causal attention, each query sees itself).
    With ``pp`` stages the prompts run as ``m = min(pp, B)`` micro-batches through an empty pipeline:
    ``(m + pp - 1)`` stage times of one micro-batch, the hops and the fixed costs (:func:`pipeline_fill_s`).
  * :func:`decode` -- the mean decode step over the output as the context grows. Decode step ``n``
    (n = 1 .. O-1; the prefill pass emits output token 1) feeds token ``n`` with ``I + n - 1`` tokens
    cached. With ``pp`` stages the batch runs as ``pp`` micro-batches of ``b = ceil(B/pp)`` in flight,
    so one sequence gets a token every ``pp t_stage(b) + (pp-1) t_hop + t_overhead`` (the textbook example's
    per-user formula) and the replica emits ``B`` tokens in that time. Aggregate throughput is
    ``B / t_step x replicas`` (the textbook example: T = n_tok / t_step x d_p).
  * :func:`speed_summary` -- both, plus speculative decoding and end-to-end latency, recorded as one
    chain of :class:`core.base.trace.Step` whose values come from :class:`StepModel`.
  * :func:`compute_bound_batch` -- where decode turns compute-bound. The chart sweeps (batch, context,
    roofline, collectives) and the textbook comparison live in :mod:`core.serving.speed_views`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.serving import acceptance as spec
from core.physics import Collectives
from core.config import COMPUTE_PRECISION, Deployment, RabitConfig, as_deployment
from core.physics import kv_bytes_per_token, kv_shard
from core.physics import (  # noqa: F401 - ACT_BYTES, StepModel, effective_peak_flop_per_s stay importable from here
    ACT_BYTES,
    IterationParts,
    StepModel,
    consts,
    effective_peak_flop_per_s,
    iteration,
    record_iteration,
    record_weights_read,
)
from core.catalog import ModelArch
from core.base import NO_TRACE, Step, Trace
from core.base import US, fmt_time

#: The textbook example's efficiencies, used only to rebuild the textbook chain for comparison.
TEXTBOOK_MBU = 0.8
TEXTBOOK_MFU = 0.74
#: Decode steps evaluated exactly up to this many; beyond, a uniform grid with the trapezoid rule.
MAX_DECODE_POINTS = 4097


# --- results ---------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class PrefillResult(_Frozen):
    """Time to first token of one batch of prompts (all prefilled in one iteration)."""

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


class SpecResult(_Frozen):
    """Speculative decoding at the mean decode context."""

    method: str
    k: int
    alpha: float
    draft_model: str | None
    tokens_per_pass: float
    draft_s: float  # all k draft steps of one round
    verify_s: float  # one target pass over k + 1 tokens per sequence
    round_s: float
    plain_step_s: float  # plain decode step at the same context
    cost_ratio: float  # round / plain step
    speedup: float
    break_even_alpha: float  # NaN when speculation never wins
    tokens_per_s_per_user: float
    tokens_per_s: float


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


class BatchPoint(_Frozen):
    batch: int
    ttft_s: float
    decode_step_s: float
    tokens_per_s: float
    tokens_per_s_per_user: float
    compute_s: float  # per stage, at the mean context
    memory_s: float
    comm_s: float
    bound: str
    fits: bool


class RooflinePoint(_Frozen):
    name: str
    intensity_flop_per_byte: float
    roof_flop_per_s: float  # F / max(t_compute, t_memory): on the model's roofline
    delivered_flop_per_s: float  # F x pp / iteration time: with communication and overhead
    bound: str


class Roofline(_Frozen):
    """Per-GPU roofline: datasheet and effective (with MFU, MBU) roofs and operating points."""

    peak_flop_per_s: float  # datasheet dense peak of the compute precision
    ceiling_flop_per_s: float  # effective peak x mfu_max (FP8/FP4 at the named speed-ups)
    bw_bytes_per_s: float
    bw_eff_bytes_per_s: float
    ridge_flop_per_byte: float  # datasheet
    ridge_eff_flop_per_byte: float
    points: tuple[RooflinePoint, ...]


class GapRow(_Frozen):
    """One change from the textbook chain towards ours; value is cumulative."""

    label: str
    value_s: float
    delta_s: float
    note: str


class TextbookComparison(_Frozen):
    decode: tuple[GapRow, ...]
    prefill: tuple[GapRow, ...]


class CollectiveRow(_Frozen):
    what: str
    bytes: float
    time_s: float
    how: str


class CollectiveView(_Frozen):
    topology: str
    rows: tuple[CollectiveRow, ...]


# --- shared arithmetic (traced and untraced paths use the same numbers) --------------------------------


def _attended_pairs(m: ModelArch, start: float, end: float) -> float:
    """Sum over query positions j = start+1 .. end of the keys each attends (itself included), averaged over the
    attention layers (a hybrid's state-space layers attend nothing; the FLOPs per pair count attention layers).

    Full layers: sum j = (end (end+1) - start (start+1)) / 2; sliding layers: sum min(j, w).
    """

    def full(n: float) -> float:
        return n * (n + 1) / 2

    if not m.sliding_layers:
        return full(end) - full(start)
    w = m.sliding_window

    def slide(n: float) -> float:
        return full(n) if n <= w else full(w) + (n - w) * w

    return (
        m.full_attention_layers * (full(end) - full(start)) + m.sliding_layers * (slide(end) - slide(start))
    ) / m.attention_layers


@dataclass(frozen=True)
class _Prefill:
    batch: int
    prompt: int
    cached: int
    uncached: int
    T: float
    A: float
    R: float
    it: IterationParts  # one micro-batch: the whole batch without a pipeline (or with one prompt)
    one: IterationParts
    m: float  # micro-batches, min(pp, B)
    ttft_s: float  # the whole batch through an empty pipeline


def pipeline_fill_s(t_micro_s, m, compute_s, memory_s, comm_s):
    """A batch of ``m`` micro-batches through an empty pipeline [s]: one micro-batch's trip through the
    ``pp`` stages (``StepModel.pipelined_s``) plus the ``m - 1`` stage times the last micro-batch waits to
    enter the first stage::

        t = t_mb + (m - 1)(max(t_c, t_m) + t_x) = (m + pp - 1)(max(t_c, t_m) + t_x) + (pp - 1) hop + t_o

    with the stage times of one micro-batch (GPipe, Huang et al. arXiv 1811.06965: ``m + pp - 1`` stage
    slots for ``m`` micro-batches over ``pp`` stages). The simulator's iterations follow one another with the
    pipeline already full, so they charge ``pipelined_s`` alone; a lone batch (the Speed page's TTFT) also
    pays the fill. Arrays welcome."""
    return t_micro_s + (m - 1) * (np.maximum(compute_s, memory_s) + comm_s)


def prefill_numbers(sm: StepModel, cfg: RabitConfig, batch: int) -> _Prefill:
    """The batch's prompts prefilled together: with a pipeline, as ``m = min(pp, B)`` micro-batches of
    ``B / m`` prompts that follow one another through the stages (``StepModel.pipelined_s``)."""
    I = cfg.input_tokens
    c = math.floor(cfg.prefix_cache_frac * I)  # < I because the share is < 1
    u = I - c
    a_seq = _attended_pairs(sm.model, c, I)
    r_seq = float(sm.kv_read_tokens(c))
    T, A, R = float(batch * u), batch * a_seq, batch * r_seq
    m = float(sm.micro_batches(float(batch)))
    it = iteration(sm, T / m, A / m, R / m, batch / m)
    t_mb = float(sm.pipelined_s(T, A, R, float(batch)))  # = it.time_s: one micro-batch through all stages
    ttft = float(pipeline_fill_s(t_mb, m, it.compute_s, it.memory_s, it.comm_s))
    return _Prefill(batch, I, c, u, T, A, R, it, iteration(sm, float(u), a_seq, r_seq, 1.0), m, ttft)


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


def _mean_over_steps(n: np.ndarray, t: np.ndarray, N: int) -> float:
    if len(n) == N:
        return float(t.mean())
    return float(((t[1:] + t[:-1]) / 2).mean())  # trapezoid on a uniform grid


def decode_numbers(sm: StepModel, cfg: RabitConfig, batch: int) -> _Decode:
    b = math.ceil(batch / sm.pp)
    I = cfg.input_tokens
    N = max(cfg.output_tokens - 1, 1)
    ctx = I + (N - 1) / 2
    s_read, s_att = float(sm.kv_read_tokens(ctx)), float(sm.kv_read_tokens(ctx + 1))
    mid = iteration(sm, float(b), b * s_att, b * s_read)
    n, t = decode_times(sm, b, I, N)
    return _Decode(batch, b, N, ctx, s_read, s_att, mid, _mean_over_steps(n, t, N), float(t[0]), float(t[-1]))


def replicas_of(cfg: RabitConfig) -> int:
    return cfg.dp


# --- traced chain ------------------------------------------------------------------------------------


def _record_setup(tr: Trace, dep: Deployment, sm: StepModel) -> None:
    cfg, m, g = dep.config, dep.model, dep.gpu
    a = cfg.assumptions
    tp, pp, ep = cfg.tp, cfg.pp, cfg.ep
    P_act = tr.step(
        "active_matmul_params",
        "Active parameters doing matmuls per token",
        "P_act",
        "P_act",
        m.active_matmul_params(),
        P_act=m.active_matmul_params(),
        note="the input embedding is a lookup, not a matmul"
        + (f"; MoE: {m.experts_per_tok} of {m.num_experts} routed experts per token" if m.is_moe else ""),
    )
    tr.step(
        "flop_per_token",
        "Matmul FLOPs per token per GPU",
        "f_t",
        "2 * P_act / (tp * pp)",
        sm.flop_per_token,
        unit="FLOP",
        latex=r"\frac{2 [P_act]}{[tp] \cdot [pp]}",
        P_act=P_act,
        tp=tp,
        pp=pp,
    )
    tr.step(
        "attn_flop_per_pair",
        "Attention FLOPs per (query, key) pair per GPU",
        "f_a",
        "4 * L * H_dh / (tp * pp)",
        sm.attn_flop_per_pair,
        unit="FLOP",
        latex=r"\frac{4 [L] \cdot [H_dh]}{[tp] \cdot [pp]}",
        L=m.attention_layers,
        H_dh=m.attn_qk_dim,
        tp=tp,
        pp=pp,
        note="QK^T and PV, 2 FLOP per multiply-add, every layer"
        + ("; MLA: H (d_qk + d_v) / 2" if m.is_mla else "")
        + (
            f" with attention ({m.attention_layers} of {m.num_layers}; the rest are state-space)"
            if m.ssm_layers
            else ""
        ),
    )
    prec = COMPUTE_PRECISION[cfg.weights]
    bf16 = g.peak_flop_per_s("bf16")
    pi = sm.peak_flop_per_s / a.mfu_max
    if prec in ("fp8", "int8") and g.supports(prec) or (prec == "fp4" and not g.supports("fp4") and g.supports("fp8")):
        p8 = g.peak_flop_per_s("fp8" if prec == "fp4" else prec)
        tr.step(
            "pi_flops",
            f"Compute peak per GPU ({prec.upper()})",
            r"\pi_{flops}",
            "min(pi_bf16 * s_8, pi_8)",
            pi,
            unit="FLOP/s",
            units={"pi_bf16": "FLOP/s", "pi_8": "FLOP/s", "s_8": "x"},
            pi_bf16=bf16,
            s_8=a.fp8_speedup,
            pi_8=p8,
            note="FP8 gains what measured kernels give (assumption fp8_speedup), not the 2x datasheet ratio"
            + ("; this part has no FP4 tensor cores, so FP4 weights run at FP8" if prec == "fp4" else ""),
        )
    elif prec == "fp4" and g.supports("fp4"):
        tr.step(
            "pi_flops",
            "Compute peak per GPU (FP4)",
            r"\pi_{flops}",
            "min(pi_bf16 * s_8 * s_4, pi_4)",
            pi,
            unit="FLOP/s",
            units={"pi_bf16": "FLOP/s", "pi_4": "FLOP/s", "s_8": "x", "s_4": "x"},
            pi_bf16=bf16,
            s_8=a.fp8_speedup,
            s_4=a.fp4_speedup,
            pi_4=g.peak_flop_per_s("fp4"),
            note="FP4 = BF16 x fp8_speedup x fp4_speedup, capped by the FP4 datasheet peak",
        )
    else:
        tr.step(
            "pi_flops",
            "Compute peak per GPU (BF16)",
            r"\pi_{flops}",
            "pi_bf16",
            pi,
            unit="FLOP/s",
            units={"pi_bf16": "FLOP/s"},
            pi_bf16=bf16,
            note=f"{g.name}: dense BF16 datasheet peak"
            + (f"; {cfg.weights} weights are dequantised to BF16 (weight-only)" if cfg.weights != "bf16" else ""),
        )
    tr.step(
        "pi_bw",
        "HBM bandwidth per GPU",
        r"\pi_{bw}",
        "pi_bw",
        g.memory_bw_bytes_per_s,
        unit="B/s",
        units={"pi_bw": "B/s"},
        pi_bw=g.memory_bw_bytes_per_s,
        note=f"{g.name} datasheet",
    )
    b_w = cfg.weight_bytes_per_param
    p_expert_all = m.moe_layers * m.num_experts * m.expert_params()
    dense_q = m.quantizable_params() - p_expert_all
    dense_r = m.total_params() - m.quantizable_params() - m.embedding_params()
    tr.step(
        "weights_read_bytes",
        "Dense weights read per iteration per GPU",
        "W_d",
        "(P_q * b_w + P_r * 2) / (tp * pp)",
        sm.dense_weight_bytes,
        unit="B",
        latex=r"\frac{[P_q] \cdot [b_w] + [P_r] \cdot 2}{[tp] \cdot [pp]}",
        P_q=dense_q,
        b_w=b_w,
        P_r=dense_r,
        tp=tp,
        pp=pp,
        note="block linears in the weight format; LM head and norms in BF16; the input embedding is a "
        "lookup and is not streamed" + ("; routed experts below" if m.is_moe else ""),
    )
    if m.is_moe:
        split = ep if ep > 1 else tp
        tr.step(
            "expert_bytes",
            "One routed expert's bytes per GPU (stage layers)",
            "w_e",
            "P_e * b_w * L_moe / (pp * s_e)",
            sm.expert_bytes_per_gpu_per_expert,
            unit="B",
            latex=r"\frac{[P_e] \cdot [b_w] \cdot [L_moe]}{[pp] \cdot [s_e]}",
            P_e=m.expert_params(),
            b_w=b_w,
            L_moe=m.moe_layers,
            pp=pp,
            s_e=split,
            note=f"experts split {split} ways by " + ("EP (whole experts per GPU)" if ep > 1 else "TP (slices)"),
        )
    k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem)
    tr.step(
        "kv_read_bytes_per_token",
        "KV bytes per cached token per GPU",
        "k_g",
        "k_t / (s_kv * pp)",
        sm.kv_bytes_per_token,
        unit="B",
        latex=r"\frac{[k_t]}{[s_kv] \cdot [pp]}",
        units={"k_t": "B"},
        k_t=k_t,
        s_kv=kv_shard(m, tp),
        pp=pp,
        note=(
            "MLA: the compressed latent, not split by TP"
            if m.is_mla
            else f"{m.num_kv_heads} KV heads split {kv_shard(m, tp)} ways by TP"
        ),
    )
    _record_comm_setup(tr, dep, sm)


def _record_comm_setup(tr: Trace, dep: Deployment, sm: StepModel) -> None:
    cfg, m, g, f = dep.config, dep.model, dep.gpu, dep.fabric
    a = cfg.assumptions
    tp = cfg.tp
    coll = Collectives.of(dep)
    h = m.hidden_size
    if tp > 1 and not coll.spans_nodes(tp):
        lv = coll.intra(tp)
        if g.topology == "mesh" and g.mesh_links:
            links = min(tp - 1, g.mesh_links)
            tr.step(
                "tp_bw_bytes_per_s",
                f"TP group bandwidth per GPU ({tp - 1 if tp - 1 <= g.mesh_links else links} mesh links)",
                r"\beta",
                "n_l * l_bw * eta_c",
                lv.bw_bytes_per_s,
                unit="B/s",
                units={"l_bw": "B/s", "eta_c": "frac"},
                n_l=links,
                l_bw=g.link_bw_gb_per_s * 1e9,
                eta_c=a.comm_bw_eff,
                note=f"{g.scale_up}: a full mesh; a group of p = {tp} GPUs uses p - 1 direct links",
            )
        else:
            tr.step(
                "tp_bw_bytes_per_s",
                "TP group bandwidth per GPU",
                r"\beta",
                "bw_su * eta_c",
                lv.bw_bytes_per_s,
                unit="B/s",
                units={"bw_su": "B/s", "eta_c": "frac"},
                bw_su=g.scale_up_bw_bytes_per_s,
                eta_c=a.comm_bw_eff,
                note=(
                    f"{g.scale_up}: any peer at the full per-GPU bandwidth"
                    if g.topology == "nvswitch"
                    else f"{g.scale_up}: over the host bus"
                )
                + " (per direction) x achieved share comm_bw_eff",
            )
        u = {"t0": "s", "alpha": "s", "beta": "B/s", "b_a": "B"}
        tr.step(
            "ar_ring_alpha_s",
            "Ring all-reduce: fixed time",
            "a_r",
            "t0 + 2 * (p - 1) * alpha",
            sm.tp_ar_alpha_ring,
            unit="s",
            units=u,
            t0=lv.base_s,
            p=tp,
            alpha=lv.latency_s,
            note="2(p-1) hops of alpha after the launch cost t0 (collective_base_us)",
        )
        tr.step(
            "ar_ring_beta_s",
            "Ring all-reduce: time per token",
            "b_r",
            "2 * (p - 1) / p * h * b_a / beta",
            sm.tp_ar_beta_ring,
            unit="s",
            latex=r"\frac{2 ([p] - 1)}{[p]} \cdot \frac{[h] \cdot [b_a]}{[beta]}",
            units=u,
            p=tp,
            h=h,
            b_a=ACT_BYTES,
            beta=lv.bw_bytes_per_s,
            note="each token adds h x 2 B to the buffer",
        )
        if lv.in_switch_reduction:
            tr.step(
                "ar_tree_alpha_s",
                "NVLS all-reduce: fixed time",
                "a_t",
                "t0 + 2 * alpha",
                sm.tp_ar_alpha_tree,
                unit="s",
                units=u,
                t0=lv.base_s,
                alpha=lv.latency_s,
                note="NVLink SHARP: one hop to the switch, which reduces and multicasts back",
            )
            tr.step(
                "ar_tree_beta_s",
                "NVLS all-reduce: time per token",
                "b_t",
                "h * b_a / beta",
                sm.tp_ar_beta_tree,
                unit="s",
                latex=r"\frac{[h] \cdot [b_a]}{[beta]}",
                units=u,
                h=h,
                b_a=ACT_BYTES,
                beta=lv.bw_bytes_per_s,
                note="each GPU sends its buffer once (NCCL 2.17+ NVLS)",
            )
        else:
            hops = int(np.ceil(np.log2(tp)))
            tr.step(
                "ar_tree_alpha_s",
                "Tree all-reduce: fixed time",
                "a_t",
                "t0 + 2 * d * alpha",
                sm.tp_ar_alpha_tree,
                unit="s",
                units=u,
                t0=lv.base_s,
                d=hops,
                alpha=lv.latency_s,
                note="double binary tree of depth d = ceil(log2 p): fewer hops, twice the bytes",
            )
            tr.step(
                "ar_tree_beta_s",
                "Tree all-reduce: time per token",
                "b_t",
                "2 * h * b_a / beta",
                sm.tp_ar_beta_tree,
                unit="s",
                latex=r"\frac{2 [h] \cdot [b_a]}{[beta]}",
                units=u,
                h=h,
                b_a=ACT_BYTES,
                beta=lv.bw_bytes_per_s,
            )
    elif tp > 1:
        t1, t2 = coll.all_reduce_s(h * ACT_BYTES, tp), coll.all_reduce_s(2 * h * ACT_BYTES, tp)
        tr.step(
            "ar_ring_alpha_s",
            "All-reduce across nodes: fixed time",
            "a_r",
            "2 * t_1 - t_2",
            sm.tp_ar_alpha_ring,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
            note=f"TP {tp} spans nodes: reduce-scatter in the node, all-reduce over {f.name}, all-gather; "
            "linearised from its cost at 1 and 2 tokens",
        )
        tr.step(
            "ar_ring_beta_s",
            "All-reduce across nodes: time per token",
            "b_r",
            "t_2 - t_1",
            sm.tp_ar_beta_ring,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
        )
    if sm.a2a_per_iter:
        per_tok = m.experts_per_tok * h * ACT_BYTES / cfg.ep
        t1, t2 = coll.all_to_all_s(per_tok, cfg.ep), coll.all_to_all_s(2 * per_tok, cfg.ep)
        tr.step(
            "a2a_alpha_s",
            "EP all-to-all: fixed time",
            "a_e",
            "2 * t_1 - t_2",
            sm.ep_a2a_alpha,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
            note=f"(p-1) alpha + (p-1)/p x n / beta over EP {cfg.ep}; n = top-k x h x 2 B per token / ep; "
            "dispatch and combine per MoE layer",
        )
        tr.step(
            "a2a_beta_s",
            "EP all-to-all: time per token",
            "b_e",
            "t_2 - t_1",
            sm.ep_a2a_beta,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
        )
    if cfg.pp > 1:
        cross = cfg.tp * cfg.pp > coll.domain
        t1, t2 = coll.p2p_s(h * ACT_BYTES, cross), coll.p2p_s(2 * h * ACT_BYTES, cross)
        tr.step(
            "hop_alpha_s",
            "Pipeline hop: fixed time",
            "a_h",
            "2 * t_1 - t_2",
            sm.pp_hop_alpha,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
            note="point-to-point send of the activations to the next stage: alpha + n / beta"
            + (f" over {f.name}" if cross else " over the scale-up fabric"),
        )
        tr.step(
            "hop_beta_s",
            "Pipeline hop: time per token",
            "b_h",
            "t_2 - t_1",
            sm.pp_hop_beta,
            unit="s",
            units={"t_1": "s", "t_2": "s"},
            t_1=float(t1),
            t_2=float(t2),
        )


def _record_prefill(tr: Trace, dep: Deployment, sm: StepModel, pf: _Prefill) -> None:
    cfg = dep.config
    B, I = pf.batch, pf.prompt
    tr.step(
        "prefill_cached_tokens",
        "Cached prefix per prompt",
        "c",
        "floor(f_c * s_in)",
        pf.cached,
        unit="tokens",
        f_c=cfg.prefix_cache_frac,
        s_in=I,
        note="read from the prefix cache, not recomputed",
    )
    tr.step(
        "prefill_tokens",
        "Prefill: new tokens in the iteration",
        "T_p",
        "B * (s_in - c)",
        pf.T,
        unit="tokens",
        B=B,
        s_in=I,
        c=pf.cached,
        note="all prompts of the batch in one iteration"
        if pf.m == 1
        else f"all prompts of the batch, in {pf.m:g} pipeline micro-batches",
    )
    m = sm.model
    if m.sliding_layers:
        tr.step(
            "prefill_pairs",
            "Prefill: attended (query, key) pairs",
            "A_p",
            "B * a_s",
            pf.A,
            unit="pairs",
            B=B,
            a_s=pf.A / B,
            note=f"causal attention; {m.sliding_layers} of {m.attention_layers} layers see at most {m.sliding_window} keys",
        )
        tr.step(
            "prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * r_s", pf.R, unit="tokens", B=B, r_s=pf.R / B
        )
    else:
        tr.step(
            "prefill_pairs",
            "Prefill: attended (query, key) pairs",
            "A_p",
            "B * (s_in * (s_in + 1) - c * (c + 1)) / 2",
            pf.A,
            unit="pairs",
            latex=r"[B] \cdot \frac{[s_in] ([s_in] + 1) - [c] ([c] + 1)}{2}",
            B=B,
            s_in=I,
            c=pf.cached,
            note="causal attention: the query at position j sees j keys (itself included)",
        )
        tr.step(
            "prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * c", pf.R, unit="tokens", B=B, c=pf.cached
        )
    if pf.m == 1:
        record_iteration(
            tr,
            sm,
            dep,
            "prefill",
            "Prefill",
            pf.T,
            pf.A,
            pf.R,
            pf.it,
            final_label="Time to first token (one batch)",
            final_symbol=r"\mathrm{TTFT}",
            note=f"bound: {pf.it.bound}; the whole batch prefilled in one iteration",
        )
    else:
        pp = sm.pp
        n_mb = tr.step(
            "prefill_micro_batches",
            "Prefill: micro-batches in the pipeline",
            "m",
            "min(pp, B)",
            pf.m,
            B=B,
            pp=pp,
            note=f"the {B} prompts split by sequence into micro-batches that follow one another through the "
            f"{pp} stages; below, one micro-batch of T = T_p / m = {pf.it.tokens:,.0f} tokens",
        )
        it = pf.it
        record_iteration(
            tr,
            sm,
            dep,
            "prefill",
            "Prefill micro-batch",
            it.tokens,
            it.pairs,
            it.kv_tokens,
            it,
            final_key="prefill_micro_s",
            final_label="Prefill: one micro-batch through all stages",
            final_symbol=r"t_{mb}",
            note=f"bound: {it.bound}; the micro-batch passes the {pp} stages in turn (each stage re-reads its "
            "weights for every micro-batch)",
        )
        tr.step(
            "prefill_s",
            "Time to first token (one batch)",
            r"\mathrm{TTFT}",
            "t_mb + (m - 1) * (max(t_c, t_m) + t_x)",
            pf.ttft_s,
            unit="s",
            latex=r"[t_mb] + ([m] - 1) \left(\max([t_c], [t_m]) + [t_x]\right)",
            units={"t_mb": "s", "t_c": "s", "t_m": "s", "t_x": "s"},
            t_mb=it.time_s,
            m=n_mb,
            t_c=it.compute_s,
            t_m=it.memory_s,
            t_x=it.comm_s,
            note=f"the last micro-batch enters the first stage {pf.m - 1:g} stage time(s) after the first: "
            f"(m + pp - 1) = {pf.m + pp - 1:g} stage times + the hops + the fixed costs, against {pp} x the "
            f"whole batch's stage time with the stages in turn (GPipe, arXiv 1811.06965)",
        )
    record_iteration(
        tr,
        sm,
        dep,
        "ttft_one",
        "Prefill of one prompt",
        float(pf.uncached),
        pf.A / B,
        pf.R / B,
        pf.one,
        compact=True,
        final_label="Time to first token (one prompt alone)",
        final_symbol=r"\mathrm{TTFT}_1",
        note="the same iteration with B = 1",
    )


def _record_decode(tr: Trace, dep: Deployment, sm: StepModel, d: _Decode, prefill_s: float) -> dict[str, float]:
    cfg = dep.config
    B, b, pp = d.batch, d.b, sm.pp
    tr.step(
        "decode_micro_batch",
        "Decode: sequences per micro-batch",
        "b",
        "ceil(B / pp)",
        b,
        unit="seq",
        B=B,
        pp=pp,
        note="pp micro-batches in flight, one per pipeline stage" if pp > 1 else "no pipeline: the whole batch",
    )
    tr.step(
        "decode_steps",
        "Decode steps per request",
        "N",
        "max(s_out - 1, 1)",
        d.N,
        unit="steps",
        s_out=cfg.output_tokens,
        note="the prefill pass emits the first output token",
    )
    tr.step(
        "decode_context_tokens",
        "Cached tokens before the mean step",
        r"\bar{s}",
        "s_in + (N - 1) / 2",
        d.ctx,
        unit="tokens",
        s_in=cfg.input_tokens,
        N=d.N,
        note="step n (n = 1..N) finds s_in + n - 1 tokens cached; this is their mean",
    )
    T = float(b)
    m = sm.model
    if m.sliding_layers:
        A = tr.step(
            "decode_pairs",
            "Decode: attended pairs",
            "A_d",
            "b * s_a",
            b * d.s_att,
            unit="pairs",
            b=b,
            s_a=d.s_att,
            note=f"sliding-window layers see at most {m.sliding_window} keys",
        )
        R = tr.step(
            "decode_kv_tokens",
            "Decode: cached tokens read",
            "R_d",
            "b * s_r",
            b * d.s_read,
            unit="tokens",
            b=b,
            s_r=d.s_read,
        )
    else:
        A = tr.step(
            "decode_pairs",
            "Decode: attended pairs",
            "A_d",
            "b * (s_ctx + 1)",
            b * d.s_att,
            unit="pairs",
            b=b,
            s_ctx=d.ctx,
            note="each new token attends the cache and itself",
        )
        R = tr.step(
            "decode_kv_tokens",
            "Decode: cached tokens read",
            "R_d",
            "b * s_ctx",
            b * d.s_read,
            unit="tokens",
            b=b,
            s_ctx=d.ctx,
        )
    record_iteration(
        tr,
        sm,
        dep,
        "decode_mid",
        "Decode",
        T,
        A,
        R,
        d.mid,
        final_label="Decode step at the mean context",
        final_symbol=r"t_{mid}",
        note=f"bound: {d.mid.bound}; time between two tokens of one sequence",
    )
    gap = d.mean_s - d.mid.time_s
    gap = 0.0 if abs(gap) <= 1e-9 * d.mean_s else gap  # float noise when one limit binds throughout
    t_d = tr.step(
        "decode_step_s",
        "Decode step (mean over the output)",
        "t_d",
        "t_mid + delta",
        d.mean_s,
        unit="s",
        units={"t_mid": "s", "delta": "s"},
        t_mid=d.mid.time_s,
        delta=gap,
        note=f"mean of the N per-step times as the context grows ({fmt_s(d.first_s)} first, "
        f"{fmt_s(d.last_s)} last); equals the mid step while one limit binds throughout, since every "
        "part is linear in the context; delta is the gap when the bound switches",
    )
    tr.step(
        "decode_comm_per_step_s",
        "Communication per decode step",
        "t_{x,d}",
        "pp * t_x + (pp - 1) * (a_h + b_h * b)",
        pp * d.mid.comm_s + d.mid.hops_s,
        unit="s",
        units={"t_x": "s", "a_h": "s", "b_h": "s"},
        pp=pp,
        t_x=d.mid.comm_s,
        a_h=sm.pp_hop_alpha,
        b_h=sm.pp_hop_beta,
        b=b,
        note="at the mean context",
    )
    r_u = tr.step(
        "tokens_per_s_per_user",
        "Per-user decode rate",
        "r_u",
        "1 / t_d",
        1 / d.mean_s,
        unit="tokens/s",
        t_d=t_d,
        note="the textbook example: s_tok / (pp t_step + (pp - 1) t_pp)" if pp > 1 else "",
    )
    r_r = tr.step(
        "tokens_per_s_replica",
        "Decode throughput per replica",
        "r_r",
        "B / t_d",
        B / d.mean_s,
        unit="tokens/s",
        B=B,
        t_d=t_d,
        note="every sequence of the batch gets a token per step",
    )
    dp = replicas_of(cfg)
    r = tr.step(
        "tokens_per_s",
        "Aggregate decode throughput",
        "r",
        "r_r * d_p",
        r_r * dp,
        unit="tokens/s",
        r_r=r_r,
        d_p=dp,
        note=f"{dp} replica(s) of TP {cfg.tp} x PP {cfg.pp} on {cfg.gpus} GPUs",
    )
    tr.step(
        "tokens_per_s_per_gpu",
        "Decode throughput per GPU",
        "r_g",
        "r / G",
        r / cfg.gpus,
        unit="tokens/s",
        r=r,
        G=cfg.gpus,
    )
    e2e = tr.step(
        "e2e_s",
        "End-to-end latency of one request",
        "t_{e2e}",
        "TTFT + (s_out - 1) * t_d",
        prefill_s + (cfg.output_tokens - 1) * d.mean_s,
        unit="s",
        units={"TTFT": "s", "t_d": "s"},
        TTFT=prefill_s,
        s_out=cfg.output_tokens,
        t_d=t_d,
        note="the batch prefilled together, then decoded together (no queueing)",
    )
    return {"r_u": r_u, "r_r": r_r, "r": r, "e2e": e2e}


def fmt_s(x: float) -> str:
    return fmt_time(x)


# --- speculative decoding ----------------------------------------------------------------------------


def _draft_step_model(dep: Deployment) -> StepModel:
    """The draft model on the target's GPUs (:meth:`core.config.Deployment.draft`), no scheduler cost.

    The draft's passes share the target's scheduler iteration, so their step overhead and per-sequence
    bookkeeping are not charged again (their kernel launches and sampling are).
    """
    return replace(StepModel.from_deployment(dep.draft()), overhead_s=0.0, seq_overhead_s=0.0)


def spec_numbers(dep: Deployment, sm: StepModel, d: _Decode):
    """(E, draft_s, draft details, verify IterationParts, T_v, A_v, R_v)."""
    cfg = dep.config
    k, alpha, b = cfg.spec_k, cfg.spec_alpha, d.b
    E = spec.expected_tokens_per_pass(alpha, k)
    a = cfg.assumptions
    detail: dict[str, float] = {}
    if cfg.spec_method == "draft":
        dsm = _draft_step_model(dep)
        ctx = d.ctx + (k - 1) / 2  # mean context of the k draft passes
        s_a, s_r = float(dsm.kv_read_tokens(ctx + 1)), float(dsm.kv_read_tokens(ctx))
        one = iteration(dsm, float(b), b * s_a, b * s_r)
        draft_s = k * one.time_s
        detail = {"t_dp": one.time_s, "ctx": ctx, "A": b * s_a, "R": b * s_r}
        detail["_sm"] = dsm  # type: ignore[assignment]
        detail["_it"] = one  # type: ignore[assignment]
    elif cfg.spec_method == "eagle":
        draft_s = k * a.eagle_draft_frac * d.mid.time_s
    else:  # ngram
        draft_s = a.ngram_draft_us * US
    T_v = float(b * (k + 1))
    A_v = b * sum(float(sm.kv_read_tokens(d.ctx + j)) for j in range(1, k + 2))
    R_v = b * d.s_read
    verify = iteration(sm, T_v, A_v, R_v, float(b))  # b sequences, k + 1 tokens each
    return E, draft_s, detail, verify, T_v, A_v, R_v


def _spec_result(dep: Deployment, sm: StepModel, d: _Decode, tr: Trace = NO_TRACE) -> SpecResult | None:
    cfg = dep.config
    if cfg.spec_method == "none":
        return None
    k, alpha = cfg.spec_k, cfg.spec_alpha
    E, draft_s, detail, verify, T_v, A_v, R_v = spec_numbers(dep, sm, d)
    plain = d.mid.time_s
    round_s = draft_s + verify.time_s
    ratio = round_s / plain
    alpha_star = spec.break_even_alpha(ratio, k)
    res = SpecResult(
        method=cfg.spec_method,
        k=k,
        alpha=alpha,
        draft_model=cfg.draft_model if cfg.spec_method == "draft" else None,
        tokens_per_pass=E,
        draft_s=draft_s,
        verify_s=verify.time_s,
        round_s=round_s,
        plain_step_s=plain,
        cost_ratio=ratio,
        speedup=E / ratio,
        break_even_alpha=alpha_star,
        tokens_per_s_per_user=E / round_s,
        tokens_per_s=d.batch * E / round_s * replicas_of(cfg),
    )
    if not tr.enabled:
        return res
    if alpha < 1:
        tr.step(
            "spec_tokens_per_pass",
            "Tokens per target pass (speculative)",
            "E",
            "(1 - alpha ** (k + 1)) / (1 - alpha)",
            E,
            unit="tokens",
            latex=r"\frac{1 - [alpha]^{[k] + 1}}{1 - [alpha]}",
            alpha=alpha,
            k=k,
            note="Leviathan et al. 2023, eq. 1: each drafted token accepted independently with rate alpha",
        )
    else:
        tr.step(
            "spec_tokens_per_pass",
            "Tokens per target pass (speculative)",
            "E",
            "k + 1",
            E,
            unit="tokens",
            k=k,
            note="alpha = 1: every drafted token is accepted",
        )
    if cfg.spec_method == "draft":
        dsm, one = detail["_sm"], detail["_it"]
        record_iteration(
            tr,
            dsm,
            dep.draft(),
            "spec_draft_pass",
            "Draft pass",
            float(d.b),
            detail["A"],
            detail["R"],
            one,
            compact=True,
            final_label=f"One draft pass ({cfg.draft_model}, TP {dsm.tp})",
            final_symbol=r"t_{dp}",
            note="the draft model's own iteration model at the mean context of the k passes, "
            "without a second scheduler overhead",
        )
        tr.step(
            "spec_draft_s",
            "Draft cost per round",
            r"t_{draft}",
            "k * t_dp",
            draft_s,
            unit="s",
            units={"t_dp": "s"},
            k=k,
            t_dp=one.time_s,
            note=f"{k} sequential draft passes",
        )
    elif cfg.spec_method == "eagle":
        tr.step(
            "spec_draft_s",
            "Draft cost per round",
            r"t_{draft}",
            "k * phi * t_mid",
            draft_s,
            unit="s",
            units={"t_mid": "s", "phi": "frac"},
            k=k,
            phi=cfg.assumptions.eagle_draft_frac,
            t_mid=plain,
            note="EAGLE-style head: one decoder layer + the LM head (assumption eagle_draft_frac)",
        )
    else:
        tr.step(
            "spec_draft_s",
            "Draft cost per round",
            r"t_{draft}",
            "t_ng",
            draft_s,
            unit="s",
            units={"t_ng": "s"},
            t_ng=draft_s,
            note="n-gram prompt lookup on the CPU (assumption ngram_draft_us)",
        )
    record_iteration(
        tr,
        sm,
        dep,
        "spec_verify",
        "Verification",
        T_v,
        A_v,
        R_v,
        verify,
        compact=True,
        final_label="Verification pass (k + 1 tokens per sequence)",
        final_symbol=r"t_{verify}",
        note=f"the target's iteration with T = b (k + 1) = {T_v:g} tokens at the mean context",
    )
    t_r = tr.step(
        "spec_round_s",
        "Speculative round",
        "t_r",
        "t_draft + t_verify",
        round_s,
        unit="s",
        units={"t_draft": "s", "t_verify": "s"},
        t_draft=draft_s,
        t_verify=verify.time_s,
    )
    c = tr.step(
        "spec_cost_ratio",
        "Round cost in plain decode steps",
        "c",
        "t_r / t_mid",
        ratio,
        unit="x",
        units={"t_r": "s", "t_mid": "s"},
        t_r=t_r,
        t_mid=plain,
    )
    tr.step(
        "spec_speedup",
        "Speculative speed-up per sequence",
        "S",
        "E / c",
        E / ratio,
        unit="x",
        E=E,
        c=c,
        note="above 1 speculation wins; verification turns compute-bound at large batch and the gain fades",
    )
    tr.step(
        "spec_break_even_alpha",
        "Break-even acceptance rate",
        r"\alpha^*",
        "alpha_star",
        alpha_star,
        unit="",
        latex=r"E^{-1}([c]) \text{ with } E(\alpha) = \frac{1 - \alpha^{[k] + 1}}{1 - \alpha}",
        alpha_star=alpha_star,
        c=ratio,
        k=k,
        note="solves (1 - a^(k+1)) / (1 - a) = c; below it speculation is slower"
        + ("; NaN: c > k + 1, it never wins here" if math.isnan(alpha_star) else ""),
    )
    tr.step(
        "spec_tokens_per_s_per_user",
        "Per-user rate with speculation",
        "r_{u,s}",
        "E / t_r",
        E / round_s,
        unit="tokens/s",
        E=E,
        t_r=t_r,
    )
    tr.step(
        "spec_tokens_per_s",
        "Aggregate rate with speculation",
        "r_s",
        "B * E / t_r * d_p",
        res.tokens_per_s,
        unit="tokens/s",
        B=d.batch,
        E=E,
        t_r=t_r,
        d_p=replicas_of(cfg),
    )
    return res


# --- public views ------------------------------------------------------------------------------------


def _prefill_result(pf: _Prefill, steps: tuple[Step, ...] = ()) -> PrefillResult:
    return PrefillResult(
        batch=pf.batch,
        prompt_tokens=pf.prompt,
        cached_tokens=pf.cached,
        uncached_tokens=pf.uncached,
        iteration=pf.it,
        ttft_s=pf.ttft_s,
        micro_batches=int(pf.m),
        ttft_one_s=pf.one.time_s,
        bound=pf.it.bound,
        steps=steps,
    )


def _decode_result(cfg: RabitConfig, d: _Decode, steps: tuple[Step, ...] = ()) -> DecodeResult:
    dp = replicas_of(cfg)
    r_r = d.batch / d.mean_s
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
        tokens_per_s=r_r * dp,
        tokens_per_s_replica=r_r,
        tokens_per_s_per_user=1 / d.mean_s,
        tokens_per_s_per_gpu=r_r * dp / cfg.gpus,
        comm_s_per_step=d.mid.pp * d.mid.comm_s + d.mid.hops_s,
        bound=d.mid.bound,
        replicas=dp,
        steps=steps,
    )


def prefill(dep: Deployment | RabitConfig, tr: Trace | None = None) -> PrefillResult:
    """TTFT of one batch of ``cfg.batch`` prompts of ``cfg.input_tokens``, cached prefix removed [s].

    The textbook example (Llama-3.1-70B, H100 SXM, TP 8, B 32, 4k prompts): about 4.6 s (the textbook chain: 3.16 s).
    """
    tr = tr if tr is not None else Trace()
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    pf = prefill_numbers(sm, cfg, cfg.batch)
    _record_prefill(tr, dep, sm, pf)
    return _prefill_result(pf, tr.frozen())


def decode(dep: Deployment | RabitConfig, tr: Trace | None = None) -> DecodeResult:
    """Mean decode step over the output, throughput and per-user rate.

    The textbook example: about 12.9 ms per step, memory-bound (the textbook chain: 11.8 ms).
    """
    tr = tr if tr is not None else Trace()
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    d = decode_numbers(sm, cfg, cfg.batch)
    pf = prefill_numbers(sm, cfg, cfg.batch)
    _record_decode(tr, dep, sm, d, pf.ttft_s)
    return _decode_result(cfg, d, tr.frozen())


def speculative(dep: Deployment | RabitConfig) -> SpecResult | None:
    """Speculative decoding at the mean decode context (None when ``cfg.spec_method`` is "none")."""
    dep = as_deployment(dep)
    sm = StepModel.from_deployment(dep)
    return _spec_result(dep, sm, decode_numbers(sm, dep.config, dep.config.batch))


def speed_summary(dep: Deployment | RabitConfig) -> SpeedSummary:
    """Prefill, decode, speculative decoding and end-to-end latency, as one traced chain."""
    tr = Trace()
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    sections: list[tuple[str, tuple[str, ...]]] = []

    def section(title: str, start: int) -> None:
        sections.append((title, tuple(s.key for s in tr.steps[start:])))

    n0 = len(tr.steps)
    _record_setup(tr, dep, sm)
    section("Per-GPU constants of the iteration model", n0)
    pf = prefill_numbers(sm, cfg, cfg.batch)
    n0 = len(tr.steps)
    _record_prefill(tr, dep, sm, pf)
    section("Prefill: time to first token", n0)
    d = decode_numbers(sm, cfg, cfg.batch)
    n0 = len(tr.steps)
    out = _record_decode(tr, dep, sm, d, pf.ttft_s)
    section("Decode: step time, throughput and latency", n0)
    n0 = len(tr.steps)
    sp = _spec_result(dep, sm, d, tr)
    if sp is not None:
        section(f"Speculative decoding ({cfg.spec_method}, k = {cfg.spec_k}, alpha = {cfg.spec_alpha:g})", n0)
    steps = tr.frozen()
    return SpeedSummary(
        prefill=_prefill_result(pf, steps),
        decode=_decode_result(cfg, d, steps),
        spec=sp,
        e2e_s=out["e2e"],
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
