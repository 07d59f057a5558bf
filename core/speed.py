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
  * MLA reads its compressed latent cache (the KV bytes per token of :func:`core.memory.kv_bytes_per_token`).
  * Sliding-window layers read at most the window (the caller passes ``R`` already clipped via
    :meth:`StepModel.kv_read_tokens`).

:class:`StepModel` precomputes every per-config constant once, so that one evaluation is a few
arithmetic operations and accepts numpy arrays (the simulator evaluates runs of iterations at once);
scalar arguments take a pure-Python path (about 1-2 us per call).

The views built on it (traced, for the Speed page, the CLI and "show the math"):

  * :func:`prefill` -- TTFT of one batch of ``B`` prompts of ``I`` tokens, the cached-prefix share
    removed: ``T = B (I - c)``, ``A = B sum_{j=c+1..I} j`` (causal attention, each query sees itself).
  * :func:`decode` -- the mean decode step over the output as the context grows. Decode step ``n``
    (n = 1 .. O-1; the prefill pass emits output token 1) feeds token ``n`` with ``I + n - 1`` tokens
    cached. With ``pp`` stages the batch runs as ``pp`` micro-batches of ``b = ceil(B/pp)`` in flight,
    so one sequence gets a token every ``pp t_stage(b) + (pp-1) t_hop + t_overhead`` (the textbook example's
    per-user formula) and the replica emits ``B`` tokens in that time. Aggregate throughput is
    ``B / t_step x replicas`` (the textbook example: T = n_tok / t_step x d_p).
  * :func:`speed_summary` -- both, plus speculative decoding and end-to-end latency, recorded as one
    chain of :class:`core.trace.Step` whose values come from :class:`StepModel`.
  * :func:`compute_bound_batch` -- where decode turns compute-bound. The chart sweeps (batch, context,
    roofline, collectives) and the textbook comparison live in :mod:`core.speed_views`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from pydantic import BaseModel, ConfigDict

from core import catalog
from core import speculative as spec
from core.collectives import Collectives
from core.config import COMPUTE_PRECISION, RabitConfig
from core.memory import kv_bytes_per_token, kv_shard
from core.model import ModelArch
from core.trace import NO_TRACE, Step, Trace
from core.units import MS, US, fmt_time
from core.catalog import fabric_of, gpu_of, model_of

#: Bytes per element of the activations moved by TP all-reduces and EP all-to-alls (BF16).
ACT_BYTES = 2.0
#: The textbook example's efficiencies, used only to rebuild the textbook chain for comparison.
TEXTBOOK_MBU = 0.8
TEXTBOOK_MFU = 0.74
#: Decode steps evaluated exactly up to this many; beyond, a uniform grid with the trapezoid rule.
MAX_DECODE_POINTS = 4097

_SCALAR = (int, float, np.integer, np.floating)


def effective_peak_flop_per_s(gpu: catalog.GpuSpec, weights: str, fp8_speedup: float, fp4_speedup: float) -> float:
    """Dense compute rate a weight format achieves on a part, before MFU [FLOP/s].

    BF16 peak x the named FP8 (and FP4) speed-up, capped by that precision's datasheet peak.
    H100 SXM FP8: min(989 x 1.4, 1979) = 1,385 TFLOP/s.
    """
    prec = COMPUTE_PRECISION[weights]
    bf16 = gpu.peak_flop_per_s("bf16")
    if prec in ("fp8", "int8") and gpu.supports(prec):
        return min(bf16 * fp8_speedup, gpu.peak_flop_per_s(prec))
    if prec == "fp4" and gpu.supports("fp4"):
        return min(bf16 * fp8_speedup * fp4_speedup, gpu.peak_flop_per_s("fp4"))
    if prec == "fp4" and gpu.supports("fp8"):
        return min(bf16 * fp8_speedup, gpu.peak_flop_per_s("fp8"))
    return bf16


