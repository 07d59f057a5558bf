"""``rabit train``: size a training or fine-tuning run: layout, runtime, GPU-hours, cost and goodput.

    rabit train --model M --gpu G --tokens T (--gpus N | --deadline-days D) [--precision bf16|fp8] [--seq S]
                [--global-batch-tokens K] [--layout TP,PP,DP[,EP[,CP]]] [--zero 0|1|2|3] [--cp N]
                [--recompute none|selective|full] [--vpp V] [--attention-kernel flash|eager] [--lora-rank R] [--qlora]
                [--tp-comm-overlap] [--json]

``--gpus`` plans on exactly that many GPUs (the fastest layout that fits); ``--deadline-days`` searches every
node-aligned count up to ``--max-gpus`` (32,768) for the smallest that finishes in time, expected failures
included; ``--layout`` evaluates a given layout instead of searching (its fifth number is the context-parallel
degree). ``--zero``, ``--recompute``, ``--micro-batch``, ``--cp`` and ``--vpp`` pin that knob; left out, the search
picks it (context parallelism only where each rank keeps at least 4,096 tokens of the sequence; the virtual pipeline
stages of the interleaved schedule also for a given ``--layout``).

JSON: ``runtime_s``, ``gpu_hours`` and ``step_s`` are failure-free; ``wall_clock_s``, ``gpu_hours_with_failures``
and ``cost_usd`` (on-demand catalog price under core.catalog.pricing's median policy, in ``price``) include expected failures, checkpoints and
restarts (``goodput`` = runtime_s / wall_clock_s). ``mfu`` is against the BF16 dense peak, also for FP8 runs.
"""

from __future__ import annotations

import argparse
import math
import re

