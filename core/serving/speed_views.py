"""Chart data for the Speed and Show-the-math pages, built on :mod:`core.serving.speed`.

Batch sweeps, the decode curve over context, the roofline operating points, speculative decoding
against acceptance rate, collective costs per fabric and topology, and the textbook chain changed one
assumption at a time into ours. Every number comes from the step model (:class:`core.physics.StepModel`) and
the views in :mod:`core.serving.speed`; nothing here models anything new.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, fmt_time, sig
from core.config import COMPUTE_PRECISION, Deployment, RabitConfig, as_deployment
from core.physics import ACT_BYTES, Collectives, StepModel, kv_shard, serving_memory
from core.serving import acceptance
from core.serving.speculative_decoding import speculation
from core.serving.speed import decode_numbers, decode_times, prefill_numbers, replicas_of

#: The textbook example's efficiencies, used only to rebuild the textbook chain for comparison.
TEXTBOOK_MBU = 0.8
TEXTBOOK_MFU = 0.74


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class BatchPoint(_Frozen):
    batch: int
    ttft_s: float
    decode_step_s: float
    tokens_per_s: float
    tokens_per_s_per_user: float
    compute_s: float  # per stage, at the mean context
    memory_s: float
    comm_s: float
    bound: str
    fits: bool


class RooflinePoint(_Frozen):
    name: str
    intensity_flop_per_byte: float
    roof_flop_per_s: float  # F / max(t_compute, t_memory): on the model's roofline
    delivered_flop_per_s: float  # F x pp / iteration time: with communication and overhead
    bound: str


class Roofline(_Frozen):
    """Per-GPU roofline: datasheet and effective (with MFU, MBU) roofs and operating points."""

    peak_flop_per_s: float  # datasheet dense peak of the compute precision
    ceiling_flop_per_s: float  # effective peak x mfu_max (FP8/FP4 at the named speed-ups)
    bw_bytes_per_s: float
    bw_eff_bytes_per_s: float
    ridge_flop_per_byte: float  # datasheet
    ridge_eff_flop_per_byte: float
    points: tuple[RooflinePoint, ...]


class GapRow(_Frozen):
    """One change from the textbook chain towards ours; value is cumulative."""

    label: str
    value_s: float
    delta_s: float
    note: str


class TextbookComparison(_Frozen):
    decode: tuple[GapRow, ...]
    prefill: tuple[GapRow, ...]


class CollectiveRow(_Frozen):
    what: str
    bytes: float
    time_s: float
    how: str


class CollectiveView(_Frozen):
    topology: str
    rows: tuple[CollectiveRow, ...]


# --- sweeps for the charts ---------------------------------------------------------------------------


def default_batches(dep: Deployment | RabitConfig, top: int = 1024) -> tuple[int, ...]:
    """Powers of two up to ``top`` (at least twice the configured batch), plus the configured batch."""
    cfg = dep.config if isinstance(dep, Deployment) else dep
    top = max(top, 2 * cfg.batch)
    out = {cfg.batch}
    b = 1
    while b <= top:
        out.add(b)
        b *= 2
    return tuple(sorted(out))


def batch_sweep(dep: Deployment | RabitConfig, batches: tuple[int, ...]) -> tuple[BatchPoint, ...]:
    """Step time, TTFT and throughput against batch size, everything else as configured."""
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    rows = []
    for B in batches:
        pf = prefill_numbers(sm, cfg, B)
        d = decode_numbers(sm, cfg, B)
        mem = serving_memory(dataclasses.replace(dep, config=cfg.model_copy(update={"batch": B})), NO_TRACE)
        rows.append(
            BatchPoint(
                batch=B,
                ttft_s=pf.ttft_s,
                decode_step_s=d.mean_s,
                tokens_per_s=B / d.mean_s * replicas_of(cfg),
                tokens_per_s_per_user=1 / d.mean_s,
                compute_s=d.mid.compute_s,
                memory_s=d.mid.memory_s,
                comm_s=d.mid.comm_s,
                bound=d.mid.bound,
                fits=mem.fits,
            )
        )
    return tuple(rows)


def decode_curve(dep: Deployment | RabitConfig, points: int = 256) -> tuple[tuple[float, float, float, float], ...]:
    """(cached tokens, step time, compute part, memory part) [s] as the context grows over the output."""
    dep = as_deployment(dep)
    cfg = dep.config
    sm = StepModel.from_deployment(dep)
    b = math.ceil(cfg.batch / sm.pp)
    N = max(cfg.output_tokens - 1, 1)
    n, t = decode_times(sm, b, cfg.input_tokens, N, points)
    R = cfg.input_tokens + n - 1
    c, mm, _, _ = sm.parts(
        np.full_like(n, float(b)),
        b * np.asarray(sm.kv_read_tokens(R + 1), dtype=float),
        b * np.asarray(sm.kv_read_tokens(R), dtype=float),
    )
    return tuple(
        (float(r), float(x), float(y), float(z))
        for r, x, y, z in zip(R, t, np.broadcast_to(c, t.shape), np.broadcast_to(mm, t.shape))
    )


def roofline(dep: Deployment | RabitConfig) -> Roofline:
    """Per-GPU roofline with the operating points of prefill and decode."""
    dep = as_deployment(dep)
    cfg, g = dep.config, dep.gpu
    sm = StepModel.from_deployment(dep)
    peak = g.peak_flop_per_s(COMPUTE_PRECISION[cfg.weights])  # falls back to the next wider precision
    ceiling = sm.peak_flop_per_s
    bw, bw_eff = g.memory_bw_bytes_per_s, sm.mem_bw_bytes_per_s
    pts = []
    pf_b, pf_1 = prefill_numbers(sm, cfg, cfg.batch), prefill_numbers(sm, cfg, 1)
    d_b, d_1 = decode_numbers(sm, cfg, cfg.batch), decode_numbers(sm, cfg, 1)
    items = [(f"prefill, batch {cfg.batch}", pf_b.it), (f"decode, batch {cfg.batch}", d_b.mid)]
    if cfg.batch > 1:
        items[1:1] = [("prefill, one prompt", pf_1.it)]
        items.append(("decode, batch 1", d_1.mid))
    for name, it in items:
        pts.append(
            RooflinePoint(
                name=name,
                intensity_flop_per_byte=it.intensity_flop_per_byte,
                roof_flop_per_s=it.flop / (it.busy_s or max(it.compute_s, it.memory_s)),
                delivered_flop_per_s=it.flop * it.pp / it.time_s,
                bound=it.bound,
            )
        )
    return Roofline(
        peak_flop_per_s=peak,
        ceiling_flop_per_s=ceiling,
        bw_bytes_per_s=bw,
        bw_eff_bytes_per_s=bw_eff,
        ridge_flop_per_byte=peak / bw,
        ridge_eff_flop_per_byte=ceiling / bw_eff,
        points=tuple(pts),
    )


def spec_vs_alpha(dep: Deployment | RabitConfig, alphas: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    """(acceptance rate, speed-up) for the configured method and k; empty when speculation is off."""
    dep = as_deployment(dep)
    cfg = dep.config
    if cfg.spec_method == "none":
        return ()
    sm = StepModel.from_deployment(dep)
    d = decode_numbers(sm, cfg, cfg.batch)
    sp = speculation(dep, sm, d.batch, d.b, d.ctx, d.s_read, d.mid)
    if sp is None:
        return ()
    return tuple(
        (float(al), float(acceptance.speedup(al, cfg.spec_k, sp.plain_step_s, sp.draft_s, sp.verify_s)))
        for al in alphas
    )


def topology_text(dep: Deployment | RabitConfig) -> str:
    """One line on how the TP group talks, for the page."""
    dep = as_deployment(dep)
    cfg, g, f = dep.config, dep.gpu, dep.fabric
    coll = Collectives.of(dep)
    p = cfg.tp
    if p > 1 and coll.spans_nodes(p):
        return (
            f"TP {p} spans {math.ceil(p / coll.domain)} scale-up domains of {coll.domain}: hierarchical "
            f"collectives, the node-level part over {f.name}."
        )
    if g.topology == "nvswitch":
        return (
            f"{g.scale_up}: every GPU reaches any peer at the full {sig(g.scale_up_bw_gb_per_s, 6)} GB/s per "
            "direction" + (", and the switch reduces all-reduce data (NVLS)" if g.in_switch_reduction else "") + "."
        )
    if g.topology == "mesh":
        links = min(max(p - 1, 1), g.mesh_links)
        return (
            f"{g.scale_up}: a full mesh of {g.mesh_links} links of {sig(g.link_bw_gb_per_s, 6)} GB/s; a group of "
            f"{p} GPUs uses {links} of them ({sig(links * g.link_bw_gb_per_s, 6)} GB/s per GPU)."
        )
    return f"{g.scale_up}: collectives cross the host bus at {sig(g.scale_up_bw_gb_per_s, 6)} GB/s per direction."


def allreduce_curve(dep: Deployment | RabitConfig, sizes_bytes: tuple[float, ...]) -> dict[str, tuple[float, ...]]:
    """All-reduce time over the TP group against message size, per algorithm [s] (chosen = the cheapest)."""
    dep = as_deployment(dep)
    cfg = dep.config
    coll = Collectives.of(dep)
    p = max(cfg.tp, 2)
    n = np.asarray(sizes_bytes, dtype=float)
    out: dict[str, tuple[float, ...]] = {}
    if not coll.spans_nodes(p):
        lv = coll.intra(p)
        out["ring"] = tuple(np.asarray(Collectives._ring_ar(n, p, lv), dtype=float).tolist())
        out["tree"] = tuple(np.asarray(Collectives._tree_ar(n, p, lv), dtype=float).tolist())
        if lv.in_switch_reduction:
            out["NVLS"] = tuple(np.asarray(Collectives._nvls_ar(n, p, lv), dtype=float).tolist())
    out["chosen"] = tuple(np.asarray(coll.all_reduce_s(n, p), dtype=float).tolist())
    return out


def collective_view(dep: Deployment | RabitConfig) -> CollectiveView:
    """The collectives of one decode and one prefill iteration of this config."""
    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    coll = Collectives.of(dep)
    sm = StepModel.from_deployment(dep)
    b = math.ceil(cfg.batch / cfg.pp)
    T_p = cfg.batch * (cfg.input_tokens - math.floor(cfg.prefix_cache_frac * cfg.input_tokens))
    h = m.hidden_size
    rows = []
    for what, toks in (("decode", b), ("prefill", T_p)):
        n = toks * h * ACT_BYTES
        if cfg.tp > 1:
            how = ""
            if not coll.spans_nodes(cfg.tp):
                lv = coll.intra(cfg.tp)
                algs = {
                    "ring": float(Collectives._ring_ar(n, cfg.tp, lv)),
                    "tree": float(Collectives._tree_ar(n, cfg.tp, lv)),
                }
                if lv.in_switch_reduction:
                    algs["NVLS"] = float(Collectives._nvls_ar(n, cfg.tp, lv))
                best = min(algs, key=lambda k: algs[k])
                how = "; ".join(f"{k} {fmt_time(v)}" for k, v in algs.items()) + f" -> {best}"
            else:
                how = "hierarchical across nodes"
            rows.append(
                CollectiveRow(
                    what=f"TP all-reduce ({what}), x{sig(sm.ar_per_iter, 6)} per stage",
                    bytes=n,
                    time_s=float(coll.all_reduce_s(n, cfg.tp)),
                    how=how,
                )
            )
        if sm.a2a_per_iter:
            nb = toks * m.experts_per_tok * h * ACT_BYTES / cfg.ep
            rows.append(
                CollectiveRow(
                    what=f"EP all-to-all ({what}), x{sig(sm.a2a_per_iter, 6)} per stage",
                    bytes=nb,
                    time_s=float(coll.all_to_all_s(nb, cfg.ep)),
                    how="(p-1) alpha + (p-1)/p n / beta",
                )
            )
        if cfg.pp > 1:
            cross = cfg.tp * cfg.pp > coll.domain
            rows.append(
                CollectiveRow(
                    what=f"PP send ({what}), x{cfg.pp - 1} per iteration",
                    bytes=n,
                    time_s=float(coll.p2p_s(n, cross)),
                    how="alpha + n / beta",
                )
            )
    rows.append(
        CollectiveRow(
            what="all-reduce over 1 GPU",
            bytes=float(h * ACT_BYTES),
            time_s=float(coll.all_reduce_s(h * ACT_BYTES, 1)),
            how="no peer, no cost",
        )
    )
    return CollectiveView(topology=topology_text(dep), rows=tuple(rows))


# --- the textbook chain, changed one assumption at a time into ours ------------------------------


def textbook_comparison(dep: Deployment | RabitConfig) -> TextbookComparison:
    """Explain every gap between the textbook chain and ours, as a cumulative waterfall.

    The textbook example decode: t = max((W + KV_full) / (pi_bw x 0.8), 2 B P / (tp pp) / (pi x 0.74)) + t_comm;
    prefill: TTFT = 2 B s_pre P / (tp pp) / (pi x 0.74). Its "99 TFLOP/s" for the H100 is a display slip for
    989 (its own 3159 ms is 2313 TFLOP per GPU / (989 x 0.74) TFLOP/s; with 99 it would be 31.6 s); physics
    wins: we use the datasheet's 989 TFLOP/s dense BF16.
    """
    dep = as_deployment(dep)
    cfg, m, g = dep.config, dep.model, dep.gpu
    sm = StepModel.from_deployment(dep)
    a = cfg.assumptions
    mem = serving_memory(dep, NO_TRACE)
    tp, pp = cfg.tp, cfg.pp
    pi = sm.peak_flop_per_s / a.mfu_max
    bw = g.memory_bw_bytes_per_s
    B = cfg.batch
    d = decode_numbers(sm, cfg, B)
    pf = prefill_numbers(sm, cfg, B)
    P_textbook = m.active_params()
    P_act = m.active_matmul_params()

    # decode, stage level; micro-batching switched on in its own row
    def dec(
        kv_mean: bool, w_read: bool, mbu: bool, ours_cmp: bool, micro: bool, comm: bool, ovh: bool, split: bool
    ) -> float:
        bb = d.b if micro else B
        W = sm.weights_read_bytes(bb) if w_read else mem.weights_bytes_per_gpu
        # ours: the weights stream at mbu, the paged K/V reads at mbu x kv_read_bw_eff (g_r per cached token)
        g_r = sm.kv_read_factor if mbu else 1.0
        KV = bb * (g_r * d.s_read + 1) * sm.kv_bytes_per_token if kv_mean else g_r * mem.kv_bytes_per_gpu * bb / B
        t_m = (W + KV) / (bw * (a.mbu if mbu else TEXTBOOK_MBU))
        if ours_cmp:
            t_c = sm.scalar_parts(float(bb), bb * d.s_att, bb * d.s_read)[0]
        else:
            t_c = 2 * bb * P_textbook / (tp * pp) / (pi * TEXTBOOK_MFU)
        t_x = sm.scalar_parts(float(bb), bb * d.s_att, bb * d.s_read)[2] if comm else 0.0
        hops = sm.hops_s(bb) if (comm and micro) else 0.0
        fixed = sm.fixed_s(sm.stage_parts(float(bb), 0.0, 0.0)[3], float(bb)) if ovh else 0.0
        busy = sm.busy_s(t_c, t_m, bb * d.s_att, bb * d.s_read) if split else max(t_c, t_m)
        return pp * (busy + t_x) + hops + fixed

    flags = [False] * 8
    rows: list[GapRow] = []

    def add(label: str, value: float, note: str) -> None:
        prev = rows[-1].value_s if rows else value
        delta = value - prev
        rows.append(
            GapRow(label=label, value_s=value, delta_s=0.0 if abs(delta) <= 1e-9 * abs(value) else delta, note=note)
        )

    add(
        "Textbook chain: (W + KV at full context) / (pi_bw x 0.8)",
        dec(*flags),
        f"W = {sig(mem.weights_bytes_per_gpu / 1e9)} GB with the embedding, KV for {B} sequences at the full "
        f"{cfg.context_tokens:,} tokens; the textbook example prints 10.7 ms (it rounds KV up to 11 GB) and 11.8 ms with its "
        "unstated t_comm",
    )
    flags[0] = True
    add(
        "KV at the mean context over the output, plus the new token's KV written",
        dec(*flags),
        f"decode reads {d.ctx:,.0f} cached tokens on average, not the {cfg.context_tokens:,} of the last step",
    )
    flags[1] = True
    add(
        "Weights read: the input embedding is a lookup" + ("; only touched experts" if m.is_moe else ""),
        dec(*flags),
        f"{sig(m.embedding_params() / 1e9)} B embedding parameters are not streamed each step",
    )
    flags[2] = True
    add(
        f"MBU {sig(a.mbu, 6)} on the weights, {sig(a.mbu / sm.kv_read_factor, 3)} on the paged K/V reads, instead of 0.8",
        dec(*flags),
        "GEMV / STREAM measurements for the weight streams (assumption mbu), FlashInfer / paged-attention "
        "measurements for the K/V gathers (kv_read_bw_eff)",
    )
    flags[3] = True
    add(
        f"Compute side: MFU {sig(a.mfu_max, 6)} with T/(T+{sig(a.mfu_ramp_tokens, 6)}) and attention FLOPs",
        dec(*flags),
        "changes the step only when compute binds",
    )
    flags[7] = True
    add(
        "GEMMs and attention each at their own roofline, one after the other",
        dec(*flags),
        "the GEMMs against the weights they stream, attention against the K/V it reads; they add once the GEMMs "
        "turn compute-bound while attention stays bound by its reads (large batches)",
    )
    if pp > 1:
        flags[4] = True
        add(
            f"Pipeline: {pp} micro-batches of {d.b} in flight, stage hops",
            dec(*flags),
            "the textbook example's per-user formula s_tok / (pp t_step + (pp-1) t_pp)",
        )
    flags[4] = True
    flags[5] = True
    add(
        "TP/EP communication per stage",
        dec(*flags),
        f"{sig(sm.ar_per_iter, 6)} all-reduces per stage of b x h x 2 B: launch {sig(a.collective_base_us, 6)} us + hops + bytes "
        "(NCCL tuning model); the textbook example adds about 1.1 ms (11.8 - 10.7) without a formula",
    )
    flags[6] = True
    add(
        "Fixed costs per step: scheduler, kernel launches, per-sequence work and sampling",
        dec(*flags),
        f"{sig(a.step_overhead_ms, 6)} ms + {sm.kernels_per_stage:,.0f} kernels per stage x "
        f"{sig(a.graph_launch_us, 6)} us (CUDA graph) + {sig(a.seq_overhead_us, 6)} us and the sampler's logits per sequence",
    )
    add(
        "Mean over the output (ours)",
        d.mean_s,
        "the mean of the per-step times; differs from the mid-context step only where the bound switches",
    )
    decode_rows = tuple(rows)

    rows = []
    T = pf.T
    eff = T / (T + sm.ramp_tokens)
    F_textbook = 2 * T * P_textbook / (tp * pp)
    F_mm = 2 * T * P_act / (tp * pp)
    F_all = sm.flop_per_token * T + sm.attn_flop_per_pair * pf.A  # the whole batch (pf.it: one micro-batch)
    t1 = F_textbook / (pi * TEXTBOOK_MFU)
    add(
        "Textbook chain: 2 B s_pre P / (tp pp) / (pi x 0.74)",
        t1,
        f"pi = {sig(pi / 1e12, 4)} TFLOP/s per GPU; the textbook example prints '99 TFLOP/s', a slip for H100's 989 dense BF16: "
        "its own 3159 ms needs 989",
    )
    add(
        "Matmul parameters only (the input embedding is a lookup)",
        F_mm / (pi * TEXTBOOK_MFU),
        f"{sig((P_textbook - P_act) / 1e9)} B parameters do no matmul",
    )
    add(
        "Attention FLOPs 4 L (H d_h) A",
        F_all / (pi * TEXTBOOK_MFU),
        f"{pf.A / max(pf.batch, 1):,.0f} attended pairs per prompt (causal)",
    )
    add(
        f"MFU {sig(a.mfu_max, 6)} instead of 0.74",
        F_all / (pi * a.mfu_max),
        "cuBLASLt large-GEMM efficiency on H100 and vLLM/SGLang prefill profiles (assumption mfu_max)",
    )
    add(
        f"Small-iteration ramp T/(T+{sig(a.mfu_ramp_tokens, 6)}) on the matmuls",
        (F_all - F_mm) / (pi * a.mfu_max) + F_mm / (pi * a.mfu_max * eff),
        f"T = {T:,.0f} tokens: the ramp costs the matmuls {sig(100 * (1 / eff - 1), 2)}% (GEMM tiling; attention has "
        "its own roofline)",
    )
    whole_c, whole_m = (pf.it.compute_s, pf.it.memory_s) if pf.m == 1 else sm.scalar_parts(T, pf.A, pf.R)[:2]
    whole = sm.busy_s(whole_c, whole_m, pf.A, pf.R)
    add(
        "Memory side (weights + KV traffic; GEMMs and attention each at their own roofline)",
        pp * whole if pp > 1 else whole,
        "changes the time only when memory binds" + ("; stages run in turn" if pp > 1 else ""),
    )
    t_stage = pf.it.busy_s  # one micro-batch
    slots = pf.m + pp - 1  # stage slots of m micro-batches through pp stages: pp without micro-batches
    if pf.m > 1:
        add(
            f"Pipeline: {sig(pf.m, 6)} micro-batches of {sig(pf.batch / pf.m, 6)} prompts keep the stages busy",
            slots * t_stage,
            f"(m + pp - 1) = {sig(slots, 6)} stage times of one micro-batch instead of {pp} of the whole batch; "
            "each micro-batch re-reads the stage's weights",
        )
    add(
        "TP/EP communication (and PP hops)",
        slots * (t_stage + pf.it.comm_s) + pf.it.hops_s,
        f"{sig(sm.ar_per_iter, 6)} all-reduces per stage of T x h x 2 B = {sig(T * m.hidden_size * 2 / 1e6, 4)} MB each; "
        "the textbook chain charges none",
    )
    add(
        "Fixed costs: scheduler, kernel launches, per-sequence work and sampling",
        pf.ttft_s,
        f"{sig(a.step_overhead_ms, 6)} ms + {sm.kernels_per_stage:,.0f} kernels per stage "
        f"({'graph' if T <= sm.graph_max_tokens else 'eager'}) + {pf.batch} sequences sampled",
    )
    return TextbookComparison(decode=decode_rows, prefill=tuple(rows))


# --- expert parallelism for a MoE model ---------------------------------------------------------------


class EpOption(BaseModel):
    """One way to place a MoE model's routed experts on the replica (EP 1: every expert split by TP)."""

    model_config = ConfigDict(frozen=True)

    ep: int
    decode_step_s: float
    prefill_s: float
    comm_s_per_step: float  # exposed TP all-reduces + EP all-to-alls + hops, one decode step
    tokens_per_s: float
    problem: str = ""  # why this EP cannot run here (empty when it can)