@dataclass(frozen=True)
class StepModel:
    """Per-config constants of the iteration-time model. Times in seconds, per iteration."""

    model: ModelArch
    tp: int
    pp: int
    ep: int
    # compute
    flop_per_token: float  # 2 N_active_matmul / (tp pp): per GPU of one stage
    attn_flop_per_pair: float  # 4 L_stage (H d_head) / tp
    peak_flop_per_s: float  # effective peak x mfu_max
    ramp_tokens: float
    # memory
    dense_weight_bytes: float  # non-expert weights on one GPU
    expert_bytes_per_gpu_per_expert: float  # bytes of one routed expert held by one GPU, over the stage's layers
    kv_bytes_per_token: float  # per GPU (sharded, one stage)
    mem_bw_bytes_per_s: float  # BW x eta
    # communication
    tp_ar_alpha_ring: float
    tp_ar_beta_ring: float  # s per token
    tp_ar_alpha_tree: float
    tp_ar_beta_tree: float
    ar_per_iter: float  # all-reduces per iteration on one stage (2 per layer)
    ep_a2a_alpha: float
    ep_a2a_beta: float  # s per token
    a2a_per_iter: float
    pp_hop_alpha: float
    pp_hop_beta: float  # s per token
    comm_exposed: float  # 1 - overlap
    overhead_s: float

    @classmethod
    def from_config(cls, cfg: RabitConfig) -> "StepModel":
        m, g, f = model_of(cfg), gpu_of(cfg), fabric_of(cfg)
        a = cfg.assumptions
        tp, pp, ep = cfg.tp, cfg.pp, cfg.ep
        layers_stage = m.num_layers / pp
        peak = effective_peak_flop_per_s(g, cfg.weights, a.fp8_speedup, a.fp4_speedup) * a.mfu_max
        b_w = cfg.weight_bytes_per_param
        p_expert_all = m.moe_layers * m.num_experts * m.expert_params()
        dense_q = m.quantizable_params() - p_expert_all
        dense_rest = m.total_params() - m.quantizable_params()
        # the input embedding is a lookup: only the rows used are read, so leave it out of the traffic
        dense_bytes = (dense_q * b_w + (dense_rest - m.embedding_params()) * 2.0) / (tp * pp)
        expert_split = ep if ep > 1 else tp
        expert_bytes = m.expert_params() * b_w * (m.moe_layers / pp) / expert_split
        k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem) / (kv_shard(m, tp) * pp)
        coll = Collectives.for_cluster(g, f, cfg.gpus_per_node, a.comm_bw_eff, a.collective_base_us * 1e-6)
        h = m.hidden_size
        # TP all-reduce of T x h x 2 B: a min of two affine functions of T (ring, tree); see core.collectives.
        if tp > 1 and not coll.spans_nodes(tp):
            lv = coll.intra(tp)
            ar_a_ring = lv.base_s + 2 * (tp - 1) * lv.latency_s
            ar_b_ring = 2 * (tp - 1) / tp * h * ACT_BYTES / lv.bw_bytes_per_s
            ar_a_tree = lv.base_s + 2 * np.ceil(np.log2(tp)) * lv.latency_s
            ar_b_tree = 2 * h * ACT_BYTES / lv.bw_bytes_per_s
            if lv.in_switch_reduction:  # NVLS replaces the tree line: 2 alpha + n / beta
                ar_a_tree, ar_b_tree = lv.base_s + 2 * lv.latency_s, h * ACT_BYTES / lv.bw_bytes_per_s
        elif tp > 1:  # spans nodes: hierarchical cost, linearised from two evaluations
            t1, t2 = coll.all_reduce_s(h * ACT_BYTES, tp), coll.all_reduce_s(2 * h * ACT_BYTES, tp)
            ar_a_ring = ar_a_tree = float(2 * t1 - t2)
            ar_b_ring = ar_b_tree = float(t2 - t1)
        else:
            ar_a_ring = ar_b_ring = ar_a_tree = ar_b_tree = 0.0
        if ep > 1 and m.is_moe:
            # dispatch + combine: each GPU sends its 1/ep share of the tokens x top-k x h x 2 B
            per_tok = m.experts_per_tok * h * ACT_BYTES / ep
            t1, t2 = coll.all_to_all_s(per_tok, ep), coll.all_to_all_s(2 * per_tok, ep)
            a2a_a, a2a_b = float(2 * t1 - t2), float(t2 - t1)
            a2a_n = 2 * m.moe_layers / pp
        else:
            a2a_a = a2a_b = a2a_n = 0.0
        if pp > 1:
            cross = cfg.tp * pp > coll.domain
            t1, t2 = coll.p2p_s(h * ACT_BYTES, cross), coll.p2p_s(2 * h * ACT_BYTES, cross)
            hop_a, hop_b = float(2 * t1 - t2), float(t2 - t1)
        else:
            hop_a = hop_b = 0.0
        return cls(
            model=m, tp=tp, pp=pp, ep=ep,
            flop_per_token=2.0 * m.active_matmul_params() / (tp * pp),
            attn_flop_per_pair=4.0 * layers_stage * m.attn_qk_dim / tp,
            peak_flop_per_s=peak, ramp_tokens=a.mfu_ramp_tokens,
            dense_weight_bytes=dense_bytes, expert_bytes_per_gpu_per_expert=expert_bytes,
            kv_bytes_per_token=k_t, mem_bw_bytes_per_s=g.memory_bw_bytes_per_s * a.mbu,
            tp_ar_alpha_ring=ar_a_ring, tp_ar_beta_ring=ar_b_ring, tp_ar_alpha_tree=float(ar_a_tree),
            tp_ar_beta_tree=ar_b_tree, ar_per_iter=2 * layers_stage if tp > 1 else 0.0,
            ep_a2a_alpha=a2a_a, ep_a2a_beta=a2a_b, a2a_per_iter=a2a_n,
            pp_hop_alpha=hop_a, pp_hop_beta=hop_b,
            comm_exposed=1.0 - a.comm_overlap, overhead_s=a.step_overhead_ms * MS,
        )

    # --- the model -------------------------------------------------------------------------------------
    def experts_touched(self, tokens):
        """Expected distinct routed experts per MoE layer for ``tokens`` tokens (uniform top-k)."""
        m = self.model
        if not m.is_moe:
            return 0.0 * tokens
        return m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** tokens)

    def weights_read_bytes(self, tokens):
        """Weight bytes one GPU reads in an iteration of ``tokens`` tokens [B] (dense + touched experts)."""
        return self.dense_weight_bytes + self.experts_touched(tokens) * self.expert_bytes_per_gpu_per_expert

    def parts(self, tokens, pairs, kv_tokens):
        """(compute, memory, exposed communication, overhead) time of one stage [s]; arrays welcome.

        tokens: new tokens in the iteration (T); pairs: attended (query, key) pairs (A);
        kv_tokens: cached tokens whose K/V are read (R), summed over the sequences in the batch.
        """
        T = np.asarray(tokens, dtype=float)
        eff = T / (T + self.ramp_tokens)
        flops = self.flop_per_token * T + self.attn_flop_per_pair * np.asarray(pairs, dtype=float)
        t_cmp = np.where(T > 0, flops / (self.peak_flop_per_s * np.maximum(eff, 1e-12)), 0.0)
        # touched experts x one expert's bytes on this GPU (1/ep of the experts whole, or 1/tp of each)
        bytes_w = self.dense_weight_bytes + self.experts_touched(T) * self.expert_bytes_per_gpu_per_expert
        bytes_kv = (np.asarray(kv_tokens, dtype=float) + T) * self.kv_bytes_per_token
        t_mem = (bytes_w + bytes_kv) / self.mem_bw_bytes_per_s
        ar = np.minimum(self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T,
                        self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T) * self.ar_per_iter
        a2a = (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter
        t_comm = np.where(T > 0, (ar + a2a) * self.comm_exposed, 0.0)
        return t_cmp, t_mem, t_comm, self.overhead_s

    def scalar_parts(self, T: float, A: float, R: float) -> tuple[float, float, float]:
        """(compute, memory, exposed communication) of one stage for scalar arguments [s]; pure Python."""
        if T > 0:
            eff = T / (T + self.ramp_tokens)
            t_cmp = (self.flop_per_token * T + self.attn_flop_per_pair * A) / (self.peak_flop_per_s * max(eff, 1e-12))
            ar_ring = self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T
            ar_tree = self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T
            t_comm = ((ar_ring if ar_ring < ar_tree else ar_tree) * self.ar_per_iter
                      + (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter) * self.comm_exposed
        else:
            t_cmp = t_comm = 0.0
        w = self.dense_weight_bytes
        if self.expert_bytes_per_gpu_per_expert:
            m = self.model
            w += m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T) \
                * self.expert_bytes_per_gpu_per_expert
        t_mem = (w + (R + T) * self.kv_bytes_per_token) / self.mem_bw_bytes_per_s
        return t_cmp, t_mem, t_comm

    def hops_s(self, tokens):
        """Pipeline stage-to-stage sends of one iteration, all ``pp - 1`` hops [s]."""
        return (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * tokens)

    def iteration_s(self, tokens, pairs, kv_tokens):
        """Wall time of one iteration through all ``pp`` stages [s] (latency of the batch).

        Scalars in, float out (pure Python, for the simulator's inner loop); arrays in, array out.
        """
        if isinstance(tokens, _SCALAR) and isinstance(pairs, _SCALAR) and isinstance(kv_tokens, _SCALAR):
            T = float(tokens)
            t_cmp, t_mem, t_comm = self.scalar_parts(T, float(pairs), float(kv_tokens))
            stage = (t_cmp if t_cmp > t_mem else t_mem) + t_comm
            return self.pp * stage + (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T) + self.overhead_s
        t_cmp, t_mem, t_comm, ovh = self.parts(tokens, pairs, kv_tokens)
        T = np.asarray(tokens, dtype=float)
        stage = np.maximum(t_cmp, t_mem) + t_comm
        hops = (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T)
        return self.pp * stage + hops + ovh

    def bound(self, tokens, pairs, kv_tokens) -> str:
        """Which limit binds a (scalar) iteration: "compute", "memory" or "communication"."""
        t_cmp, t_mem, t_comm, _ = self.parts(tokens, pairs, kv_tokens)
        vals = {"compute": float(t_cmp), "memory": float(t_mem), "communication": float(t_comm)}
        return max(vals, key=lambda k: vals[k])

    def kv_read_tokens(self, context):
        """Cached tokens read per sequence at ``context`` tokens, sliding-window layers clipped; arrays welcome."""
        m = self.model
        if not m.sliding_layers:
            return context
        c = np.asarray(context, dtype=float)
        out = (m.full_attention_layers * c + m.sliding_layers * np.minimum(c, m.sliding_window)) / m.num_layers
        return float(out) if out.ndim == 0 else out


# --- results ---------------------------------------------------------------------------------------

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class IterationParts(_Frozen):
    """One iteration, taken apart. Work is per GPU of one stage; times in seconds."""

    tokens: float  # T
    pairs: float  # A
    kv_tokens: float  # R
    flop: float  # per GPU of one stage
    bytes: float  # per GPU of one stage: weights read + KV read + KV written
    compute_s: float  # one stage
    memory_s: float  # one stage
    comm_s: float  # one stage, exposed
    hops_s: float  # all pp - 1 stage hops
    overhead_s: float
    time_s: float  # pp (max(compute, memory) + comm) + hops + overhead
    pp: int
    bound: str

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes if self.bytes else math.inf


class PrefillResult(_Frozen):
    """Time to first token of one batch of prompts (all prefilled in one iteration)."""

    batch: int
    prompt_tokens: int
    cached_tokens: int  # per prompt, read from the prefix cache
    uncached_tokens: int  # per prompt, computed
    iteration: IterationParts
    ttft_s: float  # the whole batch
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

def _iteration(sm: StepModel, T: float, A: float, R: float) -> IterationParts:
    c, mm, x = sm.scalar_parts(T, A, R)
    hops = sm.hops_s(T)
    time = sm.iteration_s(float(T), float(A), float(R))
    vals = {"compute": c, "memory": mm, "communication": x}
    return IterationParts(
        tokens=T, pairs=A, kv_tokens=R, flop=sm.flop_per_token * T + sm.attn_flop_per_pair * A,
        bytes=sm.weights_read_bytes(T) + (R + T) * sm.kv_bytes_per_token, compute_s=c, memory_s=mm, comm_s=x,
        hops_s=hops, overhead_s=sm.overhead_s, time_s=time, pp=sm.pp, bound=max(vals, key=lambda k: vals[k]))


def _attended_pairs(m: ModelArch, start: float, end: float) -> float:
    """Sum over query positions j = start+1 .. end of the keys each attends (itself included), layer average.

    Full layers: sum j = (end (end+1) - start (start+1)) / 2; sliding layers: sum min(j, w).
    """
    def full(n: float) -> float:
        return n * (n + 1) / 2

    if not m.sliding_layers:
        return full(end) - full(start)
    w = m.sliding_window

    def slide(n: float) -> float:
        return full(n) if n <= w else full(w) + (n - w) * w

    return (m.full_attention_layers * (full(end) - full(start))
            + m.sliding_layers * (slide(end) - slide(start))) / m.num_layers


@dataclass(frozen=True)
class _Prefill:
    batch: int
    prompt: int
    cached: int
    uncached: int
    T: float
    A: float
    R: float
    it: IterationParts
    one: IterationParts


def _prefill_numbers(sm: StepModel, cfg: RabitConfig, batch: int) -> _Prefill:
    I = cfg.input_tokens
    c = math.floor(cfg.prefix_cache_frac * I)  # < I because the share is < 1
    u = I - c
    a_seq = _attended_pairs(sm.model, c, I)
    r_seq = float(sm.kv_read_tokens(c))
    T, A, R = float(batch * u), batch * a_seq, batch * r_seq
    return _Prefill(batch, I, c, u, T, A, R, _iteration(sm, T, A, R), _iteration(sm, float(u), a_seq, r_seq))


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


def _decode_times(sm: StepModel, b: int, I: int, N: int, points: int = MAX_DECODE_POINTS):
    """(n, step times) for decode steps n = 1 .. N (exact up to ``points``, else a uniform grid)."""
    n = np.arange(1, N + 1, dtype=float) if N <= points else np.linspace(1.0, float(N), points)
    R = I + n - 1
    t = sm.iteration_s(np.full_like(n, float(b)), b * np.asarray(sm.kv_read_tokens(R + 1), dtype=float),
                       b * np.asarray(sm.kv_read_tokens(R), dtype=float))
    return n, np.asarray(t, dtype=float)


def _mean_over_steps(n: np.ndarray, t: np.ndarray, N: int) -> float:
    if len(n) == N:
        return float(t.mean())
    return float(((t[1:] + t[:-1]) / 2).mean())  # trapezoid on a uniform grid


def _decode_numbers(sm: StepModel, cfg: RabitConfig, batch: int) -> _Decode:
    b = math.ceil(batch / sm.pp)
    I = cfg.input_tokens
    N = max(cfg.output_tokens - 1, 1)
    ctx = I + (N - 1) / 2
    s_read, s_att = float(sm.kv_read_tokens(ctx)), float(sm.kv_read_tokens(ctx + 1))
    mid = _iteration(sm, float(b), b * s_att, b * s_read)
    n, t = _decode_times(sm, b, I, N)
    return _Decode(batch, b, N, ctx, s_read, s_att, mid, _mean_over_steps(n, t, N), float(t[0]), float(t[-1]))


def _replicas(cfg: RabitConfig) -> int:
    return cfg.dp


# --- traced chain ------------------------------------------------------------------------------------

_U_ITER = {"T": "tokens", "A": "pairs", "R": "tokens", "f_t": "FLOP", "f_a": "FLOP", "pi_flops": "FLOP/s",
           "mfu": "frac", "T0": "tokens", "W_r": "B", "k_g": "B", "pi_bw": "B/s", "eta_bw": "frac",
           "n_ar": "", "a_r": "s", "a_t": "s", "b_r": "s", "b_t": "s", "n_a2a": "", "a_e": "s", "b_e": "s",
           "x_c": "frac", "pp": "", "a_h": "s", "b_h": "s", "t_o": "s", "t_c": "s", "t_m": "s", "t_x": "s",
           "F": "FLOP", "Y": "B"}

_FULL_ITER = ("pp * (max((f_t * T + f_a * A) / (pi_flops * mfu * T / (T + T0)), (W_r + (R + T) * k_g) / "
              "(pi_bw * eta_bw)) + (n_ar * min(a_r + b_r * T, a_t + b_t * T) + n_a2a * (a_e + b_e * T)) * x_c)"
              " + (pp - 1) * (a_h + b_h * T) + t_o")


def _consts(sm: StepModel, cfg: RabitConfig) -> dict[str, float]:
    """The StepModel constants as the named inputs of the recorded expressions."""
    a = cfg.assumptions
    g = gpu_of(cfg)
    return dict(f_t=sm.flop_per_token, f_a=sm.attn_flop_per_pair, mfu=a.mfu_max,
                pi_flops=sm.peak_flop_per_s / a.mfu_max, T0=sm.ramp_tokens, k_g=sm.kv_bytes_per_token,
                pi_bw=g.memory_bw_bytes_per_s, eta_bw=a.mbu, n_ar=sm.ar_per_iter, a_r=sm.tp_ar_alpha_ring,
                b_r=sm.tp_ar_beta_ring, a_t=sm.tp_ar_alpha_tree, b_t=sm.tp_ar_beta_tree, n_a2a=sm.a2a_per_iter,
                a_e=sm.ep_a2a_alpha, b_e=sm.ep_a2a_beta, x_c=sm.comm_exposed, pp=sm.pp, a_h=sm.pp_hop_alpha,
                b_h=sm.pp_hop_beta, t_o=sm.overhead_s)


def _record_weights_read(tr: Trace, sm: StepModel, key: str, T: float) -> float:
    m = sm.model
    if not sm.expert_bytes_per_gpu_per_expert:
        return sm.dense_weight_bytes
    return tr.step(key, "Weights read (dense + experts touched)", "W_r", "W_d + E * (1 - (1 - k / E) ** T) * w_e",
                   sm.weights_read_bytes(T), unit="B",
                   latex=r"[W_d] + [E] \left(1 - \left(1 - \frac{[k]}{[E]}\right)^{[T]}\right) [w_e]",
                   units={"W_d": "B", "w_e": "B", "T": "tokens"},
                   W_d=sm.dense_weight_bytes, E=m.num_experts, k=m.experts_per_tok, T=T,
                   w_e=sm.expert_bytes_per_gpu_per_expert,
                   note="expected distinct experts for T tokens with uniform top-k routing, per MoE layer")


def _record_iteration(tr: Trace, sm: StepModel, cfg: RabitConfig, p: str, what: str, T: float, A: float,
                      R: float, it: IterationParts, *, compact: bool = False, final_label: str | None = None,
                      final_symbol: str = "t", note: str = "") -> None:
    """Record the chain of one iteration under key prefix ``p``; the values come from ``it``."""
    k = _consts(sm, cfg)
    if compact:
        W_r = sm.weights_read_bytes(T)
        tr.step(f"{p}_s", final_label or f"{what}: iteration time", final_symbol, _FULL_ITER, it.time_s, unit="s",
                latex=r"t_{iter}([T], [A], [R])", units=_U_ITER, T=T, A=A, R=R, W_r=W_r, **k,
                note=note or "the same iteration formula as above, with these T, A and R")
        return
    W_r = _record_weights_read(tr, sm, f"{p}_weights_read_bytes", T)
    F = tr.step(f"{p}_flop", f"{what}: FLOPs per GPU", "F", "f_t * T + f_a * A", it.flop, unit="FLOP",
                latex=r"[f_t] \cdot [T] + [f_a] \cdot [A]", units=_U_ITER, f_t=k["f_t"], T=T, f_a=k["f_a"], A=A,
                note="matmuls (2 FLOP per active parameter per token) + attention (QK^T and PV per pair)")
    t_c = tr.step(f"{p}_compute_s", f"{what}: compute time", "t_c", "F / (pi_flops * mfu * T / (T + T0))",
                  it.compute_s, unit="s", latex=r"\frac{[F]}{[pi_flops] \cdot [mfu] \cdot \frac{[T]}{[T] + [T0]}}",
                  units=_U_ITER, F=F, pi_flops=k["pi_flops"], mfu=k["mfu"], T=T, T0=k["T0"],
                  note="efficiency ramps with tokens per iteration as T/(T+T0) (the RA-BIT spec, T0 = 64)")
    Y = tr.step(f"{p}_bytes", f"{what}: bytes moved per GPU", "Y", "W_r + (R + T) * k_g", it.bytes, unit="B",
                latex=r"[W_r] + ([R] + [T]) \cdot [k_g]", units=_U_ITER, W_r=W_r, R=R, T=T, k_g=k["k_g"],
                note="weights read + KV read (R cached tokens) + KV written (T new tokens)")
    t_m = tr.step(f"{p}_memory_s", f"{what}: memory time", "t_m", "Y / (pi_bw * eta_bw)", it.memory_s, unit="s",
                  latex=r"\frac{[Y]}{[pi_bw] \cdot [eta_bw]}", units=_U_ITER, Y=Y, pi_bw=k["pi_bw"],
                  eta_bw=k["eta_bw"], note="achieved HBM bandwidth = datasheet x MBU")
    t_x = tr.step(f"{p}_comm_s", f"{what}: exposed communication per stage", "t_x",
                  "(n_ar * min(a_r + b_r * T, a_t + b_t * T) + n_a2a * (a_e + b_e * T)) * x_c", it.comm_s,
                  unit="s", latex=r"\left([n_ar] \min([a_r] + [b_r] \cdot [T],\ [a_t] + [b_t] \cdot [T]) + "
                                  r"[n_a2a] ([a_e] + [b_e] \cdot [T])\right) \cdot [x_c]",
                  units=_U_ITER, n_ar=k["n_ar"], a_r=k["a_r"], b_r=k["b_r"], T=T, a_t=k["a_t"], b_t=k["b_t"],
                  n_a2a=k["n_a2a"], a_e=k["a_e"], b_e=k["b_e"], x_c=k["x_c"],
                  note="TP all-reduces of T x h x 2 B (2 per layer; the cheaper of ring and tree/NVLS) + EP "
                       "all-to-alls, times the share not hidden behind compute")
    tr.step(f"{p}_s", final_label or f"{what}: iteration time", final_symbol,
            "pp * (max(t_c, t_m) + t_x) + (pp - 1) * (a_h + b_h * T) + t_o", it.time_s, unit="s",
            latex=r"[pp] \left(\max([t_c], [t_m]) + [t_x]\right) + ([pp] - 1)([a_h] + [b_h] \cdot [T]) + [t_o]",
            units=_U_ITER, pp=sm.pp, t_c=t_c, t_m=t_m, t_x=t_x, a_h=k["a_h"], b_h=k["b_h"], T=T, t_o=k["t_o"],
            note=note or f"bound: {it.bound}; stages run in turn, plus stage hops and the scheduler overhead")


def _record_setup(tr: Trace, cfg: RabitConfig, sm: StepModel) -> None:
    m, g = model_of(cfg), gpu_of(cfg)
    a = cfg.assumptions
    tp, pp, ep = cfg.tp, cfg.pp, cfg.ep
    P_act = tr.step("active_matmul_params", "Active parameters doing matmuls per token", "P_act", "P_act",
                    m.active_matmul_params(), P_act=m.active_matmul_params(),
                    note="the input embedding is a lookup, not a matmul" + (
                        f"; MoE: {m.experts_per_tok} of {m.num_experts} routed experts per token" if m.is_moe else ""))
    tr.step("flop_per_token", "Matmul FLOPs per token per GPU", "f_t", "2 * P_act / (tp * pp)", sm.flop_per_token,
            unit="FLOP", latex=r"\frac{2 [P_act]}{[tp] \cdot [pp]}", P_act=P_act, tp=tp, pp=pp)
    tr.step("attn_flop_per_pair", "Attention FLOPs per (query, key) pair per GPU", "f_a", "4 * L * H_dh / (tp * pp)",
            sm.attn_flop_per_pair, unit="FLOP", latex=r"\frac{4 [L] \cdot [H_dh]}{[tp] \cdot [pp]}",
            L=m.num_layers, H_dh=m.attn_qk_dim, tp=tp, pp=pp,
            note="QK^T and PV, 2 FLOP per multiply-add, every layer" + (
                "; MLA: H (d_qk + d_v) / 2" if m.is_mla else ""))
    prec = COMPUTE_PRECISION[cfg.weights]
    bf16 = g.peak_flop_per_s("bf16")
    pi = sm.peak_flop_per_s / a.mfu_max
    if prec in ("fp8", "int8") and g.supports(prec) or (prec == "fp4" and not g.supports("fp4") and g.supports("fp8")):
        p8 = g.peak_flop_per_s("fp8" if prec == "fp4" else prec)
        tr.step("pi_flops", f"Compute peak per GPU ({prec.upper()})", r"\pi_{flops}", "min(pi_bf16 * s_8, pi_8)", pi,
                unit="FLOP/s", units={"pi_bf16": "FLOP/s", "pi_8": "FLOP/s", "s_8": "x"}, pi_bf16=bf16,
                s_8=a.fp8_speedup, pi_8=p8,
                note="FP8 gains what measured kernels give (assumption fp8_speedup), not the 2x datasheet ratio"
                + ("; this part has no FP4 tensor cores, so FP4 weights run at FP8" if prec == "fp4" else ""))
    elif prec == "fp4" and g.supports("fp4"):
        tr.step("pi_flops", "Compute peak per GPU (FP4)", r"\pi_{flops}", "min(pi_bf16 * s_8 * s_4, pi_4)", pi,
                unit="FLOP/s", units={"pi_bf16": "FLOP/s", "pi_4": "FLOP/s", "s_8": "x", "s_4": "x"},
                pi_bf16=bf16, s_8=a.fp8_speedup, s_4=a.fp4_speedup, pi_4=g.peak_flop_per_s("fp4"),
                note="FP4 = BF16 x fp8_speedup x fp4_speedup, capped by the FP4 datasheet peak")
    else:
        tr.step("pi_flops", "Compute peak per GPU (BF16)", r"\pi_{flops}", "pi_bf16", pi, unit="FLOP/s",
                units={"pi_bf16": "FLOP/s"}, pi_bf16=bf16,
                note=f"{g.name}: dense BF16 datasheet peak" + (
                    f"; {cfg.weights} weights are dequantised to BF16 (weight-only)" if cfg.weights != "bf16" else ""))
    tr.step("pi_bw", "HBM bandwidth per GPU", r"\pi_{bw}", "pi_bw", g.memory_bw_bytes_per_s, unit="B/s",
            units={"pi_bw": "B/s"}, pi_bw=g.memory_bw_bytes_per_s, note=f"{g.name} datasheet")
    b_w = cfg.weight_bytes_per_param
    p_expert_all = m.moe_layers * m.num_experts * m.expert_params()
    dense_q = m.quantizable_params() - p_expert_all
    dense_r = m.total_params() - m.quantizable_params() - m.embedding_params()
    tr.step("weights_read_bytes", "Dense weights read per iteration per GPU", "W_d", "(P_q * b_w + P_r * 2) / (tp * pp)",
            sm.dense_weight_bytes, unit="B", latex=r"\frac{[P_q] \cdot [b_w] + [P_r] \cdot 2}{[tp] \cdot [pp]}",
            P_q=dense_q, b_w=b_w, P_r=dense_r, tp=tp, pp=pp,
            note="block linears in the weight format; LM head and norms in BF16; the input embedding is a "
                 "lookup and is not streamed" + ("; routed experts below" if m.is_moe else ""))
    if m.is_moe:
        split = ep if ep > 1 else tp
        tr.step("expert_bytes", "One routed expert's bytes per GPU (stage layers)", "w_e", "P_e * b_w * L_moe / (pp * s_e)",
                sm.expert_bytes_per_gpu_per_expert, unit="B", latex=r"\frac{[P_e] \cdot [b_w] \cdot [L_moe]}{[pp] \cdot [s_e]}",
                P_e=m.expert_params(), b_w=b_w, L_moe=m.moe_layers, pp=pp, s_e=split,
                note=f"experts split {split} ways by " + ("EP (whole experts per GPU)" if ep > 1 else "TP (slices)"))
    k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem)
    tr.step("kv_read_bytes_per_token", "KV bytes per cached token per GPU", "k_g", "k_t / (s_kv * pp)",
            sm.kv_bytes_per_token, unit="B", latex=r"\frac{[k_t]}{[s_kv] \cdot [pp]}", units={"k_t": "B"},
            k_t=k_t, s_kv=kv_shard(m, tp), pp=pp,
            note=("MLA: the compressed latent, not split by TP" if m.is_mla else
                  f"{m.num_kv_heads} KV heads split {kv_shard(m, tp)} ways by TP"))
    _record_comm_setup(tr, cfg, sm)


