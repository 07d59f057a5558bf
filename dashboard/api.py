"""The names from ``core`` (and the connectors' error) a page may use, in one place: pages import only ``dashboard``.

Only what a page needs to gather inputs and to word results: the enumerated choices and their labels, the
formatters, the types a page builds or reads, the limits it states, and the exceptions it turns into
``st.error``. Nothing here computes, parses or fetches: every number, parse and fetch goes through the cached
functions of :mod:`dashboard.cache`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from connectors.prometheus import PrometheusError
from core.base import (
    DAY_S,
    MAX_TABLE_BYTES,
    BudgetExceeded,
    PayloadError,
    by_tag,
    choices,
    fmt_bytes,
    fmt_days,
    fmt_latency,
    fmt_num,
    fmt_pct,
    fmt_si,
    fmt_time,
    fmt_usd,
    fmt_value,
)
from core.base import (
    sig as fmt_sig,
)
from core.catalog import CUDA_GRAPH_MAX_TOKENS, ENGINE_LABELS, CatalogError
from core.config import EXAMPLE as EXAMPLE_FLEET
from core.config import TABLE_COLUMNS as FLEET_TABLE_COLUMNS
from core.config import FleetError
from core.decision import COMPARABLE_RULE, Constraints, ServingGoal
from core.operations import CSV_COLUMNS, MAX_BYTES, METRICS, RULES, Expectation, RunError, TelemetryError
from core.serving import DEFAULT_RATE_FRACTION, POLICIES

__all__ = [
    "BudgetExceeded",
    "COMPARABLE_RULE",
    "CSV_COLUMNS",
    "CUDA_GRAPH_MAX_TOKENS",
    "CatalogError",
    "Constraints",
    "DAY_S",
    "DEFAULT_RATE_FRACTION",
    "ENGINE_LABELS",
    "EXAMPLE_FLEET",
    "FLEET_TABLE_COLUMNS",
    "FleetError",
    "ROUTER_HELP",
    "ROUTER_LABELS",
    "Expectation",
    "MAX_BYTES",
    "MAX_TABLE_BYTES",
    "METRICS",
    "PayloadError",
    "PrometheusError",
    "RULES",
    "RunError",
    "ServingGoal",
    "TelemetryError",
    "ValidationError",
    "choices",
    "fmt_bytes",
    "fmt_days",
    "fmt_latency",
    "fmt_num",
    "fmt_time",
    "fmt_pct",
    "fmt_si",
    "fmt_usd",
    "fmt_value",
    "fmt_sig",
    "VIDEO_ASSUMPTIONS",
]


#: The router choices' labels, and which production router each one mimics (core.serving.router).
ROUTER_LABELS = choices.ROUTER_LABELS
ROUTER_HELP = "; ".join(f"{name}: {p.mimics}" for name, p in POLICIES.items())

#: The efficiency assumptions a video request's numbers move with (the Video generation page's sources table).
VIDEO_ASSUMPTIONS = by_tag("video")


def __getattr__(name: str) -> Any:
    """The store's exceptions, imported on first use (the store loads its database driver)."""
    if name in ("Conflict", "StoreError"):
        import store

        return getattr(store, name)
    raise AttributeError(name)