def ep_options(dep: Deployment | RabitConfig) -> tuple[EpOption, ...]:
    """The decode step, TTFT and communication of a MoE config at EP 1 and at each EP from TP to TP x DP.

    Empty for a dense model. Each option is the same config with ``ep`` changed, timed by the one step model:
    with EP the routed experts sit whole on their GPUs and a MoE layer swaps its MLP all-reduce for a dispatch
    and a combine all-to-all on the GPU's fabric (vLLM ``--enable-expert-parallel``).
    """
    from core.config import problems

    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    if not m.is_moe:
        return ()
    nan = math.nan
    out = []
    # EP 1 and each EP that spreads the experts over at least the TP ranks (an EP below TP would hold more
    # expert bytes per GPU than splitting them by TP)
    for ep in (1, *(e for e in (2, 4, 8, 16, 32, 64) if cfg.tp <= e <= cfg.tp * cfg.dp and e > 1)):
        cd = dep.with_(ep=ep)
        c = cd.config
        blocking = [p.message for p in problems(c) if p.blocking]
        if blocking:
            out.append(
                EpOption(
                    ep=ep, decode_step_s=nan, prefill_s=nan, comm_s_per_step=nan, tokens_per_s=nan, problem=blocking[0]
                )
            )
            continue
        sm = StepModel.from_deployment(cd)
        d = decode_numbers(sm, c, c.batch)
        pf = prefill_numbers(sm, c, c.batch)
        out.append(
            EpOption(
                ep=ep,
                decode_step_s=d.mean_s,
                prefill_s=pf.ttft_s,
                comm_s_per_step=d.mid.pp * d.mid.comm_s + d.mid.hops_s,
                tokens_per_s=c.batch / d.mean_s * replicas_of(c),
            )
        )
    return tuple(out)


