"""The only place with ``st.cache_data``: cached wrappers around ``core`` keyed on the frozen config.

Every number, parse and fetch a page needs goes through here: a page gathers inputs, calls these and draws.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from connectors import prometheus
from core import catalog, config, decision, operations, physics, serving, training
from core.base import decode_text, parse_json
from core.config import RabitConfig, resolve, resolve_video, training_goal_args
from core.config import video_problems as video_problems_of
from core.config import workload_problems as workload_problems_of
from executors import joined

# --- the catalog's listings and the inputs a page reads from uploads ----------------------------------------------


@st.cache_data(show_spinner=False)
def gpu_slugs() -> tuple[str, ...]:
    """The catalog's GPU kinds, sorted (the choices of a GPU multiselect)."""
    return tuple(sorted(catalog.gpus()))


@st.cache_data(max_entries=64, show_spinner=False)
def length_note(cfg: RabitConfig) -> serving.LengthNote:
    """One replica at the config's request lengths against the typical chat request's (what the lengths decide)."""
    return serving.length_note(cfg)


def pool_vendor_note(kinds: tuple[str, ...]) -> str:
    """Why a plan over these GPU kinds (none: every kind) pairs disaggregated pools within one vendor ("" for
    one vendor's kinds)."""
    return catalog.pool_vendor_note(tuple(catalog.gpu(k) for k in (kinds or gpu_slugs())))


@st.cache_data(show_spinner=False)
@st.cache_data(show_spinner=False)
def catalog_prices() -> tuple:
    """The catalog's price list."""
    return tuple(catalog.prices())


@st.cache_data(show_spinner=False)
def diffusion_models() -> tuple[str, ...]:
    """The catalog's diffusion models, sorted (the Video generation page's model choices)."""
    return tuple(sorted(catalog.diffusion_models()))


@st.cache_data(max_entries=64, show_spinner=False)
def diffusion_model(slug: str) -> catalog.DiffusionModel:
    """One diffusion model of the catalog (its name, kind and default frame rate for the page's labels)."""
    return catalog.diffusion_model(slug)


@st.cache_data(max_entries=16, show_spinner=False)
def upload_text(data: bytes, what: str, max_bytes: int) -> str:
    """An upload as UTF-8 text within its size limit (core.base.payloads.decode_text; a PayloadError is raised)."""
    return decode_text(data, what, max_bytes)


@st.cache_data(max_entries=16, show_spinner=False)
def prices_from_csv(text: str, name: str) -> tuple:
    """A price list from CSV text (an upload or the edited table); a CatalogError is raised, not cached."""
    return tuple(catalog.parse_prices(text, name=name))


@st.cache_data(max_entries=64, show_spinner=False)
def adapter_kv_cost(cfg: RabitConfig) -> physics.AdapterKvCost:
    """What the config's adapter slots take out of the KV budget and the sequences (against the base alone)."""
    return physics.adapter_kv_cost(resolve(cfg))


@st.cache_data(max_entries=32, show_spinner="Sizing one deployment per variant ...")
def per_variant(
    goal: decision.ServingGoal, cons: decision.Constraints, prices: tuple, pick: decision.Pick | None
) -> decision.PerVariant | None:
    """One deployment per variant (merged weights) against the recommendation, in GPUs and cost."""
    return decision.per_variant(goal, cons, prices, pick)


