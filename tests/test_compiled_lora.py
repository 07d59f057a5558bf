"""Multi-LoRA serving in the compiled event loop (core.serving.sim.jit_lora) against the Python loop: the same
records to the byte (every request's times and counts, every time-series point, the counters) and the same adapter
records field by field (each request's adapter and wait for a slot, every load in order, the storage loads, busy
time x distinct adapters), for one replica and deployments behind every router, adapter-affinity included, few and
many adapters, max_loras 1 to 8, preemption pressure and prefix groups; a hypothesis-drawn set besides."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import AdapterSet, RabitConfig, Sessions
from core.serving import Layout, Lengths, PoolLayout, SimSpec, simulate, simulate_deployment, simulate_sessions
from tests.simcheck import assert_same

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
BASE = SimSpec(
    rate_per_s=20.0,
    num_requests=300,
    input=Lengths(kind="lognormal", mean=1000, spread=0.5),
    output=Lengths(kind="lognormal", mean=200, spread=0.5),
)
#: a KV pool of 12,000 tokens at 30 req/s a replica with an 8 s timeout: preemptions, recompute, timeouts
PRESSED = BASE.with_(kv_pool_tokens=12_000, rate_per_s=30.0, timeout_s=8.0, seed=47640)
ROUTERS = ("round-robin", "least-outstanding", "power-of-two", "prefix-affinity", "adapter-affinity")
#: the adapter records (core.serving.sim.adapters.Adapters.records), arrays compared to the byte
ADAPTER_ARRAYS = ("adapter", "adapter_load_s", "adapter_wait_s")
ADAPTER_COUNTS = ("adapter_storage_loads", "adapter_distinct_s", "adapter_engines")


def lora(count: int, slots: int, **kw) -> RabitConfig:
    return L8.with_(adapters=AdapterSet(count=count, max_loras=slots, **kw))


def records_of(cfg, spec, replicas: int, router: str, loop: str, monkeypatch):
    """The result and the merged records (its adapter fields) of a run on ``loop``."""
    import core.serving.cluster as cluster
    import core.serving.simulation as simulation

    seen = []

    def capture(module):
        real = module.result_of

        def wrapped(spec, rec, *a, **k):
            seen.append(rec)
            return real(spec, rec, *a, **k)

        monkeypatch.setattr(module, "result_of", wrapped)

    capture(simulation)
    capture(cluster)
    if replicas == 1:
        res = simulate(cfg, spec, loop=loop)
    else:
        res = simulate_deployment(cfg, spec, Layout(replicas=replicas, router=router), loop=loop).result
    monkeypatch.undo()
    return res, seen[-1]


def assert_lora_matches(cfg, spec, replicas: int, router: str, monkeypatch):
    ref, rec_ref = records_of(cfg, spec, replicas, router, "python", monkeypatch)
    got, rec_got = records_of(cfg, spec, replicas, router, "auto", monkeypatch)
    assert (ref.loop, got.loop, got.fallback_reason) == ("python", "compiled", None)
    assert_same(ref, got)
    a, b = rec_ref.adapters, rec_got.adapters
    assert a is not None and b is not None
    assert set(a) == set(b)
    for f in ADAPTER_ARRAYS:
        assert a[f].typecode == b[f].typecode, f
        assert a[f].tobytes() == b[f].tobytes(), f
    for f in ADAPTER_COUNTS:
        assert type(a[f]) is type(b[f]) and a[f] == b[f], f
    assert ref.summary.adapters == got.summary.adapters
    return ref, rec_ref


@pytest.mark.parametrize(("replicas", "router"), [(1, "round-robin")] + [(4, r) for r in ROUTERS])
def test_every_router_gives_the_python_loops_records(replicas, router, monkeypatch):
    ref, rec = assert_lora_matches(lora(16, 2, skew=1.0), BASE, replicas, router, monkeypatch)
    assert len(rec.adapters["adapter_load_s"]) > 0  # adapters load and requests wait for slots
    assert ref.summary.adapters.blocked_requests > 0


@pytest.mark.parametrize("slots", range(1, 9))
def test_max_loras_one_to_eight_with_few_and_many_adapters(slots, monkeypatch):
    for count in (3, 64):
        assert_lora_matches(
            lora(count, slots, skew=0.5), BASE.with_(num_requests=200), 4, "adapter-affinity", monkeypatch
        )
    assert_lora_matches(lora(64, slots), BASE.with_(num_requests=200), 1, "round-robin", monkeypatch)


@pytest.mark.parametrize("replicas", [1, 4])
def test_preemption_and_timeouts_under_pressure(replicas, monkeypatch):
    for router in ("adapter-affinity", "least-outstanding") if replicas > 1 else ("round-robin",):
        spec = PRESSED.with_(rate_per_s=30.0 * replicas)
        ref, _ = assert_lora_matches(lora(24, 3, skew=1.2, max_cpu_loras=6), spec, replicas, router, monkeypatch)
        assert ref.summary.preemptions > 0 and ref.summary.timed_out > 0


def test_prefix_groups_with_adapters(monkeypatch):
    spec = BASE.with_(prefix_cache_frac=0.6, prefix_groups=5)
    for router in ("prefix-affinity", "adapter-affinity", "round-robin"):
        assert_lora_matches(lora(12, 2), spec, 4, router, monkeypatch)
    assert_lora_matches(lora(12, 2), spec, 1, "round-robin", monkeypatch)


def test_the_scheduler_shapes_with_adapters(monkeypatch):
    """Prefill priority, reserve admission, synchronous scheduling, a closed loop of users, ranks spread over the
    adapters (loads of several times), a host cache smaller than the set (loads from storage again)."""
    cfg = lora(20, 4, ranks=(8, 16, 64), max_cpu_loras=5, skew=0.8)
    shapes = (
        BASE.with_(policy="prefill_priority"),
        BASE.with_(admission="reserve"),
        BASE.with_(async_scheduling=False),
        BASE.with_(arrival="closed", users=24),
        BASE.with_(adapter_trace=(0, 3, 3, 7, 1, 19, 3, 0)),
        BASE.with_(num_requests=None, duration_s=12.0),
    )
    for spec in shapes:
        for replicas, router in ((1, "round-robin"), (3, "adapter-affinity")):
            assert_lora_matches(cfg, spec, replicas, router, monkeypatch)


def test_the_log_of_loads_grows_as_the_loop_asks(monkeypatch):
    """The loads' log laid out with room for a few: the loop stops to have it grown, and the records stay the
    Python loop's."""
    import core.serving.sim.compiled as compiled

    real = compiled.lay_out

    def small(*a, **k):
        TB, RI, err = real(*a, **k)
        return TB, RI, err[:26].copy() if err.shape[0] > 26 else err

    monkeypatch.setattr(compiled, "lay_out", small)
    spec = PRESSED.with_(rate_per_s=60.0)
    with monkeypatch.context() as m:
        _, rec = assert_lora_matches(lora(64, 1), spec, 2, "adapter-affinity", m)
    assert len(rec.adapters["adapter_load_s"]) > 12  # past the room laid out


