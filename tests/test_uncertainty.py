"""Heuristic ranges (core.decision.uncertainty): the combination rule, and invariants over random configs."""

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.base import MOVES, REGISTRY, Assumptions, by_tag
from core.config import RabitConfig, problems
from core.decision import combine, memory_spread, speed_spread, spread


def test_combination_matches_a_hand_computation():
    # base 10; assumption a gives 12 at one bound and 9 at the other, b gives 11, c does not move it.
    #   a: d = ln(12/10) = +0.18232, ln(9/10) = -0.10536 -> d_down = -0.10536, d_up = +0.18232
    #   b: d = ln(11/10) = +0.09531                     -> d_down = 0,        d_up = +0.09531
    #   c: d = 0                                        -> no contribution
    #   low  = 10 exp(-sqrt(0.10536^2))                   = 10 x 0.9     = 9.000
    #   high = 10 exp(+sqrt(0.18232^2 + 0.09531^2))
    #        = 10 exp(sqrt(0.033241 + 0.009084)) = 10 exp(0.20573) = 10 x 1.22842 = 12.284
    r = combine(10.0, {"a": (12.0, 9.0), "b": (11.0,), "c": (10.0, 10.0)})
    assert r.low == pytest.approx(9.000, rel=1e-4)
    assert r.high == pytest.approx(12.284, rel=1e-4)
    assert r.basis == "heuristic"
    assert {c.name for c in r.contributions} == {"a", "b"}
    a = next(c for c in r.contributions if c.name == "a")
    assert a.d_down == pytest.approx(-0.10536, abs=1e-5) and a.d_up == pytest.approx(0.18232, abs=1e-5)


def test_a_number_no_assumption_moves_has_an_empty_range():
    r = combine(5.0, {"a": (5.0, 5.0)})
    assert r.basis == "none" and r.empty and r.contributions == ()
    assert combine(0.0, {"a": (1.0,)}).basis == "none"


def test_every_assumption_has_a_finite_domain_holding_its_bounds_and_a_tag():
    for n, i in REGISTRY.items():
        assert math.isfinite(i.min_value) and math.isfinite(i.max_value), n
        assert i.min_value <= min(i.low, i.base, i.high) <= max(i.low, i.base, i.high) <= i.max_value, n
        assert i.moves and set(i.moves) <= set(MOVES), n
        assert i.domain_reason, n
        assert i.check(i.max_value * 2 + 1) is not None and i.check(i.base) is None
    with pytest.raises(ValueError):
        Assumptions(step_overhead_ms=1e308)  # once hung the server


def test_bounds_all_low_and_all_high():
    lo, hi = Assumptions().at("low"), Assumptions().at("high")
    assert lo.mbu == REGISTRY["mbu"].low and hi.step_overhead_ms == REGISTRY["step_overhead_ms"].high


MODELS = ("llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-32b")
GPUS = ("h100-sxm", "a100-80gb", "mi300x", "b200", "l40s")


@st.composite
def configs(draw):
    tp = draw(st.sampled_from((1, 2, 4, 8)))
    cfg = RabitConfig(
        model=draw(st.sampled_from(MODELS)),
        gpu=draw(st.sampled_from(GPUS)),
        gpus_per_node=tp,
        tp=tp,
        batch=draw(st.integers(1, 256)),
        input_tokens=draw(st.integers(1, 16384)),
        output_tokens=draw(st.integers(1, 4096)),
        weights=draw(st.sampled_from(("bf16", "fp8", "int4"))),
    )
    return cfg


def _usable(cfg):
    return not any(p.blocking for p in problems(cfg))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(configs())
