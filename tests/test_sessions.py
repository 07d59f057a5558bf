"""Multi-turn sessions: a one-turn session is today's request, hits and evictions against hand computations, bursts,
the session trace formats and their errors, and the config's round trips."""

import json

import numpy as np
import pytest

import core.serving.front_end as front_end
import core.serving.sessions as sessions_mod
from core.config import (
    Lengths,
    RabitConfig,
    Sessions,
    SessionTurn,
    from_json,
    from_query,
    parse_session_trace,
    to_query,
)
from core.serving import session_spec, simulate, simulate_deployment, simulate_sessions

CFG = RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1)
FIELDS = ("arrival_s", "input_tokens", "output_tokens", "status", "admitted_s", "first_token_s", "finish_s")


def _same(a, b) -> None:
    for f in FIELDS:
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f


def test_one_turn_sessions_are_todays_requests():
    """Session s's first turn is request s of a plain run (its gap, prompt and output): with one turn each, the
    records are the plain simulator's to the byte, on one replica and on two behind least-outstanding routing."""
    s = Sessions(num_sessions=300, rate_per_s=8.0, turns=Lengths(kind="fixed", mean=1))
    _same(simulate_sessions(CFG, s).result, simulate(CFG, session_spec(CFG, s), loop="python"))
    two = CFG.with_(gpus_per_node=2, workload=CFG.workload.with_(replicas=2))
    s2 = s.with_(rate_per_s=16.0)
    got = simulate_sessions(two, s2)
    assert got.replicas == 2 and got.loop == "compiled"
    _same(got.result, simulate_deployment(two, session_spec(two, s2), loop="python").result)


def _trace(turns: list[tuple[int, int]], gap_s: float = 1.0) -> Sessions:
    rows = tuple(SessionTurn(session=0, input_tokens=i, output_tokens=o, gap_s=gap_s) for i, o in turns)
    return Sessions(trace=rows)


def test_prefix_hit_rate_matches_a_hand_computation():
    """One session, blocks of 16 tokens, a pool far larger than the session:
    turn 1: 100 in, 20 out; its context 100 + 20 - 1 = 119 tokens -> 7 full blocks = 112 tokens cached;
    turn 2: 100 + 20 + 30 = 150 in (cap: all but the last prompt token in whole blocks, 149 // 16 x 16 = 144), finds
    112; its context 150 + 10 - 1 = 159 -> 9 blocks = 144 cached;
    turn 3: 150 + 10 + 40 = 200 in (cap 192), finds 144.
    Hit rate (0 + 112 + 144) / (100 + 150 + 200) = 256 / 450 = 0.5689."""
    r = simulate_sessions(CFG, _trace([(100, 20), (150, 10), (200, 5)]))
    assert r.hit_tokens.tolist() == [0, 112, 144]
    assert r.prefix_hit_rate == pytest.approx(256 / 450, rel=1e-12)
    assert r.evicted_prefixes == 0 and r.sessions_completed == 1 and r.recomputed_tokens == 0
    # the cached tokens are not prefilled again: on the GPU, turn 2's time to first token is below turn 1's though its
    # prompt is 1.5x longer (the API server, which tokenizes every prompt whole, takes 0.5 ms more for it)
    api = front_end.front_end_s(r.result.input_tokens.astype(float), CFG.assumptions)
    ttft = r.result.first_token_s - r.result.arrival_s - api
    assert ttft[1] < ttft[0]
    # without the prefix cache every prompt is computed whole
    off = simulate_sessions(
        CFG.with_(workload=CFG.workload.with_(prefix_caching=False)), _trace([(100, 20), (150, 10)])
    )
    assert off.hit_tokens.tolist() == [0, 0] and off.prefix_hit_rate == 0.0
    assert off.recomputed_tokens == 112  # turn 2 computes turn 1's 7 cached blocks again


def test_eviction_is_least_recently_freed_first_tail_blocks_first():
    """vLLM's free block queue: freed prefixes join the tail, allocations evict from the head, a prefix's last
    blocks before its first (a partly evicted prefix still hits on its first blocks)."""
    c = sessions_mod.PrefixCache()
    c.put(1, 4)  # session 1 freed first
    c.put(2, 3)
    c.put(1, 5)  # session 1's next turn ended: its longer prefix is now the most recent
    c.trim(6)  # 8 cached, 6 free: session 2 (least recent) loses 2 of its 3 blocks from its tail
    assert list(c.blocks.items()) == [(2, 1), (1, 5)] and c.evicted == [] and c.evicted_blocks == 2
    c.trim(4)  # 2 more: session 2's last block goes (evicted whole), then one of session 1's
    assert list(c.blocks.items()) == [(1, 4)] and c.evicted == [2] and c.evicted_blocks == 4
    assert c.take(1) == 4 and c.total == 0 and c.take(1) == 0


