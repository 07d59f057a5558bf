"""Ranges: page reruns with ranges on, a 2,000-request simulation with its ranges, the optimizer's ranges.

Targets (the uncertainty spec): Memory and Speed page reruns < 150 ms median with ranges on; a serving
simulation of 2,000 requests with its ranges < 1.5 s cold on 2 cores (and cached after); ranges for the
recommendation and the runner-up add < 1 s cold to the decision.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")


def _page_reruns(page: str, n: int = 11) -> list[float]:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120).run()
    if page != "memory":
        at.switch_page(f"../pages/{page}.py").run()
    times = []
    for i in range(n):
        widget = at.number_input(key="cfg.batch")
        t = time.perf_counter()
        widget.set_value(40 + i).run()  # a new value each time: a cache miss, ranges recomputed
        times.append(time.perf_counter() - t)
        assert not at.exception
    return times


def _added_ms(n: int = 9) -> tuple[float, float]:
    """What the ranges add to one Memory and one Speed page rerun (a new batch each time: no cache hit)."""
    from core.base import by_tag
    from core.config import RabitConfig
    from core.decision import batch_band, bound_models, memory_spread, speed_spread, training_memory_spread
    from core.serving import default_batches

    mem, speed = [], []
    for i in range(n):
        cfg = RabitConfig(batch=50 + i)
        t = time.perf_counter()
        memory_spread(cfg)
        training_memory_spread(cfg)
        mem.append(time.perf_counter() - t)
        t = time.perf_counter()
        models = bound_models(cfg, by_tag("serving_speed"))  # shared by both, as dashboard.cache does
        speed_spread(cfg, models=models)
        batch_band(cfg, default_batches(cfg, 1024), models=models)
        speed.append(time.perf_counter() - t)
    return statistics.median(mem) * 1e3, statistics.median(speed) * 1e3


def _simulation_s() -> tuple[float, float]:
    import streamlit as st

    from core.config import RabitConfig
    from core.serving import Lengths, SimSpec
    from dashboard import cache

    st.cache_data.clear()
    cfg = RabitConfig(batch=7)  # a config no earlier step has cached
    # the workload this benchmark has always timed (1,024 / 256 fixed lengths; the defaults are the config's now)
    spec = SimSpec(num_requests=2000, rate_per_s=2.0, input=Lengths(mean=1024), output=Lengths(mean=256))
    t = time.perf_counter()
    cache.simulation(cfg, spec)
    cache.simulation_ranges(cfg, spec)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    cache.simulation(cfg, spec)
    cache.simulation_ranges(cfg, spec)
    return cold, time.perf_counter() - t


def _optimizer_s() -> tuple[float, float]:
    from core import decision
    from core.serving import Lengths, SimSpec

    # the goal this benchmark has always timed (1,024 / 256 fixed lengths, 2,000 requests per simulation)
    spec = SimSpec(num_requests=2000, input=Lengths(mean=1024), output=Lengths(mean=256))
    goal = decision.ServingGoal(rate_per_s=10.0, p95_e2e_s=20.0, workload=spec)
    t = time.perf_counter()
    rec = decision.recommend(goal)
    search = time.perf_counter() - t
    t = time.perf_counter()
    decision.recommendation_ranges(rec)
    return search, time.perf_counter() - t


def run() -> list[tuple[str, float, str, str]]:
    added_mem, added_speed = _added_ms()
    mem = _page_reruns("memory")
    speed = _page_reruns("speed")
    sim_cold, sim_cached = _simulation_s()
    search, ranges = _optimizer_s()
    return [
        ("ranges added to a memory page rerun (median)", added_mem, "ms", ""),
        ("ranges added to a speed page rerun (median)", added_speed, "ms", ""),
        ("memory page rerun with ranges (median)", statistics.median(mem) * 1e3, "ms", "< 150 ms"),
        ("speed page rerun with ranges (median)", statistics.median(speed) * 1e3, "ms", "< 150 ms"),
        ("simulation of 2,000 requests with ranges, cold", sim_cold, "s", "< 1.5 s"),
        ("simulation of 2,000 requests with ranges, cached", sim_cached * 1e3, "ms", ""),
        ("optimizer search (no ranges)", search, "s", ""),
        ("optimizer ranges, recommendation + runner-up, cold", ranges, "s", "< 1 s"),
    ]
