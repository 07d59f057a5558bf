"""One training layout timed, sized and recorded: the derivation the Training and Show-the-math pages show.

:func:`evaluate_layout` evaluates the layout model (:func:`core.training.layout.layout_grid`) at one layout and
records each quantity of the grid as a derivation step (expression, inputs, value) read from that evaluation;
:func:`layout_memory` is the traced training memory of the layout (the one body
:func:`core.physics.training_memory_parts`); :func:`training_math` chains both with goodput.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.base import HOUR_S, Step, Trace, sig
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import (
    ACT_BYTES,
    TrainingMemory,
    gemm_k0,
    lora_params,
    training_gemm_parts,
    training_memory_for,
)
from core.training.flops import Work, attention_pairs_per_token, work
from core.training.layout import (
    Layout,
    LayoutContext,
    LayoutResult,
    bubble_fraction,
    config_layout,
    layout_context,
    layout_grid,
    result_at,
)
from core.training.reliability import goodput

__all__ = ["evaluate_layout", "layout_memory", "training_math"]


def evaluate_layout(dep: Deployment | RabitConfig, lay: Layout, tr: Trace | None = None) -> LayoutResult:
    """Time and size one layout exactly as given (no batch tolerance), recording the derivation on ``tr``."""
    tr = tr if tr is not None else Trace()
    c = layout_context(dep)
    cfg, m, a = c.cfg, c.m, c.cfg.assumptions
    r = layout_grid(
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
        cp=lay.cp,
    )
    res = result_at(c, lay, r, (0, 0, 0, 0, 0))
    if not tr.enabled:
        return res
    x = {k: (float(np.ravel(v)[0]) if np.ndim(v) else float(v)) for k, v in r.items()}
    tp, pp, dp, ep, b, v, cp = lay.tp, lay.pp, lay.dp, lay.ep, lay.micro_batch, lay.vpp, lay.cp
    s = c.seq
    wk = work(c.dep)
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
    A_t = _attention_pairs_step(tr, c)
    F_m = _model_flop_step(tr, c, wk, N, A_t)
    F_hw = _hardware_flop_step(tr, c, lay, x["hw"], F_m, N, A_t)
    tr.step(
        "total_model_flop", "Model FLOPs of the run", "F", "F_m * T", F_m * c.tokens, unit="FLOP", F_m=F_m, T=c.tokens
    )
    peak = tr.step(
        "peak_eff_flop_per_s",
        "Sustained compute per GPU",
        "R",
        "pi_flops * x_p * mfu * f_clk",
        c.peak_eff,
        unit="FLOP/s",
        pi_flops=c.peak_bf16,
        x_p=c.speedup,
        mfu=a.mfu_train,
        f_clk=c.g.dense_clock_share("fp8" if c.speedup > 1.0 else "bf16"),
        note=f"BF16 dense peak x {cfg.train_precision.upper()} speed-up x the MFU "
        "ceiling (assumptions fp8_speedup, mfu_train) x the share of the peak's clock the part holds under dense "
        "matrix work (catalog; 1 where the vendor publishes none)",
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
    eta_k, g = _gemm_shape_step(tr, c, lay, x)
    p_e = x["p_e"]
    cpk: dict[str, Any] = {"cp": cp} if cp > 1 else {}
    shape = " * (1 + g * (1 / eta_K - 1))"
    t_mb = tr.step(
        "t_mb",
        "One micro-batch on one stage (compute)",
        "t_{mb}",
        (
            "F_hw * b * s / (tp * p_e * cp) / (R * eta_T) * q"
            if cp > 1
            else "F_hw * b * s / (tp * p_e) / (R * eta_T) * q"
        )
        + shape,
        x["t_mb"],
        unit="s",
        F_hw=F_hw,
        b=b,
        s=s,
        tp=tp,
        p_e=p_e,
        **cpk,
        R=peak,
        eta_T=eta,
        q=c.q_slow,
        g=g,
        eta_K=eta_k,
        note=f"PP {pp} puts {x['L_s']:.0f} of {m.num_layers} layers on the heaviest stage"
        + (f"; each of the {cp} CP ranks runs s / cp of the tokens" if cp > 1 else "")
        + (f"; QLoRA dequantisation x{sig(c.q_slow, 6)}" if c.q_slow != 1 else ""),
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
            note=f"{sig(b * s / cp * m.hidden_size * ACT_BYTES / 1e6)} MB over TP {tp} inside "
            "the node (alpha-beta, core.physics.collectives)"
            + (f"; the {cp} CP ranks each all-reduce their own s / cp tokens" if cp > 1 else ""),
        )
        vals["t_tp"] = tr.step(
            "t_tp",
            "TP communication per micro-batch",
            "t_{tp}",
            "n_c * L_s * t_ar - min(o_tp * n_c * L_s * t_ar, g / eta_K / (1 + g * (1 / eta_K - 1)) * t_mb)",
            x["t_tp"],
            unit="s",
            n_c=x["n_coll"],
            L_s=x["L_s"],
            t_ar=t_ar,
            o_tp=c.tp_hidden,
            g=g,
            eta_K=eta_k,
            t_mb=t_mb,
            note="2 forward + 2 backward per layer (+2 with full recomputation)"
            + (
                f"; TP communication overlap hides a share o_tp (tp_overlap_train) behind the GEMMs, {sig(100 * x['g_t'])} % "
                "of the micro-batch's time"
                if c.tp_hidden
                else "; no TP communication overlap: all exposed"
            ),
        )
        parts.append("t_tp")
    if cp > 1:
        t_kv = tr.step(
            "t_kv_cp",
            "One KV block to the next CP rank (one layer)",
            "t_{kv}",
            "t_kv",
            x["t_kv"],
            unit="s",
            t_kv=x["t_kv"],
            note=f"b x s / cp = {b * s // cp:,} tokens of K and V on one TP rank, point to point "
            + ("over the inter-node fabric" if tp * cp > c.coll.domain else "over the scale-up fabric"),
        )
        t_at = tr.step(
            "t_att_cp",
            "Forward attention of one block (one layer)",
            "t_{att}",
            "t_att",
            x["t_att"],
            unit="s",
            t_att=x["t_att"],
            note="4 d_qk / tp per pair over the block's b P_l / cp^2 causal pairs at the sustained rate",
        )
        vals["t_cp"] = tr.step(
            "t_cp",
            "Context-parallel KV ring per micro-batch (exposed)",
            "t_{cp}",
            "L_a * (cp - 1) * (max(0, t_kv - t_att) * f_r + max(0, 2 * t_kv - 2.5 * t_att))",
            x["t_cp"],
            unit="s",
            L_a=x["L_s"] * m.attention_layers / m.num_layers,
            cp=cp,
            t_kv=t_kv,
            t_att=t_at,
            f_r=2.0 if lay.recompute == "full" else 1.0,
            note="Megatron-LM context parallelism: cp - 1 sends of a KV block per layer, each hidden behind one "
            "block's attention as far as the fabric allows; the backward sends K, V and their gradients behind "
            "2.5x the forward attention (f_r = 2 when full recomputation reruns the forward)",
        )
        parts.append("t_cp")
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
    dpx = _dp_exposed_step(tr, c, lay, x, mm, t_mb)
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


def _gemm_shape_step(tr: Trace, c: LayoutContext, lay: Layout, x: dict[str, float]) -> tuple[float, float]:
    """The weight GEMMs' share ``g`` of the hardware FLOPs and their short-reduction rate ``eta_K``
    (:func:`core.physics.training_gemm_eff`), recorded; ``eta_K`` = 1 where no GEMM reduces over fewer than ``h``."""
    m, tp, ep = c.m, lay.tp, lay.ep
    h = m.hidden_size
    g = tr.step(
        "gemm_flop_share",
        "Weight GEMMs' share of the hardware FLOPs",
        "g",
        "1 - F_att / F_hw",
        x["gemm"],
        unit="frac",
        F_att=(1.0 - x["gemm"]) * x["hw"],
        F_hw=x["hw"],
        note="the attention core (Q K^T and the scores times V) is not a weight GEMM and runs at the ceiling",
    )
    k0 = gemm_k0(c.dep, c.precision)
    parts = training_gemm_parts(c.dep, tp, ep)
    total = sum(f for f, _, _ in parts)
    fwd = sorted({round(kf) for f, kf, _ in parts if kf < h and f > 0})
    dgrad = sorted({round(kd) for f, _, kd in parts if kd < h and f > 0})
    depths = "; ".join(
        f"{w} {', '.join(f'{k:,}' for k in ks)}" for w, ks in (("forward", fwd), ("data gradient", dgrad)) if ks
    )
    eta_k = tr.step(
        "train_gemm_eff",
        "Weight GEMMs' rate against the ceiling (short reductions)",
        r"\eta_K",
        "eta_K",
        x["eta_k"],
        unit="frac",
        units={"eta_K": "frac"},
        eta_K=x["eta_k"],
        note=f"1 / sum_i s_i / min(1, eff(K_i) / eff(h)), eff(K) = K / (K + K0), K0 = {k0:,.0f} (gemm_k0_ridge x "
        f"{c.g.name}'s {c.precision.upper()} ridge point), h = {h:,}; per weight: forward"
        + (" twice (full recomputation)" if lay.recompute == "full" else "")
        + ", data gradient (dX = dY W^T), and "
        + (
            "no weight gradient (frozen LoRA base)"
            if c.cfg.lora_rank
            else "weight gradient over the tokens (full rate)"
        )
        + f"; depths below h at TP {tp}"
        + (f", EP {ep}" if ep > 1 else "")
        + f": {depths or 'none'}; {total / 1e9:,.2f}e9 weights per token; core.physics.gemm_shape",
    )
    return eta_k, g


def _attention_pairs_step(tr: Trace, c: LayoutContext) -> float:
    """The attended (query, key) pairs per token over all layers at the sequence length, causal (a sliding-window
    layer sees at most its window)."""
    m, s = c.m, c.seq
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
    return A_t


def _model_flop_step(tr: Trace, c: LayoutContext, wk: Work, N: float, A_t: float) -> float:
    """The model FLOPs per token: 6N plus causal attention forward and backward; with LoRA, the frozen base's
    forward and activation-gradient backward plus the adapters' weights' six."""
    cfg, m, a = c.cfg, c.m, c.cfg.assumptions
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
    return F_m


def _hardware_flop_step(tr: Trace, c: LayoutContext, lay: Layout, hw: float, F_m: float, N: float, A_t: float) -> float:
    """The hardware FLOPs per token: the model's plus what recomputation (selective: the attention core; full: the
    whole forward) and a fused attention kernel's backward compute again."""
    cfg, m = c.cfg, c.m
    dqk = m.attn_qk_dim
    fused = cfg.attention_kernel == "flash"
    fk = " + 2 * d_qk * A_t" if fused else ""  # a fused kernel's backward rebuilds Q K^T (FlashAttention-2 sec. 3.1.2)
    fk_note = "; the fused kernel's backward computes Q K^T again (2 d_qk per pair)" if fused else ""
    if lay.recompute == "selective":
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m + 4 * d_qk * A_t" + fk,
            hw,
            unit="FLOP",
            F_m=F_m,
            d_qk=dqk,
            A_t=A_t,
            note="selective recomputation reruns the attention core (Megatron-LM core_attn; Korthikanti et al. "
            "sec. 5)" + fk_note,
        )
    elif lay.recompute == "full":
        n_l = 2 * lora_params(m, cfg.lora_rank) if cfg.lora_rank else 0.0
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m + 2 * N + N_a + 4 * d_qk * A_t" + fk,
            hw,
            unit="FLOP",
            F_m=F_m,
            N=N,
            N_a=n_l,
            d_qk=dqk,
            A_t=A_t,
            note="full recomputation reruns the whole forward before the backward" + fk_note,
        )
    elif fused:
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m + 2 * d_qk * A_t",
            hw,
            unit="FLOP",
            F_m=F_m,
            d_qk=dqk,
            A_t=A_t,
            note="no recomputation" + fk_note,
        )
    else:
        F_hw = tr.step(
            "hw_flop_per_token",
            "Hardware FLOPs per token",
            "F_hw",
            "F_m",
            hw,
            unit="FLOP",
            F_m=F_m,
            note="no recomputation; the eager softmax keeps its scores for the backward",
        )
    return F_hw


def _dp_exposed_step(tr: Trace, c: LayoutContext, lay: Layout, x: dict[str, float], mm: float, t_mb: float) -> float:
    """The data-parallel gradient traffic per step and what of it the backward does not hide: the all-reduce (DDP)
    or ZeRO's reduce-scatter and all-gather per its stage; none at DP 1."""
    a, dp = c.cfg.assumptions, lay.dp
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
    return dpx


def layout_memory(
    dep: Deployment | RabitConfig, lay: Layout, micro_batches: int, tr: Trace | None = None
) -> TrainingMemory:
    """Training memory per GPU of one layout, its steps recorded (the traced view of the one body)."""
    return training_memory_for(
        dep,
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
        cp=lay.cp,
    )


def training_math(dep: Deployment | RabitConfig) -> tuple[Step, ...]:
    """The traced chain for the config's own layout: memory, work, step time, runtime, GPU-hours, goodput."""
    dep = as_deployment(dep)
    lay = config_layout(dep)
    tr = Trace()
    res = evaluate_layout(dep, lay, tr)
    mem = layout_memory(dep, lay, res.micro_batches)
    goodput(res.runtime_s, lay.gpus, dep.assumptions, tr=tr)
    return mem.steps + tr.frozen()
