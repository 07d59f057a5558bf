"""Heuristic ranges: evaluate an estimate at each assumption's low and high bound and combine the moves.

The rule (the RA-BIT spec, "Uncertainty and calibration"): for each assumption ``i`` that can move an
estimate, evaluate the estimate with that one assumption at its low bound and again at its high bound
(every other assumption at the value in force). With ``d = ln(result / base)`` for each of those runs,

.. math::

    d_i^{\\downarrow} = \\min(0, d_{i,low}, d_{i,high}), \\qquad d_i^{\\uparrow} = \\max(0, d_{i,low}, d_{i,high})

    low = base \\cdot e^{-\\sqrt{\\sum_i (d_i^{\\downarrow})^2}}, \\qquad
    high = base \\cdot e^{+\\sqrt{\\sum_i (d_i^{\\uparrow})^2}}

Worked number: a decode step of 10 ms moved to 12 ms by one assumption (d = ln 1.2 = 0.182) and to 9 ms by
another (d = ln 0.9 = -0.105) has the range 9.0 ms ... 12.0 ms; with a second upward move of ln 1.1 = 0.095 the
high end is 10 ms x exp(sqrt(0.182^2 + 0.095^2)) = 12.3 ms.

This is a heuristic range from the assumption bounds, not a confidence interval; a calibrated
:class:`core.base.ranges.Range` from measured runs takes its place where runs exist.

:func:`spread` is the one mechanism: any function of the config that returns named numbers (plus any
labels, e.g. which limit binds) is evaluated at base and at the bounds of the assumptions tagged as able to
move it (:func:`core.base.assumptions.by_tag`); an assumption whose bounds equal the value in force is skipped (it
cannot move anything). The ``*_spread`` functions below apply it to each page's headline numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from core.base import REGISTRY, by_tag
from core.config import RabitConfig, resolve
from core.base import Contribution, Range

Bound = Literal["low", "base", "high"]
Estimate = Callable[[RabitConfig], Mapping[str, Any]]

#: Requests per simulation at an assumption's bound (the base keeps the full workload). The bound runs supply
#: only the log-ratios d_i, taken against a base run of the same size and seed; 256 requests keep p99 (100
#: samples needed) and bound the cost of the ~18 extra runs (a modelling shortcut, see simulation_spread).
RANGE_SIM_REQUESTS = 256


# --- the mechanism -------------------------------------------------------------------------------------------


def combine(value: float, moves: Mapping[str, tuple[float, ...]]) -> Range:
    """The heuristic range of ``value`` from each assumption's results at its bounds.

    moves: assumption name -> the estimate's results with that assumption alone at each of its bounds.
    A value that is missing, not finite or not positive has no range (basis "none"); so has a value no
    assumption moves.
    """
    if value is None or not math.isfinite(value) or value <= 0:
        v = float(value) if value is not None else math.nan
        return Range(value=v, low=v, high=v, basis="none")
    contribs = []
    for name, results in moves.items():
        ds = [_log_move(r, value) for r in results]
        ds = [d for d in ds if d is not None]
        if not ds:
            continue
        down, up = min(0.0, *ds), max(0.0, *ds)
        if down or up:
            contribs.append(Contribution(name=name, d_down=down, d_up=up))
    if not contribs:
        return Range(value=value, low=value, high=value, basis="none")
    s_down = math.sqrt(sum(c.d_down**2 for c in contribs))
    s_up = math.sqrt(sum(c.d_up**2 for c in contribs))
    return Range(
        value=value,
        low=value * math.exp(-s_down),
        high=value * math.exp(s_up),
        basis="heuristic",
        contributions=tuple(sorted(contribs, key=lambda c: -(c.d_up - c.d_down))),
    )


def _log_move(result: Any, base: float) -> float | None:
    if result is None or isinstance(result, bool):
        return None
    r = float(result)
    if math.isnan(r):
        return None
    if r <= 0:
        return -math.inf
    if math.isinf(r):
        return math.inf
    return math.log(r / base)


def rebase(r: Range, value: float | None) -> Range:
    """The same log-moves applied to another value (a run of another size); no range for a missing value."""
    if value is None or not math.isfinite(value) or value <= 0 or r.basis == "none":
        v = float(value) if value is not None else math.nan
        return Range(value=v, low=v, high=v, basis="none")
    return r.model_copy(update={"value": value, "low": value * r.low / r.value, "high": value * r.high / r.value})


def with_assumption(cfg: RabitConfig, name: str, value: float) -> RabitConfig:
    """``cfg`` with one assumption moved (the value must be inside the assumption's domain)."""
    return cfg.model_copy(update={"assumptions": cfg.assumptions.with_(**{name: value})})


def at_bound(cfg: RabitConfig, bound: Bound) -> RabitConfig:
    """``cfg`` with every assumption at the pessimistic ("low") or optimistic ("high") bound; "base": as is."""
    if bound == "base":
        return cfg
    return cfg.model_copy(update={"assumptions": cfg.assumptions.at(bound)})


@dataclass(frozen=True)
class Spread:
    """An estimate at base and at each relevant bound, and the range of each of its numbers."""

    ranges: dict[str, Range]
    base: dict[str, Any]
    #: (assumption, value it was moved to, the estimate's outputs there), one per bound evaluated
    runs: tuple[tuple[str, float, dict[str, Any]], ...]

    def labels(self, key: str) -> tuple[Any, ...]:
        """Distinct values of a non-numeric output (e.g. the binding limit) over base and every bound run."""
        seen = [self.base.get(key)]
        for _, _, out in self.runs:
            if out.get(key) not in seen:
                seen.append(out.get(key))
        return tuple(seen)

    def moved_by(self, key: str, label: Any) -> tuple[str, ...]:
        """The assumptions at whose bound the output ``key`` becomes ``label``."""
        return tuple(dict.fromkeys(n for n, _, out in self.runs if out.get(key) == label))


def bound_values(
    name: str, current: float, bounds: Mapping[str, tuple[float, float]] | None = None
) -> tuple[float, ...]:
    """The bound values of one assumption that differ from the value in force."""
    info = REGISTRY[name]
    lo, hi = (bounds or {}).get(name, (info.low, info.high))
    return tuple(v for v in dict.fromkeys((lo, hi)) if v != current)


def spread(
    cfg: RabitConfig,
    estimate: Estimate,
    tags: tuple[str, ...] | None = None,
    *,
    names: tuple[str, ...] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    screen: Callable[[RabitConfig], Any] | None = None,
) -> Spread:
    """Evaluate ``estimate`` at base and with each assumption alone at its low and high bound.

    tags: which assumptions can move the estimate (:data:`core.base.assumptions.MOVES`); ``names`` lists them
    instead. bounds: name -> (low, high) overriding the registry's bounds (pinning both to the value in force
    removes an assumption's contribution). screen: a cheap function of the config that the estimate depends on
    entirely (e.g. the step-time model): where it is unchanged at a bound, the estimate is too, and is not run
    again. Numeric outputs (not bool) get a :class:`Range` each.
    """
    names = names if names is not None else by_tag(*(tags or ()))
    base = dict(estimate(cfg))
    base_screen = screen(cfg) if screen is not None else None
    runs = []
    for n in names:
        for v in bound_values(n, getattr(cfg.assumptions, n), bounds):
            moved = with_assumption(cfg, n, v)
            same = screen is not None and _equal(screen(moved), base_screen)
            runs.append((n, v, dict(base) if same else dict(estimate(moved))))
    return _spread_of(base, runs)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # arrays without a truth value: not provably equal
        return False


def step_model_screen(cfg: RabitConfig) -> Any:
    """Everything the step time reads from the config (the speed and simulation estimates depend on it)."""
    from core.physics import StepModel

    return StepModel.from_deployment(resolve(cfg))


def serving_screen(cfg: RabitConfig) -> Any:
    """The step-time model and the KV budget: all a simulated replica reads from the assumptions."""
    from core.physics import serving_memory
    from core.base import NO_TRACE

    m = serving_memory(cfg, NO_TRACE)
    return (step_model_screen(cfg), m.kv_budget_bytes_per_gpu, m.usable_bytes_per_gpu, m.overhead_bytes_per_gpu)


# --- the estimates of each page ------------------------------------------------------------------------------


def memory_estimate(cfg: RabitConfig) -> dict[str, Any]:
    from core.physics import serving_memory
    from core.base import NO_TRACE

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
    from core.physics import training_memory

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
    from core.serving import decode, prefill
    from core.base import NO_TRACE

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
    from core.physics import StepModel

    base = StepModel.from_deployment(resolve(cfg))
    out = []
    for n in names:
        for v in bound_values(n, getattr(cfg.assumptions, n), bounds):
            sm = StepModel.from_deployment(resolve(with_assumption(cfg, n, v)))
            if not _equal(sm, base):
                out.append((n, v, sm))
    return base, tuple(out)


def _bound_of(c: np.ndarray, m: np.ndarray, x: np.ndarray) -> list[str]:
    """Which limit binds each iteration (ties go to compute, then memory, as ``core.physics.iteration_parts.iteration``)."""
    shape = np.broadcast_shapes(np.shape(c), np.shape(m), np.shape(x))
    parts = np.stack([np.broadcast_to(np.asarray(a, dtype=float), shape) for a in (c, m, x)])
    names = ("compute", "memory", "communication")
    return [names[i] for i in np.argmax(parts, axis=0).ravel()]


def speed_rows(cfg: RabitConfig, models: Sequence[Any]) -> list[dict[str, Any]]:
    """:func:`speed_estimate` for each step model of ``cfg`` (one per bound), without its trace and result
    objects: the single iterations (the prefill, one prompt alone, the decode step at the mean context) of all K
    models in one call of the step-time body over a stack of the models, the decode steps (an array over the
    output already) one model at a time."""
    from core.serving import _mean_over_steps, decode_times, pipeline_fill_s, prefill_numbers, replicas_of

    if not models:
        return []
    k = len(models)
    sm0 = models[0]
    pf = prefill_numbers(sm0, cfg, cfg.batch)  # T, A, R of the prefill do not depend on the assumptions
    s1 = stack_models(models, 1)
    one = np.ones(1)

    def it(T: float, A: float, R: float, S: float | None = None) -> tuple[np.ndarray, ...]:
        """One iteration (T tokens, A pairs, R cached tokens, S sequences) of every model: (compute, memory,
        exposed communication, time), each of shape (K,)."""
        c, mm, x = s1.stage_parts(T * one, A * one, R * one)[:3]
        t = s1.iteration_s(T * one, A * one, R * one, None if S is None else S * one)
        return tuple(np.broadcast_to(np.asarray(a, dtype=float).reshape(-1), (k,)) for a in (c, mm, x, t))

    # as core.serving.speed.prefill_numbers: the whole batch's prompts as m pipeline micro-batches, and one prompt alone
    pc, pm, px, t_mb = it(pf.T / pf.m, pf.A / pf.m, pf.R / pf.m, pf.it.seqs)
    ttft = pipeline_fill_s(t_mb, pf.m, pc, pm, px)
    _, _, _, ttft_one = it(float(pf.uncached), pf.one.pairs, pf.one.kv_tokens, pf.one.seqs)
    b = math.ceil(cfg.batch / sm0.pp)
    N = max(cfg.output_tokens - 1, 1)
    ctx = cfg.input_tokens + (N - 1) / 2
    s_read, s_att = float(sm0.kv_read_tokens(ctx)), float(sm0.kv_read_tokens(ctx + 1))
    dc, dm, dx, _ = it(float(b), b * s_att, b * s_read)
    hops = np.broadcast_to(np.asarray(s1.hops_s(float(b) * one), dtype=float).reshape(-1), (k,))
    # the decode steps of one model at a time: a (steps,) array stays in cache, where one (K, steps) array of
    # every bound does not (measured: the stacked evaluation is slower here, the scalar iterations above faster)
    means = []
    for sm in models:
        n, t = decode_times(sm, b, cfg.input_tokens, N)
        means.append(_mean_over_steps(n, t, N))
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
    return _spread_of(base, runs)


def _spread_of(base: dict[str, Any], runs: list[tuple[str, float, dict[str, Any]]]) -> Spread:
    """The range of every numeric key of ``base`` from the runs at each assumption's bounds (:func:`combine`)."""
    ranges = {}
    for key, val in base.items():
        if isinstance(val, bool) or not isinstance(val, (int, float)) and val is not None:
            continue
        moves: dict[str, list[float]] = {}
        for n, _, out in runs:
            moves.setdefault(n, []).append(out.get(key))
        ranges[key] = combine(val, {n: tuple(rs) for n, rs in moves.items()})
    return Spread(ranges=ranges, base=base, runs=tuple(runs))


def bounds_band(
    xs: Sequence[float], at_low: Mapping[float, float | None], at_high: Mapping[float, float | None]
) -> tuple[list[float], list[float], list[float]]:
    """A curve's band with every assumption at its pessimistic and at its optimistic bound: ``(x, lower, upper)``
    at each ``x`` where both bound runs have a value, lower/upper the smaller/larger of the two (a bound can move
    a number either way). A point either run lacks (infeasible, out of its work budget) is left out."""
    ok = [x for x in xs if at_low.get(x) is not None and at_high.get(x) is not None]
    lo = [min(at_low[x], at_high[x]) for x in ok]  # type: ignore[type-var]
    hi = [max(at_low[x], at_high[x]) for x in ok]  # type: ignore[type-var]
    return ok, lo, hi


#: Decode steps per batch at which a bound's log-move is taken on the batch curve (the step model's own
#: uniform-grid mean, :func:`core.serving.speed.decode_times`); the base values keep every step.
BAND_DECODE_POINTS = 257


def combine_arrays(base: np.ndarray, names: Sequence[str], moved: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`combine` for many points at once: ``base`` (P,), ``moved`` (runs, P) with ``names[j]`` the
    assumption of run j. Returns (low, high) per point."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = np.log(moved / base)
    d = np.where(np.isnan(d), 0.0, d)
    s_down = np.zeros_like(base, dtype=float)
    s_up = np.zeros_like(base, dtype=float)
    for n in dict.fromkeys(names):
        rows = d[[j for j, m in enumerate(names) if m == n]]
        s_down += np.minimum(0.0, rows.min(axis=0)) ** 2
        s_up += np.maximum(0.0, rows.max(axis=0)) ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        return base * np.exp(-np.sqrt(s_down)), base * np.exp(np.sqrt(s_up))


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
    from core.serving import _mean_over_steps, replicas_of
    from core.serving import decode_times as _times

    base_sm, moved = models if models is not None else bound_models(cfg, by_tag("serving_speed"))
    N = max(cfg.output_tokens - 1, 1)
    bs = np.asarray(batches, dtype=float)
    mb = np.ceil(bs / base_sm.pp)
    dp = replicas_of(cfg)
    exact = np.empty(len(mb))
    for i, b in enumerate(mb):
        n_b, t_b = _times(base_sm, int(b), cfg.input_tokens, N)
        exact[i] = _mean_over_steps(n_b, t_b, N)
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
        from core.serving import simulate

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
    seeded workload (with a base run of that size for the log-ratios), so the ranges cost about as much as two
    full runs. The saturation verdict is also taken with every assumption at its pessimistic and optimistic
    bound.
    """
    from core.serving import simulate

    full = full if full is not None else simulate(cfg, spec)
    short = spec.with_(num_requests=min(spec.num_requests, RANGE_SIM_REQUESTS)) if spec.trace is None else spec
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


#: What an analysis predicts for its deployment (:class:`core.operations.diagnosis.Expectation`) -> the simulated figure.
EXPECTATION_KEYS = {"p95_ttft_s": "ttft_s.p95", "p95_itl_s": "itl_s.p95"}


def expectation_ranges(cfg: RabitConfig) -> dict[str, Range]:
    """Heuristic ranges of what an analysis predicts for its deployment: the p95 TTFT and ITL of one simulated
    replica at the config's workload (the figures :func:`core.operations.diagnosis.expectation_of` gives the rules).
    Empty for a config the simulator cannot run."""
    from core.serving import sim_spec

    try:
        sr = simulation_spread(cfg, sim_spec(cfg))
    except (ValueError, KeyError):
        return {}
    return {k: sr.ranges[v] for k, v in EXPECTATION_KEYS.items() if v in sr.ranges}


def outside(r: Range | None, measured: float | None) -> str | None:
    """ "below" or "above" when a measurement lies outside a non-empty range (itself evidence that an
    assumption or the workload is off), else None."""
    if r is None or measured is None or r.basis == "none" or r.empty:
        return None
    if measured < r.low:
        return "below"
    if measured > r.high:
        return "above"
    return None


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
        from core.training import goodput
        from core.training import catalog_price, evaluate_layout

        r = evaluate_layout(cfg, layout)
        gp = goodput(r.runtime_s, r.gpus, cfg.assumptions, interval_s=checkpoint_interval_s)
        price = catalog_price(cfg.gpu)
        return {
            "step_s": r.step_s,
            "mfu": r.mfu,
            "runtime_s": r.runtime_s,
            "gpu_hours": r.gpu_hours,
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
    from core.training import plan

    counts = {}
    for b in ("low", "base", "high"):
        p = plan(at_bound(cfg, b), goal)
        counts[b] = float(p.gpus) if p.deadline_met else math.inf
    v = counts["base"]
    if not math.isfinite(v):
        return Range(value=v, low=v, high=v, basis="none")
    lo, hi = min(counts["high"], v), max(counts["low"], v)
    return Range(value=v, low=lo, high=hi, basis="heuristic" if (lo, hi) != (v, v) else "none")


def ranges_json(
    ranges: Mapping[str, Range], keys: tuple[str, ...] | None = None, prefix: str = ""
) -> dict[str, dict[str, float]]:
    """The CLI's ``ranges`` object: headline key (dotted) -> {"low", "high"}."""
    return {prefix + k: r.as_json() for k, r in ranges.items() if keys is None or k in keys}


def basis_of(ranges: Mapping[str, Range]) -> str:
    """One ``range_basis`` string for a set of ranges (the calibrated basis wins where any range has it)."""
    from core.base import BASIS_TEXT

    kinds = {r.basis for r in ranges.values()}
    for k in ("calibrated", "heuristic"):
        if k in kinds:
            return BASIS_TEXT[k]
    return BASIS_TEXT["none"]


#: Training headline keys with a range (``rabit train --json`` and the Training page).
TRAINING_KEYS = ("step_s", "mfu", "runtime_s", "gpu_hours", "wall_clock_s", "goodput", "cost_usd", "tokens_per_s")


def training_ranges(cfg: RabitConfig, p) -> dict[str, Range]:
    """Ranges of a training plan's headline numbers at its chosen layout; in deadline mode also ``gpus``."""
    if p.best is None:
        return {}
    sp = training_spread(cfg, p.best.layout, p.goal.checkpoint_interval_s)
    out = {k: sp.ranges[k] for k in TRAINING_KEYS if k in sp.ranges}
    if p.mode == "deadline":
        out["gpus"] = deadline_gpus_range(cfg, p.goal)
    return out


# --- the optimizer: ranges for the recommendation and the runner-up only ----------------------------------------

#: Pick keys with a range (``rabit recommend --json``: ``recommendation.<key>``).
PICK_KEYS = (
    "cost_per_hour",
    "cost_per_million_tokens",
    "p95_e2e_s",
    "p95_ttft_s",
    "p95_itl_s",
    "capacity_requests_per_s",
)


@dataclass(frozen=True)
class PickRanges:
    label: str
    ranges: dict[str, Range]
    misses_at_pessimistic: bool | None  # None: not checked (the runner-up)
    pessimistic_note: str


@dataclass(frozen=True)
class RecommendationRanges:
    recommendation: PickRanges | None
    runner_up: PickRanges | None
    settled: bool
    settled_by: str  # the assumption whose measurement would settle an open choice ("" when settled)
    note: str


def _candidate_for(rec, pick):
    shape = ("gpu", "gpus_per_replica", "tp", "pp", "weights", "kv_dtype")
    for c in rec.candidates:
        if c.simulated and all(getattr(c, k) == getattr(pick, k) for k in shape) and c.replicas == pick.replicas:
            return c
    return None


def _pick_estimate(goal, cons, prices, cand, *, simulate_p95: bool) -> Estimate:
    """Replicas and cost from the optimizer's closed-form screen at this bound; p95 from a shortened simulation
    with the pick's replica count fixed."""
    from core.decision import optimizer as opt
    from core.catalog import gpu_price

    i_mean, o_mean = goal.workload.mean_lengths()
    price = gpu_price(cand.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    tokens_per_hour = goal.rate_per_s * o_mean * 3600
    short = goal.workload.with_(num_requests=min(goal.workload.num_requests, RANGE_SIM_REQUESTS))

    def est(cfg: RabitConfig) -> dict[str, Any]:
        from core.serving import simulate

        g = goal.model_copy(update={"assumptions": cfg.assumptions})
        bare = cand.model_copy(update={"pruned": "", "simulated": False, "meets": None})
        sc = opt._screen_one(g, cons, bare, goal.workload, i_mean, o_mean, price)
        replicas = max(sc.replicas or 0, cand.replicas or 0) if sc.replicas else None
        cap_rep = sc.capacity_per_replica_rps
        cost = replicas * cand.gpus_per_replica * price.usd_per_gpu_hour if (replicas and price) else None
        out: dict[str, Any] = {
            "cost_per_hour": cost,
            "cost_per_million_tokens": cost / tokens_per_hour * 1e6 if cost else None,
            "capacity_requests_per_s": (cand.replicas or 0) * cap_rep if cap_rep else None,
        }
        if simulate_p95:
            try:
                s = simulate(
                    cfg, short.with_(rate_per_s=goal.rate_per_s / (cand.replicas or 1), arrival="poisson")
                ).summary
                out.update(p95_e2e_s=s.e2e_s.p95, p95_ttft_s=s.ttft_s.p95, p95_itl_s=s.itl_s.p95)
            except ValueError:
                out.update(p95_e2e_s=math.inf, p95_ttft_s=math.inf, p95_itl_s=math.inf)
        return out

    return est


def recommendation_ranges(rec, prices=None) -> RecommendationRanges:
    """Ranges of the recommendation (cost, cost per million tokens, p95s, capacity) and of the runner-up's cost.

    The replica count at a bound follows the optimizer's own screen (capacity at 80% utilisation), so a cost
    moves only where a bound needs another replica; the p95s come from shortened simulations at each bound with
    the recommended replica count. The recommendation is also simulated with every assumption at its pessimistic
    bound (full workload): a miss there is said. When the runner-up's cost range overlaps the recommendation's,
    the choice is not settled, and the assumption that moves the cost ratio between the two most is the one
    whose measurement settles it.
    """
    from core import catalog
    from core.decision import optimizer as opt

    if rec.recommendation is None:
        return RecommendationRanges(None, None, True, "", "nothing meets the target: no range to show")
    prices = prices if prices is not None else catalog.prices()
    goal, cons = rec.goal, rec.constraints
    best = _candidate_for(rec, rec.recommendation)
    if best is None:
        return RecommendationRanges(None, None, True, "", "")
    names = by_tag("serving_memory", "serving_speed")
    cfg = opt._config(goal, best)
    sp = spread(cfg, _pick_estimate(goal, cons, prices, best, simulate_p95=True), names=names, screen=serving_screen)
    base_pick = rec.recommendation
    ranges = {
        k: rebase(sp.ranges[k], getattr(base_pick, k)) if k.startswith("p95") else sp.ranges[k]
        for k in PICK_KEYS
        if k in sp.ranges
    }
    # the pessimistic bound, every assumption at once, full workload
    g_low = goal.model_copy(update={"assumptions": goal.assumptions.at("low")})
    try:
        low = opt._simulate(g_low, best)
    except ValueError as exc:  # the model no longer fits at the pessimistic memory bounds
        low, why = None, str(exc)
    misses = low is None or not low.meets
    if low is None:
        note = f"misses the target at the pessimistic bound: {why}"
    elif misses:
        note = "misses the target at the pessimistic bound" + (
            f" (p95 end-to-end {low.p95_e2e_s:.3g} s)" if low.p95_e2e_s is not None else ""
        )
    else:
        note = "meets the target even at the pessimistic bound"
    rp = PickRanges(label=base_pick.label, ranges=ranges, misses_at_pessimistic=misses, pessimistic_note=note)
    # the runner-up: the cheapest other simulated configuration that meets the target
    others = sorted(
        (
            c
            for c in rec.candidates
            if c.simulated
            and c.meets
            and c is not best
            and (c.gpu, c.gpus_per_replica, c.tp, c.pp, c.weights, c.kv_dtype)
            != (best.gpu, best.gpus_per_replica, best.tp, best.pp, best.weights, best.kv_dtype)
        ),
        key=lambda c: c.cost_per_hour or math.inf,
    )
    if not others:
        return RecommendationRanges(rp, None, True, "", "no runner-up meets the target")
    ru = others[0]
    sp2 = spread(
        opt._config(goal, ru),
        _pick_estimate(goal, cons, prices, ru, simulate_p95=False),
        names=names,
        screen=serving_screen,
    )
    ru_pick = opt._pick(goal, ru)
    rr = PickRanges(
        label=ru_pick.label,
        ranges={
            k: sp2.ranges[k]
            for k in ("cost_per_hour", "cost_per_million_tokens", "capacity_requests_per_s")
            if k in sp2.ranges
        },
        misses_at_pessimistic=None,
        pessimistic_note="",
    )
    a, b = ranges.get("cost_per_hour"), rr.ranges.get("cost_per_hour")
    if a is None or b is None or a.high < b.low:
        return RecommendationRanges(
            rp, rr, True, "", f"settled: the runner-up ({ru_pick.label}) costs more even at the ends of both ranges"
        )
    # which assumption moves the cost ratio most (the runs line up: same names, same bound values)
    base_ratio = math.log(b.value / a.value) if a.value and b.value else 0.0
    move: dict[str, float] = {}
    for (n, _, o1), (_, _, o2) in zip(sp.runs, sp2.runs):
        c1, c2 = o1.get("cost_per_hour"), o2.get("cost_per_hour")
        if c1 and c2:
            move[n] = max(move.get(n, 0.0), abs(math.log(c2 / c1) - base_ratio))
    by = max(move, key=move.get) if move and max(move.values()) > 0 else ""
    if not by:  # both costs move together: the assumption that moves them most is the one to measure
        contribs = sorted(a.contributions + b.contributions, key=lambda c: c.d_down - c.d_up)
        by = contribs[0].name if contribs else ""
    label = REGISTRY[by].label if by else ""
    return RecommendationRanges(
        rp,
        rr,
        False,
        by,
        (
            f"not settled: the runner-up ({ru_pick.label}) has an overlapping cost range"
            + (f"; measuring {by} ({label}) would settle it" if by else "")
        ),
    )


def training_option_ranges(cfg: RabitConfig, option) -> dict[str, Range]:
    """Ranges of a recommended training option (runtime, wall-clock, GPU-hours, cost) at its GPU count."""
    from core import catalog
    from core.training import TrainingGoal, plan

    g = catalog.gpu(option.gpu)
    cg = cfg.with_(
        gpu=option.gpu, gpus_per_node=g.gpus_per_node, nodes=max(1, option.gpus // g.gpus_per_node), tp=1, pp=1, ep=1
    )
    p = plan(cg, TrainingGoal(gpus=option.gpus))
    rg = training_ranges(cg, p)
    return {
        k: rebase(rg[k], getattr(option, k))
        for k in ("runtime_s", "wall_clock_s", "gpu_hours", "cost_usd", "mfu")
        if k in rg
    }


# --- saved analyses and calibration (the CLI's analyses show / calibrate) ------------------------------------

#: The headline numbers of a saved analysis (the Saved analyses page's "Headline numbers, with ranges").
SERVING_HEADLINE_KEYS = ("prefill_s", "decode_step_s", "tokens_per_s", "e2e_s", "max_sequences", "total_bytes_per_gpu")
TRAINING_HEADLINE_KEYS = ("step_s", "mfu", "runtime_s", "gpu_hours", "cost_usd")


def analysis_headline_ranges(cfg: RabitConfig) -> dict[str, Range]:
    """The headline numbers of an analysis's config with their heuristic ranges: the training layout's step
    time, MFU, runtime, GPU-hours and cost for a training config, else the serving memory and speed figures
    (the same spreads the Saved analyses page draws). Raises ValueError/KeyError for a config the catalog no
    longer accepts; a number that is not finite is left out."""
    if cfg.phase == "train":
        from core.training import config_layout

        rng, keys = training_spread(cfg, config_layout(cfg)).ranges, TRAINING_HEADLINE_KEYS
    else:
        rng, keys = {**memory_spread(cfg).ranges, **speed_spread(cfg).ranges}, SERVING_HEADLINE_KEYS
    return {k: rng[k] for k in keys if k in rng and math.isfinite(rng[k].value)}


def prediction_ranges(run: Any) -> dict[str, Range]:
    """Heuristic ranges of :func:`core.decision.calibration.predict`'s figures for one measured run (each assumption
    alone at its bounds, on the run's own config)."""
    from core.decision.calibration import predict

    def est(cfg: RabitConfig) -> dict[str, float]:
        return predict(run.model_copy(update={"config": cfg}))

    if run.load == "train":
        return spread(run.config, est, ("training",)).ranges
    return spread(run.config, est, ("serving_memory", "serving_speed"), screen=serving_screen).ranges
