"""From the engine's records to the numbers a serving team signs up to.

Latencies are per completed request [s]:

* ``ttft_s``: first token - arrival (queueing + prefill, including chunks spread over iterations);
* ``itl_s``: mean inter-token latency of a request, (last token - first token) / (output - 1), one
  sample per completed request with at least 2 output tokens (vLLM's TPOT; stalls behind other
  prompts' prefills are inside it);
* ``e2e_s``: last token - arrival;
* ``queue_s``: first admission - arrival.

Percentiles are numpy's linear interpolation. p95 needs at least :data:`MIN_N_P95` samples and p99 at
least :data:`MIN_N_P99`; below that they are withheld (``None``), never extrapolated.

Saturation rule (the queue grows without bound: arrivals exceed what the replica drains). Over the
second half of the arrival period, ``[t_last/2, t_last]``, with ``a`` arrivals, ``c`` completions and
the backlog (requests arrived and not yet ended, from the per-request records) at its start and end,
the run is saturated when

    a >= 10  and  c < 0.9 a  and  (backlog grew by >= 5 % of a  or  timeouts >= 5 % of a).

A closed loop is never saturated: its backlog is bounded by the number of users.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.sim.engine import DONE, REJECTED, TIMED_OUT, Records

MIN_N_P95 = 20
MIN_N_P99 = 100
SAT_MIN_ARRIVALS = 10
SAT_SERVED_FRAC = 0.9
SAT_GROWTH_FRAC = 0.05


class Percentiles(BaseModel):
    """p50 / p95 / p99 of a latency [s] with the sample count; withheld percentiles are ``None``."""

    model_config = ConfigDict(frozen=True)

    p50: float | None
    p95: float | None
    p99: float | None
    n: int
    mean: float | None

    @classmethod
    def of(cls, x: np.ndarray) -> "Percentiles":
        x = np.asarray(x, dtype=float)
        n = int(x.size)
        if n == 0:
            return cls(p50=None, p95=None, p99=None, n=0, mean=None)
        p50, p95, p99 = (float(v) for v in np.percentile(x, [50, 95, 99]))
        return cls(p50=p50, p95=p95 if n >= MIN_N_P95 else None, p99=p99 if n >= MIN_N_P99 else None, n=n,
                   mean=float(x.mean()))


class Summary(BaseModel):
    """The metric summary of one simulation (frozen; ``summary["ttft_s"]`` works like a dict)."""

    model_config = ConfigDict(frozen=True)

    ttft_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    queue_s: Percentiles
    throughput_tokens_per_s: float  # output tokens of completed requests / span
    throughput_requests_per_s: float
    preemptions: int
    rejected: int
    timed_out: int
    saturated: bool
    kv_occupancy_mean: float  # time-average share of the KV pool held (reserved, under reservation)
    prefill_time_share: float  # busy time the prefill tokens add, over busy time
    # extras
    requests: int
    completed: int
    rejection_rate: float
    timeout_rate: float
    gpu_busy_share: float
    mean_in_system: float  # time-average of waiting + running
    kv_occupancy_max: float
    span_s: float  # first arrival to last event
    iterations: int
    arrival_rate_per_s: float  # observed: arrivals / arrival period
    saturation_reason: str

    def __getitem__(self, key: str):
        return getattr(self, key)

    def as_dict(self) -> dict:
        return self.model_dump(mode="json")


def _hold_mean(t: np.ndarray, v: np.ndarray) -> float:
    """Time-average of a sample-and-hold series (each value holds until the next time)."""
    if t.size < 2 or t[-1] <= t[0]:
        return float(v[-1]) if v.size else 0.0
    return float(np.sum(v[:-1] * np.diff(t)) / (t[-1] - t[0]))


def _trapz_mean(t: np.ndarray, v: np.ndarray) -> float:
    if t.size < 2 or t[-1] <= t[0]:
        return float(v[-1]) if v.size else 0.0
    return float(np.sum((v[:-1] + v[1:]) / 2 * np.diff(t)) / (t[-1] - t[0]))


def saturation(rec: Records, closed_loop: bool) -> tuple[bool, str]:
    """Apply the saturation rule of the module docstring; returns (flag, the reason in words)."""
    if closed_loop:
        return False, "closed loop: the backlog is bounded by the number of users"
    arr = np.frombuffer(rec.arrival_s, dtype=float)
    status = np.frombuffer(rec.status, dtype=np.int8)
    fin = np.frombuffer(rec.finish_s, dtype=float)
    t1 = rec.last_arrival_s
    t0 = t1 / 2
    a = int(np.count_nonzero((arr >= t0) & (arr <= t1)))
    if a < SAT_MIN_ARRIVALS or t1 <= t0:
        return False, f"too few arrivals ({a}) in the second half of the arrival period to judge"
    done = status == DONE
    c = int(np.count_nonzero(done & (fin >= t0) & (fin <= t1)))
    to = int(np.count_nonzero((status == TIMED_OUT) & (fin >= t0) & (fin <= t1)))
    arr_sorted = np.sort(arr)
    fin_sorted = np.sort(np.where(np.isnan(fin), np.inf, fin))

    def at(t: float) -> int:  # requests arrived and not yet ended (waiting or running), exactly
        return int(np.searchsorted(arr_sorted, t, side="right") - np.searchsorted(fin_sorted, t, side="right"))

    b0, b1 = at(t0), at(t1)
    span = t1 - t0
    words = (f"over the second half of the arrivals: {a / span:.3g} arrivals/s, {c / span:.3g} completions/s; "
             f"backlog {b0:,} -> {b1:,}" + (f"; {to} timed out" if to else ""))
    sat = c < SAT_SERVED_FRAC * a and (b1 - b0 >= SAT_GROWTH_FRAC * a or to >= SAT_GROWTH_FRAC * a)
    return sat, words


def summarise(rec: Records, closed_loop: bool) -> Summary:
    arr = np.frombuffer(rec.arrival_s, dtype=float)
    status = np.frombuffer(rec.status, dtype=np.int8)
    fin = np.frombuffer(rec.finish_s, dtype=float)
    first = np.frombuffer(rec.first_token_s, dtype=float)
    adm = np.frombuffer(rec.admitted_s, dtype=float)
    out = np.frombuffer(rec.output_tokens, dtype=np.int64)
    done = status == DONE
    n = int(arr.size)
    n_done = int(done.sum())
    multi = done & (out >= 2)
    itl = (fin[multi] - first[multi]) / (out[multi] - 1)
    ts = np.frombuffer(rec.ts_s, dtype=float)
    in_sys = np.frombuffer(rec.ts_waiting, dtype=float) + np.frombuffer(rec.ts_running, dtype=float)
    kv = np.frombuffer(rec.ts_kv_frac, dtype=float)
    t_start = float(arr.min()) if n else 0.0
    t_end = float(np.nanmax(fin)) if n and np.isfinite(fin).any() else t_start
    span = max(t_end - t_start, 0.0)
    tok = float(out[done].sum())
    sat, why = saturation(rec, closed_loop)
    period = rec.last_arrival_s - t_start
    return Summary(
        ttft_s=Percentiles.of(first[done] - arr[done]),
        itl_s=Percentiles.of(itl),
        e2e_s=Percentiles.of(fin[done] - arr[done]),
        queue_s=Percentiles.of(adm[done] - arr[done]),
        throughput_tokens_per_s=tok / span if span > 0 else 0.0,
        throughput_requests_per_s=n_done / span if span > 0 else 0.0,
        preemptions=rec.total_preemptions,
        rejected=int(np.count_nonzero(status == REJECTED)),
        timed_out=int(np.count_nonzero(status == TIMED_OUT)),
        saturated=sat,
        kv_occupancy_mean=_trapz_mean(ts, kv),
        prefill_time_share=rec.prefill_s / rec.busy_s if rec.busy_s > 0 else 0.0,
        requests=n,
        completed=n_done,
        rejection_rate=float(np.count_nonzero(status == REJECTED)) / n if n else 0.0,
        timeout_rate=float(np.count_nonzero(status == TIMED_OUT)) / n if n else 0.0,
        gpu_busy_share=rec.busy_s / (ts[-1] - ts[0]) if ts.size > 1 and ts[-1] > ts[0] else 0.0,
        mean_in_system=_hold_mean(ts, in_sys),
        kv_occupancy_max=float(kv.max()) if kv.size else 0.0,
        span_s=span,
        iterations=rec.iterations,
        arrival_rate_per_s=(n - 1) / period if n > 1 and period > 0 else 0.0,
        saturation_reason=why,
    )
