"""``rabit models`` and ``rabit gpus``: list the catalog slugs."""

from __future__ import annotations

import argparse

from cli.common import add_json, emit
from core import catalog


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list catalog models")
    add_json(p)
    p.set_defaults(func=run_models)
    p = sub.add_parser("gpus", help="list catalog GPUs")
    add_json(p)
    p.set_defaults(func=run_gpus)


def run_models(args: argparse.Namespace) -> int:
    rows = [
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
        f"{r['slug']:<18} {r['name']:<28} {r['total_params'] / 1e9:8.1f}B total "
        f"{r['active_params'] / 1e9:7.1f}B active  {r['attention']}"
        for r in rows
    )
    emit({"models": rows}, args.json, human)
    return 0


def run_gpus(args: argparse.Namespace) -> int:
    rows = [
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
        f"{r['slug']:<10} {r['name']:<24} {r['memory_bytes'] / 1e9:6.1f} GB "
        f"{r['memory_bw_bytes_per_s'] / 1e12:5.2f} TB/s {r['bf16_flop_per_s'] / 1e12:7.0f} TFLOP/s "
        f"{r['topology']}"
        for r in rows
    )
    emit({"gpus": rows}, args.json, human)
    return 0
