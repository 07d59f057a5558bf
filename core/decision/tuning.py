"""The tuning loop: from the three numbers the engine publishes to the flags of the final launch.

An engine tells at start-up how many tokens its KV cache holds, the maximum concurrency at its max model len
(tokens / max model len) and its token budget. Five flags move them, and the loop adjusts them in a stated
order, cheapest first (:data:`ORDER`):

1. ``--max-model-len`` to the longest request the workload sends (free: the engine reserves for, and
   reports concurrency at, a length nobody asks for; down from the model's window it multiplies the
   concurrency by window / need).
2. ``--max-num-seqs`` up to the target (free: the scheduler's cap on running sequences).
3. ``--gpu-memory-utilization`` up to the largest share that still leaves the CUDA graphs their memory outside
   the share (assumption ``cuda_graph_gib``), and never above the assumption bound 0.95 (free up to there: the
   memory is otherwise idle).
4. ``--max-num-batched-tokens`` halved, never below 2,048 or the sequence cap (it frees the activation
   workspace of the profiled iteration for KV; it costs prefill speed: the same prompt tokens take twice the
   iterations).
5. ``--kv-cache-dtype fp8`` (half the bytes per token; it costs an accuracy check of the model with an FP8 KV
   cache).

Stopping rule: stop when the target concurrency is reached (``min(max-num-seqs, tokens / max model len) >=
target``), or when the next step costs more than it returns: a free step is taken whenever it gains; the token
budget step only when its relative concurrency gain exceeds its relative prefill slowdown (the step model's
time for the old budget's tokens in two iterations of half the size, over one); the FP8 KV step only when it
reaches the target (an accuracy evaluation is a fixed cost that only a reached target repays). What is left
after that is hardware (more tensor parallelism, a larger GPU), which the loop names and does not take.

Every number after every step is RA-BIT's memory model (:func:`core.operations.predict_numbers`); with a
start-up log it starts from the log's flags and from the runtime overhead that reproduces the log
(:func:`core.operations.compare_log`), so the first predicted numbers are the engine's own.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import REGISTRY, GiB
from core.catalog import engine_defaults
from core.config import RabitConfig, resolve
from core.operations import (
    LaunchSpec,
    StartupLog,
    command,
    compare_log,
    model_repo,
    predict_numbers,
)
from core.physics import StepModel

#: The order of adjustment, in words (the page and the CLI print it).
ORDER = (
    "--max-model-len to the workload's longest request (free)",
    "--max-num-seqs up to the target (free)",
    "--gpu-memory-utilization up to the share that leaves the CUDA graphs their memory (free up to there)",
    "--max-num-batched-tokens halved, down to 2,048 (costs prefill speed)",
    "--kv-cache-dtype fp8 (costs an accuracy check)",
)
STOPPING_RULE = (
    "stop when the target concurrency is reached, or when the next step costs more than it returns: a free step "
    "is taken when it gains; halving the token budget only when its concurrency gain exceeds its prefill "
    "slowdown; an FP8 KV cache only when it reaches the target"
)
#: The token budget is never halved below this (vLLM's default for small GPUs, EngineArgs).
MIN_TOKEN_BUDGET = 2048

#: Each engine's name for the five flags (their documented names, core.operations.launch.DOCUMENTED_FLAGS).
FLAGS = {
    "vllm": {
        "max_model_len": "--max-model-len",
        "max_num_seqs": "--max-num-seqs",
        "util": "--gpu-memory-utilization",
        "token_budget": "--max-num-batched-tokens",
        "kv_dtype": "--kv-cache-dtype",
    },
    "sglang": {
        "max_model_len": "--context-length",
        "max_num_seqs": "--max-running-requests",
        "util": "--mem-fraction-static",
        "token_budget": "--chunked-prefill-size",
        "kv_dtype": "--kv-cache-dtype",
    },
    "trtllm": {
        "max_model_len": "--max_seq_len",
        "max_num_seqs": "--max_batch_size",
        "util": "--kv_cache_free_gpu_memory_fraction",
        "token_budget": "--max_num_tokens",
        "kv_dtype": "--kv_cache_dtype",
    },
}


class TuningState(BaseModel):
    """The five flags and RA-BIT's three published numbers at them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_len: int
    max_num_seqs: int
    util: float
    token_budget: int
    kv_dtype: str
    kv_cache_tokens: int
    max_concurrency: float  # tokens / max model len
    concurrency: float  # min(max_num_seqs, max_concurrency): requests of the max model len at once

    def flags(self) -> dict:
        return {
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "util": self.util,
            "token_budget": self.token_budget,
            "kv_dtype": self.kv_dtype,
        }


class TuningStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    change: str  # the flag and its new value
    why: str
    cost: str  # free / speed / quality
    gain_frac: float  # relative concurrency gain
    price_frac: float | None  # its relative cost where it has a number (the prefill slowdown)
    after: TuningState


class TuningPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    config: RabitConfig  # what the numbers are predicted on (the log's flags and calibration over the given config)
    block: int  # KV block size of the engine [tokens]
    engine: str
    target_concurrency: int
    start: TuningState
    steps: tuple[TuningStep, ...]
    reached: bool
    stopped_because: str
    declined: str | None  # the step the rule declined, and why
    command: str  # the final configuration's launch command
    calibrated: dict[str, float]  # assumptions calibrated from the start-up log (empty without one)
    order: tuple[str, ...] = ORDER
    rule: str = STOPPING_RULE

    @property
    def final(self) -> TuningState:
        return self.steps[-1].after if self.steps else self.start

    def as_json(self) -> dict:
        def st(s: TuningState) -> dict:
            return s.model_dump()

        return {
            "engine": self.engine,
            "target_concurrency": self.target_concurrency,
            "order": list(self.order),
            "stopping_rule": self.rule,
            "start": st(self.start),
            "steps": [
                {
                    "change": s.change,
                    "why": s.why,
                    "cost": s.cost,
                    "gain_frac": s.gain_frac,
                    "price_frac": s.price_frac,
                    "after": st(s.after),
                }
                for s in self.steps
            ],
            "reached": self.reached,
            "stopped_because": self.stopped_because,
            "declined": self.declined,
            "final": st(self.final),
            "command": self.command,
            "calibrated": self.calibrated,
        }


def _state(cfg: RabitConfig, flags: dict[str, Any], block: int) -> TuningState:
    c = cfg.with_(
        kv_dtype=flags["kv_dtype"],
        assumptions=cfg.assumptions.with_(gpu_mem_util=flags["util"]),
        workload=cfg.workload.model_copy(update={"max_batch": flags["max_num_seqs"]}),
    )
    p = predict_numbers(c, flags["token_budget"], block, flags["max_model_len"])
    tokens = int(p["kv_cache_tokens"] or 0)
    mc = tokens / flags["max_model_len"]
    return TuningState(**flags, kv_cache_tokens=tokens, max_concurrency=mc, concurrency=min(flags["max_num_seqs"], mc))


def _gain(a: TuningState, b: TuningState) -> float:
    return b.concurrency / a.concurrency - 1 if a.concurrency > 0 else (math.inf if b.concurrency > 0 else 0.0)


def _prefill_slowdown(cfg: RabitConfig, old: int, new: int) -> float:
    """Relative time to prefill ``old`` tokens in chunks of ``new`` instead of one iteration (the step model)."""
    sm = StepModel.from_deployment(resolve(cfg))
    one = float(sm.pipelined_s(old, old * (old + 1) / 2, 0.0, 1))
    n = old / new
    chunks = sum(float(sm.pipelined_s(new, new * (new + 1) / 2 + i * new * new, i * new, 1)) for i in range(int(n)))
    return chunks / one - 1


class _Tuner:
    """The loop's state: the config, the flags as they stand, the replica's state under them and the steps taken."""

    def __init__(self, cfg: RabitConfig, flags: dict[str, Any], block: int, target: int) -> None:
        self.cfg, self.flags, self.block, self.target = cfg, flags, block, target
        self.state = self.start = _state(cfg, flags, block)
        self.steps: list[TuningStep] = []
        self.declined: str | None = None

    def reached(self, s: TuningState | None = None) -> bool:
        return (s if s is not None else self.state).concurrency >= self.target

    def take(self, change: str, why: str, cost: str, new_flags: dict[str, Any], price: float | None = None) -> None:
        after = _state(self.cfg, new_flags, self.block)
        self.steps.append(
            TuningStep(
                change=change, why=why, cost=cost, gain_frac=_gain(self.state, after), price_frac=price, after=after
            )
        )
        self.state, self.flags = after, new_flags

    def decline(self, why: str) -> None:
        self.declined = (self.declined + "; " if self.declined else "") + why


