"""The names from ``core`` a page may use, in one place: pages import only ``dashboard``.

Computation still goes through :mod:`dashboard.cache`; what is here is what a page needs to gather
inputs and to word results: the enumerated choices, catalog listings, formatters, the inputs of the
searches, and the exceptions a page turns into ``st.error``.
"""

from __future__ import annotations

from pydantic import ValidationError

from core import catalog, choices
from core.catalog import CatalogError, parse_prices
from core.optimizer import Constraints, ServingGoal
from core.simulate import sim_spec, sweep_rates
from core.speed_views import default_batches
from core.training import MAX_GPUS, budget_problem, goal_from_inputs
from core.units import fmt_bytes, fmt_num, fmt_time

__all__ = [
    "CatalogError",
    "Constraints",
    "MAX_GPUS",
    "ServingGoal",
    "ValidationError",
    "budget_problem",
    "catalog",
    "choices",
    "default_batches",
    "fmt_bytes",
    "fmt_num",
    "fmt_time",
    "goal_from_inputs",
    "parse_prices",
    "sim_spec",
    "sweep_rates",
]