def test_low_le_base_le_high_for_every_ranged_number(cfg):
    assume(_usable(cfg))
    for sp in (speed_spread(cfg), memory_spread(cfg)):
        for key, r in sp.ranges.items():
            if r.basis == "none":
                assert r.low == r.high == r.value or math.isnan(r.value), key
                continue
            assert r.low <= r.value <= r.high, key
            assert all(c.d_down <= 0 <= c.d_up for c in r.contributions), key


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(configs(), st.sampled_from(by_tag("serving_speed")))
def test_pinning_an_assumptions_bounds_to_its_base_removes_its_contribution(cfg, name):
    assume(_usable(cfg))
    v = getattr(cfg.assumptions, name)
    pinned = speed_spread(cfg, bounds={name: (v, v)})
    free = speed_spread(cfg)
    for key, r in pinned.ranges.items():
        assert name not in {c.name for c in r.contributions}, key
        # the other assumptions contribute exactly what they did
        others = {c.name: (c.d_down, c.d_up) for c in free.ranges[key].contributions if c.name != name}
        assert {c.name: (c.d_down, c.d_up) for c in r.contributions} == others


def test_an_estimate_that_does_not_depend_on_an_assumption_gets_zero_from_it():
    cfg = RabitConfig()
    # serving memory does not read the decode bandwidth efficiency or the training MFU
    sp = spread(
        cfg,
        lambda c: {
            "max_sequences": float(__import__("core.physics.memory", fromlist=["x"]).serving_memory(c).max_sequences)
        },
        names=("mbu", "mfu_train", "gpu_mem_util"),
    )
    names = {c.name for c in sp.ranges["max_sequences"].contributions}
    assert "mbu" not in names and "mfu_train" not in names and "gpu_mem_util" in names
    # BF16 weights: the FP8 and FP4 speed-ups cannot move the step time
    speed = speed_spread(cfg)
    for r in speed.ranges.values():
        assert not {"fp8_speedup", "fp4_speedup"} & {c.name for c in r.contributions}


def test_speed_ranges_of_the_worked_example_straddle_the_value():
    sp = speed_spread(RabitConfig())
    for key in ("decode_step_s", "prefill_s", "tokens_per_s"):
        r = sp.ranges[key]
        assert r.low < r.value < r.high, key
    # a larger MBU makes decode faster: the decode step's downward move comes from mbu's high bound
    mbu = next(c for c in sp.ranges["decode_step_s"].contributions if c.name == "mbu")
    # decode at batch 32 x 8k context is memory-bound: t ~ 1/mbu, so ln(0.75/0.85) = -0.125 bounds the move
    assert -0.126 < mbu.d_down < -0.05


def test_bounds_band_pairs_the_two_bound_runs_and_drops_a_point_either_lacks():
    from core.decision import bounds_band

    # x=1: the pessimistic run is higher (3 vs 2); x=2: a bound that moves the number the other way (4 vs 5);
    # x=3: the optimistic run has no value (out of its budget) and x=4 is missing from the pessimistic one
    low = {1: 3.0, 2: 4.0, 3: 7.0}
    high = {1: 2.0, 2: 5.0, 3: None, 4: 1.0}
    assert bounds_band([1, 2, 3, 4], low, high) == ([1, 2], [2.0, 4.0], [3.0, 5.0])


def test_a_bound_that_saturates_the_replica_shows_in_the_latency_range():
    """Llama-3.1-8B on one H100 under the default workload (0.5 requests/s of 4,096 + 4,096 tokens, 1,000 requests):
    0.59 requests/s of capacity at base, 0.434 with kv_read_bw_eff at its low bound (the K/V of 4,096-8,192-token
    contexts read at 0.70 x 0.78 of peak). At that bound the backlog grows by about (0.5 - 0.434) x 2,000 s = 132
    requests over the run, so a late request waits minutes for its first token. The bound runs take up to
    RANGE_SIM_REQUESTS of the requests, enough for that queue to build; 256-request runs (512 s) gave a p95 TTFT range
    of 0.21-0.33 s around 0.24 s."""
    import core.decision.uncertainty as uncertainty
    from core.config import RabitConfig
    from core.decision import simulation_spread
    from core.serving import sim_spec

    cfg = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
    spec = sim_spec(cfg)
    assert spec.num_requests == 1000 and spec.rate_per_s == 0.5 and uncertainty.RANGE_SIM_REQUESTS >= 1000
    sr = simulation_spread(cfg, spec)
    r = sr.ranges["ttft_s.p95"]
    assert r.value < 0.5 and r.high > 60.0
    assert sr.requests_at_bounds == 1000
    assert not sr.saturated and sr.saturated_at["low"]  # the page says the verdict changes inside the range
