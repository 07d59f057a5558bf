"""Training: work, the fastest layout that fits, the deadline search to 32,768 GPUs, and goodput.

**Work** (per token; Kaplan et al. 2020; Narayanan et al., "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", SC'21, FLOP count of a GPT iteration)::

    model FLOPs / token    F_m  = 6 N + 12 d_qk A_t                 (full training)
                                = c_L N + 6 N_lora + 12 d_qk A_t     (LoRA: frozen base, c_L = 4, assumption)
    hardware FLOPs / token F_hw = F_m                                (no recomputation)
                                = F_m + 4 d_qk A_t                    (selective: attention core again)
                                = F_m + 2 N + 4 d_qk A_t              (full: a whole extra forward)

``N`` = active parameters that do matrix work (LM head in, embedding lookup out), ``d_qk = H x d_head``,
``A_t`` = attended (query, key) pairs per token summed over layers = L (s + 1) / 2 for causal attention
(sliding-window layers see at most the window). Narayanan et al. write the same work as
72 B s l h^2 (1 + s / 6h + V / 12hl) per iteration without recomputation; its attention term counts the
full s x s score matrix, twice what a causal FlashAttention kernel computes, so ours is half of it
(physics over convention: a causal kernel skips the masked blocks). With recomputation the same paper
writes 96 B s l h^2 (...): our hardware FLOPs. MFU divides model FLOPs, HFU hardware
FLOPs, by the BF16 dense peak (the convention of Llama 3 and Megatron; Korthikanti et al. sec. 5).

**Step time** of one global batch on a layout TP x PP x DP (x EP), micro-batch b, ZeRO stage z,
recomputation r and v virtual pipeline stages; m = B / (DP b) micro-batches per pipeline::

    t_mb   = F_hw b s / (TP p_e) / (peak x fp8 x MFU_train x T/(T+T0))      one micro-batch, one stage
    slot   = t_mb + TP collectives + EP all-to-alls + PP sends                (per micro-batch, per stage)
    t_pipe = (m + (PP - 1) / v) slot         bubble share (PP - 1) / (v m + PP - 1)  (Narayanan sec. 2.2)
    t_dp   = DP/ZeRO traffic over the DP group, partly hidden (dp_overlap) behind compute:
             ZeRO-0 all-reduce; 1: reduce-scatter + all-gather; 2: reduce-scatter per micro-batch
             + all-gather; 3: (2 all-gathers + reduce-scatter) per micro-batch
    step   = t_pipe + exposed t_dp + optimizer step (28 B per local parameter over HBM) + overhead

Placement: TP inside the node, then EP, PP, DP outward (DP groups span nodes once TP x PP fills one).
Each choice is a named assumption in :mod:`core.assumptions` or a documented constant below.

**Search**: every TP (power of 2 dividing the heads, inside the scale-up domain) x PP (divisors of L and
powers of two) x EP (MoE) is a small python loop; DP over all GPU counts x v x b x recompute x ZeRO are
numpy axes. A layout is kept if it fits memory (the same formulas as :func:`core.memory.training_memory_for`,
evaluated on arrays) and splits the global batch within ``batch_tolerance``. The fastest wins.

**Deadline**: the smallest GPU count whose expected wall-clock *with failures* (:mod:`core.goodput`) meets
the deadline. Counts are the powers of two below one node and every whole number of nodes up to 32,768.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core import catalog, choices
from core.pricing import gpu_price
from core.catalog import GpuSpec, Price
from core.collectives import Collectives
from core.config import RabitConfig
from core.goodput import Goodput, goodput, goodput_arrays
from core.memory import (
    ADAM_GRAD_B,
    ADAM_OPTIM_B,
    ADAM_WEIGHT_B,
    QLORA_BASE_BYTES,
    TrainingMemory,
    activation_bytes_per_layer,
    expert_params_total,
    lora_params,
    stage_layers,
    training_memory_for,
)
from core.model import ModelArch
from core.step import effective_peak_flop_per_s
from core.trace import Step, Trace
from core.units import DAY_S, GiB, HOUR_S, MS
from core.catalog import fabric_of, gpu_of, model_of

Recompute = choices.Recompute

#: Search axes.
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")
MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
VIRTUAL_STAGES: tuple[int, ...] = (1, 2, 4)
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
#: Largest GPU count the deadline search covers (the issue's bound).
MAX_GPUS = 32_768
#: Bytes per element of gradients and parameters on the DP wire (BF16 reduce-scatter / all-gather).
#: Megatron can reduce in FP32 (--accumulate-allreduce-grads-in-fp32), which doubles this traffic.
GRAD_COMM_BYTES = 2.0
#: Bytes of the activations sent between TP ranks, EP ranks and pipeline stages (BF16).
ACT_BYTES = 2.0
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

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        v = f"(v{self.vpp})" if self.vpp > 1 else ""
        e = f" EP{self.ep}" if self.ep > 1 else ""
        return (
            f"TP{self.tp} PP{self.pp}{v} DP{self.dp}{e} · mb {self.micro_batch} · ZeRO-{self.zero} · "
            f"{self.recompute} recompute"
        )


class TrainingGoal(_Frozen):
    """What the user asks for beyond the shared config.

    deadline_s: wall-clock the run must finish in (expected, with failures) [s]; enables the deadline search.
    gpus: a GPU budget: plan on exactly this many (default: the config's GPUs).
    layout: evaluate this layout instead of searching (a team checking the run it already has).
    zero / recompute / micro_batch: pin that knob (None: search it).
    batch_tolerance: the global batch may move this much to split evenly into DP x micro-batches x m.
    checkpoint_interval_s: None = Daly's optimum.
    """

    deadline_s: float | None = Field(None, gt=0)
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS)
    max_gpus: int = Field(MAX_GPUS, ge=1, le=MAX_GPUS)
    layout: Layout | None = None
    zero: choices.ZeroStage | None = None
    recompute: Recompute | None = None
    micro_batch: int | None = Field(None, ge=1)
    batch_tolerance: float = Field(0.1, ge=0, le=1)
    checkpoint_interval_s: float | None = Field(None, gt=0)
    top_k: int = Field(12, ge=1, le=100)


class Work(_Frozen):
    """FLOPs of the run (per token and in total)."""

    active_matmul_params: float
    trainable_params: float
    attention_pairs_per_token: float  # summed over layers
    model_flop_per_token: float
    hardware_flop_per_token: dict[str, float]  # by recomputation mode
    tokens: float
    total_model_flop: float


class LayoutResult(_Frozen):
    """One layout timed and sized (times per optimizer step unless named otherwise) [s, B]."""

    layout: Layout
    gpus: int
    fits: bool
    batch_ok: bool
    memory_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
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
        return self.tp_comm_s + self.ep_comm_s + self.pp_comm_s + self.dp_exposed_s

    def time_parts(self) -> tuple[tuple[str, float], ...]:
        """(name, seconds per step) adding up to ``step_s``."""
        return (
            ("compute", self.compute_s),
            ("pipeline bubble", self.bubble_s),
            ("TP communication", self.tp_comm_s),
            ("EP all-to-all", self.ep_comm_s),
            ("PP sends", self.pp_comm_s),
            ("DP/ZeRO (exposed)", self.dp_exposed_s),
            ("optimizer step", self.optimizer_s),
            ("overhead", self.overhead_s),
        )


class CurvePoint(_Frozen):
    """The best layout at one GPU count."""

    gpus: int
    feasible: bool
    layout: Layout | None = None
    runtime_s: float = math.inf  # failure-free
    wall_clock_s: float = math.inf  # expected, with failures
    gpu_hours: float = math.inf  # failure-free
    cost_usd: float | None = None  # wall-clock with failures x price
    goodput_frac: float = 0.0
    mfu: float = 0.0
    bubble_frac: float = 0.0
    comm_frac: float = 0.0
    meets_deadline: bool | None = None
    slower_reason: str = ""  # set where more GPUs are slower than a smaller count


class TrainingPlan(_Frozen):
    """Everything the training page and ``rabit train`` show."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    mode: Literal["deadline", "budget", "layout"]
    goal: TrainingGoal
    work: Work
    gpus: int
    best: LayoutResult | None
    alternatives: tuple[LayoutResult, ...]
    memory: TrainingMemory | None
    goodput: Goodput | None
    price: Price | None
    cost_usd: float | None
    curve: tuple[CurvePoint, ...]
    deadline_met: bool | None
    message: str
    steps: tuple[Step, ...] = ()


# --- work ---------------------------------------------------------------------------------------------


def attention_pairs_per_token(m: ModelArch, seq: int) -> float:
    """Attended (query, key) pairs per token, summed over layers, for causal attention over ``seq`` tokens.

    Full layers: the mean of 1..s = (s + 1) / 2. Sliding layers with window w < s: (w (w + 1) / 2 + (s - w) w) / s.
    Llama-3.1-70B at s = 4,096: 80 x 2,048.5 = 163,880.
    """
    full = m.full_attention_layers * (seq + 1) / 2
    if not m.sliding_layers:
        return float(full)
    w = min(m.sliding_window, seq)
    per = (w * (w + 1) / 2 + (seq - w) * w) / seq
    return float(full + m.sliding_layers * per)


def flops_per_token(
    m: ModelArch, seq: int, *, lora_rank: int = 0, lora_flop_per_param: float = 4.0, recompute: str = "none"
) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per trained token [FLOP]; see the module docstring.

    Llama-3.1-70B, s = 4,096, full training: 6 x 69.50e9 + 12 x 8,192 x 163,880 = 4.33e11 FLOP/token.
    """
    n = float(m.active_matmul_params())
    attn = 12.0 * m.attn_qk_dim * attention_pairs_per_token(m, seq)
    if lora_rank:
        model = lora_flop_per_param * n + 6.0 * lora_params(m, lora_rank) + attn
        extra_full = 2.0 * n + 2.0 * lora_params(m, lora_rank)
    else:
        model = 6.0 * n + attn
        extra_full = 2.0 * n
    if recompute == "selective":
        return model, model + attn / 3
    if recompute == "full":
        return model, model + extra_full + attn / 3
    return model, model


def work(cfg: RabitConfig) -> Work:
    m = model_of(cfg)
    a = cfg.assumptions
    hw = {
        r: flops_per_token(
            m, cfg.seq_len, lora_rank=cfg.lora_rank, lora_flop_per_param=a.lora_flop_per_param, recompute=r
        )[1]
        for r in RECOMPUTES
    }
    fm = flops_per_token(m, cfg.seq_len, lora_rank=cfg.lora_rank, lora_flop_per_param=a.lora_flop_per_param)[0]
    return Work(
        active_matmul_params=float(m.active_matmul_params()),
        trainable_params=float(lora_params(m, cfg.lora_rank) if cfg.lora_rank else m.total_params()),
        attention_pairs_per_token=attention_pairs_per_token(m, cfg.seq_len),
        model_flop_per_token=fm,
        hardware_flop_per_token=hw,
        tokens=cfg.train_tokens,
        total_model_flop=fm * cfg.train_tokens,
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
class _Ctx:
    """Per-config constants of the layout model."""

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
    peak_bf16: float
    speedup: float
    peak_eff: float  # peak x speed-up x mfu_train
    q_slow: float
    capacity: float
    overhead_bytes: float
    hbm_eff: float


def _ctx(cfg: RabitConfig) -> _Ctx:
    m, g, f = model_of(cfg), gpu_of(cfg), fabric_of(cfg)
    a = cfg.assumptions
    coll = Collectives.for_cluster(g, f, cfg.gpus_per_node, a.comm_bw_eff, a.collective_base_us * 1e-6)
    wk = work(cfg)
    sp = fp8_compute_speedup(g, cfg.train_precision, a.fp8_speedup)
    peak = g.peak_flop_per_s("bf16")
    return _Ctx(
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
        peak_bf16=peak,
        speedup=sp,
        peak_eff=peak * sp * a.mfu_train,
        q_slow=a.qlora_slowdown if (cfg.lora_rank and cfg.qlora) else 1.0,
        capacity=g.memory_bytes,
        overhead_bytes=a.runtime_overhead_gib * GiB,
        hbm_eff=g.memory_bw_bytes_per_s * a.mbu,
    )


def _grid(c: _Ctx, tp: int, pp: int, ep: int, dp, vs, bs, rcs, zs, tol: float) -> dict[str, np.ndarray]:
    """Every quantity of the layout model on a grid with axes (dp, v, b, recompute, zero).

    Arrays broadcast against shape (len(dp), len(vs), len(bs), len(rcs), len(zs)).
    """
    cfg, m, a = c.cfg, c.m, c.cfg.assumptions
    s, h, L = c.seq, m.hidden_size, m.num_layers
    D = np.asarray(dp, dtype=float)[:, None, None, None, None]
    V = np.asarray(vs, dtype=float)[None, :, None, None, None]
    L_s = np.array([stage_layers(L, pp, int(v))[0] for v in vs], dtype=float)[None, :, None, None, None]
    p_e = L / L_s
    B = np.asarray(bs, dtype=float)[None, None, :, None, None]
    ri = np.array([RECOMPUTES.index(r) for r in rcs])
    Z = np.asarray(zs)[None, None, None, None, :]
    split = m.is_moe and ep > 1
    P_e = expert_params_total(m) if split else 0.0
    P_d = c.P - P_e
    E = np.asarray(tp * D / ep) if split else D  # expert data-parallel degree

    # batch: m micro-batches of b sequences on each of DP pipelines
    mm = np.maximum(1.0, np.floor(c.batch_seqs / (D * B) + 0.5))
    b_seq = mm * D * B
    batch_ok = np.abs(b_seq / c.batch_seqs - 1) <= tol + 1e-12
    v_ok = (V == 1) | ((pp > 1) & (pp * V <= L) & (np.mod(mm, pp) == 0))

    # memory (core.memory.training_memory_for on arrays)
    zw, zg, zo = np.where(Z >= 3, D, 1.0), np.where(Z >= 2, D, 1.0), np.where(Z >= 1, D, 1.0)
    ew, eg, eo = np.where(Z >= 3, E, 1.0), np.where(Z >= 2, E, 1.0), np.where(Z >= 1, E, 1.0)
    shard = tp * p_e
    if cfg.lora_rank:
        base_b = QLORA_BASE_BYTES if cfg.qlora else 2.0
        W = (P_d * base_b + c.N_t * ADAM_WEIGHT_B) / shard + (P_e * base_b / (ep * p_e) if split else 0.0)
        G = c.N_t * ADAM_GRAD_B / (shard * zg)
        S = c.N_t * ADAM_OPTIM_B / (shard * zo)
        W8 = 0.0
        upd = c.N_t / (shard * zo)
        n_dense, n_exp = c.N_t * GRAD_COMM_BYTES / shard, 0.0
    else:
        es = ep * p_e
        W = ADAM_WEIGHT_B * (P_d / (shard * zw) + (P_e / (es * ew) if split else 0.0))
        G = ADAM_GRAD_B * (P_d / (shard * zg) + (P_e / (es * eg) if split else 0.0))
        S = ADAM_OPTIM_B * (P_d / (shard * zo) + (P_e / (es * eo) if split else 0.0))
        W8 = W / 2 if cfg.train_precision == "fp8" else 0.0
        upd = P_d / (shard * zo) + (P_e / (es * eo) if split else 0.0)
        n_dense, n_exp = P_d * GRAD_COMM_BYTES / shard, (P_e * GRAD_COMM_BYTES / es if split else 0.0)
    a1 = np.array([activation_bytes_per_layer(m, s, 1, tp, r, cfg.sequence_parallel) for r in RECOMPUTES])[ri]
    a1 = a1[None, None, None, :, None]
    f_v = np.where(V > 1, 1 + (pp - 1) / (pp * V), 1.0)
    act = a1 * B * L_s * np.minimum(pp, mm) * f_v + 4 * s * B * m.vocab_size / tp
    mem = W + W8 + G + S + act + c.overhead_bytes
    fits = mem <= c.capacity

    # one micro-batch on one stage
    tok = B * s
    ramp = tok / (tok + a.mfu_ramp_tokens)
    hw = np.array(c.flop_hw)[ri][None, None, None, :, None]
    t_mb = hw * tok / shard / (c.peak_eff * ramp) * c.q_slow
    n_coll = np.array([COLLECTIVES_PER_LAYER[r] for r in RECOMPUTES], dtype=float)[ri][None, None, None, :, None]
    t_ar = c.coll.all_reduce_s(tok * h * ACT_BYTES, tp) if tp > 1 else 0.0 * tok
    t_tp = n_coll * L_s * t_ar * (1 - a.tp_overlap_train)
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
    slot = t_mb + t_tp + t_ep + t_p2p
    bub = (pp - 1) / V * slot

    # data parallel / ZeRO traffic per step
    k = max(1, c.coll.domain // (tp * pp))
    rs_d, ar_d = group_gather_s(c.coll, n_dense, D, k), group_allreduce_s(c.coll, n_dense, D, k)
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
    gpus = tp * pp * D
    return dict(
        mm=mm,
        b_seq=b_seq,
        batch_ok=batch_ok,
        v_ok=v_ok,
        fits=fits,
        mem=mem,
        W=W,
        W8=W8,
        G=G,
        S=S,
        act=act,
        a1=a1,
        f_v=f_v,
        ramp=ramp,
        hw=hw,
        t_mb=t_mb,
        n_coll=n_coll,
        t_ar=t_ar,
        t_tp=t_tp,
        t_a2a=t_a2a,
        L_moe=L_moe,
        t_ep=t_ep,
        t_hop=t_hop,
        t_p2p=t_p2p,
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


def _candidates(c: _Ctx, goal: TrainingGoal) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(TP, PP, EP) values worth searching for this model and cluster."""
    m = c.m
    top = min(c.coll.domain, 64)
    tps = tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if t <= top and m.num_heads % t == 0)
    L = m.num_layers
    pps = sorted({d for d in range(1, L + 1) if L % d == 0} | {p for p in (2, 4, 8, 16, 32) if p <= L})
    eps = (1,)
    if m.is_moe:
        eps = tuple(e for e in (1, 2, 4, 8, 16, 32, 64) if e <= m.num_experts and m.num_experts % e == 0)
    if goal.layout is not None:
        return (goal.layout.tp,), (goal.layout.pp,), (goal.layout.ep,)
    return tps, tuple(pps), eps


