"""The value every ranged number takes: a point estimate with its low and high, and where they come from.

Two producers fill it, and a page or the CLI shows either without knowing which:

* ``basis="heuristic"``: the estimate evaluated at each assumption's low and high bound, combined as
  ``low = base * exp(-sqrt(sum d_down^2))``, ``high = base * exp(+sqrt(sum d_up^2))`` (the RA-BIT spec,
  "Uncertainty and calibration"); ``contributions`` holds each assumption's ``d_down`` and ``d_up``.
* ``basis="calibrated"``: the analytical value corrected by measured runs (``value = analytical * exp(bias)``)
  with a Student-t prediction interval (n >= 3) or the x0.7 ... x1.3 band (n < 3); ``n_runs`` says how many.

``basis="none"`` marks a metric that no assumption moves: its range is empty (low = high = value), never a
made-up one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

RangeBasis = Literal["heuristic", "calibrated", "none"]

#: The words the screen and the CLI use for each basis (never "confidence" for the heuristic one).
BASIS_TEXT: dict[str, str] = {
    "heuristic": "heuristic range from the assumption bounds",
    "calibrated": "calibrated from measured runs",
    "none": "no assumption moves this number",
}


class Contribution(BaseModel):
    """How far one assumption moves a metric: d = ln(result at the bound / base), split by direction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    d_down: float = 0.0  # <= 0: the largest downward log-move over the assumption's two bounds
    d_up: float = 0.0  # >= 0: the largest upward log-move


class Range(BaseModel):
    """A value with its low and high (same unit as the value)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float
    low: float
    high: float
    basis: RangeBasis = "heuristic"
    contributions: tuple[Contribution, ...] = ()
    n_runs: int = 0

    @property
    def empty(self) -> bool:
        return self.low == self.high == self.value

    def as_json(self) -> dict[str, float]:
        """The CLI's ``ranges[key]`` object."""
        return {"low": self.low, "high": self.high}