def test_what_still_falls_back_says_adapters():
    """Disaggregated pools with adapters keep the Python loop and say why (multi-turn sessions draw no adapters and
    run compiled: tests/test_session_loop.py)."""
    pool = PoolLayout(instances=1, gpu="h100-sxm", tp=1, pp=1)
    layout = Layout(mode="disaggregated", prefill=pool, decode=pool)
    r = simulate_deployment(lora(8, 2), BASE.with_(num_requests=40), layout).result
    assert (r.loop, r.fallback_reason) == ("python", "adapters")
    s = simulate_sessions(lora(8, 2), Sessions(num_sessions=4, rate_per_s=1.0, turns=Lengths(kind="fixed", mean=2)))
    assert (s.loop, s.fallback_reason) == ("compiled", None)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, 40),
    slots=st.integers(1, 8),
    skew=st.sampled_from([0.0, 0.7, 1.5]),
    replicas=st.integers(1, 4),
    router=st.sampled_from(ROUTERS),
    rate=st.sampled_from([5.0, 30.0, 90.0]),
    batch=st.sampled_from([8, 64, 256]),
    timeout=st.sampled_from([None, 10.0]),
    seed=st.integers(0, 2**16),
)
def test_drawn_runs_give_the_python_loops_records(
    count, slots, skew, replicas, router, rate, batch, timeout, seed, monkeypatch
):
    spec = BASE.with_(num_requests=120, rate_per_s=rate, max_batch=batch, timeout_s=timeout, seed=seed)
    assert_lora_matches(lora(count, slots, skew=skew), spec, replicas, router, monkeypatch)
