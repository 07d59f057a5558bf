"""The analysis store: a save (new revision), a list of 200 analyses, an open with runs, and the
calibration of an analysis with 10 attached runs (predictions included), on the embedded SQLite file."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path


def _median_s(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run() -> list[tuple[str, float, str, str]]:
    from core.config import RabitConfig
    from core.decision import calibrate_all, residuals_of
    from core.operations import csv_template, parse_csv
    from store import Store

    with tempfile.TemporaryDirectory() as d:
        s = Store(f"sqlite:///{Path(d) / 'bench.sqlite3'}")
        ids = [s.create(f"analysis {i}", RabitConfig(batch=1 + i % 64)) for i in range(200)]
        aid = ids[0]
        rev = [1]

        def save() -> None:
            rev[0] = s.save(aid, RabitConfig(batch=rev[0] % 64 + 1), expected_revision=rev[0])

        runs = [r for _ in range(5) for r in parse_csv(csv_template())[:2]]
        s.add_runs(aid, runs)
        save_s = _median_s(save, 50)
        list_s = _median_s(lambda: s.list(), 20)
        get_s = _median_s(lambda: s.get(aid), 20)
        a = s.get(aid)
        cal_s = _median_s(lambda: calibrate_all(residuals_of([r.run for r in a.runs]), a.config.gpu), 3)
    return [
        ("store: save a revision (SQLite, WAL, synchronous=FULL), median", save_s * 1e3, "ms", "< 50 ms"),
        ("store: list 200 analyses, median", list_s * 1e3, "ms", "< 50 ms"),
        ("store: open an analysis with 10 runs and its history, median", get_s * 1e3, "ms", "< 50 ms"),
        ("calibration of 10 runs (each predicted on its own config), median", cal_s, "s", "< 5 s"),
    ]
