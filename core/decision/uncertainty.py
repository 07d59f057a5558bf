"""Heuristic ranges of each page's headline numbers: memory, speed (every bound of the step-time model in one
evaluation), the throughput band against batch, the simulated percentiles and the saturation verdict, the
training layout and deadline, a saved analysis's headline and a measured run's prediction.

Each applies the one rule of :mod:`core.decision.range_rule` (each assumption alone at its low and high bound, the
log-moves combined) to the estimate the page shows; this is a heuristic range from the assumption bounds, not a
confidence interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.base import NO_TRACE, Range, by_tag
from core.config import RabitConfig, resolve
from core.decision.calibration import predict
from core.decision.range_rule import (
    Estimate,
    Spread,
    at_bound,
    bound_values,
    combine_arrays,
    provably_equal,
    rebase,
    spread,
    spread_of,
    with_assumption,
)
from core.physics import ServingMemory, StepModel, adapter_load_s, serving_memory, training_memory
from core.serving import (
    SpeedSummary,
    chunked_prompt_s,
    decode,
    decode_times,
    mean_over_steps,
    pipeline_fill_s,
    pool_deployment,
    prefill,
    prefill_numbers,
    replicas_of,
    sim_spec,
    simulate,
    speed_summary,
)
from core.training import catalog_price, config_layout, evaluate_layout, goodput, plan

#: Most requests per simulation at an assumption's bound (the base keeps the full workload; the bound runs take the
#: first of its requests, at most this many, against a base run of the same size and seed for the log-ratios).
#: Near capacity a bound that moves the step time by a few per cent moves the queue, and the latencies with it, by
#: far more than a short run shows: at 97 % of a replica's capacity (the vllm-lifecycle stage Llama-2-7B general at
#: 20 requests/s) 300-request bound runs gave a mean E2E range of 4.7-10.6 s and whole 12,000-request ones 3.6-124 s
#: (4.16 s measured); Llama-3.1-8B on one H100 under the default workload (0.5 requests/s of 4,096 + 4,096 tokens:
#: 85 % of its 0.59 requests/s) saturates at the pessimistic mbu and kv_read_bw_eff bounds, which 256-request bound
#: runs did not show (p95 TTFT range 0.21-0.33 s; 0.19 s-17 min from its 1,000 requests).
#: 4,000 requests keep a bound's queue long enough to show its trend, at about 1 s more than the full run on the
#: compiled loop (the default workload's range pass: 0.37 s; 4,000 requests: 1.0 s; 20,000: 3.0 s, one core).
RANGE_SIM_REQUESTS = 4_000
#: The same where the full run took the Python loop (:attr:`core.serving.SimulationResult.loop`: a host KV tier
#: reached, pipeline stages, per-step timing), about 50 times slower per request: 2,000-request bound runs of a run
#: that spills into a 64 GiB host tier (Llama-3.1-70B on 2 x H100) took 32 s against 0.6 s for the plain run.
RANGE_SIM_REQUESTS_PYTHON_LOOP = 256


def step_model_screen(cfg: RabitConfig) -> Any:
    """Everything the step time reads from the config (the speed and simulation estimates depend on it)."""
    return StepModel.from_deployment(resolve(cfg))


def serving_screen(cfg: RabitConfig) -> Any:
    """The step-time model and the KV budget: all a simulated replica reads from the assumptions (with adapters,
    also the time to load each rank from host memory and from storage)."""
    m = serving_memory(cfg, NO_TRACE)
    loads: tuple[float, ...] = ()
    if cfg.adapters.enabled:
        loads = tuple(
            adapter_load_s(cfg, r, from_storage=s) for r in sorted(set(cfg.adapters.ranks)) for s in (False, True)
        )
    return (
        step_model_screen(cfg),
        m.kv_budget_bytes_per_gpu,
        m.usable_bytes_per_gpu,
        m.overhead_bytes_per_gpu,
        *((loads,) if loads else ()),
    )


# --- the estimates of each page ------------------------------------------------------------------------------


def memory_estimate(cfg: RabitConfig) -> dict[str, Any]:
    r = serving_memory(cfg, NO_TRACE)
    return {
        "max_sequences": float(r.max_sequences),
        "max_sequences_contiguous": float(r.max_sequences_contiguous),
        "kv_budget_bytes_per_gpu": r.kv_budget_bytes_per_gpu,
        "kv_bytes_per_gpu": r.kv_bytes_per_gpu,
        "usable_bytes_per_gpu": r.usable_bytes_per_gpu,
        "overhead_bytes_per_gpu": r.overhead_bytes_per_gpu,
        "weights_bytes_per_gpu": r.weights_bytes_per_gpu,
        "activation_bytes_per_gpu": r.activation_bytes_per_gpu,
        "total_bytes_per_gpu": r.total_bytes_per_gpu,
        "capacity_bytes_per_gpu": r.capacity_bytes_per_gpu,
        "kv_bytes_per_seq_per_gpu": r.kv_bytes_per_seq_per_gpu,
        "fits": r.fits,
    }


def memory_spread(cfg: RabitConfig, bounds: Mapping[str, tuple[float, float]] | None = None) -> Spread:
    """Ranges of the serving memory headline numbers (memory utilisation, runtime overhead)."""
    return spread(cfg, memory_estimate, ("serving_memory",), bounds=bounds)


def training_memory_estimate(cfg: RabitConfig) -> dict[str, Any]:
    r = training_memory(cfg)
    return {
        "total_bytes_per_gpu": r.total_bytes_per_gpu,
        "overhead_bytes_per_gpu": r.overhead_bytes_per_gpu,
        "weight_bytes_per_gpu": r.weight_bytes_per_gpu,
        "gradient_bytes_per_gpu": r.gradient_bytes_per_gpu,
        "optimizer_bytes_per_gpu": r.optimizer_bytes_per_gpu,
        "activation_bytes_per_gpu": r.activation_bytes_per_gpu,
        "capacity_bytes_per_gpu": r.capacity_bytes_per_gpu,
        "fits": r.fits,
    }


def training_memory_spread(cfg: RabitConfig) -> Spread:
    """Ranges of the training memory per GPU (the runtime overhead is the only assumption it reads)."""
    return spread(cfg, training_memory_estimate, ("training_memory",))


def speed_estimate(cfg: RabitConfig) -> dict[str, Any]:
    pf, d = prefill(cfg, NO_TRACE), decode(cfg, NO_TRACE)
    return {
        "prefill_s": pf.ttft_s,
        "ttft_one_prompt_s": pf.ttft_one_s,
        "decode_step_s": d.step_s,
        "tokens_per_s": d.tokens_per_s,
        "tokens_per_s_per_user": d.tokens_per_s_per_user,
        "tokens_per_s_per_gpu": d.tokens_per_s_per_gpu,
        "comm_s_per_step": d.comm_s_per_step,
        "e2e_s": pf.ttft_s + d.step_s * max(cfg.output_tokens - 1, 0),
        "bound": d.bound,
        "prefill_bound": pf.bound,
    }


# --- vectorised bound evaluation of the step-time model ------------------------------------------------------


def stack_models(models: Sequence[Any], ndim: int = 0) -> Any:
    """One :class:`core.physics.step.StepModel` standing for ``len(models)`` of them: every numeric constant that
    differs between them becomes an array of shape ``(K,) + (1,) * ndim``, so the one step-time body
    (``StepModel.stage_parts`` / ``iteration_s``), given ``ndim``-dimensional arrays, evaluates all K models in
    one call (results of shape ``(K, ...)``). Constants they share stay scalars."""
    first = models[0]
    update = {}
    for f in dataclasses.fields(first):
        vals = [getattr(m, f.name) for m in models]
        if all(v is vals[0] or v == vals[0] for v in vals[1:]):
            continue
        update[f.name] = np.asarray(vals, dtype=float).reshape((len(vals),) + (1,) * ndim)
    return dataclasses.replace(first, **update) if update else first


def bound_models(
    cfg: RabitConfig, names: tuple[str, ...], bounds: Mapping[str, tuple[float, float]] | None = None
) -> tuple[Any, tuple[tuple[str, float, Any], ...]]:
    """The step model at base and at each assumption's bounds: ``(base, ((name, value, model), ...))``.

    A bound whose step model equals the base's is left out (it cannot move anything the step time decides).
    """
    base = StepModel.from_deployment(resolve(cfg))
    out = []
    for n in names:
        for v in bound_values(n, getattr(cfg.assumptions, n), bounds):
            sm = StepModel.from_deployment(resolve(with_assumption(cfg, n, v)))
            if not provably_equal(sm, base):
                out.append((n, v, sm))
    return base, tuple(out)


def _bound_of(c: np.ndarray, m: np.ndarray, x: np.ndarray) -> list[str]:
    """Which limit binds each iteration (ties go to compute, then memory, as ``core.physics.step.iteration``)."""
    shape = np.broadcast_shapes(np.shape(c), np.shape(m), np.shape(x))
    parts = np.stack([np.broadcast_to(np.asarray(a, dtype=float), shape) for a in (c, m, x)])
    names = ("compute", "memory", "communication")
    return [names[i] for i in np.argmax(parts, axis=0).ravel()]


def speed_rows(cfg: RabitConfig, models: Sequence[Any]) -> list[dict[str, Any]]:
    """:func:`speed_estimate` for each step model of ``cfg`` (one per bound), without its trace and result
    objects: the single iterations (the prefill, one prompt alone, the decode step at the mean context) of all K
    models in one call of the step-time body over a stack of the models, the decode steps (an array over the
    output already) one model at a time."""
    if not models:
        return []
    k = len(models)
    sm0 = models[0]
    pf = prefill_numbers(sm0, cfg, cfg.batch)  # T, A, R of the prefill do not depend on the assumptions
    s1 = stack_models(models, 1)
    one = np.ones(1)

    def it(T: float, A: float, R: float, S: float | None = None) -> tuple[np.ndarray, ...]:
        """One iteration (T tokens, A pairs, R cached tokens, S sequences) of every model: (compute, memory,
        exposed communication, busy, time), each of shape (K,)."""
        D = s1.distinct_adapters((T if S is None else S) * one)  # 0 without adapters
        c, mm, x = s1.stage_parts(T * one, A * one, R * one, D)[:3]
        b = s1.busy_s(c, mm, A * one, R * one)
        t = s1.iteration_s(T * one, A * one, R * one, None if S is None else S * one)
        return tuple(np.broadcast_to(np.asarray(a, dtype=float).reshape(-1), (k,)) for a in (c, mm, x, b, t))

    if pf.chunked:  # as core.serving.speed: a long prompt chunk by chunk, the batch's prompts one after another
        s_n = stack_models(models, 1)
        ttft_one = np.broadcast_to(np.asarray(chunked_prompt_s(s_n, pf.chunks), dtype=float).reshape(-1), (k,))
        ttft = cfg.batch * ttft_one
        pc, pm, px = (  # the bound of the last chunk, as core.serving.speed's (its prefill iteration)
            np.broadcast_to(np.asarray(np.take(v, -1, axis=-1), dtype=float).reshape(-1), (k,))
            for v in s_n.stage_parts(pf.chunks.T, pf.chunks.A, pf.chunks.R)[:3]
        )
    else:
        # as core.serving.speed.prefill_numbers: the whole batch's prompts as m pipeline micro-batches, and one
        # prompt alone
        pc, pm, px, pb, t_mb = it(pf.T / pf.m, pf.A / pf.m, pf.R / pf.m, pf.it.seqs)
        ttft = pipeline_fill_s(t_mb, pf.m, pb, px)
        _, _, _, _, ttft_one = it(float(pf.uncached), pf.one.pairs, pf.one.kv_tokens, pf.one.seqs)
    b = math.ceil(cfg.batch / sm0.pp)
    N = max(cfg.output_tokens - 1, 1)
    ctx = cfg.input_tokens + (N - 1) / 2
    s_read, s_att = float(sm0.kv_read_tokens(ctx)), float(sm0.kv_read_tokens(ctx + 1))
    dc, dm, dx, _, _ = it(float(b), b * s_att, b * s_read)
    hops = np.broadcast_to(np.asarray(s1.hops_s(float(b) * one), dtype=float).reshape(-1), (k,))
    # the decode steps of one model at a time: a (steps,) array stays in cache, where one (K, steps) array of
    # every bound does not (measured: the stacked evaluation is slower here, the scalar iterations above faster)
    means = []
    for sm in models:
        n, t = decode_times(sm, b, cfg.input_tokens, N)
        means.append(mean_over_steps(n, t, N))
    dp = replicas_of(cfg)
    pf_bound, d_bound = _bound_of(pc, pm, px), _bound_of(dc, dm, dx)
    rows = []
    for i in range(k):
        mean_s = means[i]
        r_r = cfg.batch / mean_s
        rows.append(
            {
                "prefill_s": float(ttft[i]),
                "ttft_one_prompt_s": float(ttft_one[i]),
                "decode_step_s": mean_s,
                "tokens_per_s": r_r * dp,
                "tokens_per_s_per_user": 1 / mean_s,
                "tokens_per_s_per_gpu": r_r * dp / cfg.gpus,
                "comm_s_per_step": float(sm0.pp * dx[i] + hops[i]),
                "e2e_s": float(ttft[i]) + mean_s * max(cfg.output_tokens - 1, 0),
                "bound": d_bound[i],
                "prefill_bound": pf_bound[i],
            }
        )
    return rows


def speed_spread(
    cfg: RabitConfig, bounds: Mapping[str, tuple[float, float]] | None = None, models: Any = None
) -> Spread:
    """Ranges of TTFT, decode step and tokens/s; ``labels("bound")`` says whether the binding limit changes.

    The same rule as :func:`spread` with :func:`speed_estimate` (which depends on the config only through its
    step model), evaluated by :func:`speed_rows` for every bound at once instead of one full estimate per bound
    (the same numbers: ``tests/test_ranges_vectorised.py``). ``models``: ``bound_models(cfg, by_tag("serving_speed"), bounds)`` when the
    caller already has it.
    """
    base = speed_estimate(cfg)
    _, moved = models if models is not None else bound_models(cfg, by_tag("serving_speed"), bounds)
    rows = speed_rows(cfg, [sm for _, _, sm in moved])
    runs: list[tuple[str, float, dict[str, Any]]] = []
    done = {(n, v) for n, v, _ in moved}
    by_run = {(n, v): row for (n, v, _), row in zip(moved, rows)}
    for n in by_tag("serving_speed"):
        for v in bound_values(n, getattr(cfg.assumptions, n), bounds):
            runs.append((n, v, by_run[(n, v)] if (n, v) in done else dict(base)))
    return spread_of(base, runs)


#: Decode steps per batch at which a bound's log-move is taken on the batch curve (the step model's own
#: uniform-grid mean, :func:`core.serving.speed.decode_times`); the base values keep every step.
BAND_DECODE_POINTS = 257


def batch_band(
    cfg: RabitConfig, batches: tuple[int, ...], models: Any = None
) -> dict[str, tuple[tuple[float, float, float], ...]]:
    """Aggregate and per-user tokens/s against batch: (low, base, high) per batch.

    Each point's range follows the combination rule (each assumption alone at its low and high bound), as
    the headline numbers' do. All bounds and all batches are one evaluation of the step-time body over a
    (bounds, batches, steps) array; a bound's log-move is taken on :data:`BAND_DECODE_POINTS` decode steps
    (the base on the same grid) and applied to the base value over every step. ``models``: as for
    :func:`speed_spread`.
    """
    base_sm, moved = models if models is not None else bound_models(cfg, by_tag("serving_speed"))
    N = max(cfg.output_tokens - 1, 1)
    bs = np.asarray(batches, dtype=float)
    mb = np.ceil(bs / base_sm.pp)
    dp = replicas_of(cfg)
    exact = np.empty(len(mb))
    for i, b in enumerate(mb):
        n_b, t_b = decode_times(base_sm, int(b), cfg.input_tokens, N)
        exact[i] = mean_over_steps(n_b, t_b, N)
    out: dict[str, tuple[tuple[float, float, float], ...]] = {}
    values = {"tokens_per_s": bs / exact * dp, "tokens_per_s_per_user": 1 / exact}
    if not moved:
        return {k: tuple((float(v), float(v), float(v)) for v in vs) for k, vs in values.items()}
    s2 = stack_models([base_sm] + [sm for _, _, sm in moved], 2)
    n = np.arange(1, N + 1, dtype=float) if N <= BAND_DECODE_POINTS else np.linspace(1.0, float(N), BAND_DECODE_POINTS)
    R = cfg.input_tokens + n - 1
    kv1 = np.asarray(base_sm.kv_read_tokens(R + 1), dtype=float)
    kv0 = np.asarray(base_sm.kv_read_tokens(R), dtype=float)
    b = mb[:, None]
    t = np.asarray(s2.iteration_s(b * np.ones_like(n), b * kv1, b * kv0), dtype=float)  # (K, batches, steps)
    t = np.broadcast_to(t, (1 + len(moved), len(mb), len(n)))
    mean = t.mean(axis=-1) if len(n) == N else ((t[..., 1:] + t[..., :-1]) / 2).mean(axis=-1)
    ratio = mean[0] / mean[1:]  # tokens/s at a bound / at base, on the same grid
    names = [nm for nm, _, _ in moved]
    for key, v in values.items():
        lo, hi = combine_arrays(v, names, v * ratio)
        out[key] = tuple((float(a), float(m), float(c)) for a, m, c in zip(lo, v, hi))
    return out


def simulation_estimate(spec) -> Estimate:
    def est(cfg: RabitConfig) -> dict[str, Any]:
        try:
            r = simulate(cfg, spec)
        except ValueError:  # no room for a KV cache at this bound
            return {"saturated": True}
        return {**_summary_dict(r), "saturated": bool(r.summary.saturated)}

    return est


@dataclass(frozen=True)
class SimulationRanges:
    ranges: dict[str, Range]
    saturated: bool  # the full run's verdict
    saturated_at: dict[str, bool]  # "low" / "base" / "high" -> verdict of the shortened run at that bound
    requests_at_bounds: int

    @property
    def verdict_changes(self) -> bool:
        return len(set(self.saturated_at.values()) | {self.saturated}) > 1

    def verdict_text(self) -> str:
        pess, opt = self.saturated_at.get("low"), self.saturated_at.get("high")
        if not self.verdict_changes:
            return "saturated at every bound" if self.saturated else "stable at every bound"
        if not self.saturated and pess:
            return "stable at base, but saturated at the pessimistic bound"
        if self.saturated and not opt:
            return "saturated at base, but stable at the optimistic bound"
        return "the saturation verdict changes inside the range"


def simulation_spread(cfg: RabitConfig, spec, full=None) -> SimulationRanges:
    """Ranges of the simulated percentiles, throughput and capacity of one replica.

    The full run gives the values; the bound runs use the first ``RANGE_SIM_REQUESTS`` requests of the same
    seeded workload (``RANGE_SIM_REQUESTS_PYTHON_LOOP`` where the full run took the Python loop), with a base run of
    that size for the log-ratios. The saturation verdict is also taken with every assumption at its pessimistic and optimistic
    bound.
    """
    full = full if full is not None else simulate(cfg, spec)
    most = RANGE_SIM_REQUESTS if full.loop == "compiled" else RANGE_SIM_REQUESTS_PYTHON_LOOP
    short = spec.with_(num_requests=min(spec.num_requests, most)) if spec.trace is None else spec
    est = simulation_estimate(short)
    sp = spread(cfg, est, ("serving_memory", "serving_speed"), screen=serving_screen)
    base_full = _summary_dict(full)
    ranges = {k: rebase(r, base_full.get(k)) for k, r in sp.ranges.items()}
    sat = {"base": bool(sp.base.get("saturated"))}
    for b in ("low", "high"):
        sat[b] = bool(est(at_bound(cfg, b)).get("saturated"))
    return SimulationRanges(
        ranges=ranges, saturated=bool(full.summary.saturated), saturated_at=sat, requests_at_bounds=short.num_requests
    )


def deployment_spread(cfg: RabitConfig, spec, d) -> SimulationRanges:
    """Ranges of a simulated deployment (:class:`core.serving.DeploymentResult`): one replica at its share of the
    rate moved to each bound (:func:`simulation_spread`), rebased on the deployment's values; for a disaggregated
    deployment the replica is its decode instance (what sets the ITL and the end-to-end time)."""
    lay = d.layout
    per = spec.with_(rate_per_s=d.per_replica_rate_per_s) if spec.arrival == "poisson" and lay.instances > 1 else spec
    if lay.mode == "disaggregated":
        cfg = pool_deployment(resolve(cfg), lay.decode.gpu, lay.decode.tp).config
    return simulation_spread(cfg, per, d.result)


#: What an analysis predicts for its deployment (:class:`core.operations.diagnosis.Expectation`) -> the simulated figure.
EXPECTATION_KEYS = {"p95_ttft_s": "ttft_s.p95", "p95_itl_s": "itl_s.p95"}


def expectation_ranges(cfg: RabitConfig) -> dict[str, Range]:
    """Heuristic ranges of what an analysis predicts for its deployment: the p95 TTFT and ITL of one simulated
    replica at the config's workload (the figures :func:`core.operations.diagnosis.expectation_of` gives the rules).
    Empty for a config the simulator cannot run."""
    try:
        sr = simulation_spread(cfg, sim_spec(cfg))
    except (ValueError, KeyError):
        return {}
    return {k: sr.ranges[v] for k, v in EXPECTATION_KEYS.items() if v in sr.ranges}


def _summary_dict(r) -> dict[str, Any]:
    s = r.summary
    out: dict[str, Any] = {}
    for fam in ("ttft_s", "itl_s", "e2e_s", "queue_s"):
        p = getattr(s, fam)
        for q in ("p50", "p95", "p99"):
            out[f"{fam}.{q}"] = getattr(p, q)
    out.update(
        throughput_requests_per_s=s.throughput_requests_per_s,
        throughput_tokens_per_s=s.throughput_tokens_per_s,
        capacity_requests_per_s=r.capacity.requests_per_s,
        capacity_output_tokens_per_s=r.capacity.output_tokens_per_s,
    )
    return out


def training_estimate(layout, checkpoint_interval_s: float | None = None) -> Estimate:
    """Step time, MFU, runtime, GPU-hours, wall-clock with failures and cost of one fixed layout."""

    def est(cfg: RabitConfig) -> dict[str, Any]:
        r = evaluate_layout(cfg, layout)
        gp = goodput(r.runtime_s, r.gpus, cfg.assumptions, interval_s=checkpoint_interval_s)
        price = catalog_price(cfg.gpu)
        return {
            "step_s": r.step_s,
            "mfu": r.mfu,
            "runtime_s": r.runtime_s,
            "gpu_hours": r.gpu_hours,
            "gpu_hours_with_failures": r.gpus * gp.wall_clock_s / 3600,
            "tokens_per_s": r.tokens_per_s,
            "wall_clock_s": gp.wall_clock_s,
            "goodput": gp.goodput_frac,
            "cost_usd": price.usd_per_gpu_hour * r.gpus * gp.wall_clock_s / 3600 if price else None,
            "fits": r.fits,
        }

    return est


def training_spread(cfg: RabitConfig, layout, checkpoint_interval_s: float | None = None) -> Spread:
    return spread(cfg, training_estimate(layout, checkpoint_interval_s), ("training",))


def deadline_gpus_range(cfg: RabitConfig, goal) -> Range:
    """The GPU count that meets a deadline, searched again with every assumption at each bound.

    Not the one-at-a-time rule (a search per assumption would cost ~30 searches): the count at the optimistic
    bound is the low end, at the pessimistic bound the high end; basis "heuristic" with no contributions.
    """
    counts = {}
    for b in ("low", "base", "high"):
        p = plan(at_bound(cfg, b), goal)
        counts[b] = float(p.gpus) if p.deadline_met else math.inf
    v = counts["base"]
    if not math.isfinite(v):
        return Range(value=v, low=v, high=v, basis="none")
    lo, hi = min(counts["high"], v), max(counts["low"], v)
    return Range(value=v, low=lo, high=hi, basis="heuristic" if (lo, hi) != (v, v) else "none")


#: Training headline keys with a range (``rabit train --json`` and the Training page).
TRAINING_KEYS = (
    *("step_s", "mfu", "runtime_s", "gpu_hours", "gpu_hours_with_failures", "wall_clock_s", "goodput", "cost_usd"),
    "tokens_per_s",
)


def training_ranges(cfg: RabitConfig, p) -> dict[str, Range]:
    """Ranges of a training plan's headline numbers at its chosen layout; in deadline mode also ``gpus``."""
    if p.best is None:
        return {}
    sp = training_spread(cfg, p.best.layout, p.goal.checkpoint_interval_s)
    out = {k: sp.ranges[k] for k in TRAINING_KEYS if k in sp.ranges}
    if p.mode == "deadline":
        out["gpus"] = deadline_gpus_range(cfg, p.goal)
    return out


