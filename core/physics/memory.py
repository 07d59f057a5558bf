"""Serving memory: what one GPU of a replica holds (weights, KV cache, workspace, overhead) and how many
sequences fit (the RA-BIT spec "Memory", the textbook example worked example)::

    weights   = (P_q x b_w + P_bf16 x 2) / (TP x PP)
    KV/token  = 2 x L x n_kv x d_head x b_kv        (MLA: (r_kv + d_rope) x L x b_kv)
    budget    = C x u - O - weights - workspace      (per GPU; u = 0.9, O = 1.5 GiB)
    sequences = floor(budget / KV per sequence)      (whole paged blocks)

Every function records its steps on a :class:`core.base.Trace`; the results are frozen. The weights, KV,
state-space and workspace formulas (:mod:`core.physics.footprint`) are also the step model's
(:mod:`core.physics.step`) and training memory's (:mod:`core.physics.training_footprint`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, GiB, Step, Trace, sig
from core.config import AdapterSet, Deployment, Problem, RabitConfig, as_deployment
from core.physics.adapters import adapter_footprint
from core.physics.footprint import (
    kv_bytes_per_token,
    kv_shard,
    kv_split_note,
    ssm_state_bytes_per_seq_per_gpu,
    weight_bytes_per_gpu,
    workspace_bytes_per_gpu,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class ServingMemory(_Frozen):
    """What one GPU of a serving replica holds [bytes], and how many sequences fit."""

    weights_bytes_per_gpu: float
    kv_bytes_per_token: float  # whole model, all layers, one token, before sharding
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_seq_per_gpu: float  # one sequence at full context, whole blocks
    kv_bytes_per_gpu: float  # the configured batch
    activation_bytes_per_gpu: float
    overhead_bytes_per_gpu: float
    total_bytes_per_gpu: float
    capacity_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    fits: bool
    reason: str
    max_sequences: int  # per replica, paged
    max_sequences_contiguous: int  # per replica, reserving the model's maximum context
    contiguous_reserved_tokens: int
    replica_gpus: int
    replicas: int
    steps: tuple[Step, ...] = ()
    #: a hybrid's state-space layers: the fixed state of one sequence on one GPU (in kv_bytes_per_seq_per_gpu)
    ssm_state_bytes_per_seq_per_gpu: float = 0.0
    #: multi-LoRA serving (core.physics.adapters): one adapter at the set's largest rank, the whole set, and the
    #: engine's slots reserved on each GPU (in total_bytes_per_gpu, out of the KV budget); 0 without adapters
    adapter_bytes: float = 0.0
    adapter_set_bytes: float = 0.0
    adapter_reserved_bytes_per_gpu: float = 0.0
    adapter_slots: int = 0
    adapter_slot_rank: int = 0
    adapter_host_slots: int = 0
    adapter_host_cache_bytes: float = 0.0
    #: the KV tier in host memory, per GPU (vLLM --kv-offloading-size over the replica's GPUs) [B]
    kv_host_bytes_per_gpu: float = 0.0
    #: tokens of KV the replica's pool holds (HBM budget plus host tier, over the per-token KV on one GPU)
    kv_tokens_per_replica: float = 0.0

    @property
    def free_bytes_per_gpu(self) -> float:
        return max(0.0, self.capacity_bytes_per_gpu - self.total_bytes_per_gpu)


def serving_memory(dep: Deployment | RabitConfig, tr: Trace | None = None) -> ServingMemory:
    """Serving memory per GPU and the sequences one replica holds (the RA-BIT spec, the textbook example)."""
    return _serving_memory(as_deployment(dep), tr if tr is not None else Trace())


def fit_problems(dep: Deployment | RabitConfig) -> tuple[Problem, ...]:
    """The serving model that cannot fit even at batch 1, as a non-blocking problem on TP (the pages still draw
    its memory breakdown); nothing for a config that fits or for training. Callers ask only once the field
    checks (:func:`core.config.problems`) found nothing."""
    dep = as_deployment(dep)
    cfg, m, g = dep.config, dep.model, dep.gpu
    if cfg.phase != "serve":
        return ()
    one = _serving_memory(dep.with_(batch=1), NO_TRACE)
    if one.fits:
        return ()
    return (
        Problem(
            "tp",
            f"{m.name} cannot fit even at batch 1 on TP {cfg.tp} x PP {cfg.pp} "
            f"{g.name}: {one.reason.removeprefix('does not fit: ')}",
            blocking=False,
        ),
    )


def _serving_memory(dep: Deployment, tr: Trace) -> ServingMemory:
    cfg, m, g = dep.config, dep.model, dep.gpu
    a = cfg.assumptions
    tp, pp, cp = cfg.tp, cfg.pp, cfg.cp
    W = weight_bytes_per_gpu(m, cfg.weight_bytes_per_param, tp, pp, cfg.ep, tr, dp_attention=cfg.dp_attention)
    k_t = kv_bytes_per_token(m, cfg.kv_bytes_per_elem, tr)
    shard = kv_shard(m, tp, cfg.dcp, cfg.dp_attention)
    note = kv_split_note(m, tp, cp, cfg.dcp, cfg.dp_attention, shard) + f", layers {pp}x by PP"
    cp_in: dict[str, Any] = {"cp": cp} if cp > 1 else {}
    k_gpu = tr.step(
        "kv_bytes_per_token_per_gpu",
        "KV per token on one GPU",
        "k_g",
        "k_t / (s_kv * pp * cp)" if cp > 1 else "k_t / (s_kv * pp)",
        k_t / (shard * pp * cp) if cp > 1 else k_t / (shard * pp),
        unit="B",
        latex=r"\frac{[k_t]}{[s_kv] \cdot [pp]" + (r" \cdot [cp]}" if cp > 1 else "}"),
        k_t=k_t,
        s_kv=shard,
        pp=pp,
        **cp_in,
        note=note,
    )
    ctx = cfg.context_tokens
    blocks = math.ceil(ctx / cfg.block_size)
    padded = blocks * cfg.block_size
    eff_ctx = m.kv_context_tokens(padded)
    shared = cfg.prefix_cache_frac * cfg.input_tokens
    shared_eff = m.kv_context_tokens(math.ceil(shared / cfg.block_size) * cfg.block_size) if shared else 0.0
    per_seq = tr.step(
        "kv_bytes_per_seq_per_gpu",
        "KV per sequence on one GPU",
        "k_s",
        "k_g * (S_pad - S_shared)",
        k_gpu * (eff_ctx - shared_eff),
        unit="B",
        latex=r"[k_g] \cdot ([S_pad] - [S_shared])",
        k_g=k_gpu,
        S_pad=eff_ctx,
        S_shared=shared_eff,
        note=f"{ctx:,} tokens in whole blocks of {cfg.block_size}"
        + (f"; sliding-window layers hold at most {m.sliding_window} tokens" if m.sliding_layers else "")
        + (f"; {cfg.prefix_cache_frac:.0%} of the prompt is a shared cached prefix" if shared else ""),
    )
    m_s = ssm_state_bytes_per_seq_per_gpu(m, tp, pp, tr)
    ssm_in: dict[str, Any] = {"m_s": m_s} if m_s else {}  # the state's input, in the steps it enters
    if m_s:  # a hybrid: each sequence also holds its state-space layers' fixed state
        per_seq = tr.step(
            "kv_state_bytes_per_seq_per_gpu",
            "KV and state per sequence on one GPU",
            "k_s",
            "k_g * (S_pad - S_shared) + m_s",
            per_seq + m_s,
            unit="B",
            k_g=k_gpu,
            S_pad=eff_ctx,
            S_shared=shared_eff,
            m_s=m_s,
            note="the KV of the attention layers grows with the context; the state-space layers' state does not",
        )
    prefix_once = k_gpu * shared_eff
    reserve = max(m.max_context, ctx)
    s_max = m.kv_context_tokens(reserve)
    if cfg.kv_alloc == "contiguous":
        KV = tr.step(
            "kv_bytes_per_gpu",
            "KV cache per GPU (batch)",
            "KV",
            "B * k_g * S_max" + (" + B * m_s" if m_s else ""),
            cfg.batch * k_gpu * s_max + cfg.batch * m_s,
            unit="B",
            B=cfg.batch,
            k_g=k_gpu,
            S_max=s_max,
            **ssm_in,
            note=f"contiguous allocation reserves the model's maximum context of {reserve:,} tokens "
            f"for each of the {cfg.batch} sequences",
        )
    else:
        KV = tr.step(
            "kv_bytes_per_gpu",
            "KV cache per GPU (batch)",
            "KV",
            "B * k_s + k_g * S_shared",
            cfg.batch * per_seq + prefix_once,
            unit="B",
            B=cfg.batch,
            k_s=per_seq,
            k_g=k_gpu,
            S_shared=shared_eff,
            note=f"paged allocation, batch {cfg.batch}",
        )
    A = workspace_bytes_per_gpu(m, cfg, tr)
    O = tr.step(
        "overhead_bytes_per_gpu",
        "Runtime overhead per GPU",
        "O",
        "O_gib * GiB",
        a.runtime_overhead_gib * GiB,
        unit="B",
        O_gib=a.runtime_overhead_gib,
        GiB=GiB,
        note="CUDA context + framework + fragmentation (assumption runtime_overhead_gib)",
    )
    ad = adapter_footprint(dep, tr) if cfg.adapters.enabled else None
    L = ad.reserved_bytes_per_gpu if ad is not None else 0.0
    slots: dict[str, Any] = {"L_r": L} if ad is not None else {}  # the adapter slots (multi-LoRA), held like weights
    if cfg.kv_offload_gib > 0:  # the batch's KV beyond what HBM holds sits in the host tier
        KV_m = tr.step(
            "kv_hbm_bytes_per_gpu",
            "KV cache in HBM per GPU (batch)",
            "KV_m",
            "min(KV, max(0, C * u - O - W - A" + (" - L_r" if slots else "") + "))",
            min(KV, max(0.0, g.memory_bytes * a.gpu_mem_util - O - W - A - L)),
            unit="B",
            KV=KV,
            C=g.memory_bytes,
            u=a.gpu_mem_util,
            O=O,
            W=W,
            A=A,
            **slots,
            note="the rest of the batch's KV is in host memory",
        )
    kv_in: dict[str, Any] = {"KV_m": KV_m} if cfg.kv_offload_gib > 0 else {"KV": KV}
    ((kv_sym, kv_val),) = kv_in.items()
    U = tr.step(
        "total_bytes_per_gpu",
        "Total per GPU (HBM)" if cfg.kv_offload_gib > 0 else "Total per GPU",
        "U",
        f"W + {kv_sym} + A + O" + (" + L_r" if slots else ""),
        W + kv_val + A + O + L,
        unit="B",
        W=W,
        **kv_in,
        A=A,
        O=O,
        **slots,
    )
    C = tr.step(
        "capacity_bytes_per_gpu",
        "HBM capacity per GPU",
        "C",
        "C_gib * GiB",
        g.memory_bytes,
        unit="B",
        C_gib=g.memory_gib,
        GiB=GiB,
        note=f"{g.name}: {sig(g.memory_gib, 6)} GiB (vendor 'GB' of HBM is binary)",
    )
    usable = tr.step(
        "usable_bytes_per_gpu",
        "Usable by the engine",
        "C_u",
        "C * u",
        C * a.gpu_mem_util,
        unit="B",
        C=C,
        u=a.gpu_mem_util,
        note="gpu_memory_utilization",
    )
    budget = tr.step(
        "kv_budget_bytes_per_gpu",
        "Left for KV cache per GPU",
        "K_b",
        "max(0, C_u - O - W - A" + (" - L_r" if slots else "") + ")",
        max(0.0, usable - O - W - A - L),
        unit="B",
        C_u=usable,
        O=O,
        W=W,
        A=A,
        **slots,
        note=f"{ad.slots} adapter slot(s) at rank {ad.slot_rank} take {L / 1e9:.3g} GB of it" if ad else "",
    )
    host = 0.0
    pool = budget
    if cfg.kv_offload_gib > 0:
        host = tr.step(
            "kv_host_bytes_per_gpu",
            "KV tier in host memory per GPU",
            "K_h",
            "X_gib * GiB / G_r",
            cfg.kv_offload_bytes / cfg.replica_gpus,
            unit="B",
            X_gib=cfg.kv_offload_gib,
            GiB=GiB,
            G_r=cfg.replica_gpus,
            note="vLLM --kv-offloading-size (summed over the replica's ranks): blocks beyond HBM live in host "
            "memory and are read back over the host link (assumption offload_gb_per_s) when attended",
        )
        pool = tr.step(
            "kv_pool_bytes_per_gpu",
            "KV pool per GPU (HBM + host tier)",
            "K_p",
            "max(0, K_b) + K_h",
            max(0.0, budget) + host,
            unit="B",
            K_b=budget,
            K_h=host,
        )
    # a sequence always holds at least its newest token of its own (a prefix share close to 1 or an all-sliding
    # model must not make the per-sequence cost zero)
    seq_cost = max(per_seq, k_gpu)
    if cfg.dp_attention and tp > 1:
        # each rank holds whole sequences: tp ranks of floor(pool / (tp k_s)) sequences each
        n_paged: float = tp * max(0, math.floor((pool - prefix_once) / (tp * seq_cost)))
        n_paged = tr.step(
            "max_sequences",
            "Concurrent sequences per replica (paged)",
            "N",
            "tp * max(0, floor((K - k_g * S_shared) / (tp * k_s)))",
            n_paged,
            unit="seq",
            tp=tp,
            K=pool,
            k_g=k_gpu,
            S_shared=shared_eff,
            k_s=per_seq,
            note="data-parallel attention: each of the tp ranks holds whole sequences in its own pool "
            "(tp k_s per sequence on its rank)",
        )
    else:
        n_paged = max(0, math.floor((pool - prefix_once) / seq_cost))
        kname = "K_p" if host else "K_b"
        k_in: dict[str, Any] = {kname: pool}
        n_paged = tr.step(
            "max_sequences",
            "Concurrent sequences per replica (paged)",
            "N",
            f"max(0, floor(({kname} - k_g * S_shared) / k_s))",
            n_paged,
            unit="seq",
            **k_in,
            k_g=k_gpu,
            S_shared=shared_eff,
            k_s=per_seq,
            note="whole paged blocks; every GPU of the replica holds its shard of each sequence"
            + ("; the pool includes the host tier" if host else ""),
        )
    kv_tokens = tr.step(
        "kv_tokens_per_replica",
        "KV tokens one replica holds",
        "N_t",
        "max(0, K) / k_g",
        max(0.0, pool) / k_gpu,
        unit="tokens",
        K=pool,
        k_g=k_gpu,
        note="the KV pool in tokens of the model's own per-token KV (all attention layers)"
        + ("; sliding-window layers hold fewer, so a sequence of more tokens fits" if m.sliding_layers else ""),
    )
    n_contig = tr.step(
        "max_sequences_contiguous",
        "Concurrent sequences per replica (contiguous)",
        "N_c",
        "max(0, floor(K_b / (k_g * S_max)))" if not m_s else "max(0, floor(K_b / (k_g * S_max + m_s)))",
        max(0, math.floor(budget / (k_gpu * s_max + m_s))),
        unit="seq",
        K_b=budget,
        k_g=k_gpu,
        S_max=s_max,
        **ssm_in,
        note=f"reserves the model's maximum context of {reserve:,} tokens per sequence up front",
    )
    fits, reason = True, f"fits: {sig(U / 1e9)} GB of {sig(usable / 1e9)} GB usable ({sig(C / 1e9)} GB HBM)"
    if W + O + A > usable:
        fits = False
        reason = (
            f"does not fit: weights {sig(W / 1e9)} GB + overhead {sig(O / 1e9)} GB + workspace {sig(A / 1e9)} GB "
            f"exceed the {sig(usable / 1e9)} GB usable per GPU; raise TP/PP, quantise the weights or pick a "
            "larger GPU"
        )
    elif W + O + A + L > usable:
        fits = False
        reason = (
            f"does not fit: the {ad.slots if ad else 0} adapter slots ({L / 1e9:.3g} GB per GPU) leave no room for "
            "a KV cache; lower max_loras or max_lora_rank, or raise TP"
        )
    elif W + O > usable:
        fits = False
        reason = f"does not fit: the weights alone ({sig(W / 1e9)} GB per GPU) exceed usable memory"
    elif cfg.batch > (n_contig if cfg.kv_alloc == "contiguous" else n_paged):
        fits = False
        n_sel = n_contig if cfg.kv_alloc == "contiguous" else n_paged
        reason = (
            f"does not fit: batch {cfg.batch} needs {sig(KV / 1e9)} GB of KV per GPU but {sig(pool / 1e9)} GB "
            f"is left{' (HBM + host tier)' if host else ''}; at most {n_sel} sequences of {ctx:,} tokens fit under "
            f"{cfg.kv_alloc} allocation"
            + (f" ({n_paged} with paged allocation)" if cfg.kv_alloc == "contiguous" else "")
            + (
                "; one sequence alone does not fit: split it over more GPUs with context parallelism (cp), or "
                "hold part of its KV in host memory (kv_offload_gib)"
                if n_sel == 0
                else ""
            )
        )
    return ServingMemory(
        weights_bytes_per_gpu=W,
        kv_bytes_per_token=k_t,
        kv_bytes_per_token_per_gpu=k_gpu,
        kv_bytes_per_seq_per_gpu=per_seq,
        kv_bytes_per_gpu=KV,
        activation_bytes_per_gpu=A,
        overhead_bytes_per_gpu=O,
        total_bytes_per_gpu=U,
        capacity_bytes_per_gpu=C,
        usable_bytes_per_gpu=usable,
        kv_budget_bytes_per_gpu=budget,
        fits=fits,
        reason=reason,
        max_sequences=int(n_paged),
        max_sequences_contiguous=int(n_contig),
        contiguous_reserved_tokens=reserve,
        replica_gpus=cfg.replica_gpus,
        replicas=cfg.dp,
        ssm_state_bytes_per_seq_per_gpu=m_s,
        steps=tr.frozen(),
        kv_host_bytes_per_gpu=host,
        kv_tokens_per_replica=kv_tokens,
        **(
            {
                "adapter_bytes": ad.adapter_bytes,
                "adapter_set_bytes": ad.set_bytes,
                "adapter_reserved_bytes_per_gpu": L,
                "adapter_slots": ad.slots,
                "adapter_slot_rank": ad.slot_rank,
                "adapter_host_slots": ad.host_slots,
                "adapter_host_cache_bytes": ad.host_cache_bytes,
            }
            if ad is not None
            else {}
        ),
    )


class AdapterKvCost(_Frozen):
    """What the adapter slots take out of one replica: the KV budget and the sequences, against the base alone."""

    reserved_bytes_per_gpu: float
    kv_budget_without_bytes_per_gpu: float
    kv_budget_with_bytes_per_gpu: float
    sequences_without: int
    sequences_with: int

    @property
    def sequences_lost(self) -> int:
        return self.sequences_without - self.sequences_with

    @property
    def budget_share(self) -> float:
        """The slots' share of the KV budget the base alone has."""
        b = self.kv_budget_without_bytes_per_gpu
        return self.reserved_bytes_per_gpu / b if b > 0 else 0.0


