"""Validation suite: per-family median |error| against published measurements (``rabit validate``)."""

from __future__ import annotations

import time

from core.decision import TARGET_MEDIAN_ABS_ERROR
from core.decision import run as validate


def run() -> list[tuple[str, float, str, str]]:
    t = time.perf_counter()
    r = validate()
    rows = [
        (
            f"validation {f.family} median |error| ({f.cases} cases)",
            f.median_abs_error * 100,
            "%",
            f"<= {TARGET_MEDIAN_ABS_ERROR:.0%}",
        )
        for f in r.families
    ]
    rows.append(("validation suite wall time", time.perf_counter() - t, "s", "< 180 s"))
    return rows
