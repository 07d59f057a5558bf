"""``rabit speed``: TTFT, decode step, throughput and what binds, for one batch on one replica layout.

JSON keys (contract, issue 3): prefill_s (TTFT of one batch), decode_step_s (mean over the output),
tokens_per_s (aggregate decode, all replicas), tokens_per_s_per_user, bound ("compute" | "memory" |
"communication", of the decode step), comm_s_per_step; plus extras.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import (
    adapter_payload,
    adapters_from_args,
    add_adapter_args,
    add_attention_args,
    add_cluster_args,
    add_json,
    add_model_args,
    add_range_args,
    add_serving_args,
    attention_payload,
    config_file,
    config_from_args,
    die,
    emit,
    fill_from_config,
    range_line,
    refuse_attention_flags,
    refuse_unused,
    with_calibrated,
    with_ranges,
)
from core import catalog
from core.base import choices, find, fmt_num, fmt_time, sig
from core.config import DEFAULT, RabitConfig
from core.decision import speed_spread
from core.physics import serving_memory
from core.serving import SpeedSummary, speed_summary

#: Headline keys that carry a range in ``--json``.
RANGED = (
    "prefill_s",
    "decode_step_s",
    "tokens_per_s",
    "tokens_per_s_per_user",
    "comm_s_per_step",
    "ttft_one_prompt_s",
    "e2e_s",
    "tokens_per_s_per_gpu",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("speed", help="step time: TTFT, decode step, tokens/s, per-user tokens/s, the binding limit")
    add_model_args(p)
    add_cluster_args(p)
    add_serving_args(p)
    add_attention_args(p)
    p.add_argument(
        "--token-budget",
        type=int,
        help="tokens per iteration (max_num_batched_tokens): a longer prompt is prefilled in chunks of this size",
    )
    p.add_argument(
        "--spec", choices=choices.SPEC_METHODS, default=DEFAULT.spec_method, help="speculative decoding method"
    )
    p.add_argument("--spec-k", type=int, default=DEFAULT.spec_k, help="drafted tokens per round (1-16)")
    p.add_argument("--spec-alpha", type=float, default=DEFAULT.spec_alpha, help="per-token acceptance rate (0-1)")
    p.add_argument("--draft-model", default=DEFAULT.draft_model, help="catalog slug of the draft model (--spec draft)")
    add_adapter_args(p)
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


def _check_spec_flags(args: argparse.Namespace) -> None:
    """Exit 2 on speculative-decoding flags that do not apply to the --spec given, or out of range."""
    if args.spec == "none":
        why = "without speculative decoding (give --spec draft, eagle or ngram)"
        refuse_unused(args, "rabit speed", dict.fromkeys(("spec_k", "spec_alpha", "draft_model"), why))
    elif args.spec != "draft":
        refuse_unused(
            args, "rabit speed", {"draft_model": f"with --spec {args.spec}: only --spec draft runs a draft model"}
        )
    if not 1 <= args.spec_k <= 16:
        die(f"rabit: error: argument --spec-k: must be between 1 and 16, got {args.spec_k}")
    if not 0.0 <= args.spec_alpha <= 1.0:
        die(f"rabit: error: argument --spec-alpha: must be between 0 and 1, got {sig(args.spec_alpha, 6)}")
    if args.draft_model not in catalog.models():
        die(
            f"rabit: error: argument --draft-model: unknown model '{args.draft_model}'; "
            f"known: {', '.join(sorted(catalog.models()))}"
        )


def _payload(cfg: RabitConfig, s: SpeedSummary) -> dict[str, Any]:
    """The JSON of a speed summary: prefill, decode and throughput, the prefill's chunks and the speculative terms."""
    pf, d = s.prefill, s.decode
    payload: dict[str, Any] = {
        "model": cfg.model_label,
        "gpu": cfg.gpu,
        "gpus": cfg.gpus,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "ep": cfg.ep,
        **attention_payload(cfg),
        "replicas": d.replicas,
        "batch": cfg.batch,
        "input_tokens": cfg.input_tokens,
        "output_tokens": cfg.output_tokens,
        "weights": cfg.weights,
        "kv_dtype": cfg.kv_dtype,
        "prefill_s": pf.ttft_s,
        "decode_step_s": d.step_s,
        "tokens_per_s": d.tokens_per_s,
        "tokens_per_s_per_user": d.tokens_per_s_per_user,
        "bound": d.bound,
        "comm_s_per_step": d.comm_s_per_step,
        # extras
        "ttft_one_prompt_s": pf.ttft_one_s,
        "prefill_bound": pf.bound,
        "decode_step_first_s": d.step_first_s,
        "decode_step_last_s": d.step_last_s,
        "tokens_per_s_per_replica": d.tokens_per_s_replica,
        "tokens_per_s_per_gpu": d.tokens_per_s_per_gpu,
        "e2e_s": s.e2e_s,
        "compute_bound_batch": s.compute_bound_batch,
        "decode_compute_s": d.at_mean.compute_s,
        "decode_memory_s": d.at_mean.memory_s,
        "decode_overhead_s": d.at_mean.overhead_s,
        # one prompt's prefill chunk by chunk (one part when it runs in one pass): TTFT_1 = the sum of their times
        "prefill_chunk_tokens": pf.chunk_tokens,
        "prefill_chunks": [c.model_dump() for c in pf.chunks],
    }
    if s.spec is not None:
        payload["speculative"] = {
            "method": s.spec.method,
            "k": s.spec.k,
            "alpha": s.spec.alpha,
            "tokens_per_pass": s.spec.tokens_per_pass,
            "draft_s": s.spec.draft_s,
            "verify_s": s.spec.verify_s,
            "speedup": s.spec.speedup,
            "break_even_alpha": s.spec.break_even_alpha,
            "tokens_per_s_per_user": s.spec.tokens_per_s_per_user,
            "tokens_per_s": s.spec.tokens_per_s,
        }
    return payload


