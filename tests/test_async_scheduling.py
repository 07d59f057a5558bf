"""vLLM V1's asynchronous scheduling in the serving simulator's engine, against a timeline worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.config import Draws, Lengths, SimSpec
from core.serving import Engine, Pool


class StepTiming:
    """An iteration of ``T`` new tokens takes 10 ms + 0.1 ms per token past the first, whatever the context."""

    def one(self, T: int, A: float, R: float, S: int | None = None, D: float = 0.0) -> float:
        return 0.010 + 1e-4 * (T - 1)

    def run(self, T: int, A0: float, R0: float, g: float, kmax: int, budget_s: float, D: float = 0.0):
        step = self.one(T, A0, R0)
        k = kmax if budget_s == math.inf else min(kmax, max(1, math.ceil(budget_s / step)))
        return k, k * step


def _two_requests(async_on: bool) -> Engine:
    """Request 0 (100 + 1,000 tokens) at 0 s; request 1 (100 + 10 tokens) at 34.5 ms."""
    spec = SimSpec(
        rate_per_s=1.0, num_requests=2, input=Lengths(kind="fixed", mean=100), output=Lengths(kind="fixed", mean=10)
    ).with_(async_scheduling=async_on)
    draws = Draws(spec, np.random.default_rng(0))
    draws.gaps[:2], draws.inp[:2], draws.out[:2] = [0.0, 0.0345], [100, 100], [1000, 10]
    pool = Pool(blocks=10_000.0, block=16, full_share=1.0, slide_share=0.0, window=0, max_context=1 << 20)
    eng = Engine(spec, StepTiming(), pool, draws)  # type: ignore[arg-type]
    eng.run()
    return eng


@pytest.mark.parametrize("async_on", [True, False])
def test_an_arrival_mid_iteration_waits_for_the_iteration_after_next(async_on):
    # Request 0 finds the engine idle and is planned at once: its 100-token prefill takes 10 + 99 x 0.1 = 19.9 ms,
    # first token at 19.9 ms. It then decodes alone at 10 ms an iteration: [19.9, 29.9], [29.9, 39.9], [39.9, 49.9].
    # Request 1 arrives at 34.5 ms, during the second of them.
    # Synchronous: the plan made at 39.9 ms sees it; prefill (100) + one decode token = 101 tokens: 20.0 ms, first
    #   token at 59.9 ms, TTFT 25.4 ms.
    # Async: iteration [39.9, 49.9] was planned at 29.9 ms, before it came; the plan made at 39.9 ms (for the
    #   iteration from 49.9 ms) admits it: first token at 69.9 ms, TTFT 35.4 ms, one decode step later.
    eng = _two_requests(async_on)
    assert eng.first_s[0] == pytest.approx(0.0199, abs=1e-12)
    first = 0.0699 if async_on else 0.0599
    assert eng.first_s[1] == pytest.approx(first, abs=1e-12)
    assert eng.admit_s[1] == pytest.approx(first - 0.020, abs=1e-12)


def test_async_costs_exactly_one_decode_step_here_and_nothing_on_an_idle_engine():
    on, off = _two_requests(True), _two_requests(False)
    assert on.first_s[0] == off.first_s[0]  # idle: planned at once either way
    assert on.first_s[1] - off.first_s[1] == pytest.approx(0.010, abs=1e-12)
    # request 0 emits its 1,000 tokens either way; the one that joined later finishes later
    assert on.fin_s[1] > off.fin_s[1]
    assert on.status == off.status


def test_rabit_simulate_runs_async_by_default_and_turns_it_off_on_request(capsys):
    # Llama-3.1-8B on one H100 at 2 requests/s: the replica is mostly idle or decoding a few sequences, so
    # an arrival lands mid-iteration often and waits one decode step more with async scheduling on.
    from tests.clirun import run

    argv = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--tp", "1")
    argv += ("--rate", "2", "--requests", "300", "--input", "500", "--output", "100", "--json")
    on, off = run(capsys, *argv), run(capsys, *argv, "--no-async-scheduling")
    assert (on["async_scheduling"], off["async_scheduling"]) == (True, False)
    assert on["ttft_s"]["mean"] > off["ttft_s"]["mean"]
