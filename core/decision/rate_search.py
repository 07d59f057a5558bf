"""The highest Poisson arrival rate whose latencies stay under their limits: what MLPerf's Server scenario
publishes, and what a sweep of ``vllm bench serve --request-rate`` finds.

A search over the simulator (:func:`core.serving.simulate`), never a formula: a replica meets ``limits`` (e.g.
p99 TTFT <= 2 s and p99 TPOT <= 200 ms, MLPerf Inference's Llama-2-70B Server bounds in ``mlperf.conf``) at a
rate when the simulated percentiles are at most the limits and the run is not saturated. Latencies grow with
the rate, so the passing rates are an interval from 0 up; the search brackets its end between the closed-form
capacity's rates (:func:`core.serving.max_throughput`) and bisects in log space to a relative width of
``rel_tol``. A percentile the simulator withholds (too few samples) does not pass.

The inter-token limit is on the per-request mean of the gaps after the first token (MLPerf's TPOT,
vLLM's TPOT), the samples behind the simulator's ``itl_s`` percentiles.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from core.config import RabitConfig, SimSpec
from core.serving import Summary, max_throughput, simulate

#: The metrics a limit may be on, and the summary field behind each.
LIMIT_KEYS = ("ttft_s", "itl_s", "e2e_s")


class RateSearch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rate_per_s: float  # the highest passing rate found [requests/s] (0 when none passes)
    output_tokens_per_s: float  # completed output tokens/s at that rate (one replica)
    summary: Summary | None  # the simulation at that rate
    evaluations: int
    limited_by: str  # the limit that fails just above the rate


def meets(s: Summary, limits: tuple[tuple[str, float], ...]) -> str | None:
    """None when the summary meets every limit, else the first one it misses (``ttft_s.p99``)."""
    if s.saturated:
        return "saturation"
    for key, limit in limits:
        metric, _, q = key.partition(".")
        if metric not in LIMIT_KEYS:
            raise ValueError(f"a latency limit on {key!r}: use one of {', '.join(LIMIT_KEYS)} with p50, p95 or p99")
        v = getattr(getattr(s, metric), q or "p99")
        if v is None or v > limit:
            return key
    return None


def max_rate(
    cfg: RabitConfig,
    spec: SimSpec,
    limits: tuple[tuple[str, float], ...],
    *,
    rel_tol: float = 0.03,
    max_evaluations: int = 14,
) -> RateSearch:
    """The highest Poisson rate [requests/s] at which one replica of ``cfg`` serving ``spec`` meets ``limits``."""
    if not limits:
        raise ValueError("a rate search needs at least one latency limit")
    cap = max_throughput(cfg, spec).requests_per_s
    n = 0
    cache: dict[float, tuple[Summary, str | None]] = {}

    def run(rate: float) -> tuple[Summary, str | None]:
        nonlocal n
        if rate not in cache:
            n += 1
            s = simulate(cfg, spec.with_(arrival="poisson", rate_per_s=rate)).summary
            cache[rate] = (s, meets(s, limits))
        return cache[rate]

    lo, hi = cap * 0.05, cap * 1.1
    if run(lo)[1] is not None:  # even a twentieth of capacity misses: go lower, then give up
        lo2 = lo / 20
        if run(lo2)[1] is not None:
            return RateSearch(
                rate_per_s=0.0, output_tokens_per_s=0.0, summary=None, evaluations=n, limited_by=run(lo2)[1] or ""
            )
        lo, hi = lo2, lo
    elif run(hi)[1] is None:  # passes past the closed-form capacity (a short run): that is the answer
        s = run(hi)[0]
        return RateSearch(
            rate_per_s=hi,
            output_tokens_per_s=s.throughput_tokens_per_s,
            summary=s,
            evaluations=n,
            limited_by="capacity",
        )
    while hi / lo > 1 + rel_tol and n < max_evaluations:
        mid = math.sqrt(lo * hi)
        if run(mid)[1] is None:
            lo = mid
        else:
            hi = mid
    s = run(lo)[0]
    return RateSearch(
        rate_per_s=lo,
        output_tokens_per_s=s.throughput_tokens_per_s,
        summary=s,
        evaluations=n,
        limited_by=run(hi)[1] or "",
    )
