"""The step model's constants of attention parallelism and the host KV tier: context parallelism's ring sends,
decode context parallelism's exchange, the HBM's share of the KV before the host link (the split path of
:meth:`core.physics.step.StepModel.stage_parts` uses them; the module docstring there gives the formulas).
"""

from __future__ import annotations

from typing import Any

from core.base import NO_TRACE, Trace
from core.config import Deployment
from core.physics.collectives import ACT_BYTES, Collectives, _line
from core.physics.memory import serving_memory

__all__ = ["attention_split"]


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