# --- saved analyses and calibration (the CLI's analyses show / calibrate) ------------------------------------

#: The headline numbers of a saved analysis (the Saved analyses page's "Headline numbers, with ranges").
SERVING_HEADLINE_KEYS = ("prefill_s", "decode_step_s", "tokens_per_s", "e2e_s", "max_sequences", "total_bytes_per_gpu")
TRAINING_HEADLINE_KEYS = ("step_s", "mfu", "runtime_s", "gpu_hours", "cost_usd")


def analysis_headline(
    cfg: RabitConfig,
    memory: Callable[[RabitConfig], ServingMemory] = serving_memory,
    speed: Callable[[RabitConfig], SpeedSummary] = speed_summary,
) -> dict[str, Any]:
    """The headline results saved with each revision of an analysis (a snapshot: later model changes do not
    rewrite it): whether it fits and its memory per GPU, its prefill, decode step, tokens/s and end-to-end time;
    ``error`` instead of the figures the catalog no longer lets it compute. ``memory`` and ``speed``: how to
    compute them (the dashboard passes its cached wrappers)."""
    out: dict[str, Any] = {}
    try:
        mem = memory(cfg)
        out.update(fits=mem.fits, total_bytes_per_gpu=mem.total_bytes_per_gpu)
        s = speed(cfg)
        out.update(
            prefill_s=s.prefill.ttft_s, decode_step_s=s.decode.step_s, tokens_per_s=s.decode.tokens_per_s, e2e_s=s.e2e_s
        )
    except (ValueError, KeyError) as exc:
        out["error"] = str(exc)
    return out


