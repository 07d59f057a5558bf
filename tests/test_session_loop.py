"""The compiled session loop against the Python one (core.serving.sessions.SessionSet): the same seed gives the same
bytes, every per-turn record, time-series point, counter and session figure, over fixed and drawn shapes (pressure
on the pool with evictions and preemptions, bursts, agents, traces, affinity off, one replica and several); and the
result says honestly which loop ran it."""

import pytest

import core.serving.router as router
import core.serving.sim.jit_sessions as jit_sessions
from core.config import Lengths, RabitConfig, Sessions, SessionTurn
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


@pytest.mark.parametrize(
    "cfg, k, words",
    [
        (CFG.with_(workload=CFG.workload.with_(timeout_s=30.0)), 0, "timeout"),
        (CFG.with_(workload=CFG.workload.with_(policy="prefill_priority")), 2, "prefill-priority"),
        (RabitConfig(model="gemma-3-12b-it", tp=1, gpus_per_node=1), 2, "sliding-window"),
    ],
)
def test_shapes_the_session_loop_is_not_held_to_take_the_python_loop_and_say_why(cfg, k, words):
    r = simulate_sessions(cfg, Sessions(num_sessions=6, rate_per_s=1.0, turns=Lengths(kind="fixed", mean=2)))
    why = SESSION_FALLBACK_REASONS[k]
    assert r.loop == "python" and r.fallback_reason == why and words in why
    assert r.payload()["fallback_reason"] == why


@pytest.mark.parametrize(
    ("cfg", "why"),
    [
        (CFG.with_(workload=CFG.workload.with_(policy="prefill_priority")), "prefill-priority scheduling"),
        (CFG.with_(workload=CFG.workload.with_(admission="reserve")), "reserve admission"),
        (RabitConfig(model="mistral-7b", tp=1, gpus_per_node=1), "sliding-window layers"),
    ],
)
def test_shapes_the_plain_loop_takes_but_the_session_loop_does_not_take_the_python_loop(cfg, why):
    # the plain compiled loop lays these out; the session loop's arrays and flags are the chunked, preempting,
    # full-attention engine's, so it leaves them to the Python loop (run compiled, their records differed from the
    # first arrival)
    r = simulate_sessions(cfg, Sessions(num_sessions=10, rate_per_s=1.0))
    assert (r.loop, r.fallback_reason) == ("python", why) and why in FALLBACK_REASONS
