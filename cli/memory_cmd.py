"""``rabit memory``: does it fit, and how many sequences can one replica hold.

``--log FILE`` (serving): a vLLM or SGLang start-up log. Its flags (memory share, token budget, tensor
parallelism, KV format, max model len) are laid over the config, and ``--json`` adds ``log`` (the numbers read:
``weights_bytes``, ``kv_cache_bytes`` per GPU, ``kv_cache_tokens``, ``max_concurrency``, ``context_tokens``, and
``unrecognised``: the ones the log does not state), ``log_vs_predicted`` (measured / predicted per number),
``log_comparison`` (the prediction, the flags taken from the log, the runtime overhead that reproduces the log
and the numbers predicted again with it) and ``oom`` (a failure in the log: ``phase`` start-up or under load,
``cause``, ``remedies`` ranked by cost; null without one). A file that is not a start-up log exits 2 naming
``--log``.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import (
    ADAPTER_FLAGS,
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
    config_from_args,
    die,
    emit,
    fill_from_config,
    range_line,
    read_log,
    refuse_attention_flags,
    refuse_unused,
    steps_table,
    training_only,
    with_ranges,
)
from core.base import choices, sig
from core.catalog import ENGINE_LABELS
from core.config import DEFAULT, resolve
from core.decision import memory_spread, training_memory_spread
from core.operations import NUMBER_TEXT, NUMBERS, compare_log, config_for_log, diagnose_oom, number_text
from core.physics import serving_memory, training_memory


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="memory per GPU: weights, KV cache, activations; fits and max sequences")
    add_model_args(p)
    add_cluster_args(p)
    add_serving_args(p)
    add_attention_args(p)
    p.add_argument("--phase", choices=choices.PHASES, default=DEFAULT.phase)
    p.add_argument("--zero", type=int, choices=choices.ZERO_STAGES, default=DEFAULT.zero)
    p.add_argument("--micro-batch", type=int, default=DEFAULT.micro_batch)
    p.add_argument("--seq", type=int, default=DEFAULT.seq_len, help="training sequence length")
    p.add_argument("--recompute", choices=choices.RECOMPUTE_MODES, default=DEFAULT.recompute)
    p.add_argument("--no-sequence-parallel", action="store_true")
    p.add_argument("--lora-rank", type=int, default=DEFAULT.lora_rank)
    p.add_argument("--qlora", action="store_true")
    add_adapter_args(p, lora_rank=False)
    p.add_argument(
        "--log",
        metavar="FILE",
        help="a vLLM or SGLang start-up log: its numbers beside the prediction for the same flags, and any "
        "out-of-memory failure diagnosed",
    )
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


#: The flags of one phase, refused under the other (a value given for a phase not sized would be ignored).
_TRAIN_FLAGS = ("zero", "micro_batch", "seq", "recompute", "no_sequence_parallel", "lora_rank", "qlora")
_SERVE_FLAGS = ("batch", "input", "output", "kv_dtype", "kv_alloc", "block_size", "prefix_cache")


def run(args: argparse.Namespace) -> int:
    fill_from_config(args)
    refuse_attention_flags(args, "rabit memory", training=args.phase == "train")
    if args.log and args.phase == "train":
        die("rabit memory: error: argument --log: a start-up log describes a serving engine; use --phase serve")
    log = read_log(args.log, "--log", "memory")[0] if args.log else None
    if args.phase == "train":
        serve_flags = _SERVE_FLAGS + tuple(ADAPTER_FLAGS)
        refuse_unused(args, "rabit memory", dict.fromkeys(serve_flags, "with --phase train (a serving flag)"))
    else:
        train_flags = training_only(args, _TRAIN_FLAGS)
        refuse_unused(
            args, "rabit memory", dict.fromkeys(train_flags, "with --phase serve (a training flag: add --phase train)")
        )
    if args.phase == "train":
        cfg = config_from_args(
            args,
            phase="train",
            zero=args.zero,
            micro_batch=args.micro_batch,
            seq_len=args.seq,
            recompute=args.recompute,
            sequence_parallel=not args.no_sequence_parallel,
            lora_rank=args.lora_rank,
            qlora=args.qlora,
        )
        tm = training_memory(resolve(cfg))
        reason, steps = tm.reason, tm.steps
        payload: dict[str, Any] = {
            "phase": "train",
            "model": cfg.model_label,
            "gpu": cfg.gpu,
            "gpus": cfg.gpus,
            "tp": cfg.tp,
            "pp": cfg.pp,
            "dp": cfg.dp,
            "cp": cfg.cp,
            "zero": cfg.zero,
            "attention_kernel": cfg.attention_kernel,
            "trainable_params": tm.trainable_params,
            "weight_bytes_per_gpu": tm.weight_bytes_per_gpu,
            "gradient_bytes_per_gpu": tm.gradient_bytes_per_gpu,
            "optimizer_bytes_per_gpu": tm.optimizer_bytes_per_gpu,
            "activation_bytes_per_gpu": tm.activation_bytes_per_gpu,
            "overhead_bytes_per_gpu": tm.overhead_bytes_per_gpu,
            "total_bytes_per_gpu": tm.total_bytes_per_gpu,
            "capacity_bytes_per_gpu": tm.capacity_bytes_per_gpu,
            "usable_bytes_per_gpu": tm.usable_bytes_per_gpu,
            "fits": tm.fits,
            "reason": tm.reason,
        }
    else:
        cfg = config_from_args(args, adapters=adapters_from_args(args))
        if log is not None:  # the prediction for the log's own flags
            cfg = config_for_log(log, cfg)[0]
        r = serving_memory(cfg)
        reason, steps = r.reason, r.steps
        payload = {
            "phase": "serve",
            "model": cfg.model_label,
            "gpu": cfg.gpu,
            "gpus": cfg.gpus,
            "tp": cfg.tp,
            "pp": cfg.pp,
            **attention_payload(cfg),
            "replicas": r.replicas,
            "weights_bytes_per_gpu": r.weights_bytes_per_gpu,
            "kv_bytes_per_token": r.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": r.kv_bytes_per_token_per_gpu,
            "kv_bytes_per_seq_per_gpu": r.kv_bytes_per_seq_per_gpu,
            "kv_bytes_per_gpu": r.kv_bytes_per_gpu,
            "activation_bytes_per_gpu": r.activation_bytes_per_gpu,
            "overhead_bytes_per_gpu": r.overhead_bytes_per_gpu,
            "total_bytes_per_gpu": r.total_bytes_per_gpu,
            "capacity_bytes_per_gpu": r.capacity_bytes_per_gpu,
            "usable_bytes_per_gpu": r.usable_bytes_per_gpu,
            # a budget is never negative: what is missing is its own key
            "kv_budget_bytes_per_gpu": r.kv_budget_bytes_per_gpu,  # never negative: what is left, at least 0
            "shortfall_bytes_per_gpu": max(
                0.0,
                r.weights_bytes_per_gpu
                + r.overhead_bytes_per_gpu
                + r.activation_bytes_per_gpu
                - r.usable_bytes_per_gpu,
            ),
            "fits": r.fits,
            "reason": r.reason,
            "max_sequences": r.max_sequences,
            "max_sequences_contiguous": r.max_sequences_contiguous,
            **adapter_payload(cfg, r),
            "kv_tokens_per_replica": r.kv_tokens_per_replica,
            "kv_host_bytes_per_gpu": r.kv_host_bytes_per_gpu,
        }
    human = f"{reason}\n{steps_table(steps)}"
    if args.phase == "train":
        sp = training_memory_spread(cfg)
        with_ranges(payload, sp.ranges, ("total_bytes_per_gpu", "overhead_bytes_per_gpu"))
    else:
        sp = memory_spread(cfg)
        with_ranges(
            payload,
            sp.ranges,
            (
                "max_sequences",
                "kv_bytes_per_gpu",
                "kv_budget_bytes_per_gpu",
                "max_sequences_contiguous",
                "usable_bytes_per_gpu",
            ),
        )
    human += (
        "\n\nranges ("
        + payload["range_basis"]
        + "):\n"
        + "\n".join(range_line(k, sp.ranges[k], lambda x: f"{sig(x, 4)}") for k in payload["ranges"])
    )
    if log is not None:
        comp = compare_log(log, config_from_args(args))
        diag = diagnose_oom(log, config_from_args(args))
        payload["log"] = log.as_json()
        payload["log_vs_predicted"] = comp.ratios
        payload["log_comparison"] = comp.as_json()
        payload["oom"] = diag.as_json() if diag is not None else None
        human += "\n\n" + log_text(log, comp, diag)
    emit(payload, args.json, human)
    return 0


def log_text(log, comp, diag) -> str:
    """The log beside the prediction, the calibrated overhead and the diagnosis, as lines."""
    lines = [f"start-up log: {ENGINE_LABELS.get(log.engine, log.engine)} {log.version}"]
    if comp.applied:
        lines.append("flags from the log: " + ", ".join(comp.applied))
    lines.append(f"  {'number':<44} {'log':>14} {'RA-BIT':>14} {'log / RA-BIT':>12}")
    for k in NUMBERS:
        r = comp.ratios[k]
        lines.append(
            f"  {NUMBER_TEXT[k]:<44} {number_text(k, comp.measured[k]):>14} {number_text(k, comp.predicted[k]):>14} "
            f"{'' if r is None else f'x{r:.3f}':>12}"
        )
    if log.unrecognised:
        lines.append("not in the log: " + ", ".join(NUMBER_TEXT[k] for k in log.unrecognised))
    for name, v in comp.calibrated.items():
        lines.append(f"calibrated: {name} = {v:.3f} reproduces the log (--assume {name}={v:.3f})")
    lines += [f"note: {n}" for n in comp.notes]
    if diag is not None:
        lines.append(f"failure {diag.phase}, while {diag.stage}: {diag.cause}")
        lines += [f"  {i}. {r.change}  [{r.cost}]  {r.effect}" for i, r in enumerate(diag.remedies, start=1)]
    return "\n".join(lines)