def _start(
    cfg: RabitConfig, log: StartupLog | None, engine: str
) -> tuple[RabitConfig, dict[str, Any], int, dict[str, float]]:
    """(config, flags, block size, calibrated assumptions) the loop starts from: the engine's defaults on the GPU, or
    the flags and the calibration ``log`` shows."""
    dep = resolve(cfg)
    g, m = dep.gpu, dep.model
    d = engine_defaults(engine, g)
    calibrated: dict[str, float] = {}
    block = 16 if engine == "vllm" else 1
    flags: dict[str, Any] = {
        "max_model_len": m.max_context,
        "max_num_seqs": d.max_batch,
        "util": cfg.assumptions.gpu_mem_util,
        "token_budget": d.token_budget,
        "kv_dtype": cfg.kv_dtype,
    }
    if log is not None:
        comp = compare_log(log, cfg)
        cfg = comp.config
        calibrated = dict(comp.calibrated)
        cfg = cfg.with_(assumptions=cfg.assumptions.with_(**calibrated))
        block = log.block_size or block
        flags.update(
            max_model_len=log.context_tokens or flags["max_model_len"],
            max_num_seqs=log.max_num_seqs or flags["max_num_seqs"],
            util=cfg.assumptions.gpu_mem_util,
            token_budget=comp.workspace_tokens,
            kv_dtype=cfg.kv_dtype,
        )
    return cfg, flags, block, calibrated


def tune(
    cfg: RabitConfig,
    target_concurrency: int | None = None,
    log: StartupLog | None = None,
    engine: str | None = None,
) -> TuningPlan:
    """Run the loop (see the module docstring) on ``cfg``, from the engine's defaults or from ``log``'s flags.

    target_concurrency: requests of the workload's longest length the replica must hold at once (default:
    the config's batch).
    """
    engine = engine or (log.engine if log is not None else cfg.workload.engine)
    names = FLAGS[engine]
    target = int(target_concurrency or cfg.batch)
    g = resolve(cfg).gpu
    need = cfg.context_tokens  # the workload's longest request: its prompt plus its output
    cfg, flags, block, calibrated = _start(cfg, log, engine)
    t = _Tuner(cfg, flags, block, target)
    _model_len_and_seqs(t, names, need)
    _memory_share(t, names, log, g.memory_bytes)
    _token_budget(t, names)
    _fp8_kv(t, names, engine)
    flags, state = t.flags, t.state
    if t.reached():
        stopped = f"target reached: {state.concurrency:.1f} >= {target} requests of {flags['max_model_len']:,} tokens"
    else:
        stopped = (
            f"the next step costs more than it returns at {state.concurrency:.1f} of {target}: what is left is "
            f"hardware ({'--tp-size' if engine == 'sglang' else '--tensor-parallel-size'} {2 * cfg.tp} or a "
            "larger GPU)"
        )
    return TuningPlan(
        config=cfg,
        block=block,
        engine=engine,
        target_concurrency=target,
        start=t.start,
        steps=tuple(t.steps),
        reached=t.reached(),
        stopped_because=stopped,
        declined=t.declined,
        command=command(engine, _launch(cfg, flags, g)),
        calibrated=calibrated,
    )


def _model_len_and_seqs(t: _Tuner, names: dict[str, str], need: int) -> None:
    """Steps 1 and 2, both free: the max model len exactly the workload's longest request (up if it was too short:
    the workload needs it), then the sequence cap up to the target."""
    flags = t.flags
    if flags["max_model_len"] != need and not t.reached():
        t.take(
            f"{names['max_model_len']} {need}",
            f"the workload's longest request is {need:,} tokens (prompt plus output); the engine reports and "
            f"reserves concurrency at {flags['max_model_len']:,}",
            "free",
            {**flags, "max_model_len": need},
        )
    flags = t.flags
    if not t.reached() and flags["max_num_seqs"] < t.target:
        t.take(
            f"{names['max_num_seqs']} {t.target}",
            f"the scheduler runs at most {flags['max_num_seqs']:,} sequences",
            "free",
            {**flags, "max_num_seqs": t.target},
        )


