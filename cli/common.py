"""Shared argument handling for every ``rabit`` subcommand.

Contract: flags and JSON keys named in the issues are stable; add, don't rename.
Bad arguments exit with code 2 and one line on stderr naming the argument.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from core import catalog
from core.base import (
    FLAG_DOMAINS,
    MAX_CONFIG_BYTES,
    PayloadError,
    WorkBudget,
    choices,
    decode_text,
    parse_json,
    read_regular_file,
)
from core.catalog import from_hf_config
from core.config import (
    DEFAULT,
    GROUPS,
    RabitConfig,
    default_lengths,
    describe_validation_error,
    error_text,
    problems,
    split_nodes,
)

#: config field -> CLI flag, for error messages that name the argument.
FLAG_OF = {
    "disagg.prefill_tp": "--prefill-tp",
    "disagg.decode_tp": "--decode-tp",
    "model": "--model",
    "custom_model": "--model-config",
    "gpu": "--gpu",
    "gpus_per_node": "--gpus",
    "nodes": "--gpus",
    "tp": "--tp",
    "pp": "--pp",
    "ep": "--ep",
    "cp": "--cp",
    "dcp": "--dcp",
    "dp_attention": "--dp-attention",
    "kv_offload_gib": "--kv-offload-gib",
    "attention_kernel": "--attention-kernel",
    "batch": "--batch",
    "input_tokens": "--input",
    "output_tokens": "--output",
    "weights": "--weights",
    "kv_dtype": "--kv-dtype",
    "fabric": "--fabric",
    "zero": "--zero",
    "micro_batch": "--micro-batch",
    "seq_len": "--seq",
    "recompute": "--recompute",
    "lora_rank": "--lora-rank",
    "qlora": "--qlora",
    "prefix_cache_frac": "--prefix-cache",
    "block_size": "--block-size",
    "train_precision": "--precision",
    "train_tokens": "--tokens",
    "global_batch_tokens": "--global-batch-tokens",
    "kv_alloc": "--kv-alloc",
    # goals, constraints and simulation specs
    "rate_per_s": "--rate",
    "num_requests": "--requests",
    "think_s": "--think",
    "duration_s": "--duration",
    "timeout_s": "--timeout",
    "spec_k": "--spec-k",
    "spec_alpha": "--spec-alpha",
    "draft_model": "--draft-model",
    "spec_method": "--spec",
    "deadline_s": "--deadline-days",
    "checkpoint_interval_s": "--checkpoint-interval-s",
    "adapters": "--adapters",
    "adapters.max_lora_rank": "--max-lora-rank",
    "adapters.max_cpu_loras": "--max-cpu-loras",
    "adapters.max_loras": "--max-loras",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr and exit code 2.

    Every value is checked as it is parsed: an empty value is an error (never a silent default), a
    number must be finite, and a flag with a domain in :data:`core.base.limits.FLAG_DOMAINS` must lie in it;
    the message names the flag as typed.
    """

    def error(self, message: str) -> NoReturn:
        die(f"{self.prog}: error: {message}")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, recording on the namespace (``_given``) the dests of the flags given on the line (a
        subcommand's parser adds its own), so a flag the chosen mode ignores can be refused (:func:`refuse_unused`)."""
        self._given: set[str] = set()
        ns, rest = super().parse_known_args(args, namespace)
        ns._given = set(getattr(ns, "_given", ())) | self._given
        return ns, rest

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.nargs not in (argparse.PARSER, argparse.REMAINDER) and action.option_strings:
            given_here: set[str] = getattr(self, "_given", set())
            given_here.add(action.dest)
        return super()._get_values(action, arg_strings)

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if action.nargs in (argparse.PARSER, argparse.REMAINDER):  # a subcommand's own parser checks its values
            return super()._get_value(action, arg_string)
        flag = "/".join(action.option_strings) or action.dest
        if isinstance(arg_string, str) and not arg_string.strip():
            self.error(f"argument {flag}: expected a value, got an empty string")
        value = super()._get_value(action, arg_string)
        if isinstance(value, float) and not math.isfinite(value):
            self.error(f"argument {flag}: {arg_string!r} is not a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
            self.error(f"argument {flag}: {arg_string!r} is out of range")
        dom = FLAG_DOMAINS.get(f"{self.prog.split()[-1]}.{action.dest}") or FLAG_DOMAINS.get(action.dest)
        if dom is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = dom.problem(value)
            if problem is not None:
                self.error(f"argument {flag}: {problem}")
        return value


#: Problems about two inputs at once (``core.config.checks``): both flags are named, never only the first.
_JOINT = (("TP x PP", "--tp/--pp"), ("input + output", "--input/--output"))


def given(args: argparse.Namespace, dest: str) -> bool:
    """True when the flag of ``dest`` was given on the command line (not its default, nor a ``--config`` value)."""
    return dest in getattr(args, "_given", ())


def flag_of_dest(args: argparse.Namespace, dest: str) -> str:
    """The long flag of an argparse ``dest`` in the subcommand that parsed ``args`` (``kv_pool_tokens`` ->
    ``--kv-pool-tokens``)."""
    parser = getattr(args, "_parser", None)
    for a in getattr(parser, "_actions", ()):
        if a.dest == dest and a.option_strings:
            return next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
    return "--" + dest.replace("_", "-")


def refuse_unused(args: argparse.Namespace, prog: str, unused: dict[str, str]) -> None:
    """Exit 2 when a flag the chosen mode does not read was given: ``unused`` maps each such flag's dest to why
    (``"with --arrival closed: closed-loop users send the next request after --think"``)."""
    for dest, why in unused.items():
        if given(args, dest):
            die(f"{prog}: error: argument {flag_of_dest(args, dest)}: not used {why}")


def named(args: argparse.Namespace, flag: str) -> str:
    """What the user gave for ``flag``: the flag itself, or ``--config FILE: field`` when the value came from the
    config file (:func:`fill_from_config`), so a message names the thing the user wrote."""
    dest = flag.lstrip("-").split("/")[0].replace("-", "_")
    src = getattr(args, "_from_config", {})
    if dest in src and not given(args, dest):
        return f"--config: {getattr(args, 'config', None) or 'the config file'}: {src[dest]}"
    return flag


def problem_flag(field: str, message: str) -> str:
    """The flag(s) a validation problem is about: ``TP x PP = 16 needs more GPUs`` names --tp/--pp."""
    for words, flags in _JOINT:
        if words in message:
            return flags
    return FLAG_OF.get(field, "--" + field.replace("_", "-"))


def flag_for(field: str, parser: argparse.ArgumentParser | None = None) -> str | None:
    """The CLI flag of a config or goal field, for a message; None when the subcommand has no such flag (the
    message then names the field where the user wrote it, never an argument that does not exist)."""
    flag = FLAG_OF.get(field) or "--" + field.replace("_", "-")
    if parser is not None:
        known = {o for a in parser._actions for o in a.option_strings}
        if flag not in known:
            return None
    return flag


def die(message: str, code: int = 2) -> NoReturn:
    print(message.replace("\n", " "), file=sys.stderr)
    raise SystemExit(code)


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="catalog model slug (rabit models)")
    g.add_argument("--model-config", metavar="PATH", help="a Hugging Face config.json instead of --model")


#: Every default below is the shared config's (core.config.DEFAULT), so the CLI and the dashboard agree.
WEIGHT_CHOICES = (*choices.WEIGHT_FORMATS, *choices.WEIGHT_ALIASES)


def add_cluster_args(p: argparse.ArgumentParser, *, gpus_required: bool = False) -> None:
    p.add_argument("--gpu", default=DEFAULT.gpu, help=f"catalog GPU slug (rabit gpus; default {DEFAULT.gpu})")
    p.add_argument(
        "--gpus", type=int, required=gpus_required, help="total GPUs (whole nodes beyond one node; default TP x PP)"
    )
    p.add_argument("--gpus-per-node", type=int, help="default: the GPU's catalog node size")
    p.add_argument("--fabric", default=DEFAULT.fabric, help="inter-node fabric slug")
    p.add_argument("--tp", type=int, help=f"tensor parallelism (default {DEFAULT.tp}, at most the GPUs given)")
    p.add_argument("--pp", type=int, default=DEFAULT.pp, help=f"pipeline stages (default {DEFAULT.pp})")
    p.add_argument("--ep", type=int, default=DEFAULT.ep, help=f"expert parallelism (default {DEFAULT.ep})")


def add_length_args(p: argparse.ArgumentParser, what: str = "") -> None:
    """--input / --output, unset by default: :func:`fill_lengths` fits the shared defaults to the model's
    context (core.config.default_lengths)."""
    for flag, default in (("--input", DEFAULT.input_tokens), ("--output", DEFAULT.output_tokens)):
        p.add_argument(
            flag,
            type=int,
            default=None,
            help=f"{what}{flag[2:]} tokens (default {default:,}, or what fits the model's context)",
        )


def _max_context(args: argparse.Namespace) -> int | None:
    """The context of the model the flags (or --config / --analysis) name; None when it is not known yet (an
    unknown model is refused later, naming its flag)."""
    cm = None
    if getattr(args, "model_config", None):
        cm = custom_model(args.model_config)
    elif getattr(args, "_custom_model", None) is not None:
        cm = args._custom_model
    if cm is not None:
        return cm.max_context
    slug = getattr(args, "model", None) or DEFAULT.model
    return catalog.model(slug).max_context if slug in catalog.models() else None


def fill_lengths(args: argparse.Namespace, trace: tuple[tuple[int, int], ...] | None = None) -> argparse.Namespace:
    """Set --input / --output where the user left them unset: the shared defaults where they fit the model's
    context, else the context split (core.config.default_lengths). With a ``trace`` the lengths are its own
    (mean prompt and output tokens): the flags it makes irrelevant are neither used nor checked."""
    if not hasattr(args, "input"):
        return args
    if trace:
        i = max(1, round(sum(a for a, _ in trace) / len(trace)))
        o = max(1, round(sum(b for _, b in trace) / len(trace)))
        ctx = _max_context(args)
        if ctx and i + o > ctx:  # the trace's rows are checked against the context, naming --trace and the row
            i, o = default_lengths(ctx, None, None)
        args.input, args.output = i, o
        return args
    if args.input is None or args.output is None:
        args.input, args.output = default_lengths(_max_context(args), args.input, args.output)
    return args


def add_attention_args(p: argparse.ArgumentParser) -> None:
    """Attention parallelism and the KV tier (serving), and the training attention kernel: the estimate subcommands'
    shared flags (defaults: the shared config's)."""
    p.add_argument(
        "--attention-kernel",
        choices=choices.ATTENTION_KERNELS,
        default=DEFAULT.attention_kernel,
        help="training: fused (flash) kernel, or the eager softmax whose scores are stored",
    )
    p.add_argument(
        "--dp-attention",
        action="store_true",
        help="data-parallel attention over the TP group (MLA / MoE models; each rank holds its own sequences' KV)",
    )
    p.add_argument(
        "--cp",
        type=int,
        default=DEFAULT.cp,
        help="context parallelism: TP groups a prompt's prefill is split over (ring attention), KV split alike",
    )
    p.add_argument(
        "--dcp",
        type=int,
        default=DEFAULT.dcp,
        help="decode context parallelism: TP ranks the KV cache is split over (vLLM -dcp; divides TP)",
    )
    p.add_argument(
        "--kv-offload-gib",
        type=float,
        default=DEFAULT.kv_offload_gib,
        help="KV tier in host memory per replica [GiB] (vLLM --kv-offloading-size)",
    )


#: The estimate subcommands' attention flags that only serving reads, and the one only training reads (refused
#: under the other, :func:`refuse_unused`: nothing is ignored silently).
SERVING_ATTENTION_FLAGS = ("dp_attention", "dcp", "kv_offload_gib")
#: Serving engines always run a fused attention kernel (vLLM's FlashAttention / FlashInfer backends, SGLang's
#: FlashInfer / FlashAttention-3, TensorRT-LLM's fused multi-head attention): the kernel choice sizes training.
KERNEL_WHY = "when serving (the engines always run a fused attention kernel; the choice sizes training)"


def refuse_attention_flags(args: argparse.Namespace, prog: str, training: bool, search: bool = False) -> None:
    """Exit 2 naming the flag when an attention flag the sized phase does not read was given (``search``: the
    training deadline search, which picks the context-parallel size itself)."""
    if training:
        why = "in training (a serving flag: training splits attention by --cp only)"
        unused = dict.fromkeys(SERVING_ATTENTION_FLAGS, why)
        if search:
            why = "with --train (a serving flag: the deadline search picks the context-parallel size itself)"
            unused = dict.fromkeys((*SERVING_ATTENTION_FLAGS, "cp"), why)
        refuse_unused(args, prog, unused)
    else:
        refuse_unused(args, prog, {"attention_kernel": KERNEL_WHY})


def attention_payload(cfg: RabitConfig) -> dict[str, Any]:
    """The attention-parallelism keys of every estimate's JSON (contract: ``cp``, ``dcp``, ``dp_attention``,
    ``kv_offload_bytes``)."""
    return {
        "cp": cfg.cp,
        "dcp": cfg.dcp,
        "dp_attention": cfg.dp_attention,
        "kv_offload_bytes": cfg.kv_offload_bytes,
    }


def add_weight_kv_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", choices=WEIGHT_CHOICES, default=DEFAULT.weights, help="weight format (fp4 = nvfp4)")
    p.add_argument("--kv-dtype", choices=choices.KV_DTYPES, default=DEFAULT.kv_dtype)
    p.add_argument("--block-size", type=int, default=DEFAULT.block_size, help="paged KV block [tokens]")


def add_serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=DEFAULT.batch, help=f"concurrent sequences (default {DEFAULT.batch})")
    add_length_args(p)
    add_weight_kv_args(p)
    p.add_argument("--kv-alloc", choices=choices.KV_ALLOCS, default=DEFAULT.kv_alloc)
    p.add_argument(
        "--prefix-cache",
        type=float,
        default=DEFAULT.prefix_cache_frac,
        help="share of the prompt that is a cached prefix",
    )


