"""The step model: the time of one scheduler iteration, written once (the RA-BIT spec "Speed").

One iteration processes ``T`` new tokens (any mix of prefill-chunk and decode tokens), over ``A``
attended (query, key) pairs, reading the cached K/V of ``R`` context tokens::

    t_c = f_t T / (peak x mfu_max x T / (T + T0)) + f_a A / (peak x mfu_max)   compute, one stage
    t_m = (W_r(T) + (R + T) k_g) / (BW x eta_bw)                       memory, one stage
    t_x = (n_ar min(ring(T), tree(T)) + n_a2a a2a(T)) x (1 - overlap)   exposed communication, one stage
    t   = pp (max(t_c, t_m) + t_x) + (pp - 1) hop(T) + t_o

:meth:`StepModel.stage_parts` is the one body of that formula: scalars in, floats out (the simulator's
inner loop), arrays in, arrays out (sweeps, the simulator's timing table in :mod:`core.sim.timing`, the
optimizer's screen). :func:`record_iteration` records the same iteration as derivation steps whose values
come from that body; the expressions it shows are the ones below, and a test re-evaluates each.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from core import catalog
from core.catalog import gpu_of
from core.deployment import Deployment, resolve
from core.collectives import Collectives
from core.config import COMPUTE_PRECISION, RabitConfig
from core.memory import kv_bytes_per_token, kv_shard
from core.model import ModelArch
from core.trace import Trace
from core.units import MS

__all__ = [
    "ACT_BYTES",
    "IterationParts",
    "StepModel",
    "effective_peak_flop_per_s",
    "iteration",
    "record_iteration",
    "record_weights_read",
]

#: Bytes per element of the activations moved by TP all-reduces and EP all-to-alls (BF16).
ACT_BYTES = 2.0

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
        """The step model of a config (resolved here; callers holding a Deployment use from_deployment)."""
        return cls.from_deployment(resolve(cfg))

    @classmethod
    def from_deployment(cls, dep: Deployment) -> "StepModel":
        """Every per-deployment constant of the iteration formula, computed once."""
        cfg = dep
        m, g, f = dep.model, dep.gpu, dep.fabric
        a = dep.assumptions
        tp, pp, ep = dep.tp, dep.pp, dep.ep
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
            model=m,
            tp=tp,
            pp=pp,
            ep=ep,
            flop_per_token=2.0 * m.active_matmul_params() / (tp * pp),
            attn_flop_per_pair=4.0 * (m.attention_layers / pp) * m.attn_qk_dim / tp,  # a hybrid's SSM layers: none
            peak_flop_per_s=peak,
            ramp_tokens=a.mfu_ramp_tokens,
            dense_weight_bytes=dense_bytes,
            expert_bytes_per_gpu_per_expert=expert_bytes,
            kv_bytes_per_token=k_t,
            mem_bw_bytes_per_s=g.memory_bw_bytes_per_s * a.mbu,
            tp_ar_alpha_ring=ar_a_ring,
            tp_ar_beta_ring=ar_b_ring,
            tp_ar_alpha_tree=float(ar_a_tree),
            tp_ar_beta_tree=ar_b_tree,
            ar_per_iter=2 * layers_stage if tp > 1 else 0.0,
            ep_a2a_alpha=a2a_a,
            ep_a2a_beta=a2a_b,
            a2a_per_iter=a2a_n,
            pp_hop_alpha=hop_a,
            pp_hop_beta=hop_b,
            comm_exposed=1.0 - a.comm_overlap,
            overhead_s=a.step_overhead_ms * MS,
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

    def stage_parts(self, T, A, R):
        """(compute, memory, exposed communication) time of one pipeline stage [s]: the iteration formula.

        The one body of the step time (the RA-BIT spec "Speed"); scalars in, floats out (pure Python, for
        the simulator's inner loop), arrays in, arrays out. ``T`` new tokens, ``A`` attended (query, key)
        pairs, ``R`` cached tokens whose K/V are read, summed over the sequences of the batch::

            t_c = f_t T / (peak x mfu_max x T / (T + T0)) + f_a A / (peak x mfu_max)

        The T/(T+T0) ramp is a GEMM-tiling effect of the matmuls; attention runs on its own (query, key)
        pairs at the ceiling (its own roofline), so a long context at batch 1 is not made compute-bound by it.
            t_m = (W_d + E (1 - (1 - k / E)^T) w_e + (R + T) k_g) / (BW x eta_bw)
            t_x = (n_ar min(a_r + b_r T, a_t + b_t T) + n_a2a (a_e + b_e T)) x (1 - overlap)

        An iteration without new tokens computes and communicates nothing.
        """
        arr = type(T) is np.ndarray
        if arr:
            eff = np.maximum(T / (T + self.ramp_tokens), 1e-12)
        else:
            eff = T / (T + self.ramp_tokens) if T > 0 else 1.0
            eff = eff if eff > 1e-12 else 1e-12
        t_cmp = (
            self.flop_per_token * T / (self.peak_flop_per_s * eff) + self.attn_flop_per_pair * A / self.peak_flop_per_s
        )
        ring = self.tp_ar_alpha_ring + self.tp_ar_beta_ring * T
        tree = self.tp_ar_alpha_tree + self.tp_ar_beta_tree * T
        t_comm = (
            (np.minimum(ring, tree) if arr else (ring if ring < tree else tree)) * self.ar_per_iter
            + (self.ep_a2a_alpha + self.ep_a2a_beta * T) * self.a2a_per_iter
        ) * self.comm_exposed
        w = self.dense_weight_bytes
        if self.expert_bytes_per_gpu_per_expert:  # touched experts x one expert's bytes on this GPU
            m = self.model
            w = (
                w
                + m.num_experts
                * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T)
                * self.expert_bytes_per_gpu_per_expert
            )
        t_mem = (w + (R + T) * self.kv_bytes_per_token) / self.mem_bw_bytes_per_s
        if arr:
            return np.where(T > 0, t_cmp, 0.0), t_mem, np.where(T > 0, t_comm, 0.0)
        return (t_cmp, t_mem, t_comm) if T > 0 else (0.0, t_mem, 0.0)

    def parts(self, tokens, pairs, kv_tokens):
        """(compute, memory, exposed communication, overhead) time of one stage [s]; arrays welcome."""
        T = np.asarray(tokens, dtype=float)
        t_cmp, t_mem, t_comm = self.stage_parts(T, np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float))
        return t_cmp, t_mem, t_comm, self.overhead_s

    def scalar_parts(self, T: float, A: float, R: float) -> tuple[float, float, float]:
        """(compute, memory, exposed communication) of one stage for scalar arguments [s] (``stage_parts``)."""
        return self.stage_parts(float(T), float(A), float(R))

    def hops_s(self, tokens):
        """Pipeline stage-to-stage sends of one iteration, all ``pp - 1`` hops [s]."""
        return (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * tokens)

    def iteration_s(self, tokens, pairs, kv_tokens):
        """Wall time of one iteration through all ``pp`` stages [s] (latency of the batch)::

            t = pp (max(t_c, t_m) + t_x) + (pp - 1)(a_h + b_h T) + t_o

        Scalars in, float out (pure Python, for the simulator's inner loop); arrays in, array out.
        """
        if isinstance(tokens, _SCALAR) and isinstance(pairs, _SCALAR) and isinstance(kv_tokens, _SCALAR):
            T = float(tokens)
            t_cmp, t_mem, t_comm = self.stage_parts(T, float(pairs), float(kv_tokens))
            stage = (t_cmp if t_cmp > t_mem else t_mem) + t_comm
        else:
            T = np.asarray(tokens, dtype=float)
            t_cmp, t_mem, t_comm = self.stage_parts(
                T, np.asarray(pairs, dtype=float), np.asarray(kv_tokens, dtype=float)
            )
            stage = np.maximum(t_cmp, t_mem) + t_comm
        return self.pp * stage + (self.pp - 1) * (self.pp_hop_alpha + self.pp_hop_beta * T) + self.overhead_s

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
        out = (m.full_attention_layers * c + m.sliding_layers * np.minimum(c, m.sliding_window)) / m.attention_layers
        return float(out) if out.ndim == 0 else out


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


def iteration(sm: StepModel, T: float, A: float, R: float) -> IterationParts:
    c, mm, x = sm.scalar_parts(T, A, R)
    hops = sm.hops_s(T)
    time = sm.iteration_s(float(T), float(A), float(R))
    vals = {"compute": c, "memory": mm, "communication": x}
    return IterationParts(
        tokens=T,
        pairs=A,
        kv_tokens=R,
        flop=sm.flop_per_token * T + sm.attn_flop_per_pair * A,
        bytes=sm.weights_read_bytes(T) + (R + T) * sm.kv_bytes_per_token,
        compute_s=c,
        memory_s=mm,
        comm_s=x,
        hops_s=hops,
        overhead_s=sm.overhead_s,
        time_s=time,
        pp=sm.pp,
        bound=max(vals, key=lambda k: vals[k]),
    )


_U_ITER = {
    "T": "tokens",
    "A": "pairs",
    "R": "tokens",
    "f_t": "FLOP",
    "f_a": "FLOP",
    "pi_flops": "FLOP/s",
    "mfu": "frac",
    "T0": "tokens",
    "W_r": "B",
    "k_g": "B",
    "pi_bw": "B/s",
    "eta_bw": "frac",
    "n_ar": "",
    "a_r": "s",
    "a_t": "s",
    "b_r": "s",
    "b_t": "s",
    "n_a2a": "",
    "a_e": "s",
    "b_e": "s",
    "x_c": "frac",
    "pp": "",
    "a_h": "s",
    "b_h": "s",
    "t_o": "s",
    "t_c": "s",
    "t_m": "s",
    "t_x": "s",
    "F": "FLOP",
    "Y": "B",
}

#: The recorded expressions of one iteration, in the symbols of :func:`consts` (each re-evaluated by a test).
EXPR_FLOP = "f_t * T + f_a * A"
EXPR_COMPUTE = "f_t * T / (pi_flops * mfu * T / (T + T0)) + f_a * A / (pi_flops * mfu)"
EXPR_BYTES = "W_r + (R + T) * k_g"
EXPR_MEMORY = "Y / (pi_bw * eta_bw)"
EXPR_COMM = "(n_ar * min(a_r + b_r * T, a_t + b_t * T) + n_a2a * (a_e + b_e * T)) * x_c"
EXPR_TIME = "pp * (max(t_c, t_m) + t_x) + (pp - 1) * (a_h + b_h * T) + t_o"


def _inline(expr: str, **parts: str) -> str:
    """``expr`` with each named intermediate replaced by its own expression, in parentheses."""
    for name, sub in parts.items():
        expr = re.sub(rf"\b{name}\b", f"({sub})", expr)
    return expr


#: The whole iteration in one expression (the compact record), built from the parts above.
_FULL_ITER = _inline(
    EXPR_TIME, t_c=_inline(EXPR_COMPUTE, F=EXPR_FLOP), t_m=_inline(EXPR_MEMORY, Y=EXPR_BYTES), t_x=EXPR_COMM
)


def consts(sm: StepModel, cfg: RabitConfig) -> dict[str, float]:
    """The StepModel constants as the named inputs of the recorded expressions."""
    a = cfg.assumptions
    g = gpu_of(cfg)
    return dict(
        f_t=sm.flop_per_token,
        f_a=sm.attn_flop_per_pair,
        mfu=a.mfu_max,
        pi_flops=sm.peak_flop_per_s / a.mfu_max,
        T0=sm.ramp_tokens,
        k_g=sm.kv_bytes_per_token,
        pi_bw=g.memory_bw_bytes_per_s,
        eta_bw=a.mbu,
        n_ar=sm.ar_per_iter,
        a_r=sm.tp_ar_alpha_ring,
        b_r=sm.tp_ar_beta_ring,
        a_t=sm.tp_ar_alpha_tree,
        b_t=sm.tp_ar_beta_tree,
        n_a2a=sm.a2a_per_iter,
        a_e=sm.ep_a2a_alpha,
        b_e=sm.ep_a2a_beta,
        x_c=sm.comm_exposed,
        pp=sm.pp,
        a_h=sm.pp_hop_alpha,
        b_h=sm.pp_hop_beta,
        t_o=sm.overhead_s,
    )


def record_weights_read(tr: Trace, sm: StepModel, key: str, T: float) -> float:
    m = sm.model
    if not sm.expert_bytes_per_gpu_per_expert:
        return sm.dense_weight_bytes
    return tr.step(
        key,
        "Weights read (dense + experts touched)",
        "W_r",
        "W_d + E * (1 - (1 - k / E) ** T) * w_e",
        sm.weights_read_bytes(T),
        unit="B",
        latex=r"[W_d] + [E] \left(1 - \left(1 - \frac{[k]}{[E]}\right)^{[T]}\right) [w_e]",
        units={"W_d": "B", "w_e": "B", "T": "tokens"},
        W_d=sm.dense_weight_bytes,
        E=m.num_experts,
        k=m.experts_per_tok,
        T=T,
        w_e=sm.expert_bytes_per_gpu_per_expert,
        note="expected distinct experts for T tokens with uniform top-k routing, per MoE layer",
    )


def record_iteration(
    tr: Trace,
    sm: StepModel,
    cfg: RabitConfig,
    p: str,
    what: str,
    T: float,
    A: float,
    R: float,
    it: IterationParts,
    *,
    compact: bool = False,
    final_label: str | None = None,
    final_symbol: str = "t",
    note: str = "",
) -> None:
    """Record the chain of one iteration under key prefix ``p``; the values come from ``it``."""
    k = consts(sm, cfg)
    if compact:
        W_r = sm.weights_read_bytes(T)
        tr.step(
            f"{p}_s",
            final_label or f"{what}: iteration time",
            final_symbol,
            _FULL_ITER,
            it.time_s,
            unit="s",
            latex=r"t_{iter}([T], [A], [R])",
            units=_U_ITER,
            T=T,
            A=A,
            R=R,
            W_r=W_r,
            **k,
            note=note or "the same iteration formula as above, with these T, A and R",
        )
        return
    W_r = record_weights_read(tr, sm, f"{p}_weights_read_bytes", T)
    tr.step(
        f"{p}_flop",
        f"{what}: FLOPs per GPU",
        "F",
        EXPR_FLOP,
        it.flop,
        unit="FLOP",
        latex=r"[f_t] \cdot [T] + [f_a] \cdot [A]",
        units=_U_ITER,
        f_t=k["f_t"],
        T=T,
        f_a=k["f_a"],
        A=A,
        note="matmuls (2 FLOP per active parameter per token) + attention (QK^T and PV per pair)",
    )
    t_c = tr.step(
        f"{p}_compute_s",
        f"{what}: compute time",
        "t_c",
        EXPR_COMPUTE,
        it.compute_s,
        unit="s",
        latex=r"\frac{[f_t] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot \frac{[T]}{[T] + [T0]}} + "
        r"\frac{[f_a] \cdot [A]}{[pi_flops] \cdot [mfu]}",
        units=_U_ITER,
        f_t=k["f_t"],
        T=T,
        f_a=k["f_a"],
        A=A,
        pi_flops=k["pi_flops"],
        mfu=k["mfu"],
        T0=k["T0"],
        note="the matmul efficiency ramps with tokens per iteration as T/(T+T0) (GEMM tiling; the RA-BIT spec, "
        "T0 = 64); attention runs at the ceiling on its own pairs",
    )
    Y = tr.step(
        f"{p}_bytes",
        f"{what}: bytes moved per GPU",
        "Y",
        EXPR_BYTES,
        it.bytes,
        unit="B",
        latex=r"[W_r] + ([R] + [T]) \cdot [k_g]",
        units=_U_ITER,
        W_r=W_r,
        R=R,
        T=T,
        k_g=k["k_g"],
        note="weights read + KV read (R cached tokens) + KV written (T new tokens)",
    )
    t_m = tr.step(
        f"{p}_memory_s",
        f"{what}: memory time",
        "t_m",
        EXPR_MEMORY,
        it.memory_s,
        unit="s",
        latex=r"\frac{[Y]}{[pi_bw] \cdot [eta_bw]}",
        units=_U_ITER,
        Y=Y,
        pi_bw=k["pi_bw"],
        eta_bw=k["eta_bw"],
        note="achieved HBM bandwidth = datasheet x MBU",
    )
    t_x = tr.step(
        f"{p}_comm_s",
        f"{what}: exposed communication per stage",
        "t_x",
        EXPR_COMM,
        it.comm_s,
        unit="s",
        latex=r"\left([n_ar] \min([a_r] + [b_r] \cdot [T],\ [a_t] + [b_t] \cdot [T]) + "
        r"[n_a2a] ([a_e] + [b_e] \cdot [T])\right) \cdot [x_c]",
        units=_U_ITER,
        n_ar=k["n_ar"],
        a_r=k["a_r"],
        b_r=k["b_r"],
        T=T,
        a_t=k["a_t"],
        b_t=k["b_t"],
        n_a2a=k["n_a2a"],
        a_e=k["a_e"],
        b_e=k["b_e"],
        x_c=k["x_c"],
        note="TP all-reduces of T x h x 2 B (2 per layer; the cheaper of ring and tree/NVLS) + EP "
        "all-to-alls, times the share not hidden behind compute",
    )
    tr.step(
        f"{p}_s",
        final_label or f"{what}: iteration time",
        final_symbol,
        EXPR_TIME,
        it.time_s,
        unit="s",
        latex=r"[pp] \left(\max([t_c], [t_m]) + [t_x]\right) + ([pp] - 1)([a_h] + [b_h] \cdot [T]) + [t_o]",
        units=_U_ITER,
        pp=sm.pp,
        t_c=t_c,
        t_m=t_m,
        t_x=t_x,
        a_h=k["a_h"],
        b_h=k["b_h"],
        T=T,
        t_o=k["t_o"],
        note=note or f"bound: {it.bound}; stages run in turn, plus stage hops and the scheduler overhead",
    )
