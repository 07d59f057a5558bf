"""The compiled event loop (core.serving.sim.compiled) against the Python loop it stands for: the same records to
the byte (every request's times and counts, every time-series point, the counters) over the shapes it takes, the
Python loop for the shapes it does not, the same work-budget stops, and no state shared between runs."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.base import BudgetExceeded, WorkBudget
from core.config import RabitConfig
from core.serving import TIMED_OUT, Layout, Lengths, SimSpec, simulate, simulate_deployment
from tests.simcheck import assert_same

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
L70 = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=4, tp=4, weights="fp8", kv_dtype="fp8")
MOE = RabitConfig(model="mixtral-8x7b", gpu="h100-sxm", gpus_per_node=2, tp=2)
# sliding-window layers: every layer at a 4,096-token window (Mistral 7B); some at 1,024 (Gemma 3); half at 128
# (gpt-oss)
MISTRAL = RabitConfig(model="mistral-7b", gpu="h100-sxm", gpus_per_node=1, tp=1)
GEMMA = RabitConfig(model="gemma-3-12b-it", gpu="h100-sxm", gpus_per_node=1, tp=1)
GPT_OSS = RabitConfig(model="gpt-oss-120b", gpu="h100-sxm", gpus_per_node=4, tp=4)
BASE = SimSpec(
    rate_per_s=20.0,
    num_requests=800,
    input=Lengths(kind="lognormal", mean=1000, spread=0.5),
    output=Lengths(kind="lognormal", mean=200, spread=0.5),
)
#: 512 in / 600 out fixed at 72 req/s on a batch of 32: one H100 serves far fewer, its queue grows without end
SATURATED = BASE.with_(
    rate_per_s=72.0,
    input=Lengths(kind="fixed", mean=512),
    output=Lengths(kind="fixed", mean=600),
    max_batch=32,
    token_budget=8192,
    prefix_caching=False,
    async_scheduling=False,
    timeout_s=30.0,
    seed=47640,
)
ROUTERS = ("least-outstanding", "power-of-two", "round-robin", "prefix-affinity")


def run(cfg, spec, replicas: int, router: str, loop: str = "auto", budget=None):
    """One replica (simulate) or a deployment (simulate_deployment) on the chosen loop."""
    if replicas == 1:
        return simulate(cfg, spec, loop=loop, budget=budget)
    return simulate_deployment(cfg, spec, Layout(replicas=replicas, router=router), loop=loop, budget=budget).result


def assert_compiled_matches_python(cfg, spec, replicas: int, router: str):
    ref = run(cfg, spec, replicas, router, loop="python")
    got = run(cfg, spec, replicas, router)
    assert (ref.loop, got.loop) == ("python", "compiled")
    assert_same(ref, got)
    return ref


CASES = {
    # one replica: the compiled loop is simulate()'s
    "one replica": (L8, BASE, 1, "least-outstanding"),
    # a KV pool that runs out: preemptions, their recompute, with and without the victim's blocks kept cached
    "preemptions, prefix cache": (L8, BASE.with_(kv_pool_tokens=12_000, rate_per_s=30.0), 1, "least-outstanding"),
    "preemptions, no cache": (
        L8,
        BASE.with_(kv_pool_tokens=12_000, rate_per_s=30.0, prefix_caching=False),
        1,
        "least-outstanding",
    ),
    # prompts split over iterations by a small token budget, a batch cap that binds
    "chunked prompts": (L8, BASE.with_(token_budget=512, max_batch=16, rate_per_s=12.0), 1, "least-outstanding"),
    "tensor parallel fp8": (L70, BASE.with_(rate_per_s=6.0), 1, "least-outstanding"),
    "mixture of experts": (MOE, BASE.with_(rate_per_s=10.0), 1, "least-outstanding"),
    "fixed lengths, overload": (
        L8,
        BASE.with_(rate_per_s=60.0, input=Lengths(kind="fixed", mean=2000), output=Lengths(kind="fixed", mean=64)),
        1,
        "least-outstanding",
    ),
    "three replicas, least-outstanding": (L8, BASE.with_(rate_per_s=55.0), 3, "least-outstanding"),
    "three replicas, round-robin": (L8, BASE.with_(rate_per_s=55.0), 3, "round-robin"),
    "five replicas, power-of-two": (L8, BASE.with_(rate_per_s=90.0), 5, "power-of-two"),
    "four replicas preempting": (L8, BASE.with_(rate_per_s=100.0, kv_pool_tokens=12_000), 4, "least-outstanding"),
    # timeouts: requests leave from the waiting queue and from the running batch (their blocks freed), a decode
    # run stops at the first deadline; overloaded, so that many expire
    "timeout, one replica": (L8, BASE.with_(rate_per_s=60.0, timeout_s=4.0), 1, "least-outstanding"),
    "timeout, preempting": (
        L8,
        BASE.with_(rate_per_s=45.0, timeout_s=6.0, kv_pool_tokens=12_000),
        1,
        "least-outstanding",
    ),
    "timeout, three replicas": (L8, BASE.with_(rate_per_s=150.0, timeout_s=3.0), 3, "power-of-two"),
    # a queue of hundreds waiting at a batch cap of 4: the deadline heap outgrows its first array (152 entries)
    "timeout, long queue": (L8, BASE.with_(rate_per_s=30.0, timeout_s=30.0, max_batch=4), 1, "least-outstanding"),
    "timeout none reached": (L8, BASE.with_(timeout_s=600.0), 2, "round-robin"),
    # a saturated replica with long outputs: a decode run is not cut by an arrival while requests wait, so hundreds
    # arrive during one run and are absorbed at its end, each with a deadline and a time-series point in one pass
    # (the arrays grown for the requests in the inboxes before the pass: past a fixed margin they overran the
    # deadline heap, "double free or corruption")
    "timeout, saturated decode runs": (L8, SATURATED, 1, "least-outstanding"),
    "timeout, saturated decode runs, two replicas": (L8, SATURATED.with_(rate_per_s=144.0), 2, "least-outstanding"),
    # a replayed trace of lengths: the draws are its rows, cycled, the arrivals Poisson as ever
    # synchronous scheduling (async_scheduling off): each plan sees every arrival up to its iteration's start
    "sync scheduling, one replica": (L8, BASE.with_(async_scheduling=False), 1, "least-outstanding"),
    "sync scheduling, preempting": (
        L8,
        BASE.with_(async_scheduling=False, rate_per_s=100.0, kv_pool_tokens=12_000),
        4,
        "least-outstanding",
    ),
    "sync scheduling, timeout": (
        L8,
        BASE.with_(async_scheduling=False, rate_per_s=150.0, timeout_s=3.0),
        3,
        "power-of-two",
    ),
    # a shared prompt prefix: the first request of a group on a replica computes it, the later ones find it cached
    # (whole blocks); prefix affinity keeps a group on one replica unless the loads fall out of balance
    "prefix affinity, shared prefix": (
        L8,
        BASE.with_(rate_per_s=55.0, prefix_cache_frac=0.5, prefix_groups=4),
        3,
        "prefix-affinity",
    ),
    "prefix affinity, no shared prefix": (L8, BASE.with_(rate_per_s=55.0), 3, "prefix-affinity"),
    "shared prefix, least-outstanding": (
        L8,
        BASE.with_(rate_per_s=55.0, prefix_cache_frac=0.5, prefix_groups=8),
        3,
        "least-outstanding",
    ),
    "shared prefix, preempting": (
        L8,
        BASE.with_(rate_per_s=100.0, kv_pool_tokens=12_000, prefix_cache_frac=0.7, prefix_groups=3),
        4,
        "prefix-affinity",
    ),
    # 200 requests in flight on one replica, the others idle: out of balance (by 64 and by 1.5x), so prefix
    # affinity sends a group's requests to the least loaded replica instead of its own
    "prefix affinity out of balance": (
        L8,
        BASE.with_(rate_per_s=120.0, prefix_cache_frac=0.3, prefix_groups=1),
        3,
        "prefix-affinity",
    ),
    # reserve admission: the blocks of prompt + max_tokens reserved on admission, never a preemption; a pool
    # small enough that the reservations, not the batch, hold the queue
    "reserve admission": (L8, BASE.with_(admission="reserve"), 1, "least-outstanding"),
    "reserve admission, pool bound": (
        L8,
        BASE.with_(admission="reserve", rate_per_s=30.0, kv_pool_tokens=12_000),
        1,
        "least-outstanding",
    ),
    "reserve admission, timeout, four replicas": (
        L8,
        BASE.with_(admission="reserve", rate_per_s=100.0, kv_pool_tokens=12_000, timeout_s=5.0),
        4,
        "power-of-two",
    ),
    "reserve admission, shared prefix": (
        L8,
        BASE.with_(admission="reserve", rate_per_s=55.0, prefix_cache_frac=0.5, prefix_groups=4),
        3,
        "prefix-affinity",
    ),
    # a closed loop: every user's first request at 0 s, the next a think time after the last one ended (none: at
    # once), up to the request count; with timeouts the ended requests include expired ones
    "closed loop, no think time": (L8, BASE.with_(arrival="closed", users=8), 1, "least-outstanding"),
    "closed loop, three replicas": (L8, BASE.with_(arrival="closed", users=24, think_s=0.5), 3, "least-outstanding"),
    "closed loop, timeout, preempting": (
        L8,
        BASE.with_(arrival="closed", users=40, think_s=0.2, kv_pool_tokens=12_000, timeout_s=5.0),
        3,
        "power-of-two",
    ),
    "closed loop cut by a duration": (
        L8,
        BASE.with_(arrival="closed", users=16, duration_s=20.0),
        2,
        "round-robin",
    ),
    # Poisson arrivals cut by a duration: with no request count, and the first of the two limits to bind
    "duration alone": (L8, BASE.with_(num_requests=None, duration_s=30.0), 1, "least-outstanding"),
    "duration, prefix affinity": (
        L8,
        BASE.with_(num_requests=None, duration_s=20.0, rate_per_s=60.0, prefix_cache_frac=0.5),
        3,
        "prefix-affinity",
    ),
    # prefill priority (vLLM V0): whole prompts first-come first-served up to the token budget while the decoding
    # sequences wait; with none to admit, a decode step, preempting the last admitted until its blocks fit
    "prefill priority": (L8, BASE.with_(policy="prefill_priority"), 1, "least-outstanding"),
    "prefill priority, preempting": (
        L8,
        BASE.with_(policy="prefill_priority", rate_per_s=30.0, kv_pool_tokens=12_000),
        1,
        "least-outstanding",
    ),
    "prefill priority, timeout, four replicas preempting": (
        L8,
        BASE.with_(policy="prefill_priority", rate_per_s=100.0, kv_pool_tokens=12_000, timeout_s=5.0),
        4,
        "power-of-two",
    ),
    "prefill priority, reserve admission": (
        L8,
        BASE.with_(policy="prefill_priority", admission="reserve", rate_per_s=30.0, kv_pool_tokens=12_000),
        2,
        "round-robin",
    ),
    # a prefix hit does not shrink a reservation: admission that counted only the hit and the prompt's blocks
    # reserved past a 500-block pool (509 blocks at 25.6 s on replica 1, a 118-block reservation admitted on 391),
    # which the compiled loop then preempted and the Python loop did not
    "prefill priority, reserve admission, shared prefix": (
        L8,
        BASE.with_(
            policy="prefill_priority",
            admission="reserve",
            rate_per_s=2.0,
            num_requests=300,
            kv_pool_tokens=8000,
            max_batch=4,
            prefix_caching=False,
            async_scheduling=False,
            prefix_cache_frac=0.4,
            prefix_groups=1,
        ),
        2,
        "least-outstanding",
    ),
    "prefill priority, closed loop, shared prefix": (
        L8,
        BASE.with_(policy="prefill_priority", arrival="closed", users=30, prefix_cache_frac=0.5, prefix_groups=4),
        3,
        "prefix-affinity",
    ),
    # sliding-window layers: a sequence's sliding blocks stop growing at the window, and a decode run stops where
    # the first sequence below the window reaches it; 3,900-token prompts with 400 outputs all cross Mistral's 4,096
    "sliding window": (GEMMA, BASE.with_(rate_per_s=8.0), 1, "least-outstanding"),
    "sliding window, every sequence crossing it": (
        MISTRAL,
        BASE.with_(
            rate_per_s=10.0,
            kv_pool_tokens=20_000,
            input=Lengths(kind="fixed", mean=3900),
            output=Lengths(kind="fixed", mean=400),
        ),
        1,
        "least-outstanding",
    ),
    "sliding window, preempting, timeout, three replicas": (
        GPT_OSS,
        BASE.with_(rate_per_s=20.0, kv_pool_tokens=20_000, timeout_s=8.0, input=Lengths(kind="lognormal", mean=3000)),
        3,
        "least-outstanding",
    ),
    "sliding window, prefill priority preempting": (
        MISTRAL,
        BASE.with_(policy="prefill_priority", rate_per_s=30.0, kv_pool_tokens=12_000),
        2,
        "round-robin",
    ),
    # more users at 0 s than one pass's margin (8 x 2 replicas + 4 x a batch of 8 + 64): all routed in one pass, a
    # point and a deadline each (the arrays grown for them before it)
    "closed loop, 400 users at once, batch 8, timeout": (
        L8,
        BASE.with_(arrival="closed", users=400, think_s=0.3, timeout_s=2.0, max_batch=8, kv_pool_tokens=16_000),
        2,
        "round-robin",
    ),
    "replayed trace": (
        L8,
        BASE.with_(trace=tuple((200 + 37 * (k % 29), 20 + 11 * (k % 13)) for k in range(97)), rate_per_s=40.0),
        3,
        "least-outstanding",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_compiled_loop_gives_the_python_loops_records_to_the_byte(name):
    cfg, spec, replicas, router = CASES[name]
    ref = assert_compiled_matches_python(cfg, spec, replicas, router)
    if "preempt" in name:
        assert ref.summary.preemptions > 0  # the case exercises what it names
    if spec.timeout_s is not None and "none reached" not in name:
        assert (ref.status == TIMED_OUT).sum() > 0  # requests expired
    if spec.trace is not None:
        assert set(ref.input_tokens.tolist()) <= {a for a, _ in spec.trace}  # the trace's lengths, replayed
    if spec.duration_s is not None:  # the duration, not the count, ended the issue: 30 s x 20 req/s ~ 600
        assert len(ref.arrival_s) < (spec.num_requests or 10**9) and ref.arrival_s.max() <= spec.duration_s
    if spec.arrival == "closed" and replicas == 1:  # at most `users` requests in the system at once
        assert max(ref.ts_waiting + ref.ts_running) == spec.users
    if spec.admission == "reserve":
        assert ref.summary.preemptions == 0
        assert ref.ts_kv_frac.max() <= 1.0 + 1e-9  # what is reserved never exceeds the pool, prefix hits or not
        if "pool bound" in name:  # the reservations fill the pool: a request waits for blocks, not for a slot
            assert ref.summary.kv_occupancy_max == 1.0 and ref.summary.queue_s.p99 > 0
    if spec.prefix_cache_frac > 0:  # the prefix hits move the run (less prefill work)
        plain = run(cfg, spec.with_(prefix_cache_frac=0.0), replicas, router, loop="python")
        assert ref.summary.prefill_time_share < plain.summary.prefill_time_share


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rate=st.floats(2.0, 80.0),
    replicas=st.integers(1, 4),
    router=st.sampled_from(ROUTERS),
    pool=st.sampled_from([None, 8_000, 30_000]),
    budget=st.sampled_from([256, 2048, 8192]),
    batch=st.sampled_from([4, 32, 256]),
    cache=st.booleans(),
    seed=st.integers(0, 3),
    timeout=st.sampled_from([None, None, 1.5, 6.0]),
    asy=st.booleans(),
    prefix=st.sampled_from([0.0, 0.0, 0.4, 0.9]),
    groups=st.sampled_from([1, 5, 64]),
    admission=st.sampled_from(["preempt", "preempt", "reserve"]),
    users=st.sampled_from([0, 0, 4, 40]),
    duration=st.sampled_from([None, None, 8.0]),
    policy=st.sampled_from(["chunked", "chunked", "prefill_priority"]),
    cfg=st.sampled_from([L8, L8, GEMMA, MISTRAL]),
)
def test_any_shape_it_takes_matches_the_python_loop(
    rate,
    replicas,
    router,
    pool,
    budget,
    batch,
    cache,
    seed,
    timeout,
    asy,
    prefix,
    groups,
    admission,
    users,
    duration,
    policy,
    cfg,
):
    spec = BASE.with_(
        rate_per_s=rate,
        num_requests=300,
        kv_pool_tokens=pool,
        token_budget=budget,
        max_batch=batch,
        prefix_caching=cache,
        seed=seed,
        timeout_s=timeout,
        async_scheduling=asy,
        prefix_cache_frac=prefix,
        prefix_groups=groups,
        admission="preempt" if cfg in (GEMMA, MISTRAL) else admission,  # reserve with a window: the Python loop
        arrival="closed" if users else "poisson",
        users=users or 16,
        think_s=1.0 / rate,
        duration_s=duration,
        policy=policy,
    )
    ref = run(cfg, spec, replicas, router, loop="python")
    got = run(cfg, spec, replicas, router)
    assert ref.ts_kv_frac.max() <= 1.0 + 1e-9  # the pool holds what is held or reserved
    # prefill priority runs a prompt longer than the token budget alone: the table reaches it (table_tokens)
    assert (got.loop, got.fallback_reason) == ("compiled", None)
    assert_same(ref, got)


def test_each_shape_it_does_not_take_says_why_in_the_result(monkeypatch):
    from core.config import AdapterSet
    from core.serving import FALLBACK_REASONS, PoolLayout

    ok = simulate(L8, BASE)
    assert (ok.loop, ok.fallback_reason) == ("compiled", None)
    dep = simulate_deployment(L8, BASE, Layout(replicas=2, router="round-robin")).result
    assert (dep.loop, dep.fallback_reason) == ("compiled", None)
    sliding = RabitConfig(model="mistral-7b", gpu="h100-sxm", gpus_per_node=1, tp=1)
    pp2 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=2, tp=1, pp=2)
    lora = L8.with_(adapters=AdapterSet(count=10, max_loras=4))
    pools = {"instances": 1, "gpu": "h100-sxm", "tp": 1, "pp": 1}
    disagg = Layout(mode="disaggregated", prefill=PoolLayout(**pools), decode=PoolLayout(**pools))
    one = {  # one replica: (config, spec, timing, loop) -> the reason
        "loop='python' asked for": (L8, BASE, "auto", "python"),
        "iteration timing per step (timing='direct') or over pipeline stages": (L8, BASE, "direct", "auto"),
        "a closed loop without a request count": (
            L8,
            BASE.with_(arrival="closed", users=8, num_requests=None, duration_s=60.0),
            "auto",
            "auto",
        ),
        # 20 req/s for 60 s: 1,200 requests expected, past a limit of 1,000 (5 million unpatched)
        "a duration limit past the compiled loop's arrays": (
            L8,
            BASE.with_(num_requests=None, duration_s=60.0),
            "auto",
            "auto",
        ),
        "reserve admission with sliding-window layers": (sliding, BASE.with_(admission="reserve"), "auto", "auto"),
    }
    monkeypatch.setattr("core.serving.sim.compiled.MAX_DURATION_REQUESTS", 1000)
    for why, (cfg, spec, timing, loop) in one.items():
        r = simulate(cfg, spec, timing=timing, loop=loop)
        assert (r.loop, r.fallback_reason) == ("python", why), why
    monkeypatch.undo()
    assert simulate(pp2, BASE).fallback_reason == "iteration timing per step (timing='direct') or over pipeline stages"
    deps = {  # deployments: (config, spec, layout) -> the reason
        # aggregated replicas serve adapters compiled (tests/test_compiled_lora.py), disaggregated pools do not
        "adapters": (lora, BASE, disagg),
        # disaggregated pools run compiled but for reserve admission on a sliding-window model, as aggregated ones
        "reserve admission with sliding-window layers": (sliding, BASE.with_(admission="reserve"), disagg),
    }
    for why, (cfg, spec, layout) in deps.items():
        r = simulate_deployment(cfg, spec, layout).result
        assert (r.loop, r.fallback_reason) == ("python", why), why
    # the loop's heaps hold at most 4,000,000 replica slots, max_batch + 72 each: 1,096 at a batch of 1,024, so
    # 3,649 replicas fit and 3,650 (4,000,400 slots) do not
    big = simulate_deployment(L8, BASE.with_(max_batch=1024, num_requests=40), Layout(replicas=3650)).result
    assert (big.loop, big.fallback_reason) == ("python", "more replica slots than the compiled loop holds")
    monkeypatch.setattr("core.serving.sim.compiled.numba_available", lambda: False)
    assert simulate(L8, BASE).fallback_reason == "numba not installed"
    monkeypatch.undo()
    monkeypatch.setattr(
        "core.serving.sim.compiled.run", lambda *a, **k: None
    )  # the loop's own refusal: past the timing's table
    r = simulate(L8, BASE)
    assert (r.loop, r.fallback_reason) == ("python", "an iteration past the timing's table")
    # the shapes only the aggregated loop lays out: reached below, asking the gate as a loop that does not lay them
    # out does
    extended = set(FALLBACK_REASONS[4:11])
    assert extended == {
        "a shared prompt prefix (prefix_cache_frac)",
        "router not compiled",
        "arrivals not Poisson",
        "a duration limit",
        "prefill-priority scheduling",
        "reserve admission",
        "sliding-window layers",
    }
    assert set(FALLBACK_REASONS) == set(one) | set(deps) | extended | {
        "numba not installed",
        "more replica slots than the compiled loop holds",
        "an iteration past the timing's table",
        "multi-turn sessions",
    }
    with pytest.raises(ValueError, match="loop must be one of auto, python"):
        simulate(L8, BASE, loop="numba")


def test_a_loop_laying_out_only_the_engines_base_shape_is_told_each_shape_beyond_it(monkeypatch):
    """The gate without ``extended`` (as a loop built on the engine that leaves these shapes asks it) names each
    shape only the aggregated loop lays out; with it (the aggregated loop's callers) none."""
    import sys

    from core.serving import FALLBACK_REASONS

    gate = sys.modules["core.serving.sim.compiled"].fallback_reason

    def base_only(spec, *a, extended=False, **k):  # a caller that lays out the base shape, passing its prefix
        return gate(spec, *a, prefix=(lambda i: i // 2) if spec.prefix_cache_frac > 0 else None, **k)

    shapes = {  # reason -> (config, spec, router)
        "a shared prompt prefix (prefix_cache_frac)": (L8, BASE.with_(prefix_cache_frac=0.5), "round-robin"),
        "router not compiled": (L8, BASE, "prefix-affinity"),
        "arrivals not Poisson": (L8, BASE.with_(arrival="closed", users=8), "round-robin"),
        "a duration limit": (L8, BASE.with_(duration_s=60.0), "round-robin"),
        "prefill-priority scheduling": (L8, BASE.with_(policy="prefill_priority"), "round-robin"),
        "reserve admission": (L8, BASE.with_(admission="reserve"), "round-robin"),
        "sliding-window layers": (MISTRAL, BASE, "round-robin"),
    }
    small = {"num_requests": 40}
    for why, (cfg, spec, router) in shapes.items():
        assert run(cfg, spec.with_(**small), 2, router).loop == "compiled", why
    monkeypatch.setattr("core.serving.sim.compiled.fallback_reason", base_only)
    for why, (cfg, spec, router) in shapes.items():
        r = run(cfg, spec.with_(**small), 2, router)
        assert (r.loop, r.fallback_reason) == ("python", why), why
    assert set(shapes) == set(FALLBACK_REASONS[4:11])


def test_the_work_budget_stops_it_as_it_stops_the_python_loop():
    spec = BASE.with_(num_requests=5000)
    with pytest.raises(BudgetExceeded) as py_stop:
        simulate(L8, spec, loop="python", budget=WorkBudget(max_events=3000))
    with pytest.raises(BudgetExceeded) as c_stop:
        simulate(L8, spec, budget=WorkBudget(max_events=3000))
    assert str(c_stop.value) == str(py_stop.value)  # the same pass, the same message
    with pytest.raises(BudgetExceeded, match="passed 1e\\+01 s of simulated time"):
        simulate(L8, spec, budget=WorkBudget(max_clock_s=10.0))
    ticks: list = []
    simulate(L8, spec.with_(num_requests=20_000), budget=WorkBudget(progress=lambda n, t: ticks.append((n, t))))
    assert ticks and all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(ticks, ticks[1:]))  # progress moves on


def test_sessions_in_threads_share_nothing():
    spec = BASE.with_(rate_per_s=40.0)
    ref = [run(L8, spec.with_(seed=k), 2, "least-outstanding", loop="python") for k in (0, 1)]
    out: list = [None] * 4

    def one(k: int) -> None:
        out[k] = run(L8, spec.with_(seed=k % 2), 2, "least-outstanding")

    threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert out[k].loop == "compiled"
        assert_same(out[k], ref[k % 2])


def test_rabit_simulate_says_which_loop_ran_and_why(capsys):
    from clirun import run as cli

    base = "simulate --model llama-3.1-8b --gpu h100-sxm --gpus 2 --tp 1 --rate 8 --requests 200 --json".split()
    out = cli(capsys, *base)
    assert (out["loop"], out["fallback_reason"]) == ("compiled", None)
    out = cli(capsys, *base, "--kv-admission", "reserve")
    assert (out["loop"], out["fallback_reason"]) == ("compiled", None)
    out = cli(capsys, *base, "--pp", "2")
    assert (out["loop"], out["fallback_reason"]) == (
        "python",
        "iteration timing per step (timing='direct') or over pipeline stages",
    )
