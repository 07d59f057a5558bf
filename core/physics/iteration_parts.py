"""One scheduler iteration taken apart: its FLOPs, bytes and the parts of its time, recorded as it is computed.

:func:`iteration` evaluates the step model's one body (:meth:`core.physics.step.StepModel.stage_parts`,
``busy_s``, ``launch_s``, ``iteration_s``) for one iteration of ``T`` new tokens, ``A`` attended (query, key) pairs,
``R`` cached tokens and ``S`` sequences, and, given a :class:`core.base.Trace`, records each part where it computes
it, in the expressions and symbols of :mod:`core.physics.iteration_exprs`::

    t_b = max(t_c - t_ca, t_m - t_ma) + max(t_ca, t_ma)                       GEMMs and attention, each at its roofline
    t   = pp (t_b + t_x) + (pp - 1)(a_h + b_h T) + t_o

A test re-evaluates every recorded expression against its value, so the derivation cannot drift from the body.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Trace, sig
from core.physics.iteration_exprs import (
    EXPR_BUSY,
    EXPR_BYTES,
    EXPR_COMM,
    EXPR_FIXED,
    EXPR_FLOP,
    EXPR_FLOP_LORA,
    EXPR_LORA_BYTES,
    EXPR_MEMORY,
    EXPR_MEMORY_LORA,
    EXPR_TIME,
    consts,
    exprs,
    launch_per_kernel_s,
    lora_consts,
    rows_per_expert,
)
from core.physics.iteration_exprs import UNITS as _U_ITER
from core.physics.step import StepModel

__all__ = ["IterationParts", "iteration"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class IterationParts(_Frozen):
    """One iteration, taken apart. Work is per GPU of one stage; times in seconds."""

    tokens: float  # T
    pairs: float  # A
    kv_tokens: float  # R
    flop: float  # per GPU of one stage
    bytes: float  # per GPU of one stage: weights read + KV read (x g_r, at the weights' bandwidth) + KV written
    compute_s: float  # one stage
    memory_s: float  # one stage
    comm_s: float  # one stage, exposed
    hops_s: float  # all pp - 1 stage hops
    overhead_s: float  # fixed costs of the iteration: scheduler step + pp x launches + per-sequence work
    time_s: float  # pp (busy + comm) + hops + overhead
    pp: int
    bound: str
    seqs: float = 0.0  # S: sequences scheduled and sampled
    launch_s: float = 0.0  # kernel launches of one stage
    busy_s: float = 0.0  # one stage: the GEMMs and attention each at their own roofline (StepModel.busy_s)
    # multi-LoRA serving: distinct adapters read (D), their bytes and FLOPs (in ``bytes`` and ``flop``)
    adapters: float = 0.0
    adapter_bytes: float = 0.0
    adapter_flop: float = 0.0

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes if self.bytes else math.inf


def _att_pi(pool: dict[str, Any]) -> str:
    """The name of attention's ceiling among the named inputs: its own (``pi_att``) where it differs."""
    return "pi_att" if "pi_att" in pool else "pi_flops"