@st.cache_data(max_entries=256, show_spinner=False)
def serving_memory(cfg: RabitConfig) -> physics.ServingMemory:
    return physics.serving_memory(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory(cfg: RabitConfig) -> physics.TrainingMemory:
    return physics.training_memory(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def sequences_vs_context(cfg: RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    return physics.sequences_vs_context(cfg, contexts)


@st.cache_data(max_entries=32, show_spinner="Sizing one sequence from 1k tokens to the model's window...")
def long_context(cfg: RabitConfig) -> serving.LongContextView:
    return serving.long_context_view(resolve(cfg))


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
def sweep_batches(cfg: RabitConfig, top: int) -> tuple[int, ...]:
    """The batches of the Speed page's sweep up to ``top`` (and the configured batch)."""
    return tuple(serving.default_batches(cfg, top))


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
def attention_options(cfg: RabitConfig) -> tuple:
    return serving.attention_options(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def ep_options(cfg: RabitConfig) -> tuple:
    return serving.ep_options(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def textbook_comparison(cfg: RabitConfig) -> serving.TextbookComparison:
    return serving.textbook_comparison(cfg)


# --- training (issue 5) ------------------------------------------------------------------------------


@st.cache_data(max_entries=64, show_spinner=False)
def training_goal(cfg: RabitConfig) -> training.TrainingGoal:
    """The training goal the config's ``training`` group describes (the Training page's inputs)."""
    return training.goal_from_inputs(cfg, **training_goal_args(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def budget_problem(cfg: RabitConfig) -> str | None:
    """Why the Training page's GPU budget cannot train on this cluster (None when it can)."""
    return training.budget_problem(cfg, cfg.training.budget_gpus or cfg.gpus)


@st.cache_data(max_entries=32, show_spinner=False)
def training_plan(cfg: RabitConfig, goal: training.TrainingGoal) -> training.TrainingPlan:
    return training.plan(resolve(cfg), goal)


@st.cache_data(max_entries=32, show_spinner=False)
def deadline_choice(cfg: RabitConfig, goal: training.TrainingGoal) -> Any:
    """The smallest and the cheapest GPU count of the plan that meet its deadline (None when none does)."""
    plan = training_plan(cfg, goal)
    return training.deadline_choice(plan.curve) if plan.mode == "deadline" else None


@st.cache_data(max_entries=64, show_spinner=False)
def training_math(cfg: RabitConfig) -> tuple:
    return training.training_math(resolve(cfg))


@st.cache_data(max_entries=64, show_spinner=False)
def training_layout(cfg: RabitConfig) -> training.LayoutResult:
    """The sidebar's own layout, timed and sized."""
    return training.evaluate_layout(resolve(cfg), training.config_layout(cfg))


# --- optimizer (issue 6) -----------------------------------------------------------------------------


@st.cache_data(show_spinner=False, max_entries=32)
def session_goal(cfg: RabitConfig, agents: int) -> decision.ServingGoal:
    """The optimizer's goal for ``agents`` concurrent agents running the config's sessions (without a replayed
    trace) at its p95 TTFT target per turn (core.decision.session_goal)."""
    assert cfg.sessions is not None and cfg.targets.p95_ttft_s is not None
    return decision.session_goal(cfg, cfg.sessions.with_(trace=None), agents=agents, ttft_p95_s=cfg.targets.p95_ttft_s)


@st.cache_data(max_entries=32, show_spinner="Screening every configuration, then simulating up to 16 finalists ...")
def recommendation(goal: decision.ServingGoal, cons: decision.Constraints, prices: tuple) -> decision.Recommendation:
    """Cached on (goal, constraints, prices). No progress callback: an element updated from inside a cached
    function breaks Streamlit's replay on the next hit, so the spinner says what is running instead."""
    return decision.recommend(goal, cons, prices)


# --- serving simulation (issue 4) ------------------------------------------------------------------


@st.cache_data(max_entries=64, show_spinner=False)
def sim_spec(cfg: RabitConfig, trace: tuple[tuple[int, int], ...] | None = None) -> serving.SimSpec:
    """The simulator's workload from the config (a replayed ``trace`` wins over the lengths); a ValidationError
    naming the field is raised, not cached."""
    return serving.sim_spec(cfg, trace=trace)


@st.cache_data(max_entries=64, show_spinner=False)
def workload_problems(cfg: RabitConfig, trace: tuple[tuple[int, int], ...] | None) -> tuple[Any, ...]:
    """What the simulated workload asks that the deployment cannot serve (core.config.workload_problems)."""
    return workload_problems_of(cfg, trace)


@st.cache_data(max_entries=64, show_spinner=False)
def engine_defaults(cfg: RabitConfig) -> Any:
    """The documented defaults of the config's serving engine on its GPU (core.catalog.engines)."""
    return catalog.engine_defaults(cfg.workload.engine, catalog.gpu(cfg.gpu))


@st.cache_data(max_entries=64, show_spinner=False)
def default_rate(capacity_requests_per_s: float) -> float:
    """A round arrival rate clearly inside the closed-form capacity (core.serving.default_rate)."""
    return serving.default_rate(capacity_requests_per_s)


@st.cache_data(max_entries=64, show_spinner=False)
def knee_sweep(spec: serving.SimSpec, capacity: serving.Capacity) -> tuple[serving.SimSpec, tuple[float, ...]]:
    """The workload of each point of the p95-against-rate sweep and its rates (core.serving.knee_sweep)."""
    return serving.knee_sweep(spec, capacity)


@st.cache_data(max_entries=64, show_spinner=False)
def simulation(cfg: RabitConfig, spec: serving.SimSpec) -> serving.SimResult:
    """One simulated replica, cached on (config, workload spec)."""
    return serving.simulate(cfg, spec)


@st.cache_data(max_entries=64, show_spinner=False)
def deployment(cfg: RabitConfig, spec: serving.SimSpec) -> serving.DeploymentResult:
    """The deployment the config describes (its replicas behind its router, or its prefill and decode pools)
    serving the workload, cached on (config, workload spec)."""
    return serving.simulate_deployment(cfg, spec)


@st.cache_data(max_entries=64, show_spinner=False)
def slot_limit(cfg: RabitConfig, spec: serving.SimSpec) -> decision.SlotLimit | None:
    """Whether requests wait for an adapter slot in the deployment's run, and the fewest ``max_loras`` that meets
    the target (core.decision.slot_limit; None without adapters)."""
    if not cfg.adapters.enabled:
        return None
    return decision.slot_limit(cfg, spec, deployment(cfg, spec))


def adapter_slot_limit(cfg: RabitConfig) -> decision.SlotLimit | None:
    """:func:`slot_limit` of the sidebar's workload (the Serving page's run at its defaults); None without
    adapters or when that workload cannot be simulated (the Serving page says why)."""
    if not cfg.adapters.enabled:
        return None
    try:
        return slot_limit(cfg, sim_spec(cfg))
    except ValueError:  # a workload the simulator refuses (ValidationError included), or a work budget run out
        return None


@st.cache_data(max_entries=64, show_spinner=False)
def deployment_ranges(cfg: RabitConfig, spec: serving.SimSpec) -> decision.SimulationRanges:
    """Ranges of the deployment's figures: one replica at its share of the rate moved to each bound, rebased on
    the deployment's values (a disaggregated deployment: its decode instance's)."""
    return decision.deployment_spread(cfg, spec, deployment(cfg, spec))


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
    out of its work budget, nor at a rate where a bound's run saturates: its latency would only measure the run)."""
    try:
        ends = [
            {r: s.e2e_s.p95 for r, s in sim_sweep(decision.at_bound(cfg, b), spec, rates_per_s) if not s.saturated}
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


@st.cache_data(max_entries=32, show_spinner=False)
def compare_headlines(a: RabitConfig, b: RabitConfig) -> tuple[decision.Comparison, ...]:
    """Two configurations' headline numbers side by side (core.decision.compare_headlines)."""
    return decision.compare_headlines(a, b)


def is_fleet_plan(results: dict[str, Any] | None) -> bool:
    """Whether a saved analysis's results hold a fleet plan (core.decision.is_fleet_plan)."""
    return decision.is_fleet_plan(results)


@st.cache_data(max_entries=16, show_spinner=False)
def compare(
    a: RabitConfig, b: RabitConfig, kind: str, results_a: dict[str, Any], results_b: dict[str, Any]
) -> decision.AnalysisComparison:
    """Two analyses by their kind's numbers (core.decision.compare_analyses)."""
    return decision.compare_analyses(kind, a, b, results_a, results_b)


@st.cache_data(max_entries=32, show_spinner=False)
def config_differences(a: RabitConfig, b: RabitConfig) -> tuple[tuple[str, Any, Any], ...]:
    """The inputs in which two configurations differ (core.config.differences)."""
    from core.config import differences

    return differences(a, b)


@st.cache_data(max_entries=16, show_spinner=False)
def config_from_link(text: str, ignore: tuple[str, ...] = ()) -> tuple[RabitConfig, tuple[str, ...], str | None]:
    """The config a pasted RA-BIT link carries, the messages about what it could not use, and the saved analysis
    it names (its ``analysis=`` id, or None). ``ignore``: parameters that choose a view, not the analysis."""
    from urllib.parse import parse_qs, urlsplit

    from core.config import from_query_report

    query = urlsplit(text.strip()).query if "?" in text else text.strip().lstrip("?")
    params = {k: v for k, v in parse_qs(query, keep_blank_values=True).items()}
    analysis = params.pop("analysis", [None])[-1]
    for k in ignore:
        params.pop(k, None)
    cfg, issues = from_query_report(params)
    return cfg, tuple(i.message() for i in issues), analysis


# --- next experiment and diagnostics (issue 11) -----------------------------------------------------


@st.cache_data(max_entries=16, show_spinner=False)
def _next_experiment_store(
    spec: decision.NextExperimentSpec, prices: tuple, _result: decision.NextExperiment | None = None
) -> decision.NextExperiment:
    """Keyed on (spec, prices) only (``_result`` is not hashed): a miss raises, and exceptions are not cached."""
    if _result is None:
        raise LookupError("not computed yet")
    return _result


@st.cache_data(max_entries=32, show_spinner=False)
def next_experiment_spec(cfg: RabitConfig) -> decision.NextExperimentSpec:
    """The next experiment the config describes: its serving goal and constraints (``cfg.workload``,
    ``cfg.targets``) and the workload's spread (``cfg.experiment``)."""
    e = cfg.experiment
    return decision.NextExperimentSpec(
        goal=decision.ServingGoal.from_config(cfg),
        constraints=decision.Constraints.from_config(cfg),
        prompt_spread_frac=e.prompt_spread_frac,
        output_spread_frac=e.output_spread_frac,
        rate_spread_frac=e.rate_spread_frac,
    )


@st.cache_data(max_entries=64, show_spinner=False)
def outcomes(experiment: Any) -> tuple[str, ...]:
    """The decision under each outcome of one experiment, in words (core.decision.outcomes)."""
    return decision.outcomes(experiment)


def next_experiment(spec: decision.NextExperimentSpec, prices: tuple, progress=None) -> decision.NextExperiment:
    """Cached across sessions, with a progress bar on the cold run: the computation runs outside the cached
    function (an element updated inside one breaks Streamlit's replay) and is then stored under its key."""
    try:
        return _next_experiment_store(spec, prices)
    except LookupError:
        pass
    with joined() as executor:  # the Ray cluster RABIT_RAY_ADDRESS names, else the local worker processes
        result = decision.next_experiment(spec, prices, progress=progress, executor=executor)
    return _next_experiment_store(spec, prices, _result=result)


@st.cache_data(max_entries=16, show_spinner="Reading the telemetry ...")
def telemetry(data: bytes, name: str) -> operations.Telemetry:
    """Parsed telemetry (a TelemetryError is raised, not cached)."""
    return operations.parse(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def diagnosis(tel: operations.Telemetry, expect: operations.Expectation) -> operations.Diagnosis:
    return operations.diagnose(tel, expect)


#: How long a Prometheus answer stands before the same query is sent again [s]: a page reruns on every input
#: change, and the server is asked once per window, not once per rerun.
PROMETHEUS_TTL_S = 60


@st.cache_data(max_entries=8, ttl=PROMETHEUS_TTL_S, show_spinner="Querying Prometheus ...")
def prometheus_telemetry(url: str, since_min: float, timeout_s: float) -> operations.Telemetry:
    """The rules' series over the last ``since_min`` minutes from a Prometheus server (connectors.prometheus; a
    PrometheusError is raised, not cached)."""
    return prometheus.query_range(url, since_s=since_min * 60, timeout_s=timeout_s)


@st.cache_data(max_entries=32, show_spinner=False)
def stored_telemetry(payload: dict) -> operations.Telemetry:
    """Telemetry a saved analysis holds (core.operations.from_payload; a TelemetryError is raised)."""
    return operations.from_payload(payload)


@st.cache_data(max_entries=32, show_spinner=False)
def measured_p95(tel: operations.Telemetry) -> dict[str, float | None]:
    """The telemetry's p95 TTFT and ITL [s] (None where the histogram is absent)."""
    return operations.measured_p95(tel)


@st.cache_data(max_entries=256, show_spinner=False)
def outside(r: decision.Range | None, measured: float | None) -> str | None:
    """Whether a measurement lies "below" or "above" a non-empty range (None when inside or not comparable)."""
    return decision.outside(r, measured)


# --- an engine's start-up log (issue 26) ---------------------------------------------------------------


@st.cache_data(max_entries=16, show_spinner=False)
def startup_log(data: bytes, name: str) -> operations.StartupLog:
    """A parsed vLLM or SGLang start-up log (a LogError is raised, not cached)."""
    return operations.parse_log(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def log_comparison(log: operations.StartupLog, cfg: RabitConfig) -> operations.LogComparison:
    return operations.compare_log(log, cfg)


@st.cache_data(max_entries=32, show_spinner=False)
def oom_diagnosis(log: operations.StartupLog, cfg: RabitConfig) -> operations.OomDiagnosis | None:
    return operations.diagnose_oom(log, cfg)


@st.cache_data(max_entries=32, show_spinner=False)
def tuning(
    cfg: RabitConfig, target: int | None, log: operations.StartupLog | None, engine: str | None
) -> decision.TuningPlan:
    return decision.tune(cfg, target, log=log, engine=engine)


# --- saved analyses and calibration (issue 10) -------------------------------------------------------
from core.operations import Run as _Run  # noqa: E402


@st.cache_resource(show_spinner=False)
def store(url: str):
    """One store (engine and connection pool) per database URL per server process."""
    from store import Store

    return Store(url)


@st.cache_data(show_spinner=False)
def run_csv_template() -> str:
    """The Calibration page's CSV template of measured runs."""
    return operations.csv_template()


@st.cache_data(max_entries=16, show_spinner=False)
def runs_from_file(name: str, data: bytes, base: RabitConfig | None) -> tuple[_Run, ...]:
    """Measured runs from an uploaded benchmark file (a RunError naming the file and field is raised)."""
    return operations.parse_file(name, data, base=base)


@st.cache_data(max_entries=16, show_spinner=False)
def runs_from_rows(rows: list[dict[str, Any]], base: RabitConfig | None) -> tuple[_Run, ...]:
    """Measured runs from the rows typed into the CSV template's table (a RunError is raised)."""
    return operations.parse_rows(rows, base=base, source="table")


@st.cache_data(max_entries=64, show_spinner=False)
def leave_one_out(cal: decision.MetricCalibration) -> Any:
    """The leave-one-out check of one metric's calibration interval (each run held out in turn)."""
    return decision.leave_one_out(cal)


@st.cache_data(max_entries=64, show_spinner=False)
def run_residuals(runs: tuple[_Run, ...]) -> tuple[decision.Residual, ...]:
    """Each run's measurements against RA-BIT's prediction on the run's own config."""
    return decision.residuals_of(runs)


@st.cache_data(max_entries=32, show_spinner=False)
def assumption_fit(runs: tuple[_Run, ...], gpu: str, engine: str) -> decision.AssumptionFit | None:
    """The efficiency assumptions fitted to the runs on ``gpu`` with ``engine`` (the second calibration)."""
    return decision.fit_assumptions(runs, gpu, engine)


@st.cache_data(max_entries=32, show_spinner=False)
def fit_comparison(runs: tuple[_Run, ...], gpu: str, engine: str) -> decision.FitComparison | None:
    """Leave-one-out: the factor against the fit on the runs on ``gpu`` with ``engine``."""
    return decision.compare_fit(runs, gpu, engine)


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


@st.cache_data(max_entries=64, show_spinner=False)
def video_problems(cfg: RabitConfig) -> tuple:
    """What is wrong with the config's video request, by field (core.config.video_problems)."""
    return tuple(video_problems_of(cfg))


# --- fleet planning -------------------------------------------------------------------------------------------------


@st.cache_data(max_entries=16, show_spinner=False)
def fleet_from_text(data: bytes, name: str) -> config.Fleet:
    """A fleet from a file's bytes or the page's text (core.config.parse_fleet; a FleetError is raised, not cached)."""
    return config.parse_fleet(data, name)


@st.cache_data(max_entries=64, show_spinner=False)
def fleet_tables(fleet: config.Fleet) -> dict[str, list[dict[str, Any]]]:
    """The fleet as the page's tables (core.config.fleet_tables)."""
    return config.fleet_tables(fleet)


@st.cache_data(max_entries=64, show_spinner=False)
def fleet_from_tables(
    tables: str,
    gpus: tuple[str, ...],
    max_gpus: str,
    max_usd_per_hour: float | None,
    settings: config.FleetSettings,
    keep: Any,
) -> config.Fleet:
    """The fleet of the page's edited tables (``tables``: their rows as JSON text) and constraint inputs
    (``max_gpus``: kind=count text); a FleetError is raised, not cached."""
    return config.fleet_from_tables(
        parse_json(tables, "the tables"),
        gpus=gpus,
        max_gpus=max_gpus,
        max_usd_per_hour=max_usd_per_hour,
        settings=settings,
        keep=keep,
    )


@st.cache_data(max_entries=64, show_spinner=False)
def fleet_file(fleet: config.Fleet, kind: str) -> str:
    """The fleet as a YAML or JSON file."""
    return config.fleet_yaml(fleet) if kind == "yaml" else config.fleet_json(fleet)


@st.cache_data(max_entries=8, show_spinner=False)
def _fleet_plan_store(fleet: config.Fleet, base: RabitConfig, _result: Any = None) -> decision.FleetPlan:
    """Keyed on (fleet, the settings a plan reads) only: a miss raises, and exceptions are not cached."""
    if _result is None:
        raise LookupError("not computed yet")
    return _result


def fleet_plan(fleet: config.Fleet, cfg: RabitConfig, progress=None) -> decision.FleetPlan:
    """The plan of ``fleet`` with the sidebar's settings (core.decision.fleet_base), cached across sessions, with
    a progress bar on the cold run (computed outside the cached function, then stored under its key). The units
    run on the Ray cluster RABIT_RAY_ADDRESS names, else on the local worker processes."""
    base = decision.fleet_base(cfg)
    try:
        return _fleet_plan_store(fleet, base)
    except LookupError:
        pass
    with joined() as executor:
        result = decision.plan_fleet(fleet, base, executor=executor, progress=progress)
    return _fleet_plan_store(fleet, base, _result=result)


@st.cache_data(max_entries=32, show_spinner=False)
def fleet_rows(plan: decision.FleetPlan, which: str | None = None) -> tuple[dict[str, Any], ...]:
    return decision.plan_rows(plan, which)


@st.cache_data(max_entries=32, show_spinner=False)
def fleet_totals(plan: decision.FleetPlan) -> tuple[dict[str, Any], ...]:
    return decision.totals_rows(plan)


@st.cache_data(max_entries=32, show_spinner=False)
def fleet_csv(plan: decision.FleetPlan) -> str:
    return decision.plan_csv(plan)


@st.cache_data(max_entries=32, show_spinner=False)
def fleet_headline(plan: decision.FleetPlan) -> dict[str, Any]:
    return decision.plan_headline(plan)


# --- multi-turn sessions --------------------------------------------------------------------------------------------


@st.cache_data(max_entries=16, show_spinner=False)
def session_trace(text: str) -> tuple:
    """The turns of an uploaded session trace (a ValueError naming the line and column is raised, not cached)."""
    return config.parse_session_trace(text)


@st.cache_data(max_entries=32, show_spinner=False)
def sessions(cfg: RabitConfig, workload: config.Sessions) -> serving.SessionResult:
    """The session workload on the config's deployment (core.serving.simulate_sessions)."""
    return serving.simulate_sessions(cfg, workload)


@st.cache_data(max_entries=16, show_spinner=False)
def session_sizing(
    cfg: RabitConfig, workload: config.Sessions, agents: int, ttft_p95_s: float, gpus: tuple[str, ...]
) -> decision.SessionSizing:
    """The fewest GPUs of each kind for ``agents`` concurrent agents at the p95 TTFT per turn (core.decision)."""
    return decision.size_sessions(cfg, workload, agents=agents, ttft_p95_s=ttft_p95_s, gpus=gpus)