def add_adapter_args(p: argparse.ArgumentParser, *, lora_rank: bool = True) -> None:
    """Multi-LoRA serving (the config's ``adapters`` group): ``--adapters N --lora-rank R [--lora-targets ...]
    [--adapter-skew S] [--max-loras K] [--max-lora-rank R] [--max-cpu-loras C]``; ``lora_rank=False`` where the
    subcommand already has ``--lora-rank`` (training's: with ``--adapters`` it is the adapters' rank)."""
    g = p.add_argument_group("adapters (multi-LoRA serving over one base)")
    g.add_argument("--adapters", type=int, help="adapters served over the base model (0: the base alone)")
    if lora_rank:
        g.add_argument("--lora-rank", type=int, help="the adapters' rank (default 16)")
    g.add_argument("--lora-targets", choices=choices.LORA_TARGETS, help="layers the adapters target (default all)")
    g.add_argument("--adapter-skew", type=float, help="Zipf exponent of the traffic over the adapters (0: uniform)")
    g.add_argument("--max-loras", type=int, help="GPU slots: distinct adapters per batch (default: the engine's)")
    g.add_argument("--max-lora-rank", type=int, help="rank of every slot (default: the engine's, or the adapters')")
    g.add_argument("--max-cpu-loras", type=int, help="adapters held in host memory (default: the engine's)")
    g.add_argument(
        "--fully-sharded-loras",
        dest="fully_sharded_loras",
        action="store_const",
        const=True,
        help="TP splits both A and B of every adapter (vLLM --fully-sharded-loras)",
    )


