"""The layout model: memory and step time of one parallel layout, scalar or over a grid of layouts.

**Step time** of one global batch on a layout TP x PP x DP (x EP), micro-batch b, ZeRO stage z,
recomputation r and v virtual pipeline stages; m = B / (DP b) micro-batches per pipeline::

    t_mb   = F_hw b s / (TP p_e) / (peak x fp8 x MFU_train x T/(T+T0))      one micro-batch, one stage
             x (1 + g (1 / eta_K - 1))     the weight GEMMs (share g of F_hw) at their short-reduction rate eta_K
    slot   = t_mb + TP collectives + EP all-to-alls + PP sends                (per micro-batch, per stage)
    t_tp   = n_c L_s t_ar - min(o_tp n_c L_s t_ar, g_t t_mb)    TP collectives, the hidden share o_tp
             (tp_overlap_train, only with tp_comm_overlap) at most the micro-batch's GEMM time
             (g_t = g / eta_K / (1 + g (1 / eta_K - 1)): the GEMMs' share of t_mb)
    t_pipe = (m + (PP - 1) / v) slot         bubble share (PP - 1) / (v m + PP - 1)  (Narayanan sec. 2.2)
    t_cp   = L_a (cp - 1) [max(0, t_kv - t_att) (f + [full]) + max(0, 2 t_kv - 2.5 t_att)]   context parallelism
    t_dp   = DP/ZeRO traffic over the DP group, partly hidden (dp_overlap) behind compute:
             ZeRO-0 all-reduce; 1: reduce-scatter + all-gather; 2: reduce-scatter per micro-batch
             + all-gather; 3: (2 all-gathers + reduce-scatter) per micro-batch
    step   = t_pipe + exposed t_dp + optimizer step (28 B per local parameter over HBM) + overhead

The ceiling ``MFU_train`` is that of GEMMs reducing over the hidden size ``h``. Under TP the row-parallel GEMMs'
forward (attention output over ``H d_h / tp``, MLP down over ``I / tp``) and the column-parallel GEMMs' data
gradient (QKV over ``(q + kv) / tp``, gate / up over ``2 I / tp``) reduce over fewer rows; the weight GEMMs (share ``g``
of ``F_hw``; the attention core keeps the ceiling) run at their FLOP-weighted rate ``eta_K``
(:func:`core.physics.training_gemm_eff`, assumption ``gemm_k0_ridge``), 1 for a dense model at TP 1.

Context parallelism (Megatron-LM ``--context-parallel-size``; Megatron-Core "Context parallelism" guide) splits each
sequence over ``cp`` ranks: every rank runs the linear layers on its ``s / cp`` tokens and attends them to all keys, the
keys and values of the other ranks reaching it block by block around a ring (point-to-point sends, one KV block of
``b s / cp`` tokens per step, ``cp - 1`` steps per layer), each send hidden behind the attention of the block already
there as far as the fabric allows; the backward passes the keys and values and their gradients (twice the bytes)
behind the backward attention (2.5x the forward's matmuls for a fused kernel). CP ranks hold the same weights; their
gradients are reduced over DP x CP.

Placement: TP inside the node, then CP, EP, PP, DP outward (DP groups span nodes once TP x PP fills one).
Each choice is a named assumption in :mod:`core.base.assumptions` or a documented constant below.

**Memory** per GPU is :func:`core.physics.training_footprint.training_memory_parts` (the one body the traced Memory view also
calls), evaluated here on the grid's arrays.

:func:`layout_grid` evaluates every quantity on a grid with axes (dp, v, b, recompute, zero) for one
TP x PP x EP; :func:`core.training.layout_math.evaluate_layout` times one layout and records its derivation
from the same grid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.base import HOUR_S, MS, choices
from core.catalog import GpuSpec, ModelArch
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import (
    ACT_BYTES,
    Collectives,
    effective_peak_flop_per_s,
    expert_params_total,
    lora_params,
    training_gemm_eff,
    training_memory_parts,
)
from core.training.flops import RECOMPUTES, attention_flops_per_token, attention_pairs_per_token, work

__all__ = [
    "COLLECTIVES_PER_LAYER",
    "GRAD_COMM_BYTES",
    "OPTIMIZER_STEP_BYTES",
    "Layout",
    "LayoutContext",
    "LayoutResult",
    "bubble_fraction",
    "config_layout",
    "cp_ring_s",
    "fp8_compute_speedup",
    "group_allreduce_s",
    "group_gather_s",
    "layout_context",
    "layout_grid",
    "layout_of",
    "result_at",
]

Recompute = choices.Recompute

#: Bytes per element of gradients and parameters on the DP wire (BF16 reduce-scatter / all-gather).
#: Megatron can reduce in FP32 (--accumulate-allreduce-grads-in-fp32), which doubles this traffic.
GRAD_COMM_BYTES = 2.0
#: HBM traffic of one Adam step per local parameter: FP32 master, m and v read and written (24 B),
#: the BF16 gradient read (2 B) and the BF16 weight written (2 B).
OPTIMIZER_STEP_BYTES = 28.0
#: TP collectives per layer per micro-batch (all-reduce equivalents; with sequence parallelism each is an
#: all-gather + reduce-scatter of the same volume): 2 forward + 2 backward, +2 when full recomputation
#: reruns the forward (Megatron-LM, Korthikanti et al. sec. 4.2.2). Same count for EP all-to-alls per
#: MoE layer (dispatch + combine, forward and backward).
COLLECTIVES_PER_LAYER = {"none": 4, "selective": 4, "full": 6}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Layout(_Frozen):
    """One parallel layout. ``gpus = tp x pp x dp``; EP splits experts inside TP x DP."""

    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    micro_batch: int = Field(1, ge=1)
    zero: choices.ZeroStage = 1
    recompute: Recompute = "selective"
    vpp: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)  # context parallelism: ranks one sequence is split over

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def label(self) -> str:
        v = f"(v{self.vpp})" if self.vpp > 1 else ""
        e = f" EP{self.ep}" if self.ep > 1 else ""
        c = f" CP{self.cp}" if self.cp > 1 else ""
        return (
            f"TP{self.tp}{c} PP{self.pp}{v} DP{self.dp}{e} · mb {self.micro_batch} · ZeRO-{self.zero} · "
            f"{self.recompute} recompute"
        )


class LayoutResult(_Frozen):
    """One layout timed and sized (times per optimizer step unless named otherwise) [s, B]."""

    layout: Layout
    gpus: int
    fits: bool
    batch_ok: bool
    memory_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    usable_bytes_per_gpu: float  # capacity less the training headroom: what the fit is checked against
    micro_batches: int
    global_batch_seqs: int
    global_batch_tokens: int
    steps: int
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    dp_comm_s: float  # raw DP / ZeRO traffic time
    dp_exposed_s: float  # the part not hidden behind compute
    optimizer_s: float
    overhead_s: float
    step_s: float
    cp_comm_s: float = 0.0  # context parallelism: the exposed part of the KV ring, per step
    runtime_s: float
    gpu_hours: float
    mfu: float
    hfu: float
    tokens_per_s: float
    why: str = ""

    @property
    def feasible(self) -> bool:
        return self.fits and self.batch_ok

    @property
    def bubble_frac(self) -> float:
        return self.bubble_s / self.step_s if self.step_s else 0.0

    @property
    def comm_exposed_s(self) -> float:
        return self.tp_comm_s + self.ep_comm_s + self.pp_comm_s + self.dp_exposed_s + self.cp_comm_s

    def time_parts(self) -> tuple[tuple[str, float], ...]:
        """(name, seconds per step) adding up to ``step_s``."""
        return (
            ("compute", self.compute_s),
            ("pipeline bubble", self.bubble_s),
            ("TP communication", self.tp_comm_s),
            ("CP ring (exposed)", self.cp_comm_s),
            ("EP all-to-all", self.ep_comm_s),
            ("PP sends", self.pp_comm_s),
            ("DP/ZeRO (exposed)", self.dp_exposed_s),
            ("optimizer step", self.optimizer_s),
            ("overhead", self.overhead_s),
        )


def bubble_fraction(pp: int, micro_batches, vpp: int = 1):
    """Share of a 1F1B step spent in the pipeline bubble: (p - 1) / (v m + p - 1) (Narayanan et al. sec. 2.2).

    p = 4, m = 8: 3/11 = 27.3 %; interleaved with v = 2: 3/19 = 15.8 %.
    """
    return (pp - 1) / (vpp * np.asarray(micro_batches, dtype=float) + pp - 1)


def fp8_compute_speedup(g: GpuSpec, precision: str, fp8_speedup: float) -> float:
    """Compute speed-up of the training precision over BF16: the named assumption, capped by the datasheet
    ratio; 1 on parts without FP8 tensor cores (A100 runs FP8 recipes at BF16 speed)."""
    if precision != "fp8":
        return 1.0
    return effective_peak_flop_per_s(g, "fp8", fp8_speedup, 1.0) / g.peak_flop_per_s("bf16")


# --- collectives over arrays of group sizes ----------------------------------------------------------------


def group_gather_s(coll: Collectives, n, p, k: int):
    """All-gather (= reduce-scatter) of ``n`` bytes over groups of ``p`` GPUs (array), ``k`` per node [s]."""
    return dataclasses.replace(coll, domain=k).all_gather_s(n, p)


def group_allreduce_s(coll: Collectives, n, p, k: int):
    """All-reduce of ``n`` bytes over groups of ``p`` GPUs (array), ``k`` per node, hierarchical across nodes [s]."""
    return dataclasses.replace(coll, domain=k).all_reduce_s(n, p)


# --- the vectorised layout model -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LayoutContext:
    """Per-deployment constants of the layout model."""

    dep: Deployment
    cfg: RabitConfig
    m: ModelArch
    g: GpuSpec
    coll: Collectives
    seq: int
    batch_seqs: int  # requested global batch [sequences]
    tokens: float
    P: float
    N_t: float  # LoRA adapters (0 for full training)
    flop_model: float
    flop_hw: tuple[float, ...]  # by RECOMPUTES
    gemm_share: tuple[float, ...]  # of flop_hw, the weight GEMMs' share (the rest: the attention core), by RECOMPUTES
    tp_hidden: float  # share of the TP collectives the GEMMs may hide (0 without TP communication overlap)
    peak_bf16: float
    speedup: float
    precision: str  # the precision the GEMMs run at: "fp8" where the part speeds FP8 up, else "bf16"
    peak_eff: float  # peak x speed-up x mfu_train
    q_slow: float
    capacity: float
    usable: float  # capacity less the training headroom (assumption train_mem_headroom_frac)
    hbm_eff: float


def layout_context(dep: Deployment | RabitConfig) -> LayoutContext:
    """The constants of the layout model for a deployment (a config is resolved here)."""
    dep = as_deployment(dep)
    cfg, m, g = dep.config, dep.model, dep.gpu
    a = cfg.assumptions
    coll = Collectives.of(dep)
    wk = work(dep)
    sp = fp8_compute_speedup(g, cfg.train_precision, a.fp8_speedup)
    peak = g.peak_flop_per_s("bf16")
    return LayoutContext(
        dep=dep,
        cfg=cfg,
        m=m,
        g=g,
        coll=coll,
        seq=cfg.seq_len,
        batch_seqs=max(1, round(cfg.global_batch_tokens / cfg.seq_len)),
        tokens=cfg.train_tokens,
        P=float(m.total_params()),
        N_t=float(lora_params(m, cfg.lora_rank)) if cfg.lora_rank else 0.0,
        flop_model=wk.model_flop_per_token,
        flop_hw=tuple(wk.hardware_flop_per_token[r] for r in RECOMPUTES),
        gemm_share=tuple(
            1.0
            - attention_flops_per_token(m, cfg.seq_len, recompute=r, kernel=cfg.attention_kernel)[1]
            / wk.hardware_flop_per_token[r]
            for r in RECOMPUTES
        ),
        tp_hidden=a.tp_overlap_train if cfg.tp_comm_overlap else 0.0,
        peak_bf16=peak,
        speedup=sp,
        precision="fp8" if sp > 1.0 else "bf16",
        # dense matrix work at the clock the part holds under it (MI300X: 0.58 of the peak's; 1 where unpublished)
        peak_eff=peak * sp * a.mfu_train * g.dense_clock_share("fp8" if sp > 1.0 else "bf16"),
        q_slow=a.qlora_slowdown if (cfg.lora_rank and cfg.qlora) else 1.0,
        capacity=g.memory_bytes,
        usable=g.memory_bytes * (1 - a.train_mem_headroom_frac),
        hbm_eff=g.memory_bw_bytes_per_s * a.mbu,
    )


def tp_exposed_s(t_coll_s, t_gemm_s, hidden_frac: float) -> tuple[Any, Any]:
    """Exposed and hidden time of a micro-batch's TP collectives on one stage [s], ``(t_tp, t_hidden)`` (arrays
    broadcast)::

        t_hidden = min(o_tp t_coll, t_gemm)        t_tp = t_coll - t_hidden

    TP communication overlap (Transformer Engine userbuffers) runs each GEMM's all-gather / reduce-scatter under
    the GEMM's other chunks: a share ``o_tp`` of the collectives hides, never more than the GEMMs that carry it
    last (the attention core, the norms and the pipeline sends hide none). Without overlap ``o_tp = 0``.
    GPT-3 175B on 4 H100s, one 2,048-token micro-batch, 12 layers (numbers rounded): 96 collectives of 0.139 ms,
    t_coll 13.4 ms; at o_tp 0.75 and a GEMM time of 95 ms, 10.0 ms hide and 3.35 ms stay.
    """
    t_hidden = np.minimum(hidden_frac * np.asarray(t_coll_s, dtype=float), t_gemm_s)
    return t_coll_s - t_hidden, t_hidden


def cp_ring_s(c: LayoutContext, tp: int, cp: int, b, recompute, L_s) -> tuple[Any, Any, Any]:
    """Exposed time of context parallelism's KV ring in one micro-batch on one stage, and its two ingredients:
    ``(t_cp, t_kv, t_att)`` [s] (arrays broadcast like ``b`` and ``recompute``; zeros at ``cp = 1``)::

        t_kv  = alpha + b (s / cp) k_l / beta              one KV block of one layer to the next rank
        t_att = 4 d_qk / tp x b P_l / cp^2 / R             the forward attention of one block (R: sustained FLOP/s)
        t_cp  = L_a (cp - 1) [max(0, t_kv - t_att) (1 + [full]) + max(0, 2 t_kv - 2.5 t_att)]

    ``k_l`` = the K and V bytes of one token in one layer on one TP rank, ``P_l`` = causal (query, key) pairs of one
    sequence in one layer (load-balanced over the ranks, Megatron-Core's two chunks per rank), ``L_a`` = the stage's
    attention layers. Forward: ``cp - 1`` sends, each behind one block's attention (again under full
    recomputation); backward: the keys and values and their gradients behind the block's backward attention,
    2.5x the forward's matmuls (five against two: FlashAttention-2, arXiv 2307.08691 sec. 3.1.2). The ring runs
    over the scale-up fabric while TP x CP fits a node, else over the inter-node fabric (one NIC per GPU).
    """
    zero = 0.0 * np.asarray(b, dtype=float)
    if cp <= 1:
        return zero, zero, zero
    m, s = c.m, c.seq
    k_l = m.kv_elements_per_token_layer() * 2.0 / (1 if m.is_mla else min(tp, m.num_kv_heads))  # BF16 K and V
    t_kv = c.coll.p2p_s(np.asarray(b, dtype=float) * (s / cp) * k_l, tp * cp > c.coll.domain)
    pairs_layer = attention_pairs_per_token(m, s) * s / max(1, m.attention_layers)
    t_att = 4.0 * m.attn_qk_dim / tp * np.asarray(b, dtype=float) * pairs_layer / cp**2 / c.peak_eff
    L_a = np.asarray(L_s, dtype=float) * m.attention_layers / m.num_layers
    full = np.where(np.asarray(recompute) == "full", 1.0, 0.0)
    fwd = np.maximum(0.0, t_kv - t_att) * (1.0 + full)
    bwd = np.maximum(0.0, 2.0 * t_kv - 2.5 * t_att)
    return L_a * (cp - 1) * (fwd + bwd), t_kv, t_att


def layout_grid(
    c: LayoutContext, tp: int, pp: int, ep: int, dp, vs, bs, rcs, zs, tol: float, cp: int = 1
) -> dict[str, np.ndarray]:
    """Every quantity of the layout model on a grid with axes (dp, v, b, recompute, zero), for one TP x CP x PP x
    EP (``cp`` ranks share each sequence).

    Arrays broadcast against shape (len(dp), len(vs), len(bs), len(rcs), len(zs)).
    """
    cfg, m, a = c.cfg, c.m, c.cfg.assumptions
    s, h, L = c.seq, m.hidden_size, m.num_layers
    D = np.asarray(dp, dtype=float)[:, None, None, None, None]
    V = np.asarray(vs, dtype=float)[None, :, None, None, None]
    B = np.asarray(bs, dtype=float)[None, None, :, None, None]
    ri = np.array([RECOMPUTES.index(r) for r in rcs])
    R = np.asarray(rcs)[None, None, None, :, None]
    Z = np.asarray(zs)[None, None, None, None, :]
    split = m.is_moe and ep > 1

    # batch: m micro-batches of b sequences on each of DP pipelines
    mm = np.maximum(1.0, np.floor(c.batch_seqs / (D * B) + 0.5))
    b_seq = mm * D * B
    batch_ok = np.abs(b_seq / c.batch_seqs - 1) <= tol + 1e-12
    v_ok = (V == 1) | ((pp > 1) & (pp * V <= L) & (np.mod(mm, pp) == 0))

    # memory: the one body, on arrays
    mem = training_memory_parts(
        c.dep, dp=D, tp=tp, pp=pp, ep=ep, zero=Z, micro_batch=B, recompute=R, vpp=V, micro_batches=mm, cp=cp
    )
    L_s, p_e, E = mem.stage_layers, mem.pp_eff, mem.expert_dp
    fits = mem.total <= mem.usable
    shard = tp * p_e
    upd = mem.optimizer_params
    # DP / ZeRO traffic per step: the local gradient shard (adapters only under LoRA)
    if cfg.lora_rank:
        n_dense, n_exp = c.N_t * GRAD_COMM_BYTES / shard, 0.0
    else:
        P_e = expert_params_total(m) if split else 0.0
        n_dense = (c.P - P_e) * GRAD_COMM_BYTES / shard
        n_exp = P_e * GRAD_COMM_BYTES / (ep * p_e) if split else 0.0

    # one micro-batch on one stage: each of the cp ranks runs b s / cp of its tokens
    tok = B * s / cp
    ramp = tok / (tok + a.mfu_ramp_tokens)
    hw = np.array(c.flop_hw)[ri][None, None, None, :, None]
    gemm = np.array(c.gemm_share)[ri][None, None, None, :, None]
    # the weight GEMMs at their short-reduction rate eta_K (core.physics.gemm_shape), the attention core at the
    # ceiling: t_mb = t_flop (1 + g (1 / eta_K - 1)), of which the GEMMs take g_t = g / eta_K / (1 + g (1 / eta_K - 1))
    eta_k = np.array([training_gemm_eff(c.dep, tp, ep, r, c.precision) for r in RECOMPUTES])[ri][
        None, None, None, :, None
    ]
    f_k = 1.0 + gemm * (1.0 / eta_k - 1.0)
    t_mb = hw * f_k * tok / shard / (c.peak_eff * ramp) * c.q_slow  # hw x f_k: one small array, not the grid
    g_t = gemm / eta_k / f_k
    n_coll = np.array([COLLECTIVES_PER_LAYER[r] for r in RECOMPUTES], dtype=float)[ri][None, None, None, :, None]
    t_ar = c.coll.all_reduce_s(tok * h * ACT_BYTES, tp) if tp > 1 else 0.0 * tok
    t_tp, t_tp_hidden = tp_exposed_s(n_coll * L_s * t_ar, g_t * t_mb, c.tp_hidden)
    if split:
        coll_ep = dataclasses.replace(c.coll, domain=max(1, c.coll.domain // tp))
        t_a2a = coll_ep.all_to_all_s(tok / tp * m.experts_per_tok * h * ACT_BYTES, ep)
        L_moe = np.minimum(L_s, m.moe_layers)
        t_ep = n_coll * L_moe * t_a2a
    else:
        t_a2a, L_moe, t_ep = 0.0 * tok, 0, 0.0 * tok
    if pp > 1:
        cross = tp * pp > c.coll.domain
        t_hop = c.coll.p2p_s(tok * h * ACT_BYTES / (tp if cfg.sequence_parallel else 1), cross)
        t_p2p = 2 * V * t_hop
    else:
        t_hop, t_p2p = 0.0 * tok, 0.0 * V * tok
    t_cp, t_kv, t_att = cp_ring_s(c, tp, cp, B, R, L_s)
    slot = t_mb + t_tp + t_ep + t_p2p + t_cp
    bub = (pp - 1) / V * slot

    # data parallel / ZeRO traffic per step
    k = max(1, c.coll.domain // (tp * pp))
    # the gradients of the CP ranks are reduced with the DP ones: one group of dp x cp
    rs_d, ar_d = group_gather_s(c.coll, n_dense, D * cp, k), group_allreduce_s(c.coll, n_dense, D * cp, k)
    if split and not cfg.lora_rank:
        rs_e, ar_e = group_gather_s(c.coll, n_exp, E, k), group_allreduce_s(c.coll, n_exp, E, k)
    else:
        rs_e, ar_e = 0.0 * D, 0.0 * D
    rs, ar = rs_d + rs_e, ar_d + ar_e
    t_dp = np.where(Z == 0, ar, np.where(Z == 1, 2 * rs, np.where(Z == 2, (mm + 1) * rs, 3 * mm * rs)))
    compute = mm * t_mb
    dp_exp = t_dp - np.minimum(a.dp_overlap * t_dp, compute)
    opt = OPTIMIZER_STEP_BYTES * upd / c.hbm_eff
    ovh = a.step_overhead_ms * MS
    t_pipe = (mm + (pp - 1) / V) * slot
    step = t_pipe + dp_exp + opt + ovh
    tokens_step = b_seq * s
    n_steps = np.ceil(c.tokens / tokens_step)
    runtime = n_steps * step
    gpus = tp * pp * cp * D
    return dict(
        mm=mm,
        b_seq=b_seq,
        batch_ok=batch_ok,
        v_ok=v_ok,
        fits=fits,
        mem=mem.total,
        W=mem.weight,
        W8=mem.fp8_weight,
        G=mem.gradient,
        S=mem.optimizer,
        act=mem.activation,
        a_l=mem.activation_per_layer,
        f_v=mem.interleave_factor,
        ramp=ramp,
        hw=hw,
        eta_k=eta_k,
        f_k=f_k,
        g_t=g_t,
        t_mb=t_mb,
        n_coll=n_coll,
        t_ar=t_ar,
        t_tp=t_tp,
        t_tp_hidden=t_tp_hidden,
        gemm=gemm,
        t_a2a=t_a2a,
        L_moe=L_moe,
        t_ep=t_ep,
        t_hop=t_hop,
        t_p2p=t_p2p,
        t_cp=t_cp,
        t_kv=t_kv,
        t_att=t_att,
        slot=slot,
        bubble=bub,
        rs=rs,
        ar=ar,
        t_dp=t_dp,
        dp_exp=dp_exp,
        compute=compute,
        upd=upd,
        opt=opt,
        ovh=ovh,
        t_pipe=t_pipe,
        step=step,
        steps=n_steps,
        runtime=runtime,
        gpus=gpus,
        k=k,
        L_s=L_s,
        p_e=p_e,
        E=E,
        mfu=c.flop_model * tokens_step / (step * gpus * c.peak_bf16),
        hfu=hw * tokens_step / (step * gpus * c.peak_bf16),
        feasible=fits & batch_ok & v_ok,
    )


def layout_of(row: Any) -> Layout:
    """The layout a search row (tp, pp, dp, ep, b, zero, recompute index, v, cp) stands for."""
    tp, pp, dp, ep, b, z, ri, v, cp = (int(x) for x in row)
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=b, zero=z, recompute=RECOMPUTES[ri], vpp=v, cp=cp)


def result_at(c: LayoutContext, lay: Layout, r: dict[str, np.ndarray], ix: tuple, why: str = "") -> LayoutResult:
    """A LayoutResult from element ``ix`` of a grid."""

    def f(key: str) -> float:
        return float(
            np.asarray(r[key])[tuple(min(i, s - 1) for i, s in zip(ix, np.shape(r[key])))]
            if np.ndim(r[key])
            else r[key]
        )

    mm, steps, step = int(f("mm")), int(f("steps")), f("step")
    gpus = lay.gpus
    return LayoutResult(
        layout=lay,
        gpus=gpus,
        fits=bool(f("fits")),
        batch_ok=bool(f("batch_ok")) and bool(f("v_ok")),
        memory_bytes_per_gpu=f("mem"),
        capacity_bytes_per_gpu=c.capacity,
        usable_bytes_per_gpu=c.usable,
        micro_batches=mm,
        global_batch_seqs=int(f("b_seq")),
        global_batch_tokens=int(f("b_seq")) * c.seq,
        steps=steps,
        compute_s=f("compute"),
        bubble_s=f("bubble"),
        tp_comm_s=mm * f("t_tp"),
        ep_comm_s=mm * f("t_ep"),
        pp_comm_s=mm * f("t_p2p"),
        cp_comm_s=mm * f("t_cp"),
        dp_comm_s=f("t_dp"),
        dp_exposed_s=f("dp_exp"),
        optimizer_s=f("opt"),
        overhead_s=f("ovh"),
        step_s=step,
        runtime_s=steps * step,
        gpu_hours=gpus * steps * step / HOUR_S,
        mfu=f("mfu"),
        hfu=f("hfu"),
        tokens_per_s=f("b_seq") * c.seq / step,
        why=why,
    )


def config_layout(cfg: Deployment | RabitConfig) -> Layout:
    """The layout the config's sidebar / CLI flags name."""
    cfg = cfg.config if isinstance(cfg, Deployment) else cfg
    return Layout(
        tp=cfg.tp,
        pp=cfg.pp,
        dp=cfg.dp,
        ep=cfg.ep,
        micro_batch=cfg.micro_batch,
        zero=cfg.zero,
        recompute=cfg.recompute,
        cp=cfg.cp,
    )
