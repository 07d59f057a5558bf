"""Why an engine ran out of memory, from its log, and the remedies ranked by what they cost (the free one first).

Two failures look alike and have different fixes:

* **At start-up** the engine measures one forward pass of its largest iteration (the profile), loads the
  weights and reserves the rest of its memory share for the KV cache. It fails when the weights and the
  profiled peak leave nothing for the KV cache (``No available memory for the cache blocks``, a negative
  ``Available KV cache memory``), when the KV cache cannot hold one request of the max model len (``max seq len
  (N) is larger than the maximum number of tokens that can be stored in KV cache (M)``), when another process
  holds memory (``Free memory on device ... is less than desired GPU memory utilization``), or when an
  allocation fails while loading, profiling or capturing CUDA graphs. The flags that move it: the memory
  share, the max model len, the token budget, the KV format, the layout.
* **Under load** the server was up and a request pushed one iteration past what the profile reserved (a long
  prompt in one pass, many sequences sampled at once, fragmentation of the allocator's cache). The flags that
  move it: the token budget (chunk the prompt), headroom outside the KV pool (a lower memory share), the
  allocator's expandable segments, fewer sequences.

Costs, in the order the remedies are ranked (:data:`COSTS`): ``free`` (nothing the workload uses), ``headroom``
(memory the engine left unused: less margin for CUDA graphs and fragmentation), ``speed`` (slower iterations or
prefill), ``capacity`` (fewer sequences, or shorter requests refused), ``quality`` (a lower-precision format:
an accuracy check first), ``hardware`` (more or larger GPUs).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, REGISTRY, GiB
from core.config import RabitConfig, resolve
from core.operations.log_compare import LogComparison, compare_log, predict_numbers
from core.operations.startup_log import Failure, StartupLog
from core.physics import serving_memory

Cost = Literal["free", "headroom", "speed", "capacity", "quality", "hardware"]
COSTS: tuple[str, ...] = ("free", "headroom", "speed", "capacity", "quality", "hardware")
COST_TEXT = {
    "free": "free: costs nothing the workload uses",
    "headroom": "takes memory the engine left unused (less margin for CUDA graphs and fragmentation)",
    "speed": "slower iterations or prefill",
    "capacity": "fewer sequences at once, or longer requests refused",
    "quality": "a lower-precision format: run an accuracy check first",
    "hardware": "more or larger GPUs",
}
#: The highest memory share a remedy proposes: the optimistic bound of ``gpu_mem_util``.
MAX_UTIL = REGISTRY["gpu_mem_util"].high


class Remedy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    change: str  # the flag (or environment variable) and its value
    effect: str  # what it moves, with RA-BIT's number where it has one
    cost: Cost

    @property
    def cost_text(self) -> str:
        return COST_TEXT[self.cost]


class OomDiagnosis(BaseModel):
    """A failure in the log: when it happened, why, and what to change (cheapest first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phase: Literal["start-up", "under load"]
    cause: str
    stage: str
    evidence: tuple[str, ...]
    remedies: tuple[Remedy, ...]

    def as_json(self) -> dict:
        return {
            "phase": self.phase,
            "cause": self.cause,
            "stage": self.stage,
            "evidence": list(self.evidence),
            "remedies": [{"change": r.change, "effect": r.effect, "cost": r.cost} for r in self.remedies],
        }


def _gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def _ranked(rs: list[Remedy]) -> tuple[Remedy, ...]:
    return tuple(sorted(rs, key=lambda r: COSTS.index(r.cost)))


def _kv_per_token(log: StartupLog, cfg: RabitConfig | None) -> float | None:
    """KV bytes per token on one GPU: the config's model, else the log's own bytes / tokens."""
    if cfg is not None:
        return serving_memory(cfg.with_(batch=1), NO_TRACE).kv_bytes_per_token_per_gpu
    if log.kv_cache_bytes and log.kv_cache_tokens:
        return log.kv_cache_bytes / log.kv_cache_tokens
    return None


def _workload_context(cfg: RabitConfig | None) -> int | None:
    return None if cfg is None else cfg.context_tokens


def _context_too_long(log: StartupLog, f: Failure, cfg: RabitConfig | None, run: RabitConfig | None) -> list[Remedy]:
    need = int(f.numbers.get("needed_tokens") or log.context_tokens or 0)
    have = int(f.numbers.get("kv_tokens") or f.numbers.get("estimated_max_len") or log.kv_cache_tokens or 0)
    out: list[Remedy] = []
    wl = _workload_context(cfg)
    if have:
        fits = wl is not None and wl <= have
        out.append(
            Remedy(
                change=f"--max-model-len {have}",
                effect=f"the KV cache holds {have:,} tokens: one request of up to {have:,} tokens fits"
                + (f" (the workload's longest is {wl:,})" if wl is not None else ""),
                cost="free" if fits else "capacity",
            )
        )
    k = _kv_per_token(log, run)
    util = (run.assumptions.gpu_mem_util if run is not None else log.gpu_memory_utilization) or 0.9
    cap = log.total_memory_bytes or (None if run is None else _capacity(run))
    if k and cap and need > have:
        u2 = util + (need - have) * k / cap
        if u2 <= MAX_UTIL:
            out.append(
                Remedy(
                    change=f"--gpu-memory-utilization {math.ceil(u2 * 100) / 100:g}",
                    effect=f"{(need - have) * k / GiB:.2f} GiB more for the KV cache: {need:,} tokens fit",
                    cost="headroom",
                )
            )
        else:
            out.append(
                Remedy(
                    change="--kv-cache-dtype fp8",
                    effect=f"half the bytes per token: about {2 * have:,} tokens in the same memory"
                    + (f", enough for {need:,}" if 2 * have >= need else f", still short of {need:,}"),
                    cost="quality",
                )
            )
    out.append(_more_tp(run))
    return out


def _capacity(run: RabitConfig) -> float:
    return resolve(run).gpu.memory_bytes


def _more_tp(run: RabitConfig | None) -> Remedy:
    tp = 2 * run.tp if run is not None else None
    return Remedy(
        change=f"--tensor-parallel-size {tp}" if tp else "a larger --tensor-parallel-size",
        effect="the weights and each token's KV split over twice the GPUs",
        cost="hardware",
    )


def _kv_negative(log: StartupLog, f: Failure, cfg: RabitConfig | None, run: RabitConfig | None) -> list[Remedy]:
    out: list[Remedy] = []
    short = -(f.numbers.get("available_kv_bytes") or log.kv_cache_bytes or 0.0)
    util = (run.assumptions.gpu_mem_util if run is not None else log.gpu_memory_utilization) or 0.9
    cap = log.total_memory_bytes or (None if run is None else _capacity(run))
    k = _kv_per_token(log, run)
    if cap:
        extra = max(short, 0.0) + (k * (log.context_tokens or 0) if k else 0.0)
        u2 = util + extra / cap
        if u2 <= MAX_UTIL:
            out.append(
                Remedy(
                    change=f"--gpu-memory-utilization {math.ceil(u2 * 100) / 100:g}",
                    effect=f"{_gib(extra)} more inside the engine's share: the {_gib(max(short, 0))} missing and "
                    + (f"one request of {log.context_tokens:,} tokens of KV" if log.context_tokens else "the KV"),
                    cost="free" if u2 <= REGISTRY["gpu_mem_util"].base + 1e-9 else "headroom",
                )
            )
    out.append(
        Remedy(
            change="--max-num-batched-tokens 2048"
            if (log.token_budget or 8192) > 2048
            else "--max-num-batched-tokens 1024",
            effect="a smaller profiled iteration: less activation peak reserved outside the KV cache",
            cost="speed",
        )
    )
    if run is not None and run.weights == "bf16":
        out.append(
            Remedy(
                change="--quantization fp8",
                effect=f"weights from {_gib(serving_memory(run.with_(batch=1), NO_TRACE).weights_bytes_per_gpu)} "
                "to about half per GPU",
                cost="quality",
            )
        )
    out.append(_more_tp(run))
    return out


def _under_load(log: StartupLog, f: Failure, cfg: RabitConfig | None, run: RabitConfig | None) -> list[Remedy]:
    n = f.numbers
    out: list[Remedy] = []
    tried, frag = n.get("tried_bytes"), n.get("reserved_unallocated_bytes")
    if frag is not None and tried is not None and frag >= 0.5 * tried:
        out.append(
            Remedy(
                change="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                effect=f"{_gib(frag)} is reserved by PyTorch but unallocated against the {_gib(tried)} asked for: "
                "fragmentation, which expandable segments remove",
                cost="free",
            )
        )
    budget = log.token_budget
    out.append(
        Remedy(
            change=f"--max-num-batched-tokens {max(512, (budget or 8192) // 2)}"
            + ("" if budget else " (and --enable-chunked-prefill on the V0 engine)"),
            effect="caps the tokens of one iteration at what the profile measured: a long prompt is chunked",
            cost="speed",
        )
    )
    if tried is not None:
        total = n.get("total_bytes") or log.total_memory_bytes or (None if run is None else _capacity(run))
        util = (run.assumptions.gpu_mem_util if run is not None else log.gpu_memory_utilization) or 0.9
        if total:
            u2 = max(0.05, math.floor((util - 2 * tried / total) * 100) / 100)
            effect = f"leaves {_gib(2 * tried)} outside the KV pool for allocations like the failed {_gib(tried)}"
            k = _kv_per_token(log, run)
            if k:
                effect += f"; the KV cache loses about {2 * tried / k:,.0f} tokens"
            out.append(Remedy(change=f"--gpu-memory-utilization {u2:g}", effect=effect, cost="capacity"))
    out.append(
        Remedy(
            change="a lower --max-num-seqs",
            effect="fewer sequences sampled in one iteration (the sampler's logits grow with them)",
            cost="capacity",
        )
    )
    out.append(_more_tp(run))
    return out


def _startup_oom(log: StartupLog, f: Failure, cfg: RabitConfig | None, run: RabitConfig | None) -> list[Remedy]:
    if "weights" in f.stage:
        out = [_more_tp(run)]
        if run is not None and run.weights == "bf16":
            out.append(
                Remedy(change="--quantization fp8", effect="about half the weight bytes per GPU", cost="quality")
            )
        return out
    if "CUDA graphs" in f.stage:
        util = (run.assumptions.gpu_mem_util if run is not None else log.gpu_memory_utilization) or 0.9
        return [
            Remedy(
                change=f"--gpu-memory-utilization {max(0.05, util - 0.05):g}",
                effect="CUDA graphs are captured outside the KV reservation: leave them room",
                cost="capacity",
            ),
            Remedy(
                change="--enforce-eager",
                effect="no CUDA graphs captured (every kernel launched from the host)",
                cost="speed",
            ),
            _more_tp(run),
        ]
    return [
        Remedy(
            change=f"--max-num-batched-tokens {max(512, (log.token_budget or 8192) // 2)}",
            effect="a smaller profiled iteration: less activation peak",
            cost="speed",
        ),
        _more_tp(run),
    ]


_CAUSES = {
    "kv-negative": "the weights and the profiled peak of one largest iteration leave nothing for the KV cache "
    "inside the engine's memory share",
    "context-too-long": "the KV cache that fits holds fewer tokens than one request of the max model len",
    "memory-in-use": "another process holds GPU memory the engine's share counts on",
    "request-slots": "the request table is full: more running requests than the engine sized for",
}


def diagnose_oom(log: StartupLog, cfg: RabitConfig | None = None) -> OomDiagnosis | None:
    """The failure in ``log`` (None when it has none), its phase and the remedies ranked by cost.

    ``cfg`` (the deployment the log came from) lets the remedies carry RA-BIT's numbers; the log's own flags
    are laid over it first (:func:`core.operations.log_compare.config_for_log`).
    """
    f = log.failure
    if f is None:
        return None
    comp = compare_log(log, cfg) if cfg is not None else None
    run = comp.config if comp is not None else None
    if f.phase == "under load":
        cause = (
            "after start-up, one iteration asked for more memory than the profile reserved outside the KV cache "
            "(a long prompt in one pass, many sequences sampled at once, or a fragmented allocator cache)"
            if f.kind == "cuda-oom"
            else _CAUSES.get(f.kind, f.kind)
        )
        rs = (
            _under_load(log, f, cfg, run)
            if f.kind == "cuda-oom"
            else [
                Remedy(
                    change="a lower --max-running-requests",
                    effect="fewer requests admitted at once",
                    cost="capacity",
                )
            ]
        )
    elif f.kind == "context-too-long":
        cause, rs = _CAUSES[f.kind], _context_too_long(log, f, cfg, run)
    elif f.kind == "kv-negative":
        cause, rs = _CAUSES[f.kind], _kv_negative(log, f, cfg, run)
    elif f.kind == "memory-in-use":
        free, total = f.numbers.get("free_bytes", 0.0), f.numbers.get("total_bytes", 0.0)
        cause = _CAUSES[f.kind] + (f": {_gib(total - free)} of {_gib(total)} is taken" if total else "")
        rs = [
            Remedy(change="stop the other process on the GPU", effect=f"{_gib(total - free)} back", cost="free"),
            Remedy(
                change=f"--gpu-memory-utilization {math.floor(free / total * 100) / 100:g}"
                if total
                else "a lower --gpu-memory-utilization",
                effect="the share the free memory allows",
                cost="capacity",
            ),
        ]
    else:
        cause = f"an allocation failed while {f.stage}"
        rs = _startup_oom(log, f, cfg, run)
    if comp is not None:  # RA-BIT's KV tokens for a remedy that raises the memory share
        rs = [_with_prediction(r, log, comp) for r in rs]
    ev = [f"line {f.line_no}: {f.line}"]
    if log.kv_cache_bytes is not None:
        ev.append(f"KV cache memory {_gib(log.kv_cache_bytes)}")
    if log.weights_bytes is not None:
        ev.append(f"weights {_gib(log.weights_bytes)} per GPU")
    return OomDiagnosis(phase=f.phase, cause=cause, stage=f.stage, evidence=tuple(ev), remedies=_ranked(rs))


def _with_prediction(r: Remedy, log: StartupLog, comp: LogComparison) -> Remedy:
    """``r`` with RA-BIT's KV tokens at its memory share (the overhead calibrated from the log, if it could be)."""
    if not r.change.startswith("--gpu-memory-utilization ") or r.cost == "capacity":
        return r
    u = float(r.change.split()[-1])
    run = comp.config
    moved = run.with_(assumptions=run.assumptions.with_(gpu_mem_util=u, **comp.calibrated))
    block = log.block_size or (16 if log.engine == "vllm" else 1)
    p = predict_numbers(
        moved, comp.workspace_tokens, block, int(comp.predicted["context_tokens"] or run.context_tokens)
    )
    return r.model_copy(update={"effect": r.effect + f" (RA-BIT: {int(p['kv_cache_tokens'] or 0):,} KV tokens)"})
