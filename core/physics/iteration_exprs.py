"""The recorded expressions of one scheduler iteration and the step model's constants they name
(:func:`core.physics.iteration_parts.iteration` records them).

In the symbols of :func:`consts`::

    F   = f_t T + f_a A (+ f_l T)                                            FLOPs per GPU
    t_c = (f_t - f_e) T / (pi mfu eta_d T/(T + T0)) + f_e T / (pi mfu eta_e t_e/(t_e + T0)) + f_a A / (pi_a mfu)
          (+ f_l T / (pi mfu eta_l))
    Y   = g_w W_r + (g_r R + T) k_g + T r_b,   Y_l = D w_l + T a_l           bytes per GPU
    t_m = Y / (pi_bw eta_bw) (+ Y_l / (pi_bw eta_bw eta_l))
    t_x = (n_ar min(a_r + b_r T, a_t + b_t T, a_o + b_o T [T < T_o]) + n_a2a (a_e + b_e T)) x_c
    t_ca = f_a A / (pi_a mfu), t_ma = g_r R k_g / (pi_bw eta_bw)              attention's compute and K/V reads
    t_b = max(t_c - t_ca, t_m - t_ma) + max(t_ca, t_ma)                       GEMMs and attention, each at its roofline
    t_o = t_s + pp n_k t_k + S (t_q + (V y_v + 2 m_s) / (pi_bw eta_bw))
    t   = pp (t_b + t_x) + (pp - 1)(a_h + b_h T) + t_o

``pi_a`` is attention's own peak, at the KV cache's precision (``pi_att``, recorded where it differs from the
GEMMs' ``pi_flops``: an FP8-weights deployment with a BF16 cache).

With attention parallelism or a host KV tier (:func:`core.physics.attention_split.split_parts`) the stage's terms
are on one rank's share ``T_c = T / cp``, ``A_c = A / cp``, ``R_c = R / cp``, with the ring, the DCP exchange and the
host link added. A test re-evaluates every recorded expression against its value, so the derivation cannot drift
from the body.
"""

from __future__ import annotations

import re

from core.physics.step import StepModel

__all__ = ["consts", "exprs", "launch_per_kernel_s", "lora_consts", "rows_per_expert"]

UNITS = {
    "T": "tokens",
    "A": "pairs",
    "R": "tokens",
    "f_t": "FLOP",
    "f_a": "FLOP",
    "pi_flops": "FLOP/s",
    "pi_att": "FLOP/s",
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
    "a_o": "s",
    "b_o": "s",
    "T_o": "tokens",
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
    "t_ca": "s",
    "t_ma": "s",
    "t_b": "s",
    "t_m": "s",
    "t_x": "s",
    "F": "FLOP",
    "Y": "B",
    "f_e": "FLOP",
    "eta_e": "frac",
    "eta_d": "frac",
    "t_e": "tokens",
    "r_b": "B",
    "g_r": "x",
    "g_w": "x",
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
    "f_l": "FLOP",
    "w_l": "B",
    "a_l": "B",
    "eta_l": "frac",
    "D": "",
    "Y_l": "B",
}

EXPR_FLOP = "f_t * T + f_a * A"
EXPR_COMPUTE = (
    "(f_t - f_e) * T / (pi_flops * mfu * eta_d * T / (T + T0)) + f_e * T / (pi_flops * mfu * eta_e * t_e / (t_e + T0))"
    " + f_a * A / (pi_flops * mfu)"
)
EXPR_BYTES = "g_w * W_r + (g_r * R + T) * k_g + T * r_b"
EXPR_MEMORY = "Y / (pi_bw * eta_bw)"
EXPR_COMM = (
    "(n_ar * min(a_r + b_r * T, a_t + b_t * T, a_o + b_o * T if T < T_o else a_r + b_r * T) + n_a2a * (a_e + b_e * T))"
    " * x_c"
)
EXPR_FIXED = "t_s + pp * n_k * t_k + S * (t_q + (V * y_v + 2 * m_s) / (pi_bw * eta_bw))"
EXPR_ATT_COMPUTE = "f_a * A / (pi_flops * mfu)"
EXPR_ATT_MEMORY = "g_r * R * k_g / (pi_bw * eta_bw)"
EXPR_BUSY = "max(t_c - t_ca, t_m - t_ma) + max(t_ca, t_ma)"
EXPR_TIME = "pp * (t_b + t_x) + (pp - 1) * (a_h + b_h * T) + t_o"
#: With adapters (core.physics.adapters): their GEMMs, and each distinct adapter's weights and the activations
#: their kernels move, at the step's efficiencies times eta_l (on the GEMMs' side of t_b).
EXPR_FLOP_LORA = "f_t * T + f_a * A + f_l * T"
EXPR_COMPUTE_LORA = EXPR_COMPUTE + " + f_l * T / (pi_flops * mfu * eta_l)"
EXPR_LORA_BYTES = "D * w_l + T * a_l"
EXPR_MEMORY_LORA = "Y / (pi_bw * eta_bw) + Y_l / (pi_bw * eta_bw * eta_l)"
#: Attention parallelism's terms (:meth:`core.physics.step.StepModel.stage_parts`, its split path), on one rank's
#: share T_c = T / cp, A_c = A / cp, R_c = R / cp.
EXPR_RING = (
    "L_a * (cp - 1) * max(0, a_cp + b_cp * min(k_l * (T_c + R_c), q_l * T_c) - f_a / L_a * A_c / cp / (pi_flops * mfu))"
)
EXPR_DCP = "min(2 * (a_d + b_d * T_c), a_d + b_dk * (T_c + R_c)) * L_a * x_c"
EXPR_HOST = "max(0, R_c + T_c - N_h) * k_g / bw_h"


