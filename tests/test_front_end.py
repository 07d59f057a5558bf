"""The API server's time in a request's latency (core.serving.front_end): added to TTFT and E2E as its client sees
them, and nothing else moves."""

import numpy as np
import pytest

from core.config import RabitConfig, SimSpec
from core.serving import sim_spec, simulate, simulate_deployment


def _pair(cfg: RabitConfig, spec: SimSpec):
    off = cfg.with_(assumptions=cfg.assumptions.with_(api_request_ms=0.0, api_token_us=0.0))
    return simulate(off, spec), simulate(cfg, spec)


def test_a_fixed_prompt_pays_the_hand_computed_front_end_on_ttft_and_e2e_only():
    # A 1,000-token prompt at the base values: 3 ms + 10 us/token x 1,000 tokens = 3 + 10 = 13 ms, on its time to
    # first token and on its end-to-end latency; its queue, its tokens' spacing and the GPU's timeline stay.
    cfg = RabitConfig()
    spec = SimSpec(
        num_requests=300, rate_per_s=4.0, input=dict(kind="fixed", mean=1000), output=dict(kind="fixed", mean=50)
    )
    bare, seen = _pair(cfg, spec)
    assert cfg.assumptions.api_request_ms == 3.0 and cfg.assumptions.api_token_us == 10.0
    np.testing.assert_allclose(seen.samples("ttft_s") - bare.samples("ttft_s"), 0.013, rtol=1e-9)
    np.testing.assert_allclose(seen.samples("e2e_s") - bare.samples("e2e_s"), 0.013, rtol=1e-9)
    np.testing.assert_allclose(seen.samples("itl_s"), bare.samples("itl_s"), rtol=1e-12)
    np.testing.assert_array_equal(seen.samples("queue_s"), bare.samples("queue_s"))
    np.testing.assert_array_equal(seen.ts_s, bare.ts_s)
    assert seen.summary.ttft_s.p95 == pytest.approx(bare.summary.ttft_s.p95 + 0.013, rel=1e-9)


def test_the_front_end_grows_with_each_prompt_and_keeps_the_order_of_the_bounds():
    cfg = RabitConfig()
    spec = SimSpec(num_requests=200, rate_per_s=2.0)  # the default lengths: lognormal prompts
    bare, seen = _pair(cfg, spec)
    extra = seen.first_token_s - bare.first_token_s
    done = ~np.isnan(extra)
    np.testing.assert_allclose(extra[done], 3e-3 + 10e-6 * seen.input_tokens[done], rtol=1e-9)
    low = simulate(cfg.with_(assumptions=cfg.assumptions.at("low")), spec).summary.ttft_s.mean
    high = simulate(cfg.with_(assumptions=cfg.assumptions.at("high")), spec).summary.ttft_s.mean
    assert low > seen.summary.ttft_s.mean > high


def test_a_deployment_and_its_replicas_see_the_same_front_end():
    cfg = RabitConfig()
    base = cfg.with_(workload=cfg.workload.model_copy(update={"rate_per_s": 2.0, "num_requests": 200}))
    off = base.with_(assumptions=base.assumptions.with_(api_request_ms=0.0, api_token_us=0.0))
    a = simulate_deployment(base, sim_spec(base))
    b = simulate_deployment(off, sim_spec(off))
    d = a.result.summary.ttft_s.mean - b.result.summary.ttft_s.mean
    fe = 3e-3 + 10e-6 * a.result.input_tokens[a.result.status == 0].mean()
    assert d == pytest.approx(fe, rel=1e-9)
    assert a.replicas[0].ttft_s.mean - b.replicas[0].ttft_s.mean == pytest.approx(fe, rel=1e-6)