def _pick(expr: str, pool: dict[str, Any]) -> dict[str, Any]:
    """The named inputs of ``expr`` found in ``pool``."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", expr))
    return {n: pool[n] for n in names if n in pool}


def _record_split(
    sm: StepModel,
    tr: Trace,
    key: str,
    what: str,
    whole: dict[str, float],
    pool: dict[str, Any],
    values: dict[str, float],
) -> None:
    """The parts of an iteration with attention parallelism or a host KV tier, on one rank's share (the split path
    of :meth:`core.physics.step.StepModel.stage_parts`): ``whole`` the iteration's T, A, R, ``pool`` the named
    inputs (the constants and the share), ``values`` the recorded parts (F, t_c, Y, Y_l, t_m, t_x)."""
    ex = exprs(sm)
    if sm.cp > 1:
        for sym, name in (("T_c", "tokens"), ("A_c", "pairs"), ("R_c", "cached tokens")):
            full_v: dict[str, Any] = {sym[0]: whole[sym[0]]}
            tr.step(
                f"{key}_{sym.lower()}",
                f"{what}: {name} on one of the {sm.cp} CP ranks",
                sym,
                f"{sym[0]} / cp",
                pool[sym],
                unit=_U_ITER[sym],
                units=_U_ITER,
                **full_v,
                cp=sm.cp,
                note="context parallelism splits the iteration's tokens, pairs and cached tokens over the ranks",
            )
    rows = (
        ("flop", "F", "FLOPs per GPU", "FLOP", ""),
        ("compute_s", "t_c", "compute time", "s", ""),
        ("bytes", "Y", "bytes moved per GPU", "B", ""),
        ("lora_bytes", "Y_l", "adapter bytes per GPU", "B", "the batch's distinct adapters, read on every rank"),
        (
            "memory_s",
            "t_m",
            "memory time",
            "s",
            "HBM" + (", and the host link's stream beside it for the KV beyond HBM" if sm.host_tier else ""),
        ),
        (
            "comm_s",
            "t_x",
            "exposed communication per stage",
            "s",
            "TP all-reduces and EP all-to-alls of the rank's tokens"
            + ("; the ring steps' sends not hidden behind their block's attention" if sm.cp > 1 else "")
            + ("; decode context parallelism's exchange per attention layer" if sm.dcp > 1 else ""),
        ),
    )
    for suffix, sym, label, unit, note in rows:
        if sym not in ex:
            continue
        pool[sym] = tr.step(
            f"{key}_{suffix}",
            f"{what}: {label}",
            sym,
            ex[sym],
            values[sym],
            unit=unit,
            units=_U_ITER,
            **_pick(ex[sym], pool),
            note=note,
        )


def _record_busy(
    sm: StepModel, tr: Trace, key: str, what: str, pool: dict[str, Any], c_a: float, m_a: float, busy: float
) -> None:
    """Attention's compute and K/V reads, and the stage's busy time (:meth:`core.physics.step.StepModel.busy_s`),
    plain or on one rank's share."""
    ex = exprs(sm)
    plain = not sm.attention_split
    tr.step(
        f"{key}_attention_compute_s",
        f"{what}: attention compute",
        "t_ca",
        ex["t_ca"],
        c_a,
        unit="s",
        latex=rf"\frac{{[f_a] \cdot [A]}}{{[{_att_pi(pool)}] \cdot [mfu]}}" if plain else None,
        units=_U_ITER,
        **_pick(ex["t_ca"], pool),
        note="the attention kernels' share of t_c",
    )
    tr.step(
        f"{key}_attention_memory_s",
        f"{what}: attention K/V reads",
        "t_ma",
        ex["t_ma"],
        m_a,
        unit="s",
        latex=r"\frac{[g_r] \cdot [R] \cdot [k_g]}{[pi_bw] \cdot [eta_bw]}" if plain else None,
        units=_U_ITER,
        **_pick(ex["t_ma"], pool),
        note="the attention kernels' share of t_m: the cached K/V they read",
    )
    tr.step(
        f"{key}_busy_s",
        f"{what}: busy time per stage (GEMMs and attention each at their own roofline)",
        "t_b",
        EXPR_BUSY,
        busy,
        unit="s",
        latex=r"\max([t_c] - [t_ca],\ [t_m] - [t_ma]) + \max([t_ca],\ [t_ma])",
        units=_U_ITER,
        t_c=pool["t_c"],
        t_ca=c_a,
        t_m=pool["t_m"],
        t_ma=m_a,
        note="a layer's GEMMs (against the weights they stream; the adapters' GEMMs and weights with them) and its "
        "attention (against the K/V it reads) run as separate kernels, one after the other (per-operator roofline, "
        "arXiv 2402.16363)",
    )


