"""Multi-turn session simulation speed: 10,000 coding-agent sessions of 10 turns (100,000 turns) on 8 replicas.

Workload: the session defaults (first turn 2,000 tokens, 400 new tokens and 300 output tokens a turn, 5 s gaps),
4 sessions/s over 8 replicas of Llama-3.1-8B on one H100 SXM each (0.5 sessions/s a replica, where one replica
keeps its sessions' prefixes cached: hit rate about 0.89, p95 TTFT well under a second). The compiled session loop
(:mod:`core.serving.sim.jit_sessions`); the Python loop's time beside it for the record. Time: the best of two runs,
wall clock, summary included.

Run alone: ``python -m bench.run sessions``.
"""

from __future__ import annotations

import time

from core.base import WorkBudget
from core.config import RabitConfig, Sessions
from core.serving import simulate_sessions

CFG = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", tp=1, gpus_per_node=8)
SESSIONS = Sessions(num_sessions=10_000, rate_per_s=4.0)


def run() -> list[tuple[str, float, str, str]]:
    simulate_sessions(CFG, SESSIONS.with_(num_sessions=50))  # warm imports and catalogs
    best, res = float("inf"), None
    for _ in range(2):
        t0 = time.perf_counter()
        res = simulate_sessions(CFG, SESSIONS, budget=WorkBudget(max_wall_s=600.0))
        best = min(best, time.perf_counter() - t0)
    assert res is not None and res.loop == "compiled", res and res.fallback_reason
    t0 = time.perf_counter()
    simulate_sessions(CFG, SESSIONS, budget=WorkBudget(max_wall_s=600.0), loop="python")
    slow = time.perf_counter() - t0
    return [
        ("sessions 10k x 10 turns, 8 replicas", best, "s", "< 2"),
        ("  the Python loop, same run", slow, "s", ""),
        ("  turns simulated", float(res.turn.size), "", "100000"),
        ("  per turn", best / res.turn.size * 1e6, "us", ""),
        ("  prefix hit rate", res.prefix_hit_rate, "", ""),
        ("  p95 TTFT", res.ttft_p95_s or float("nan"), "s", ""),
        ("  evicted prefixes", float(res.evicted_prefixes), "", ""),
    ]
