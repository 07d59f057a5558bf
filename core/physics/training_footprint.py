"""Training memory: what one GPU of a training job holds.

Mixed-precision Adam at 16 B per trainable parameter (2 weights + 2 gradients + 12 FP32 master, momentum and
variance; Rajbhandari et al., ZeRO, arXiv 1910.02054 sec. 3.1), split by TP and PP, then ZeRO stages over DP;
activations per Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, Table 2. :func:`training_memory_parts` is the one body of that formula: the traced view
(:func:`training_memory_for`) calls it on scalars, the training layout search
(:func:`core.training.layout.layout_grid`) on arrays. What to change when a layout does not fit is the
training wing's (:mod:`core.training.advice`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, GiB, Step, Trace, sig
from core.catalog import ModelArch
from core.config import Deployment, RabitConfig, as_deployment
from core.physics.activations import activation_bytes_per_layer, record_training_activations
from core.physics.footprint import expert_params_total, record_params

#: Bytes per parameter of a QLoRA NF4 base with double-quantised scales (Dettmers et al.,
#: arXiv 2305.14314 sec. 3: 4-bit NF4 + 0.127 bit of scales per parameter).
QLORA_BASE_BYTES = (4 + 0.127) / 8
#: Bytes per trainable parameter under mixed-precision Adam (ZeRO paper, sec. 3.1).
ADAM_WEIGHT_B, ADAM_GRAD_B, ADAM_OPTIM_B = 2.0, 2.0, 12.0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class TrainingMemory(_Frozen):
    """What one GPU of a training job holds [bytes]."""

    trainable_params: float
    weight_bytes_per_gpu: float
    gradient_bytes_per_gpu: float
    optimizer_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    overhead_bytes_per_gpu: float
    total_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    fits: bool
    reason: str
    steps: tuple[Step, ...] = ()
    fp8_weight_bytes_per_gpu: float = 0.0  # FP8 training: Transformer Engine's cached FP8 weight copies
    usable_bytes_per_gpu: float = 0.0  # capacity less the training headroom (the fit is against this)


def lora_params(m: ModelArch, rank: int) -> float:
    """Trainable LoRA parameters: r x (d_in + d_out) on every attention and dense/shared MLP projection.

    Routed experts are left frozen (common practice; PEFT 'all-linear' on MoE adds them).
    """
    h = m.hidden_size
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attn = (h + m.num_heads * qk) + (h + m.kv_lora_rank + m.qk_rope_head_dim) + (m.num_heads * m.v_head_dim + h)
    else:
        q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
        attn = (h + q) + 2 * (h + kv) + (q + h)
    n_mats = 3 if m.mlp_kind == "swiglu" else 2
    dense_mlp = n_mats * (h + m.intermediate_size)
    shared_mlp = m.num_shared_experts * n_mats * (h + (m.shared_intermediate_size or m.moe_intermediate_size))
    return rank * (m.attention_layers * attn + m.dense_layers * dense_mlp + m.moe_layers * shared_mlp)


def training_memory(dep: Deployment | RabitConfig, tr: Trace | None = None, *, dp: int | None = None) -> TrainingMemory:
    """Per-GPU training memory for the config's TP, PP, EP, ZeRO stage, micro-batch and recomputation."""
    dep = as_deployment(dep)
    return training_memory_for(dep, tr if tr is not None else Trace(), dp=dp if dp is not None else dep.config.dp)


def stage_layers(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, float]:
    """(layers on the heaviest pipeline stage, effective PP split = L / that).

    PP need not divide the layers (DeepSeek-V3 trains 61 layers on PP 16): the heaviest stage holds
    ceil(L / PP) layers and sets both the per-GPU memory and the stage time, so per-GPU quantities divide
    by L / ceil(L / PP) instead of PP. Equal to PP when PP divides L. With ``vpp`` interleaved chunks per
    GPU each chunk holds ceil(L / (PP v)) layers, so a GPU holds v x that (Llama 3 405B: 126 layers on
    PP 16, v 4 -> 8 layers per GPU).
    """
    ls = vpp * math.ceil(num_layers / (pp * vpp))
    return ls, num_layers / ls


def _zero_div(zero: Any, stage: int, group: Any) -> Any:
    """The divisor ZeRO applies to a state: the DP ``group`` from ``stage`` on, else 1 (arrays broadcast)."""
    if isinstance(zero, (int, np.integer)):
        return group if zero >= stage else 1
    return np.where(np.asarray(zero) >= stage, group, 1.0)


