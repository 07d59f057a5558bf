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
cannot move anything). :mod:`core.decision.uncertainty` applies it to each page's headline numbers and
:mod:`core.decision.pick_ranges` to the optimizer's recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from core.base import BASIS_TEXT, REGISTRY, Contribution, Range, by_tag
from core.config import RabitConfig

Bound = Literal["low", "base", "high"]
#: The x of a curve's band (a rate, a GPU count).
X = TypeVar("X")
Estimate = Callable[[RabitConfig], Mapping[str, Any]]


def combine(value: float | None, moves: Mapping[str, Sequence[Any]]) -> Range:
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
        ds = [d for d in (_log_move(r, value) for r in results) if d is not None]
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
            same = screen is not None and provably_equal(screen(moved), base_screen)
            runs.append((n, v, dict(base) if same else dict(estimate(moved))))
    return spread_of(base, runs)


def provably_equal(a: Any, b: Any) -> bool:
    """Whether two screens (step models, tuples of figures) are equal; arrays without one truth value are not."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # arrays without a truth value: not provably equal
        return False


def spread_of(base: dict[str, Any], runs: list[tuple[str, float, dict[str, Any]]]) -> Spread:
    """The range of every numeric key of ``base`` from the runs at each assumption's bounds (:func:`combine`)."""
    ranges = {}
    for key, val in base.items():
        if isinstance(val, bool) or not isinstance(val, (int, float)) and val is not None:
            continue
        moves: dict[str, list[Any]] = {}
        for n, _, out in runs:
            moves.setdefault(n, []).append(out.get(key))
        ranges[key] = combine(val, {n: tuple(rs) for n, rs in moves.items()})
    return Spread(ranges=ranges, base=base, runs=tuple(runs))


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


def bounds_band(
    xs: Sequence[X], at_low: Mapping[X, float | None], at_high: Mapping[X, float | None]
) -> tuple[list[X], list[float], list[float]]:
    """A curve's band with every assumption at its pessimistic and at its optimistic bound: ``(x, lower, upper)``
    at each ``x`` where both bound runs have a value, lower/upper the smaller/larger of the two (a bound can move
    a number either way). A point either run lacks (infeasible, out of its work budget) is left out."""
    both = [(x, a, b) for x in xs if (a := at_low.get(x)) is not None and (b := at_high.get(x)) is not None]
    return [x for x, _, _ in both], [min(a, b) for _, a, b in both], [max(a, b) for _, a, b in both]


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


def ranges_json(
    ranges: Mapping[str, Range], keys: tuple[str, ...] | None = None, prefix: str = ""
) -> dict[str, dict[str, float]]:
    """The CLI's ``ranges`` object: headline key (dotted) -> {"low", "high"}."""
    return {prefix + k: r.as_json() for k, r in ranges.items() if keys is None or k in keys}


def basis_of(ranges: Mapping[str, Range]) -> str:
    """One ``range_basis`` string for a set of ranges (the calibrated basis wins where any range has it)."""
    kinds = {r.basis for r in ranges.values()}
    for k in ("calibrated", "heuristic"):
        if k in kinds:
            return BASIS_TEXT[k]
    return BASIS_TEXT["none"]
