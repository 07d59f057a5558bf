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
    if training_memory(dep).fits:
        return ()
    cfg = dep.config
    out = [o for label, changes in _layout_changes(cfg) if (o := _fitting(dep, label, **changes))]
    out += _node_counts_that_fit(dep)
    out += [o for label, changes in _fine_tunes(cfg) if (o := _fitting(dep, label, **changes))]
    return tuple(out)


def _gb(tm: TrainingMemory) -> str:
    return f"{sig(tm.total_bytes_per_gpu / 1e9)} GB per GPU"


def _fitting(dep: Deployment, label: str, **changes) -> str | None:
    """``label`` with the memory per GPU when ``dep`` with ``changes`` fits (None when it does not or is invalid)."""
    try:
        tm = training_memory(dep.with_(**changes))
    except ValueError:
        return None
    return f"{label}: {_gb(tm)}" if tm.fits else None


def _layout_changes(cfg: RabitConfig) -> list[tuple[str, dict]]:
    """The changes on the same GPUs not made yet: ZeRO-3 (when DP > 1), full recomputation, micro-batch 1."""
    out: list[tuple[str, dict]] = []
    if cfg.dp > 1 and cfg.zero < 3:
        out.append(("ZeRO-3 on these GPUs", {"zero": 3}))
    if cfg.recompute != "full":
        out.append(("full recomputation", {"recompute": "full"}))
    if cfg.micro_batch > 1:
        out.append(("micro-batch 1", {"micro_batch": 1}))
    return out


def _node_counts_that_fit(dep: Deployment) -> list[str]:
    """The fewest nodes on which ZeRO-3, then the configured stage, fits (when that is another count)."""
    cfg = dep.config
    out = []
    for zero in dict.fromkeys((3, cfg.zero)):
        found = _smallest_nodes(dep, zero)
        if found is not None and found[0] != cfg.nodes:
            n, tm = found
            gpus = n * cfg.gpus_per_node
            out.append(f"ZeRO-{zero} over {gpus:,} GPUs ({n:,} nodes, DP {gpus // (cfg.tp * cfg.pp):,}): {_gb(tm)}")
    return out


def _fine_tunes(cfg: RabitConfig) -> list[tuple[str, dict]]:
    """A LoRA of rank 16 for a full training run, else QLoRA for a LoRA one that is not yet."""
    if not cfg.lora_rank:
        return [("LoRA rank 16 (a fine-tune, not pre-training)", {"lora_rank": 16})]
    if not cfg.qlora:
        return [("QLoRA (4-bit base weights)", {"qlora": True})]
    return []
