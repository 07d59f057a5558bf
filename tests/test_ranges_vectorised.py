"""The vectorised bound evaluations (core.decision.uncertainty.speed_spread, batch_band) against the one-at-a-time rule.

The reference is :func:`core.decision.range_rule.spread` with :func:`speed_estimate`: the page's estimate evaluated once
per bound through the scalar path. The vectorised path must give the same numbers (same step-time body, same
operations), and the batch band must follow the same combination rule at every point.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.base import by_tag
from core.config import RabitConfig, problems
from core.decision import (
    at_bound,
    batch_band,
    bound_models,
    combine,
    combine_arrays,
    speed_estimate,
    speed_spread,
    spread,
    stack_models,
    with_assumption,
)
from core.serving import batch_sweep

# dense, MoE, sliding-window and MoE + sliding-window models; pipeline stages; TP across two nodes
CASES = (
    RabitConfig(),
    RabitConfig(model="mixtral-8x7b", gpus_per_node=2, tp=2, batch=7, output_tokens=9000, weights="fp8"),
    RabitConfig(model="mistral-7b", gpus_per_node=1, tp=1, batch=3, input_tokens=100, output_tokens=1),
    RabitConfig(model="gpt-oss-120b", gpus_per_node=4, tp=4, batch=40, input_tokens=20000, output_tokens=300),
    RabitConfig(model="llama-3.1-70b", gpus_per_node=8, tp=4, pp=2, batch=64, prefix_cache_frac=0.5),
    RabitConfig(model="llama-3.1-405b", gpus_per_node=8, nodes=2, tp=16, batch=16, weights="fp8"),
)


def _reference(cfg, bounds=None):
    return spread(cfg, speed_estimate, ("serving_speed",), bounds=bounds)


def _same_spread(a, b):
    assert a.ranges.keys() == b.ranges.keys()
    for k, ra in a.ranges.items():
        rb = b.ranges[k]
        assert rb.basis == ra.basis, k
        assert (rb.value, rb.low, rb.high) == pytest.approx((ra.value, ra.low, ra.high), rel=1e-12, nan_ok=True), k
        assert [c.name for c in rb.contributions] == [c.name for c in ra.contributions], k
        for ca, cb in zip(ra.contributions, rb.contributions):
            assert (cb.d_down, cb.d_up) == pytest.approx((ca.d_down, ca.d_up), abs=1e-12), (k, ca.name)
    assert a.labels("bound") == b.labels("bound") and a.labels("prefill_bound") == b.labels("prefill_bound")
    assert [(n, v) for n, v, _ in a.runs] == [(n, v) for n, v, _ in b.runs]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: f"{c.model}-tp{c.tp}-pp{c.pp}")
def test_vectorised_speed_ranges_equal_one_run_per_bound(cfg):
    _same_spread(_reference(cfg), speed_spread(cfg))


def test_pinned_bounds_and_a_supplied_model_stack_give_the_same_ranges():
    cfg = CASES[1]
    pinned = {"mbu": (cfg.assumptions.mbu, cfg.assumptions.mbu)}
    _same_spread(_reference(cfg, pinned), speed_spread(cfg, pinned))
    assert "mbu" not in {c.name for c in speed_spread(cfg, pinned).ranges["decode_step_s"].contributions}
    models = bound_models(cfg, by_tag("serving_speed"))
    _same_spread(speed_spread(cfg), speed_spread(cfg, models=models))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    model=st.sampled_from(("llama-3.1-8b", "mixtral-8x7b", "mistral-7b", "qwen3-32b")),
    tp=st.sampled_from((1, 2, 4, 8)),
    pp=st.sampled_from((1, 2)),
    batch=st.integers(1, 300),
    input_tokens=st.integers(1, 20000),
    output_tokens=st.integers(1, 6000),
    weights=st.sampled_from(("bf16", "fp8", "int4")),
)
def test_vectorised_equals_reference_over_random_configs(model, tp, pp, batch, input_tokens, output_tokens, weights):
    cfg = RabitConfig(
        model=model,
        gpus_per_node=tp * pp,
        tp=tp,
        pp=pp,
        batch=batch,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        weights=weights,
    )
    assume(not any(p.blocking for p in problems(cfg)))
    _same_spread(_reference(cfg), speed_spread(cfg))


def test_a_stacked_model_evaluates_each_model_it_stands_for():
    cfg = CASES[4]
    base, moved = bound_models(cfg, by_tag("serving_speed"))
    models = [base] + [sm for _, _, sm in moved]
    assert len(moved) >= 10  # mbu, mfu_max, ramp, comm efficiency, base latency, overlap, overhead: both bounds
    s = stack_models(models, 1)
    T, A, R = np.array([64.0, 3000.0]), np.array([2e5, 5e7]), np.array([2e5, 1e6])
    t = s.iteration_s(T, A, R)
    for i, sm in enumerate(models):
        for j in range(2):
            assert t[i, j] == sm.iteration_s(float(T[j]), float(A[j]), float(R[j]))


def test_the_batch_band_follows_the_combination_rule_at_every_point():
    # reference: tokens/s at each batch from the batch sweep with one assumption at one bound, combined by the
    # rule (core.decision.range_rule.combine) point by point. The band takes each bound's log-move on 257 decode steps
    # (the step model's own trapezoid grid), so it matches to well under 0.1 %.
    cfg = RabitConfig(output_tokens=2000)
    batches = (1, 8, 64, 256, 1024)
    band = batch_band(cfg, batches)
    base = batch_sweep(cfg, batches)
    runs = {}
    for n, v, _ in bound_models(cfg, by_tag("serving_speed"))[1]:
        runs.setdefault(n, []).append(batch_sweep(with_assumption(cfg, n, v), batches))
    for i, b in enumerate(batches):
        for key in ("tokens_per_s", "tokens_per_s_per_user"):
            ref = combine(getattr(base[i], key), {n: tuple(getattr(s[i], key) for s in ss) for n, ss in runs.items()})
            lo, mid, hi = band[key][i]
            assert mid == getattr(base[i], key)
            assert lo == pytest.approx(ref.low, rel=1e-3) and hi == pytest.approx(ref.high, rel=1e-3), (b, key)
            assert lo < mid < hi


def test_the_band_is_narrower_than_every_assumption_at_once():
    # every assumption at its pessimistic bound at once moves tokens/s further than the rule's root-sum-square
    cfg = RabitConfig()
    batches = (1, 32, 512)
    band = batch_band(cfg, batches)["tokens_per_s"]
    low = batch_sweep(at_bound(cfg, "low"), batches)
    high = batch_sweep(at_bound(cfg, "high"), batches)
    for (lo, _, hi), pl, ph in zip(band, low, high):
        assert pl.tokens_per_s < lo and hi < ph.tokens_per_s


def test_combine_arrays_matches_combine():
    # two points; assumption a moves the first to 12 and 9 (base 10), b to 11; the second point is not moved
    base = np.array([10.0, 5.0])
    lo, hi = combine_arrays(base, ["a", "a", "b"], np.array([[12.0, 5.0], [9.0, 5.0], [11.0, 5.0]]))
    ref = combine(10.0, {"a": (12.0, 9.0), "b": (11.0,)})
    assert lo[0] == pytest.approx(ref.low, rel=1e-14) and hi[0] == pytest.approx(ref.high, rel=1e-14)
    assert lo[1] == hi[1] == 5.0
    assert math.isclose(hi[0], 12.284, rel_tol=1e-4)  # the hand computation in test_uncertainty


def test_low_is_the_pessimistic_bound_of_every_assumption():
    # the page's "pessimistic" switch and `rabit --bound low` put every assumption at its registry low: that must
    # be the side that makes the system slower or smaller (direction +1: the smaller value; -1: the larger)
    from core.base import REGISTRY

    for n, i in REGISTRY.items():
        lo, hi = (i.low, i.high) if i.direction > 0 else (-i.low, -i.high)
        assert lo <= (i.base if i.direction > 0 else -i.base) <= hi, n
