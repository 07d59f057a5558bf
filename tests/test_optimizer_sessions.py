"""The optimizer sizes for N concurrent agents at a p95 TTFT per turn: every simulation runs the agents' sessions,
the pick meets the target and one replica fewer of it does not, more agents never cost less, and the screen's
equivalent workload is the session's mean turn at the interactive response-time law's rate."""

import pytest

from core.config import Lengths, RabitConfig, Sessions
from core.decision import Constraints, candidate_deployment, recommend, session_goal, simulate_session_candidate
from core.serving import simulate_sessions

CFG = RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1)
#: short sessions so each simulation stays small: 4 turns of 1,000 + 3 x (150 + 200) tokens
WORK = Sessions(turns=Lengths(kind="fixed", mean=4), first_input=Lengths(kind="fixed", mean=1000),
                new_input=Lengths(kind="fixed", mean=200), output=Lengths(kind="fixed", mean=150), gap_s=2.0)  # fmt: skip
CONS = Constraints(gpus_allowed=("l40s",), weights_allowed=("bf16",), kv_allowed=("bf16",), max_simulations=12)


def test_the_screen_reads_the_mean_turn_at_the_response_time_laws_rate():
    g = session_goal(CFG, WORK, agents=48, ttft_p95_s=0.5)
    # turns 1,000, 1,350, 1,700, 2,050 tokens: mean 1,525 = 1,000 + 3 x 350 / 2
    assert g.workload.input.mean == pytest.approx(1525.0)
    assert g.workload.output.mean == 150
    # X = N / (Z + R) = 48 / (2 + 0.5) = 19.2 turns/s
    assert g.rate_per_s == pytest.approx(19.2)
    assert g.p95_ttft_s == 0.5 and g.sessions is not None and g.sessions.agents == 48
    assert g.sessions.arrival == "agents"


def _pick(agents: int, target_s: float):
    goal = session_goal(CFG, WORK, agents=agents, ttft_p95_s=target_s)
    rec = recommend(goal, CONS, alternatives=False)
    assert rec.met and rec.recommendation is not None
    best = min((c for c in rec.candidates if c.simulated and c.meets), key=lambda c: c.cost)
    assert best.replicas == rec.recommendation.replicas
    return goal, best


def test_the_pick_meets_and_one_replica_fewer_does_not():
    goal, best = _pick(48, 0.5)
    assert best.p95_ttft_s is not None and best.p95_ttft_s <= 0.5
    assert "sessions of 48 agents" in best.sim_notes
    dep = candidate_deployment(goal, best)
    # the pick is the agents' sessions, simulated on its own: the same p95 over every turn
    again = simulate_sessions(dep, goal.sessions, replicas=best.replicas, batch_limits=(best.screen_batch,
                              max(goal.workload.token_budget, best.screen_batch)))  # fmt: skip
    assert again.ttft_p95_s == best.p95_ttft_s and again.sessions_completed == again.sessions
    if best.replicas > 1:
        fewer = best.model_copy(update={"replicas": best.replicas - 1})
        spec = goal.workload.with_(max_batch=best.screen_batch, token_budget=max(goal.workload.token_budget,
                                   best.screen_batch))  # fmt: skip
        assert not simulate_session_candidate(goal, fewer, dep, spec).meets


def test_more_agents_never_cost_less():
    _, few = _pick(16, 0.5)
    _, many = _pick(64, 0.5)
    assert many.cost >= few.cost and many.replicas >= few.replicas
