"""The compiled session loop against the Python one (core.serving.sessions.SessionSet): the same seed gives the same
bytes, every per-turn record, time-series point, counter and session figure, over fixed and drawn shapes (pressure
on the pool with evictions and preemptions, bursts, agents, traces, affinity off, one replica and several); and the
result says honestly which loop ran it."""

import random

import pytest

import core.serving.router as router
import core.serving.session_compiled as session_compiled
import core.serving.sim.compiled as compiled
import core.serving.sim.jit_layout as jit_layout
import core.serving.sim.jit_sessions as jit_sessions
from core.config import AdapterSet, Lengths, RabitConfig, Sessions, SessionTurn
from core.serving import ENGINE_SOURCES, FALLBACK_REASONS, SESSION_FALLBACK_REASONS, simulate_sessions

CFG = RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1)
FIELDS = ("arrival_s", "input_tokens", "output_tokens", "status", "admitted_s", "first_token_s", "finish_s")
SERIES = ("ts_s", "ts_waiting", "ts_running", "ts_kv_frac")


def _pair(cfg: RabitConfig, s: Sessions, **kw):
    fast = simulate_sessions(cfg, s, **kw)
    slow = simulate_sessions(cfg, s, loop="python", **kw)
    assert fast.loop == "compiled" and fast.fallback_reason is None, fast.fallback_reason
    assert slow.loop == "python" and slow.fallback_reason == FALLBACK_REASONS[0]  # asked for
    return fast, slow


def _same(fast, slow) -> None:
    a, b = fast.result, slow.result
    for f in FIELDS:
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
    for f in SERIES:
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
    for f in ("session", "turn", "replica", "hit_tokens"):
        assert getattr(fast, f).tobytes() == getattr(slow, f).tobytes(), f
    assert a.summary == b.summary
    p, q = fast.payload(), slow.payload()
    assert p.pop("loop") == "compiled" and q.pop("loop") == "python"
    p.pop("fallback_reason"), q.pop("fallback_reason")
    assert p == q


def _two(n: int) -> RabitConfig:
    return CFG.with_(gpus_per_node=n, workload=CFG.workload.with_(replicas=n))


