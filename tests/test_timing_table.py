"""The iteration timing's table reaches every iteration a run can schedule (core.serving.simulation.table_tokens),
so prefill priority's whole long prompts run on the compiled loop, to the Python loop's byte."""

from __future__ import annotations

import core.serving.simulation as simulation
from core.config import Lengths, RabitConfig, SimSpec, as_deployment
from core.serving import simulate
from tests.simcheck import assert_same

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
FIXED = SimSpec(
    rate_per_s=4.0,
    num_requests=120,
    input=Lengths(kind="fixed", mean=3000),
    output=Lengths(kind="fixed", mean=200),
    token_budget=2048,
    max_batch=64,
)


def test_the_table_covers_the_longest_iteration_each_policy_schedules():
    # chunked prefill never passes the budget K = 2,048
    assert simulation.table_tokens(FIXED, 131_072) == 2048
    prio = FIXED.with_(policy="prefill_priority")
    # a 3,000-token prompt runs whole; preempted after 199 of its 200 tokens it recomputes 3,199: bound 3,000 + 200
    assert simulation.table_tokens(prio, 131_072) == 3200
    # never past the model's window (a longer request is rejected), never below K
    assert simulation.table_tokens(prio, 2500) == 2500
    assert simulation.table_tokens(prio.with_(token_budget=8192), 131_072) == 8192
    # a replayed trace: its longest row, 5,000 + 10
    traced = prio.with_(trace=((100, 50), (5000, 10), (4000, 900)))
    assert simulation.table_tokens(traced, 131_072) == 5010
    # sessions carry their history in the prompt: the window
    assert simulation.table_tokens(prio, 131_072, sessions=True) == 131_072


def test_whole_prompts_past_the_budget_run_compiled_to_the_python_loops_byte():
    spec = FIXED.with_(policy="prefill_priority")
    _, tm = simulation.replica_timing(as_deployment(L8), spec)
    assert tm.t_max == 3200  # the 3,000-token prompts (2,048 budget) are inside the table
    ref = simulate(L8, spec, loop="python")
    got = simulate(L8, spec)
    assert (got.loop, got.fallback_reason) == ("compiled", None)
    assert_same(ref, got)
    # the run did schedule iterations past the budget: its prompts are longer than K and run whole
    assert int(ref.input_tokens.max()) > spec.token_budget
