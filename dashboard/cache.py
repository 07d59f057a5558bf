"""The only place with ``st.cache_data``: cached wrappers around ``core`` keyed on the frozen config."""

from __future__ import annotations

import streamlit as st

from core import memory as _memory
from core.config import RabitConfig
from core.deployment import resolve


@st.cache_data(max_entries=256, show_spinner=False)
def serving_memory(cfg: RabitConfig) -> _memory.ServingMemory:
    return _memory.serving_memory(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory(cfg: RabitConfig) -> _memory.TrainingMemory:
    return _memory.training_memory(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def sequences_vs_context(cfg: RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    return _memory.sequences_vs_context(cfg, contexts)


@st.cache_data(max_entries=64, show_spinner=False)
def kv_per_token_across_catalog(kv_dtype: str) -> tuple[tuple[str, str, float], ...]:
    return _memory.kv_per_token_across_catalog(kv_dtype)


@st.cache_data(max_entries=64, show_spinner=False)
def training_memory_by_zero(cfg: RabitConfig) -> tuple[tuple[int, _memory.TrainingMemory], ...]:
    return _memory.training_memory_by_zero(resolve(cfg))


# --- speed (issue 3) ---------------------------------------------------------------------------------
from core import speed as _speed  # noqa: E402
from core import speed_views as _views  # noqa: E402


@st.cache_data(max_entries=256, show_spinner=False)
def speed_summary(cfg: RabitConfig) -> _speed.SpeedSummary:
    return _speed.speed_summary(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def batch_sweep(cfg: RabitConfig, batches: tuple[int, ...]) -> tuple[_speed.BatchPoint, ...]:
    return _views.batch_sweep(cfg, batches)


@st.cache_data(max_entries=64, show_spinner=False)
def decode_curve(cfg: RabitConfig) -> tuple[tuple[float, float, float, float], ...]:
    return _views.decode_curve(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def roofline(cfg: RabitConfig) -> _speed.Roofline:
    return _views.roofline(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def spec_vs_alpha(cfg: RabitConfig, alphas: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    return _views.spec_vs_alpha(cfg, alphas)


@st.cache_data(max_entries=64, show_spinner=False)
def collective_view(cfg: RabitConfig) -> _speed.CollectiveView:
    return _views.collective_view(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def allreduce_curve(cfg: RabitConfig, sizes_bytes: tuple[float, ...]) -> dict[str, tuple[float, ...]]:
    return _views.allreduce_curve(cfg, sizes_bytes)


@st.cache_data(max_entries=64, show_spinner=False)
def ep_options(cfg: RabitConfig) -> tuple:
    return _views.ep_options(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def textbook_comparison(cfg: RabitConfig) -> _speed.TextbookComparison:
    return _views.textbook_comparison(cfg)


# --- training (issue 5) ------------------------------------------------------------------------------
from core import training as _training  # noqa: E402


@st.cache_data(max_entries=32, show_spinner=False)
def training_plan(cfg: RabitConfig, goal: _training.TrainingGoal) -> _training.TrainingPlan:
    return _training.plan(resolve(cfg), goal)


@st.cache_data(max_entries=64, show_spinner=False)
def training_math(cfg: RabitConfig) -> tuple:
    return _training.training_math(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def training_layout(cfg: RabitConfig) -> _training.LayoutResult:
    """The sidebar's own layout, timed and sized."""
    return _training.evaluate_layout(resolve(cfg), _training.config_layout(cfg))


# --- optimizer (issue 6) -----------------------------------------------------------------------------
from core import optimizer as _optimizer  # noqa: E402


@st.cache_data(max_entries=32, show_spinner="Screening every configuration, then simulating up to 16 finalists ...")
def recommendation(
    goal: _optimizer.ServingGoal, cons: _optimizer.Constraints, prices: tuple
) -> _optimizer.Recommendation:
    """Cached on (goal, constraints, prices). No progress callback: an element updated from inside a cached
    function breaks Streamlit's replay on the next hit, so the spinner says what is running instead."""
    return _optimizer.recommend(goal, cons, prices)


# --- serving simulation (issue 4) ------------------------------------------------------------------
from core import simulate as _simulate  # noqa: E402


@st.cache_data(max_entries=64, show_spinner=False)
def simulation(cfg: RabitConfig, spec: _simulate.SimSpec) -> _simulate.SimResult:
    """One simulated replica, cached on (config, workload spec)."""
    return _simulate.simulate(cfg, spec)


@st.cache_data(max_entries=128, show_spinner=False)
def sim_capacity(cfg: RabitConfig, spec: _simulate.SimSpec) -> _simulate.Capacity:
    return _simulate.max_throughput(cfg, spec)


@st.cache_data(max_entries=32, show_spinner=False)
def sim_sweep(
    cfg: RabitConfig, spec: _simulate.SimSpec, rates_per_s: tuple[float, ...]
) -> tuple[tuple[float, _simulate.Summary], ...]:
    """The summary at each Poisson arrival rate of a load sweep (core.simulate.sweep)."""
    return _simulate.sweep(cfg, spec, rates_per_s)


@st.cache_data(max_entries=256, show_spinner=False)
def sim_summary(cfg: RabitConfig, spec: _simulate.SimSpec) -> _simulate.Summary:
    """Only the summary of one simulation (a point of the knee chart's band at an assumption bound)."""
    return _simulate.simulate(cfg, spec).summary


@st.cache_data(max_entries=16, show_spinner=False)
def sim_trace(text: str) -> tuple[tuple[int, int], ...]:
    """Parsed (input, output) token rows of an uploaded trace; raises ValueError with the bad line."""
    return _simulate.parse_trace(text)


@st.cache_data(max_entries=16, show_spinner="Running the training deadline search for each priced GPU kind ...")
def training_recommendation(
    cfg: RabitConfig, deadline_s: float, cons: _optimizer.Constraints, prices: tuple
) -> _optimizer.TrainingRecommendation:
    return _optimizer.recommend_training(cfg, deadline_s, cons, prices)


# --- ranges (issue 9) --------------------------------------------------------------------------------
from core import uncertainty as _unc  # noqa: E402


@st.cache_resource(max_entries=64, show_spinner=False)
def _speed_bound_models(cfg: RabitConfig) -> tuple:
    """The step model at base and at each speed assumption's bounds (shared by the ranges and the band; the
    models are frozen, so every session may hold the same ones)."""
    return _unc.bound_models(cfg, _unc.by_tag("serving_speed"))


@st.cache_data(max_entries=256, show_spinner=False)
def speed_ranges(cfg: RabitConfig) -> _unc.Spread:
    return _unc.speed_spread(cfg, models=_speed_bound_models(cfg))


@st.cache_data(max_entries=256, show_spinner=False)
def memory_ranges(cfg: RabitConfig) -> _unc.Spread:
    return _unc.memory_spread(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory_ranges(cfg: RabitConfig) -> _unc.Spread:
    return _unc.training_memory_spread(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def batch_band(cfg: RabitConfig, batches: tuple[int, ...]) -> dict:
    return _unc.batch_band(cfg, batches, models=_speed_bound_models(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def simulation_ranges(cfg: RabitConfig, spec: _simulate.SimSpec) -> _unc.SimulationRanges:
    """Ranges of one simulated replica (reuses the cached full run)."""
    return _unc.simulation_spread(cfg, spec, simulation(cfg, spec))


@st.cache_data(max_entries=32, show_spinner=False)
def training_ranges(cfg: RabitConfig, goal: _training.TrainingGoal) -> dict:
    return _unc.training_ranges(cfg, training_plan(cfg, goal))


@st.cache_data(max_entries=32, show_spinner="Evaluating the recommendation and the runner-up at each bound ...")
def recommendation_ranges(
    goal: _optimizer.ServingGoal, cons: _optimizer.Constraints, prices: tuple
) -> _unc.RecommendationRanges:
    return _unc.recommendation_ranges(recommendation(goal, cons, prices), prices)


@st.cache_data(max_entries=16, show_spinner=False)
def training_option_ranges(cfg: RabitConfig, option: _optimizer.TrainingOption) -> dict:
    return _unc.training_option_ranges(cfg, option)


@st.cache_data(max_entries=32, show_spinner=False)
def training_layout_ranges(cfg: RabitConfig) -> _unc.Spread:
    """Ranges of the sidebar's own training layout (step time, MFU, runtime, cost)."""
    return _unc.training_spread(cfg, _training.config_layout(cfg))


@st.cache_data(max_entries=32, show_spinner=False)
def p95_e2e_band(
    cfg: RabitConfig, spec: _simulate.SimSpec, rates_per_s: tuple[float, ...]
) -> tuple[list[float], list[float], list[float]]:
    """The load sweep's p95 end-to-end with every assumption at each bound (no band where a bound's sweep runs
    out of its work budget)."""
    try:
        ends = [
            {r: s.e2e_s.p95 for r, s in sim_sweep(_unc.at_bound(cfg, b), spec, rates_per_s)} for b in ("low", "high")
        ]
    except ValueError:  # core.limits.BudgetExceeded
        return [], [], []
    return _unc.bounds_band(rates_per_s, *ends)


@st.cache_data(max_entries=32, show_spinner=False)
def training_bands(cfg: RabitConfig, goal: _training.TrainingGoal) -> dict[str, tuple[list, list, list]]:
    """Wall-clock and cost against GPU count with every assumption at each bound, at the counts feasible in the
    base plan and both bound plans (cost only when every one of them is priced)."""
    base = [c.gpus for c in training_plan(cfg, goal).curve if c.feasible]
    ends = [
        {c.gpus: c for c in training_plan(_unc.at_bound(cfg, b), goal).curve if c.feasible} for b in ("low", "high")
    ]
    out = {"wall_clock_s": _unc.bounds_band(base, *({n: c.wall_clock_s for n, c in e.items()} for e in ends))}
    cost = _unc.bounds_band(base, *({n: c.cost_usd for n, c in e.items()} for e in ends))
    if cost[0] == out["wall_clock_s"][0]:  # every count of the band priced
        out["cost_usd"] = cost
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def analysis_headline_ranges(cfg: RabitConfig) -> dict[str, _unc.Range]:
    """A saved analysis's headline numbers with their ranges (the same function as ``rabit analyses show``)."""
    return _unc.analysis_headline_ranges(cfg)


# --- next experiment and diagnostics (issue 11) -----------------------------------------------------
from core import diagnose as _diagnose  # noqa: E402
from core import next_experiment as _next  # noqa: E402
from core import telemetry as _telemetry  # noqa: E402


@st.cache_data(max_entries=16, show_spinner=False)
def _next_experiment_store(
    spec: _next.NextExperimentSpec, prices: tuple, _result: _next.NextExperiment | None = None
) -> _next.NextExperiment:
    """Keyed on (spec, prices) only (``_result`` is not hashed): a miss raises, and exceptions are not cached."""
    if _result is None:
        raise LookupError("not computed yet")
    return _result


def next_experiment(spec: _next.NextExperimentSpec, prices: tuple, progress=None) -> _next.NextExperiment:
    """Cached across sessions, with a progress bar on the cold run: the computation runs outside the cached
    function (an element updated inside one breaks Streamlit's replay) and is then stored under its key."""
    try:
        return _next_experiment_store(spec, prices)
    except LookupError:
        pass
    result = _next.next_experiment(spec, prices, progress=progress)
    return _next_experiment_store(spec, prices, _result=result)


@st.cache_data(max_entries=16, show_spinner="Reading the telemetry ...")
def telemetry(data: bytes, name: str) -> _telemetry.Telemetry:
    """Parsed telemetry (a TelemetryError is raised, not cached)."""
    return _telemetry.parse(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def diagnosis(tel: _telemetry.Telemetry, expect: _diagnose.Expectation) -> _diagnose.Diagnosis:
    return _diagnose.diagnose(tel, expect)


# --- saved analyses and calibration (issue 10) -------------------------------------------------------
from core import calibration as _calibration  # noqa: E402
from core.runs import Run as _Run  # noqa: E402


@st.cache_resource(show_spinner=False)
def store(url: str):
    """One store (engine and connection pool) per database URL per server process."""
    from store import Store

    return Store(url)


@st.cache_data(max_entries=64, show_spinner=False)
def run_residuals(runs: tuple[_Run, ...]) -> tuple[_calibration.Residual, ...]:
    """Each run's measurements against RA-BIT's prediction on the run's own config."""
    return _calibration.residuals_of(runs)


@st.cache_data(max_entries=32, show_spinner="Simulating the saved analysis for its predicted p95s ...")
def analysis_expectation(cfg: RabitConfig) -> _diagnose.Expectation:
    """What a saved analysis predicts (its simulated p95 TTFT and ITL, its cached-prefix share)."""
    try:
        return _diagnose.expectation_of(cfg)
    except (ValueError, KeyError):  # a config the simulator cannot run
        return _diagnose.Expectation(prefix_cache_frac=cfg.prefix_cache_frac or None)


@st.cache_data(max_entries=64, show_spinner=False)
def training_fit_options(cfg: RabitConfig) -> tuple[str, ...]:
    """Changes that make the sidebar's training layout fit (empty when it fits)."""
    return _memory.training_fit_options(resolve(cfg))


# --- figures shared by every session ---------------------------------------------------------------------
@st.cache_resource(max_entries=512, show_spinner=False)
def _shared_figure(name: str, _build, args: tuple, kwargs: dict):
    return _build(*args, **kwargs)


def figure(build, *args, **kwargs):
    """``build(*args, **kwargs)`` once per distinct input, for every session: building a plotly figure is most
    of a page's own cost once its numbers are cached. The figure is shared, so a caller draws it and never
    changes it (``st.plotly_chart`` copies it before sending)."""
    return _shared_figure(f"{build.__module__}.{build.__qualname__}", build, args, kwargs)
