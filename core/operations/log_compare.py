"""An engine's start-up log beside RA-BIT's memory prediction for the same flags, and the memory model it calibrates.

The prediction runs on the given config with the flags the log shows laid over it (the memory share
``--gpu-memory-utilization`` / ``--mem-fraction-static`` as the assumption ``gpu_mem_util``, the token budget
``--max-num-batched-tokens`` / ``--chunked-prefill-size`` as the workload's, the tensor-parallel size, an FP8 KV
cache, the max model len as the context). The same memory model as everywhere (:func:`core.physics.serving_memory`):

.. math:: K_b = C \\cdot u - O - W - A(T), \\qquad A(T) = 2 T h b_a / (tp \\cdot pp)

with ``T`` the engine's largest iteration (the token budget it profiles). KV tokens are whole blocks of ``K_b``
(vLLM: blocks of 16; SGLang: pages of 1 token), the maximum concurrency is ``tokens / context``.

Calibration from one log: the engine's own non-KV share ``C u - W_log - K_log`` is what RA-BIT calls
``O + A(T)``; with ``A(T)`` from the formula, the runtime overhead that reproduces the log is

.. math:: O' = C \\cdot u - W_{log} - K_{log} - A(T)

(one log cannot tell the overhead from the workspace: two logs at different token budgets can, see
:func:`calibrate_memory`). Worked number: the vLLM 0.10.1.1 log of Qwen2-7B on one A100 80GB at ``u = 0.5``,
token budget 2,048: ``C u = 40 GiB``, weights 14.2488 GiB, KV 24.83 GiB, ``A = 2 x 2048 x 3584 x 2 B = 0.027
GiB``, so ``O' = 0.894 GiB`` (RA-BIT assumes 1.5 GiB: it predicts 24.3 GiB of KV, the log says 24.83).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, REGISTRY, GiB
from core.config import RabitConfig, resolve
from core.operations.startup_log import NUMBERS, StartupLog
from core.physics import serving_memory

#: vLLM's --gpu-memory-utilization default (EngineArgs, docs.vllm.ai engine arguments).
VLLM_DEFAULT_UTIL = 0.9


class LogComparison(BaseModel):
    """The log's numbers, RA-BIT's for the same flags, their ratios, and the overhead that reproduces the log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: RabitConfig  # what the prediction ran on (the log's flags over the given config)
    applied: tuple[str, ...]  # which of the log's flags were laid over the config, in words
    measured: dict[str, float | None]
    predicted: dict[str, float | None]
    ratios: dict[str, float | None]  # measured / predicted per number (None where either is missing)
    capacity_bytes: float  # C: the GPU's memory the engine took its share of
    workspace_tokens: int  # T
    #: assumption name -> the value that reproduces the log (``runtime_overhead_gib``)
    calibrated: dict[str, float]
    #: the five numbers predicted again with the calibrated assumptions
    recalibrated: dict[str, float | None]
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {
            "measured": self.measured,
            "predicted": self.predicted,
            "log_vs_predicted": self.ratios,
            "applied_from_log": list(self.applied),
            "workspace_tokens": self.workspace_tokens,
            "calibrated": self.calibrated,
            "recalibrated": self.recalibrated,
            "notes": list(self.notes),
        }


def _kv_dtype(log: StartupLog) -> str | None:
    d = (log.kv_dtype or "").lower()
    return "fp8" if "fp8" in d or "float8" in d else None


def _memory_share(log: StartupLog, cfg: RabitConfig, applied: list[str]) -> float:
    """The engine's memory share as a share of the catalog GPU's memory (the log's own share when it reports the
    catalog's memory, within 0.5 %)."""
    util = log.gpu_memory_utilization
    assert util is not None
    if util != cfg.assumptions.gpu_mem_util:
        applied.append(f"memory share {util:g}")
    cat = resolve(cfg).gpu.memory_bytes
    if log.total_memory_bytes and abs(log.total_memory_bytes / cat - 1) > 0.005:
        # the engine's share of the memory the log reports, as a share of the catalog GPU's
        util = min(1.0, util * log.total_memory_bytes / cat)
        applied.append(f"the log's {log.total_memory_bytes / GiB:.2f} GiB of GPU memory")
    return util