@dataclass(frozen=True)
class TrainingMemoryParts:
    """Every quantity of :func:`training_memory_parts`: floats for scalar inputs, arrays for array inputs [B]."""

    trainable_params: float
    stage_layers: Any  # layers on the heaviest stage (v chunks included)
    pp_eff: Any  # L / stage_layers
    expert_dp: Any  # GPUs holding the same expert shard (= dp without EP)
    weight: Any
    fp8_weight: Any
    gradient: Any
    optimizer: Any
    optimizer_params: Any  # parameters one GPU's optimizer step updates
    activation_per_layer: Any
    interleave_factor: Any  # f_v
    activation: Any
    overhead: float
    total: Any
    capacity: float
    usable: float  # capacity less the training headroom: what a layout may fill


def training_memory_parts(
    dep: Deployment,
    *,
    dp: Any,
    tp: int,
    pp: int,
    ep: int,
    zero: Any,
    micro_batch: Any,
    recompute: Any,
    vpp: Any = 1,
    micro_batches: Any = None,
    cp: int = 1,
    tr: Trace = NO_TRACE,
) -> TrainingMemoryParts:
    """Training memory per GPU [B]: the one body of the formula, for the traced view and the layout search.

    .. math:: U = W + W_8 + G + S + A_t + O

    Mixed-precision Adam holds 2 + 2 + 12 B per trainable parameter (weights, gradients, FP32 master with
    m and v; ZeRO, arXiv 1910.02054 sec. 3.1), split over TP x PP; ZeRO-1/2/3 shard the optimizer state,
    then the gradients, then the weights over DP. Beyond the config's layout:

      * ``ep``: expert parallelism. Routed experts are split over EP x PP (each expert whole on one GPU,
        expert-tensor-parallel 1) and their ZeRO shards go over the expert-data-parallel group
        TP x DP / EP; everything else over TP x PP and DP (Megatron-Core MoE layout).
      * ``vpp``: interleaved (virtual) pipeline stages; the first stage then holds
        (1 + (PP - 1) / (PP x v)) times the activations (Korthikanti et al. sec. 4.2.3).
      * ``micro_batches``: micro-batches per step; 1F1B holds min(PP, m) of them in flight (PP when None).
      * PP need not divide the layers: the heaviest stage holds ceil(L / PP) (see :func:`stage_layers`).
      * FP8 training (``train_precision``): Transformer Engine caches an FP8 copy of every weight it
        holds across micro-batches, 1 B per parameter on top of the BF16 weights.
      * ``cp``: context parallelism (Megatron-LM ``--context-parallel-size``): the sequence and every activation
        are split over ``cp`` ranks (the keys and values of the other ranks pass through in a ring, block by
        block, and are not kept), so activations and logits divide by ``cp``; the ranks hold the same weights,
        and the distributed optimizer shards over DP x CP (Megatron-Core's data-parallel group with context
        parallelism), so ZeRO's group is ``dp x cp``.
      * The fit is against the usable memory ``C (1 - f_h)``: the assumption ``train_mem_headroom_frac`` keeps a
        share of HBM free for the allocator's fragmentation and transient peaks.

    ``dp``, ``vpp``, ``micro_batch``, ``recompute`` (mode names), ``zero`` and ``micro_batches`` may be
    numpy arrays that broadcast (the search's grid); the steps are recorded on ``tr`` for scalar inputs.
    Llama-3.1-70B, TP 8, PP 2, DP 4, ZeRO-3: W = 70.55e9 x 2 / (8 x 2 x 4) = 2.20 GB.
    """
    cfg, m = dep.config, dep.model
    a = cfg.assumptions
    seq = cfg.seq_len
    L = m.num_layers
    L_s: Any
    pp_eff: Any
    if isinstance(vpp, (int, np.integer)):
        L_s, pp_eff = stage_layers(L, pp, int(vpp))
        f_v: Any = 1 + (pp - 1) / (pp * vpp) if vpp > 1 else 1.0
    else:
        V = np.asarray(vpp, dtype=float)
        L_s = V * np.ceil(L / (pp * V))
        pp_eff = L / L_s
        f_v = np.where(V > 1, 1 + (pp - 1) / (pp * V), 1.0)
    P = float(m.total_params())
    ppn = "pp"
    pv: dict[str, Any] = {}  # the pipeline split under the name the recorded steps use
    if tr.enabled:
        record_params(m, tr)
        if L_s * pp != L:
            ppn = "p_e"
            pp_eff = tr.step(
                "p_e",
                "Effective pipeline split (heaviest stage)",
                "p_e",
                "L / (v * ceil(L / (pp * v)))",
                pp_eff,
                L=L,
                pp=pp,
                v=vpp,
                note=f"PP {pp} x {vpp} chunk(s) does not divide {L} layers: the "
                f"heaviest stage holds {L_s} layers and sets memory and time",
            )
        pv[ppn] = pp_eff
    shard = tp * pp_eff
    dp = dp * cp  # ZeRO shards over the data-parallel group with context parallelism (the CP ranks hold one copy)
    split = m.is_moe and ep > 1
    P_e = expert_params_total(m) if split else 0.0
    P_d = P - P_e
    edp = tp * dp / ep if split else dp
    zw, zg, zo = _zero_div(zero, 3, dp), _zero_div(zero, 2, dp), _zero_div(zero, 1, dp)
    W8: Any = 0.0
    if cfg.lora_rank:
        n_train = lora_params(m, cfg.lora_rank)
        base_b = QLORA_BASE_BYTES if cfg.qlora else 2.0
        W = (P_d * base_b + n_train * ADAM_WEIGHT_B) / shard + (P_e * base_b / (ep * pp_eff) if split else 0.0)
        G = n_train * ADAM_GRAD_B / (shard * zg)
        S = n_train * ADAM_OPTIM_B / (shard * zo)
        upd = n_train / (shard * zo)
        if tr.enabled:
            note_w = (
                "QLoRA: frozen base in NF4 with double-quantised scales" if cfg.qlora else "LoRA: frozen BF16 base"
            ) + f"; rank-{cfg.lora_rank} adapters trainable"
            if split:
                tr.step(
                    "weight_bytes_per_gpu",
                    "Weights per GPU",
                    "W",
                    f"(P_d * b_base + N_t * 2) / (tp * {ppn}) + P_exp * b_base / (ep * {ppn})",
                    W,
                    unit="B",
                    P_d=P_d,
                    b_base=base_b,
                    N_t=n_train,
                    tp=tp,
                    P_exp=P_e,
                    ep=ep,
                    **pv,
                    note=note_w + "; routed experts split over EP",
                )
            else:
                tr.step(
                    "weight_bytes_per_gpu",
                    "Weights per GPU",
                    "W",
                    f"(P * b_base + N_t * 2) / (tp * {ppn})",
                    W,
                    unit="B",
                    latex=rf"\frac{{[P] \cdot [b_base] + [N_t] \cdot 2}}{{[tp] \cdot [{ppn}]}}",
                    P=P,
                    b_base=base_b,
                    N_t=n_train,
                    tp=tp,
                    **pv,
                    note=note_w,
                )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"N_t * 2 / (tp * {ppn} * z_g)",
                G,
                unit="B",
                N_t=n_train,
                tp=tp,
                **pv,
                z_g=zg,
                note="adapters only",
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"N_t * 12 / (tp * {ppn} * z_o)",
                S,
                unit="B",
                N_t=n_train,
                tp=tp,
                **pv,
                z_o=zo,
                note="FP32 master, momentum and variance of the adapters",
            )
    else:
        n_train = P
        if split:
            es = ep * pp_eff
            ew, eg, eo = _zero_div(zero, 3, edp), _zero_div(zero, 2, edp), _zero_div(zero, 1, edp)
            W = ADAM_WEIGHT_B * (P_d / (shard * zw) + P_e / (es * ew))
            G = ADAM_GRAD_B * (P_d / (shard * zg) + P_e / (es * eg))
            S = ADAM_OPTIM_B * (P_d / (shard * zo) + P_e / (es * eo))
            upd = P_d / (shard * zo) + P_e / (es * eo)
        else:
            W = ADAM_WEIGHT_B * (P_d / (shard * zw))
            G = ADAM_GRAD_B * (P_d / (shard * zg))
            S = ADAM_OPTIM_B * (P_d / (shard * zo))
            upd = P_d / (shard * zo)
        if cfg.train_precision == "fp8":
            W8 = W / 2
        if tr.enabled and split:
            tr.step(
                "expert_dp",
                "Expert data-parallel degree",
                "d_e",
                "tp * dp / ep",
                edp,
                tp=tp,
                dp=dp,
                ep=ep,
                note="GPUs holding the same expert shard: ZeRO shards expert state over them",
            )
            tr.step(
                "weight_bytes_per_gpu",
                "Weights per GPU",
                "W",
                f"2 * (P_d / (tp * {ppn} * z_w) + P_exp / (ep * {ppn} * z_we))",
                W,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_w=zw,
                z_we=ew,
                **pv,
                note="BF16; routed experts split over EP x PP, the rest over TP x PP"
                + ("; ZeRO-3 shards both over their DP groups" if zero >= 3 else ""),
            )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"2 * (P_d / (tp * {ppn} * z_g) + P_exp / (ep * {ppn} * z_ge))",
                G,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_g=zg,
                z_ge=eg,
                **pv,
                note="BF16 gradients",
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"12 * (P_d / (tp * {ppn} * z_o) + P_exp / (ep * {ppn} * z_oe))",
                S,
                unit="B",
                P_d=P_d,
                P_exp=P_e,
                tp=tp,
                ep=ep,
                z_o=zo,
                z_oe=eo,
                **pv,
                note="FP32 master + Adam m and v = 12 B/param",
            )
        elif tr.enabled:
            tr.step(
                "weight_bytes_per_gpu",
                "Weights per GPU",
                "W",
                f"P * 2 / (tp * {ppn} * z_w)",
                W,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_w=zw,
                note=f"BF16 weights; ZeRO-{zero} shards them over DP {dp}" if zero >= 3 else "BF16 weights",
            )
            tr.step(
                "gradient_bytes_per_gpu",
                "Gradients per GPU",
                "G",
                f"P * 2 / (tp * {ppn} * z_g)",
                G,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_g=zg,
                note="BF16 gradients" + (f", sharded over DP {dp}" if zero >= 2 else ""),
            )
            tr.step(
                "optimizer_bytes_per_gpu",
                "Optimizer state per GPU",
                "S",
                f"P * 12 / (tp * {ppn} * z_o)",
                S,
                unit="B",
                P=P,
                tp=tp,
                **pv,
                z_o=zo,
                note="FP32 master + Adam m and v = 12 B/param" + (f", sharded over DP {dp}" if zero >= 1 else ""),
            )
    per_layer = (
        activation_bytes_per_layer(m, seq, micro_batch, tp, recompute, cfg.sequence_parallel, cfg.attention_kernel) / cp
    )
    if micro_batches is None:
        in_flight: Any = pp
    elif isinstance(micro_batches, (int, np.integer)):
        in_flight = max(1, min(pp, micro_batches))
    else:
        in_flight = np.maximum(1, np.minimum(pp, micro_batches))
    logits = 4 * seq * micro_batch * m.vocab_size / (tp * cp)
    Act = per_layer * L_s * in_flight * f_v + logits
    Ov = a.runtime_overhead_gib * GiB
    total = W + W8 + G + S + Act + Ov
    C = dep.gpu.memory_bytes
    usable = C * (1 - a.train_mem_headroom_frac)
    if tr.enabled:
        record_training_activations(
            tr, dep, recompute, per_layer, L_s, in_flight, f_v, logits, Act, tp, pp, vpp, micro_batch, cp
        )
        tr.step(
            "overhead_bytes_per_gpu",
            "Runtime overhead per GPU",
            "O",
            "O_gib * GiB",
            Ov,
            unit="B",
            O_gib=a.runtime_overhead_gib,
            GiB=GiB,
        )
        if cfg.train_precision == "fp8" and not cfg.lora_rank:
            tr.step(
                "fp8_weight_bytes_per_gpu",
                "FP8 weight copies per GPU",
                "W_8",
                "W / 2",
                W8,
                unit="B",
                W=W,
                note="Transformer Engine caches an FP8 copy (1 B/param) of each weight across micro-batches",
            )
            tr.step(
                "total_bytes_per_gpu",
                "Total per GPU",
                "U",
                "W + W_8 + G + S + A_t + O",
                total,
                unit="B",
                W=W,
                W_8=W8,
                G=G,
                S=S,
                A_t=Act,
                O=Ov,
            )
        else:
            tr.step(
                "total_bytes_per_gpu",
                "Total per GPU",
                "U",
                "W + G + S + A_t + O",
                total,
                unit="B",
                W=W,
                G=G,
                S=S,
                A_t=Act,
                O=Ov,
            )
        tr.step(
            "capacity_bytes_per_gpu",
            "HBM capacity per GPU",
            "C",
            "C_gib * GiB",
            C,
            unit="B",
            C_gib=dep.gpu.memory_gib,
            GiB=GiB,
        )
        tr.step(
            "usable_bytes_per_gpu",
            "Usable by a training layout",
            "C_u",
            "C * (1 - f_h)",
            usable,
            unit="B",
            C=C,
            f_h=a.train_mem_headroom_frac,
            note="HBM less the headroom kept free for allocator fragmentation and transient peaks "
            "(assumption train_mem_headroom_frac); a layout fits when U <= C_u",
        )
    return TrainingMemoryParts(
        trainable_params=n_train,
        stage_layers=L_s,
        pp_eff=pp_eff,
        expert_dp=edp,
        weight=W,
        fp8_weight=W8,
        gradient=G,
        optimizer=S,
        optimizer_params=upd,
        activation_per_layer=per_layer,
        interleave_factor=f_v,
        activation=Act,
        overhead=Ov,
        total=total,
        capacity=C,
        usable=usable,
    )


