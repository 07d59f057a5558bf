"""The only place with ``st.cache_data``: cached wrappers around ``core`` keyed on the frozen config."""

from __future__ import annotations

import streamlit as st

from core import decision, operations, physics, serving, training
from core.config import RabitConfig
from core.config import resolve, resolve_video


@st.cache_data(max_entries=256, show_spinner=False)
def serving_memory(cfg: RabitConfig) -> physics.ServingMemory:
    return physics.serving_memory(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory(cfg: RabitConfig) -> physics.TrainingMemory:
    return physics.training_memory(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def sequences_vs_context(cfg: RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    return physics.sequences_vs_context(cfg, contexts)


@st.cache_data(max_entries=64, show_spinner=False)
def kv_per_token_across_catalog(kv_dtype: str) -> tuple[tuple[str, str, float], ...]:
    return physics.kv_per_token_across_catalog(kv_dtype)


@st.cache_data(max_entries=64, show_spinner=False)
def training_memory_by_zero(cfg: RabitConfig) -> tuple[tuple[int, physics.TrainingMemory], ...]:
    return physics.training_memory_by_zero(resolve(cfg))


# --- speed (issue 3) ---------------------------------------------------------------------------------


@st.cache_data(max_entries=256, show_spinner=False)
def speed_summary(cfg: RabitConfig) -> serving.SpeedSummary:
    return serving.speed_summary(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def batch_sweep(cfg: RabitConfig, batches: tuple[int, ...]) -> tuple[serving.BatchPoint, ...]:
    return serving.batch_sweep(cfg, batches)


@st.cache_data(max_entries=64, show_spinner=False)
def decode_curve(cfg: RabitConfig) -> tuple[tuple[float, float, float, float], ...]:
    return serving.decode_curve(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def roofline(cfg: RabitConfig) -> serving.Roofline:
    return serving.roofline(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def spec_vs_alpha(cfg: RabitConfig, alphas: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    return serving.spec_vs_alpha(cfg, alphas)


@st.cache_data(max_entries=64, show_spinner=False)
def collective_view(cfg: RabitConfig) -> serving.CollectiveView:
    return serving.collective_view(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def allreduce_curve(cfg: RabitConfig, sizes_bytes: tuple[float, ...]) -> dict[str, tuple[float, ...]]:
    return serving.allreduce_curve(cfg, sizes_bytes)


@st.cache_data(max_entries=64, show_spinner=False)
def ep_options(cfg: RabitConfig) -> tuple:
    return serving.ep_options(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def textbook_comparison(cfg: RabitConfig) -> serving.TextbookComparison:
    return serving.textbook_comparison(cfg)


# --- training (issue 5) ------------------------------------------------------------------------------


@st.cache_data(max_entries=32, show_spinner=False)
def training_plan(cfg: RabitConfig, goal: training.TrainingGoal) -> training.TrainingPlan:
    return training.plan(resolve(cfg), goal)


@st.cache_data(max_entries=64, show_spinner=False)
def training_math(cfg: RabitConfig) -> tuple:
    return training.training_math(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def training_layout(cfg: RabitConfig) -> training.LayoutResult:
    """The sidebar's own layout, timed and sized."""
    return training.evaluate_layout(resolve(cfg), training.config_layout(cfg))


# --- optimizer (issue 6) -----------------------------------------------------------------------------


@st.cache_data(max_entries=32, show_spinner="Screening every configuration, then simulating up to 16 finalists ...")
def recommendation(goal: decision.ServingGoal, cons: decision.Constraints, prices: tuple) -> decision.Recommendation:
    """Cached on (goal, constraints, prices). No progress callback: an element updated from inside a cached
    function breaks Streamlit's replay on the next hit, so the spinner says what is running instead."""
    return decision.recommend(goal, cons, prices)


# --- serving simulation (issue 4) ------------------------------------------------------------------


@st.cache_data(max_entries=64, show_spinner=False)
def simulation(cfg: RabitConfig, spec: serving.SimSpec) -> serving.SimResult:
    """One simulated replica, cached on (config, workload spec)."""
    return serving.simulate(cfg, spec)


@st.cache_data(max_entries=128, show_spinner=False)
def sim_capacity(cfg: RabitConfig, spec: serving.SimSpec) -> serving.Capacity:
    return serving.max_throughput(cfg, spec)


@st.cache_data(max_entries=32, show_spinner=False)
def sim_sweep(
    cfg: RabitConfig, spec: serving.SimSpec, rates_per_s: tuple[float, ...]
) -> tuple[tuple[float, serving.Summary], ...]:
    """The summary at each Poisson arrival rate of a load sweep (core.serving.simulation.sweep)."""
    return serving.sweep(cfg, spec, rates_per_s)


@st.cache_data(max_entries=256, show_spinner=False)
def sim_summary(cfg: RabitConfig, spec: serving.SimSpec) -> serving.Summary:
    """Only the summary of one simulation (a point of the knee chart's band at an assumption bound)."""
    return serving.simulate(cfg, spec).summary


@st.cache_data(max_entries=16, show_spinner=False)
def sim_trace(text: str) -> tuple[tuple[int, int], ...]:
    """Parsed (input, output) token rows of an uploaded trace; raises ValueError with the bad line."""
    return serving.parse_trace(text)


@st.cache_data(max_entries=16, show_spinner="Running the training deadline search for each priced GPU kind ...")
def training_recommendation(
    cfg: RabitConfig, deadline_s: float, cons: decision.Constraints, prices: tuple
) -> decision.TrainingRecommendation:
    return decision.recommend_training(cfg, deadline_s, cons, prices)


# --- ranges (issue 9) --------------------------------------------------------------------------------


@st.cache_resource(max_entries=64, show_spinner=False)
def _speed_bound_models(cfg: RabitConfig) -> tuple:
    """The step model at base and at each speed assumption's bounds (shared by the ranges and the band; the
    models are frozen, so every session may hold the same ones)."""
    return decision.bound_models(cfg, decision.by_tag("serving_speed"))


@st.cache_data(max_entries=256, show_spinner=False)
def speed_ranges(cfg: RabitConfig) -> decision.Spread:
    return decision.speed_spread(cfg, models=_speed_bound_models(cfg))


@st.cache_data(max_entries=256, show_spinner=False)
def memory_ranges(cfg: RabitConfig) -> decision.Spread:
    return decision.memory_spread(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory_ranges(cfg: RabitConfig) -> decision.Spread:
    return decision.training_memory_spread(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def batch_band(cfg: RabitConfig, batches: tuple[int, ...]) -> dict:
    return decision.batch_band(cfg, batches, models=_speed_bound_models(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def simulation_ranges(cfg: RabitConfig, spec: serving.SimSpec) -> decision.SimulationRanges:
    """Ranges of one simulated replica (reuses the cached full run)."""
    return decision.simulation_spread(cfg, spec, simulation(cfg, spec))


@st.cache_data(max_entries=32, show_spinner=False)
def training_ranges(cfg: RabitConfig, goal: training.TrainingGoal) -> dict:
    return decision.training_ranges(cfg, training_plan(cfg, goal))


@st.cache_data(max_entries=32, show_spinner="Evaluating the recommendation and the runner-up at each bound ...")
def recommendation_ranges(
    goal: decision.ServingGoal, cons: decision.Constraints, prices: tuple
) -> decision.RecommendationRanges:
    return decision.recommendation_ranges(recommendation(goal, cons, prices), prices)


@st.cache_data(max_entries=16, show_spinner=False)
def training_option_ranges(cfg: RabitConfig, option: decision.TrainingOption) -> dict:
    return decision.training_option_ranges(cfg, option)


@st.cache_data(max_entries=32, show_spinner=False)
def training_layout_ranges(cfg: RabitConfig) -> decision.Spread:
    """Ranges of the sidebar's own training layout (step time, MFU, runtime, cost)."""
    return decision.training_spread(cfg, training.config_layout(cfg))


@st.cache_data(max_entries=32, show_spinner=False)
def p95_e2e_band(
    cfg: RabitConfig, spec: serving.SimSpec, rates_per_s: tuple[float, ...]
) -> tuple[list[float], list[float], list[float]]:
    """The load sweep's p95 end-to-end with every assumption at each bound (no band where a bound's sweep runs
    out of its work budget)."""
    try:
        ends = [
            {r: s.e2e_s.p95 for r, s in sim_sweep(decision.at_bound(cfg, b), spec, rates_per_s)}
            for b in ("low", "high")
        ]
    except ValueError:  # core.base.limits.BudgetExceeded
        return [], [], []
    return decision.bounds_band(rates_per_s, *ends)


@st.cache_data(max_entries=32, show_spinner=False)
def training_bands(cfg: RabitConfig, goal: training.TrainingGoal) -> dict[str, tuple[list, list, list]]:
    """Wall-clock and cost against GPU count with every assumption at each bound, at the counts feasible in the
    base plan and both bound plans (cost only when every one of them is priced)."""
    base = [c.gpus for c in training_plan(cfg, goal).curve if c.feasible]
    ends = [
        {c.gpus: c for c in training_plan(decision.at_bound(cfg, b), goal).curve if c.feasible} for b in ("low", "high")
    ]
    out = {"wall_clock_s": decision.bounds_band(base, *({n: c.wall_clock_s for n, c in e.items()} for e in ends))}
    cost = decision.bounds_band(base, *({n: c.cost_usd for n, c in e.items()} for e in ends))
    if cost[0] == out["wall_clock_s"][0]:  # every count of the band priced
        out["cost_usd"] = cost
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def analysis_headline_ranges(cfg: RabitConfig) -> dict[str, decision.Range]:
    """A saved analysis's headline numbers with their ranges (the same function as ``rabit analyses show``)."""
    return decision.analysis_headline_ranges(cfg)


# --- next experiment and diagnostics (issue 11) -----------------------------------------------------


@st.cache_data(max_entries=16, show_spinner=False)
def _next_experiment_store(
    spec: decision.NextExperimentSpec, prices: tuple, _result: decision.NextExperiment | None = None
) -> decision.NextExperiment:
    """Keyed on (spec, prices) only (``_result`` is not hashed): a miss raises, and exceptions are not cached."""
    if _result is None:
        raise LookupError("not computed yet")
    return _result


def next_experiment(spec: decision.NextExperimentSpec, prices: tuple, progress=None) -> decision.NextExperiment:
    """Cached across sessions, with a progress bar on the cold run: the computation runs outside the cached
    function (an element updated inside one breaks Streamlit's replay) and is then stored under its key."""
    try:
        return _next_experiment_store(spec, prices)
    except LookupError:
        pass
    result = decision.next_experiment(spec, prices, progress=progress)
    return _next_experiment_store(spec, prices, _result=result)


@st.cache_data(max_entries=16, show_spinner="Reading the telemetry ...")
def telemetry(data: bytes, name: str) -> operations.Telemetry:
    """Parsed telemetry (a TelemetryError is raised, not cached)."""
    return operations.parse(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def diagnosis(tel: operations.Telemetry, expect: operations.Expectation) -> operations.Diagnosis:
    return operations.diagnose(tel, expect)


# --- saved analyses and calibration (issue 10) -------------------------------------------------------
from core.operations import Run as _Run  # noqa: E402


@st.cache_resource(show_spinner=False)
def store(url: str):
    """One store (engine and connection pool) per database URL per server process."""
    from store import Store

    return Store(url)


@st.cache_data(max_entries=64, show_spinner=False)
def run_residuals(runs: tuple[_Run, ...]) -> tuple[decision.Residual, ...]:
    """Each run's measurements against RA-BIT's prediction on the run's own config."""
    return decision.residuals_of(runs)


@st.cache_data(max_entries=32, show_spinner="Simulating the saved analysis for its predicted p95s ...")
def analysis_expectation(cfg: RabitConfig) -> operations.Expectation:
    """What a saved analysis predicts (its simulated p95 TTFT and ITL, its cached-prefix share)."""
    try:
        return operations.expectation_of(cfg)
    except (ValueError, KeyError):  # a config the simulator cannot run
        return operations.Expectation(prefix_cache_frac=cfg.prefix_cache_frac or None)


@st.cache_data(max_entries=64, show_spinner=False)
def training_fit_options(cfg: RabitConfig) -> tuple[str, ...]:
    """Changes that make the sidebar's training layout fit (empty when it fits)."""
    return training.training_fit_options(resolve(cfg))


# --- figures shared by every session ---------------------------------------------------------------------
@st.cache_resource(max_entries=512, show_spinner=False)
def _shared_figure(name: str, _build, args: tuple, kwargs: dict):
    return _build(*args, **kwargs)


def figure(build, *args, **kwargs):
    """``build(*args, **kwargs)`` once per distinct input, for every session: building a plotly figure is most
    of a page's own cost once its numbers are cached. The figure is shared, so a caller draws it and never
    changes it (``st.plotly_chart`` copies it before sending)."""
    return _shared_figure(f"{build.__module__}.{build.__qualname__}", build, args, kwargs)


# --- video generation (issue 23) ---------------------------------------------------------------------------------


@st.cache_data(max_entries=64, show_spinner="Sizing the video request and its queue ...")
def video_report(cfg: RabitConfig) -> decision.VideoReport:
    """The request, its ranges and (with a rate) the queue: the same function as ``rabit video``."""
    return decision.video_report(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def video_speedup(cfg: RabitConfig) -> tuple:
    """Speed-up of the request against its GPU count in each layout it allows."""
    return serving.parallel_speedup(resolve_video(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def video_knees(cfg: RabitConfig) -> dict[str, int | None]:
    """Each layout's first GPU count at which communication is no longer hidden (None: hidden throughout)."""
    pts = video_speedup(cfg)
    return {mode: serving.stops_hiding(pts, mode) for mode in dict.fromkeys(p.mode for p in pts)}


@st.cache_data(max_entries=32, show_spinner=False)
def video_rate_sweep(cfg: RabitConfig, fractions: tuple[float, ...]) -> tuple:
    return decision.rate_sweep(cfg, fractions)


@st.cache_data(max_entries=16, show_spinner="Searching GPU kinds, GPUs per request and replicas ...")
def video_recommendation(cfg: RabitConfig, prices: tuple) -> decision.VideoRecommendation:
    return decision.recommend_video(cfg, prices)
