"""The deployment's event loop checks its budget every 1,024 passes, at the next moment anything happens. On the
pass that ends the loop nothing is left (no arrival, no replica step, no transfer), so there is no clock to check:
a run whose last pass fell on a multiple of 1,024 used to read that as a clock past 1e9 s and stop with
BudgetExceeded, failing the simulation (and every optimizer run, fleet plan included, that simulated it)."""

from clirun import run

#: A run whose last pass is pass 1,024 x k (found by a 50-workload fleet plan: Mistral-7B, prompts doubled by a
#: scenario, on two MI300X replicas): 300 requests at 19/s on two replicas of one GPU, every one completed.
CASE = (
    "simulate --model mistral-7b --gpu mi300x --gpus 2 --tp 1 --replicas 2 --weights fp8 --kv-dtype bf16 "
    "--rate 19 --input 5200 --output 520 --lengths fixed --requests 300 --max-batch 205 --json"
).split()


def test_a_loop_that_ends_on_a_budget_pass_completes(capsys):
    out = run(capsys, *CASE)
    assert out["completed"] == out["requests"] == 300 and out["replicas"] == 2
