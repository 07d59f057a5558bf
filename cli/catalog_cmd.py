"""``rabit models`` and ``rabit gpus``: list the catalog slugs.

Both take ``--assume``, ``--bound`` and ``--config`` like every subcommand (a listing has no estimate, so no
range): the values are checked (exit 2 naming a bad one), and with ``--config FILE`` the JSON names the file's
model or GPU under ``selected`` and the text marks it with ``*``.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.common import add_json, add_range_args, check_range_args, emit
from core import catalog


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list catalog models")
    add_json(p)
    add_range_args(p)
    p.set_defaults(func=run_models)
    p = sub.add_parser("gpus", help="list catalog GPUs")
    add_json(p)
    add_range_args(p)
    p.set_defaults(func=run_gpus)


def _mark(cfg, slug: str, chosen: str | None) -> str:
    """'* ' before the config file's choice, '  ' before the others (nothing without --config)."""
    return "" if cfg is None else ("* " if slug == chosen else "  ")


def run_models(args: argparse.Namespace) -> int:
    cfg = check_range_args(args)
    chosen = cfg.model if cfg is not None and cfg.custom_model is None else None
    rows: list[dict[str, Any]] = [
        {
            "slug": s,
            "name": e.meta.name,
            "total_params": e.arch.total_params(),
            "active_params": e.arch.active_params(),
            "attention": e.arch.attention_kind,
        }
        for s, e in sorted(catalog.models().items())
    ]
    human = "\n".join(
        _mark(cfg, r["slug"], chosen) + f"{r['slug']:<18} {r['name']:<28} {r['total_params'] / 1e9:8.1f}B total "
        f"{r['active_params'] / 1e9:7.1f}B active  {r['attention']}"
        for r in rows
    )
    emit({"models": rows, **({"selected": chosen} if cfg is not None else {})}, args.json, human)
    return 0


def run_gpus(args: argparse.Namespace) -> int:
    cfg = check_range_args(args)
    chosen = cfg.gpu if cfg is not None else None
    rows: list[dict[str, Any]] = [
        {
            "slug": s,
            "name": g.name,
            "memory_bytes": g.memory_bytes,
            "memory_bw_bytes_per_s": g.memory_bw_bytes_per_s,
            "bf16_flop_per_s": g.peak_flop_per_s("bf16"),
            "topology": g.topology,
            "gpus_per_node": g.gpus_per_node,
        }
        for s, g in sorted(catalog.gpus().items())
    ]
    human = "\n".join(
        _mark(cfg, r["slug"], chosen) + f"{r['slug']:<10} {r['name']:<24} {r['memory_bytes'] / 1e9:6.1f} GB "
        f"{r['memory_bw_bytes_per_s'] / 1e12:5.2f} TB/s {r['bf16_flop_per_s'] / 1e12:7.0f} TFLOP/s "
        f"{r['topology']}"
        for r in rows
    )
    emit({"gpus": rows, **({"selected": chosen} if cfg is not None else {})}, args.json, human)
    return 0
