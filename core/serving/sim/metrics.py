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

Saturation verdict (the queue grows without bound: arrivals exceed what the replica drains): one of
``"saturated"``, ``"stable"`` or ``"too short to tell"``, from the backlog's trend over the second half of the arrival
period, ``[t_last/2, t_last]`` (the first half is the warm-up from an empty replica), with ``a`` arrivals, ``c``
completions, the backlog ``b(t)`` (requests arrived and not yet ended), its time-average ``L`` and its least-squares
line over the window:

* ``a < 30``: too few arrivals for the backlog to say anything (a stable replica's backlog at one instant
  is roughly Poisson with mean ``L``, so with ``L`` about 4 a rise of 0 -> 4 is ordinary noise). When the
  closed-form capacity ``mu`` is known, the offered load decides instead: saturated when even the low end
  of the arrival rate's 3-sigma interval, ``lambda (1 - 3 / sqrt(n))``, exceeds ``mu``; otherwise the
  verdict is "too short to tell", with the offered load against ``mu`` in words.
* a median time in system longer than the window (requests still in service when it ends, however stable the
  replica: the backlog is filling towards ``lambda W``): the same closed-form test as a short run;
* otherwise saturated when timeouts reach ``5 %`` of ``a``, or when the backlog's fitted line rises over the window
  by more than the noise of a stable backlog, ``3 sqrt(2) max(s, sqrt(b_0))``: ``s`` the backlog's wander about its
  line, ``b_0`` the line at the window's start (a stable backlog is roughly Poisson, so the difference of two counts
  has standard deviation ``sqrt(2 b_0)``; near capacity it wanders far more, and ``s`` says by how much). A line
  rising by half the noise or more is not called stable: "too short to tell" (the offered load against the closed
  form decides, as for a short run). A replica offered ``rho`` times what it drains gains ``(1 - 1 / rho) a``
  requests over the window, whatever their share of the arrivals: at 1.02-1.10x it completes 91-98 % of them while
  its queue grows without bound (a share-of-arrivals test, ``c < 0.9 a``, called that stable: 19.8 arrivals/s
  against 18.7 completions/s and a 22 s mean TTFT). The words give the two rates, the backlog's ends and rise, and
  Little's law over the window, ``L`` against ``lambda W`` with ``W`` the mean stay of the window's arrivals.
* a growing backlog counts only when the window spans at least :data:`SAT_MIN_RESIDENCES` residence times
  ``W`` of a request (the replica's closed-form ``W = B / mu``, Little's law at capacity): a replica filling
  up from empty holds ``lambda W`` requests only after about ``W``, and its contexts grow for another ``W``,
  so a shorter window mistakes the fill-up for a growing queue (Llama-3.1-70B on 8 x H100 at 4,096 + 4,096
  tokens: ``W`` = 126 s; 600 requests at 0.9 requests/s give a window of 333 s, and its backlog 52 -> 94
  looked saturated at 68 % of capacity). A shorter window falls back to the offered load, as above.

A closed loop is never saturated: its backlog is bounded by the number of users.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import fmt_time, sig
from core.serving.sim.engine import DONE, REJECTED, TIMED_OUT, Records

MIN_N_P95 = 20
MIN_N_P99 = 100
SAT_MIN_ARRIVALS = 30
SAT_GROWTH_FRAC = 0.05
SAT_NOISE_SIGMAS = 3.0
#: Residence times of a request the verdict window must span before a growing backlog counts (module docstring).
SAT_MIN_RESIDENCES = 4.0
SATURATED, STABLE, TOO_SHORT = "saturated", "stable", "too short to tell"
#: The latency percentiles of a summary (withheld together in saturation: :attr:`Summary.latency_withheld`).
LATENCY_KEYS = ("ttft_s", "itl_s", "e2e_s", "queue_s")
#: Preemptions per admitted request at and above which the run is said to thrash its KV cache.
THRASH_PREEMPTIONS_PER_REQUEST = 1.0
THRASH_REMEDIES = (
    "reserve KV for prompt + maximum output at admission (TensorRT-LLM's GUARANTEED_NO_EVICT)",
    "keep prefix caching on so a preempted request's blocks are reused",
    "a larger TP (more HBM for KV per replica)",
    "FP8 KV (half the bytes per token)",
    "a lower max_num_seqs",
)


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
        return cls(
            p50=p50, p95=p95 if n >= MIN_N_P95 else None, p99=p99 if n >= MIN_N_P99 else None, n=n, mean=float(x.mean())
        )


