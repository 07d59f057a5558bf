"""Training advice: the changes to a training layout that make it fit, each checked by computing it."""

from __future__ import annotations

from core.base import sig
from core.config import Deployment, RabitConfig, as_deployment
from core.physics import TrainingMemory, training_memory

__all__ = ["training_fit_options"]


def _smallest_nodes(dep: Deployment, zero: int, max_nodes: int = 8192) -> tuple[int, TrainingMemory] | None:
    """The fewest nodes (same GPUs per node and TP/PP) on which the layout fits at this ZeRO stage, or None."""
    cfg = dep.config

    def at(n: int) -> TrainingMemory | None:
        try:
            return training_memory(dep.with_(nodes=n, zero=zero))
        except ValueError:
            return None

    lo, hi = cfg.nodes, cfg.nodes
    while True:
        tm = at(hi)
        if tm is not None and tm.fits:
            break
        if hi >= max_nodes:
            return None
        lo, hi = hi, min(hi * 2, max_nodes)
    best = (hi, tm)
    while hi - lo > 1:  # memory per GPU falls as DP grows: bisect for the smallest count that fits
        mid = (lo + hi) // 2
        tm = at(mid)
        if tm is not None and tm.fits:
            hi, best = mid, (mid, tm)
        else:
            lo = mid
    return best


def training_fit_options(dep: Deployment | RabitConfig) -> tuple[str, ...]:
    """Changes to the sidebar's training layout that make it fit, each checked by computing it.

    Tried one at a time: ZeRO-3 on the GPUs there are (when DP > 1), full recomputation, micro-batch 1,
    the fewest nodes on which ZeRO-3 (and the configured stage) fits, LoRA rank 16 and QLoRA. Empty when the
    layout already fits or nothing tried helps.
    """
    dep = as_deployment(dep)
    cfg = dep.config
    if training_memory(dep).fits:
        return ()
    gb = lambda tm: f"{sig(tm.total_bytes_per_gpu / 1e9)} GB per GPU"  # noqa: E731
    out: list[str] = []

    def try_(label: str, **changes) -> None:
        try:
            tm = training_memory(dep.with_(**changes))
        except ValueError:
            return
        if tm.fits:
            out.append(f"{label}: {gb(tm)}")

    if cfg.dp > 1 and cfg.zero < 3:
        try_("ZeRO-3 on these GPUs", zero=3)
    if cfg.recompute != "full":
        try_("full recomputation", recompute="full")
    if cfg.micro_batch > 1:
        try_("micro-batch 1", micro_batch=1)
    for zero in dict.fromkeys((3, cfg.zero)):
        found = _smallest_nodes(dep, zero)
        if found is not None and found[0] != cfg.nodes:
            n, tm = found
            gpus = n * cfg.gpus_per_node
            out.append(f"ZeRO-{zero} over {gpus:,} GPUs ({n:,} nodes, DP {gpus // (cfg.tp * cfg.pp):,}): {gb(tm)}")
    if not cfg.lora_rank:
        try_("LoRA rank 16 (a fine-tune, not pre-training)", lora_rank=16)
    elif not cfg.qlora:
        try_("QLoRA (4-bit base weights)", qlora=True)
    return tuple(out)