SHAPES = {
    "defaults, 4 replicas": (_two(4), Sessions(num_sessions=120, rate_per_s=2.0)),
    # a pool of 60,000 tokens for sessions of up to ~8,000: prefixes evicted, running turns preempted
    "tight pool": (
        CFG.with_(workload=CFG.workload.with_(kv_pool_tokens=60_000)),
        Sessions(num_sessions=60, rate_per_s=2.0, gap_s=20.0),
    ),
    "tight pool, 3 replicas, drawn lengths": (
        _two(3).with_(workload=_two(3).workload.with_(kv_pool_tokens=40_000)),
        Sessions(
            num_sessions=90,
            rate_per_s=3.0,
            gap_s=3.0,
            turns=Lengths(kind="uniform", mean=6, spread=0.8),
            new_input=Lengths(kind="lognormal", mean=500, spread=1.0),
        ),
    ),
    "gamma bursts": (_two(2), Sessions(num_sessions=150, rate_per_s=3.0, arrival="gamma", cv=3.0, gap_s=2.0)),
    "agents, fixed gaps": (
        _two(2),
        Sessions(arrival="agents", agents=12, num_sessions=40, turns=Lengths(kind="fixed", mean=4), gap_cv=0.0),
    ),
    "affinity off": (_two(3), Sessions(num_sessions=80, rate_per_s=2.0, affinity=False)),
    "no prefix caching": (
        _two(2).with_(workload=_two(2).workload.with_(prefix_caching=False)),
        Sessions(num_sessions=60, rate_per_s=2.0),
    ),
    "one turn each": (_two(2), Sessions(num_sessions=200, rate_per_s=10.0, turns=Lengths(kind="fixed", mean=1))),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_compiled_session_loop_equals_the_python_loop(name):
    cfg, s = SHAPES[name]
    fast, slow = _pair(cfg, s)
    _same(fast, slow)
    if name.startswith("tight pool"):  # the shape exercises what it says
        assert slow.evicted_prefixes > 0 and slow.recomputed_tokens > 0


def test_traces_timed_and_untimed_and_a_rejected_turn():
    """A replayed trace (recorded starts, then turn gaps), and a turn past the context window that ends its
    session: the rejection is read back in the engine's order."""
    timed = tuple(
        SessionTurn(session=k % 5, start_s=0.7 * k, input_tokens=300 + 40 * k, output_tokens=30 + k) for k in range(25)
    )
    _same(*_pair(_two(2), Sessions(trace=timed)))
    rows = [(100, 20), (200_000, 10), (200_100, 5)]
    gaps = tuple(SessionTurn(session=0, input_tokens=i, output_tokens=o, gap_s=1.0) for i, o in rows)
    fast, slow = _pair(CFG, Sessions(trace=gaps))
    _same(fast, slow)
    assert fast.turn.tolist() == [0, 1] and fast.result.summary.rejected == 1


def test_balance_thresholds_are_the_routers():
    assert (jit_sessions.BALANCE_ABS, jit_sessions.BALANCE_REL) == (
        router.BALANCE_ABS_THRESHOLD,
        router.BALANCE_REL_THRESHOLD,
    )


def test_the_compile_cache_key_covers_the_session_loop():
    assert "jit_sessions.py" in ENGINE_SOURCES


def _w(cfg: RabitConfig, **kw) -> RabitConfig:
    return cfg.with_(workload=cfg.workload.with_(**kw))


GEMMA = RabitConfig(model="gemma-3-12b-it", tp=1, gpus_per_node=1)  # sliding-window layers (5 of each 6)
#: short sessions
SHORT = Sessions(
    num_sessions=60,
    rate_per_s=3.0,
    gap_s=1.0,
    first_input=Lengths(kind="lognormal", mean=400, spread=0.5),
    turns=Lengths(kind="fixed", mean=4),
    new_input=Lengths(kind="lognormal", mean=150),
)
#: The engine's shapes beyond chunked prefill, preempt-and-recompute and full attention, and a request timeout.
#: Reserve admission and sliding windows keep no session prefixes (Engine.keep_cache); a timed-out turn ends its
#: session as a rejected one does.
ENGINE_SHAPES = {
    "timeout, tight pool, 2 replicas": (
        _w(_two(2), timeout_s=12.0, kv_pool_tokens=40_000),
        Sessions(num_sessions=60, rate_per_s=3.0, gap_s=3.0),
    ),
    "timeout, agents, 3 replicas": (
        _w(_two(3), timeout_s=4.0, kv_pool_tokens=30_000),
        Sessions(arrival="agents", agents=10, num_sessions=40, turns=Lengths(kind="fixed", mean=5), gap_s=1.0),
    ),
    "timeout, gamma bursts, affinity off": (
        _w(_two(2), timeout_s=6.0),
        Sessions(num_sessions=120, rate_per_s=6.0, arrival="gamma", cv=3.0, gap_s=1.0, affinity=False),
    ),
    "sliding windows, tight pool, 2 replicas": (
        _w(GEMMA.with_(gpus_per_node=2, workload=GEMMA.workload.with_(replicas=2)), kv_pool_tokens=30_000),
        Sessions(num_sessions=50, rate_per_s=2.0, gap_s=3.0),
    ),
    "sliding windows, timeout, prefill priority": (
        _w(GEMMA, timeout_s=10.0, policy="prefill_priority", kv_pool_tokens=12_000),
        SHORT,
    ),
    "prefill priority, tight pool, 3 replicas": (_w(_two(3), policy="prefill_priority", kv_pool_tokens=12_000), SHORT),
    "reserve admission, small pool": (_w(CFG, admission="reserve", kv_pool_tokens=12_000), SHORT),
    # a timing priced for adapters: the session loop draws none, so no iteration carries one (on either loop)
    "adapters, defaults": (CFG.with_(adapters=AdapterSet(count=4, max_loras=2)), Sessions(num_sessions=60)),
    "adapters, timeout, tight pool, 2 replicas": (
        _w(_two(2).with_(adapters=AdapterSet(count=16, max_loras=4)), kv_pool_tokens=12_000, timeout_s=10.0),
        SHORT,
    ),
    "reserve admission, prefill priority, timeout, 2 replicas": (
        _w(_two(2), admission="reserve", policy="prefill_priority", timeout_s=8.0, kv_pool_tokens=20_000),
        SHORT,
    ),
}


@pytest.mark.parametrize("name", list(ENGINE_SHAPES))
def test_the_engines_shapes_and_timeouts_run_compiled_to_the_byte(name):
    cfg, s = ENGINE_SHAPES[name]
    fast, slow = _pair(cfg, s)
    _same(fast, slow)
    if "timeout" in name:  # the shape exercises what it says
        assert slow.result.summary.timed_out > 0
    if "tight pool" in name:
        assert slow.result.summary.preemptions > 0
    if "reserve" in name or "sliding" in name:  # no session prefixes kept (Engine.keep_cache)
        assert slow.evicted_prefixes == 0 and not slow.hit_tokens.any()


def test_a_timed_out_turn_ends_its_session_in_a_trace():
    """A replayed trace whose second turn times out: the session's later turns never come, on either loop."""
    rows = [(200, 20), (4_000, 4_000), (300, 10)]
    trace = tuple(SessionTurn(session=0, input_tokens=i, output_tokens=o, gap_s=0.5) for i, o in rows)
    trace += tuple(SessionTurn(session=1 + k, start_s=0.3 * k, input_tokens=500, output_tokens=50) for k in range(8))
    fast, slow = _pair(_w(CFG, timeout_s=5.0), Sessions(trace=trace))
    _same(fast, slow)
    assert fast.result.summary.timed_out >= 1 and [k for s, k in zip(fast.session, fast.turn) if s == 0] == [0, 1]


def test_drawn_traces_with_timeouts_windows_priority_and_reserve():
    """Seeded replayed traces (timed or with gaps; sessions in order of first appearance, turns interleaved)."""
    for k in range(8):
        r = random.Random(k)
        timed, ids, rows = k % 2 == 0, {}, []
        for _ in range(r.randint(5, 40)):
            s = ids.setdefault(r.randint(0, 9), len(ids))
            i, o = r.randint(50, 3000), r.randint(1, 400)
            t = {"start_s": r.uniform(0, 30)} if timed else {"gap_s": r.uniform(0, 3)}
            rows.append(SessionTurn(session=s, input_tokens=i, output_tokens=o, **t))
        w: dict = {"timeout_s": (None, 1.0, 5.0)[k % 3], "kv_pool_tokens": r.choice([8_000, 20_000])}
        w["policy"] = ("chunked", "prefill_priority")[k // 2 % 2]
        base = GEMMA if k % 4 == 3 else CFG
        if base is CFG and k % 3 == 1:
            w["admission"] = "reserve"
        cfg = base.with_(gpus_per_node=1 + k % 2, workload=base.workload.with_(replicas=1 + k % 2, **w))
        fast = simulate_sessions(cfg, Sessions(trace=tuple(rows)))
        assert (fast.loop, fast.fallback_reason) == ("compiled", None)
        _same(fast, simulate_sessions(cfg, Sessions(trace=tuple(rows)), loop="python"))


def test_a_trace_that_skips_a_session_number_is_refused():
    """A session of no turns cannot be replayed (its first turn would be the next session's)."""
    rows = tuple(SessionTurn(session=s, input_tokens=100, output_tokens=10) for s in (0, 2, 2))
    with pytest.raises(ValueError, match="no turn of 1"):
        Sessions(trace=rows)


def _drawn(k: int):
    """Drawn shape ``k``: replicas, pool, arrivals, lengths and the engine's shapes, each on or off."""
    r = random.Random(k)
    rep = r.choice([1, 2, 3])
    base = GEMMA if r.random() < 0.3 else CFG
    w: dict = {"replicas": rep, "seed": k, "prefix_caching": r.random() < 0.8}
    w["kv_pool_tokens"] = r.choice([20_000, 40_000, 80_000])
    if r.random() < 0.6:
        w["timeout_s"] = r.choice([2.0, 8.0, 20.0])
    if r.random() < 0.4:
        w["policy"] = "prefill_priority"
    if r.random() < 0.35 and base is CFG:  # reserve admission with sliding windows: the plain run's gate
        w["admission"] = "reserve"
    if r.random() < 0.2:
        base = base.with_(adapters=AdapterSet(count=8, max_loras=4))
    cfg = base.with_(gpus_per_node=rep, workload=base.workload.with_(**w))
    kw: dict = {
        "num_sessions": r.randint(5, 40),
        "rate_per_s": r.choice([0.5, 2.0, 6.0]),
        "gap_s": r.choice([0.5, 3.0]),
        "affinity": r.random() < 0.8,
        "turns": Lengths(kind="uniform", mean=r.randint(1, 6), spread=0.8),
        "new_input": Lengths(kind="lognormal", mean=r.choice([200, 800]), spread=1.0),
    }
    arrival = r.choice(["poisson", "gamma", "agents"])
    if arrival == "gamma":
        kw.update(arrival="gamma", cv=3.0)
    if arrival == "agents":
        kw.update(arrival="agents", agents=r.randint(1, 8))
    return cfg, Sessions(**kw)


def test_drawn_shapes_with_timeouts_windows_priority_and_reserve():
    """Seeded drawn shapes: the compiled loop runs each (whole prompts past the token budget included: the timing
    tabulates them) and equals the Python loop to the byte."""
    for k in range(24):
        cfg, s = _drawn(k)
        fast = simulate_sessions(cfg, s)
        assert (fast.loop, fast.fallback_reason) == ("compiled", None)
        _same(fast, simulate_sessions(cfg, s, loop="python"))


def test_what_the_compiled_loop_leaves_falls_back_and_says_why(monkeypatch):
    """Prefill-priority steps of whole long prompts (past the token budget, their history included) run compiled
    and equal the Python loop; where the loop refuses a run itself, the Python loop takes it, named."""
    cfg, s = _w(CFG, policy="prefill_priority"), Sessions(num_sessions=60, rate_per_s=2.0)
    fast = simulate_sessions(cfg, s)
    assert (fast.loop, fast.fallback_reason) == ("compiled", None)
    _same(fast, simulate_sessions(cfg, s, loop="python"))
    monkeypatch.setattr("core.serving.session_compiled.run", lambda *a, **k: None)
    r = simulate_sessions(cfg, s)
    assert r.loop == "python" and r.fallback_reason == compiled.PAST_TABLE
    assert r.payload()["fallback_reason"] == compiled.PAST_TABLE
    assert SESSION_FALLBACK_REASONS == (session_compiled.CACHE_SLOTS,)


def test_the_turn_heap_counts_every_turn_due_at_an_instant():
    """``s_due`` walks the session heap down to the turns due by ``t``: a hand-built min-heap of 7 entries
    [1, 1, 2, 1, 5, 3, 9] (children of i at 2i+1, 2i+2) holds three due by 1.0, five by 3.0, all seven by 9.0."""
    import numpy as np

    heap = np.array([1.0, 1.0, 2.0, 1.0, 5.0, 3.0, 9.0])
    SG = np.zeros(jit_layout.N_G, dtype=np.int64)
    SG[jit_layout.G_EVN] = heap.size
    stack = np.zeros(heap.size, dtype=np.int64)
    assert [jit_sessions.s_due(SG, heap, t, stack) for t in (0.5, 1.0, 3.0, 9.0)] == [0, 3, 5, 7]
    SG[jit_layout.G_EVN] = 3  # only the heap's first three entries are live
    assert jit_sessions.s_due(SG, heap, 9.0, stack) == 3


def test_many_agents_due_at_one_instant_get_room_in_the_pass_that_routes_them():
    """400 agents whose turns come due together (no think gap, fixed lengths: a batch of 8 ends together and the
    timeout expires whole queues at once) on one replica: one pass routes and absorbs hundreds of turns, past the
    room a pass held before (8 x replicas + 4 x batch + 64); the compiled loop equals the Python loop to the byte."""
    cfg = _w(CFG, max_batch=8, timeout_s=2.0, kv_pool_tokens=200_000)
    s = Sessions(
        arrival="agents",
        agents=400,
        num_sessions=1200,
        gap_s=0.0,
        turns=Lengths(kind="fixed", mean=3),
        first_input=Lengths(kind="fixed", mean=256),
        new_input=Lengths(kind="fixed", mean=64),
        output=Lengths(kind="fixed", mean=32),
    )
    fast = simulate_sessions(cfg, s)
    assert (fast.loop, fast.fallback_reason) == ("compiled", None)
    _same(fast, simulate_sessions(cfg, s, loop="python"))