class AdapterStats(BaseModel):
    """What the adapters did in one run (multi-LoRA serving): loads into GPU slots, their time, and the queueing
    the ``max_loras`` limit caused."""

    model_config = ConfigDict(frozen=True)

    adapters_seen: int  # distinct adapters the requests carried
    loads: int  # adapters brought into a GPU slot
    loads_from_storage: int  # of those, read from storage first (not in the host cache)
    load_s: Percentiles  # time of each load
    load_time_share: float  # the iterations' time spent waiting for loads, over busy time
    loads_per_request: float
    blocked_requests: int  # requests turned away at least once for want of a slot
    wait_s: Percentiles  # how long those waited for a slot
    distinct_mean: float  # distinct adapters in the batch, time-averaged over busy time


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
    saturation_verdict: str = STABLE  # "saturated", "stable" or "too short to tell"
    preemptions_per_request: float = 0.0  # preemptions / requests admitted at least once
    thrash: bool = False  # at least one preemption per request: KV thrash (see thrash_note)
    thrash_note: str = ""
    adapters: AdapterStats | None = None  # multi-LoRA serving; None without adapters

    def __getitem__(self, key: str):
        return getattr(self, key)

    def as_dict(self) -> dict:
        return self.model_dump(mode="json", exclude={"adapters"} if self.adapters is None else None)

    @property
    def latency_withheld(self) -> str | None:
        """Why no latency of this run is reported (None when they are): in saturation the queue grows for as
        long as requests arrive, so a percentile measures how long the simulation ran, not the replica."""
        if not self.saturated:
            return None
        return (
            "saturated: the queue grows without bound, so every latency would only measure how long the simulation ran"
        )

    def reported(self) -> dict:
        """:meth:`as_dict` as a report shows it: in saturation the latency percentiles and means are null and
        ``latency_withheld`` says why (the sample counts stay)."""
        d = self.as_dict()
        if self.saturated:
            for k in LATENCY_KEYS:
                d[k] = {**d[k], "p50": None, "p95": None, "p99": None, "mean": None}
        d["latency_withheld"] = self.latency_withheld
        return d


def _hold_mean(t: np.ndarray, v: np.ndarray) -> float:
    """Time-average of a sample-and-hold series (each value holds until the next time)."""
    if t.size < 2 or t[-1] <= t[0]:
        return float(v[-1]) if v.size else 0.0
    return float(np.sum(v[:-1] * np.diff(t)) / (t[-1] - t[0]))


def _trapz_mean(t: np.ndarray, v: np.ndarray) -> float:
    if t.size < 2 or t[-1] <= t[0]:
        return float(v[-1]) if v.size else 0.0
    return float(np.sum((v[:-1] + v[1:]) / 2 * np.diff(t)) / (t[-1] - t[0]))


