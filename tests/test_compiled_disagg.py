"""The disaggregated deployment's compiled loop (core.serving.sim.jit_disagg) against the Python loop it stands for
(core.serving.sim.replicas.ReplicaSet with a prefill pool, KV transfers and a decode pool): the same records to the
byte (every request's times and counts, every time-series point, the counters, each pool instance's records, each
request's KV transfer time) over fixed and generated shapes, and the same work-budget stops."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.base import BudgetExceeded, WorkBudget
from core.config import RabitConfig
from core.serving import FALLBACK_REASONS, Layout, Lengths, PoolLayout, SimSpec, simulate_deployment
from tests.simcheck import assert_same

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
L70 = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=8, tp=4, weights="fp8", kv_dtype="fp8")
# sliding-window layers: every layer at a 4,096-token window (Mistral 7B); some at 1,024 (Gemma 3); half at 128
# (gpt-oss)
MISTRAL = RabitConfig(model="mistral-7b", gpu="h100-sxm", gpus_per_node=1, tp=1)
GEMMA = RabitConfig(model="gemma-3-12b-it", gpu="h100-sxm", gpus_per_node=1, tp=1)
GPT_OSS = RabitConfig(model="gpt-oss-120b", gpu="h100-sxm", gpus_per_node=8, tp=4)
BASE = SimSpec(
    rate_per_s=20.0,
    num_requests=600,
    input=Lengths(kind="lognormal", mean=1000, spread=0.5),
    output=Lengths(kind="lognormal", mean=200, spread=0.5),
)


def layout(p: int = 1, d: int = 1, *, gpu: str = "h100-sxm", dgpu: str | None = None, tp: int = 1, dtp: int | None = None,
           router: str = "least-outstanding", overlap: bool = True) -> Layout:  # fmt: skip
    return Layout(
        mode="disaggregated",
        router=router,
        prefill=PoolLayout(instances=p, gpu=gpu, tp=tp, pp=1),
        decode=PoolLayout(instances=d, gpu=dgpu or gpu, tp=dtp or tp, pp=1),
        overlap=overlap,
    )


def assert_compiled_matches_python(cfg, spec, lay: Layout):
    ref = simulate_deployment(cfg, spec, lay, loop="python")
    got = simulate_deployment(cfg, spec, lay)
    assert (ref.result.loop, ref.result.fallback_reason) == ("python", "loop='python' asked for")
    assert (got.result.loop, got.result.fallback_reason) == ("compiled", None)
    assert_same(ref.result, got.result)  # every array to the byte; busy time, iterations, preemptions, TTFT, E2E
    assert ref.replicas == got.replicas  # each pool instance's requests, utilisation, queue
    assert ref.pools == got.pools
    assert ref.kv_transfer_s == got.kv_transfer_s and ref.kv_transfer_share_of_ttft == got.kv_transfer_share_of_ttft
    return ref


CASES = {
    "1P1D": (L8, BASE, layout()),
    "2P1D, round-robin": (L8, BASE.with_(rate_per_s=30.0), layout(2, 1, router="round-robin")),
    "1P2D, power-of-two": (L8, BASE.with_(rate_per_s=25.0), layout(1, 2, router="power-of-two")),
    "3P2D, least-outstanding": (L8, BASE.with_(rate_per_s=40.0), layout(3, 2)),
    # one node's NVLink (4 + 4 GPUs in a domain of 8) and the inter-node fabric (8 + 8 do not fit one)
    "TP 4 over NVLink": (L70, BASE.with_(rate_per_s=6.0), layout(tp=4)),
    "TP 8 over InfiniBand": (L70.with_(fabric="ib-ndr"), BASE.with_(rate_per_s=6.0), layout(tp=8)),
    "two GPU kinds over Ethernet": (L8.with_(fabric="eth-100g"), BASE, layout(dgpu="h200-sxm")),
    "no layer-by-layer overlap": (L8, BASE, layout(overlap=False)),
    "light load": (L8, BASE.with_(rate_per_s=1.0, num_requests=200), layout()),
    # saturated: the decode pool's KV runs out (preemptions, the transferred KV waiting for room), queues grow
    "saturated, preemptions": (L8, BASE.with_(rate_per_s=60.0, kv_pool_tokens=20_000), layout()),
    "saturated, no prefix cache": (
        L8,
        BASE.with_(rate_per_s=60.0, kv_pool_tokens=20_000, prefix_caching=False),
        layout(2, 1),
    ),
    "timeouts": (L8, BASE.with_(rate_per_s=50.0, timeout_s=4.0, kv_pool_tokens=30_000), layout()),
    # the decode pool saturated by long outputs: the KV of hundreds of requests arrives during one decode run (an
    # arrival does not cut a run while requests wait) and is absorbed at its end, each with a deadline and a
    # time-series point at once (the arrays grown for them before the pass)
    "decode pool saturated, timeouts": (
        L8,
        BASE.with_(
            num_requests=800,
            rate_per_s=72.0,
            input=Lengths(kind="fixed", mean=512),
            output=Lengths(kind="fixed", mean=600),
            max_batch=32,
            token_budget=8192,
            prefix_caching=False,
            async_scheduling=False,
            timeout_s=30.0,
            seed=47640,
        ),
        layout(2, 1),
    ),
    "synchronous scheduling, small budget": (
        L8,
        BASE.with_(async_scheduling=False, token_budget=512, max_batch=16, rate_per_s=15.0),
        layout(1, 2),
    ),
    "fixed lengths": (
        L8,
        BASE.with_(input=Lengths(kind="fixed", mean=2048), output=Lengths(kind="fixed", mean=64), rate_per_s=12.0),
        layout(2, 2, router="round-robin"),
    ),
    # sliding-window layers on both pools: the prefill instances hold a prompt's windowed blocks until its KV has
    # left, the decode instances take it whole and cross their windows as they decode
    "sliding windows (Gemma 3)": (GEMMA, BASE.with_(rate_per_s=8.0), layout()),
    "sliding windows, light load": (
        GEMMA,
        BASE.with_(rate_per_s=1.0, num_requests=200),
        layout(1, 1, router="round-robin"),
    ),
    "sliding windows of 128 (gpt-oss), TP 4": (
        GPT_OSS,
        BASE.with_(rate_per_s=10.0),
        layout(tp=4, router="power-of-two"),
    ),
    "sliding windows, saturated, preemptions": (
        MISTRAL,
        BASE.with_(rate_per_s=60.0, kv_pool_tokens=8_000, output=Lengths(kind="lognormal", mean=600, spread=0.5)),
        layout(2, 2, router="power-of-two"),
    ),
    "sliding windows, 2P2D, preemptions, timeouts": (
        GEMMA,
        BASE.with_(
            rate_per_s=20.0,
            kv_pool_tokens=6_000,
            timeout_s=15.0,
            output=Lengths(kind="lognormal", mean=600, spread=0.5),
        ),
        layout(2, 2, router="round-robin"),
    ),
    # prefill priority: whole prompts first on either pool (a budget above the longest prompt; longer ones run whole,
    # tests/test_timing_table.py)
    "prefill priority": (L8, BASE.with_(policy="prefill_priority", token_budget=8192), layout()),
    "prefill priority, light load": (
        L8,
        BASE.with_(policy="prefill_priority", token_budget=8192, rate_per_s=1.0, num_requests=200),
        layout(1, 1, router="power-of-two"),
    ),
    "prefill priority, saturated, preemptions": (
        L8,
        BASE.with_(policy="prefill_priority", token_budget=8192, rate_per_s=60.0, kv_pool_tokens=20_000),
        layout(2, 2, router="round-robin"),
    ),
    "prefill priority, sliding windows, preemptions": (
        GEMMA,
        BASE.with_(
            policy="prefill_priority",
            token_budget=8192,
            rate_per_s=40.0,
            kv_pool_tokens=6_000,
            output=Lengths(kind="lognormal", mean=600, spread=0.5),
        ),
        layout(2, 2),
    ),
    # reserve admission: each pool reserves a request's prompt and max_tokens (a prefill instance's: one token)
    "reserve admission": (L8, BASE.with_(admission="reserve"), layout()),
    "reserve admission, light load": (
        L8,
        BASE.with_(admission="reserve", rate_per_s=1.0, num_requests=200),
        layout(router="round-robin"),
    ),
    "reserve admission, saturated": (
        L8,
        BASE.with_(admission="reserve", rate_per_s=60.0, kv_pool_tokens=20_000, timeout_s=8.0),
        layout(2, 2, router="power-of-two"),
    ),
    "reserve admission, prefill priority": (
        L8,
        BASE.with_(admission="reserve", policy="prefill_priority", token_budget=8192, rate_per_s=40.0),
        layout(2, 2),
    ),
    # a shared prompt prefix: a prefill instance that served a request's group finds its prefix cached
    "shared prefix": (L8, BASE.with_(prefix_cache_frac=0.5), layout()),
    "shared prefix, light load": (
        L8,
        BASE.with_(prefix_cache_frac=0.7, rate_per_s=1.0, num_requests=200),
        layout(router="power-of-two"),
    ),
    "shared prefix, saturated, preemptions": (
        L8,
        BASE.with_(prefix_cache_frac=0.5, prefix_groups=4, rate_per_s=60.0, kv_pool_tokens=20_000),
        layout(2, 2, router="round-robin"),
    ),
    "shared prefix, prefill priority": (
        L8,
        BASE.with_(prefix_cache_frac=0.6, prefix_groups=3, policy="prefill_priority", token_budget=8192),
        layout(2, 1),
    ),
    # prefix affinity: a group's requests to the prefill instance that took its first (the decode pool's router
    # least-outstanding)
    "prefix affinity": (L8, BASE.with_(rate_per_s=40.0), layout(2, 2, router="prefix-affinity")),
    "prefix affinity, shared prefix": (
        L8,
        BASE.with_(prefix_cache_frac=0.6, rate_per_s=40.0),
        layout(3, 2, router="prefix-affinity"),
    ),
    "prefix affinity, saturated, preemptions": (
        L8,
        BASE.with_(prefix_cache_frac=0.5, prefix_groups=4, rate_per_s=60.0, kv_pool_tokens=20_000),
        layout(2, 2, router="prefix-affinity"),
    ),
    # a closed loop of users: each user's next request a think time after its last one left the decode pool (or was
    # rejected or timed out on either); every user's first at 0 s, routed in one pass
    "closed loop": (L8, BASE.with_(arrival="closed", users=8), layout()),
    "closed loop, think time, 2P2D": (
        L8,
        BASE.with_(arrival="closed", users=32, think_s=1.0),
        layout(2, 2, router="power-of-two"),
    ),
    "closed loop, saturated, preemptions, timeouts": (
        L8,
        BASE.with_(arrival="closed", users=128, think_s=0.5, kv_pool_tokens=20_000, timeout_s=5.0),
        layout(2, 2, router="round-robin"),
    ),
    # more users at 0 s than one pass's margin (8 x 4 instances + 4 x a batch of 8 + 64): the arrays grown for them
    "closed loop, 200 users at once, batch 8, timeouts": (
        L8,
        BASE.with_(arrival="closed", users=200, think_s=0.3, timeout_s=2.0, max_batch=8, kv_pool_tokens=16_000),
        layout(1, 3, router="round-robin"),
    ),
    "closed loop, sliding windows, prefix affinity": (
        GEMMA,
        BASE.with_(arrival="closed", users=24, think_s=0.2),
        layout(2, 2, router="prefix-affinity"),
    ),
    # a duration limit: Poisson arrivals up to it (with a request count or without), or a closed loop's
    "duration limit": (L8, BASE.with_(num_requests=None, duration_s=20.0), layout()),
    "duration limit and a count, 2P2D": (L8, BASE.with_(duration_s=10.0), layout(2, 2)),
    "closed loop, duration limit": (
        L8,
        BASE.with_(arrival="closed", users=16, think_s=0.5, duration_s=15.0),
        layout(2, 1, router="round-robin"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_it_matches_the_python_loop_to_the_byte(name):
    cfg, spec, lay = CASES[name]
    ref = assert_compiled_matches_python(cfg, spec, lay)
    assert ref.kv_path  # the case is what its name says (the path, the load)
    if "NVLink" in name:
        assert ref.kv_path.startswith("NVLink")
    if "InfiniBand" in name or "Ethernet" in name:
        assert "NVLink" not in ref.kv_path
    if "preemptions" in name:
        assert ref.summary.preemptions > 0
    if "timeouts" in name:
        assert ref.summary.timed_out > 0


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 3),
    d=st.integers(1, 3),
    router=st.sampled_from(("least-outstanding", "power-of-two", "round-robin", "prefix-affinity")),
    cfg=st.sampled_from((L8, L8, GEMMA, MISTRAL)),
    rate=st.floats(2.0, 80.0),
    pool=st.sampled_from((None, 12_000, 16_000, 40_000)),
    batch=st.sampled_from((8, 64, 256)),
    budget=st.sampled_from((512, 2048, 8192)),
    cache=st.booleans(),
    overlap=st.booleans(),
    asy=st.booleans(),
    timeout=st.sampled_from((None, 2.0, 10.0)),
    priority=st.booleans(),
    reserve=st.booleans(),
    prefix=st.sampled_from((0.0, 0.0, 0.3, 0.7)),
    groups=st.sampled_from((1, 3, 16)),
    arrivals=st.sampled_from(("poisson", "poisson", "closed", "duration")),
    users=st.sampled_from((1, 4, 32, 200)),
    seed=st.integers(0, 2**16),
)
def test_generated_shapes_match_the_python_loop(p, d, router, cfg, rate, pool, batch, budget, cache, overlap, asy, timeout, priority, reserve, prefix, groups, arrivals, users, seed):  # fmt: skip
    spec = BASE.with_(
        num_requests=250,
        rate_per_s=rate,
        kv_pool_tokens=pool,
        max_batch=batch,
        # prefill priority: a budget above the longest prompt (longer ones run whole: tests/test_timing_table.py)
        token_budget=8192 if priority else budget,
        prefix_caching=cache,
        async_scheduling=asy,
        timeout_s=timeout,
        policy="prefill_priority" if priority else "chunked",
        admission="reserve" if reserve and cfg is L8 else "preempt",  # reserve with a window: the Python loop
        prefix_cache_frac=prefix,
        prefix_groups=groups,
        seed=seed,
    )
    if arrivals == "closed":  # users thinking 0.3 s, up to the count
        spec = spec.with_(arrival="closed", users=users, think_s=0.3)
    elif arrivals == "duration":  # Poisson arrivals up to 8 s, no count
        spec = spec.with_(num_requests=None, duration_s=8.0)
    assert_compiled_matches_python(cfg, spec, layout(p, d, router=router, overlap=overlap))


def test_each_request_is_served_once_and_its_kv_moves_within_its_ttft():
    # conservation over the pools: every request the prefill pool finished reached one decode instance, and each
    # one's KV transfer is part of its TTFT (prefill queue + prefill + transfer + decode queue + last prompt token)
    res = simulate_deployment(L8, BASE.with_(rate_per_s=30.0), layout(2, 3))
    assert res.result.loop == "compiled"
    front = sum(r.requests for r in res.replicas if r.pool == "prefill")
    back = sum(r.requests for r in res.replicas if r.pool == "decode")
    assert front == back == BASE.num_requests == res.summary.completed
    kv = res.kv_transfer_s
    assert kv.n == BASE.num_requests and kv.p50 > 0
    assert 0 < res.kv_transfer_share_of_ttft < 1


def test_the_work_budget_stops_it_as_it_stops_the_python_loop():
    spec = BASE.with_(num_requests=5000, rate_per_s=30.0)
    stops = []
    for loop in ("python", "auto"):
        with pytest.raises(BudgetExceeded) as stop:
            simulate_deployment(L8, spec, layout(), loop=loop, budget=WorkBudget(max_events=3000))
        stops.append(str(stop.value))
    assert stops[0] == stops[1]


def test_shapes_it_does_not_take_say_why():
    from core.config import AdapterSet

    lora = L8.with_(adapters=AdapterSet(count=10, max_loras=4))
    cases = {  # the reason -> (config, spec, layout): adapters (the aggregated loop takes them, this one does not
        # yet) and the engine's own reasons
        "adapters": (lora, BASE, layout()),
        "reserve admission with sliding-window layers": (MISTRAL, BASE.with_(admission="reserve"), layout()),
        "a closed loop without a request count": (
            L8,
            BASE.with_(arrival="closed", users=8, num_requests=None, duration_s=60.0),
            layout(),
        ),
    }
    for why, (cfg, spec, lay) in cases.items():
        r = simulate_deployment(cfg, spec, lay).result
        assert why in FALLBACK_REASONS
        assert (r.loop, r.fallback_reason) == ("python", why), why
