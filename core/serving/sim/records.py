"""What one simulated replica leaves behind: the request status codes and the plain-array records
(:mod:`core.serving.sim.metrics` turns them into results)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

# request status codes in the records
DONE, REJECTED, TIMED_OUT, UNFINISHED = 0, 1, 2, -1
# what a planned step is: nothing to time, one iteration with prefill work, a run of decode iterations
NONE, MIXED, RUN = 0, 1, 2


@dataclass(frozen=True)
class Records:
    """What one run leaves behind (plain arrays; :mod:`core.serving.sim.metrics` turns them into results)."""

    arrival_s: array
    input_tokens: array
    output_tokens: array
    status: array
    admitted_s: array
    first_token_s: array
    finish_s: array
    preemptions: array
    # time series, one point per scheduler step (or run of decode iterations)
    ts_s: array
    ts_waiting: array
    ts_running: array
    ts_kv_frac: array
    busy_s: float
    prefill_s: float
    iterations: int
    total_preemptions: int
    last_arrival_s: float