def _axes(goal: TrainingGoal) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    if goal.layout is not None:
        lay = goal.layout
        return (lay.vpp,), (lay.micro_batch,), (lay.recompute,), (lay.zero,)
    bs = (goal.micro_batch,) if goal.micro_batch else MICRO_BATCHES
    rcs = (goal.recompute,) if goal.recompute else RECOMPUTES
    zs = (goal.zero,) if goal.zero is not None else ZERO_STAGES
    return VIRTUAL_STAGES, bs, rcs, zs


def gpu_counts(gpus_per_node: int, max_gpus: int = MAX_GPUS) -> np.ndarray:
    """Powers of two below one node, then every whole number of nodes up to ``max_gpus``."""
    small = [2**i for i in range(0, 16) if 2**i < gpus_per_node and 2**i <= max_gpus]
    nodes = np.arange(1, max_gpus // gpus_per_node + 1) * gpus_per_node
    return np.array(small + nodes.tolist(), dtype=np.int64)


_CURVE_KEYS = (
    "runtime",
    "step",
    "steps",
    "compute",
    "bubble",
    "t_tp",
    "t_ep",
    "t_p2p",
    "dp_exp",
    "opt",
    "mfu",
    "mem",
    "mm",
)


def _best_per_count(c: _Ctx, goal: TrainingGoal, counts: np.ndarray) -> dict[str, np.ndarray]:
    """The fastest feasible layout at each GPU count (vectorised search); runtime inf where none."""
    vs, bs, rcs, zs = _axes(goal)
    tps, pps, eps = _candidates(c, goal)
    n = len(counts)
    best = {k: np.full(n, np.inf) for k in _CURVE_KEYS}
    lay = np.zeros((n, 8), dtype=np.int64)  # tp, pp, dp, ep, b, zero, rc index, v
    shape_tail = (len(vs), len(bs), len(rcs), len(zs))
    max_dp = c.batch_seqs * (1 + goal.batch_tolerance)
    for tp in tps:
        for pp in pps:
            grp = tp * pp
            sel = np.nonzero((counts % grp == 0) & (counts // grp <= max_dp))[0]
            if not len(sel):
                continue
            for ep in eps:
                dp = counts[sel] // grp
                if ep > 1:
                    ok = (tp * dp) % ep == 0
                    if not ok.any():
                        continue
                    idx, dp = sel[ok], dp[ok]
                else:
                    idx = sel
                r = _grid(c, tp, pp, ep, dp, vs, bs, rcs, zs, goal.batch_tolerance)
                full = (len(dp),) + shape_tail
                rt = np.where(np.broadcast_to(r["feasible"], full), np.broadcast_to(r["runtime"], full), np.inf)
                flat = rt.reshape(len(dp), -1)
                j = np.argmin(flat, axis=1)
                val = flat[np.arange(len(dp)), j]
                better = val < best["runtime"][idx]
                if not better.any():
                    continue
                ii, jj, rows = idx[better], j[better], np.arange(len(dp))[better]
                for key in _CURVE_KEYS:
                    arr = np.broadcast_to(r[key], full).reshape(len(dp), -1)
                    best[key][ii] = arr[rows, jj]
                vi, bi, ri, zi = np.unravel_index(jj, shape_tail)
                lay[ii] = np.stack(
                    [
                        np.full(len(ii), tp),
                        np.full(len(ii), pp),
                        dp[better],
                        np.full(len(ii), ep),
                        np.asarray(bs)[bi],
                        np.asarray(zs)[zi],
                        np.array([RECOMPUTES.index(x) for x in rcs])[ri],
                        np.asarray(vs)[vi],
                    ],
                    axis=1,
                )
    best["layout"] = lay
    return best


def _layout_of(row) -> Layout:
    tp, pp, dp, ep, b, z, ri, v = (int(x) for x in row)
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=b, zero=z, recompute=RECOMPUTES[ri], vpp=v)


def _result(c: _Ctx, lay: Layout, r: dict[str, np.ndarray], ix: tuple, why: str = "") -> LayoutResult:
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
        micro_batches=mm,
        global_batch_seqs=int(f("b_seq")),
        global_batch_tokens=int(f("b_seq")) * c.seq,
        steps=steps,
        compute_s=f("compute"),
        bubble_s=f("bubble"),
        tp_comm_s=mm * f("t_tp"),
        ep_comm_s=mm * f("t_ep"),
        pp_comm_s=mm * f("t_p2p"),
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


def _why_lost(best: LayoutResult, other: LayoutResult) -> str:
    if not other.fits:
        return (
            f"memory: needs {other.memory_bytes_per_gpu / 1e9:.3g} GB per GPU, "
            f"{other.capacity_bytes_per_gpu / 1e9:.3g} GB available"
        )
    if not other.batch_ok:
        return (
            f"global batch: DP {other.layout.dp} x micro-batch {other.layout.micro_batch} cannot split the batch "
            "evenly" + (" (interleaving needs m divisible by PP)" if other.layout.vpp > 1 else "")
        )
    parts = {
        "compute (recomputation, stage imbalance)": other.compute_s * other.steps - best.compute_s * best.steps,
        "pipeline bubble": other.bubble_s * other.steps - best.bubble_s * best.steps,
        "communication": other.comm_exposed_s * other.steps - best.comm_exposed_s * best.steps,
        "optimizer step": other.optimizer_s * other.steps - best.optimizer_s * best.steps,
    }
    name, d = max(parts.items(), key=lambda kv: kv[1])
    slower = other.runtime_s / best.runtime_s - 1
    if slower <= 1e-9 or d <= 0:
        return "ties with the fastest"
    return f"{name}: +{d / 3600:.3g} h over the run ({slower:+.1%} runtime)"


def layouts_at(cfg: RabitConfig, gpus: int, goal: TrainingGoal | None = None) -> tuple[LayoutResult, ...]:
    """The best setting of each TP x PP x EP x ZeRO shape on ``gpus`` GPUs, fastest feasible first, then
    shapes that do not fit; ``why`` says why each lost to the first."""
    goal = goal or TrainingGoal()
    c = _ctx(cfg)
    vs, bs, rcs, zs = _axes(goal)
    tps, pps, eps = _candidates(c, goal)
    rows: list[tuple[float, float, Layout, dict, tuple]] = []
    for tp in tps:
        for pp in pps:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            for ep in eps:
                if ep > 1 and (tp * dp) % ep:
                    continue
                r = _grid(
                    c, tp, pp, ep, np.array([dp]), vs, bs, rcs, zs, goal.batch_tolerance if goal.layout is None else 1e9
                )
                full = (1, len(vs), len(bs), len(rcs), len(zs))
                feas = np.broadcast_to(r["feasible"], full)
                rt = np.broadcast_to(r["runtime"], full)
                mem = np.broadcast_to(r["mem"], full)
                for zi, z in enumerate(zs):
                    if dp == 1 and zi > 0:
                        break  # ZeRO shards over DP: at DP 1 every stage is the same layout
                    sub_f, sub_rt = feas[..., zi], rt[..., zi]
                    if sub_f.any():
                        j = np.unravel_index(np.argmin(np.where(sub_f, sub_rt, np.inf)), sub_f.shape)
                        key = (0.0, float(sub_rt[j]))
                    else:
                        bo = np.broadcast_to(r["batch_ok"] & r["v_ok"], full)[..., zi]
                        if not bo.any():
                            continue
                        j = np.unravel_index(np.argmin(np.where(bo, mem[..., zi], np.inf)), bo.shape)
                        key = (1.0, float(mem[..., zi][j]))
                    ix = tuple(int(x) for x in j) + (zi,)
                    lay = Layout(
                        tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=bs[ix[2]], zero=z, recompute=rcs[ix[3]], vpp=vs[ix[1]]
                    )
                    rows.append((key[0], key[1], lay, r, ix))
    rows.sort(key=lambda t: (t[0], t[1]))
    if not rows:
        return ()
    out = [_result(c, lay, r, ix) for _, _, lay, r, ix in rows]
    feas = [x for x in out if x.feasible]
    if not feas:
        return tuple(x.model_copy(update={"why": _why_lost(x, x)}) for x in out[: goal.top_k])
    best = feas[0]
    top = [best.model_copy(update={"why": "fastest that fits"})]
    top += [x.model_copy(update={"why": _why_lost(best, x)}) for x in feas[1 : goal.top_k]]
    nofit = [x for x in out if not x.fits]
    top += [x.model_copy(update={"why": _why_lost(best, x)}) for x in nofit[: max(3, goal.top_k // 4)]]
    return tuple(top)


# --- one layout, traced ------------------------------------------------------------------------------------


def evaluate_layout(cfg: RabitConfig, lay: Layout, tr: Trace | None = None) -> LayoutResult:
    """Time and size one layout exactly as given (no batch tolerance), recording the derivation on ``tr``."""
    tr = tr if tr is not None else Trace()
    c = _ctx(cfg)
    m, a = c.m, cfg.assumptions
    r = _grid(
        c,
        lay.tp,
        lay.pp,
        lay.ep,
        np.array([lay.dp]),
        (lay.vpp,),
        (lay.micro_batch,),
        (lay.recompute,),
        (lay.zero,),
        1e9,
    )
    res = _result(c, lay, r, (0, 0, 0, 0, 0))
    if not tr.enabled:
        return res
    x = {k: (float(np.ravel(v)[0]) if np.ndim(v) else float(v)) for k, v in r.items()}
    tp, pp, dp, ep, b, v = lay.tp, lay.pp, lay.dp, lay.ep, lay.micro_batch, lay.vpp
    s = c.seq
    wk = work(cfg)
    N = tr.step(
        "N_mm",
        "Active parameters doing matrix work",
        "N",
        "N",
        wk.active_matmul_params,
        unit="",
        N=wk.active_matmul_params,
        note="all layers' active weights plus the LM head; the embedding is a lookup",
    )
    A_t = attention_pairs_per_token(m, s)
    if m.sliding_layers:
        A_t = tr.step(
            "attention_pairs_per_token",
            "Attended pairs per token (all layers)",
            "A_t",
            "A_t",
            A_t,
            unit="",
            A_t=A_t,
            note=f"causal; {m.sliding_layers} sliding-window layers see at most {m.sliding_window} tokens",
        )
    else:
        A_t = tr.step(
            "attention_pairs_per_token",
            "Attended pairs per token (all layers)",
            "A_t",
            "L * (s + 1) / 2",
            A_t,
            unit="",
            L=m.attention_layers,
            s=s,
            note="causal attention: token i attends to i keys"
            + (f"; L counts the {m.attention_layers} attention layers of {m.num_layers}" if m.ssm_layers else ""),
        )
    dqk = m.attn_qk_dim
    if cfg.lora_rank:
        n_l = lora_params(m, cfg.lora_rank)
        F_m = tr.step(
            "model_flop_per_token",
            "Model FLOPs per token",
            "F_m",
            "c_L * N + 6 * N_lora + 12 * d_qk * A_t",
            wk.model_flop_per_token,
            unit="FLOP",
            c_L=a.lora_flop_per_param,
            N=N,
            N_lora=n_l,
            d_qk=dqk,
            A_t=A_t,
            note="LoRA: the frozen base runs forward and the activation-gradient backward, "
            "no weight gradients (assumption lora_flop_per_param)",
        )
    else:
        F_m = tr.step(
            "model_flop_per_token",
            "Model FLOPs per token",
            "F_m",
            "6 * N + 12 * d_qk * A_t",
            wk.model_flop_per_token,
            unit="FLOP",
            N=N,
            d_qk=dqk,
            A_t=A_t,
            note="6N (forward 2N + backward 4N) plus causal attention, forward + backward",
        )
    if lay.recompute == "selective":
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m + 4 * d_qk * A_t",
            x["hw"],
            unit="FLOP",
            F_m=F_m,
            d_qk=dqk,
            A_t=A_t,
            note="selective recomputation reruns the attention core (Korthikanti et al. sec. 5)",
        )
    elif lay.recompute == "full":
        n_l = 2 * lora_params(m, cfg.lora_rank) if cfg.lora_rank else 0.0
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m + 2 * N + N_a + 4 * d_qk * A_t",
            x["hw"],
            unit="FLOP",
            F_m=F_m,
            N=N,
            N_a=n_l,
            d_qk=dqk,
            A_t=A_t,
            note="full recomputation reruns the whole forward before the backward",
        )
    else:
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m",
            x["hw"],
            unit="FLOP",
            F_m=F_m,
            note="no recomputation",
        )
    tr.step(
        "total_model_flop", "Model FLOPs of the run", "F", "F_m * T", F_m * c.tokens, unit="FLOP", F_m=F_m, T=c.tokens
    )
    peak = tr.step(
        "peak_eff_flop_per_s",
        "Sustained compute per GPU",
        "R",
        "pi_flops * x_p * mfu",
        c.peak_eff,
        unit="FLOP/s",
        pi_flops=c.peak_bf16,
        x_p=c.speedup,
        mfu=a.mfu_train,
        note=f"BF16 dense peak x {cfg.train_precision.upper()} speed-up x the MFU "
        "ceiling (assumptions fp8_speedup, mfu_train)",
    )
    mm = tr.step(
        "micro_batches",
        "Micro-batches per pipeline per step",
        "m",
        "max(1, floor(B_req / (dp * b) + 0.5))",
        x["mm"],
        unit="",
        B_req=c.batch_seqs,
        dp=dp,
        b=b,
        note=f"global batch {cfg.global_batch_tokens:,} tokens = {c.batch_seqs:,} sequences of {s:,}",
    )
    eta = tr.step(
        "gemm_efficiency",
        "GEMM fill at b x s tokens",
        r"\eta_T",
        "b * s / (b * s + T0)",
        x["ramp"],
        unit="",
        b=b,
        s=s,
        T0=a.mfu_ramp_tokens,
    )
    p_e = x["p_e"]
    t_mb = tr.step(
        "t_mb",
        "One micro-batch on one stage (compute)",
        "t_{mb}",
        "F_hw * b * s / (tp * p_e) / (R * eta_T) * q",
        x["t_mb"],
        unit="s",
        F_hw=F_hw,
        b=b,
        s=s,
        tp=tp,
        p_e=p_e,
        R=peak,
        eta_T=eta,
        q=c.q_slow,
        note=f"PP {pp} puts {x['L_s']:.0f} of {m.num_layers} layers on the heaviest stage"
        + (f"; QLoRA dequantisation x{c.q_slow:g}" if c.q_slow != 1 else ""),
    )
    parts = ["t_mb"]
    vals = {"t_mb": t_mb}
    if tp > 1:
        t_ar = tr.step(
            "t_ar_tp",
            "One TP all-reduce of b x s x h activations",
            "t_{ar}",
            "t_ar",
            x["t_ar"],
            unit="s",
            t_ar=x["t_ar"],
            note=f"{b * s * m.hidden_size * ACT_BYTES / 1e6:.3g} MB over TP {tp} inside "
            "the node (alpha-beta, core.collectives)",
        )
        vals["t_tp"] = tr.step(
            "t_tp",
            "TP communication per micro-batch",
            "t_{tp}",
            "n_c * L_s * t_ar * (1 - o_tp)",
            x["t_tp"],
            unit="s",
            n_c=x["n_coll"],
            L_s=x["L_s"],
            t_ar=t_ar,
            o_tp=a.tp_overlap_train,
            note="2 forward + 2 backward per layer (+2 with full recomputation)",
        )
        parts.append("t_tp")
    if ep > 1 and m.is_moe:
        t_a = tr.step(
            "t_a2a",
            "One EP all-to-all",
            "t_{a2a}",
            "t_a2a",
            x["t_a2a"],
            unit="s",
            t_a2a=x["t_a2a"],
            note=f"top-{m.experts_per_tok} tokens x h over EP {ep}",
        )
        vals["t_ep"] = tr.step(
            "t_ep",
            "EP all-to-alls per micro-batch",
            "t_{ep}",
            "n_c * L_moe * t_a2a",
            x["t_ep"],
            unit="s",
            n_c=x["n_coll"],
            L_moe=x["L_moe"],
            t_a2a=t_a,
        )
        parts.append("t_ep")
    if pp > 1:
        t_h = tr.step(
            "t_hop",
            "One pipeline send",
            "t_{hop}",
            "t_hop",
            x["t_hop"],
            unit="s",
            t_hop=x["t_hop"],
            note="activations (forward) or their gradients (backward) to the next stage",
        )
        vals["t_p2p"] = tr.step(
            "t_p2p", "PP sends per micro-batch", "t_{pp}", "2 * v * t_hop", x["t_p2p"], unit="s", v=v, t_hop=t_h
        )
        parts.append("t_p2p")
    slot_inputs: dict[str, Any] = {k: vals[k] for k in parts}
    slot = tr.step("t_slot", "One pipeline slot", "t_{slot}", " + ".join(parts), x["slot"], unit="s", **slot_inputs)
    tr.step(
        "bubble_frac",
        "Pipeline bubble share",
        "f_b",
        "(pp - 1) / (v * m + pp - 1)",
        float(bubble_fraction(pp, mm, v)),
        unit="%",
        pp=pp,
        v=v,
        m=mm,
        note="1F1B; v virtual stages per GPU divide the bubble by v (Narayanan et al. 2021 sec. 2.2)",
    )
    t_pipe = tr.step(
        "t_pipe",
        "Pipeline time per step",
        "t_{pipe}",
        "(m + (pp - 1) / v) * t_slot",
        x["t_pipe"],
        unit="s",
        m=mm,
        pp=pp,
        v=v,
        t_slot=slot,
    )
    z = lay.zero
    if dp > 1:
        unit_key = "t_ar_dp" if z == 0 else "t_rs_dp"
        unit_v = x["ar"] if z == 0 else x["rs"]
        tu = tr.step(
            unit_key,
            "DP all-reduce of the gradients" if z == 0 else "DP reduce-scatter (= all-gather)",
            "t_u",
            "t_u",
            unit_v,
            unit="s",
            t_u=unit_v,
            note=f"BF16 gradients of the local shard over DP {dp}, {x['k']:.0f} per node; across nodes "
            "over the inter-node fabric (hierarchical alpha-beta)",
        )
        expr = {0: "t_u", 1: "2 * t_u", 2: "(m + 1) * t_u", 3: "3 * m * t_u"}[z]
        t_dp = tr.step(
            "t_dp",
            "DP / ZeRO traffic per step",
            "t_{dp}",
            expr,
            x["t_dp"],
            unit="s",
            t_u=tu,
            m=mm,
            note={
                0: "DDP: one all-reduce per step",
                1: "ZeRO-1: reduce-scatter gradients, all-gather params",
                2: "ZeRO-2: reduce-scatter every micro-batch, all-gather once",
                3: "ZeRO-3: all-gather params forward and backward, reduce-scatter, every micro-batch",
            }[z],
        )
        dpx = tr.step(
            "t_dp_exposed",
            "Exposed DP / ZeRO time",
            "t_{dpx}",
            "t_dp - min(o_dp * t_dp, m * t_mb)",
            x["dp_exp"],
            unit="s",
            t_dp=t_dp,
            o_dp=a.dp_overlap,
            m=mm,
            t_mb=t_mb,
            note="bucketed overlap with the backward (assumption dp_overlap)",
        )
    else:
        dpx = tr.step(
            "t_dp_exposed",
            "Exposed DP / ZeRO time",
            "t_{dpx}",
            "0 * dp",
            0.0,
            unit="s",
            dp=dp,
            note="DP 1: no gradient traffic",
        )
    t_opt = tr.step(
        "t_opt",
        "Optimizer step",
        "t_{opt}",
        "28 * P_u / (bw * mbu)",
        x["opt"],
        unit="s",
        P_u=x["upd"],
        bw=c.g.memory_bw_bytes_per_s,
        mbu=a.mbu,
        note="Adam reads and writes FP32 master, m, v (24 B) + BF16 grad and weight (4 B) per local "
        "parameter, memory-bound",
    )
    t_step = tr.step(
        "step_s",
        "Time per optimizer step",
        "t_{step}",
        "t_pipe + t_dpx + t_opt + t_ovh",
        x["step"],
        unit="s",
        t_pipe=t_pipe,
        t_dpx=dpx,
        t_opt=t_opt,
        t_ovh=x["ovh"],
    )
    B_tok = tr.step(
        "global_batch_tokens_actual",
        "Tokens per step",
        "B_t",
        "m * dp * b * s",
        x["b_seq"] * s,
        unit="tokens",
        m=mm,
        dp=dp,
        b=b,
        s=s,
    )
    n_steps = tr.step("steps", "Optimizer steps", "n", "ceil(T / B_t)", x["steps"], unit="", T=c.tokens, B_t=B_tok)
    rt = tr.step(
        "runtime_s", "Runtime without failures", "T_s", "n * t_step", x["runtime"], unit="s", n=n_steps, t_step=t_step
    )
    tr.step(
        "gpu_hours",
        "GPU-hours (without failures)",
        "H",
        "gpus * T_s / 3600",
        lay.gpus * rt / HOUR_S,
        unit="GPU-h",
        gpus=lay.gpus,
        T_s=rt,
    )
    tr.step(
        "mfu",
        "Model FLOPs utilisation",
        "MFU",
        "F_m * B_t / (t_step * gpus * pi_flops)",
        x["mfu"],
        unit="%",
        F_m=F_m,
        B_t=B_tok,
        t_step=t_step,
        gpus=lay.gpus,
        pi_flops=c.peak_bf16,
        note="against the BF16 dense peak; bubble, communication and the optimizer step pull it below the ceiling",
    )
    tr.step(
        "hfu",
        "Hardware FLOPs utilisation",
        "HFU",
        "F_hw * B_t / (t_step * gpus * pi_flops)",
        x["hfu"],
        unit="%",
        F_hw=F_hw,
        B_t=B_tok,
        t_step=t_step,
        gpus=lay.gpus,
        pi_flops=c.peak_bf16,
        note="counts recomputed FLOPs too",
    )
    return res


def _memory_for(cfg: RabitConfig, lay: Layout, micro_batches: int, tr: Trace | None = None) -> TrainingMemory:
    return training_memory_for(
        model_of(cfg),
        gpu_of(cfg),
        cfg,
        tr if tr is not None else Trace(),
        dp=lay.dp,
        tp=lay.tp,
        pp=lay.pp,
        zero=lay.zero,
        micro_batch=lay.micro_batch,
        recompute=lay.recompute,
        ep=lay.ep,
        vpp=lay.vpp,
        micro_batches=micro_batches,
    )


def config_layout(cfg: RabitConfig) -> Layout:
    return Layout(
        tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, ep=cfg.ep, micro_batch=cfg.micro_batch, zero=cfg.zero, recompute=cfg.recompute
    )


def training_math(cfg: RabitConfig) -> tuple[Step, ...]:
    """The traced chain for the config's own layout: memory, work, step time, runtime, GPU-hours, goodput."""
    lay = config_layout(cfg)
    tr = Trace()
    res = evaluate_layout(cfg, lay, tr)
    mem = _memory_for(cfg, lay, res.micro_batches)
    goodput(res.runtime_s, lay.gpus, cfg.assumptions, tr=tr)
    return mem.steps + tr.frozen()


def budget_problem(cfg: RabitConfig, gpus: int) -> str | None:
    """Why ``gpus`` cannot be a GPU budget for this cluster (None when it can)."""
    node = cfg.gpus_per_node
    if gpus < 1:
        return "the GPU budget must be at least 1"
    if gpus > MAX_GPUS:
        return f"at most {MAX_GPUS:,} GPUs"
    if gpus > node and gpus % node:
        return (
            f"{gpus:,} GPUs is not a whole number of {node}-GPU nodes; use {gpus // node * node:,} or "
            f"{(gpus // node + 1) * node:,}"
        )
    return None


def goal_from_inputs(
    cfg: RabitConfig,
    *,
    deadline_days: float | None = None,
    gpus: int | None = None,
    max_gpus: int = MAX_GPUS,
    pin_sidebar: bool = False,
    checkpoint_interval_min: float | None = None,
) -> TrainingGoal:
    """A :class:`TrainingGoal` from the page's human units (days, minutes); pins the config's ZeRO stage,
    recomputation and micro-batch when ``pin_sidebar``."""
    return TrainingGoal(
        deadline_s=deadline_days * DAY_S if deadline_days else None,
        gpus=gpus,
        max_gpus=max_gpus,
        zero=cfg.zero if pin_sidebar else None,
        recompute=cfg.recompute if pin_sidebar else None,
        micro_batch=cfg.micro_batch if pin_sidebar else None,
        checkpoint_interval_s=checkpoint_interval_min * 60 if checkpoint_interval_min else None,
    )


# --- prices --------------------------------------------------------------------------------------------------


def catalog_price(gpu: str) -> Price | None:
    """The on-demand price of ``gpu`` under the project's one price policy (:mod:`core.pricing`: the median
    listing across providers), as a price row; None when the catalog has none.

    The optimizer uses the same policy, so a run costs the same on the Training page and in the optimizer.
    """
    gp = gpu_price(gpu, catalog.prices())
    if gp is None:
        return None
    if len(gp.rows) == 1:
        return gp.rows[0]
    return Price(
        gpu=gpu,
        provider=f"median of {len(gp.rows)} on-demand listings",
        kind="on-demand",
        usd_per_gpu_hour=gp.usd_per_gpu_hour,
        source=gp.basis,
        as_of=max(r.as_of for r in gp.rows),
        verification="U" if any(r.verification == "U" for r in gp.rows) else "S",
    )


# --- the plan ------------------------------------------------------------------------------------------------


def _slower_reasons(counts: np.ndarray, best: dict[str, np.ndarray]) -> list[str]:
    """For each count whose best runtime exceeds that of a smaller count, which part of the runtime grew."""
    out = [""] * len(counts)

    def parts(k: int) -> dict[str, float]:
        n = best["steps"][k]
        comm = best["mm"][k] * (best["t_tp"][k] + best["t_ep"][k] + best["t_p2p"][k]) + best["dp_exp"][k]
        return {
            "pipeline bubble": best["bubble"][k] * n,
            "communication": comm * n,
            "compute per GPU (batch split, stage imbalance)": best["compute"][k] * n,
        }

    j = -1  # the fastest smaller count so far
    for i in range(len(counts)):
        rt = best["runtime"][i]
        if not np.isfinite(rt):
            continue
        if j >= 0 and rt > best["runtime"][j] * (1 + 1e-9):
            pi, pj = parts(i), parts(j)
            name, d = max(((k, pi[k] - pj[k]) for k in pi), key=lambda kv: kv[1])
            out[i] = (
                f"{rt / best['runtime'][j] - 1:+.1%} vs {int(counts[j]):,} GPUs: {name} grows by "
                f"{d / 3600:.3g} h over the run"
            )
        else:
            j = i
    return out


def plan(cfg: RabitConfig, goal: TrainingGoal | None = None) -> TrainingPlan:
    """Size a training run: the layout search, the GPU-count curve, the deadline, goodput and cost."""
    goal = goal or TrainingGoal()
    c = _ctx(cfg)
    a = cfg.assumptions
    wk = work(cfg)
    price = catalog_price(cfg.gpu)
    usd = price.usd_per_gpu_hour if price else None
    node = cfg.gpus_per_node
    if goal.layout is not None:
        mode, n_target = "layout", goal.layout.gpus
    elif goal.deadline_s is not None:
        mode, n_target = "deadline", None
    else:
        mode, n_target = "budget", goal.gpus or cfg.gpus

    # the curve over GPU counts
    if mode == "deadline":
        cmax = goal.max_gpus
    else:
        cmax = min(goal.max_gpus, max(4 * n_target, 8 * node))
    counts = gpu_counts(node, cmax)
    if n_target is not None and n_target not in counts:
        counts = np.sort(np.append(counts, n_target))
    best = _best_per_count(c, goal, counts)
    rt = best["runtime"]
    feasible = np.isfinite(rt)
    Tw, gfrac, _ = goodput_arrays(np.where(feasible, rt, 0.0), counts, a, goal.checkpoint_interval_s)
    Tw = np.where(feasible, Tw, np.inf)
    meets = feasible & (Tw <= goal.deadline_s) if goal.deadline_s else None
    reasons = _slower_reasons(counts, best)
    curve = []
    for i, n in enumerate(counts):
        if not feasible[i]:
            curve.append(CurvePoint(gpus=int(n), feasible=False, meets_deadline=False if meets is not None else None))
            continue
        st = best["step"][i]
        comm = best["mm"][i] * (best["t_tp"][i] + best["t_ep"][i] + best["t_p2p"][i]) + best["dp_exp"][i]
        curve.append(
            CurvePoint(
                gpus=int(n),
                feasible=True,
                layout=_layout_of(best["layout"][i]),
                runtime_s=float(rt[i]),
                wall_clock_s=float(Tw[i]),
                gpu_hours=float(n * rt[i] / HOUR_S),
                cost_usd=float(usd * n * Tw[i] / HOUR_S) if usd else None,
                goodput_frac=float(gfrac[i]),
                mfu=float(best["mfu"][i]),
                bubble_frac=float(best["bubble"][i] / st),
                comm_frac=float(comm / st),
                meets_deadline=bool(meets[i]) if meets is not None else None,
                slower_reason=reasons[i],
            )
        )

    deadline_met: bool | None = None
    message = ""
    if mode == "deadline":
        hit = np.nonzero(meets)[0]
        if len(hit):
            n_target = int(counts[hit[0]])
            deadline_met = True
            message = (
                f"{_gpus(n_target)} is the smallest count that finishes {wk.tokens:.3g} tokens within "
                f"{goal.deadline_s / 86400:.3g} days (expected wall-clock with failures)"
            )
        elif feasible.any():
            i = int(np.argmin(Tw))
            n_target = int(counts[i])
            deadline_met = False
            message = (
                f"no count up to {goal.max_gpus:,} GPUs meets {goal.deadline_s / 86400:.3g} days; the fastest, "
                f"{n_target:,} GPUs, needs {Tw[i] / 86400:.3g} days. Raise the global batch (it caps useful "
                "data parallelism), use FP8 or a faster GPU, or move the deadline"
            )
        else:
            n_target = int(counts[-1])
            deadline_met = False
    assert n_target is not None
    if mode == "layout":
        lay = goal.layout
        tr = Trace()
        bres = evaluate_layout(cfg, lay, tr)
        alts = ()
    else:
        alts = layouts_at(cfg, n_target, goal)
        feas = [x for x in alts if x.feasible]
        bres, tr = None, Trace()
        if feas:
            bres = evaluate_layout(cfg, feas[0].layout, tr)
    if bres is None:
        why = _infeasible_message(c, n_target, alts)
        return TrainingPlan(
            mode=mode,
            goal=goal,
            work=wk,
            gpus=n_target,
            best=None,
            alternatives=alts,
            memory=None,
            goodput=None,
            price=price,
            cost_usd=None,
            curve=tuple(curve),
            deadline_met=deadline_met,
            message=(message + "; " if message else "") + why,
        )
    mem = _memory_for(cfg, bres.layout, bres.micro_batches)
    gp = goodput(bres.runtime_s, bres.gpus, a, interval_s=goal.checkpoint_interval_s, tr=tr)
    cost = usd * bres.gpus * gp.wall_clock_s / HOUR_S if usd else None
    if mode == "budget":
        message = f"fastest layout on {_gpus(n_target)}: {bres.layout.label()}"
    elif mode == "layout":
        message = f"{bres.layout.label()} on {_gpus(bres.gpus)} " + (
            "fits" if bres.fits else f"does NOT fit: {mem.reason}"
        )
    if goal.deadline_s and mode != "deadline":
        deadline_met = gp.wall_clock_s <= goal.deadline_s
    return TrainingPlan(
        mode=mode,
        goal=goal,
        work=wk,
        gpus=bres.gpus,
        best=bres,
        alternatives=alts,
        memory=mem,
        goodput=gp,
        price=price,
        cost_usd=cost,
        curve=tuple(curve),
        deadline_met=deadline_met,
        message=message,
        steps=mem.steps + tr.frozen(),
    )


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


def _infeasible_message(c: _Ctx, gpus: int, alts: tuple[LayoutResult, ...]) -> str:
    if alts:
        lean = min(alts, key=lambda x: x.memory_bytes_per_gpu)
        return (
            f"no layout fits on {_gpus(gpus)}: the leanest ({lean.layout.label()}) needs "
            f"{lean.memory_bytes_per_gpu / 1e9:.3g} GB per GPU of {c.capacity / 1e9:.3g} GB; add GPUs, use "
            "LoRA/QLoRA, or a GPU with more memory"
        )
    return (
        f"the global batch of {c.batch_seqs:,} sequences cannot be split over {gpus:,} GPUs (DP x micro-batch "
        "exceeds it for every TP x PP); raise the global batch or use fewer GPUs"
    )