from cli.common import (
    add_json,
    add_model_args,
    add_range_args,
    config_file,
    config_from_args,
    die,
    emit,
    fill_from_config,
    range_line,
    refuse_unused,
    with_ranges,
)
from core import catalog
from core.base import DAY_S, choices, fmt_bytes, fmt_num, fmt_time, sig
from core.config import DEFAULT, problems, resolve, whole_nodes_problem
from core.decision import training_ranges
from core.training import MAX_GPUS, Layout, TrainingGoal, TrainingPlan, deadline_choice, plan

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _tokens(text: str) -> float:
    """'1e12', '15T', '500B', '2.5e9' -> tokens."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a token count (e.g. 1e12, 15T, 500B)")
    v = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if v <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return v


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {kind.__name__}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError("must be positive")
        return v

    return parse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="training runtime, the fastest layout that fits, deadline search, goodput, cost")
    add_model_args(p)
    p.add_argument("--gpu", default=DEFAULT.gpu, help="catalog GPU slug (rabit gpus)")
    p.add_argument("--tokens", type=_tokens, required=True, help="training tokens (1e12, 15T, 500B)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpus", type=_positive(int), help="GPU budget: plan on exactly this many GPUs")
    g.add_argument("--deadline-days", type=_positive(float), help="find the smallest GPU count that finishes in time")
    p.add_argument(
        "--max-gpus",
        type=_positive(int),
        default=DEFAULT.training.max_gpus,
        help="largest count the deadline search tries",
    )
    p.add_argument("--gpus-per-node", type=int, help="default: the GPU's catalog node size")
    p.add_argument("--fabric", default=DEFAULT.fabric, help="inter-node fabric slug")
    p.add_argument("--precision", choices=choices.TRAIN_PRECISIONS, default=DEFAULT.train_precision)
    p.add_argument("--seq", type=_positive(int), default=DEFAULT.seq_len, help="sequence length")
    p.add_argument(
        "--global-batch-tokens",
        type=_positive(int),
        default=DEFAULT.global_batch_tokens,
        help="tokens per optimizer step",
    )
    p.add_argument("--layout", help="evaluate TP,PP,DP[,EP[,CP]] instead of searching")
    p.add_argument("--cp", type=int, help="pin context parallelism: ranks one sequence is split over (default: search)")
    p.add_argument(
        "--attention-kernel",
        choices=choices.ATTENTION_KERNELS,
        default=DEFAULT.attention_kernel,
        help="fused (flash, every current stack) or eager softmax whose scores are stored",
    )
    p.add_argument("--zero", type=int, choices=choices.ZERO_STAGES, help="pin the ZeRO stage (default: search)")
    p.add_argument("--recompute", choices=choices.RECOMPUTE_MODES, help="pin recomputation (default: search)")
    p.add_argument("--micro-batch", type=_positive(int), help="pin the micro-batch (default: search 1, 2, 4, 8)")
    p.add_argument(
        "--vpp",
        type=_positive(int),
        help="pin the virtual pipeline stages per GPU, interleaved 1F1B (default: search 1, 2, 4)",
    )
    p.add_argument("--lora-rank", type=int, default=DEFAULT.lora_rank, help="LoRA rank (0 = full training)")
    p.add_argument("--qlora", action="store_true", help="4-bit NF4 base under the LoRA adapters")
    p.add_argument("--no-sequence-parallel", action="store_true")
    p.add_argument(
        "--tp-comm-overlap",
        action="store_true",
        help="the run overlaps its TP collectives with the GEMMs (Megatron-LM --tp-comm-overlap, NeMo "
        "tp_comm_overlap): a share tp_overlap_train of them hides, at most the GEMM time",
    )
    p.add_argument(
        "--checkpoint-interval-s",
        type=_positive(float),
        default=DEFAULT.training.checkpoint_interval_s,
        help="default: Daly's optimum",
    )
    p.add_argument(
        "--batch-tolerance",
        type=float,
        default=0.1,
        help="how far the global batch may move to split evenly (default 0.1)",
    )
    add_range_args(p)
    add_json(p)
    p.set_defaults(func=run)


def _parse_layout(text: str) -> tuple[int, int, int, int, int]:
    parts = text.split(",")
    try:
        vals = [int(x) for x in parts]
    except ValueError:
        die(f"rabit train: error: argument --layout: '{text}' is not TP,PP,DP[,EP[,CP]] (whole numbers)")
    if len(vals) not in (3, 4, 5) or min(vals) < 1:
        die(
            f"rabit train: error: argument --layout: '{text}' is not TP,PP,DP[,EP[,CP]] (three to five positive "
            "numbers)"
        )
    vals += [1] * (5 - len(vals))
    return (vals[0], vals[1], vals[2], vals[3], vals[4])


def _fill_training_run(args: argparse.Namespace, explicit: bool) -> None:
    """What a ``--config FILE`` (or ``--analysis``) says about sizing the run (its ``training`` group, as the
    Training page reads it), for every flag left at its default: deadline (``targets.deadline_days``) or GPU
    budget, search ceiling, checkpoint interval, and the pinned ZeRO stage, recomputation and micro-batch."""
    cfg = config_file(args) or getattr(args, "_analysis_config", None)
    parser = getattr(args, "_parser", None)
    if cfg is None or parser is None:
        return
    t = cfg.training
    if not explicit:
        if t.mode == "deadline":
            args.gpus, args.deadline_days = None, cfg.targets.deadline_days
        else:
            args.gpus = t.budget_gpus or cfg.gpus
    if args.max_gpus == parser.get_default("max_gpus"):
        args.max_gpus = t.max_gpus
    if args.checkpoint_interval_s is None:
        args.checkpoint_interval_s = t.checkpoint_interval_s
    if t.pin:
        args.zero = cfg.zero if args.zero is None else args.zero
        args.recompute = args.recompute or cfg.recompute
        args.micro_batch = args.micro_batch or cfg.micro_batch


def run(args: argparse.Namespace) -> int:
    """``rabit train``: the flags checked, the run planned, its figures and their ranges printed."""
    # the search picks ZeRO, recomputation and micro-batch unless a flag pins them, as the Training page does
    # unless its "use the sidebar's" box is ticked: a config file does not pin them
    explicit = args.gpus is not None or args.deadline_days is not None or bool(args.layout)
    fill_from_config(args, skip=("zero", "recompute", "micro_batch"))
    _fill_training_run(args, explicit)
    if args.deadline_days is None:
        refuse_unused(
            args,
            "rabit train",
            {
                "max_gpus": "without --deadline-days: it caps the deadline search, and --gpus plans on "
                "exactly the GPUs given"
            },
        )
    if args.gpu not in catalog.gpus():
        die(f"rabit: error: argument --gpu: unknown GPU '{args.gpu}'; known: {', '.join(sorted(catalog.gpus()))}")
    node = args.gpus_per_node or catalog.gpu(args.gpu).gpus_per_node
    lay_t = _parse_layout(args.layout) if args.layout else None
    _check_layout_flags(args, lay_t)
    n = _checked_gpus(args, lay_t, node)
    cfg, layout = _pinned_layout(args, _training_config(args, n, node), lay_t, n, node)
    goal = TrainingGoal(
        deadline_s=args.deadline_days * DAY_S if args.deadline_days else None,
        gpus=None if (args.deadline_days and not lay_t) else n,
        max_gpus=args.max_gpus,
        layout=layout,
        zero=args.zero,
        recompute=args.recompute,
        micro_batch=args.micro_batch,
        cp=args.cp,
        vpp=args.vpp,
        batch_tolerance=args.batch_tolerance,
        checkpoint_interval_s=args.checkpoint_interval_s,
    )
    p = plan(resolve(cfg), goal)
    out, text = payload(cfg, p), human(p)
    rg = training_ranges(cfg, p)
    with_ranges(out, rg)
    if rg:
        text += (
            "\nranges ("
            + out["range_basis"]
            + "):\n"
            + "\n".join(
                range_line(k, r, fmt_time if k.endswith("_s") and "_per_" not in k else (lambda x: f"{sig(x, 4)}"))
                for k, r in rg.items()
            )
        )
    emit(out, args.json, text)
    return 0


def _check_layout_flags(args: argparse.Namespace, lay_t: tuple | None) -> None:
    """A GPU count, deadline or layout is given; the batch tolerance is a share; --cp and --vpp agree with
    --layout (exit 2 naming the flag)."""
    if lay_t is None and args.gpus is None and args.deadline_days is None:
        die("rabit train: error: argument --gpus: one of --gpus or --deadline-days (or --layout) is required")
    if not 0 <= args.batch_tolerance <= 1:
        die("rabit train: error: argument --batch-tolerance: must be between 0 and 1")
    if args.cp is not None and lay_t and args.cp != lay_t[4]:
        die(f"rabit train: error: argument --cp: {args.cp} but --layout says CP {lay_t[4]}")
    if args.vpp is not None and args.vpp > 1 and lay_t and lay_t[1] == 1:
        die(
            f"rabit train: error: argument --vpp: {args.vpp} virtual stages need pipeline parallelism (--layout PP > 1)"
        )


def _checked_gpus(args: argparse.Namespace, lay_t: tuple | None, node: int) -> int | None:
    """The GPU count the run fixes (the layout's, else --gpus; None for a deadline search), whole nodes and at most
    :data:`MAX_GPUS` (exit 2 naming the flag)."""
    n_layout = lay_t[0] * lay_t[1] * lay_t[2] * lay_t[4] if lay_t else None
    if lay_t and args.gpus is not None and args.gpus != n_layout:
        die(f"rabit train: error: argument --layout: TP x PP x DP x CP = {n_layout} GPUs but --gpus says {args.gpus}")
    n = n_layout or args.gpus
    problem = whole_nodes_problem(n, node) if n is not None else None
    if problem is not None:
        die(f"rabit train: error: argument {'--layout' if lay_t else '--gpus'}: {problem}")
    if n is not None and n > MAX_GPUS:
        die(f"rabit train: error: argument {'--layout' if lay_t else '--gpus'}: at most {MAX_GPUS:,} GPUs")
    return n


def _training_config(args: argparse.Namespace, n: int | None, node: int):
    """The shared config of the run: the cluster built from whole nodes (a budget below one node is goal.gpus)."""
    args.tp = args.pp = args.ep = 1
    args.gpus_cluster = n if (n is not None and n >= node) else node
    ns = argparse.Namespace(**{**vars(args), "gpus": args.gpus_cluster, "gpus_per_node": node})
    return config_from_args(
        ns,
        phase="train",
        train_precision=args.precision,
        seq_len=args.seq,
        global_batch_tokens=args.global_batch_tokens,
        train_tokens=args.tokens,
        lora_rank=args.lora_rank,
        qlora=args.qlora,
        sequence_parallel=not args.no_sequence_parallel,
        tp_comm_overlap=args.tp_comm_overlap,
        attention_kernel=args.attention_kernel,
        **({"zero": args.zero} if args.zero is not None else {}),
        **({"recompute": args.recompute} if args.recompute else {}),
        **({"micro_batch": args.micro_batch} if args.micro_batch else {}),
    )


def _pinned_layout(args: argparse.Namespace, cfg, lay_t: tuple | None, n: int | None, node: int) -> tuple:
    """(config, layout): with --layout, the config at its TP, PP, EP, CP (exit 2 on a layout the config refuses)
    and the pinned layout; else the config as it is, no layout, and --cp checked against the sequence."""
    if not lay_t:
        if args.cp is not None and (args.cp < 1 or args.cp > args.seq):
            die(f"rabit train: error: argument --cp: must be between 1 and the sequence length {args.seq:,}")
        return cfg, None
    assert n is not None
    tp, pp, dp, ep, cp = lay_t
    lay_cfg = cfg.with_(tp=tp, pp=pp, ep=ep, cp=cp)
    for prob in problems(lay_cfg) if n >= node else problems(lay_cfg.with_(gpus_per_node=n, nodes=1)):
        if prob.field in ("tp", "pp", "ep", "cp"):
            die(f"rabit train: error: argument --layout: {prob.message}")
    layout = Layout(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        cp=cp,
        micro_batch=lay_cfg.micro_batch,
        zero=lay_cfg.zero,
        recompute=lay_cfg.recompute,
    )
    return lay_cfg, layout


def _finite(x: float) -> float | None:
    """``x``, or None where it is infinite (a run without failures never checkpoints and is never interrupted)."""
    return x if math.isfinite(x) else None


def payload(cfg, p: TrainingPlan) -> dict:
    b, gp = p.best, p.goodput
    out: dict = {
        "model": cfg.model_label,
        "gpu": cfg.gpu,
        "mode": p.mode,
        "gpus": p.gpus,
        "fits": bool(b and b.fits),
        "message": p.message,
        "tokens": p.work.tokens,
        "precision": cfg.train_precision,
        "seq": cfg.seq_len,
        "attention_kernel": cfg.attention_kernel,
        "cp": None,
        "lora_rank": cfg.lora_rank,
        "qlora": cfg.qlora,
        "tp_comm_overlap": cfg.tp_comm_overlap,
        "model_flop_per_token": p.work.model_flop_per_token,
        "hardware_flop_per_token": p.work.hardware_flop_per_token,
        "total_model_flop": p.work.total_model_flop,
        "layout": None,
        "step_s": None,
        "runtime_s": None,
        "gpu_hours": None,
        "mfu": None,
        "goodput": None,
        "memory_bytes_per_gpu": None,
        "deadline_s": p.goal.deadline_s,
        "deadline_met": p.deadline_met,
        "price": (
            None
            if p.price is None
            else {
                "provider": p.price.provider,
                "kind": p.price.kind,
                "usd_per_gpu_hour": p.price.usd_per_gpu_hour,
                "as_of": p.price.as_of.isoformat(),
                "source": p.price.source,
            }
        ),
        "cost_usd": p.cost_usd,
    }
    if b is not None:
        lay = b.layout
        out.update(
            {
                "layout": {
                    "tp": lay.tp,
                    "pp": lay.pp,
                    "dp": lay.dp,
                    "ep": lay.ep,
                    "micro_batch": lay.micro_batch,
                    "zero": lay.zero,
                    "recompute": lay.recompute,
                    "vpp": lay.vpp,
                    "cp": lay.cp,
                },
                "cp": lay.cp,
                "step_s": b.step_s,
                "runtime_s": b.runtime_s,
                "gpu_hours": b.gpu_hours,
                "mfu": b.mfu,
                "hfu": b.hfu,
                "goodput": gp.goodput_frac if gp else None,
                "wall_clock_s": gp.wall_clock_s if gp else None,
                "gpu_hours_with_failures": gp.wall_clock_s * b.gpus / 3600 if gp else None,
                "expected_interruptions": gp.expected_interruptions if gp else None,
                # null without failures (failure_rate_per_gpu_hour 0): no interruptions, so no checkpoint interval
                "checkpoint_interval_s": _finite(gp.checkpoint_interval_s) if gp else None,
                "mtbf_s": _finite(gp.mtbf_s) if gp else None,
                "memory_bytes_per_gpu": b.memory_bytes_per_gpu,
                "capacity_bytes_per_gpu": b.capacity_bytes_per_gpu,
                "usable_bytes_per_gpu": b.usable_bytes_per_gpu,
                "global_batch_tokens": b.global_batch_tokens,
                "micro_batches": b.micro_batches,
                "steps": b.steps,
                "tokens_per_s": b.tokens_per_s,
                "bubble_frac": b.bubble_frac,
                "time_parts_s": {k: v for k, v in b.time_parts()},
            }
        )
    out["alternatives"] = [
        {
            "layout": a.layout.label(),
            "fits": a.fits,
            "runtime_s": a.runtime_s if a.fits else None,
            "memory_bytes_per_gpu": a.memory_bytes_per_gpu,
            "why": a.why,
        }
        for a in p.alternatives
    ]
    choice = deadline_choice(p.curve) if p.mode == "deadline" else None
    if choice is not None:
        out["deadline_choice"] = {
            "basis": choice.basis,
            "smallest_gpus": choice.smallest.gpus,
            "cheapest_gpus": choice.cheapest.gpus,
            "smallest_value": choice.smallest_value,
            "cheapest_value": choice.cheapest_value,
            "smallest_extra_frac": choice.extra_frac,
            "message": choice.message,
        }
    out["curve"] = [
        {
            "gpus": c.gpus,
            "runtime_s": c.runtime_s,
            "wall_clock_s": c.wall_clock_s,
            "gpu_hours": c.gpu_hours,
            "cost_usd": c.cost_usd,
            "meets_deadline": c.meets_deadline,
            "slower_reason": c.slower_reason or None,
        }
        for c in p.curve
        if c.feasible
    ]
    return out


def human(p: TrainingPlan) -> str:
    lines = [p.message]
    choice = deadline_choice(p.curve) if p.mode == "deadline" else None
    if choice is not None:
        lines.append(choice.message)
    b, gp = p.best, p.goodput
    lines.append(
        f"work: {sig(p.work.model_flop_per_token)} FLOP/token x {fmt_num(p.work.tokens)} tokens = "
        f"{sig(p.work.total_model_flop)} FLOP"
    )
    if b is None or gp is None:
        return "\n".join(lines)
    lines += [
        f"layout: {b.layout.label()} on {b.gpus:,} GPU{'' if b.gpus == 1 else 's'} "
        f"({'fits' if b.fits else 'DOES NOT FIT'}: "
        f"{fmt_bytes(b.memory_bytes_per_gpu)} of {fmt_bytes(b.capacity_bytes_per_gpu)} per GPU)",
        f"step: {fmt_time(b.step_s)} for {b.global_batch_tokens:,} tokens ({b.micro_batches} micro-batches); "
        f"{b.steps:,} steps",
        f"runtime: {fmt_time(b.runtime_s)} without failures, {fmt_time(gp.wall_clock_s)} expected with failures "
        f"(goodput {gp.goodput_frac:.1%}, {sig(gp.expected_interruptions)} interruptions)",
        f"GPU-hours: {b.gpu_hours:,.0f}; MFU {b.mfu:.1%} (HFU {b.hfu:.1%})",
        "cost: "
        + (
            f"${p.cost_usd:,.0f} at ${sig(p.price.usd_per_gpu_hour, 6)}/GPU-h ({p.price.provider}, {p.price.as_of})"
            if p.cost_usd is not None and p.price is not None
            else "no catalog price for this GPU"
        ),
        "time per step:",
    ]
    lines += [f"  {k:<20} {fmt_time(v):>10}" for k, v in b.time_parts() if v > 0]
    if p.alternatives:
        lines.append("alternatives:")
        lines += [f"  {a.layout.label():<58} {a.why}" for a in p.alternatives[1:8]]
    if p.deadline_met is not None:
        lines.append(f"deadline met: {'yes' if p.deadline_met else 'no'}")
    return "\n".join(lines)
