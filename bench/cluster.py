"""A deployment behind a router (issue 20 targets): one replica of 100,000 requests in-process under 1 s, 16
replicas with 1,000,000 requests under 10 s, memory per request flat; a disaggregated 1P1D run for scale.

Workload: the serving benchmark's (bench/simulator.py: Poisson, lognormal 1,000 in / 250 out, chunked prefill,
Llama-3.1-8B on one H100), at 20 requests/s per replica (about 75 % of what a replica drains), so 16 replicas
take 320 requests/s behind the default least-outstanding router. Time is wall clock of ``simulate_deployment``
(summary included); memory is the ``tracemalloc`` peak of one run per request.
"""

from __future__ import annotations

import time
import tracemalloc

from bench.simulator import CFG, RATE_PER_S, spec
from core.base import WorkBudget
from core.serving import Layout, PoolLayout, simulate_deployment

LONG = WorkBudget(max_wall_s=3600.0)


def timed(n: int, replicas: int) -> float:
    t0 = time.perf_counter()
    simulate_deployment(CFG, spec(n).with_(rate_per_s=RATE_PER_S * replicas), Layout(replicas=replicas), budget=LONG)
    return time.perf_counter() - t0


def peak_per_request(n: int, replicas: int) -> float:
    tracemalloc.start()
    simulate_deployment(CFG, spec(n).with_(rate_per_s=RATE_PER_S * replicas), Layout(replicas=replicas), budget=LONG)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / n


def run() -> list[tuple[str, float, str, str]]:
    timed(200, 2)  # warm imports and catalogs
    one = min(timed(100_000, 1) for _ in range(2))
    sixteen = timed(1_000_000, 16)
    m_small, m_big = peak_per_request(16_000, 16), peak_per_request(160_000, 16)
    pool = PoolLayout(instances=1, gpu="h100-sxm", tp=1, pp=1)
    t0 = time.perf_counter()
    simulate_deployment(CFG, spec(10_000), Layout(mode="disaggregated", prefill=pool, decode=pool), budget=LONG)
    disagg = time.perf_counter() - t0
    return [
        ("deployment: 1 replica, 100k requests", one, "s", "< 1"),
        ("deployment: 16 replicas, 1M requests (least-outstanding)", sixteen, "s", "< 10"),
        ("deployment memory per request, 16 replicas x 1k / x 10k", m_small, "B", "flat"),
        ("  same, 16 replicas x 10k", m_big, "B", "flat"),
        ("disaggregated 1P1D, 10k requests", disagg, "s", ""),
    ]