def _memory_share(t: _Tuner, names: dict[str, str], log: StartupLog | None, memory_bytes: float) -> None:
    """Step 3, free: the memory share, up to what leaves the CUDA graphs their memory (the log's, else the
    assumption's)."""
    flags = t.flags
    graphs = (log.cuda_graph_bytes if log is not None and log.cuda_graph_bytes else None) or (
        t.cfg.assumptions.cuda_graph_gib * GiB
    )
    u_max = min(REGISTRY["gpu_mem_util"].high, math.floor((1 - graphs / memory_bytes) * 100) / 100)
    if not t.reached() and u_max > flags["util"] + 1e-9:
        t.take(
            f"{names['util']} {u_max:g}",
            f"{(u_max - flags['util']) * memory_bytes / GiB:.1f} GiB more for the KV cache; "
            f"{(1 - u_max) * memory_bytes / GiB:.1f} GiB stays outside the share for the CUDA graphs "
            f"({graphs / GiB:.2f} GiB)",
            "free",
            {**flags, "util": u_max},
        )


def _token_budget(t: _Tuner, names: dict[str, str]) -> None:
    """Step 4, at a cost in speed: the token budget halved while the concurrency it frees outweighs the prefill it
    slows."""
    while not t.reached():
        flags = t.flags
        old = flags["token_budget"]
        new = max(MIN_TOKEN_BUDGET, flags["max_num_seqs"], old // 2)
        if new >= old:
            break
        trial = _state(t.cfg, {**flags, "token_budget": new}, t.block)
        gain, price = _gain(t.state, trial), _prefill_slowdown(t.cfg, old, new)
        if gain <= price:
            t.declined = f"{names['token_budget']} {new}: gains {gain:.2%} concurrency for {price:.1%} slower prefill"
            break
        t.take(
            f"{names['token_budget']} {new}",
            f"a smaller profiled iteration frees workspace for KV ({gain:.2%} more concurrency for {price:.1%} "
            "slower prefill)",
            "speed",
            {**flags, "token_budget": new},
            price,
        )


def _fp8_kv(t: _Tuner, names: dict[str, str], engine: str) -> None:
    """Step 5, at a cost in quality: an FP8 KV cache, only when it reaches the target."""
    flags = t.flags
    if t.reached() or flags["kv_dtype"] == "fp8":
        return
    trial = _state(t.cfg, {**flags, "kv_dtype": "fp8"}, t.block)
    if t.reached(trial):
        t.take(
            f"{names['kv_dtype']} {'fp8_e4m3' if engine == 'sglang' else 'fp8'}",
            "half the bytes per token; check the model's accuracy with an FP8 KV cache before serving",
            "quality",
            {**flags, "kv_dtype": "fp8"},
        )
    else:
        t.decline(
            f"{names['kv_dtype']} fp8 reaches {trial.concurrency:.1f} of {t.target}: an accuracy check that does "
            "not reach the target"
        )


def _launch(cfg: RabitConfig, flags: dict[str, Any], g: Any) -> LaunchSpec:
    """The launch spec of the tuned flags."""
    return LaunchSpec(
        model_repo=cfg.custom_model.name if cfg.custom_model is not None else model_repo(cfg.model),
        gpu=cfg.gpu,
        vendor=g.vendor,
        gpus_per_replica=cfg.tp * cfg.pp,
        tp=cfg.tp,
        pp=cfg.pp,
        replicas=max(1, cfg.dp),
        weights=cfg.weights,
        kv_dtype=flags["kv_dtype"],
        max_num_seqs=flags["max_num_seqs"],
        max_num_batched_tokens=max(flags["token_budget"], flags["max_num_seqs"]),
        max_model_len=flags["max_model_len"],
        gpu_memory_utilization=flags["util"],
        gpus_per_node=g.gpus_per_node,
        ep=cfg.ep,
        cuda_graphs=cfg.workload.cuda_graphs,
    )


def final_ranges(plan: TuningPlan) -> dict:
    """Heuristic ranges of the final KV tokens and concurrency: the final flags, each serving-memory assumption
    alone at its bounds (:func:`core.decision.range_rule.spread`); the memory share is a flag, so it stays."""
    from core.decision.range_rule import spread

    flags = plan.final.flags()

    def estimate(c: RabitConfig) -> dict[str, float]:
        s = _state(c, flags, plan.block)
        return {"final.kv_cache_tokens": float(s.kv_cache_tokens), "final.max_concurrency": s.max_concurrency}

    names = tuple(n for n in REGISTRY if "serving_memory" in REGISTRY[n].moves and n != "gpu_mem_util")
    return spread(plan.config, estimate, names=names).ranges