def _record_comm_setup(tr: Trace, cfg: RabitConfig, sm: StepModel) -> None:
    m, g, f = model_of(cfg), gpu_of(cfg), fabric_of(cfg)
    a = cfg.assumptions
    tp = cfg.tp
    coll = Collectives.for_cluster(g, f, cfg.gpus_per_node, a.comm_bw_eff, a.collective_base_us * US)
    h = m.hidden_size
    if tp > 1 and not coll.spans_nodes(tp):
        lv = coll.intra(tp)
        if g.topology == "mesh" and g.mesh_links:
            links = min(tp - 1, g.mesh_links)
            tr.step("tp_bw_bytes_per_s", f"TP group bandwidth per GPU ({tp - 1 if tp - 1 <= g.mesh_links else links} "
                    "mesh links)", r"\beta", "n_l * l_bw * eta_c", lv.bw_bytes_per_s, unit="B/s",
                    units={"l_bw": "B/s", "eta_c": "frac"}, n_l=links, l_bw=g.link_bw_gb_per_s * 1e9,
                    eta_c=a.comm_bw_eff,
                    note=f"{g.scale_up}: a full mesh; a group of p = {tp} GPUs uses p - 1 direct links")
        else:
            tr.step("tp_bw_bytes_per_s", "TP group bandwidth per GPU", r"\beta", "bw_su * eta_c", lv.bw_bytes_per_s,
                    unit="B/s", units={"bw_su": "B/s", "eta_c": "frac"}, bw_su=g.scale_up_bw_bytes_per_s,
                    eta_c=a.comm_bw_eff,
                    note=(f"{g.scale_up}: any peer at the full per-GPU bandwidth" if g.topology == "nvswitch" else
                          f"{g.scale_up}: over the host bus") + " (per direction) x achieved share comm_bw_eff")
        u = {"t0": "s", "alpha": "s", "beta": "B/s", "b_a": "B"}
        tr.step("ar_ring_alpha_s", "Ring all-reduce: fixed time", "a_r", "t0 + 2 * (p - 1) * alpha", sm.tp_ar_alpha_ring,
                unit="s", units=u, t0=lv.base_s, p=tp, alpha=lv.latency_s,
                note="2(p-1) hops of alpha after the launch cost t0 (collective_base_us)")
        tr.step("ar_ring_beta_s", "Ring all-reduce: time per token", "b_r", "2 * (p - 1) / p * h * b_a / beta",
                sm.tp_ar_beta_ring, unit="s", latex=r"\frac{2 ([p] - 1)}{[p]} \cdot \frac{[h] \cdot [b_a]}{[beta]}", units=u,
                p=tp, h=h, b_a=ACT_BYTES, beta=lv.bw_bytes_per_s, note="each token adds h x 2 B to the buffer")
        if lv.in_switch_reduction:
            tr.step("ar_tree_alpha_s", "NVLS all-reduce: fixed time", "a_t", "t0 + 2 * alpha", sm.tp_ar_alpha_tree,
                    unit="s", units=u, t0=lv.base_s, alpha=lv.latency_s,
                    note="NVLink SHARP: one hop to the switch, which reduces and multicasts back")
            tr.step("ar_tree_beta_s", "NVLS all-reduce: time per token", "b_t", "h * b_a / beta", sm.tp_ar_beta_tree,
                    unit="s", latex=r"\frac{[h] \cdot [b_a]}{[beta]}", units=u, h=h, b_a=ACT_BYTES, beta=lv.bw_bytes_per_s,
                    note="each GPU sends its buffer once (NCCL 2.17+ NVLS)")
        else:
            hops = int(np.ceil(np.log2(tp)))
            tr.step("ar_tree_alpha_s", "Tree all-reduce: fixed time", "a_t", "t0 + 2 * d * alpha", sm.tp_ar_alpha_tree,
                    unit="s", units=u, t0=lv.base_s, d=hops, alpha=lv.latency_s,
                    note="double binary tree of depth d = ceil(log2 p): fewer hops, twice the bytes")
            tr.step("ar_tree_beta_s", "Tree all-reduce: time per token", "b_t", "2 * h * b_a / beta", sm.tp_ar_beta_tree,
                    unit="s", latex=r"\frac{2 [h] \cdot [b_a]}{[beta]}", units=u, h=h, b_a=ACT_BYTES, beta=lv.bw_bytes_per_s)
    elif tp > 1:
        t1, t2 = coll.all_reduce_s(h * ACT_BYTES, tp), coll.all_reduce_s(2 * h * ACT_BYTES, tp)
        tr.step("ar_ring_alpha_s", "All-reduce across nodes: fixed time", "a_r", "2 * t_1 - t_2", sm.tp_ar_alpha_ring,
                unit="s", units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2),
                note=f"TP {tp} spans nodes: reduce-scatter in the node, all-reduce over {f.name}, all-gather; "
                     "linearised from its cost at 1 and 2 tokens")
        tr.step("ar_ring_beta_s", "All-reduce across nodes: time per token", "b_r", "t_2 - t_1", sm.tp_ar_beta_ring,
                unit="s", units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2))
    if sm.a2a_per_iter:
        per_tok = m.experts_per_tok * h * ACT_BYTES / cfg.ep
        t1, t2 = coll.all_to_all_s(per_tok, cfg.ep), coll.all_to_all_s(2 * per_tok, cfg.ep)
        tr.step("a2a_alpha_s", "EP all-to-all: fixed time", "a_e", "2 * t_1 - t_2", sm.ep_a2a_alpha, unit="s",
                units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2),
                note=f"(p-1) alpha + (p-1)/p x n / beta over EP {cfg.ep}; n = top-k x h x 2 B per token / ep; "
                     "dispatch and combine per MoE layer")
        tr.step("a2a_beta_s", "EP all-to-all: time per token", "b_e", "t_2 - t_1", sm.ep_a2a_beta, unit="s",
                units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2))
    if cfg.pp > 1:
        cross = cfg.tp * cfg.pp > coll.domain
        t1, t2 = coll.p2p_s(h * ACT_BYTES, cross), coll.p2p_s(2 * h * ACT_BYTES, cross)
        tr.step("hop_alpha_s", "Pipeline hop: fixed time", "a_h", "2 * t_1 - t_2", sm.pp_hop_alpha, unit="s",
                units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2),
                note="point-to-point send of the activations to the next stage: alpha + n / beta"
                     + (f" over {f.name}" if cross else " over the scale-up fabric"))
        tr.step("hop_beta_s", "Pipeline hop: time per token", "b_h", "t_2 - t_1", sm.pp_hop_beta, unit="s",
                units={"t_1": "s", "t_2": "s"}, t_1=float(t1), t_2=float(t2))