def training_memory_for(
    dep: Deployment | RabitConfig,
    tr: Trace,
    *,
    dp: int,
    tp: int | None = None,
    pp: int | None = None,
    zero: int | None = None,
    micro_batch: int | None = None,
    recompute: str | None = None,
    ep: int | None = None,
    vpp: int = 1,
    micro_batches: int | None = None,
    cp: int | None = None,
) -> TrainingMemory:
    """As :func:`training_memory` with the layout given explicitly: :func:`training_memory_parts` on
    scalars, its steps recorded on ``tr`` (unset knobs come from the config)."""
    dep = as_deployment(dep)
    cfg = dep.config
    zero = cfg.zero if zero is None else zero
    p = training_memory_parts(
        dep,
        dp=dp,
        tp=tp or cfg.tp,
        pp=pp or cfg.pp,
        ep=ep or cfg.ep,
        zero=zero,
        micro_batch=micro_batch or cfg.micro_batch,
        recompute=recompute or cfg.recompute,
        vpp=vpp,
        micro_batches=micro_batches,
        cp=cp or cfg.cp,
        tr=tr,
    )
    total, C, usable = float(p.total), float(p.capacity), float(p.usable)
    fits = total <= usable
    kept = f"{usable / 1e9:.3g} GB usable of {C / 1e9:.3g} GB (headroom {cfg.assumptions.train_mem_headroom_frac:.0%})"
    reason = (
        f"fits: {sig(total / 1e9)} GB of {kept}"
        if fits
        else f"does not fit: {sig(total / 1e9)} GB per GPU exceeds {kept}; " + _training_levers(cfg, dp, zero)
    )
    return TrainingMemory(
        trainable_params=float(p.trainable_params),
        weight_bytes_per_gpu=float(p.weight),
        gradient_bytes_per_gpu=float(p.gradient),
        optimizer_bytes_per_gpu=float(p.optimizer),
        activation_bytes_per_gpu=float(p.activation),
        overhead_bytes_per_gpu=float(p.overhead),
        total_bytes_per_gpu=total,
        capacity_bytes_per_gpu=C,
        fits=fits,
        reason=reason,
        steps=tr.frozen(),
        fp8_weight_bytes_per_gpu=float(p.fp8_weight),
        usable_bytes_per_gpu=usable,
    )


def training_memory_by_zero(dep: Deployment | RabitConfig) -> tuple[tuple[int, TrainingMemory], ...]:
    """Training memory per GPU at ZeRO stages 0-3, everything else as configured."""
    dep = as_deployment(dep)
    return tuple((z, training_memory(dep.with_(zero=z))) for z in (0, 1, 2, 3))


def _training_levers(cfg: RabitConfig, dp: int, zero: int) -> str:
    """The levers that can lower this layout's memory per GPU (ZeRO shards over DP, so not at DP 1)."""
    levers = []
    if dp > 1 and zero < 3:
        levers.append("raise the ZeRO stage")
    elif dp == 1:
        levers.append("add GPUs so ZeRO can shard over data parallelism (DP is 1 here)")
    levers.append("raise TP/PP")
    if cfg.recompute != "full":
        levers.append("recompute more")
    if cfg.micro_batch > 1:
        levers.append("lower the micro-batch")
    if cfg.seq_len >= 16384:
        levers.append("split the sequence with context parallelism")
    return ", ".join(levers[:-1]) + (" or " if len(levers) > 1 else "") + levers[-1]