def test_a_tight_pool_evicts_and_recomputes():
    """The same sessions on a pool that cannot hold every idle session's context: prefixes are evicted and the
    later turns find fewer tokens cached (so recompute more) than on a pool that holds them all."""
    s = Sessions(num_sessions=60, rate_per_s=2.0, gap_s=20.0)
    big = simulate_sessions(CFG.with_(workload=CFG.workload.with_(kv_pool_tokens=2_000_000)), s)
    small = simulate_sessions(CFG.with_(workload=CFG.workload.with_(kv_pool_tokens=60_000)), s)
    assert big.evicted_prefixes == 0 or big.evicted_tokens < small.evicted_tokens
    assert small.evicted_prefixes > 0
    assert small.prefix_hit_rate < big.prefix_hit_rate
    # what eviction cost is recomputed on the next turn: the tokens found plus those recomputed are the same
    # prefix in both runs (the lengths are the same draws)
    assert small.recomputed_tokens > big.recomputed_tokens
    assert small.hit_tokens.sum() + small.recomputed_tokens == big.hit_tokens.sum() + big.recomputed_tokens
    # every turn of every session ran in both (conservation: turns = sessions x 10)
    assert big.turn.size == small.turn.size == 600


def test_session_affinity_keeps_a_sessions_turns_on_its_replica():
    two = CFG.with_(gpus_per_node=2, workload=CFG.workload.with_(replicas=2))
    s = Sessions(num_sessions=40, rate_per_s=1.0)
    on, off = simulate_sessions(two, s), simulate_sessions(two, s.with_(affinity=False))
    moved_on = sum(len(set(on.replica[on.session == k].tolist())) > 1 for k in range(40))
    assert moved_on == 0  # far from the balance thresholds: never moved
    assert on.prefix_hit_rate > off.prefix_hit_rate


def test_bursty_session_arrivals_raise_p95_ttft_over_poisson():
    """Gamma gaps of CV 3 at the same mean rate bunch sessions together: queues form in the bursts."""
    base = Sessions(num_sessions=400, rate_per_s=3.0, turns=Lengths(kind="fixed", mean=3), gap_s=2.0)
    poisson = simulate_sessions(CFG, base)
    bursty = simulate_sessions(CFG, base.with_(arrival="gamma", cv=3.0))
    assert poisson.ttft_p95_s is not None and bursty.ttft_p95_s is not None
    assert bursty.ttft_p95_s > 1.5 * poisson.ttft_p95_s
    # the same mean rate: session starts span about the same time (400 sessions at 3/s: about 133 s)
    a = [r.result.arrival_s[r.turn == 0] for r in (poisson, bursty)]
    assert a[0].max() == pytest.approx(400 / 3.0, rel=0.15) and a[1].max() == pytest.approx(400 / 3.0, rel=0.5)


def test_agents_keep_n_sessions_in_flight_and_costs_add_up():
    s = Sessions(arrival="agents", agents=8, num_sessions=24, turns=Lengths(kind="fixed", mean=4), gap_s=2.0)
    r = simulate_sessions(CFG, s)
    assert r.sessions_completed == 24
    # never more than 8 sessions open at once
    start = np.array([r.result.arrival_s[(r.session == k) & (r.turn == 0)][0] for k in range(24)])
    end = np.array([r.result.finish_s[(r.session == k) & (r.turn == 3)][0] for k in range(24)])
    for t in np.concatenate([start, end]):
        assert ((start <= t) & (end > t)).sum() <= 8
    # cost per agent-hour x agent-hours = cost per session x sessions = the deployment's cost over the span
    total = r.usd_per_hour * r.span_s / 3600
    assert r.cost_per_agent_hour_usd * r.agent_hours == pytest.approx(total, rel=1e-12)
    assert r.cost_per_session_usd * 24 == pytest.approx(total, rel=1e-12)


def test_runs_are_deterministic():
    s = Sessions(num_sessions=50, rate_per_s=1.0, arrival="gamma", cv=2.0)
    a, b = simulate_sessions(CFG, s), simulate_sessions(CFG, s)
    _same(a.result, b.result)
    assert a.payload() == b.payload()


# --- traces ---------------------------------------------------------------------------------------------------------


def test_csv_trace_with_turns_and_timestamps():
    text = "session_id,turn,timestamp,input_tokens,output_tokens\nb,0,5.0,50,10\na,1,3.0,130,7\na,0,1.0,100,20\n"
    rows = parse_session_trace(text)
    assert [(r.session, r.start_s, r.input_tokens) for r in rows] == [(0, 0.0, 100), (0, 2.0, 130), (1, 4.0, 50)]