def iteration(
    sm: StepModel,
    T: float,
    A: float,
    R: float,
    S: float | None = None,
    *,
    tr: Trace = NO_TRACE,
    key: str = "iteration",
    what: str = "Iteration",
    compact: bool = False,
    final_label: str | None = None,
    final_symbol: str = "t",
    final_key: str | None = None,
    note: str = "",
) -> IterationParts:
    """One iteration of ``T`` tokens, ``A`` pairs, ``R`` cached tokens and ``S`` sequences (default ``T``).

    Recorded on ``tr`` under key prefix ``key`` as each part is computed: the weights read (MoE), FLOPs,
    compute, bytes, memory, communication and fixed costs, then the iteration time as step ``final_key``
    (default ``{key}_s``) whose note starts with the bound and goes on with ``note``; ``compact`` records the
    time alone, as the whole formula in one expression with these ``T``, ``A`` and ``R``.
    """
    S = float(T) if S is None else float(S)
    lora = lora_consts(sm)
    D = float(sm.distinct_adapters(S)) if lora else 0.0
    c, mm, x, k = sm.stage_parts(float(T), float(A), float(R), D)
    k = sm.launch_s(k, float(T), S)
    c_a, m_a = sm.attention_s(float(A), float(R))  # on one CP rank's share, as the body's
    busy = sm.busy_s(c, mm, float(A), float(R))
    full = tr.enabled and not compact
    split = sm.attention_split
    cp = sm.cp if split else 1
    Tc, Ac, Rc = float(T) / cp, float(A) / cp, float(R) / cp  # one rank's share (all of it without CP)
    K = _trace_constants(sm, Tc, S, cp, lora, D) if tr.enabled else {}
    W_r = sm.weights_read_bytes(Tc)
    flop = sm.flop_per_token * Tc + sm.attn_flop_per_pair * Ac
    if lora:
        flop = flop + sm.lora_flop_per_token * Tc
    nbytes = (
        sm.weight_read_factor * W_r
        + (sm.kv_read_factor * Rc + Tc) * sm.kv_bytes_per_token
        + Tc * sm.route_bytes_per_token
    )
    lora_bytes = D * sm.lora_bytes_per_adapter + Tc * sm.lora_act_bytes_per_token if lora else 0.0
    if tr.enabled:
        pool: dict[str, Any] = {**K, "T": T, "A": A, "R": R, "T_c": Tc, "A_c": Ac, "R_c": Rc, "W_r": W_r}
        pool.update(t_c=c, t_m=mm)
    if full and split:
        values = {"F": flop, "t_c": c, "Y": nbytes, "Y_l": lora_bytes, "t_m": mm, "t_x": x}
        _record_split(sm, tr, key, what, {"T": T, "A": A, "R": R}, pool, values)
        full = False  # the plain records below are the split ones'
    if full:
        _record_work(sm, tr, key, what, K, T, A, W_r, flop, c, lora)
        _record_traffic(sm, tr, key, what, K, T, R, S, D, W_r, nbytes, lora_bytes, mm, x, lora)
    fixed = sm.fixed_s(k, S)
    if tr.enabled and not compact:
        _record_busy(sm, tr, key, what, pool, c_a, m_a, busy)
        _record_fixed(sm, tr, key, what, K, T, S, Tc, fixed)
    hops = sm.hops_s(T)
    time = sm.iteration_s(float(T), float(A), float(R), S, D)
    vals = {"compute": c, "memory": mm, "communication": x}
    bound = max(vals, key=lambda n: vals[n])
    if tr.enabled:
        _record_time(
            sm,
            tr,
            key,
            what,
            K,
            T,
            A,
            R,
            W_r,
            time,
            busy,
            x,
            fixed,
            bound,
            compact=compact,
            final_label=final_label,
            final_symbol=final_symbol,
            final_key=final_key,
            note=note,
        )
    return IterationParts(
        tokens=T,
        pairs=A,
        kv_tokens=R,
        flop=flop,
        bytes=nbytes + lora_bytes,
        compute_s=c,
        memory_s=mm,
        comm_s=x,
        hops_s=hops,
        overhead_s=fixed,
        time_s=time,
        pp=sm.pp,
        bound=bound,
        seqs=S,
        launch_s=k,
        busy_s=busy,
        adapters=D,
        adapter_bytes=lora_bytes,
        adapter_flop=sm.lora_flop_per_token * Tc if lora else 0.0,
    )