#: The adapter flags, by argparse dest -> the adapters group's field.
ADAPTER_FLAGS = {
    "adapters": ("count", "--adapters"),
    "lora_targets": ("targets", "--lora-targets"),
    "adapter_skew": ("skew", "--adapter-skew"),
    "max_loras": ("max_loras", "--max-loras"),
    "max_lora_rank": ("max_lora_rank", "--max-lora-rank"),
    "max_cpu_loras": ("max_cpu_loras", "--max-cpu-loras"),
    "fully_sharded_loras": ("fully_sharded", "--fully-sharded-loras"),
}


def adapters_from_args(args: argparse.Namespace):
    """The adapters group: the ``--config`` file's (or the default), with each adapter flag given on top (exit 2
    naming the flag). ``--lora-rank`` is the adapters' rank when ``--adapters`` is given (or the file serves
    adapters) and the phase is serving."""
    base = (config_file(args) or getattr(args, "_analysis_config", None) or DEFAULT).adapters
    changes: dict[str, Any] = {
        field: getattr(args, dest)
        for dest, (field, _) in ADAPTER_FLAGS.items()
        if getattr(args, dest, None) is not None
    }
    count = changes.get("count", base.count)
    rank = getattr(args, "lora_rank", None)
    if count and rank and getattr(args, "phase", "serve") == "serve":
        changes["ranks"] = (rank,)
    if not changes:
        return base
    try:
        return base.with_(**changes)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        flag = next((f for fld, f in ADAPTER_FLAGS.values() if fld == field), "--lora-rank")
        die(f"rabit: error: argument {flag}: {error_text(e)}")