class AttentionOption(_Frozen):
    """One attention layout of the config's replica: its decode step, the batch's TTFT and how much KV it holds."""

    label: str
    gpus_per_replica: int
    decode_step_s: float
    prefill_s: float
    kv_tokens_per_replica: float
    max_sequences: int
    current: bool
    problem: str = ""  # why this layout cannot run here (empty when it can)


def attention_options(dep: Deployment | RabitConfig) -> tuple[AttentionOption, ...]:
    """The config's replica with each attention layout: plain TP, data-parallel attention (MLA or MoE, the MoE layers
    expert-parallel over the TP ranks), decode context parallelism over the TP ranks that replicate the KV, and
    context parallelism over 2 and 4 TP groups (more GPUs per replica); each timed by the one step model and sized by
    the one memory model (the Speed page's layout comparison)."""
    from core.config import problems

    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    plain = {"dp_attention": False, "cp": 1, "dcp": 1}
    variants: list[tuple[str, dict]] = [(f"TP {cfg.tp}", plain)]
    if cfg.tp > 1 and (m.is_mla or m.is_moe):
        ep = cfg.tp if m.is_moe and m.num_experts % cfg.tp == 0 else cfg.ep
        variants.append(
            ("data-parallel attention" + (f", EP {ep}" if ep > 1 else ""), {**plain, "dp_attention": True, "ep": ep})
        )
    shard = kv_shard(m, cfg.tp)
    if cfg.tp > shard:
        variants.append((f"decode context parallelism {cfg.tp // shard}", {**plain, "dcp": cfg.tp // shard}))
    for k in (2, 4):
        variants.append((f"context parallelism {k}", {**plain, "cp": k, "nodes": cfg.nodes * k}))
    out = []
    nan = math.nan
    for label, changes in variants:
        cd = dep.with_(**changes)
        c = cd.config
        now = (c.dp_attention, c.cp, c.dcp) == (cfg.dp_attention, cfg.cp, cfg.dcp)
        blocking = [p.message for p in problems(c) if p.blocking]
        if blocking:
            out.append(
                AttentionOption(
                    label=label,
                    gpus_per_replica=c.replica_gpus,
                    decode_step_s=nan,
                    prefill_s=nan,
                    kv_tokens_per_replica=nan,
                    max_sequences=0,
                    current=now,
                    problem=blocking[0],
                )
            )
            continue
        sm = StepModel.from_deployment(cd)
        mem = serving_memory(cd, NO_TRACE)
        out.append(
            AttentionOption(
                label=label,
                gpus_per_replica=c.replica_gpus,
                decode_step_s=decode_numbers(sm, c, c.batch).mean_s,
                prefill_s=prefill_numbers(sm, c, c.batch).ttft_s,
                kv_tokens_per_replica=mem.kv_tokens_per_replica,
                max_sequences=mem.max_sequences,
                current=now,
                problem="" if mem.fits else mem.reason,
            )
        )
    return tuple(out)