def _record_prefill(tr: Trace, cfg: RabitConfig, sm: StepModel, pf: _Prefill) -> None:
    B, I = pf.batch, pf.prompt
    tr.step("prefill_cached_tokens", "Cached prefix per prompt", "c", "floor(f_c * s_in)", pf.cached, unit="tokens",
            f_c=cfg.prefix_cache_frac, s_in=I, note="read from the prefix cache, not recomputed")
    tr.step("prefill_tokens", "Prefill: new tokens in the iteration", "T_p", "B * (s_in - c)", pf.T, unit="tokens",
            B=B, s_in=I, c=pf.cached, note="all prompts of the batch in one iteration")
    m = sm.model
    if m.sliding_layers:
        tr.step("prefill_pairs", "Prefill: attended (query, key) pairs", "A_p", "B * a_s", pf.A, unit="pairs",
                B=B, a_s=pf.A / B, note=f"causal attention; {m.sliding_layers} of {m.num_layers} layers see at most "
                                        f"{m.sliding_window} keys")
        tr.step("prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * r_s", pf.R, unit="tokens", B=B,
                r_s=pf.R / B)
    else:
        tr.step("prefill_pairs", "Prefill: attended (query, key) pairs", "A_p",
                "B * (s_in * (s_in + 1) - c * (c + 1)) / 2", pf.A, unit="pairs",
                latex=r"[B] \cdot \frac{[s_in] ([s_in] + 1) - [c] ([c] + 1)}{2}", B=B, s_in=I, c=pf.cached,
                note="causal attention: the query at position j sees j keys (itself included)")
        tr.step("prefill_kv_tokens", "Prefill: cached tokens read", "R_p", "B * c", pf.R, unit="tokens", B=B,
                c=pf.cached)
    _record_iteration(tr, sm, cfg, "prefill", "Prefill", pf.T, pf.A, pf.R, pf.it,
                      final_label="Time to first token (one batch)", final_symbol=r"\mathrm{TTFT}",
                      note=f"bound: {pf.it.bound}; the whole batch prefilled in one iteration")
    _record_iteration(tr, sm, cfg, "ttft_one", "Prefill of one prompt", float(pf.uncached), pf.A / B, pf.R / B,
                      pf.one, compact=True, final_label="Time to first token (one prompt alone)",
                      final_symbol=r"\mathrm{TTFT}_1", note="the same iteration with B = 1")


