"""The simulator loops' byte-identity check, shared by the compiled-loop tests: every array of a run's result (each
request's lengths, status, times and preemptions, and the time series) to the byte, and its summary."""

from __future__ import annotations

#: every array of a run's result: each request's lengths, status, times and preemptions, and the time series
ARRAYS = (
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "status",
    "admitted_s",
    "first_token_s",
    "finish_s",
    "preemptions",
    "ts_s",
    "ts_waiting",
    "ts_running",
    "ts_kv_frac",
)


def assert_same(a, b) -> None:
    """Two simulation results equal to the byte: every array of :data:`ARRAYS` and the summary."""
    for f in ARRAYS:
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
    assert a.summary == b.summary  # busy time, prefill share, iterations and preemptions are in it
