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


def round_sig(x: float, digits: int = 3) -> float:
    """``x`` rounded to ``digits`` significant figures (0, NaN and infinities as they are)."""
    if x == 0 or x != x or math.isinf(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def sig(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures in plain decimal notation, never Python's exponent form.

    Trailing zeros after the point are dropped (as ``:g`` does); a whole part of more than ``digits`` digits is
    rounded to ``digits`` figures and grouped by thousands: 0.0304 -> "0.0304", 2.50 -> "2.5", 999.6 -> "1000",
    5316 -> "5,320", 2e-05 -> "0.00002". None and NaN read "n/a", infinities "∞" and "-∞".
    """
    if x is None or x != x:
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    r = round_sig(x, digits)
    if r == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(r)))  # 999.6 rounds to 1000: one more digit before the point
    if places <= 0:
        return f"{r:,.0f}"
    text = f"{r:.{places}f}"
    return text.rstrip("0").rstrip(".")


def _scaled(x: float, scale: tuple[tuple[str, float], ...], digits: int) -> tuple[str, float]:
    """The first (name, factor) of ``scale`` (largest first) that ``x``, rounded to ``digits`` figures, reaches;
    the last entry otherwise."""
    r = abs(round_sig(x, digits))
    return next(((n, f) for n, f in scale if r >= f), scale[-1])


#: Word multipliers of a count, largest first (1.5e13 tokens -> "15T tokens").
COUNT_SCALE = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3))


def fmt_num(x: float, digits: int = 3) -> str:
    """A plain count or ratio with k / M / B / T multipliers and ``digits`` significant figures ("2T", "1.66k",
    "0.00002"); whole numbers below a thousand read as they are."""
    if x != x or math.isinf(x):
        return sig(x)
    if abs(round_sig(x, digits)) >= 1e3:
        name, f = _scaled(x, COUNT_SCALE, digits)
        return f"{sig(x / f, digits)}{name}"
    if float(x).is_integer():
        return f"{int(x)}"
    return sig(x, digits)


#: SI prefixes of a quantity with a unit, largest first (3.28e5 FLOP -> "328 kFLOP").
SI_SCALE = (
    ("E", 1e18),
    ("P", 1e15),
    ("T", 1e12),
    ("G", 1e9),
    ("M", 1e6),
    ("k", 1e3),
    ("", 1.0),
    ("m", 1e-3),
    ("µ", 1e-6),
    ("n", 1e-9),
)


def fmt_si(x: float, unit: str, digits: int = 3) -> str:
    """A quantity with an SI prefix that keeps 1-3 digits before the point, always with its unit
    ("328 kFLOP", "3.35 TB/s", "989 TFLOP/s")."""
    if x != x or math.isinf(x) or x == 0:
        return f"{sig(x, digits)} {unit}"
    prefix, f = _scaled(x, SI_SCALE, digits)
    return f"{sig(x / f, digits)} {prefix}{unit}"


_BYTE_SCALE = (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB), ("B", 1.0))


def fmt_bytes(x_bytes: float, unit: str = "GB", digits: int = 3) -> str:
    """Bytes in decimal GB (default), binary GiB, or ``"auto"``: the decimal prefix that fits (B, KB, MB, GB, TB),
    always labelled."""
    if unit == "GiB":
        return f"{sig(x_bytes / GiB, digits)} GiB"
    if unit == "auto":
        name, f = _scaled(x_bytes, _BYTE_SCALE, digits)
        return f"{sig(x_bytes / f, digits)} {name}"
    return f"{sig(x_bytes / GB, digits)} GB"


#: Seconds per time unit, for the formatters below.
TIME_UNITS = {"µs": US, "ms": MS, "s": 1.0, "min": 60.0, "h": HOUR_S, "days": DAY_S}
#: The unit :func:`fmt_time` picks: the first whose bound [s] the magnitude stays under (1-3 digits before the point).
AUTO_SCALE = ((1e-3, "µs"), (1.0, "ms"), (120.0, "s"), (2 * HOUR_S, "min"), (2 * DAY_S, "h"), (math.inf, "days"))
#: A training run's length: always in days.
DAYS_SCALE = ((math.inf, "days"),)


def fmt_time_in(x_s: float, unit: str, digits: int = 3) -> str:
    """Seconds as a number of ``unit`` (a key of :data:`TIME_UNITS`), ``digits`` significant figures, no label."""
    return sig(x_s / TIME_UNITS[unit], digits)


def fmt_time(
    x_s: float | None, digits: int = 3, scale: tuple[tuple[float, str], ...] = AUTO_SCALE, missing: str = "n/a"
) -> str:
    """Format seconds with a unit from ``scale`` (default: one that keeps 1-3 digits before the point: 30.4 ms,
    27.7 min, 12.3 days); a missing value (None or NaN) reads ``missing``. Zero reads "0 s" on the default scale."""
    if x_s is None or (isinstance(x_s, float) and math.isnan(x_s)):
        return missing
    if math.isinf(x_s):
        return "never" if x_s > 0 else missing
    a = abs(x_s)
    if a == 0 and scale is AUTO_SCALE:
        return "0 s"
    unit = next(u for bound, u in scale if abs(round_sig(x_s / TIME_UNITS[u], digits)) * TIME_UNITS[u] < bound)
    return f"{fmt_time_in(x_s, unit, digits)} {unit}"


def fmt_latency(x_s: float | None) -> str:
    """A latency in words on the one time scale (30.4 ms, 1.64 s, 27.7 min), three significant figures;
    "withheld" when the percentile has too few samples (None)."""
    return fmt_time(x_s, missing="withheld")


def fmt_days(x_s: float) -> str:
    """A run's length in days, three significant figures ("12.3 days")."""
    return fmt_time(x_s, scale=DAYS_SCALE)


def fmt_usd(x: float, digits: int = 3) -> str:
    """Dollars: whole dollars grouped by thousands from $100 up ("$2,218,314"), cents below ("$12.35"), and
    ``digits`` significant figures under a dollar ("$0.0123")."""
    if x != x or math.isinf(x):
        return f"${sig(x)}"
    a = abs(x)
    if a >= 100:
        return f"${x:,.0f}" if x >= 0 else f"-${a:,.0f}"
    if a >= 1:
        return f"${x:,.2f}" if x >= 0 else f"-${a:,.2f}"
    text = sig(a, digits)
    if "." in text and len(text.split(".")[1]) < 2:
        text += "0"  # $0.50, not $0.5
    return f"${text}" if x >= 0 else f"-${text}"


def fmt_pct(frac: float, digits: int = 2) -> str:
    """A share as a percentage: whole percent from 10 % up, else ``digits`` significant figures ("46%", "4.6%",
    "0.16%"); enough to tell two close shares apart when ``digits`` is raised."""
    if frac != frac or math.isinf(frac):
        return f"{sig(frac)}%"
    p = 100 * frac
    if abs(p) >= 10 or p == 0:
        return f"{p:.0f}%"
    return f"{sig(p, digits)}%"


def fmt_value(x: float, unit: str, digits: int = 3) -> str:
    """Format a value by its trace unit (B, s, FLOP, FLOP/s, B/s, tokens/s, ...), always with its unit."""
    if unit == "B":
        if abs(x) < 1e6:
            return f"{int(x):,} B" if float(x).is_integer() else f"{sig(x, digits)} B"
        return fmt_bytes(x, "auto", digits)
    if unit == "s":
        return fmt_time(x, digits)
    if unit in ("FLOP", "FLOP/s", "B/s"):
        return fmt_si(x, unit, digits)
    if unit in ("USD", "$"):
        return fmt_usd(x, digits)
    if unit in ("", "1", "frac"):
        return fmt_num(x, digits)
    if unit == "%":
        return f"{sig(100 * x, digits)} %"
    if unit in ("W", "kWh", "J"):
        return _fmt_energy(x, unit, digits)
    return f"{fmt_num(x, digits)} {unit}"


def _fmt_energy(x: float, unit: str, digits: int) -> str:
    """A power [W] in W, kW or MW; an energy already in kWh in Wh, kWh or MWh; an energy [J] in J, or kWh from a
    tenth of one."""
    if unit == "W":
        return (
            f"{sig(x / 1e6, digits)} MW"
            if abs(x) >= 1e6
            else f"{sig(x / KW, digits)} kW"
            if abs(x) >= KW
            else f"{sig(x, digits)} W"
        )
    if unit == "kWh":  # an energy already in kWh: MWh from 1,000 kWh, Wh under 1 kWh
        return (
            f"{sig(x / 1e3, digits)} MWh"
            if abs(x) >= 1e3
            else f"{sig(x, digits)} kWh"
            if abs(x) >= 1 or x == 0
            else f"{sig(x * 1e3, digits)} Wh"
        )
    return f"{sig(x / KWH_J, digits)} kWh" if abs(x) >= KWH_J / 10 else f"{sig(x, digits)} J"