def analysis_headline_ranges(cfg: RabitConfig) -> dict[str, Range]:
    """The headline numbers of an analysis's config with their heuristic ranges: the training layout's step
    time, MFU, runtime, GPU-hours and cost for a training config, else the serving memory and speed figures
    (the same spreads the Saved analyses page draws). Raises ValueError/KeyError for a config the catalog no
    longer accepts; a number that is not finite is left out."""
    keys: tuple[str, ...]
    if cfg.phase == "train":
        rng, keys = training_spread(cfg, config_layout(cfg)).ranges, TRAINING_HEADLINE_KEYS
    else:
        rng, keys = {**memory_spread(cfg).ranges, **speed_spread(cfg).ranges}, SERVING_HEADLINE_KEYS
    return {k: rng[k] for k in keys if k in rng and math.isfinite(rng[k].value)}


@dataclass(frozen=True)
class Comparison:
    """One headline number of two configurations side by side (the Compare page): each with its range, the
    difference B - A, the relative one, and whether the two ranges overlap (then the difference may be no more
    than the uncertainty of the assumptions). A side is None where its config has no such number."""

    key: str
    a: Range | None
    b: Range | None

    @property
    def difference(self) -> float | None:
        return self.b.value - self.a.value if self.a is not None and self.b is not None else None

    @property
    def relative(self) -> float | None:
        """(B - A) / A; None without both, or when A is zero."""
        d = self.difference
        return d / self.a.value if d is not None and self.a is not None and self.a.value else None

    @property
    def overlap(self) -> bool | None:
        if self.a is None or self.b is None:
            return None
        return self.a.low <= self.b.high and self.b.low <= self.a.high


def compare_headlines(a: RabitConfig, b: RabitConfig) -> tuple[Comparison, ...]:
    """The headline numbers of two configurations (:func:`analysis_headline_ranges` of each: serving memory and
    speed, or the training layout's time and cost, by each config's phase), key by key in the first one's order.
    Raises ValueError/KeyError for a config the catalog no longer accepts."""
    ra, rb = analysis_headline_ranges(a), analysis_headline_ranges(b)
    return tuple(Comparison(k, ra.get(k), rb.get(k)) for k in dict.fromkeys([*ra, *rb]))


def prediction_ranges(run: Any) -> dict[str, Range]:
    """Heuristic ranges of :func:`core.decision.calibration.predict`'s figures for one measured run (each assumption
    alone at its bounds, on the run's own config)."""

    def est(cfg: RabitConfig) -> dict[str, float]:
        return predict(run.model_copy(update={"config": cfg}))

    if run.load == "train":
        return spread(run.config, est, ("training",)).ranges
    return spread(run.config, est, ("serving_memory", "serving_speed"), screen=serving_screen).ranges