def saturation(
    rec: Records, closed_loop: bool, capacity_rps: float | None = None, residence_s: float | None = None
) -> tuple[str, str]:
    """The saturation verdict of the module docstring and its reason in words.

    ``capacity_rps``: the replica's closed-form capacity [requests/s], used when the run is too short for the
    backlog to tell. ``residence_s``: a request's closed-form residence time [s]; a window shorter than
    :data:`SAT_MIN_RESIDENCES` of them does not call a growing backlog saturated.
    """
    if closed_loop:
        return STABLE, "closed loop: the backlog is bounded by the number of users"
    arr = np.frombuffer(rec.arrival_s, dtype=float)
    status = np.frombuffer(rec.status, dtype=np.int8)
    fin = np.frombuffer(rec.finish_s, dtype=float)
    t1 = rec.last_arrival_s
    t0 = t1 / 2
    a = int(np.count_nonzero((arr >= t0) & (arr <= t1)))
    if a < SAT_MIN_ARRIVALS or t1 <= t0:
        return _short_run_verdict(arr, a, capacity_rps)
    done = status == DONE
    timed_out = int(np.count_nonzero(status == TIMED_OUT))  # timeouts are evidence whatever the window
    if timed_out < SAT_GROWTH_FRAC * arr.size and done.any() and float(np.median(fin[done] - arr[done])) > t1 - t0:
        # a request stays longer than the window lasts: the backlog is still filling towards its level (Little's
        # law, L = lambda W) however stable the replica is, so its growth says nothing (many replicas sharing a
        # short run, or long outputs)
        return _short_run_verdict(arr, a, capacity_rps, why="requests stay longer than half the arrival period")
    c = int(np.count_nonzero(done & (fin >= t0) & (fin <= t1)))
    to = int(np.count_nonzero((status == TIMED_OUT) & (fin >= t0) & (fin <= t1)))
    b0, b1, backlog_mean, rise, noise = backlog_trend(arr, fin, t0, t1)
    span = t1 - t0
    # Little's law over the window: L against lambda W, W the mean stay of the window's arrivals (those not ended:
    # to the end of the run)
    win = (arr >= t0) & (arr <= t1)
    stay = np.where(np.isnan(fin), _end_s(fin, t1), fin)[win] - arr[win]
    lam_w = a / span * float(stay.mean())
    words = (
        f"over the second half of the arrivals: {sig(a / span)} arrivals/s, {sig(c / span)} completions/s; "
        f"backlog {b0:,} -> {b1:,}, its line rising {sig(rise)} (noise {sig(noise, 2)}); Little's law: "
        f"L = {sig(backlog_mean)} against lambda W = {sig(lam_w)}" + (f"; {to} timed out" if to else "")
    )
    sat = rise >= noise or to >= SAT_GROWTH_FRAC * a
    if not sat and rise >= noise / 2:  # growing, but within the noise: not "stable" while the queue grows
        return _short_run_verdict(
            arr, a, capacity_rps, why=f"the backlog grew ({words}), but within its noise; a longer run tells"
        )
    if sat and residence_s and span < SAT_MIN_RESIDENCES * residence_s:
        verdict, why = _short_run_verdict(
            arr,
            a,
            capacity_rps,
            why=f"the second half of the arrivals spans {fmt_time(span)}, under {sig(SAT_MIN_RESIDENCES)} "
            f"residence times of a request ({fmt_time(residence_s)} each), so its growing backlog ({b0:,} -> "
            f"{b1:,}) may be the replica filling up",
        )
        return verdict, (f"{words}; {why}" if verdict == SATURATED else why)
    return (SATURATED if sat else STABLE), words