def adapter_kv_cost(dep: Deployment | RabitConfig) -> AdapterKvCost:
    """The KV budget and the sequences one replica holds with the config's adapter slots and without them."""
    dep = as_deployment(dep)
    with_ = _serving_memory(dep, NO_TRACE)
    base = _serving_memory(dataclasses.replace(dep, config=dep.config.with_(adapters=AdapterSet())), NO_TRACE)
    return AdapterKvCost(
        reserved_bytes_per_gpu=with_.adapter_reserved_bytes_per_gpu,
        kv_budget_without_bytes_per_gpu=base.kv_budget_bytes_per_gpu,
        kv_budget_with_bytes_per_gpu=with_.kv_budget_bytes_per_gpu,
        sequences_without=base.max_sequences,
        sequences_with=with_.max_sequences,
    )


def sequences_vs_context(dep: Deployment | RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """(context, paged sequences, contiguous sequences) per replica for each total context length."""
    dep = as_deployment(dep)
    cfg = dep.config
    out = []
    for c in contexts:
        out_tokens = max(1, c - cfg.input_tokens) if c > cfg.input_tokens else 1
        in_tokens = c - out_tokens
        sub = cfg.model_copy(update={"input_tokens": max(1, in_tokens), "output_tokens": out_tokens})
        r = _serving_memory(dataclasses.replace(dep, config=sub), NO_TRACE)
        out.append((c, r.max_sequences, r.max_sequences_contiguous))
    return tuple(out)


def kv_per_token_across_catalog(kv_dtype: str = "bf16") -> tuple[tuple[str, str, float], ...]:
    """(model slug, attention layout, KV bytes per token over all layers) for every catalog model."""
    from core import catalog
    from core.config import KV_BYTES

    return tuple(
        sorted(
            (
                (s, e.arch.attention_kind, kv_bytes_per_token(e.arch, KV_BYTES[kv_dtype]))
                for s, e in catalog.models().items()
            ),
            key=lambda r: r[2],
        )
    )
