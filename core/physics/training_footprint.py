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
from core.physics.training_state import StateSizes, full_state, lora_state, zero_div


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


def _stage_split(m: ModelArch, pp: int, vpp: Any, tr: Trace) -> tuple[Any, Any, Any, str, dict[str, Any]]:
    """(layers of the heaviest stage, the effective pipeline split L / L_s, the interleaving's activation factor,
    the split's name in the steps, that name -> its value): ``L_s = v ceil(L / (pp v))``, ``f_v = 1 + (pp - 1) /
    (pp v)`` with ``v > 1`` virtual stages. Records the parameters, and the split when PP does not divide L."""
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
    return L_s, pp_eff, f_v, ppn, pv


def _activations(
    cfg: RabitConfig,
    m: ModelArch,
    seq: int,
    micro_batch: Any,
    tp: int,
    pp: int,
    recompute: Any,
    micro_batches: Any,
    cp: int,
    L_s: Any,
    f_v: Any,
) -> tuple[Any, Any, Any, Any]:
    """(one layer's activations, micro-batches in flight, the logits, the stage's activations): 1F1B holds min(PP,
    m) micro-batches of L_s layers (times the interleaving's factor), plus the FP32 logits; all over CP."""
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
    return per_layer, in_flight, logits, Act


def _record_totals(
    tr: Trace,
    dep: Deployment,
    W: Any,
    W8: Any,
    G: Any,
    S: Any,
    Act: Any,
    Ov: float,
    total: Any,
    C: float,
    usable: float,
) -> None:
    """Record the overhead, the FP8 weight copies, the total, the capacity and what a layout may use."""
    cfg, a = dep.config, dep.config.assumptions
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
    P = float(m.total_params())
    L_s, pp_eff, f_v, ppn, pv = _stage_split(m, pp, vpp, tr)
    shard = tp * pp_eff
    dp = dp * cp  # ZeRO shards over the data-parallel group with context parallelism (the CP ranks hold one copy)
    split = m.is_moe and ep > 1
    P_e = expert_params_total(m) if split else 0.0
    P_d = P - P_e
    edp = tp * dp / ep if split else dp
    zs = (zero_div(zero, 3, dp), zero_div(zero, 2, dp), zero_div(zero, 1, dp))
    sizes = StateSizes(P, P_d, P_e, split, shard, tp, ep, pp_eff, dp, edp, ppn, pv)
    if cfg.lora_rank:
        n_train, W, G, S, upd = lora_state(cfg, m, sizes, zs, tr)
        W8: Any = 0.0
    else:
        n_train, W, G, S, upd, W8 = full_state(cfg, sizes, zero, zs, tr)
    per_layer, in_flight, logits, Act = _activations(
        cfg, m, seq, micro_batch, tp, pp, recompute, micro_batches, cp, L_s, f_v
    )
    Ov = a.runtime_overhead_gib * GiB
    total = W + W8 + G + S + Act + Ov
    C = dep.gpu.memory_bytes
    usable = C * (1 - a.train_mem_headroom_frac)
    if tr.enabled:
        record_training_activations(
            tr, dep, recompute, per_layer, L_s, in_flight, f_v, logits, Act, tp, pp, vpp, micro_batch, cp
        )
        _record_totals(tr, dep, W, W8, G, S, Act, Ov, total, C, usable)
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