def _trace_constants(sm: StepModel, Tc: float, S: float, cp: int, lora: dict, D: float) -> dict[str, Any]:
    """The step model's constants a traced iteration's records name, with this iteration's launch cost per
    kernel, rows per expert and sequences (and the adapters' constants)."""
    K = consts(sm)
    K["t_k"] = launch_per_kernel_s(sm, Tc, S / cp) if Tc > 0 else 0.0
    K["t_e"] = rows_per_expert(sm, Tc)
    K["S"] = S
    if lora:
        K.update(lora, D=D)
    return K


def _record_work(
    sm: StepModel, tr: Trace, key: str, what: str, K: dict[str, Any], T, A, W_r: float, flop: float, c: float, lora
) -> None:
    """Records the weights read (MoE: the experts touched), the FLOPs per GPU and the compute time."""
    if sm.expert_bytes_per_gpu_per_expert:
        m = sm.model
        tr.step(
            f"{key}_weights_read_bytes",
            "Weights read (dense + experts touched)",
            "W_r",
            "W_d + E * (1 - (1 - k / E) ** T) * w_e",
            W_r,
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
    tr.step(
        f"{key}_flop",
        f"{what}: FLOPs per GPU",
        "F",
        EXPR_FLOP_LORA if lora else EXPR_FLOP,
        flop,
        unit="FLOP",
        latex=r"[f_t] \cdot [T] + [f_a] \cdot [A]" + (r" + [f_l] \cdot [T]" if lora else ""),
        units=_U_ITER,
        f_t=K["f_t"],
        T=T,
        f_a=K["f_a"],
        A=A,
        **({"f_l": K["f_l"]} if lora else {}),
        note="matmuls (2 FLOP per active parameter per token) + attention (QK^T and PV per pair)"
        + (" + the adapters' shrink and expand GEMMs at the slot rank" if lora else ""),
    )
    tr.step(
        f"{key}_compute_s",
        f"{what}: compute time",
        "t_c",
        exprs(sm)["t_c"],  # the plain path's (attention at its own ceiling where that differs)
        c,
        unit="s",
        latex=r"\frac{([f_t] - [f_e]) \cdot [T]}{[pi_flops] \cdot [mfu] \cdot [eta_d] \cdot \frac{[T]}{[T] + [T0]}} + "
        r"\frac{[f_e] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot [eta_e] \cdot \frac{[t_e]}{[t_e] + [T0]}} + "
        rf"\frac{{[f_a] \cdot [A]}}{{[{_att_pi(K)}] \cdot [mfu]}}"
        + (r" + \frac{[f_l] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot [eta_l]}" if lora else ""),
        units=_U_ITER,
        f_t=K["f_t"],
        f_e=K["f_e"],
        eta_e=K["eta_e"],
        eta_d=K["eta_d"],
        t_e=K["t_e"],
        T=T,
        f_a=K["f_a"],
        A=A,
        pi_flops=K["pi_flops"],
        **({"pi_att": K["pi_att"]} if "pi_att" in K else {}),
        mfu=K["mfu"],
        T0=K["T0"],
        **({"f_l": K["f_l"], "eta_l": K["eta_l"]} if lora else {}),
        note="the matmul efficiency ramps with tokens per iteration as T/(T+T0) (GEMM tiling; the RA-BIT spec, "
        "T0 = 64); attention runs at the ceiling on its own pairs; the dense projections at eta_d = "
        f"{sig(K['eta_d'])} of it (row-parallel GEMMs reduce over h / tp rows: core.physics.gemm_shape)"
        + (
            f"; routed experts (f_e) ramp on their own t_e = T k / E_T = {sig(K['t_e'])} rows each, at eta_e = "
            f"{sig(K['eta_e'])} of the ceiling"
            if K["f_e"]
            else ""
        )
        + ("; the adapter GEMMs run at eta_l of it (assumption lora_kernel_eff)" if lora else ""),
    )


def _record_traffic(
    sm: StepModel,
    tr: Trace,
    key: str,
    what: str,
    K: dict[str, Any],
    T,
    R,
    S: float,
    D: float,
    W_r: float,
    nbytes: float,
    lora_bytes: float,
    mm: float,
    x: float,
    lora,
) -> None:
    """Records the bytes moved per GPU (the adapters' apart), the memory time and the exposed communication."""
    tr.step(
        f"{key}_bytes",
        f"{what}: bytes moved per GPU",
        "Y",
        EXPR_BYTES,
        nbytes,
        unit="B",
        latex=r"[g_w] \cdot [W_r] + ([g_r] \cdot [R] + [T]) \cdot [k_g] + [T] \cdot [r_b]",
        units=_U_ITER,
        g_w=K["g_w"],
        W_r=W_r,
        g_r=K["g_r"],
        R=R,
        T=T,
        k_g=K["k_g"],
        r_b=K["r_b"],
        note="weights read (g_w each: FP8 weights' small-batch streams priced at the BF16 streams' bandwidth) + KV "
        "read (R cached tokens, g_r each: the paged gathers priced at the weight streams' bandwidth) + KV written "
        "(T new tokens)" + (" + MoE permute / un-permute copies (r_b per token)" if K["r_b"] else ""),
    )
    extra: dict[str, float] = {}
    if lora:
        extra["Y_l"] = tr.step(
            f"{key}_lora_bytes",
            f"{what}: adapter bytes per GPU",
            "Y_l",
            EXPR_LORA_BYTES,
            lora_bytes,
            unit="B",
            latex=r"[D] \cdot [w_l] + [T] \cdot [a_l]",
            units=_U_ITER,
            D=D,
            w_l=K["w_l"],
            T=T,
            a_l=K["a_l"],
            note=f"{D:.3g} distinct adapters expected among {S:,.0f} sequences (at most max_loras = "
            f"{sm.lora_slots:g} of {sm.lora_count:g}), each read once at the slot rank, + the adapter kernels' "
            "activations",
        )
        extra["eta_l"] = K["eta_l"]
    tr.step(
        f"{key}_memory_s",
        f"{what}: memory time",
        "t_m",
        EXPR_MEMORY_LORA if lora else EXPR_MEMORY,
        mm,
        unit="s",
        latex=r"\frac{[Y]}{[pi_bw] \cdot [eta_bw]}"
        + (r" + \frac{[Y_l]}{[pi_bw] \cdot [eta_bw] \cdot [eta_l]}" if lora else ""),
        units=_U_ITER,
        Y=nbytes,
        pi_bw=K["pi_bw"],
        eta_bw=K["eta_bw"],
        **extra,
        note="achieved HBM bandwidth = datasheet x MBU" + ("; the adapter kernels reach eta_l of it" if lora else ""),
    )
    tr.step(
        f"{key}_comm_s",
        f"{what}: exposed communication per stage",
        "t_x",
        EXPR_COMM,
        x,
        unit="s",
        latex=r"\left([n_ar] \min([a_r] + [b_r] \cdot [T],\ [a_t] + [b_t] \cdot [T],\ [a_o] + [b_o] \cdot [T]\ "
        r"(T < [T_o])) + "
        r"[n_a2a] ([a_e] + [b_e] \cdot [T])\right) \cdot [x_c]",
        units=_U_ITER,
        n_ar=K["n_ar"],
        a_r=K["a_r"],
        b_r=K["b_r"],
        T=T,
        a_t=K["a_t"],
        b_t=K["b_t"],
        a_o=K["a_o"],
        b_o=K["b_o"],
        T_o=K["T_o"],
        n_a2a=K["n_a2a"],
        a_e=K["a_e"],
        b_e=K["b_e"],
        x_c=K["x_c"],
        note="TP all-reduces of T x h x 2 B (2 per layer; the cheapest of ring, tree/NVLS and, below T_o tokens, the engine's "
        "one-shot) + EP "
        "all-to-alls, times the share not hidden behind compute",
    )


def _record_fixed(
    sm: StepModel, tr: Trace, key: str, what: str, K: dict[str, Any], T, S: float, Tc: float, fixed: float
) -> None:
    """Records the fixed costs: the scheduler, the kernel launches (replayed from a CUDA graph or eager) and the
    per-sequence work."""
    graph = Tc <= sm.graph_max_tokens and (sm.graph_prefill or S >= T)
    tr.step(
        f"{key}_fixed_s",
        f"{what}: fixed costs (scheduler, kernel launches, per-sequence work and sampling)",
        "t_o",
        EXPR_FIXED,
        fixed,
        unit="s",
        latex=r"[t_s] + [pp] \cdot [n_k] \cdot [t_k] + [S] \left([t_q] + "
        r"\frac{[V] \cdot [y_v] + 2 [m_s]}{[pi_bw] \cdot [eta_bw]}\right)",
        units=_U_ITER,
        t_s=K["t_s"],
        pp=sm.pp,
        n_k=K["n_k"],
        t_k=K["t_k"],
        S=K["S"],
        t_q=K["t_q"],
        V=K["V"],
        y_v=K["y_v"],
        m_s=K["m_s"],
        pi_bw=K["pi_bw"],
        eta_bw=K["eta_bw"],
        note=f"{K['n_k']:.0f} kernels per stage, {'replayed from a CUDA graph' if graph else 'launched eagerly'} "
        + (
            f"({Tc:,.0f} tokens {'<=' if graph else '>'} the engine's capture size {sm.graph_max_tokens:,.0f}); "
            if sm.graph_prefill or S >= T
            else "(prompt tokens in an engine whose CUDA graphs cover decode iterations only); "
        )
        + "per sequence: scheduler bookkeeping and sampling its logits over the vocabulary"
        + (", and a hybrid's state-space state read and rewritten" if K["m_s"] else ""),
    )


def _record_time(
    sm: StepModel,
    tr: Trace,
    key: str,
    what: str,
    K: dict[str, Any],
    T,
    A,
    R,
    W_r: float,
    time: float,
    busy: float,
    x: float,
    fixed: float,
    bound: str,
    *,
    compact: bool,
    final_label: str | None,
    final_symbol: str,
    final_key: str | None,
    note: str,
) -> None:
    """Records the iteration time: the whole formula in one expression (``compact``), else the stages in turn,
    the hops and the fixed costs, its note starting with the bound."""
    if compact:
        tr.step(
            f"{key}_s",
            final_label or f"{what}: iteration time",
            final_symbol,
            exprs(sm)["full"],
            time,
            unit="s",
            latex=r"t_{iter}([T], [A], [R])",
            units=_U_ITER,
            T=T,
            A=A,
            R=R,
            W_r=W_r,
            **K,
            note=note or "the same iteration formula as above, with these T, A and R",
        )
    elif tr.enabled:
        tr.step(
            final_key or f"{key}_s",
            final_label or f"{what}: iteration time",
            final_symbol,
            EXPR_TIME,
            time,
            unit="s",
            latex=r"[pp] \left([t_b] + [t_x]\right) + ([pp] - 1)([a_h] + [b_h] \cdot [T]) + [t_o]",
            units=_U_ITER,
            pp=sm.pp,
            t_b=busy,
            t_x=x,
            a_h=K["a_h"],
            b_h=K["b_h"],
            T=T,
            t_o=fixed,
            note=f"bound: {bound}; " + (note or "stages run in turn, plus stage hops and the fixed costs"),
        )
