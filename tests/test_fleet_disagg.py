"""A fleet workload whose cheapest configuration is disaggregated: the plan takes ``rabit recommend``'s
prefill and decode pools, gives each pool its own spares, sizes each pool for the peak scenario under the
deployment model (the optimizer's run restricted to those pool shapes) and counts both pools' GPUs in the totals."""

from __future__ import annotations

import pytest
from clirun import run
from test_disagg_recommend import PROMPT_HEAVY

from cli.fleet_cmd import to_json
from core.config import DEFAULT, parse_fleet
from core.decision import plan_fleet
from core.physics import with_spares

#: PROMPT_HEAVY of tests/test_disagg_recommend.py as a fleet workload (same model, rate, lengths, targets,
#: precisions and optimizer settings), with a peak 50 % above it and H100 failures (2e-5 per GPU-hour, 24 h to
#: repair: an 8-GPU node is down 8 x 2e-5 x 24 = 0.384 % of the time, so a pool of 2-10 instances of one node or
#: less keeps ceil(N / (1 - 0.00384)) - N = 1 spare).
FLEET = """\
workloads:
  - {name: rag, model: llama-3.1-70b, rate_per_s: 4, input_tokens: 8000, output_tokens: 200, p95_ttft_s: 2,
     p95_itl_s: 0.03}
scenarios:
  - {name: peak, rate_factor: 1.5}
constraints: {gpus: [h100-sxm]}
availability:
  h100-sxm: {failure_rate_per_gpu_hour: 2.0e-5, repair_hours: 24}
settings: {requests_per_simulation: 1000, max_simulations: 16, ranges: false}
"""
BASE = DEFAULT.with_(targets=DEFAULT.targets.with_(weights_allowed=("fp8",), kv_allowed=("bf16",)))


@pytest.fixture(scope="module")
def plan():
    return plan_fleet(parse_fleet(FLEET), BASE)


def test_the_nominal_pick_is_recommends_disaggregated_pools_with_a_spare_each(plan, capsys):
    rec = run(capsys, *PROMPT_HEAVY, "--json")["recommendation"]
    o = plan.nominal.pick_of("rag")
    assert rec["mode"] == "disaggregated" and o.mode == "disaggregated"
    assert o.pick.cost_per_hour == pytest.approx(rec["cost_per_hour"], rel=1e-12)
    for q in o.pools:
        assert q.instances == rec[q.role]["instances"] and q.gpus_per_instance == rec[q.role]["gpus_per_instance"]
        assert q.spares == 1 == with_spares(q.instances, 0.00384) - q.instances  # the docstring's figure
    # both pools' GPUs and their spares, at the pick's price per GPU
    serving = sum(rec[r]["instances"] * rec[r]["gpus_per_instance"] for r in ("prefill", "decode"))
    spare = sum(rec[r]["gpus_per_instance"] for r in ("prefill", "decode"))
    assert (o.serving_gpus, o.spare_gpus, o.gpus) == (serving, spare, serving + spare)
    assert o.cost_per_hour == pytest.approx(rec["cost_per_hour"] / serving * (serving + spare), rel=1e-12)
    (t,) = plan.nominal.totals
    assert (t.serving_gpus, t.spare_gpus_unpooled) == (serving, spare)


def test_the_robust_pools_are_each_sized_for_the_peak(plan):
    n, r = plan.nominal.pick_of("rag"), plan.robust.pick_of("rag")
    assert r.mode == "disaggregated" and r.case == "peak"
    assert [q.gpus_per_instance for q in r.pools] == [q.gpus_per_instance for q in n.pools]  # the same shapes
    assert all(qr.instances >= qn.instances for qr, qn in zip(r.pools, n.pools))
    # the peak's own pick, when it took the same pool shapes, has the robust option's counts
    peak = plan.scenario("peak").pick_of("rag")

    def shapes(o):
        return [(q.role, q.gpus_per_instance, getattr(o.pick, q.role).tp) for q in o.pools]

    if peak is not None and peak.mode == "disaggregated" and shapes(peak) == shapes(r):
        assert [q.instances for q in r.pools] == [q.instances for q in peak.pools]
    assert sum(q.instances for q in r.pools) > sum(q.instances for q in n.pools)  # 50 % more traffic needs more
    assert plan.robust.cost_per_hour >= plan.nominal.cost_per_hour
    assert r.utilisation <= 1.0 and n.utilisation <= 1.0


def test_the_json_carries_the_mode_and_the_fleets_pool_counts(plan):
    out = to_json(plan)
    (w,) = out["robust"]["workloads"]
    r = plan.robust.pick_of("rag")
    assert w["mode"] == "disaggregated" and w["label"].startswith("disaggregated ")
    for q in r.pools:
        assert w[q.role]["instances"] == q.instances and w[q.role]["spares"] == q.spares
    assert w["gpus"] == sum(
        (w[p]["instances"] + w[p]["spares"]) * w[p]["gpus_per_instance"] for p in ("prefill", "decode")
    )
