"""One scheduler iteration taken apart: its FLOPs, bytes and the parts of its time, recorded as it is computed.

:func:`iteration` evaluates the step model's one body (:meth:`core.physics.step.StepModel.stage_parts`,
``iteration_s``) for one iteration of ``T`` new tokens, ``A`` attended (query, key) pairs, ``R`` cached tokens and
``S`` sequences, and, given a :class:`core.base.Trace`, records each part where it computes it, in the symbols
of :func:`consts`::

    F   = f_t T + f_a A                                                      FLOPs per GPU
    t_c = (f_t - f_e) T / (pi mfu T/(T + T0)) + f_e T / (pi mfu t_e/(t_e + T0)) + f_a A / (pi mfu)
    Y   = W_r + (g_r R + T) k_g + T r_b                                      bytes per GPU
    t_m = Y / (pi_bw eta_bw)
    t_x = (n_ar min(a_r + b_r T, a_t + b_t T) + n_a2a (a_e + b_e T)) x_c
    t_o = t_s + pp n_k t_k + S (t_q + (V y_v + 2 m_s) / (pi_bw eta_bw))
    t   = pp (max(t_c, t_m) + t_x) + (pp - 1)(a_h + b_h T) + t_o

A test re-evaluates every recorded expression against its value, so the derivation cannot drift from the body.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Trace, sig
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
    bytes: float  # per GPU of one stage: weights read + KV read + KV written
    compute_s: float  # one stage
    memory_s: float  # one stage
    comm_s: float  # one stage, exposed
    hops_s: float  # all pp - 1 stage hops
    overhead_s: float  # fixed costs of the iteration: scheduler step + pp x launches + per-sequence work
    time_s: float  # pp (max(compute, memory) + comm) + hops + overhead
    pp: int
    bound: str
    seqs: float = 0.0  # S: sequences scheduled and sampled
    launch_s: float = 0.0  # kernel launches of one stage
    # multi-LoRA serving: distinct adapters read (D), their bytes and FLOPs (in ``bytes`` and ``flop``)
    adapters: float = 0.0
    adapter_bytes: float = 0.0
    adapter_flop: float = 0.0

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes if self.bytes else math.inf


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
    "t_s": "s",
    "n_k": "",
    "t_k": "s",
    "S": "",
    "t_q": "s",
    "V": "",
    "y_v": "B",
    "m_s": "B",
    "t_c": "s",
    "t_m": "s",
    "t_x": "s",
    "F": "FLOP",
    "Y": "B",
    "f_e": "FLOP",
    "t_e": "tokens",
    "r_b": "B",
    "g_r": "x",
    "T_c": "tokens",
    "A_c": "pairs",
    "R_c": "tokens",
    "cp": "",
    "L_a": "",
    "a_cp": "s",
    "b_cp": "s",
    "k_l": "B",
    "q_l": "B",
    "a_d": "s",
    "b_d": "s",
    "b_dk": "s",
    "N_h": "tokens",
    "bw_h": "B/s",
}

#: The recorded expressions of one iteration, in the symbols of :func:`consts` (each re-evaluated by a test).
EXPR_FLOP = "f_t * T + f_a * A"
EXPR_COMPUTE = (
    "(f_t - f_e) * T / (pi_flops * mfu * T / (T + T0)) + f_e * T / (pi_flops * mfu * t_e / (t_e + T0))"
    " + f_a * A / (pi_flops * mfu)"
)
EXPR_BYTES = "W_r + (g_r * R + T) * k_g + T * r_b"
EXPR_MEMORY = "Y / (pi_bw * eta_bw)"
EXPR_COMM = "(n_ar * min(a_r + b_r * T, a_t + b_t * T) + n_a2a * (a_e + b_e * T)) * x_c"
EXPR_FIXED = "t_s + pp * n_k * t_k + S * (t_q + (V * y_v + 2 * m_s) / (pi_bw * eta_bw))"
EXPR_TIME = "pp * (max(t_c, t_m) + t_x) + (pp - 1) * (a_h + b_h * T) + t_o"
#: With adapters (core.physics.adapters): their GEMMs, and each distinct adapter's weights and the activations
#: their kernels move, at the step's efficiencies times eta_l.
EXPR_FLOP_LORA = "f_t * T + f_a * A + f_l * T"
EXPR_COMPUTE_LORA = EXPR_COMPUTE + " + f_l * T / (pi_flops * mfu * eta_l)"
EXPR_LORA_BYTES = "D * w_l + T * a_l"
EXPR_MEMORY_LORA = "Y / (pi_bw * eta_bw) + Y_l / (pi_bw * eta_bw * eta_l)"


def _inline(expr: str, **parts: str) -> str:
    """``expr`` with each named intermediate replaced by its own expression, in parentheses."""
    for name, sub in parts.items():
        expr = re.sub(rf"\b{name}\b", f"({sub})", expr)
    return expr


#: The whole iteration in one expression (the compact record), built from the parts above.
_FULL_ITER = _inline(
    EXPR_TIME,
    t_c=_inline(EXPR_COMPUTE, F=EXPR_FLOP),
    t_m=_inline(EXPR_MEMORY, Y=EXPR_BYTES),
    t_x=EXPR_COMM,
    t_o=EXPR_FIXED,
)
#: Attention parallelism's terms (:meth:`core.physics.step.StepModel.stage_parts`, its split path), on one rank's
#: share T_c = T / cp, A_c = A / cp, R_c = R / cp.
EXPR_RING = (
    "L_a * (cp - 1) * max(0, a_cp + b_cp * min(k_l * (T_c + R_c), q_l * T_c) - f_a / L_a * A_c / cp / (pi_flops * mfu))"
)
EXPR_DCP = "min(2 * (a_d + b_d * T_c), a_d + b_dk * (T_c + R_c)) * L_a * x_c"
EXPR_HOST = "max(0, R_c + T_c - N_h) * k_g / bw_h"


def _exprs(sm: StepModel) -> dict[str, str]:
    """The recorded expressions of an iteration of ``sm``: the plain ones, or on one rank's share with the ring, the
    DCP exchange and the host link added (attention parallelism and the host KV tier)."""
    plain = {"F": EXPR_FLOP, "t_c": EXPR_COMPUTE, "Y": EXPR_BYTES, "t_m": EXPR_MEMORY, "t_x": EXPR_COMM}
    if not sm.attention_split:
        return {**plain, "full": _FULL_ITER}
    share = {"T": "T_c", "A": "A_c", "R": "R_c"}
    out = {
        k: _inline(v, **share).replace("(T_c)", "T_c").replace("(A_c)", "A_c").replace("(R_c)", "R_c")
        for k, v in plain.items()
    }
    if sm.cp > 1:
        out["t_x"] = f"{out['t_x']} + {EXPR_RING}"
    if sm.dcp > 1:
        out["t_x"] = f"{out['t_x']} + {EXPR_DCP}"
    if sm.host_tier:
        out["t_m"] = f"max({out['t_m']}, {EXPR_HOST})"
    t_c, t_m = _inline(out["t_c"], F=out["F"]), _inline(out["t_m"], Y=out["Y"])
    full = _inline(EXPR_TIME, t_c=t_c, t_m=t_m, t_x=out["t_x"], t_o=EXPR_FIXED)
    if sm.cp > 1:
        full = _inline(full, T_c="T / cp", A_c="A / cp", R_c="R / cp")
    else:
        full = full.replace("T_c", "T").replace("A_c", "A").replace("R_c", "R")
    return {**out, "full": full}


#: The whole iteration with adapters in one expression.
_FULL_ITER_LORA = _inline(
    EXPR_TIME,
    t_c=EXPR_COMPUTE_LORA,
    t_m=_inline(EXPR_MEMORY_LORA, Y=EXPR_BYTES, Y_l=EXPR_LORA_BYTES),
    t_x=EXPR_COMM,
    t_o=EXPR_FIXED,
)
_U_ITER.update({"f_l": "FLOP", "w_l": "B", "a_l": "B", "eta_l": "frac", "D": "", "Y_l": "B"})


def lora_consts(sm: StepModel) -> dict[str, float]:
    """The step model's adapter constants as named inputs (empty without adapters)."""
    if not sm.lora_bytes_per_adapter:
        return {}
    return dict(
        f_l=sm.lora_flop_per_token, w_l=sm.lora_bytes_per_adapter, a_l=sm.lora_act_bytes_per_token, eta_l=sm.lora_eff
    )