def _lines(cfg: RabitConfig, s: SpeedSummary) -> list[str]:
    """The human summary and the recorded steps of the derivation (a chunked prefill's chunks in one line)."""
    pf, d = s.prefill, s.decode
    human = [
        f"TTFT (batch of {cfg.batch}): {fmt_time(pf.ttft_s)} ({pf.bound}-bound); one prompt alone: "
        f"{fmt_time(pf.ttft_one_s)}",
        f"decode step (mean over {cfg.output_tokens:,} output tokens): {fmt_time(d.step_s)} ({d.bound}-bound), "
        f"communication {fmt_time(d.comm_s_per_step)} per step",
        f"throughput: {fmt_num(d.tokens_per_s)} tokens/s aggregate, {fmt_num(d.tokens_per_s_per_user)} tokens/s "
        f"per user",
    ]
    if s.spec is not None:
        human.append(
            f"speculative ({s.spec.method}, k={s.spec.k}, alpha={sig(s.spec.alpha, 6)}): "
            f"{sig(s.spec.tokens_per_pass)} tokens per pass, speed-up {sig(s.spec.speedup)}x"
        )
    human.append("")
    for key in (
        "prefill_flop",
        "prefill_compute_s",
        "prefill_memory_s",
        "prefill_comm_s",
        "prefill_s",
        "decode_mid_bytes",
        "decode_mid_compute_s",
        "decode_mid_memory_s",
        "decode_mid_comm_s",
        "decode_step_s",
        "tokens_per_s",
    ):
        if not any(x.key == key for x in s.steps):  # a chunked prefill records its chunks instead
            continue
        st = find(s.steps, key)
        human.append(f"  {st.label:<46} {st.shown():>16}")
    if pf.chunk_tokens is not None:
        lin, att = sum(c.linear_s for c in pf.chunks), sum(c.attention_s for c in pf.chunks)
        human.append(
            f"  prefill in {len(pf.chunks)} chunks of {pf.chunk_tokens:,} tokens: matmuls {fmt_time(lin)}, "
            f"attention {fmt_time(att)}"
        )
    return human


def run(args: argparse.Namespace) -> int:
    fill_from_config(args)
    refuse_attention_flags(args, "rabit speed", training=False)
    _check_spec_flags(args)
    extra: dict[str, Any] = {}
    if args.token_budget is not None:
        base = config_file(args) or getattr(args, "_analysis_config", None) or DEFAULT
        extra["workload"] = base.workload.with_(token_budget=args.token_budget)
    cfg = config_from_args(
        args,
        spec_method=args.spec,
        spec_k=args.spec_k,
        spec_alpha=args.spec_alpha,
        draft_model=args.draft_model,
        adapters=adapters_from_args(args),
        **extra,
    )
    s = speed_summary(cfg)
    d = s.decode
    payload = _payload(cfg, s)
    human = _lines(cfg, s)
    mem = serving_memory(cfg)
    payload["fits"] = mem.fits
    payload["memory_reason"] = mem.reason
    if cfg.adapters.enabled:  # the step's adapter terms: distinct adapters read, and their share of the step
        payload.update(adapter_payload(cfg, mem))
        payload["adapters_in_batch"] = d.at_mean.adapters
        payload["adapter_bytes_per_step"] = d.at_mean.adapter_bytes
        payload["adapter_flop_per_step"] = d.at_mean.adapter_flop
    if not mem.fits:
        human.insert(0, f"warning: {mem.reason}")
    sp = speed_spread(cfg)
    with_ranges(payload, sp.ranges, RANGED)
    payload["bound_inside_range"] = [b for b in sp.labels("bound") if b]
    human += ["", "ranges (" + payload["range_basis"] + "):"]
    human += [
        range_line(k, sp.ranges[k], fmt_time if k.endswith("_s") and "_per_" not in k else fmt_num) for k in RANGED
    ]
    if len(payload["bound_inside_range"]) > 1:
        human.append(
            f"  the decode step's binding limit changes inside the range: {' / '.join(payload['bound_inside_range'])}"
        )
    with_calibrated(
        payload,
        args,
        cfg,
        {"prefill_s": "ttft_s.p50", "decode_step_s": "itl_s.p50", "tokens_per_s": "throughput_tokens_per_s"},
    )
    emit(payload, args.json, "\n".join(human))
    return 0