def _record_decode(tr: Trace, cfg: RabitConfig, sm: StepModel, d: _Decode, prefill_s: float) -> dict[str, float]:
    B, b, pp = d.batch, d.b, sm.pp
    tr.step("decode_micro_batch", "Decode: sequences per micro-batch", "b", "ceil(B / pp)", b, unit="seq", B=B, pp=pp,
            note="pp micro-batches in flight, one per pipeline stage" if pp > 1 else "no pipeline: the whole batch")
    tr.step("decode_steps", "Decode steps per request", "N", "max(s_out - 1, 1)", d.N, unit="steps",
            s_out=cfg.output_tokens, note="the prefill pass emits the first output token")
    tr.step("decode_context_tokens", "Cached tokens before the mean step", r"\bar{s}", "s_in + (N - 1) / 2", d.ctx,
            unit="tokens", s_in=cfg.input_tokens, N=d.N,
            note="step n (n = 1..N) finds s_in + n - 1 tokens cached; this is their mean")
    T = float(b)
    m = sm.model
    if m.sliding_layers:
        A = tr.step("decode_pairs", "Decode: attended pairs", "A_d", "b * s_a", b * d.s_att, unit="pairs", b=b,
                    s_a=d.s_att, note=f"sliding-window layers see at most {m.sliding_window} keys")
        R = tr.step("decode_kv_tokens", "Decode: cached tokens read", "R_d", "b * s_r", b * d.s_read, unit="tokens",
                    b=b, s_r=d.s_read)
    else:
        A = tr.step("decode_pairs", "Decode: attended pairs", "A_d", "b * (s_ctx + 1)", b * d.s_att, unit="pairs",
                    b=b, s_ctx=d.ctx, note="each new token attends the cache and itself")
        R = tr.step("decode_kv_tokens", "Decode: cached tokens read", "R_d", "b * s_ctx", b * d.s_read,
                    unit="tokens", b=b, s_ctx=d.ctx)
    _record_iteration(tr, sm, cfg, "decode_mid", "Decode", T, A, R, d.mid,
                      final_label="Decode step at the mean context", final_symbol=r"t_{mid}",
                      note=f"bound: {d.mid.bound}; time between two tokens of one sequence")
    gap = d.mean_s - d.mid.time_s
    gap = 0.0 if abs(gap) <= 1e-9 * d.mean_s else gap  # float noise when one limit binds throughout
    t_d = tr.step("decode_step_s", "Decode step (mean over the output)", "t_d", "t_mid + delta", d.mean_s, unit="s",
                  units={"t_mid": "s", "delta": "s"}, t_mid=d.mid.time_s, delta=gap,
                  note=f"mean of the N per-step times as the context grows ({fmt_s(d.first_s)} first, "
                       f"{fmt_s(d.last_s)} last); equals the mid step while one limit binds throughout, since every "
                       "part is linear in the context; delta is the gap when the bound switches")
    tr.step("decode_comm_per_step_s", "Communication per decode step", "t_{x,d}", "pp * t_x + (pp - 1) * (a_h + b_h * b)",
            pp * d.mid.comm_s + d.mid.hops_s, unit="s", units={"t_x": "s", "a_h": "s", "b_h": "s"}, pp=pp,
            t_x=d.mid.comm_s, a_h=sm.pp_hop_alpha, b_h=sm.pp_hop_beta, b=b, note="at the mean context")
    r_u = tr.step("tokens_per_s_per_user", "Per-user decode rate", "r_u", "1 / t_d", 1 / d.mean_s, unit="tokens/s",
                  t_d=t_d, note="the textbook example: s_tok / (pp t_step + (pp - 1) t_pp)" if pp > 1 else "")
    r_r = tr.step("tokens_per_s_replica", "Decode throughput per replica", "r_r", "B / t_d", B / d.mean_s,
                  unit="tokens/s", B=B, t_d=t_d, note="every sequence of the batch gets a token per step")
    dp = _replicas(cfg)
    r = tr.step("tokens_per_s", "Aggregate decode throughput", "r", "r_r * d_p", r_r * dp, unit="tokens/s",
                r_r=r_r, d_p=dp, note=f"{dp} replica(s) of TP {cfg.tp} x PP {cfg.pp} on {cfg.gpus} GPUs")
    tr.step("tokens_per_s_per_gpu", "Decode throughput per GPU", "r_g", "r / G", r / cfg.gpus, unit="tokens/s",
            r=r, G=cfg.gpus)
    e2e = tr.step("e2e_s", "End-to-end latency of one request", "t_{e2e}", "TTFT + (s_out - 1) * t_d",
                  prefill_s + (cfg.output_tokens - 1) * d.mean_s, unit="s", units={"TTFT": "s", "t_d": "s"},
                  TTFT=prefill_s, s_out=cfg.output_tokens, t_d=t_d,
                  note="the batch prefilled together, then decoded together (no queueing)")
    return {"r_u": r_u, "r_r": r_r, "r": r, "e2e": e2e}


