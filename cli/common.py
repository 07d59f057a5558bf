"""Shared argument handling for every ``rabit`` subcommand.

Contract: flags and JSON keys named in the issues are stable; add, don't rename.
Bad arguments exit with code 2 and one line on stderr naming the argument.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from core import catalog
from core.config import RabitConfig, describe_validation_error
from core.model import from_hf_config
from core.validate import problems

#: config field -> CLI flag, for error messages that name the argument.
FLAG_OF = {
    "model": "--model", "custom_model": "--model-config", "gpu": "--gpu", "gpus_per_node": "--gpus",
    "nodes": "--gpus", "tp": "--tp", "pp": "--pp", "ep": "--ep", "batch": "--batch", "input_tokens": "--input",
    "output_tokens": "--output", "weights": "--weights", "kv_dtype": "--kv-dtype", "fabric": "--fabric",
    "zero": "--zero", "micro_batch": "--micro-batch", "seq_len": "--seq", "recompute": "--recompute",
    "lora_rank": "--lora-rank", "qlora": "--qlora", "prefix_cache_frac": "--prefix-cache",
    "block_size": "--block-size", "train_precision": "--precision", "train_tokens": "--tokens",
    "global_batch_tokens": "--global-batch-tokens", "kv_alloc": "--kv-alloc",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        die(f"{self.prog}: error: {message}")


def die(message: str, code: int = 2) -> NoReturn:
    print(message.replace("\n", " "), file=sys.stderr)
    raise SystemExit(code)


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="catalog model slug (rabit models)")
    g.add_argument("--model-config", metavar="PATH", help="a Hugging Face config.json instead of --model")


def add_cluster_args(p: argparse.ArgumentParser, *, gpus_required: bool = False) -> None:
    p.add_argument("--gpu", default="h100-sxm", help="catalog GPU slug (rabit gpus)")
    p.add_argument("--gpus", type=int, required=gpus_required, help="total GPUs (whole nodes beyond one node)")
    p.add_argument("--gpus-per-node", type=int, help="default: the GPU's catalog node size")
    p.add_argument("--fabric", default="ib-ndr", help="inter-node fabric slug")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1)


def add_serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--input", type=int, default=1024, help="prompt tokens")
    p.add_argument("--output", type=int, default=256, help="output tokens")
    p.add_argument("--weights", choices=["bf16", "fp8", "int8", "int4", "fp4", "mxfp4", "nvfp4"], default="bf16",
                   help="weight format (fp4 = nvfp4)")
    p.add_argument("--kv-dtype", choices=["bf16", "fp8"], default="bf16")
    p.add_argument("--kv-alloc", choices=["paged", "contiguous"], default="paged")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--prefix-cache", type=float, default=0.0, help="share of the prompt that is a cached prefix")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def custom_model(path: str | None):
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        die(f"rabit: error: argument --model-config: cannot read {path}: {exc.strerror}")
    except json.JSONDecodeError as exc:
        die(f"rabit: error: argument --model-config: {path} is not JSON ({exc.msg} at line {exc.lineno})")
    try:
        return from_hf_config(data, slug=Path(path).stem.lower())
    except (ValueError, ValidationError) as exc:
        msg = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        die(f"rabit: error: argument --model-config: {msg}")


def config_from_args(args: argparse.Namespace, **extra: Any) -> RabitConfig:
    """Build and validate the shared config; exit 2 naming the flag on any problem."""
    gpu_slug = getattr(args, "gpu", "h100-sxm")
    if gpu_slug not in catalog.gpus():
        die(f"rabit: error: argument --gpu: unknown GPU '{gpu_slug}'; known: {', '.join(sorted(catalog.gpus()))}")
    node = args.gpus_per_node or catalog.gpu(gpu_slug).gpus_per_node
    total = args.gpus if args.gpus is not None else max(1, getattr(args, "tp", 1) * getattr(args, "pp", 1))
    if total < 1:
        die("rabit: error: argument --gpus: must be at least 1")
    if total <= node:
        gpn, nodes = total, 1
    else:
        if total % node:
            die(f"rabit: error: argument --gpus: {total} GPUs is not a whole number of {node}-GPU nodes")
        gpn, nodes = node, total // node
    data: dict[str, Any] = {
        "gpu": gpu_slug, "gpus_per_node": gpn, "nodes": nodes, "fabric": args.fabric,
        "tp": args.tp, "pp": args.pp, "ep": args.ep,
    }
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
    for attr, field in (("batch", "batch"), ("input", "input_tokens"), ("output", "output_tokens"),
                        ("kv_dtype", "kv_dtype"), ("kv_alloc", "kv_alloc"), ("block_size", "block_size"),
                        ("prefix_cache", "prefix_cache_frac")):
        if getattr(args, attr, None) is not None:
            data[field] = getattr(args, attr)
    if getattr(args, "weights", None):
        data["weights"] = "nvfp4" if args.weights == "fp4" else args.weights
    data.update(extra)
    if hasattr(args, "assume"):
        data["assumptions"] = assumptions_from_args(args)
    try:
        cfg = RabitConfig.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else ""
        die(f"rabit: error: argument {FLAG_OF.get(field, field)}: {e['msg']}")
    probs = [p for p in problems(cfg) if p.blocking]
    if probs:
        p = probs[0]
        die(f"rabit: error: argument {FLAG_OF.get(p.field, '--' + p.field)}: {p.message}")
    return cfg


def _clean(x: Any) -> Any:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def emit(payload: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        print(json.dumps(_clean(payload), indent=2, sort_keys=False))
    else:
        print(human)


def steps_table(steps) -> str:
    rows = [f"  {s.label:<46} {s.shown():>16}" for s in steps]
    return "\n".join(rows)


# --- saved analyses: ``--analysis ID`` on every estimate subcommand ---------------------------------

#: Subcommands that take ``--analysis ID``.
ESTIMATE_COMMANDS = ("memory", "speed", "simulate", "train", "recommend")

#: config field -> (flag dest, how the value becomes the flag's value), where the name differs.
_DEST_OF: dict[str, tuple[str, Any]] = {
    "input_tokens": ("input", None), "output_tokens": ("output", None), "prefix_cache_frac": ("prefix_cache", None),
    "spec_method": ("spec", None), "train_precision": ("precision", None), "seq_len": ("seq", None),
    "train_tokens": ("tokens", None), "sequence_parallel": ("no_sequence_parallel", lambda v: not v),
    "gpus_per_node": ("gpus_per_node", None),
}


def add_analysis_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--analysis", metavar="ID", help="start from a saved analysis (rabit analyses list); "
                                                    "flags given alongside override its config")


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
        if dest in dests and field not in ("custom_model", "assumptions"):
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
    if sub is None or "analysis" not in {a.dest for a in sub._actions}:
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
    "gpu": "gpu", "gpus_per_node": "gpus_per_node", "fabric": "fabric", "tp": "tp", "pp": "pp", "ep": "ep",
    "batch": "batch", "input": "input_tokens", "output": "output_tokens", "weights": "weights",
    "kv_dtype": "kv_dtype", "kv_alloc": "kv_alloc", "block_size": "block_size", "prefix_cache": "prefix_cache_frac",
    "spec": "spec_method", "spec_k": "spec_k", "spec_alpha": "spec_alpha", "draft_model": "draft_model",
    "zero": "zero", "micro_batch": "micro_batch", "seq": "seq_len", "recompute": "recompute",
    "lora_rank": "lora_rank", "qlora": "qlora", "precision": "train_precision", "tokens": "train_tokens",
    "global_batch_tokens": "global_batch_tokens", "phase": "phase",
}


def add_range_args(p: argparse.ArgumentParser) -> None:
    """``--assume NAME=VALUE`` (repeatable), ``--bound low|base|high`` and ``--config FILE``."""
    g = p.add_argument_group("assumptions and ranges")
    g.add_argument("--assume", action="append", default=[], metavar="NAME=VALUE",
                   help="set one efficiency assumption (rabit assumptions lists them); repeatable")
    g.add_argument("--bound", choices=["low", "base", "high"], default="base",
                   help="evaluate with every assumption at its pessimistic (low) or optimistic (high) bound")
    g.add_argument("--config", metavar="FILE", help="a config JSON saved by the dashboard; flags given override it")
    p.set_defaults(_parser=p)


def parse_assume(items: list[str]) -> dict[str, float]:
    """``NAME=VALUE`` strings -> values, each checked against the assumption's domain (exit 2 naming it)."""
    from core.assumptions import REGISTRY

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


