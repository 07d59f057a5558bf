"""Catalog-aware checks of a config: each problem names the field it belongs to.

``problems(cfg)`` never raises for a bad combination; it returns messages that say what is
wrong and how to fix it, so the sidebar can show each next to its input and the CLI can
print one line and exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import catalog
from core.base import divisors
from core.catalog import GpuSpec, ModelArch
from core.config.deployment import Deployment, gpu_of, model_of
from core.config.settings import RabitConfig


@dataclass(frozen=True)
class Problem:
    """A message for one input. ``blocking`` problems make the config unusable; others are warnings
    that still let the pages draw (a model that cannot fit still has a memory breakdown to show)."""

    field: str
    message: str
    blocking: bool = True


def problems(x: RabitConfig | Deployment) -> tuple[Problem, ...]:
    """Everything wrong with a config that the field validators cannot see. A resolved :class:`Deployment`
    names catalog entries that exist, and its model and GPU are not looked up again."""
    if isinstance(x, Deployment):
        return _layout_problems(x.config, x.model, x.gpu)
    cfg = x
    out: list[Problem] = []
    if cfg.custom_model is None and cfg.model not in catalog.models():
        out.append(
            Problem(
                "model",
                f"unknown model '{cfg.model}'; pick one of {', '.join(sorted(catalog.models()))} "
                "or upload a config.json",
            )
        )
    if cfg.gpu not in catalog.gpus():
        out.append(Problem("gpu", f"unknown GPU '{cfg.gpu}'; pick one of {', '.join(sorted(catalog.gpus()))}"))
    if cfg.fabric not in catalog.fabrics():
        out.append(
            Problem("fabric", f"unknown fabric '{cfg.fabric}'; pick one of {', '.join(sorted(catalog.fabrics()))}")
        )
    if out:
        return tuple(out)
    return _layout_problems(cfg, model_of(cfg), gpu_of(cfg))


def _layout_problems(cfg: RabitConfig, m: ModelArch, g: GpuSpec) -> tuple[Problem, ...]:
    """The checks of a config whose model ``m`` and GPU ``g`` are known: cluster, layout, context, adapters."""
    out: list[Problem] = []
    if cfg.gpus_per_node > g.gpus_per_node and g.topology != "nvswitch":
        out.append(
            Problem(
                "gpus_per_node",
                f"a {g.name} node holds at most {g.gpus_per_node} GPUs; use {g.gpus_per_node} per node and add nodes",
            )
        )
    elif cfg.gpus_per_node > max(g.gpus_per_node, g.scale_up_domain):
        out.append(
            Problem(
                "gpus_per_node",
                f"a {g.name} node or NVLink domain holds at most "
                f"{max(g.gpus_per_node, g.scale_up_domain)} GPUs; add nodes instead",
            )
        )
    if not m.splits_heads(cfg.tp):
        fitting = [d for d in divisors(m.num_heads) if d <= cfg.gpus]  # O(sqrt heads), never range(heads)
        out.append(
            Problem(
                "tp",
                f"TP {cfg.tp} does not divide the {m.num_heads} attention heads of {m.name}; use one of {fitting[-6:]}",
            )
        )
    if cfg.pp > m.num_layers:
        out.append(Problem("pp", f"PP {cfg.pp} exceeds the {m.num_layers} layers of {m.name}"))
    if cfg.tp * cfg.pp > cfg.gpus:
        out.append(
            Problem(
                "tp",
                f"TP x PP = {cfg.tp * cfg.pp} needs more GPUs than the {cfg.gpus} in "
                f"{cfg.nodes} node(s) of {cfg.gpus_per_node}; add nodes or lower TP/PP",
            )
        )
    elif cfg.gpus % (cfg.tp * cfg.pp):
        out.append(
            Problem(
                "tp",
                f"{cfg.gpus} GPUs do not split into whole replicas of TP x PP = "
                f"{cfg.tp * cfg.pp}; make the GPU count a multiple of it",
            )
        )
    if cfg.ep > 1:
        if not m.is_moe:
            out.append(Problem("ep", f"{m.name} has no experts; set EP to 1"))
        elif m.num_experts % cfg.ep:
            out.append(Problem("ep", f"EP {cfg.ep} does not divide the {m.num_experts} experts"))
        elif cfg.ep > cfg.tp * cfg.dp:
            out.append(Problem("ep", f"EP {cfg.ep} exceeds TP x DP = {cfg.tp * cfg.dp} GPUs per pipeline stage"))
    if cfg.phase == "serve" and cfg.context_tokens > m.max_context:
        out.append(
            Problem(
                "input_tokens",
                f"input + output = {cfg.context_tokens:,} tokens exceeds the "
                f"{m.max_context:,}-token context of {m.name}",
            )
        )
    if cfg.phase == "train" and cfg.seq_len > m.max_context * 4:
        out.append(
            Problem(
                "seq_len", f"sequence length {cfg.seq_len:,} is far beyond the model's {m.max_context:,}-token context"
            )
        )
    if cfg.qlora and not cfg.lora_rank:
        out.append(Problem("qlora", "QLoRA needs a LoRA rank > 0"))
    return tuple(out)