def consts(sm: StepModel) -> dict[str, float]:
    """The StepModel constants as the named inputs of the recorded expressions."""
    return dict(
        f_t=sm.flop_per_token,
        f_e=sm.expert_flop_per_token,
        r_b=sm.route_bytes_per_token,
        g_r=sm.kv_read_factor,
        f_a=sm.attn_flop_per_pair,
        mfu=sm.mfu_max,
        pi_flops=sm.peak_flop_per_s / sm.mfu_max,  # pi x mfu: the ceiling the body divides by
        T0=sm.ramp_tokens,
        k_g=sm.kv_bytes_per_token,
        pi_bw=sm.hbm_bw_bytes_per_s,
        eta_bw=sm.mbu,
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
        t_s=sm.overhead_s,
        n_k=sm.kernels_per_stage,
        t_q=sm.seq_overhead_s,
        V=sm.model.vocab_size,
        y_v=sm.sample_bytes_per_vocab,
        m_s=sm.state_bytes_per_seq,
        **_split_consts(sm),
    )


def _split_consts(sm: StepModel) -> dict[str, float]:
    """The constants of the attention-parallel terms an iteration of ``sm`` records (none without them)."""
    out: dict[str, float] = {}
    if sm.cp > 1 or sm.dcp > 1:
        out["L_a"] = sm.attn_layers_stage
    if sm.cp > 1:
        out.update(
            cp=sm.cp,
            a_cp=sm.cp_alpha_s,
            b_cp=sm.cp_beta_s_per_byte,
            k_l=sm.cp_kv_bytes_per_token_layer,
            q_l=sm.cp_q_bytes_per_token_layer,
        )
    if sm.dcp > 1:
        out.update(a_d=sm.dcp_alpha_s, b_d=sm.dcp_beta_s, b_dk=sm.dcp_kv_beta_s)
    if sm.host_tier:
        out.update(N_h=sm.hbm_kv_tokens, bw_h=sm.host_bw_bytes_per_s)
    return out