def config_file(args: argparse.Namespace) -> RabitConfig | None:
    """The config of ``--config FILE`` (exit 2 naming the flag when it cannot be read)."""
    from core.config import from_json

    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        die(f"rabit: error: argument --config: cannot read {path}: {getattr(exc, 'strerror', exc)}")
    try:
        return from_json(text)
    except ValueError as exc:
        die(f"rabit: error: argument --config: {path}: {exc}")


def fill_from_config(args: argparse.Namespace) -> argparse.Namespace:
    """Check ``--assume`` early, and fill every flag left at its default from ``--config FILE``."""
    parse_assume(getattr(args, "assume", []))
    cfg = config_file(args)
    parser = getattr(args, "_parser", None)
    if cfg is None or parser is None:
        return args
    for dest, field in CONFIG_DEST.items():
        if hasattr(args, dest) and getattr(args, dest) == parser.get_default(dest):
            setattr(args, dest, getattr(cfg, field))
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
    from core.assumptions import Assumptions

    cfg = config_file(args) or getattr(args, "_analysis_config", None)  # --config FILE, else --analysis ID
    a = cfg.assumptions if cfg is not None else Assumptions()
    bound = getattr(args, "bound", "base") or "base"
    if bound != "base":
        a = a.at(bound)
    values = parse_assume(getattr(args, "assume", []))
    return a.with_(**values) if values else a