def fmt_s(x: float) -> str:
    return fmt_time(x)


# --- speculative decoding ----------------------------------------------------------------------------

def _draft_step_model(cfg: RabitConfig) -> StepModel:
    """The draft model on the target's GPUs: the same TP where its heads allow, one stage, no scheduler cost.

    The draft's passes share the target's scheduler iteration, so their step overhead is not charged again.
    """
    dm = catalog.model(cfg.draft_model)
    tp = max(d for d in range(1, cfg.tp + 1) if cfg.tp % d == 0 and dm.num_heads % d == 0)
    dcfg = cfg.with_(model=cfg.draft_model, custom_model=None, tp=tp, pp=1, ep=1)
    return replace(StepModel.from_config(dcfg), overhead_s=0.0)


def _spec_numbers(cfg: RabitConfig, sm: StepModel, d: _Decode):
    """(E, draft_s, draft details, verify IterationParts, T_v, A_v, R_v)."""
    k, alpha, b = cfg.spec_k, cfg.spec_alpha, d.b
    E = spec.expected_tokens_per_pass(alpha, k)
    a = cfg.assumptions
    detail: dict[str, float] = {}
    if cfg.spec_method == "draft":
        dsm = _draft_step_model(cfg)
        ctx = d.ctx + (k - 1) / 2  # mean context of the k draft passes
        s_a, s_r = float(dsm.kv_read_tokens(ctx + 1)), float(dsm.kv_read_tokens(ctx))
        one = _iteration(dsm, float(b), b * s_a, b * s_r)
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
    verify = _iteration(sm, T_v, A_v, R_v)
    return E, draft_s, detail, verify, T_v, A_v, R_v


