"""Unit factors and formatters: the one place where human units meet SI.

Inside ``core`` every quantity is SI and the unit lives in the name
(``_bytes``, ``_s``, ``_flop``, ``_flop_per_s``, ``_bytes_per_s``). GB means 1e9
bytes and GiB means 2**30 bytes, always.
"""

from __future__ import annotations

import math

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2.0**10
MiB = 2.0**20
GiB = 2.0**30

TERA = 1e12
PETA = 1e15
GIGA = 1e9

US = 1e-6
MS = 1e-3
HOUR_S = 3600.0
DAY_S = 86400.0

KW = 1e3
#: Joules in a kilowatt-hour.
KWH_J = 3.6e6


def fmt_bytes(x_bytes: float, unit: str = "GB", digits: int = 3) -> str:
    """Format bytes in decimal GB (default) or binary GiB, labelled."""
    if unit == "GiB":
        return f"{x_bytes / GiB:.{digits}g} GiB"
    if unit == "auto":
        for name, f in (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)):
            if abs(x_bytes) >= f:
                return f"{x_bytes / f:.{digits}g} {name}"
        return f"{x_bytes:.{digits}g} B"
    return f"{x_bytes / GB:.{digits}g} GB"


#: Seconds per time unit, for the formatters below.
TIME_UNITS = {"µs": US, "ms": MS, "s": 1.0, "min": 60.0, "h": HOUR_S, "days": DAY_S}
#: The unit :func:`fmt_time` picks: the first whose bound [s] the magnitude stays under (1-3 digits before the point).
AUTO_SCALE = ((1e-3, "µs"), (1.0, "ms"), (120.0, "s"), (2 * HOUR_S, "min"), (2 * DAY_S, "h"), (math.inf, "days"))
#: A latency in the optimizer's prose: milliseconds below a second, else seconds.
LATENCY_SCALE = ((1.0, "ms"), (math.inf, "s"))
#: A training run's length: always in days.
DAYS_SCALE = ((math.inf, "days"),)


def fmt_time_in(x_s: float, unit: str, digits: int = 3) -> str:
    """Seconds as a number of ``unit`` (a key of :data:`TIME_UNITS`), ``digits`` significant figures, no label."""
    return f"{x_s / TIME_UNITS[unit]:.{digits}g}"


def fmt_time(
    x_s: float | None, digits: int = 3, scale: tuple[tuple[float, str], ...] = AUTO_SCALE, missing: str = "n/a"
) -> str:
    """Format seconds with a unit from ``scale`` (default: one that keeps 1-3 digits before the point); a missing
    value (None or NaN) reads ``missing``. Zero reads "0 s" on the default scale."""
    if x_s is None or (isinstance(x_s, float) and math.isnan(x_s)):
        return missing
    a = abs(x_s)
    if a == 0 and scale is AUTO_SCALE:
        return "0 s"
    unit = next(u for bound, u in scale if a < bound)
    return f"{fmt_time_in(x_s, unit, digits)} {unit}"


def fmt_latency(x_s: float | None) -> str:
    """A latency in words: milliseconds below a second, else seconds, three significant figures; "withheld" when
    the percentile has too few samples (None)."""
    return fmt_time(x_s, scale=LATENCY_SCALE, missing="withheld")


def fmt_days(x_s: float) -> str:
    """A run's length in days, three significant figures ("12.3 days")."""
    return fmt_time(x_s, scale=DAYS_SCALE)


def fmt_num(x: float, digits: int = 3) -> str:
    """Format a plain count with k / M / B / T suffixes."""
    a = abs(x)
    for name, f in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= f:
            return f"{x / f:.{digits}g}{name}"
    if float(x).is_integer():
        return f"{int(x)}"
    return f"{x:.{digits}g}"


def fmt_value(x: float, unit: str, digits: int = 3) -> str:
    """Format a value by its trace unit (B, s, FLOP, FLOP/s, B/s, tokens/s, ...)."""
    if unit == "B":
        if abs(x) < 1e6:
            return f"{x:,.{digits}g} B" if not float(x).is_integer() else f"{int(x):,} B"
        return fmt_bytes(x, "auto", digits)
    if unit == "s":
        return fmt_time(x, digits)
    if unit == "FLOP":
        if abs(x) >= 1e18:
            return f"{x / 1e18:.{digits}g} EFLOP"
        if abs(x) >= PETA:
            return f"{x / PETA:.{digits}g} PFLOP"
        return f"{x / TERA:.{digits}g} TFLOP" if abs(x) >= 1e9 else f"{x:.{digits}g} FLOP"
    if unit == "FLOP/s":
        return f"{x / TERA:.{digits}g} TFLOP/s"
    if unit == "B/s":
        return f"{x / TB:.{digits}g} TB/s" if abs(x) >= 1e11 else f"{x / GB:.{digits}g} GB/s"
    if unit in ("", "1", "frac"):
        return fmt_num(x, digits)
    if unit == "%":
        return f"{100 * x:.{digits}g} %"
    if unit == "W":
        return (
            f"{x / 1e6:.{digits}g} MW"
            if abs(x) >= 1e6
            else f"{x / KW:.{digits}g} kW"
            if abs(x) >= KW
            else f"{x:.{digits}g} W"
        )
    if unit == "J":
        return f"{x / KWH_J:.{digits}g} kWh" if abs(x) >= KWH_J / 10 else f"{x:.{digits}g} J"
    return f"{fmt_num(x, digits)} {unit}"
