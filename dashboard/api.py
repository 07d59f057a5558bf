"""The names from ``core`` a page may use, in one place: pages import only ``dashboard``.

Computation still goes through :mod:`dashboard.cache`; what is here is what a page needs to gather
inputs and to word results: the enumerated choices, catalog listings, formatters, the inputs of the
searches, and the exceptions a page turns into ``st.error``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from connectors.prometheus import PrometheusError, query_range
from core import catalog
from core.base import choices
from core.decision import COMPARABLE_RULE, leave_one_out
from core.catalog import CatalogError, parse_prices
from core.decision import Constraints, ServingGoal
from core.operations import CSV_COLUMNS, METRICS, RunError, csv_template, parse_file, parse_rows
from core.training import deadline_choice
from core.catalog import CUDA_GRAPH_MAX_TOKENS, ENGINE_LABELS, engine_defaults
from core.operations import RULES, Expectation, measured_p95
from core.base import MAX_TABLE_BYTES, BudgetExceeded, decode_text
from core.decision import NextExperimentSpec, outcomes
from core.serving import DEFAULT_RATE_FRACTION, Lengths, SimSpec, default_rate, knee_rates, sim_spec, sweep_rates
from core.operations import MAX_BYTES, TelemetryError, from_payload, to_payload
from core.serving import default_batches
from core.training import MAX_GPUS, budget_problem, goal_from_inputs
from core.config import RabitConfig, training_goal_args
from core.training import TrainingGoal
from core.decision import at_bound, outside
from core.base import DAY_S, fmt_bytes, fmt_num, fmt_time, fmt_value
from core.base import by_tag
from core.config import video_problems

__all__ = [
    "MAX_BYTES",
    "COMPARABLE_RULE",
    "CSV_COLUMNS",
    "METRICS",
    "RunError",
    "csv_template",
    "leave_one_out",
    "parse_file",
    "parse_rows",
    "MAX_TABLE_BYTES",
    "BudgetExceeded",
    "decode_text",
    "from_payload",
    "to_payload",
    "PrometheusError",
    "query_range",
    "RULES",
    "Expectation",
    "Lengths",
    "NextExperimentSpec",
    "SimSpec",
    "TelemetryError",
    "outcomes",
    "DAY_S",
    "DEFAULT_RATE_FRACTION",
    "MAX_GPUS",
    "CatalogError",
    "Constraints",
    "ServingGoal",
    "ValidationError",
    "at_bound",
    "measured_p95",
    "outside",
    "budget_problem",
    "catalog",
    "choices",
    "deadline_choice",
    "CUDA_GRAPH_MAX_TOKENS",
    "ENGINE_LABELS",
    "engine_defaults",
    "default_batches",
    "default_rate",
    "fmt_bytes",
    "fmt_num",
    "fmt_time",
    "fmt_value",
    "VIDEO_ASSUMPTIONS",
    "video_problems",
    "goal_from_config",
    "goal_from_inputs",
    "next_experiment_spec",
    "knee_rates",
    "parse_prices",
    "sim_spec",
    "sweep_rates",
]


#: The efficiency assumptions a video request's numbers move with (the Video generation page's sources table).
VIDEO_ASSUMPTIONS = by_tag("video")


def goal_from_config(cfg: RabitConfig) -> TrainingGoal:
    """The training goal the config's ``training`` group describes (the Training page's inputs)."""
    return goal_from_inputs(cfg, **training_goal_args(cfg))


def next_experiment_spec(cfg: RabitConfig) -> NextExperimentSpec:
    """The next experiment the config describes: its serving goal and constraints (``cfg.workload``,
    ``cfg.targets``) and the workload's spread (``cfg.experiment``)."""
    e = cfg.experiment
    return NextExperimentSpec(
        goal=ServingGoal.from_config(cfg),
        constraints=Constraints.from_config(cfg),
        prompt_spread_frac=e.prompt_spread_frac,
        output_spread_frac=e.output_spread_frac,
        rate_spread_frac=e.rate_spread_frac,
    )


def __getattr__(name: str) -> Any:
    """The store's exceptions, imported on first use (the store loads its database driver)."""
    if name in ("Conflict", "StoreError"):
        import store

        return getattr(store, name)
    raise AttributeError(name)
