"""A host KV tier's iterations: the tabulated form below the tokens HBM holds and its tier term past them, equal to
the step model either way; a simulation with the tier that never reaches it is the one without the tier, to the
byte, and one that reaches it runs on the compiled loop, equal to the Python loop's to the byte."""

import numpy as np
import pytest

from core.config import RabitConfig, resolve
from core.physics import StepModel
from core.serving import ArrayTiming, HostTierTiming, Lengths, SimSpec, simulate, timing_for

# Llama-3.1-8B on one H100 with a 64 GiB host tier
CFG = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, kv_offload_gib=64.0)


def test_the_host_tier_is_tabulated_on_both_sides_of_hbm():
    sm = StepModel.from_deployment(resolve(CFG))
    tm = timing_for(sm, 1, 4096, 32768.0)
    assert isinstance(tm, HostTierTiming)
    ref = ArrayTiming(sm)
    no_tier = timing_for(
        StepModel.from_deployment(resolve(CFG.model_copy(update={"kv_offload_gib": 0.0}))), 1, 4096, 32768.0
    )
    n_h = sm.hbm_kv_tokens
    # one iteration on both sides of N_h: decode of 128 sequences, and a 2,048-token chunk beside them; the table
    # holds the step model to the self-check's 1e-9 (timing.SELF_CHECK_RTOL)
    for T, S in ((128, None), (2048 + 128, 129)):
        for R in (0.2 * n_h, n_h - T, n_h - T + 1.0, 1.5 * n_h):
            A = R + T
            assert tm.one(T, A, R, S) == pytest.approx(ref.one(T, A, R, S), rel=1e-9)
        # below N_h the tier adds nothing: the iteration is the one without the tier, to the bit
        assert tm.one(T, 0.2 * n_h + T, 0.2 * n_h, S) == no_tier.one(T, 0.2 * n_h + T, 0.2 * n_h, S)
    # past N_h the host link binds: 1.5 N_h of cached tokens read over it takes longer than from HBM; by hand, the
    # stage's busy time is max(c0, m0, h (R + T - N_h) - m1 R) + max(c1 A, m1 R), so the tier adds
    # h (R + T - N_h) - m1 R - max(c0, m0) where that is positive
    T, R = 128, 1.5 * n_h
    c0, c1, m0, m1, _ = tm.coeffs(T)
    added = tm.host_h * (R + T - n_h) - m1 * R - max(c0, m0)
    assert added > 0
    assert tm.one(T, R + T, R) - no_tier.one(T, R + T, R) == pytest.approx(added, rel=1e-12)
    # runs of decode iterations: below N_h throughout, and one that crosses it on its way (R grows by g each)
    g = 128.0
    for R0, kmax in ((0.1 * n_h, 500), (n_h - 200 * g, 500)):
        for budget in (np.inf, 0.5):
            k, t = tm.run(128, R0 + g, R0, g, kmax, budget)
            k_ref, t_ref = ref.run(128, R0 + g, R0, g, kmax, budget)
            assert k == k_ref and t == pytest.approx(t_ref, rel=1e-9)


def test_a_tier_never_reached_changes_nothing():
    """20 requests/s of 1,000 + 250 tokens hold about 75,000 tokens at a time, far below what HBM holds
    (~470,000 on an H100 after the weights): the run with the tier is the run without it, on both loops (the
    compiled loop keeps it: no iteration came near the tier)."""
    spec = SimSpec(
        num_requests=1500,
        rate_per_s=20.0,
        input=Lengths(kind="lognormal", mean=1000, spread=0.5),
        output=Lengths(kind="lognormal", mean=250, spread=0.5),
    )
    plain = simulate(CFG.model_copy(update={"kv_offload_gib": 0.0}), spec)
    py, auto = simulate(CFG, spec, loop="python"), simulate(CFG, spec)
    assert py.timing == auto.timing == "tabulated" and (py.loop, auto.loop) == ("python", "compiled")
    for f in ("first_token_s", "finish_s", "admitted_s"):
        assert np.array_equal(getattr(plain, f), getattr(py, f), equal_nan=True), f
    for f in ("first_token_s", "finish_s", "admitted_s", "ts_s", "ts_kv_frac"):  # the pool: HBM and the tier
        assert np.array_equal(getattr(auto, f), getattr(py, f), equal_nan=True), f


def test_a_run_that_reaches_the_tier_runs_compiled_as_the_python_loop_does():
    """Llama-3.1-70B on two H100s holds about 30,000 tokens in HBM; 8,000 + 1,000-token requests at 2/s fill the
    64 GiB tier beyond it: the compiled loop takes the run, and its result is the Python loop's, to the byte."""
    c70 = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=2, tp=2, kv_offload_gib=64.0)
    spec = SimSpec(
        num_requests=300,
        rate_per_s=2.0,
        input=Lengths(kind="fixed", mean=8000),
        output=Lengths(kind="fixed", mean=1000),
    )
    auto, py = simulate(c70, spec), simulate(c70, spec, loop="python")
    assert (auto.loop, py.loop) == ("compiled", "python") and auto.summary.kv_occupancy_max > 0.5
    assert (auto.fallback_reason, py.fallback_reason) == (None, "loop='python' asked for")
    # the run's busiest moments hold more tokens than HBM does: those iterations read over the host link
    n_h = StepModel.from_deployment(resolve(c70)).hbm_kv_tokens
    assert float(np.max(auto.ts_kv_frac)) * auto.kv_pool_tokens > 1.2 * n_h
    for f in ("first_token_s", "finish_s", "admitted_s", "ts_kv_frac"):
        assert np.array_equal(getattr(auto, f), getattr(py, f), equal_nan=True), f