def _spec_result(cfg: RabitConfig, sm: StepModel, d: _Decode, tr: Trace = NO_TRACE) -> SpecResult | None:
    if cfg.spec_method == "none":
        return None
    k, alpha = cfg.spec_k, cfg.spec_alpha
    E, draft_s, detail, verify, T_v, A_v, R_v = _spec_numbers(cfg, sm, d)
    plain = d.mid.time_s
    round_s = draft_s + verify.time_s
    ratio = round_s / plain
    alpha_star = spec.break_even_alpha(ratio, k)
    res = SpecResult(method=cfg.spec_method, k=k, alpha=alpha,
                     draft_model=cfg.draft_model if cfg.spec_method == "draft" else None,
                     tokens_per_pass=E, draft_s=draft_s, verify_s=verify.time_s, round_s=round_s, plain_step_s=plain,
                     cost_ratio=ratio, speedup=E / ratio, break_even_alpha=alpha_star,
                     tokens_per_s_per_user=E / round_s, tokens_per_s=d.batch * E / round_s * _replicas(cfg))
    if not tr.enabled:
        return res
    if alpha < 1:
        tr.step("spec_tokens_per_pass", "Tokens per target pass (speculative)", "E", "(1 - alpha ** (k + 1)) / (1 - alpha)",
                E, unit="tokens", latex=r"\frac{1 - [alpha]^{[k] + 1}}{1 - [alpha]}", alpha=alpha, k=k,
                note="Leviathan et al. 2023, eq. 1: each drafted token accepted independently with rate alpha")
    else:
        tr.step("spec_tokens_per_pass", "Tokens per target pass (speculative)", "E", "k + 1", E, unit="tokens", k=k,
                note="alpha = 1: every drafted token is accepted")
    if cfg.spec_method == "draft":
        dsm, one = detail["_sm"], detail["_it"]
        _record_iteration(tr, dsm, cfg.with_(model=cfg.draft_model, custom_model=None, tp=dsm.tp, pp=1, ep=1),
                          "spec_draft_pass", "Draft pass", float(d.b), detail["A"], detail["R"], one, compact=True,
                          final_label=f"One draft pass ({cfg.draft_model}, TP {dsm.tp})", final_symbol=r"t_{dp}",
                          note="the draft model's own iteration model at the mean context of the k passes, "
                               "without a second scheduler overhead")
        tr.step("spec_draft_s", "Draft cost per round", r"t_{draft}", "k * t_dp", draft_s, unit="s",
                units={"t_dp": "s"}, k=k, t_dp=one.time_s, note=f"{k} sequential draft passes")
    elif cfg.spec_method == "eagle":
        tr.step("spec_draft_s", "Draft cost per round", r"t_{draft}", "k * phi * t_mid", draft_s, unit="s",
                units={"t_mid": "s", "phi": "frac"}, k=k, phi=cfg.assumptions.eagle_draft_frac, t_mid=plain,
                note="EAGLE-style head: one decoder layer + the LM head (assumption eagle_draft_frac)")
    else:
        tr.step("spec_draft_s", "Draft cost per round", r"t_{draft}", "t_ng", draft_s, unit="s", units={"t_ng": "s"},
                t_ng=draft_s, note="n-gram prompt lookup on the CPU (assumption ngram_draft_us)")
    _record_iteration(tr, sm, cfg, "spec_verify", "Verification", T_v, A_v, R_v, verify, compact=True,
                      final_label="Verification pass (k + 1 tokens per sequence)", final_symbol=r"t_{verify}",
                      note=f"the target's iteration with T = b (k + 1) = {T_v:g} tokens at the mean context")
    t_r = tr.step("spec_round_s", "Speculative round", "t_r", "t_draft + t_verify", round_s, unit="s",
                  units={"t_draft": "s", "t_verify": "s"}, t_draft=draft_s, t_verify=verify.time_s)
    c = tr.step("spec_cost_ratio", "Round cost in plain decode steps", "c", "t_r / t_mid", ratio, unit="x",
                units={"t_r": "s", "t_mid": "s"}, t_r=t_r, t_mid=plain)
    tr.step("spec_speedup", "Speculative speed-up per sequence", "S", "E / c", E / ratio, unit="x", E=E, c=c,
            note="above 1 speculation wins; verification turns compute-bound at large batch and the gain fades")
    tr.step("spec_break_even_alpha", "Break-even acceptance rate", r"\alpha^*", "alpha_star", alpha_star, unit="",
            latex=r"E^{-1}([c]) \text{ with } E(\alpha) = \frac{1 - \alpha^{[k] + 1}}{1 - \alpha}",
            alpha_star=alpha_star, c=ratio, k=k,
            note="solves (1 - a^(k+1)) / (1 - a) = c; below it speculation is slower"
                 + ("; NaN: c > k + 1, it never wins here" if math.isnan(alpha_star) else ""))
    tr.step("spec_tokens_per_s_per_user", "Per-user rate with speculation", "r_{u,s}", "E / t_r", E / round_s,
            unit="tokens/s", E=E, t_r=t_r)
    tr.step("spec_tokens_per_s", "Aggregate rate with speculation", "r_s", "B * E / t_r * d_p", res.tokens_per_s,
            unit="tokens/s", B=d.batch, E=E, t_r=t_r, d_p=_replicas(cfg))
    return res