def _workspace_tokens(log: StartupLog, cfg: RabitConfig, applied: list[str]) -> int:
    """The tokens the engine profiled one iteration at: the log's token budget, vLLM V0's max(max model len,
    2,048) without chunked prefill, else the config's budget."""
    v0 = log.engine == "vllm" and "V0" in log.version or log.version.startswith("0.6")
    if log.token_budget is not None:
        ws = log.token_budget
        applied.append(f"token budget {ws:,}")
    elif v0 and log.context_tokens:
        ws = max(log.context_tokens, 2048)  # V0 without chunked prefill profiles max(max_model_len, 2048) tokens
        applied.append(f"profiled iteration {ws:,} tokens (V0: max(max model len, 2,048))")
    else:
        ws = cfg.workload.token_budget
    return ws


def config_for_log(log: StartupLog, cfg: RabitConfig) -> tuple[RabitConfig, tuple[str, ...], int, int]:
    """(config, applied, workspace tokens, block size): ``cfg`` with the flags the log shows."""
    applied: list[str] = []
    changes: dict = {}
    if log.tp is not None and log.tp != cfg.tp:
        changes["tp"] = log.tp
        if cfg.gpus < log.tp:
            changes.update(gpus_per_node=log.tp, nodes=1)
        applied.append(f"tensor parallel {log.tp}")
    if _kv_dtype(log) and cfg.kv_dtype != "fp8":
        changes["kv_dtype"] = "fp8"
        applied.append("FP8 KV cache")
    if log.gpu_memory_utilization is not None:
        changes["assumptions"] = cfg.assumptions.with_(gpu_mem_util=_memory_share(log, cfg, applied))
    ws = _workspace_tokens(log, cfg, applied)
    changes["workload"] = cfg.workload.model_copy(update={"token_budget": ws, "engine": log.engine})
    if log.max_num_seqs is not None:
        changes["workload"] = changes["workload"].model_copy(update={"max_batch": log.max_num_seqs})
    if log.context_tokens is not None and log.context_tokens != cfg.context_tokens:
        out = min(cfg.output_tokens, max(1, log.context_tokens - 1))
        changes.update(input_tokens=log.context_tokens - out, output_tokens=out)
        applied.append(f"context {log.context_tokens:,}")
    block = log.block_size or (16 if log.engine == "vllm" else 1)  # SGLang's page size is 1 token by default
    return cfg.with_(**changes), tuple(applied), int(ws), int(block)


def predict_numbers(cfg: RabitConfig, workspace_tokens: int, block: int, context: int) -> dict[str, float | None]:
    """RA-BIT's five numbers for ``cfg`` (weights and KV memory per GPU, KV tokens of the replica, concurrency)."""
    mem = serving_memory(cfg.with_(batch=1, input_tokens=workspace_tokens, output_tokens=1), NO_TRACE)
    budget = mem.kv_budget_bytes_per_gpu - cfg.workload.max_batch * mem.ssm_state_bytes_per_seq_per_gpu
    per_block = mem.kv_bytes_per_token_per_gpu * block
    tokens = max(0, math.floor(budget / per_block)) * block if budget > 0 else 0
    return {
        "weights_bytes": mem.weights_bytes_per_gpu,
        "kv_cache_bytes": budget,
        "kv_cache_tokens": float(tokens),
        "max_concurrency": tokens / context if context else None,
        "context_tokens": float(context),
    }


def _ratio(m: float | None, p: float | None) -> float | None:
    if m is None or p is None or p == 0 or m / p <= 0:
        return None
    return m / p