def with_ranges(payload: dict[str, Any], ranges: dict[str, Any], keys: tuple[str, ...] | None = None,
                prefix: str = "") -> dict[str, Any]:
    """Add ``ranges`` (headline key -> {"low", "high"}) and ``range_basis`` to a JSON payload (keys kept)."""
    from core.uncertainty import basis_of, ranges_json

    chosen = {k: r for k, r in ranges.items() if keys is None or k in keys}
    payload.setdefault("ranges", {}).update(ranges_json(chosen, prefix=prefix))
    payload["range_basis"] = basis_of(chosen) if "range_basis" not in payload else payload["range_basis"]
    return payload


def range_line(label: str, r, fmt) -> str:
    """One human-readable line: value (low ... high)."""
    if r is None or r.basis == "none":
        return f"  {label}: {fmt(r.value) if r else '-'} (no assumption moves it)"
    return f"  {label}: {fmt(r.value)} (range {fmt(r.low)} ... {fmt(r.high)})"


def with_calibrated(payload: dict[str, Any], args: argparse.Namespace, cfg: RabitConfig,
                    keys: dict[str, str]) -> dict[str, Any]:
    """With ``--analysis ID`` whose measured runs calibrate ``cfg``'s GPU kind, add ``payload["calibrated"]``:
    ``{payload key: {"value", "low", "high", "basis": "calibrated", "n_runs", "factor", "metric"}}`` beside the
    analytical value and its heuristic range. ``keys``: payload key -> calibration metric (``ttft_s.p50``)."""
    aid = getattr(args, "analysis", None)
    if not aid:
        return payload
    from core.calibration import calibrate_all, residuals_of

    runs = tuple(r.run for r in load_analysis(aid).runs)
    cals = calibrate_all(residuals_of(runs), cfg.gpu) if runs else {}
    out = {}
    for key, metric in keys.items():
        v = payload
        for part in key.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if metric in cals and isinstance(v, (int, float)) and v > 0:
            rg = cals[metric].range(float(v))
            out[key] = {"value": rg.value, "low": rg.low, "high": rg.high, "basis": rg.basis, "n_runs": rg.n_runs,
                        "factor": cals[metric].factor, "metric": metric}
    if out:
        payload["calibrated"] = out
    return payload
