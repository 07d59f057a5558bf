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
from core.config.adapters import adapter_problems
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


def _attention_problems(cfg: RabitConfig, m: ModelArch) -> list[Problem]:
    """Attention parallelism: decode context parallelism reuses TP ranks, data-parallel attention needs a TP group
    and a model whose KV the TP split replicates (MLA) or whose experts carry the MLP (MoE), context parallelism
    needs at least one token per rank."""
    out: list[Problem] = []
    if cfg.dcp > 1 and (cfg.dcp > cfg.tp or cfg.tp % cfg.dcp):
        out.append(
            Problem(
                "dcp",
                f"decode context parallelism {cfg.dcp} must divide TP {cfg.tp}: it reuses the TP ranks "
                "(vLLM: tp_size divisible by dcp_size)",
            )
        )
    if cfg.dp_attention:
        if cfg.tp == 1:
            out.append(Problem("dp_attention", "data-parallel attention spreads sequences over the TP ranks: TP is 1"))
        elif not (m.is_mla or m.is_moe):
            out.append(
                Problem(
                    "dp_attention",
                    f"{m.name} is dense with {m.attention_kind}: data-parallel attention serves MLA and MoE models "
                    "(SGLang --enable-dp-attention, vLLM -dp with --enable-expert-parallel); use TP or DCP",
                )
            )
        if cfg.dcp > 1 or cfg.cp > 1:
            out.append(
                Problem(
                    "dp_attention",
                    "data-parallel attention already gives each rank whole sequences: combine it with neither "
                    "CP nor DCP",
                )
            )
    if cfg.phase == "serve" and cfg.cp > cfg.input_tokens:
        out.append(Problem("cp", f"CP {cfg.cp} exceeds the {cfg.input_tokens:,}-token prompt: one token per rank"))
    if cfg.phase == "train" and cfg.cp > 1 and cfg.seq_len % (2 * cfg.cp):
        out.append(
            Problem(
                "cp",
                f"sequence length {cfg.seq_len:,} does not split into 2 x CP = {2 * cfg.cp} chunks "
                "(Megatron-LM's load-balanced context parallelism)",
            )
        )
    return out


def _layout_problems(cfg: RabitConfig, m: ModelArch, g: GpuSpec) -> tuple[Problem, ...]:
    """The checks of a config whose model ``m`` and GPU ``g`` are known: cluster, layout, context, adapters."""
    out = _cluster_problems(cfg, g) + _disagg_problems(cfg, m) + _split_problems(cfg, m)
    out.extend(_attention_problems(cfg, m))
    out += _expert_problems(cfg, m) + _length_problems(cfg, m)
    if cfg.qlora and not cfg.lora_rank:
        out.append(Problem("qlora", "QLoRA needs a LoRA rank > 0"))
    if cfg.phase == "serve":
        out.extend(Problem(f, msg) for f, msg in adapter_problems(cfg.adapters, cfg.workload.engine))
    return tuple(out)


def _cluster_problems(cfg: RabitConfig, g: GpuSpec) -> list[Problem]:
    """GPUs per node beyond the part's node (or its NVLink domain)."""
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
    return out


def _disagg_problems(cfg: RabitConfig, m: ModelArch) -> list[Problem]:
    """Disaggregated pools: attention splits they do not run, two kinds no engine moves a KV cache between, a
    pool's TP that does not divide the heads."""
    out: list[Problem] = []
    dis = cfg.disagg
    split = next(
        (f for f, on in (("dp_attention", cfg.dp_attention), ("cp", cfg.cp > 1), ("dcp", cfg.dcp > 1)) if on), ""
    )
    if dis.enabled and split:
        out.append(
            Problem(
                split,
                "disaggregated prefill and decode pools run plain tensor-parallel attention; turn data-parallel "
                "attention, CP and DCP off, or serve aggregated replicas",
            )
        )
    if dis.enabled:
        kinds = [catalog.gpus().get(k or cfg.gpu) for k in (dis.prefill_gpu, dis.decode_gpu)]
        why = catalog.kv_pool_refusal(kinds[0], kinds[1]) if kinds[0] and kinds[1] else ""
        if why:
            out.append(Problem("disagg.decode_gpu", why))
        for role, tp in (("prefill", dis.prefill_tp), ("decode", dis.decode_tp)):
            if tp is not None and not m.splits_heads(tp):
                ok = [x for x in divisors(m.num_heads) if x <= 64]
                out.append(
                    Problem(
                        f"disagg.{role}_tp",
                        f"{role} TP {tp} does not divide the {m.num_heads} attention heads of {m.name}; "
                        f"use one of {ok[-6:]}",
                    )
                )
    return out