def compare_log(log: StartupLog, cfg: RabitConfig) -> LogComparison:
    """The log beside RA-BIT's prediction for the same flags, and the runtime overhead that reproduces it."""
    run_cfg, applied, ws, block = config_for_log(log, cfg)
    notes = []
    if log.gpu_memory_utilization is None:
        notes.append(
            f"the log does not show the memory share; RA-BIT's {run_cfg.assumptions.gpu_mem_util:g} stands "
            f"(vLLM's default is {VLLM_DEFAULT_UTIL:g})"
        )
    context = log.context_tokens or run_cfg.context_tokens
    measured = {k: (None if getattr(log, k) is None else float(getattr(log, k))) for k in NUMBERS}
    predicted = predict_numbers(run_cfg, ws, block, context)
    ratios = {k: _ratio(measured[k], predicted[k]) for k in NUMBERS}
    dep = resolve(run_cfg)
    g = dep.gpu
    C = g.memory_bytes  # the log's own total, where it prints one, is already in the share (config_for_log)
    u = run_cfg.assumptions.gpu_mem_util
    m = dep.model
    A = 2 * ws * m.hidden_size * 2 / (run_cfg.tp * run_cfg.pp)  # the workspace formula of core.physics.memory
    calibrated: dict[str, float] = {}
    recal: dict[str, float | None] = dict(predicted)
    if log.weights_bytes is not None and log.kv_cache_bytes is not None:
        info = REGISTRY["runtime_overhead_gib"]
        o = (C * u - log.weights_bytes - log.kv_cache_bytes - A) / GiB
        if log.total_memory_bytes is None:
            notes.append(f"GPU memory from the catalog: {g.memory_gib:g} GiB ({g.name})")
        if o < info.min_value:
            notes.append(
                f"the log leaves less than nothing for the runtime ({o:.2f} GiB): the GPU has less memory than "
                f"the catalog's {C / GiB:.1f} GiB, or the memory share differs"
            )
        calibrated["runtime_overhead_gib"] = min(max(o, info.min_value), info.max_value)
        re_cfg = run_cfg.with_(assumptions=run_cfg.assumptions.with_(**calibrated))
        recal = predict_numbers(re_cfg, ws, block, context)
        if ratios["weights_bytes"] is not None and abs(ratios["weights_bytes"] - 1) > 0.05:
            notes.append(
                f"the engine's weights are x{ratios['weights_bytes']:.2f} RA-BIT's (adapter buffers, a vision "
                "encoder or another precision in the checkpoint): the KV prediction moves with them"
            )
    elif log.failure is None:
        notes.append("no calibration: the log states the weights or the KV memory, not both")
    return LogComparison(
        config=run_cfg,
        applied=applied,
        measured=measured,
        predicted=predicted,
        ratios=ratios,
        capacity_bytes=float(C),
        workspace_tokens=ws,
        calibrated=calibrated,
        recalibrated=recal,
        notes=tuple(notes),
    )


class MemoryCalibration(BaseModel):
    """The runtime overhead and the workspace per token that two or more logs (at different budgets) imply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runtime_overhead_gib: float
    workspace_bytes_per_token: float  # per GPU, per token of the largest iteration
    formula_bytes_per_token: float  # what the workspace formula assumes: 2 h b_a / (tp pp)
    logs: int
    residual_gib: float  # root-mean-square misfit of the non-KV memory


def calibrate_memory(pairs: list[tuple[StartupLog, RabitConfig]]) -> MemoryCalibration | None:
    """Least squares of ``C u - W_log - K_log = O + w T`` over logs of one model and layout (None below two
    distinct budgets): the overhead ``O`` and the workspace ``w`` per token of the largest iteration ``T``."""
    xs, ys, forms = [], [], []
    for log, cfg in pairs:
        if log.weights_bytes is None or log.kv_cache_bytes is None:
            continue
        c = compare_log(log, cfg)
        u = c.config.assumptions.gpu_mem_util
        xs.append(float(c.workspace_tokens))
        ys.append(c.capacity_bytes * u - log.weights_bytes - log.kv_cache_bytes)
        m = resolve(c.config).model
        forms.append(2 * m.hidden_size * 2 / (c.config.tp * c.config.pp))
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    w = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    o = my - w * mx
    rms = math.sqrt(sum((y - o - w * x) ** 2 for x, y in zip(xs, ys)) / n)
    return MemoryCalibration(
        runtime_overhead_gib=o / GiB,
        workspace_bytes_per_token=w,
        formula_bytes_per_token=sum(forms) / len(forms),
        logs=n,
        residual_gib=rms / GiB,
    )