# --- public views ------------------------------------------------------------------------------------

def _prefill_result(pf: _Prefill, steps: tuple[Step, ...] = ()) -> PrefillResult:
    return PrefillResult(batch=pf.batch, prompt_tokens=pf.prompt, cached_tokens=pf.cached,
                         uncached_tokens=pf.uncached, iteration=pf.it, ttft_s=pf.it.time_s, ttft_one_s=pf.one.time_s,
                         bound=pf.it.bound, steps=steps)


def _decode_result(cfg: RabitConfig, d: _Decode, steps: tuple[Step, ...] = ()) -> DecodeResult:
    dp = _replicas(cfg)
    r_r = d.batch / d.mean_s
    return DecodeResult(
        batch=d.batch, micro_batch=d.b, decode_steps=d.N, mean_context_tokens=d.ctx, at_mean=d.mid,
        step_s=d.mean_s, step_first_s=d.first_s, step_last_s=d.last_s, convexity_gap_s=d.mean_s - d.mid.time_s,
        tokens_per_s=r_r * dp, tokens_per_s_replica=r_r, tokens_per_s_per_user=1 / d.mean_s,
        tokens_per_s_per_gpu=r_r * dp / cfg.gpus, comm_s_per_step=d.mid.pp * d.mid.comm_s + d.mid.hops_s,
        bound=d.mid.bound, replicas=dp, steps=steps)


def prefill(cfg: RabitConfig, tr: Trace | None = None) -> PrefillResult:
    """TTFT of one batch of ``cfg.batch`` prompts of ``cfg.input_tokens``, cached prefix removed [s].

    The textbook example (Llama-3.1-70B, H100 SXM, TP 8, B 32, 4k prompts): about 4.6 s (the textbook chain: 3.16 s).
    """
    tr = tr if tr is not None else Trace()
    sm = StepModel.from_config(cfg)
    pf = _prefill_numbers(sm, cfg, cfg.batch)
    _record_prefill(tr, cfg, sm, pf)
    return _prefill_result(pf, tr.frozen())


def decode(cfg: RabitConfig, tr: Trace | None = None) -> DecodeResult:
    """Mean decode step over the output, throughput and per-user rate.

    The textbook example: about 12.9 ms per step, memory-bound (the textbook chain: 11.8 ms).
    """
    tr = tr if tr is not None else Trace()
    sm = StepModel.from_config(cfg)
    d = _decode_numbers(sm, cfg, cfg.batch)
    pf = _prefill_numbers(sm, cfg, cfg.batch)
    _record_decode(tr, cfg, sm, d, pf.it.time_s)
    return _decode_result(cfg, d, tr.frozen())


def speculative(cfg: RabitConfig) -> SpecResult | None:
    """Speculative decoding at the mean decode context (None when ``cfg.spec_method`` is "none")."""
    sm = StepModel.from_config(cfg)
    return _spec_result(cfg, sm, _decode_numbers(sm, cfg, cfg.batch))


def speed_summary(cfg: RabitConfig) -> SpeedSummary:
    """Prefill, decode, speculative decoding and end-to-end latency, as one traced chain."""
    tr = Trace()
    sm = StepModel.from_config(cfg)
    sections: list[tuple[str, tuple[str, ...]]] = []

    def section(title: str, start: int) -> None:
        sections.append((title, tuple(s.key for s in tr.steps[start:])))

    n0 = len(tr.steps)
    _record_setup(tr, cfg, sm)
    section("Per-GPU constants of the iteration model", n0)
    pf = _prefill_numbers(sm, cfg, cfg.batch)
    n0 = len(tr.steps)
    _record_prefill(tr, cfg, sm, pf)
    section("Prefill: time to first token", n0)
    d = _decode_numbers(sm, cfg, cfg.batch)
    n0 = len(tr.steps)
    out = _record_decode(tr, cfg, sm, d, pf.it.time_s)
    section("Decode: step time, throughput and latency", n0)
    n0 = len(tr.steps)
    sp = _spec_result(cfg, sm, d, tr)
    if sp is not None:
        section(f"Speculative decoding ({cfg.spec_method}, k = {cfg.spec_k}, alpha = {cfg.spec_alpha:g})", n0)
    steps = tr.frozen()
    return SpeedSummary(prefill=_prefill_result(pf, steps), decode=_decode_result(cfg, d, steps), spec=sp,
                        e2e_s=out["e2e"], compute_bound_batch=compute_bound_batch(cfg),
                        compute_bound_batch_short=compute_bound_batch(cfg, context=1.0), steps=steps,
                        sections=tuple(sections))


# --- where decode turns compute-bound ------------------------------------------------------------

def compute_bound_batch(cfg: RabitConfig, context: float | None = None) -> int | None:
    """The smallest batch per replica at which a decode step is compute- rather than memory-bound.

    Evaluated at ``context`` cached tokens (default: the mean decode context). Compute grows as
    (f_t + f_a s)(b + T0) / pi and memory as (W + b k_g (s + 1)) / bw: when each sequence adds more
    KV bytes than its FLOPs cover (long contexts with GQA), the lines never cross and this is None.
    """
    sm = StepModel.from_config(cfg)
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
