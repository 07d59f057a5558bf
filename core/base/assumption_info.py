"""What one efficiency assumption is (:class:`AssumptionInfo`) and what it can move (:data:`MOVES`); the rows
themselves are in :mod:`core.base.assumptions` and :mod:`core.base.assumptions_adapters`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MOVES", "AssumptionInfo"]


@dataclass(frozen=True)
class AssumptionInfo:
    name: str
    label: str
    unit: str
    base: float
    low: float
    high: float
    source: str
    #: +1 when a larger value makes the system faster / roomier, -1 when slower.
    direction: int = 1
    #: What the assumption can move (a subset of :data:`MOVES`): an estimate is evaluated only at the bounds of
    #: the assumptions tagged with what it computes.
    moves: tuple[str, ...] = ()
    #: The hard domain: the pydantic field, the sidebar's number input and ``rabit --assume`` all refuse a value
    #: outside ``[min_value, max_value]``; ``domain_reason`` says why the edge is there.
    min_value: float = 0.0
    max_value: float = 1.0
    domain_reason: str = ""

    @property
    def bounds(self) -> tuple[float, float]:
        """(pessimistic, optimistic) values: ``low`` is the bound that makes the system slower or smaller."""
        return self.low, self.high

    def check(self, value: float) -> str | None:
        """None when ``value`` is inside the domain, else a message naming the assumption and the domain."""
        if not (self.min_value <= value <= self.max_value):  # also refuses NaN
            return (
                f"{self.name}={value:g} is outside {self.min_value:g}..{self.max_value:g} [{self.unit}] "
                f"({self.domain_reason})"
            )
        return None


#: Everything an assumption can be tagged as moving.
MOVES = ("serving_memory", "serving_speed", "training_memory", "training", "video", "power")
