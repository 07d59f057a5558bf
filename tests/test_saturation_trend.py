"""The saturation verdict follows the backlog's trend: a replica offered 1.02-1.10x what it drains is saturated on a
long run (it completes 91-98 % of the arrivals while its queue grows without bound), and over a sweep of loads the
verdict never steps back once the queue grows."""

import pytest

from core.config import RabitConfig
from core.serving import Lengths, SimSpec, simulate

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, input_tokens=1000, output_tokens=250)
#: a replica that queues: at most 16 sequences at once; 20,000 requests are ~2,800 s of arrivals against a stay of a
#: few seconds (about a thousand residence times)
LONG = SimSpec(
    num_requests=20_000,
    max_batch=16,
    token_budget=4096,
    input=Lengths(kind="lognormal", mean=1000, spread=0.5),
    output=Lengths(kind="lognormal", mean=250, spread=0.5),
)
ORDER = {"stable": 0, "too short to tell": 1, "saturated": 2}


@pytest.fixture(scope="module")
def drained_per_s() -> float:
    """What the replica drains when its queue never empties: completions per second at 4x overload (the closed
    form, 8.2 requests/s, is the fluid bound; the batch's lengths and prefills keep the simulated replica below)."""
    s = simulate(L8, LONG.with_(rate_per_s=30.0)).summary
    assert s.saturated
    return s.throughput_requests_per_s


@pytest.mark.parametrize("load", [1.02, 1.05, 1.10])
def test_just_past_capacity_is_saturated_on_a_long_run(drained_per_s, load):
    s = simulate(L8, LONG.with_(rate_per_s=load * drained_per_s)).summary
    assert s.saturation_verdict == "saturated", s.saturation_reason
    # most arrivals are still served: the share of completions alone cannot tell
    assert s.completed / s.requests > 0.9
    assert "Little's law" in s.saturation_reason


def test_the_verdict_is_monotone_over_load(drained_per_s):
    loads = (0.5, 0.8, 0.9, 0.95, 1.02, 1.05, 1.1, 1.3, 2.0)
    verdicts = [simulate(L8, LONG.with_(rate_per_s=f * drained_per_s)).summary.saturation_verdict for f in loads]
    ranks = [ORDER[v] for v in verdicts]
    assert ranks == sorted(ranks), list(zip(loads, verdicts))
    assert verdicts[:3] == ["stable"] * 3 and verdicts[4:] == ["saturated"] * 5, list(zip(loads, verdicts))
