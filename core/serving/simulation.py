"""Serving simulation: a deterministic, iteration-level simulator of one replica under continuous batching.

``simulate(cfg, spec) -> SimResult``: same config, spec and seed give byte-identical records.
The pieces live in :mod:`core.serving.sim`: the workload and its draws (:mod:`core.config.workload`), the
iteration timing from :class:`core.physics.StepModel` (:mod:`core.serving.sim.timing`), the event loop
(:mod:`core.serving.sim.engine`) and the metrics (:mod:`core.serving.sim.metrics`); this module wires them to the
shared config and adds the closed-form capacity the simulator is checked against.

KV pool (the RA-BIT spec "Memory"): ``blocks = floor(K_b / (k_g x block))`` with the per-GPU KV budget
``K_b`` and per-token KV ``k_g`` of :func:`core.physics.memory.serving_memory`. Deviation from the issue
notes, physics first: the engine's activation workspace is sized for the tokens of one iteration
(the token budget, or the longest prompt under prefill priority) instead of "batch x context" of
the sidebar's batch: an engine profiles one forward pass of its largest iteration (vLLM runs
``max_num_batched_tokens`` tokens) and gives the rest to the KV cache. The textbook example's workspace
formula ``2 B S h b_a / (tp pp)`` is applied with ``B S`` = those tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Assumptions, WorkBudget
from core.config import LOAD_FIELDS, Deployment, Draws, Lengths, RabitConfig, SimSpec, as_deployment, parse_trace
from core.physics import StepModel, adapter_load_s, serving_memory
from core.serving.front_end import with_front_end
from core.serving.sim import compiled
from core.serving.sim.adapters import AdapterDraws, Adapters
from core.serving.sim.engine import DONE, REJECTED, TIMED_OUT, Engine, Records
from core.serving.sim.metrics import (
    LATENCY_KEYS,
    MIN_N_P95,
    MIN_N_P99,
    SAT_MIN_RESIDENCES,
    Percentiles,
    Summary,
    summarise,
)
from core.serving.sim.pool import Pool
from core.serving.sim.timing import (
    ArrayTiming,
    LinearTiming,
    Timing,
    timing_for,
)

__all__ = [
    "SimSpec",
    "Lengths",
    "SimResult",
    "Summary",
    "Percentiles",
    "Capacity",
    "simulate",
    "kv_pool",
    "max_throughput",
    "sim_spec",
    "sweep",
    "sweep_rates",
    "knee_rates",
    "knee_sweep",
    "SWEEP_REQUESTS",
    "SWEEP_MAX_REQUESTS",
    "sweep_requests",
    "default_rate",
    "round_rate_down",
    "parse_trace",
    "LATENCY_KEYS",
    "MIN_N_P95",
    "MIN_N_P99",
    "DONE",
    "REJECTED",
    "TIMED_OUT",
]


def sim_spec(cfg: RabitConfig, **changes: Any) -> SimSpec:
    """The simulator's workload from the shared config: ``cfg.workload``'s arrival and scheduler fields as they
    are (:data:`core.config.LOAD_FIELDS`, one model), with lengths spread around the config's mean prompt and
    output tokens; ``changes`` override SimSpec fields (e.g. ``trace=``). With data-parallel attention the
    scheduler limits are per rank (:func:`replica_scheduler`)."""
    w = cfg.workload
    lengths = {
        f: Lengths(kind=w.lengths, mean=m, spread=w.spread)
        for f, m in (("input", cfg.input_tokens), ("output", cfg.output_tokens))
    }
    spec = SimSpec.model_validate({**w.model_dump(include=set(LOAD_FIELDS)), **lengths})
    spec = replica_scheduler(spec, cfg)
    return spec.with_(**changes) if changes else spec


def replica_scheduler(spec: SimSpec, cfg: RabitConfig) -> SimSpec:
    """The replica's scheduler limits: with data-parallel attention the engine runs one scheduler per TP rank, each
    with its own ``max_num_seqs`` and token budget (docs.vllm.ai "Data Parallel Deployment": "--max-num-seqs applies
    per DP rank"; SGLang starts one scheduler per DP-attention rank), so the replica's are TP times the engine's;
    ``spec`` unchanged otherwise."""
    if not (cfg.dp_attention and cfg.tp > 1):
        return spec
    return spec.with_(max_batch=spec.max_batch * cfg.tp, token_budget=spec.token_budget * cfg.tp)


def workspace_tokens(spec: SimSpec) -> int:
    """Tokens of the largest iteration the engine can run (what its activation workspace must hold)."""
    if spec.policy == "prefill_priority":
        longest = max(a for a, _ in spec.trace) if spec.trace is not None else spec.input.upper()
        return max(spec.token_budget, longest)
    return spec.token_budget


def kv_pool(dep: Deployment | RabitConfig, spec: SimSpec) -> Pool:
    """The replica's paged KV pool for this workload (see the module docstring)."""
    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    L = m.attention_layers  # the shares are of the layers that cache KV (a hybrid's SSM layers hold none)
    slide = m.sliding_layers if m.sliding_window else 0
    B = cfg.block_size
    if spec.kv_pool_tokens is not None:
        blocks = float(spec.kv_pool_tokens // B)
    else:
        ws = workspace_tokens(spec)
        # one iteration of the workspace's tokens, in one pass (the spec's budget is the chunk)
        one_pass = cfg.workload.with_(token_budget=ws)
        mem = serving_memory(dep.with_(batch=1, input_tokens=ws, output_tokens=1, workload=one_pass), NO_TRACE)
        if (
            mem.kv_budget_bytes_per_gpu <= 0
            or mem.weights_bytes_per_gpu + mem.overhead_bytes_per_gpu > mem.usable_bytes_per_gpu
        ):
            raise ValueError(f"no room for a KV cache: {mem.reason}")
        # a hybrid's fixed per-sequence state is set aside for max_num_seqs sequences first (vLLM's mamba cache
        # is sized for max_num_seqs); the rest holds KV blocks
        state = spec.max_batch * mem.ssm_state_bytes_per_seq_per_gpu
        # a host KV tier (kv_offload_gib) adds its blocks; the step model reads them over the host link
        room = mem.kv_budget_bytes_per_gpu + mem.kv_host_bytes_per_gpu - state
        blocks = float(max(0, math.floor(room / (mem.kv_bytes_per_token_per_gpu * B))))
    return Pool(
        blocks=blocks,
        block=B,
        full_share=(L - slide) / L,
        slide_share=slide / L,
        window=m.sliding_window if slide else 0,
        max_context=m.max_context,
        seq_blocks_max=blocks / cfg.tp if cfg.dp_attention and cfg.tp > 1 else float("inf"),
    )


class Capacity(BaseModel):
    """Closed-form saturation throughput of one replica at the largest batch that fits."""

    model_config = ConfigDict(frozen=True)

    batch: int  # sequences resident at once (rounded down when the token budget sets it)
    requests_per_s: float
    output_tokens_per_s: float
    iteration_s: float  # steady-state iteration (chunked) or decode iteration (prefill priority)
    limited_by: str  # "max batch", "KV pool" or "token budget"
    # multi-LoRA serving (:func:`adapter_sessions`): the share of time the batch waits for adapter loads, and the
    # mean wait of a request for an adapter slot; 0 without adapters or with a slot for every adapter
    adapter_load_stall_frac: float = 0.0
    adapter_slot_wait_s: float = 0.0

    @property
    def residence_s(self) -> float:
        """How long a request stays at capacity [s], by Little's law: ``batch / requests_per_s`` (about
        ``O`` iterations of ``iteration_s`` under chunked prefill)."""
        return self.batch / self.requests_per_s if self.requests_per_s > 0 else math.inf


def max_throughput(
    dep: Deployment | RabitConfig, spec: SimSpec, *, pool: Pool | None = None, sm: StepModel | None = None
) -> Capacity:
    """Closed-form maximum throughput: the fluid steady state of a full batch (mean lengths).

    Batch: ``B = min(max_batch, floor(pool / blocks(I + O - 1)))`` (whole contexts, so every resident
    sequence can finish; under reservation ``blocks(I + max_out)``).
    Each sequence stays ``O`` iterations (one that ends its prefill and emits the first token,
    ``O - 1`` decodes), so ``rho = B / O`` requests start and end per iteration. Chunked prefill,
    perfectly mixed: one iteration carries ``B - rho`` decode tokens at the mean decode context
    ``c = I + (O - 2) / 2`` and ``rho I`` prefill tokens; when that exceeds the token budget ``K``
    the batch settles lower, at ``B = K / (1 + (I - 1) / O)``::

        t = pipelined_s(T = B - rho + rho I,  A = (B - rho)(c + 1) + rho I (I + 1) / 2,  R = (B - rho) c)
        requests/s = rho / t

    Prefill priority: prompts prefilled ``n = min(B, floor(K / I))`` at a time, decodes at batch ``B``::

        1 / requests/s = pipelined_s(n I, n I (I + 1) / 2, 0) / n + (O - 1) pipelined_s(B, B (c + 1), B c) / B

    This is an upper bound the simulation approaches when prefills mix smoothly into decode
    iterations (it ignores the lumpiness of whole-prompt iterations and preemptions).
    """
    dep = as_deployment(dep)
    pool = pool or kv_pool(dep, spec)
    sm = sm or StepModel.from_deployment(dep)
    I_mean, O_mean = spec.mean_lengths()
    I, O = max(1, round(I_mean)), max(1, round(O_mean))
    per_seq = pool.blocks_for(I + (spec.max_output_tokens() if spec.admission == "reserve" else O - 1))
    fit = int(pool.blocks // per_seq) if per_seq > 0 else spec.max_batch
    B: float = max(1, min(spec.max_batch, fit))
    limited = "max batch" if spec.max_batch <= fit else "KV pool"
    c = I + max(O - 2, 0) / 2
    K = spec.token_budget
    if spec.policy == "chunked":
        if B * (1 + (I - 1) / O) > K:
            # the budget caps the tokens per iteration: the batch settles where B (1 + (I - 1) / O) = K
            B = K / (1 + (I - 1) / O)
            limited = "token budget"
        rho = B / O
        dec = B - rho
        T = dec + rho * I
        A = dec * pool.eff(c + 1) + rho * pool.chunk_pairs(0, I)
        R = dec * pool.eff(c)
        t = float(sm.pipelined_s(T, A, R, B))  # B sequences: B - rho decoding, rho prefilling
        rps = rho / t
    else:
        n = max(1, min(B, K // I))
        t_pf = float(sm.pipelined_s(n * I, n * pool.chunk_pairs(0, I), 0.0, n))
        t = float(sm.pipelined_s(B, B * pool.eff(c + 1), B * pool.eff(c)))
        rps = 1.0 / (t_pf / n + (O - 1) * t / B)
    if dep.config.adapters.enabled:
        rps, stall, wait = adapter_sessions(dep, rps, B)
        return Capacity(
            batch=int(B),
            requests_per_s=rps,
            output_tokens_per_s=rps * O,
            iteration_s=t,
            limited_by=limited,
            adapter_load_stall_frac=stall,
            adapter_slot_wait_s=wait,
        )
    return Capacity(batch=int(B), requests_per_s=rps, output_tokens_per_s=rps * O, iteration_s=t, limited_by=limited)


def effective_adapters(popularity: tuple[float, ...]) -> float:
    """How many equally popular adapters the traffic is worth: 1 / sum p_i^2 (N for uniform traffic over N)."""
    return 1.0 / sum(p * p for p in popularity) if popularity else 0.0


def adapter_sessions(dep: Deployment, rps: float, batch: float) -> tuple[float, float, float]:
    """The ``max_loras`` limit of a busy replica in closed form: (requests/s, load stall share, slot wait [s]).

    With ``K`` slots and traffic worth ``N_e`` equally popular adapters (:func:`effective_adapters`), the batch
    serves the requests of at most ``K`` adapters at a time; the others queue until a running adapter's requests
    have all left (vLLM's skip rule). In steady state each running adapter holds ``n / K`` of the ``n = rps t_r``
    requests in flight (``t_r = B / rps_K``, Little's law at the batch ``B``) and the waiting ones hold
    ``(N_e - K) / K`` times as many, so a request waits ``W = t_r (N_e - K) / K`` for a slot; each of the ``rps K / n``
    switches per second loads an adapter in ``t_L`` (from host memory, or from storage for the share the host
    cache misses, ``1 - C / N_e``), during which the batch stands still::

        rps_K = rps / (1 + rps K t_L / B)        W = B / rps_K x (N_e - K) / K        (K < N_e; else rps, 0)

    A model of the mean, not of the tail; the simulator plays the rule itself.
    """
    a = dep.config.adapters
    engine = dep.config.workload.engine
    K = a.slots(engine)
    n_e = effective_adapters(a.popularity())
    if K >= n_e or rps <= 0 or batch <= 0:
        return rps, 0.0, 0.0
    hit = min(1.0, a.host_slots(engine) / n_e)
    t_load = hit * adapter_load_s(dep, a.max_rank, from_storage=False) + (1 - hit) * adapter_load_s(
        dep, a.max_rank, from_storage=True
    )
    stall_rps = rps / (1 + rps * K * t_load / batch)
    t_r = batch / stall_rps
    return stall_rps, 1 - stall_rps / rps, t_r * (n_e - K) / K


def adapter_draws(dep: Deployment, spec: SimSpec) -> AdapterDraws | None:
    """Which adapter each request of a run carries (None without adapters): the traffic's popularity, or the
    trace's adapter column."""
    a = dep.config.adapters
    return AdapterDraws(a.popularity(), spec.seed, spec.adapter_trace) if a.enabled else None


def replica_adapters(dep: Deployment, draws: AdapterDraws | None, gids: list[int] | None = None) -> Adapters | None:
    """The adapter state of one simulated replica (None without adapters): the run's adapter ``draws`` (``gids``:
    a deployment's replica, the deployment's number of each of its requests), the engine's slots and host cache,
    and the time to load an adapter of each rank from host memory or from storage
    (:func:`core.physics.adapter_load_s`)."""
    a = dep.config.adapters
    if draws is None or not a.enabled:
        return None
    engine = dep.config.workload.engine
    ranks = a.ranks[: min(a.count, len(a.ranks))]
    host = {r: adapter_load_s(dep, r, from_storage=False) for r in set(ranks)}
    storage = {r: adapter_load_s(dep, r, from_storage=True) for r in set(ranks)}
    return Adapters(draws, ranks, a.slots(engine), a.host_slots(engine), host, storage, gids)


def _ro(x: np.ndarray) -> np.ndarray:
    x.flags.writeable = False
    return x


@dataclass(frozen=True)
class SimResult:
    """One simulation: the summary, per-request records and the time series (read-only numpy arrays).

    ``status``: 0 completed, 1 rejected on arrival, 2 timed out. Times in seconds from the start.
    """

    spec: SimSpec
    summary: Summary
    capacity: Capacity
    kv_pool_tokens: int
    timing: str  # "tabulated" (closed-form runs) or "direct" (StepModel.iteration_s per run)
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    status: np.ndarray
    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    ts_s: np.ndarray
    ts_waiting: np.ndarray
    ts_running: np.ndarray
    ts_kv_frac: np.ndarray
    #: the event loop that ran it: "compiled" (core.serving.sim.compiled) or "python" (the same records)
    loop: str = "python"
    #: why the Python loop ran it (one of core.serving.sim.compiled.FALLBACK_REASONS), None where the compiled did
    fallback_reason: str | None = None

    @property
    def utilisation_frac(self) -> float:
        """The load as a share of what the deployment carries [1]: the arrival rate (Poisson: the spec's; a closed
        loop or a trace: the observed one) times each request's service demand, 1 / the closed-form capacity
        (rho = lambda / mu). Not the share of time an iteration runs (``summary.gpu_busy_share``): a replica
        decoding a few long answers runs iterations nearly all the time at a small share of the batch it could
        carry."""
        mu = self.capacity.requests_per_s
        lam = self.spec.rate_per_s if self.spec.arrival == "poisson" else self.summary.arrival_rate_per_s
        return lam / mu if mu > 0 else 0.0

    def samples(self, metric: str) -> np.ndarray:
        """Per-request samples behind a latency percentile: ``ttft_s``, ``itl_s``, ``e2e_s`` or ``queue_s``."""
        done = self.status == DONE
        a = self.arrival_s[done]
        if metric == "ttft_s":
            return self.first_token_s[done] - a
        if metric == "e2e_s":
            return self.finish_s[done] - a
        if metric == "queue_s":
            return self.admitted_s[done] - a
        if metric == "itl_s":
            multi = done & (self.output_tokens >= 2)
            return (self.finish_s[multi] - self.first_token_s[multi]) / (self.output_tokens[multi] - 1)
        raise KeyError(f"unknown metric {metric!r}; use ttft_s, itl_s, e2e_s or queue_s")


def simulate(
    dep: Deployment | RabitConfig,
    spec: SimSpec,
    *,
    timing: str = "auto",
    budget: WorkBudget | None = None,
    loop: str = "auto",
) -> SimResult:
    """Simulate one replica of ``cfg`` serving the workload ``spec`` (deterministic in ``spec.seed``).

    ``timing``: ``"auto"`` (the tabulated closed form when it reproduces the step model, which the
    constructor checks), ``"direct"`` (always call ``StepModel.pipelined_s``; the reference). ``loop``: ``"auto"``
    (the compiled event loop where it takes the run: :func:`core.serving.sim.compiled.fallback_reason` is None), ``"python"``
    (always the Python loop: the reference it matches to the byte).
    Raises ``ValueError`` when the replica has no room for a KV cache, and
    :class:`core.base.limits.BudgetExceeded` (a ``ValueError``) past the work ``budget`` (default: the
    shared server's, :class:`core.base.limits.WorkBudget`).
    """
    dep = as_deployment(dep)
    sm, tm = replica_timing(dep, spec, timing)
    pool = kv_pool(dep, spec)
    rng = np.random.default_rng(spec.seed)
    draws, lora = Draws(spec, rng), replica_adapters(dep, adapter_draws(dep, spec))
    rec, why = run_one(spec, tm, pool, draws, lora, budget, loop)
    capacity = max_throughput(dep, spec, pool=pool, sm=sm)
    res = result_of(
        spec,
        rec,
        capacity,
        int(pool.blocks * pool.block),
        isinstance(tm, LinearTiming),  # a HostTierTiming is one
        front_end=dep.assumptions,
    )
    return replace(res, loop="python" if why else "compiled", fallback_reason=why)


#: The event loops a simulation may take (``loop=``): the compiled one where it takes the run, or the Python one.
LOOPS = ("auto", "python")


def check_loop(loop: str) -> None:
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")


def run_one(
    spec: SimSpec,
    tm: Timing,
    pool: Pool,
    draws: Draws,
    lora: Adapters | None,
    budget: WorkBudget | None,
    loop: str = "auto",
) -> tuple[Records, str | None]:
    """One replica's run and why the Python loop ran it (None: the compiled loop did, where it takes the run and
    ``loop`` is ``"auto"``; :func:`core.serving.sim.compiled.fallback_reason`); the same records either way."""
    check_loop(loop)
    why = compiled.ASKED if loop == "python" else None
    why = why or compiled.fallback_reason(spec, tm, pool, 1, "round-robin", adapters=lora, extended=True)
    if why is None:
        got = compiled.run(spec, tm, pool, draws, 1, "round-robin", spec.seed, budget, lora=lora)
        if got is not None:
            return got[0][0], None
        why = compiled.PAST_TABLE
    return Engine(spec, tm, pool, draws, lora).run(budget), why


def table_tokens(spec: SimSpec, max_context: int, *, sessions: bool = False) -> int:
    """The most new tokens one iteration of this run can carry: the rows the iteration timing tabulates.

    Chunked prefill never schedules past the token budget ``K``. Prefill priority runs a prompt longer than ``K``
    whole when it is the iteration's first (``Engine._plan_prefill_priority``), and a preempted request recomputes
    its prompt and the tokens it had generated, so its iterations reach the longest context the run admits: the
    longest replayed row, or the largest prompt plus the largest output the distributions draw, or, for sessions
    (whose prompts carry their history), the model's window; never past the window (longer requests are
    rejected)."""
    K = int(spec.token_budget)
    if spec.policy != "prefill_priority":
        return K
    if sessions:
        longest = max_context
    elif spec.trace is not None:
        longest = max(a + b for a, b in spec.trace)
    else:
        longest = spec.input.upper() + spec.output.upper()
    return max(K, min(int(longest), int(max_context)))


def replica_timing(
    dep: Deployment, spec: SimSpec, timing: str = "auto", *, sessions: bool = False
) -> tuple[StepModel, Timing]:
    """The step model of one replica of ``dep`` and the iteration timing the engine reads (see :func:`simulate`),
    tabulated over every iteration size the run can schedule (:func:`table_tokens`)."""
    sm = StepModel.from_deployment(dep)
    if timing == "direct":
        return sm, ArrayTiming(sm)
    rows = table_tokens(spec, dep.model.max_context, sessions=sessions)
    return sm, timing_for(sm, dep.config.pp, rows, float(min(dep.model.max_context, 32768)))


def result_of(
    spec: SimSpec,
    rec: Records,
    capacity: Capacity,
    kv_pool_tokens: int,
    tabulated: bool,
    residence_s: float | None = None,
    *,
    front_end: Assumptions,
) -> SimResult:
    """The :class:`SimResult` of a run's records (its summary against the closed-form ``capacity``), each request's
    first token and finish as its client sees them (the API server's time added, :func:`with_front_end` at
    ``front_end``'s values).

    ``residence_s``: a request's closed-form residence time [s] (default ``capacity.residence_s``; a deployment of
    R replicas passes one replica's, since R replicas' capacity does not shorten a request's stay)."""
    residence = capacity.residence_s if residence_s is None else residence_s
    rec = with_front_end(rec, front_end)
    summary = summarise(rec, spec.arrival == "closed", capacity.requests_per_s, residence)
    return SimResult(
        spec=spec,
        summary=summary,
        capacity=capacity,
        kv_pool_tokens=kv_pool_tokens,
        timing="tabulated" if tabulated else "direct",
        arrival_s=_ro(np.array(rec.arrival_s, dtype=float)),
        input_tokens=_ro(np.array(rec.input_tokens, dtype=np.int64)),
        output_tokens=_ro(np.array(rec.output_tokens, dtype=np.int64)),
        status=_ro(np.array(rec.status, dtype=np.int8)),
        admitted_s=_ro(np.array(rec.admitted_s, dtype=float)),
        first_token_s=_ro(np.array(rec.first_token_s, dtype=float)),
        finish_s=_ro(np.array(rec.finish_s, dtype=float)),
        preemptions=_ro(np.array(rec.preemptions, dtype=np.int64)),
        ts_s=_ro(np.array(rec.ts_s, dtype=float)),
        ts_waiting=_ro(np.array(rec.ts_waiting, dtype=float)),
        ts_running=_ro(np.array(rec.ts_running, dtype=float)),
        ts_kv_frac=_ro(np.array(rec.ts_kv_frac, dtype=float)),
    )


#: Arrival rates of a load sweep, as fractions of the closed-form capacity: dense around the knee.
SWEEP_FRACTIONS = (0.1, 0.3, 0.5, 0.65, 0.75, 0.85, 0.95, 1.05, 1.2)


def sweep_rates(capacity_requests_per_s: float, fractions: tuple[float, ...] = SWEEP_FRACTIONS) -> tuple[float, ...]:
    """Arrival rates [requests/s] for a p95-vs-load sweep around the closed-form capacity."""
    return tuple(float(f"{capacity_requests_per_s * f:.3g}") for f in fractions)


def round_rate_down(rate_per_s: float) -> float:
    """The largest 1-2-5 series rate [requests/s] not above ``rate_per_s`` (0.718 -> 0.5; 7.3 -> 5; 13 -> 10)."""
    if not rate_per_s > 0 or not math.isfinite(rate_per_s):
        raise ValueError(f"rate must be a positive finite number of requests/s, got {rate_per_s}")
    exp = math.floor(math.log10(rate_per_s))
    for m in (5, 2, 1):
        v = m * 10.0**exp
        if v <= rate_per_s * (1 + 1e-12):
            return float(f"{v:.3g}")
    return float(f"{10.0**exp:.3g}")


#: The starting rate is half the closed-form capacity, rounded down to a 1-2-5 value: 25-50 % of capacity,
#: clearly stable, and a number a reader can repeat.
DEFAULT_RATE_FRACTION = 0.5


def default_rate(capacity_requests_per_s: float) -> float:
    """A round starting arrival rate [requests/s] clearly inside capacity (1.44 req/s capacity -> 0.5)."""
    return round_rate_down(capacity_requests_per_s * DEFAULT_RATE_FRACTION)


def knee_rates(capacity_requests_per_s: float, chosen_per_s: float | None = None) -> tuple[float, ...]:
    """Sweep rates [requests/s] around the closed-form capacity and around the chosen rate, ascending.

    Around capacity alone, a chosen rate 30x above it leaves every point in the left 3 % of the axis; the
    chosen rate brings its own points (x0.5 .. x1.5) so both regions of the chart carry data.
    """
    rates = set(sweep_rates(capacity_requests_per_s))
    if (
        chosen_per_s is not None
        and chosen_per_s > 0
        and not (0.5 * capacity_requests_per_s <= chosen_per_s <= 1.5 * capacity_requests_per_s)
    ):
        rates |= set(sweep_rates(chosen_per_s, (0.5, 0.75, 1.0, 1.25, 1.5)))
    return tuple(sorted(r for r in rates if r > 0))


#: Requests simulated at each point of a load sweep (the Serving page's p95 against arrival rate) at least: 30 times
#: the 20 samples a p95 needs. Each point gets more when its rate needs them to span the saturation verdict's
#: residence times (:data:`core.serving.sim.metrics.SAT_MIN_RESIDENCES`), up to :data:`SWEEP_MAX_REQUESTS`.
SWEEP_REQUESTS = 600
#: The most requests one point of a load sweep simulates (a 70B replica's 14 points stay around a second).
SWEEP_MAX_REQUESTS = 4000


def sweep_requests(rate_per_s: float, residence_s: float) -> int:
    """Requests a load-sweep point at ``rate_per_s`` simulates: enough that the second half of its arrivals,
    ``n / (2 rate)``, spans the verdict's residence times with a tenth to spare, rounded up to a hundred, between
    :data:`SWEEP_REQUESTS` and :data:`SWEEP_MAX_REQUESTS` (Llama-3.1-70B on 8 x H100, 4,096 + 4,096 tokens, at
    1.64 requests/s: 2 x 4 x 126 s x 1.64/s x 1.1 = 1,813 -> 1,900)."""
    if not (math.isfinite(residence_s) and rate_per_s > 0):
        return SWEEP_REQUESTS
    need = 2 * SAT_MIN_RESIDENCES * residence_s * rate_per_s * 1.1
    return int(min(SWEEP_MAX_REQUESTS, max(SWEEP_REQUESTS, math.ceil(need / 100) * 100)))


def knee_sweep(spec: SimSpec, capacity: Capacity) -> tuple[SimSpec, tuple[float, ...]]:
    """The workload of each point of a p95-against-rate sweep and the rates to sweep: Poisson arrivals, the
    requests of :func:`sweep_requests` at the fastest rate (the rate is set at each point; slower points span
    longer), at the rates of :func:`knee_rates` around the closed-form capacity and the workload's own Poisson
    rate. A point whose run is still too short says "too short to tell", never "saturated" on the backlog alone."""
    rates = knee_rates(capacity.requests_per_s, spec.rate_per_s if spec.arrival == "poisson" else None)
    n = sweep_requests(max(rates), capacity.residence_s)
    return spec.with_(arrival="poisson", rate_per_s=1.0, num_requests=n, duration_s=None), rates


def sweep(
    dep: Deployment | RabitConfig,
    spec: SimSpec,
    rates_per_s: tuple[float, ...],
    progress: Callable[[float], None] | None = None,
) -> tuple[tuple[float, Summary], ...]:
    """The summary at each Poisson arrival rate (the same seed, lengths and scheduler).

    ``progress`` (optional) is called with the finished share after each rate.
    """
    dep = as_deployment(dep)
    out = []
    for i, r in enumerate(rates_per_s):
        out.append((r, simulate(dep, spec.with_(arrival="poisson", rate_per_s=r)).summary))
        if progress is not None:
            progress((i + 1) / len(rates_per_s))
    return tuple(out)
