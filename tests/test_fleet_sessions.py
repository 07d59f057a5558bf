"""A fleet workload of agents' sessions: its turns' rate and lengths derived from the sessions, the plan's pick the
optimizer's for those agents (as rabit recommend --agents finds it), a surge of agents never planned on fewer
replicas, and the field errors."""

import contextlib
import io
import json

import pytest

from cli.main import main
from core.config import FleetError, FleetWorkload, Sessions, fleet_from_tables, fleet_tables, parse_fleet
from core.decision import plan_fleet

FLEET = """
workloads:
  - {name: agents, model: llama-3.1-8b, agents: 16, p95_ttft_s: 0.5}
scenarios:
  - {name: surge, rate_factor: 3}
constraints: {gpus: [l40s]}
settings: {max_simulations: 8, ranges: false}
"""


def test_a_workload_of_agents_is_its_turns():
    w = parse_fleet(FLEET).workloads[0]
    # defaults: 10 turns of 2,000 + k x (300 + 400) tokens, 5 s gaps; X = N / (Z + R) = 16 / (5 + 0.5)
    assert w.sessions == Sessions() and w.agents == 16
    assert w.rate_per_s == pytest.approx(16 / 5.5)
    assert (w.input_tokens, w.output_tokens) == (5150, 300)  # 2,000 + 9 x 700 / 2
    assert FleetWorkload.model_validate(w.model_dump()) == w  # a plan's file reads back


@pytest.mark.parametrize(
    "row, words",
    [
        ("{name: a, model: llama-3.1-8b, agents: 16, rate_per_s: 3}", "give agents or rate_per_s"),
        ("{name: a, model: llama-3.1-8b, agents: 16, p95_ttft_s: null}", "give p95_ttft_s"),
        ("{name: a, model: llama-3.1-8b, agents: 0}", "agents must be a whole number"),
    ],
)
def test_agents_errors_name_the_field(row, words):
    with pytest.raises(FleetError, match=words):
        parse_fleet(f"workloads:\n  - {row}\n")


def test_the_plan_picks_what_the_optimizer_picks_for_the_agents():
    plan = plan_fleet(parse_fleet(FLEET))
    (nominal,) = plan.nominal.picks
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        argv = "recommend --model llama-3.1-8b --agents 16 --p95-ttft-s 0.5 --gpus-allowed l40s --max-simulations 8"
        assert main([*argv.split(), "--json"]) == 0
    rec = json.loads(out.getvalue())["recommendation"]
    p = nominal.pick
    assert (p.gpu, p.tp, p.weights, p.kv_dtype, p.replicas) == (
        rec["gpu"], rec["tp"], rec["weights"], rec["kv_dtype"], rec["replicas"]
    )  # fmt: skip
    assert p.p95_ttft_s is not None and p.p95_ttft_s <= 0.5
    assert nominal.mean_tokens_per_s == pytest.approx(16 / 5.5 * 300)
    # three times the agents: never fewer replicas of the same configuration, nor a cheaper plan
    surge = dict(plan.scenarios)["surge"].picks[0]
    assert surge.cost_per_hour >= nominal.cost_per_hour
    assert plan.robust.cost_per_hour >= plan.nominal.cost_per_hour


def test_the_fleet_pages_tables_keep_the_agents():
    """The Fleet page's tables show a workload of agents by its turns; read back they keep its agents and sessions."""
    f = parse_fleet(FLEET)
    t = fleet_tables(f)
    assert t["workloads"][0]["input_tokens"] == 5150
    assert fleet_from_tables(t, gpus=("l40s",), keep=f, settings=f.settings).workloads == f.workloads