def test_otel_spans_name_sessions_by_conversation_or_trace():
    def span(trace, start, end, i=None, o=None, conv=None):
        attrs = []
        if i is not None:
            attrs += [
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(i)}},
                {"key": "gen_ai.usage.output_tokens", "value": {"intValue": str(o)}},
            ]
        if conv:
            attrs.append({"key": "gen_ai.conversation.id", "value": {"stringValue": conv}})
        return {
            "traceId": trace,
            "spanId": "x",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end),
            "attributes": attrs,
        }

    s = 10**9
    doc = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            span("t1", 0, 2 * s, 100, 20),
                            span("t1", 2 * s, 5 * s),  # a tool span: no usage, it is the gap
                            span("t1", 5 * s, 6 * s, 150, 10),
                            span("t2", 1 * s, 3 * s, 80, 8, conv="c9"),
                        ]
                    }
                ]
            }
        ]
    }
    rows = parse_session_trace(json.dumps(doc))
    assert [(r.session, r.start_s, r.gap_s, r.input_tokens) for r in rows] == [
        (0, 0.0, None, 100),
        (0, 5.0, 3.0, 150),
        (1, 1.0, None, 80),
    ]
    # the same spans one per line, attributes as an object (the SDK's console exporter)
    lines = [
        {
            "context": {"trace_id": "t1"},
            "start_time": "2025-01-01T00:00:00Z",
            "end_time": "2025-01-01T00:00:02Z",
            "attributes": {"gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20},
        }
    ]
    assert parse_session_trace("\n".join(json.dumps(x) for x in lines))[0].input_tokens == 100


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("turn,input_tokens,output_tokens\n0,5,5\n", ["no session column", "session_id"]),
        ("session_id,input_tokens,output_tokens\na,5,5\n", ["no turn or time column", "timestamp"]),
        ("session_id,turn,input_tokens,output_tokens\na,0,5,5\na,x,5,5\n", ["line 3", "turn"]),
        ("session_id,turn,input_tokens,output_tokens\na,0,5,0\n", ["line 2", "output_tokens", "at least 1"]),
        ("session_id,turn,input_tokens,output_tokens\na,0,5,5\na,0,6,6\n", ["line 3", "two turns"]),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "startTimeUnixNano": "1"}]}]}]}',
            ["no span carries", "gen_ai.usage.input_tokens"],
        ),
    ],
)
def test_trace_errors_say_where_and_how_to_fix(text, words):
    with pytest.raises(ValueError) as e:
        parse_session_trace(text)
    for w in words:
        assert w in str(e.value)


def test_timed_trace_replays_recorded_starts():
    rows = parse_session_trace("session_id,timestamp,input_tokens,output_tokens\na,0,100,20\nb,10,100,20\na,30,150,5\n")
    r = simulate_sessions(CFG, Sessions(trace=rows))
    assert sorted(r.result.arrival_s.tolist()) == [0.0, 10.0, 30.0]  # each turn ended long before its recorded start


def test_sessions_round_trip_through_the_link_and_the_config_file():
    cfg = RabitConfig(sessions=Sessions(arrival="gamma", cv=2.5, turns=Lengths(kind="uniform", mean=8, spread=0.5)))
    assert from_query(to_query(cfg)) == cfg
    assert from_json(cfg.model_dump_json()) == cfg
    assert "sessions" not in to_query(RabitConfig())


def test_sizing_needs_no_fewer_gpus_for_more_agents_or_a_tighter_target():
    from core.decision import size_sessions

    s = Sessions(turns=Lengths(kind="fixed", mean=4))

    def replicas(agents: int, target_s: float) -> int:
        a = size_sessions(CFG, s, agents=agents, ttft_p95_s=target_s, gpus=("h100-sxm",)).answer
        assert a is not None and a.ttft_p95_s <= target_s
        return a.replicas

    # 16 agents fit one H100 (p95 about 0.09 s); 128 agents thrash one replica's prefix cache and need two
    assert replicas(16, 0.3) < replicas(128, 0.3)
    assert replicas(128, 0.5) <= replicas(128, 0.15)
    with pytest.raises(ValueError, match="replayed trace"):
        size_sessions(CFG, _trace([(10, 2)]), agents=4, ttft_p95_s=1.0)


def test_a_turn_past_the_context_window_ends_its_session():
    """Llama-3.1-8B holds 131,072 tokens: a second turn of 200,000 is rejected on arrival and the third is never
    sent (the client has no answer to continue from)."""
    r = simulate_sessions(CFG, _trace([(100, 20), (200_000, 10), (200_100, 5)]))
    assert r.turn.tolist() == [0, 1] and r.result.summary.rejected == 1
    assert r.sessions_completed == 0 and r.payload()["rejected"] == 1