def _inline(expr: str, **parts: str) -> str:
    """``expr`` with each named intermediate replaced by its own expression, in parentheses."""
    for name, sub in parts.items():
        expr = re.sub(rf"\b{name}\b", f"({sub})", expr)
    return expr


def exprs(sm: StepModel) -> dict[str, str]:
    """The recorded expressions of an iteration of ``sm`` (``F``, ``t_c``, ``Y``, ``t_m``, ``t_x``, ``t_ca``,
    ``t_ma``, with adapters ``Y_l``), and ``full``, the whole iteration in one expression (the compact record): the
    plain ones, or on one rank's share with the ring, the DCP exchange and the host link added."""
    lora = bool(sm.lora_bytes_per_adapter)
    out = {
        "F": EXPR_FLOP_LORA if lora else EXPR_FLOP,
        "t_c": EXPR_COMPUTE_LORA if lora else EXPR_COMPUTE,
        "Y": EXPR_BYTES,
        "t_m": EXPR_MEMORY_LORA if lora else EXPR_MEMORY,
        "t_x": EXPR_COMM,
        "t_ca": EXPR_ATT_COMPUTE,
        "t_ma": EXPR_ATT_MEMORY,
        **({"Y_l": EXPR_LORA_BYTES} if lora else {}),
    }
    if _own_attention_peak(sm):  # attention at its own precision's peak, not the GEMMs'
        out["t_c"] = out["t_c"].replace("f_a * A / (pi_flops * mfu)", "f_a * A / (pi_att * mfu)")
        out["t_ca"] = out["t_ca"].replace("pi_flops", "pi_att")
    split = sm.attention_split
    if split:
        share = {"T": "T_c", "A": "A_c", "R": "R_c"}
        out = {
            k: _inline(v, **share).replace("(T_c)", "T_c").replace("(A_c)", "A_c").replace("(R_c)", "R_c")
            for k, v in out.items()
        }
        if sm.cp > 1:
            ring = EXPR_RING.replace("pi_flops", "pi_att") if _own_attention_peak(sm) else EXPR_RING
            out["t_x"] = f"{out['t_x']} + {ring}"
        if sm.dcp > 1:
            out["t_x"] = f"{out['t_x']} + {EXPR_DCP}"
        if sm.host_tier:
            out["t_m"] = f"max({out['t_m']}, {EXPR_HOST})"
    t_m = _inline(out["t_m"], Y=out["Y"], **({"Y_l": out["Y_l"]} if lora else {}))
    busy = _inline(EXPR_BUSY, t_c=out["t_c"], t_m=t_m, t_ca=out["t_ca"], t_ma=out["t_ma"])
    full = _inline(EXPR_TIME, t_b=busy, t_x=out["t_x"], t_o=EXPR_FIXED)
    if split and sm.cp > 1:
        full = _inline(full, T_c="T / cp", A_c="A / cp", R_c="R / cp")
    elif split:
        full = full.replace("T_c", "T").replace("A_c", "A").replace("R_c", "R")
    return {**out, "full": full}


def _own_attention_peak(sm: StepModel) -> bool:
    """Attention's ceiling differs from the GEMMs' (another precision)."""
    return bool(sm.attn_peak_flop_per_s != sm.peak_flop_per_s)


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
        eta_e=sm.expert_gemm_eff,
        eta_d=sm.dense_gemm_eff,
        r_b=sm.route_bytes_per_token,
        g_r=sm.kv_read_factor,
        g_w=sm.weight_read_factor,
        f_a=sm.attn_flop_per_pair,
        mfu=sm.mfu_max,
        pi_flops=sm.peak_flop_per_s / sm.mfu_max,  # pi x mfu: the ceiling the body divides by
        **({"pi_att": sm.attn_peak_flop_per_s / sm.mfu_max} if _own_attention_peak(sm) else {}),
        T0=sm.ramp_tokens,
        k_g=sm.kv_bytes_per_token,
        pi_bw=sm.hbm_bw_bytes_per_s,
        eta_bw=sm.mbu,
        n_ar=sm.ar_per_iter,
        a_r=sm.tp_ar_alpha_ring,
        b_r=sm.tp_ar_beta_ring,
        a_t=sm.tp_ar_alpha_tree,
        b_t=sm.tp_ar_beta_tree,
        a_o=sm.tp_ar_alpha_one,
        b_o=sm.tp_ar_beta_one,
        T_o=sm.tp_ar_one_max_tokens,
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


def launch_per_kernel_s(sm: StepModel, T: float, S: float | None = None) -> float:
    """The launch cost of one kernel in an iteration of ``T`` tokens and ``S`` sequences: a graph replay or an
    eager launch [s] (:meth:`core.physics.step.StepModel.launch_s`)."""
    if not sm.graph_prefill and S is not None and S < T:
        return sm.eager_launch_s
    return sm.graph_launch_s if T <= sm.graph_max_tokens else sm.eager_launch_s


def rows_per_expert(sm: StepModel, T: float) -> float:
    """Rows each touched routed expert's GEMM sees in an iteration of ``T`` tokens: T k / E_T (T for dense)."""
    m = sm.model
    if not m.is_moe or T <= 0:
        return float(T) if T > 0 else 1.0
    return T * m.experts_per_tok / (m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** T))