def training_only(args: argparse.Namespace, flags: tuple[str, ...]) -> tuple[str, ...]:
    """The training flags (argparse dests) a serving command refuses: ``--lora-rank`` is kept when adapters are served
    (it is then their rank)."""
    return tuple(f for f in flags if f != "lora_rank" or not adapters_from_args(args).enabled)


def adapter_payload(cfg: RabitConfig, mem) -> dict[str, Any]:
    """The JSON keys of the adapters' memory (nothing without adapters: the keys of the base alone are unchanged)."""
    if not cfg.adapters.enabled:
        return {}
    a = cfg.adapters
    return {
        "adapters": a.count,
        "adapter_ranks": list(a.ranks),
        "adapter_targets": a.targets,
        "adapter_bytes": mem.adapter_bytes,
        "adapter_set_bytes": mem.adapter_set_bytes,
        "adapter_reserved_bytes_per_gpu": mem.adapter_reserved_bytes_per_gpu,
        "max_loras": mem.adapter_slots,
        "max_lora_rank": mem.adapter_slot_rank,
        "max_cpu_loras": mem.adapter_host_slots,
        "adapter_host_cache_bytes": mem.adapter_host_cache_bytes,
    }


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def read_file(path: str, flag: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """UTF-8 text of a regular file (a byte-order mark is dropped), or exit 2 naming ``flag``."""
    try:
        return decode_text(read_regular_file(path, max_bytes), path, max_bytes)
    except OSError as exc:
        die(f"rabit: error: argument {flag}: cannot read {path}: {exc.strerror}")
    except PayloadError as exc:
        die(f"rabit: error: argument {flag}: {exc}")


def read_log(path: str, flag: str, command: str):
    """A vLLM or SGLang start-up log from a file, parsed (:func:`core.operations.parse_log`), or exit 2 with one
    line naming ``flag``: an unreadable path, a file over the size limit, text that is not a start-up log."""
    from core.base import MAX_LOG_BYTES
    from core.operations import LogError, parse_log

    try:
        data = read_regular_file(path, MAX_LOG_BYTES)
    except OSError as exc:
        die(f"rabit {command}: error: argument {flag}: cannot read {path}: {exc.strerror}")
    except PayloadError as exc:
        die(f"rabit {command}: error: argument {flag}: {exc}")
    try:
        return parse_log(data, Path(path).name), data.decode("utf-8", "replace")
    except LogError as exc:
        die(f"rabit {command}: error: argument {flag}: {exc}")


def custom_model(path: str | None):
    if path is None:
        return None
    try:
        data = parse_json(read_file(path, "--model-config"), what=path)
    except PayloadError as exc:
        die(f"rabit: error: argument --model-config: {exc}")
    try:
        return from_hf_config(data, slug=Path(path).stem.lower())
    except (ValueError, ValidationError) as exc:
        msg = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        die(f"rabit: error: argument --model-config: {msg}")


def default_tp(args: argparse.Namespace) -> int:
    """``--tp``, else the shared default (TP 8) capped by the GPUs given (``--gpus 1`` runs at TP 1)."""
    tp = getattr(args, "tp", None)
    if tp is not None:
        return int(tp)
    gpus = getattr(args, "gpus", None)
    return DEFAULT.tp if gpus is None or gpus < 1 else min(DEFAULT.tp, gpus)


def _cluster_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The GPU, its nodes and the replica's layout from the flags (the GPUs from the layout when --gpus is not
    given); exit 2 on an unknown GPU or a count that does not split into nodes."""
    gpu_slug = getattr(args, "gpu", DEFAULT.gpu)
    if gpu_slug not in catalog.gpus():
        die(f"rabit: error: argument --gpu: unknown GPU '{gpu_slug}'; known: {', '.join(sorted(catalog.gpus()))}")
    node = args.gpus_per_node if args.gpus_per_node is not None else catalog.gpu(gpu_slug).gpus_per_node
    tp = default_tp(args)
    total = (
        args.gpus
        if args.gpus is not None
        else max(1, tp * getattr(args, "pp", DEFAULT.pp) * (getattr(args, "cp", None) or DEFAULT.cp))
    )
    if total < 1:
        die("rabit: error: argument --gpus: must be at least 1")
    try:
        gpn, nodes = split_nodes(total, node)
    except ValueError as exc:
        die(f"rabit: error: argument --gpus: {exc}")
    return {
        "gpu": gpu_slug,
        "gpus_per_node": gpn,
        "nodes": nodes,
        "fabric": args.fabric,
        "tp": tp,
        "pp": getattr(args, "pp", DEFAULT.pp),
        "ep": getattr(args, "ep", DEFAULT.ep),
    }


def _model_fields(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """The model (a catalog slug, an uploaded config.json, or the --analysis config's) and the --analysis config's
    assumptions."""
    cm = custom_model(getattr(args, "model_config", None)) or getattr(args, "_custom_model", None)
    saved = getattr(args, "_analysis_config", None)  # --analysis: what no flag carries
    if cm is not None:
        data["custom_model"] = cm
    elif getattr(args, "model", None):
        data["model"] = args.model
    elif saved is not None and saved.custom_model is not None:
        data["custom_model"] = saved.custom_model
    if saved is not None:
        data["assumptions"] = saved.assumptions


def _flag_fields(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """The workload, precision and attention flags that were given."""
    for attr, field in (
        ("batch", "batch"),
        ("input", "input_tokens"),
        ("output", "output_tokens"),
        ("kv_dtype", "kv_dtype"),
        ("kv_alloc", "kv_alloc"),
        ("block_size", "block_size"),
        ("prefix_cache", "prefix_cache_frac"),
        ("attention_kernel", "attention_kernel"),
        ("cp", "cp"),
        ("dcp", "dcp"),
        ("kv_offload_gib", "kv_offload_gib"),
    ):
        if getattr(args, attr, None) is not None:
            data[field] = getattr(args, attr)
    if getattr(args, "dp_attention", False):
        data["dp_attention"] = True
    if getattr(args, "weights", None):
        data["weights"] = choices.WEIGHT_ALIASES.get(args.weights, args.weights)


def config_from_args(args: argparse.Namespace, **extra: Any) -> RabitConfig:
    """Build and validate the shared config; exit 2 naming the flag on any problem."""
    fill_lengths(args)
    data = _cluster_fields(args)
    _model_fields(args, data)
    _flag_fields(args, data)
    data.update(extra)
    if hasattr(args, "assume"):
        data["assumptions"] = assumptions_from_args(args)
    try:
        cfg = RabitConfig.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        if field in FLAG_OF:
            die(f"rabit: error: argument {named(args, FLAG_OF[field])}: {error_text(e)}")
        where = f"--config: {args.config}: " if getattr(args, "config", None) else ""
        die(f"rabit: error: {where}{describe_validation_error(exc)}")
    probs = [p for p in problems(cfg) if p.blocking]
    if probs:
        p = probs[0]
        die(f"rabit: error: argument {named(args, problem_flag(p.field, p.message))}: {p.message}")
    return cfg


def non_finite(x: Any, path: str = "") -> str | None:
    """The JSON path of the first NaN or infinity in ``x`` (None when every number is finite)."""
    if isinstance(x, float) and not math.isfinite(x):
        return path or "value"
    if isinstance(x, dict):
        for k, v in x.items():
            p = non_finite(v, f"{path}.{k}" if path else str(k))
            if p:
                return p
    if isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            p = non_finite(v, f"{path}[{i}]")
            if p:
                return p
    return None


def _null_non_finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _null_non_finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_null_non_finite(v) for v in x]
    return x


def emit(payload: dict[str, Any], as_json: bool, human: str) -> None:
    """Print the result. A NaN or infinity is never written (not as null either): the inputs that led to
    it are out of range, which is exit 2 with the key named."""
    if "ranges" in payload:  # a range bound without a finite value is null ("unbounded"), by the ranges contract
        payload = {**payload, "ranges": _null_non_finite(payload["ranges"])}
    bad = non_finite(payload)
    if bad:
        die(
            f"rabit: error: the result '{bad}' is not a finite number; an input is out of range "
            "(check the efficiency assumptions, prices and sizes)"
        )
    if as_json:
        print(json.dumps(payload, indent=2, sort_keys=False, allow_nan=False))
    else:
        print(human)


#: A simulation from the command line may run longer than one on the shared server (core.base.limits), but not
#: unboundedly: 5 million requests take about a minute.
CLI_SIM_MAX_WALL_S = 600.0


def cli_budget(num_requests: int | None) -> WorkBudget:
    """The work budget of a CLI simulation: progress on stderr (a terminal only) every few seconds."""
    shown = [time.monotonic()]

    def progress(events: int, clock_s: float) -> None:
        now = time.monotonic()
        if now - shown[0] >= 2.0:
            shown[0] = now
            print(
                f"\rsimulating {num_requests or 0:,} requests: {events:,} events, simulated clock {clock_s:,.0f} s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    return WorkBudget(max_wall_s=CLI_SIM_MAX_WALL_S, progress=progress if sys.stderr.isatty() else None)


#: A search from the command line (``recommend``, ``next-experiment``) may also run longer than on the shared
#: server (core.base.limits.SEARCH_MAX_WALL_S, NEXT_MAX_WALL_S), but not unboundedly.
CLI_SEARCH_MAX_WALL_S = 600.0


def cli_search_budget(kind: str = "recommend") -> WorkBudget:
    """The work budget of one CLI search: ``recommend`` (one optimizer search) or ``next-experiment``."""
    from core.base import next_budget, search_budget

    return (next_budget if kind == "next-experiment" else search_budget)(max_wall_s=CLI_SEARCH_MAX_WALL_S)


def steps_table(steps) -> str:
    rows = [f"  {s.label:<46} {s.shown():>16}" for s in steps]
    return "\n".join(rows)


# --- saved analyses: ``--analysis ID`` on every estimate subcommand ---------------------------------

#: Subcommands that take ``--analysis ID``.
ESTIMATE_COMMANDS = ("memory", "speed", "simulate", "train", "recommend", "next-experiment")

#: config field -> (flag dest, how the value becomes the flag's value), where the name differs.
_DEST_OF: dict[str, tuple[str, Any]] = {
    "input_tokens": ("input", None),
    "output_tokens": ("output", None),
    "prefix_cache_frac": ("prefix_cache", None),
    "spec_method": ("spec", None),
    "train_precision": ("precision", None),
    "seq_len": ("seq", None),
    "train_tokens": ("tokens", None),
    "sequence_parallel": ("no_sequence_parallel", lambda v: not v),
    "gpus_per_node": ("gpus_per_node", None),
}


def add_analysis_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--analysis",
        metavar="ID",
        help="start from a saved analysis (rabit analyses list); flags given alongside override its config",
    )


def open_store():
    """The store ``RABIT_DATABASE_URL`` names, else the embedded SQLite file; exit 2 if it cannot be opened."""
    from store import Store

    try:
        return Store()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the database is one line for the user
        die(f"rabit: error: cannot open the analysis store: {type(exc).__name__}: {str(exc).splitlines()[0]}")


def load_analysis(analysis_id: str, flag: str = "--analysis"):
    from store import NotFound

    try:
        return open_store().get(analysis_id)
    except NotFound:
        die(f"rabit: error: argument {flag}: no saved analysis with id '{analysis_id}' (rabit analyses list)")


def analysis_defaults(cfg: RabitConfig, p: argparse.ArgumentParser) -> dict[str, Any]:
    """The saved config as default values for the flags of parser ``p`` (flags given on the line win)."""
    dests = {a.dest for a in p._actions}
    out: dict[str, Any] = {"gpus": cfg.gpus}
    for field in RabitConfig.model_fields:
        dest, conv = _DEST_OF.get(field, (field, None))
        if field == "model" and cfg.custom_model is not None:
            continue
        if dest in dests and field not in ("custom_model", "assumptions", *GROUPS):  # a group is no one flag
            v = getattr(cfg, field)
            out[dest] = conv(v) if conv else v
    return {k: v for k, v in out.items() if k in dests}


def parse_with_analysis(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; with ``--analysis ID``, the saved analysis's config is the default of every flag.

    Flags given on the line win; flags the config answers are no longer required. The analysis's custom
    model and assumptions (which no flag carries) travel on ``args._analysis_config``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    aid = None
    for i, tok in enumerate(argv):
        if tok == "--analysis" and i + 1 < len(argv):
            aid = argv[i + 1]
        elif tok.startswith("--analysis="):
            aid = tok.split("=", 1)[1]
    sub = _subparser(parser, argv) if aid else None
    if aid is None or sub is None or "analysis" not in {a.dest for a in sub._actions}:
        return parser.parse_args(argv)
    a = load_analysis(aid)
    defaults = analysis_defaults(a.config, sub)
    for action in sub._actions:
        if action.dest in defaults:
            action.required = False
    for group in sub._mutually_exclusive_groups:
        if any(act.dest in defaults for act in group._group_actions):
            group.required = False
    sub.set_defaults(**defaults)
    args = parser.parse_args(argv)
    args._analysis_config = a.config
    return args


def _subparser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser | None:
    """The (sub-)subparser the command words of ``argv`` select (``speed``; ``analyses save``)."""
    p = parser
    for tok in argv:
        if tok.startswith("-"):
            continue
        nxt = None
        for act in p._actions:
            if isinstance(act, argparse._SubParsersAction) and tok in act.choices:
                nxt = act.choices[tok]
        if nxt is None:
            break
        p = nxt
    return p if p is not parser else None


# --- ranges, assumptions and a shared config file (every subcommand) -------------------------------------

#: argparse dest -> config field, for filling unset flags from ``--config FILE``.
CONFIG_DEST = {
    "gpu": "gpu",
    "gpus_per_node": "gpus_per_node",
    "fabric": "fabric",
    "tp": "tp",
    "pp": "pp",
    "ep": "ep",
    "cp": "cp",
    "dcp": "dcp",
    "dp_attention": "dp_attention",
    "kv_offload_gib": "kv_offload_gib",
    "attention_kernel": "attention_kernel",
    "batch": "batch",
    "input": "input_tokens",
    "output": "output_tokens",
    "weights": "weights",
    "kv_dtype": "kv_dtype",
    "kv_alloc": "kv_alloc",
    "block_size": "block_size",
    "prefix_cache": "prefix_cache_frac",
    "spec": "spec_method",
    "spec_k": "spec_k",
    "spec_alpha": "spec_alpha",
    "draft_model": "draft_model",
    "zero": "zero",
    "micro_batch": "micro_batch",
    "seq": "seq_len",
    "recompute": "recompute",
    "lora_rank": "lora_rank",
    "qlora": "qlora",
    "precision": "train_precision",
    "tokens": "train_tokens",
    "global_batch_tokens": "global_batch_tokens",
    "phase": "phase",
}


def add_range_args(p: argparse.ArgumentParser, *, config: bool = True) -> None:
    """``--assume NAME=VALUE`` (repeatable), ``--bound low|base|high`` and ``--config FILE`` (``config=False``:
    not ``--config``, for a subcommand whose config is a saved analysis's)."""
    g = p.add_argument_group("assumptions and ranges")
    g.add_argument(
        "--assume",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one efficiency assumption (rabit assumptions lists them); repeatable",
    )
    g.add_argument(
        "--bound",
        choices=["low", "base", "high"],
        default="base",
        help="evaluate with every assumption at its pessimistic (low) or optimistic (high) bound",
    )
    if config:
        g.add_argument("--config", metavar="FILE", help="a config JSON saved by the dashboard; flags given override it")
    p.set_defaults(_parser=p)


def parse_assume(items: list[str]) -> dict[str, float]:
    """``NAME=VALUE`` strings -> values, each checked against the assumption's domain (exit 2 naming it)."""
    from core.base import REGISTRY

    out: dict[str, float] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep:
            die(f"rabit: error: argument --assume: '{item}' is not NAME=VALUE")
        if name not in REGISTRY:
            die(f"rabit: error: argument --assume: unknown assumption '{name}'; known: {', '.join(REGISTRY)}")
        try:
            value = float(text)
        except ValueError:
            die(f"rabit: error: argument --assume: {name}: '{text}' is not a number")
        problem = REGISTRY[name].check(value)
        if problem:
            die(f"rabit: error: argument --assume: {problem}")
        out[name] = value
    return out


def check_range_args(args: argparse.Namespace) -> RabitConfig | None:
    """For a subcommand without a config of its own: check ``--assume`` (exit 2 naming the assumption) and read
    ``--config FILE`` (exit 2 naming the flag); the file's config with the assumptions in force, or None."""
    parse_assume(getattr(args, "assume", []))
    cfg = config_file(args)
    if cfg is None:
        return None
    return cfg.model_copy(update={"assumptions": assumptions_from_args(args)})


def config_file(args: argparse.Namespace) -> RabitConfig | None:
    """The config of ``--config FILE`` (exit 2 naming the flag when it cannot be read)."""
    from core.config import from_json

    path = getattr(args, "config", None)
    if not path:
        return None
    text = read_file(path, "--config")  # a regular UTF-8 file within its size limit
    try:
        return from_json(text)
    except ValueError as exc:
        die(f"rabit: error: argument --config: {path}: {exc}")


def _field(cfg: RabitConfig, path: str) -> Any:
    """A config value by field name or ``group.field`` path."""
    obj: Any = cfg
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def fill_from_config(
    args: argparse.Namespace, extra: dict[str, str] | None = None, skip: tuple[str, ...] = ()
) -> argparse.Namespace:
    """Check ``--assume`` early, and fill every flag left at its default from ``--config FILE``.

    ``extra``: the command's own flag -> config field (``group.field``) pairs, e.g. the workload flags of
    ``rabit simulate``. ``skip``: flags the file does not fill (e.g. knobs a search picks unless pinned).
    """
    parse_assume(getattr(args, "assume", []))
    cfg = config_file(args) or getattr(args, "_analysis_config", None)  # --config FILE, else --analysis ID
    parser = getattr(args, "_parser", None)
    if cfg is None or parser is None:
        return args
    from_config: dict[str, str] = getattr(args, "_from_config", {})
    for dest, field in {**CONFIG_DEST, **(extra or {})}.items():
        if dest in skip:
            continue
        if hasattr(args, dest) and getattr(args, dest) == parser.get_default(dest) and not given(args, dest):
            value = _field(cfg, field)
            if value != getattr(args, dest) and getattr(args, "config", None):
                from_config[dest] = field  # a message about this value names the file's field
            setattr(args, dest, value)
    args._from_config = from_config
    if hasattr(args, "gpus") and args.gpus == parser.get_default("gpus"):
        args.gpus = cfg.gpus
    if hasattr(args, "no_sequence_parallel") and not args.no_sequence_parallel:
        args.no_sequence_parallel = not cfg.sequence_parallel
    if getattr(args, "model", None) in (None, parser.get_default("model")) and not getattr(args, "model_config", None):
        args.model = cfg.model
        args._custom_model = cfg.custom_model
    return args


def assumptions_from_args(args: argparse.Namespace):
    """The assumptions in force: the config file's (or the defaults), at ``--bound``, then each ``--assume``."""
    from core.base import Assumptions

    cfg = config_file(args) or getattr(args, "_analysis_config", None)  # --config FILE, else --analysis ID
    a = cfg.assumptions if cfg is not None else Assumptions()
    bound = getattr(args, "bound", "base") or "base"
    if bound in ("low", "high"):  # argparse's choices: low, base, high
        a = a.at("low" if bound == "low" else "high")
    values = parse_assume(getattr(args, "assume", []))
    return a.with_(**values) if values else a


def with_ranges(
    payload: dict[str, Any], ranges: dict[str, Any], keys: tuple[str, ...] | None = None, prefix: str = ""
) -> dict[str, Any]:
    """Add ``ranges`` (headline key -> {"low", "high"}) and ``range_basis`` to a JSON payload (keys kept)."""
    from core.decision import basis_of, ranges_json

    chosen = {k: r for k, r in ranges.items() if keys is None or k in keys}
    payload.setdefault("ranges", {}).update(ranges_json(chosen, prefix=prefix))
    payload["range_basis"] = basis_of(chosen) if "range_basis" not in payload else payload["range_basis"]
    return payload


def range_line(label: str, r, fmt) -> str:
    """One human-readable line: value (low ... high)."""
    if r is None or r.basis == "none":
        return f"  {label}: {fmt(r.value) if r else '-'} (no assumption moves it)"
    return f"  {label}: {fmt(r.value)} (range {fmt(r.low)} ... {fmt(r.high)})"


def with_calibrated(
    payload: dict[str, Any], args: argparse.Namespace, cfg: RabitConfig, keys: dict[str, str]
) -> dict[str, Any]:
    """With ``--analysis ID`` whose measured runs calibrate ``cfg``'s GPU kind, add ``payload["calibrated"]``:
    ``{payload key: {"value", "low", "high", "basis": "calibrated", "n_runs", "factor", "metric"}}`` beside the
    analytical value and its heuristic range. ``keys``: payload key -> calibration metric (``ttft_s.p50``)."""
    aid = getattr(args, "analysis", None)
    if not aid:
        return payload
    from core.decision import calibrate_all, residuals_of

    runs = tuple(r.run for r in load_analysis(aid).runs)
    cals = calibrate_all(residuals_of(runs), cfg.gpu) if runs else {}
    out: dict[str, Any] = {}
    for key, metric in keys.items():
        v: Any = payload
        for part in key.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if metric in cals and isinstance(v, (int, float)) and v > 0:
            rg = cals[metric].range(float(v))
            out[key] = {
                "value": rg.value,
                "low": rg.low,
                "high": rg.high,
                "basis": rg.basis,
                "n_runs": rg.n_runs,
                "factor": cals[metric].factor,
                "metric": metric,
            }
    if out:
        payload["calibrated"] = out
    return payload


def add_ray_arg(p: argparse.ArgumentParser) -> None:
    """``--ray ADDRESS``: run the command's units on a Ray cluster (default: ``$RABIT_RAY_ADDRESS``, else local
    worker processes)."""
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the units on a Ray cluster: HOST:PORT, ray://HOST:10001, or auto (the one started on this machine); "
        "default: $RABIT_RAY_ADDRESS, else a pool of local processes",
    )


@contextlib.contextmanager
def executor_from_args(args: argparse.Namespace, workers: int | None = None) -> Iterator[Any]:
    """The executor ``--ray`` (or ``$RABIT_RAY_ADDRESS``) names, joined (exit 2 naming ``--ray`` when it cannot
    be), else the local pool of ``workers`` processes. While it runs, stdout is stderr (a Ray driver prints the
    cluster's events, a worker that died and was replaced, from a thread of its own); the cluster is left at the
    end, so only the command's own output reaches stdout."""
    from executors import RayUnavailable, joined

    with contextlib.redirect_stdout(sys.stderr):
        try:
            with joined(getattr(args, "ray", None), workers) as executor:
                yield executor
        except RayUnavailable as exc:
            die(f"rabit: error: argument --ray: {exc}")