def launch_per_kernel_s(sm: StepModel, T: float) -> float:
    """The launch cost of one kernel in an iteration of ``T`` tokens: a graph replay or an eager launch [s]."""
    return sm.graph_launch_s if T <= sm.graph_max_tokens else sm.eager_launch_s


def rows_per_expert(sm: StepModel, T: float) -> float:
    """Rows each touched routed expert's GEMM sees in an iteration of ``T`` tokens: T k / E_T (T for dense)."""
    m = sm.model
    if not m.is_moe or T <= 0:
        return float(T) if T > 0 else 1.0
    return T * m.experts_per_tok / (m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T))


def _record_split(
    sm: StepModel,
    tr: Trace,
    key: str,
    what: str,
    T: float,
    A: float,
    R: float,
    Tc: float,
    Ac: float,
    Rc: float,
    W_r: float,
    K: dict[str, float],
    c: float,
    mm: float,
    x: float,
) -> None:
    """The parts of an iteration with attention parallelism or a host KV tier, on one rank's share (the split path
    of :meth:`core.physics.step.StepModel.stage_parts`)."""
    ex = _exprs(sm)
    share = {"T_c": Tc, "A_c": Ac, "R_c": Rc}
    if sm.cp > 1:
        for sym, full_v, v, name in (
            ("T_c", T, Tc, "tokens"),
            ("A_c", A, Ac, "pairs"),
            ("R_c", R, Rc, "cached tokens"),
        ):
            whole: dict[str, Any] = {sym[0]: full_v}
            tr.step(
                f"{key}_{sym.lower()}",
                f"{what}: {name} on one of the {sm.cp} CP ranks",
                sym,
                f"{sym[0]} / cp",
                v,
                unit=_U_ITER[sym],
                units=_U_ITER,
                **whole,
                cp=sm.cp,
                note="context parallelism splits the iteration's tokens, pairs and cached tokens over the ranks",
            )

    def pick(expr: str, **extra: float) -> dict[str, Any]:
        names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", expr))
        pool = {**K, **share, "W_r": W_r, **extra}
        return {n: pool[n] for n in names if n in pool}

    F = tr.step(
        f"{key}_flop",
        f"{what}: FLOPs per GPU",
        "F",
        ex["F"],
        sm.flop_per_token * Tc + sm.attn_flop_per_pair * Ac,
        unit="FLOP",
        units=_U_ITER,
        **pick(ex["F"]),
    )
    tr.step(
        f"{key}_compute_s",
        f"{what}: compute time",
        "t_c",
        ex["t_c"],
        c,
        unit="s",
        units=_U_ITER,
        **pick(ex["t_c"], F=F),
    )
    Y = W_r + (sm.kv_read_factor * Rc + Tc) * sm.kv_bytes_per_token + Tc * sm.route_bytes_per_token
    Y = tr.step(
        f"{key}_bytes", f"{what}: bytes moved per GPU", "Y", ex["Y"], Y, unit="B", units=_U_ITER, **pick(ex["Y"])
    )
    tr.step(
        f"{key}_memory_s",
        f"{what}: memory time",
        "t_m",
        ex["t_m"],
        mm,
        unit="s",
        units=_U_ITER,
        **pick(ex["t_m"], Y=Y),
        note="HBM" + (", and the host link's stream beside it for the KV beyond HBM" if sm.host_tier else ""),
    )
    tr.step(
        f"{key}_comm_s",
        f"{what}: exposed communication per stage",
        "t_x",
        ex["t_x"],
        x,
        unit="s",
        units=_U_ITER,
        **pick(ex["t_x"]),
        note="TP all-reduces and EP all-to-alls of the rank's tokens"
        + ("; the ring steps' sends not hidden behind their block's attention" if sm.cp > 1 else "")
        + ("; decode context parallelism's exchange per attention layer" if sm.dcp > 1 else ""),
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
    full = tr.enabled and not compact
    if tr.enabled:
        K = consts(sm)
        K["t_k"] = launch_per_kernel_s(sm, T) if T > 0 else 0.0
        K["t_e"] = rows_per_expert(sm, T)
        K["S"] = S
        if lora:
            K.update(lora, D=D)
    split = sm.attention_split
    cp = sm.cp if split else 1
    Tc, Ac, Rc = float(T) / cp, float(A) / cp, float(R) / cp  # one rank's share (all of it without CP)
    if tr.enabled and cp > 1:
        K["t_e"] = rows_per_expert(sm, Tc)
        K["t_k"] = launch_per_kernel_s(sm, Tc) if Tc > 0 else 0.0
    W_r = sm.weights_read_bytes(Tc)
    if full and split:
        _record_split(sm, tr, key, what, T, A, R, Tc, Ac, Rc, W_r, K, c, mm, x)
        full = False  # the plain records below are the split ones'
    if full and sm.expert_bytes_per_gpu_per_expert:
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
    flop = sm.flop_per_token * Tc + sm.attn_flop_per_pair * Ac
    if lora:
        flop = flop + sm.lora_flop_per_token * Tc
    if full:
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
            EXPR_COMPUTE_LORA if lora else EXPR_COMPUTE,
            c,
            unit="s",
            latex=r"\frac{([f_t] - [f_e]) \cdot [T]}{[pi_flops] \cdot [mfu] \cdot \frac{[T]}{[T] + [T0]}} + "
            r"\frac{[f_e] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot \frac{[t_e]}{[t_e] + [T0]}} + "
            r"\frac{[f_a] \cdot [A]}{[pi_flops] \cdot [mfu]}"
            + (r" + \frac{[f_l] \cdot [T]}{[pi_flops] \cdot [mfu] \cdot [eta_l]}" if lora else ""),
            units=_U_ITER,
            f_t=K["f_t"],
            f_e=K["f_e"],
            t_e=K["t_e"],
            T=T,
            f_a=K["f_a"],
            A=A,
            pi_flops=K["pi_flops"],
            mfu=K["mfu"],
            T0=K["T0"],
            **({"f_l": K["f_l"], "eta_l": K["eta_l"]} if lora else {}),
            note="the matmul efficiency ramps with tokens per iteration as T/(T+T0) (GEMM tiling; the RA-BIT spec, "
            "T0 = 64); attention runs at the ceiling on its own pairs"
            + (
                f"; routed experts (f_e) ramp on their own t_e = T k / E_T = {sig(K['t_e'])} rows each"
                if K["f_e"]
                else ""
            )
            + ("; the adapter GEMMs run at eta_l of it (assumption lora_kernel_eff)" if lora else ""),
        )
    nbytes = W_r + (sm.kv_read_factor * Rc + Tc) * sm.kv_bytes_per_token + Tc * sm.route_bytes_per_token
    lora_bytes = D * sm.lora_bytes_per_adapter + Tc * sm.lora_act_bytes_per_token if lora else 0.0
    if full:
        tr.step(
            f"{key}_bytes",
            f"{what}: bytes moved per GPU",
            "Y",
            EXPR_BYTES,
            nbytes,
            unit="B",
            latex=r"[W_r] + ([g_r] \cdot [R] + [T]) \cdot [k_g] + [T] \cdot [r_b]",
            units=_U_ITER,
            W_r=W_r,
            g_r=K["g_r"],
            R=R,
            T=T,
            k_g=K["k_g"],
            r_b=K["r_b"],
            note="weights read + KV read (R cached tokens) + KV written (T new tokens)"
            + (" + MoE permute / un-permute copies (r_b per token)" if K["r_b"] else ""),
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
            note="achieved HBM bandwidth = datasheet x MBU"
            + ("; the adapter kernels reach eta_l of it" if lora else ""),
        )
        tr.step(
            f"{key}_comm_s",
            f"{what}: exposed communication per stage",
            "t_x",
            EXPR_COMM,
            x,
            unit="s",
            latex=r"\left([n_ar] \min([a_r] + [b_r] \cdot [T],\ [a_t] + [b_t] \cdot [T]) + "
            r"[n_a2a] ([a_e] + [b_e] \cdot [T])\right) \cdot [x_c]",
            units=_U_ITER,
            n_ar=K["n_ar"],
            a_r=K["a_r"],
            b_r=K["b_r"],
            T=T,
            a_t=K["a_t"],
            b_t=K["b_t"],
            n_a2a=K["n_a2a"],
            a_e=K["a_e"],
            b_e=K["b_e"],
            x_c=K["x_c"],
            note="TP all-reduces of T x h x 2 B (2 per layer; the cheaper of ring and tree/NVLS) + EP "
            "all-to-alls, times the share not hidden behind compute",
        )
    fixed = sm.fixed_s(k, S)
    if tr.enabled and not compact:
        graph = T <= sm.graph_max_tokens
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
            f"({T:,.0f} tokens {'<=' if graph else '>'} the engine's capture size {sm.graph_max_tokens:,.0f}); "
            "per sequence: scheduler bookkeeping and sampling its logits over the vocabulary"
            + (", and a hybrid's state-space state read and rewritten" if K["m_s"] else ""),
        )
    hops = sm.hops_s(T)
    time = sm.iteration_s(float(T), float(A), float(R), S)
    vals = {"compute": c, "memory": mm, "communication": x}
    bound = max(vals, key=lambda n: vals[n])
    if compact and tr.enabled:
        tr.step(
            f"{key}_s",
            final_label or f"{what}: iteration time",
            final_symbol,
            _FULL_ITER_LORA if lora and not sm.attention_split else _exprs(sm)["full"],
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
            latex=r"[pp] \left(\max([t_c], [t_m]) + [t_x]\right) + ([pp] - 1)([a_h] + [b_h] \cdot [T]) + [t_o]",
            units=_U_ITER,
            pp=sm.pp,
            t_c=c,
            t_m=mm,
            t_x=x,
            a_h=K["a_h"],
            b_h=K["b_h"],
            T=T,
            t_o=fixed,
            note=f"bound: {bound}; " + (note or "stages run in turn, plus stage hops and the fixed costs"),
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
        adapters=D,
        adapter_bytes=lora_bytes,
        adapter_flop=sm.lora_flop_per_token * Tc if lora else 0.0,
    )
