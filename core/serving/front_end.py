"""The serving engine's front end: the API server a request passes before the scheduler queues it, and again when
its first token streams out (assumptions ``api_request_ms`` and ``api_token_us``, :mod:`core.base.assumptions_front_end`).

The event loop times the GPU's iterations; a request's latency as its client measures it adds the front end's time
to its time to first token and to its end-to-end latency. The front end runs in its own process beside the engine,
so the GPU's timeline (its queue, its iterations, the ITL between tokens) does not move, and at the rates one
engine serves (tens of requests per second at a few milliseconds each) it is far from busy: no queue of its own.
"""

from __future__ import annotations

from array import array
from dataclasses import replace

import numpy as np

from core.base import Assumptions
from core.serving.sim.records import Records

__all__ = ["front_end_s", "with_front_end"]


def front_end_s(input_tokens: float | np.ndarray, a: Assumptions) -> float | np.ndarray:
    """Front-end time of a request of ``input_tokens`` prompt tokens [s]:
    ``api_request_ms / 1e3 + api_token_us / 1e6 * input_tokens`` (the whole prompt is tokenized, cached prefix or not).
    """
    return a.api_request_ms * 1e-3 + a.api_token_us * 1e-6 * input_tokens


def with_front_end(rec: Records, a: Assumptions) -> Records:
    """``rec`` with each request's first token and finish as its client sees them (its arrival is the client's send
    time already): both later by :func:`front_end_s` of its prompt; unfinished requests stay NaN."""
    fe = front_end_s(np.frombuffer(rec.input_tokens, dtype=np.int64).astype(float), a)
    first = np.frombuffer(rec.first_token_s, dtype=float) + fe
    fin = np.frombuffer(rec.finish_s, dtype=float) + fe
    return replace(rec, first_token_s=array("d", first.tobytes()), finish_s=array("d", fin.tobytes()))