def _split_problems(cfg: RabitConfig, m: ModelArch) -> list[Problem]:
    """A replica's TP, PP (and CP) against the model's heads and layers and the cluster's GPUs."""
    out: list[Problem] = []
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
    cp_txt = f" x CP {cfg.cp}" if cfg.cp > 1 else ""
    if cfg.replica_gpus > cfg.gpus:
        out.append(
            Problem(
                "tp",
                f"TP x PP{' x CP' if cfg.cp > 1 else ''} = {cfg.replica_gpus} needs more GPUs than the {cfg.gpus} in "
                f"{cfg.nodes} node(s) of {cfg.gpus_per_node}; add nodes or lower TP/PP{'/CP' if cfg.cp > 1 else ''}",
            )
        )
    elif cfg.gpus % cfg.replica_gpus:
        out.append(
            Problem(
                "tp",
                f"{cfg.gpus} GPUs do not split into whole replicas of TP x PP{cp_txt} = "
                f"{cfg.replica_gpus}; make the GPU count a multiple of it",
            )
        )
    return out


def _expert_problems(cfg: RabitConfig, m: ModelArch) -> list[Problem]:
    """Expert parallelism on a model without experts, not dividing them, or wider than a pipeline stage."""
    out: list[Problem] = []
    if cfg.ep > 1:
        if not m.is_moe:
            out.append(Problem("ep", f"{m.name} has no experts; set EP to 1"))
        elif m.num_experts % cfg.ep:
            out.append(Problem("ep", f"EP {cfg.ep} does not divide the {m.num_experts} experts"))
        elif cfg.ep > cfg.tp * cfg.dp * cfg.cp:
            out.append(
                Problem("ep", f"EP {cfg.ep} exceeds TP x DP = {cfg.tp * cfg.dp * cfg.cp} GPUs per pipeline stage")
            )
    return out


def _length_problems(cfg: RabitConfig, m: ModelArch) -> list[Problem]:
    """Requests past the model's context; a training sequence far past it, or longer than the global batch."""
    out: list[Problem] = []
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
    if cfg.phase == "train" and cfg.global_batch_tokens < cfg.seq_len:
        out.append(
            Problem(
                "global_batch_tokens",
                f"a global batch of {cfg.global_batch_tokens:,} tokens is less than one sequence of "
                f"{cfg.seq_len:,} tokens; give at least {cfg.seq_len:,} (or a shorter sequence length)",
            )
        )
    return out


def workload_problems(cfg: RabitConfig, trace: tuple[tuple[int, int], ...] | None = None) -> tuple[Problem, ...]:
    """What the simulated workload asks that the deployment cannot serve: a replayed request past the model's
    context (the check ``input_tokens`` gets, row by row), or a KV pool override too small for one request.

    ``trace``: the replayed (input, output) rows, if any. The fields named are ``trace`` and
    ``workload.kv_pool_tokens``.
    """
    m = model_of(cfg)
    out: list[Problem] = []
    if trace:
        over = [(i, a, b) for i, (a, b) in enumerate(trace, 1) if a + b > m.max_context]
        if over:
            i, a, b = over[0]
            more = f" (and {len(over) - 1:,} more rows)" if len(over) > 1 else ""
            out.append(
                Problem(
                    "trace",
                    f"row {i}: input + output = {a + b:,} tokens exceeds the {m.max_context:,}-token context of "
                    f"{m.name}{more}",
                )
            )
    pool = cfg.workload.kv_pool_tokens
    if pool is not None:
        need = min(a + b for a, b in trace) if trace else cfg.context_tokens
        blocks = -(-need // cfg.block_size) * cfg.block_size  # whole paged blocks
        if pool < blocks:
            what = "the shortest replayed request" if trace else "one request (input + output)"
            out.append(
                Problem(
                    "workload.kv_pool_tokens",
                    f"a KV pool of {pool:,} tokens cannot hold {what} of {need:,} tokens; give at least "
                    f"{blocks:,} ({blocks // cfg.block_size:,} blocks of {cfg.block_size})",
                )
            )
    return tuple(out)