def backlog_trend(arrivals: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> tuple[int, int, float, float, float]:
    """The backlog (arrived and not yet ended; ``ends`` NaN: never) over ``[t0, t1]``: its two ends, its mean, the rise
    of its least-squares line from ``t0`` to ``t1``, and the noise of a stable backlog, ``3 sqrt(2) max(s, sqrt(b_0))``
    (``s`` its wander about the line, ``b_0`` the line at ``t0``; module docstring)."""
    arr_sorted = np.sort(arrivals)
    fin_sorted = np.sort(np.where(np.isnan(ends), np.inf, ends))

    def at(t):  # requests arrived and not yet ended (waiting or running), exactly
        return np.searchsorted(arr_sorted, t, side="right") - np.searchsorted(fin_sorted, t, side="right")

    grid = np.linspace(t0, t1, 257)
    backlog = at(grid).astype(float)
    mean = float(np.mean(backlog))
    x = grid - grid.mean()
    slope = float(np.dot(x, backlog - mean) / np.dot(x, x)) if t1 > t0 else 0.0
    rise = slope * (t1 - t0)
    wander = float(np.std(backlog - mean - slope * x))
    start = max(mean - rise / 2, 1.0)
    noise = SAT_NOISE_SIGMAS * float(np.sqrt(2.0)) * max(wander, float(np.sqrt(start)))
    return int(at(t0)), int(at(t1)), mean, rise, noise


def _end_s(fin: np.ndarray, t_last: float) -> float:
    """The last time anything ended in a run (its arrivals' last time when nothing did)."""
    ended = fin[~np.isnan(fin)]
    return float(ended.max()) if ended.size else t_last


def _short_run_verdict(arr: np.ndarray, a: int, capacity_rps: float | None, why: str = "") -> tuple[str, str]:
    """Too few arrivals (or completions) for the backlog: the offered load against the closed-form capacity, or no
    verdict."""
    n = int(arr.size)
    head = "too short to tell: " + (
        why or f"{a} arrivals in the second half of the arrival period (at least {SAT_MIN_ARRIVALS} needed)"
    )
    period = float(arr.max() - arr.min()) if n > 1 else 0.0
    if capacity_rps is None or n < 2 or period <= 0:
        return TOO_SHORT, head
    lam = (n - 1) / period
    low = lam * max(0.0, 1 - SAT_NOISE_SIGMAS / np.sqrt(n))
    words = f"offered {sig(lam)} requests/s against a closed-form capacity of {sig(capacity_rps)}/s"
    if low > capacity_rps:
        return SATURATED, f"{words} (even its low end, {sig(low)}/s, is above it; {a} arrivals in the second half)"
    return TOO_SHORT, f"{head}; {words}"


def _adapter_stats(rec: Records, n: int) -> AdapterStats:
    a = rec.adapters or {}
    loads = np.asarray(a["adapter_load_s"], dtype=float)
    waits = np.asarray(a["adapter_wait_s"], dtype=float)
    blocked = waits[~np.isnan(waits)]
    busy = rec.busy_s * a.get("adapter_engines", 1)  # a deployment's records hold its replicas' mean busy time
    return AdapterStats(
        adapters_seen=len(set(a["adapter"])),
        loads=int(loads.size),
        loads_from_storage=a["adapter_storage_loads"],
        load_s=Percentiles.of(loads),
        load_time_share=float(loads.sum()) / busy if busy > 0 else 0.0,
        loads_per_request=loads.size / n if n else 0.0,
        blocked_requests=int(blocked.size),
        wait_s=Percentiles.of(blocked),
        distinct_mean=a["adapter_distinct_s"] / busy if busy > 0 else 0.0,
    )


def summarise(
    rec: Records, closed_loop: bool, capacity_rps: float | None = None, residence_s: float | None = None
) -> Summary:
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
    verdict, why = saturation(rec, closed_loop, capacity_rps, residence_s)
    admitted = int(np.count_nonzero(~np.isnan(adm)))
    ppr = rec.total_preemptions / admitted if admitted else 0.0
    prefill_share = rec.prefill_s / rec.busy_s if rec.busy_s > 0 else 0.0
    thrash = ppr >= THRASH_PREEMPTIONS_PER_REQUEST
    thrash_note = (
        f"KV thrash: {sig(ppr)} preemptions per request and {prefill_share:.0%} of busy time in prefill "
        "(much of it recomputation). Remedies: " + "; ".join(THRASH_REMEDIES)
        if thrash
        else ""
    )
    period = rec.last_arrival_s - t_start
    return Summary(
        adapters=_adapter_stats(rec, n) if rec.adapters is not None else None,
        ttft_s=Percentiles.of(first[done] - arr[done]),
        itl_s=Percentiles.of(itl),
        e2e_s=Percentiles.of(fin[done] - arr[done]),
        queue_s=Percentiles.of(adm[done] - arr[done]),
        throughput_tokens_per_s=tok / span if span > 0 else 0.0,
        throughput_requests_per_s=n_done / span if span > 0 else 0.0,
        preemptions=rec.total_preemptions,
        rejected=int(np.count_nonzero(status == REJECTED)),
        timed_out=int(np.count_nonzero(status == TIMED_OUT)),
        saturated=verdict == SATURATED,
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
        saturation_verdict=verdict,
        preemptions_per_request=ppr,
        thrash=thrash,
        thrash_note=thrash_note,
    )
