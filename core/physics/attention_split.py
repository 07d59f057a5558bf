"""The step model's constants of attention parallelism and the host KV tier: context parallelism's ring sends,
decode context parallelism's exchange, the HBM's share of the KV before the host link (the split path of
:meth:`core.physics.step.StepModel.stage_parts` uses them), and that split path itself (:func:`split_parts`).

Attention parallelism (:meth:`core.physics.step.StepModel.stage_parts`):

* data-parallel attention: each TP rank runs attention on its own sequences with whole attention weights (read in
  full by every rank), the KV of 1/TP of the batch, and no all-reduce after attention; the MLP or MoE layers gather
  the batch (all-gather + reduce-scatter: one all-reduce's volume) or dispatch it to the experts (EP all-to-alls);
* context parallelism ``cp``: the iteration's tokens, attended pairs and cached tokens split over ``cp`` TP groups;
  per attention layer ``cp - 1`` ring steps each pass a block (the keys and values of the rank's tokens, or its
  queries and partial outputs, whichever is smaller: pass-KV or pass-Q, Yang et al. arXiv 2411.01783) while the rank
  attends the block it holds, so a step costs ``max(t_send, t_block)`` and only ``max(0, t_send - t_block)`` shows;
* decode context parallelism ``dcp``: the KV split over ``dcp`` TP ranks (:func:`core.physics.memory.kv_shard`), and per
  attention layer two collectives over them (the queries gathered, the partial outputs and their log-sum-exps
  combined);
* a KV tier in host memory: cached tokens beyond what HBM holds are read (or written) over the host link, a stream
  beside HBM's: ``t_m = max(t_m, max(0, R + T - N_h) k_g / BW_host)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from core.base import NO_TRACE, Trace
from core.config import Deployment
from core.physics.collectives import ACT_BYTES, Collectives, _line
from core.physics.memory import serving_memory

if TYPE_CHECKING:
    from core.physics.step import StepModel

__all__ = ["attention_split", "split_parts"]


def attention_split(dep: Deployment, coll: Collectives, k_g: float, tr: Trace) -> dict:
    """The step model's constants of context parallelism, decode context parallelism and the host KV tier (empty
    when none is set), each recorded on ``tr``.

    A ring send crosses the inter-node fabric once TP x CP outgrows the scale-up domain (the CP groups sit outside
    the TP groups); the DCP collectives stay inside the TP group. One token's queries and partial outputs are
    H / tp x (d_q + d_v) x 2 B per layer (MLA: the absorbed query of r_kv + d_rope and the latent output r_kv)."""
    cfg, m, a = dep.config, dep.model, dep.assumptions
    tp, pp, cp, dcp = cfg.tp, cfg.pp, cfg.cp, cfg.dcp
    host = cfg.kv_offload_gib > 0
    if cp == 1 and dcp == 1 and not host:
        return {}
    on = tr.enabled
    L_a = m.attention_layers / pp
    d_q, d_v = (m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank) if m.is_mla else (m.head_dim, m.head_dim)
    out: dict[str, Any] = {"attention_split": True, "attn_layers_stage": L_a}
    if cp > 1:
        cross = tp * cp > coll.domain
        k_l = k_g / L_a
        q_l = m.num_heads / tp * (d_q + d_v) * ACT_BYTES
        a_cp, b_cp = _line(
            tr,
            ("cp_alpha_s", "Ring send: fixed time", "a_{cp}"),
            ("cp_beta_s_per_byte", "Ring send: time per byte", "b_{cp}"),
            float(coll.p2p_s(1.0, cross)),
            float(coll.p2p_s(2.0, cross)),
            f"context parallelism {cp}: point-to-point to the next TP group "
            + (f"over {dep.fabric.name}" if cross else "over the scale-up fabric")
            + " (the line through one and two bytes)",
        )
        out.update(
            cp=cp,
            cp_alpha_s=a_cp,
            cp_beta_s_per_byte=b_cp,
            cp_kv_bytes_per_token_layer=k_l,
            cp_q_bytes_per_token_layer=q_l,
        )
        if on:
            tr.step(
                "cp_kv_bytes_per_token_layer",
                "Pass-KV: one token's K and V in one layer on one GPU",
                "k_l",
                "k_g / L_a",
                k_l,
                unit="B",
                k_g=k_g,
                L_a=L_a,
            )
            tr.step(
                "cp_q_bytes_per_token_layer",
                "Pass-Q: one token's queries and partial outputs in one layer on one GPU",
                "q_l",
                "H / tp * (d_q + d_v) * b_a",
                q_l,
                unit="B",
                H=m.num_heads,
                tp=tp,
                d_q=d_q,
                d_v=d_v,
                b_a=ACT_BYTES,
                note="a ring step passes whichever is smaller: the block's keys and values (prefill) or the queries "
                "and partial outputs (decode, a short chunk after a long cached prefix); Yang et al. arXiv 2411.01783",
            )
    if dcp > 1:
        n_tok = m.num_heads * dcp / tp * (d_q + d_v) / 2 * ACT_BYTES  # one of the two collectives, per token
        a_d, b_d = _line(
            tr,
            ("dcp_alpha_s", "DCP collective: fixed time", "a_d"),
            ("dcp_beta_s", "DCP collective: time per token (queries or outputs)", "b_d"),
            float(coll.all_to_all_s(n_tok, dcp)),
            float(coll.all_to_all_s(2 * n_tok, dcp)),
            f"decode context parallelism {dcp}: per attention layer the queries of H dcp / tp heads are gathered over "
            f"the {dcp} ranks and their partial outputs and log-sum-exps combined (vLLM "
            "--decode-context-parallel-size), or, cheaper for a long chunk, the KV it attends is gathered",
        )
        _, b_dk = _line(
            tr,
            ("dcp_kv_alpha_s", "DCP KV gather: fixed time", "a_{dk}"),
            ("dcp_kv_beta_s", "DCP KV gather: time per attended token", "b_{dk}"),
            float(coll.all_gather_s(k_g * dcp / L_a, dcp)),
            float(coll.all_gather_s(2 * k_g * dcp / L_a, dcp)),
            "one cached token's KV of one layer gathered over the DCP group",
        )
        out.update(dcp=dcp, dcp_alpha_s=a_d, dcp_beta_s=b_d, dcp_kv_beta_s=b_dk)
    if host:
        mem = serving_memory(dep, NO_TRACE)
        n_h = max(0.0, mem.kv_budget_bytes_per_gpu) / k_g
        bw_h = a.offload_gb_per_s * 1e9
        out.update(host_tier=True, hbm_kv_tokens=n_h, host_bw_bytes_per_s=bw_h)
        if on:
            tr.step(
                "hbm_kv_tokens",
                "Cached tokens one GPU's HBM holds",
                "N_h",
                "max(0, K_b) / k_g",
                n_h,
                unit="tokens",
                K_b=mem.kv_budget_bytes_per_gpu,
                k_g=k_g,
                note="beyond these the KV lives in the host tier",
            )
            tr.step(
                "host_bw_bytes_per_s",
                "Host link bandwidth",
                r"BW_{host}",
                "b_h * 1e9",
                bw_h,
                unit="B/s",
                b_h=a.offload_gb_per_s,
                note="assumption offload_gb_per_s: PCIe Gen4 x16 about 25 GB/s from pinned memory, Gen5 about 50",
            )
    return out


def split_parts(sm: StepModel, T, A, R, D=0.0):
    """:meth:`core.physics.step.StepModel.stage_parts` with context parallelism, decode context parallelism or a host KV tier: the body on
    one rank's share ``T/cp, A/cp, R/cp``, the exposed ring steps and the DCP collectives added to the
    communication, the host link's stream beside HBM's (see the module docstring)."""
    arr = type(T) is np.ndarray
    cp = sm.cp
    Tc, Ac, Rc = (T / cp, A / cp, R / cp) if cp > 1 else (T, A, R)
    c, mm, x, k = sm.stage_body(Tc, Ac, Rc, D)  # every rank reads the batch's D adapters
    live = (T > 0) if arr else (1.0 if T > 0 else 0.0)
    if cp > 1:
        kv = sm.cp_kv_bytes_per_token_layer * (Tc + Rc)
        q = sm.cp_q_bytes_per_token_layer * Tc
        msg = np.minimum(kv, q) if arr else (kv if kv < q else q)
        t_send = sm.cp_alpha_s + sm.cp_beta_s_per_byte * msg
        t_block = sm.attn_flop_per_pair / sm.attn_layers_stage * Ac / cp / sm.attn_peak_flop_per_s
        gap = t_send - t_block
        ring = sm.attn_layers_stage * (cp - 1) * (np.maximum(gap, 0.0) if arr else (gap if gap > 0 else 0.0))
        x = x + ring * live
    if sm.dcp > 1:  # per attention layer: gather the queries and combine the outputs, or gather the KV
        q_way = 2.0 * (sm.dcp_alpha_s + sm.dcp_beta_s * Tc)
        kv_way = sm.dcp_alpha_s + sm.dcp_kv_beta_s * (Tc + Rc)
        per_layer = np.minimum(q_way, kv_way) if arr else (q_way if q_way < kv_way else kv_way)
        x = x + per_layer * sm.attn_layers_stage * sm.comm_exposed * live
    if sm.host_tier:
        over = Rc + Tc - sm.hbm_kv_tokens
        t_host = (np.maximum(over, 0.0) if arr else (over if over > 0 else 0.0)) * (
            sm.kv_bytes_per_token / sm.host_bw_bytes_per_s
        )
        mm = np.maximum(mm, t_host) if arr else (mm if mm > t_host else t_host)
    return c, mm, x, k
