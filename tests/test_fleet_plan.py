"""A fleet plan end to end, small enough for CI: two workloads whose single-workload recommendations are known from
``rabit recommend`` add up to the nominal plan; withdrawing the chosen GPU kind moves each workload to the
next-cheapest kind; the robust plan never costs less than the nominal one and meets every scenario; every
executor gives the same JSON, a dying worker included; the constraints move or leave out workloads."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cli.fleet_cmd import to_json
from cli.main import main
from core.base import SERIAL
from core.config import EXAMPLE_YAML, parse_fleet
from core.decision import plan_fleet
from executors import ProcessExecutor

#: The issue's smallest file (core.config.EXAMPLE_YAML, pinned to the issue's text by tests/test_fleet_schema.py), with
#: a scenario that withdraws the kind both workloads take, and the optimizer at a CI size (400 requests a
#: simulation, 6 simulations a search: the same settings as the recommend runs below).
FLEET = (
    EXAMPLE_YAML.replace(
        "  - {name: peak, rate_factor: 1.3}\n",
        "  - {name: peak, rate_factor: 1.3}\n  - {name: no-mi300x, withdraw: [mi300x]}\n",
    )
    + "settings: {requests_per_simulation: 400, max_simulations: 6, ranges: false}\n"
)
#: ``rabit recommend`` with the same workload, targets and optimizer settings as each workload of FLEET.
RECOMMEND = {
    "chat": "--model llama-3.1-70b --rate 10 --input 1000 --output 250 --p95-ttft-s 2 --p95-itl-s 0.04",
    "code": "--model llama-3.1-8b --rate 40 --input 2000 --output 400 --p95-ttft-s 1 --p95-itl-s 0.05",
}
SETTINGS = "--p95-e2e-s none --requests 400 --max-simulations 6"


def _recommend(name: str, gpus: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["recommend", *RECOMMEND[name].split(), *SETTINGS.split(), "--gpus-allowed", gpus, "--json"]) == 0
    return json.loads(out.getvalue())["recommendation"]


@pytest.fixture(scope="module")
def fleet():
    return parse_fleet(FLEET)


@pytest.fixture(scope="module")
def ticks():
    return []


@pytest.fixture(scope="module")
def plan(fleet, ticks):
    return plan_fleet(fleet, progress=lambda d, t, label: ticks.append((d, t, label)))


KINDS = ("h100-sxm", "h200-sxm", "mi300x")


@pytest.fixture(scope="module")
def recommended():
    """Each workload's recommendation from ``rabit recommend``, on each GPU kind alone and over all three."""
    return {(name, kinds): _recommend(name, kinds) for name in RECOMMEND for kinds in (*KINDS, ",".join(KINDS))}


def _same_pick(fleet_pick, rec: dict) -> None:
    for k in ("gpu", "gpus_per_replica", "tp", "pp", "weights", "kv_dtype", "replicas"):
        assert getattr(fleet_pick.pick, k) == rec[k], k
    assert fleet_pick.cost_per_hour == pytest.approx(rec["cost_per_hour"], rel=1e-12)


def _cheapest(recommended, name: str, kinds) -> dict:
    return min((recommended[(name, k)] for k in kinds), key=lambda r: r["cost_per_hour"])


def test_the_nominal_plan_is_the_sum_of_the_single_workload_recommendations(plan, recommended):
    # each workload takes the cheapest of its per-kind recommendations (rabit recommend --gpus-allowed KIND); here
    # that is also what one search over the three kinds recommends: chat 3 x MI300X ($11.775/h), code 2 x MI300X
    # ($7.85/h), $19.625/h in all. A search over all kinds shares its simulations between them, so it can only
    # miss a cheaper kind, never find one the fleet's per-kind runs miss.
    # A plan sizes each workload kind by kind, so a disaggregated layout whose two pools are of two kinds (prefill
    # on one, decode on another), which one search over all kinds may find, is outside it: there the joint search
    # is cheaper (chat: 2 prefill x H100 + 1 decode x MI300X at $12.085/h against 4 x MI300X at $15.7/h).
    total = 0.0
    for name in RECOMMEND:
        best = _cheapest(recommended, name, KINDS)
        _same_pick(plan.nominal.pick_of(name), best)
        joint = recommended[(name, ",".join(KINDS))]
        mixed = joint.get("mode") == "disaggregated" and joint["prefill"]["gpu"] != joint["decode"]["gpu"]
        assert mixed or best["cost_per_hour"] <= joint["cost_per_hour"] + 1e-9
        total += best["cost_per_hour"]
    assert plan.nominal.cost_per_hour == pytest.approx(total, rel=1e-12)
    gpus = {}
    for name in RECOMMEND:
        rec = _cheapest(recommended, name, KINDS)
        gpus[rec["gpu"]] = gpus.get(rec["gpu"], 0) + rec["replicas"] * rec["gpus_per_replica"]
    assert {t.gpu: t.gpus for t in plan.nominal.totals} == gpus  # no availability given: no spares


def test_withdrawing_the_chosen_kind_moves_each_workload_to_the_next_cheapest(plan, recommended):
    gone = plan.scenario("no-mi300x")
    for name in RECOMMEND:
        assert plan.nominal.pick_of(name).gpu == "mi300x"  # the kind the scenario withdraws
        _same_pick(gone.pick_of(name), _cheapest(recommended, name, ("h100-sxm", "h200-sxm")))
        assert gone.pick_of(name).cost_per_hour >= plan.nominal.pick_of(name).cost_per_hour


def test_the_robust_plan_meets_every_scenario_and_never_costs_less(plan):
    assert plan.robust.cost_per_hour >= plan.nominal.cost_per_hour
    assert plan.robustness_cost_per_hour == pytest.approx(plan.robust.cost_per_hour - plan.nominal.cost_per_hour)
    for o in plan.robust.picks:
        assert o.gpu != "mi300x"  # withdrawn in one scenario: never robust
        for name, a in plan.scenarios:
            s = a.pick_of(o.workload)
            # at least what each scenario's own plan needs of that kind, or a costlier kind there
            assert o.cost_per_hour >= s.cost_per_hour - 1e-9 or s.gpu != o.gpu, (o.workload, name)
    # which workloads are expensive to make robust: ranked by what robustness adds, each with its reason
    extra = [e.extra_per_hour for e in plan.expensive]
    assert extra == sorted(extra, reverse=True) and sum(extra) == pytest.approx(plan.robustness_cost_per_hour)
    assert all("mi300x is withdrawn in no-mi300x" in e.why for e in plan.expensive if e.extra_per_hour > 0)


def test_progress_is_reported_once_per_finished_unit(plan, ticks):
    done = [d for d, _, _ in ticks]
    assert done == list(range(1, len(ticks) + 1)) and ticks[-1][0] == ticks[-1][1] == plan.units
    assert all(t >= d for d, t, _ in ticks)
    # identical units run once: withdrawing MI300X leaves the other kinds' runs as the nominal ones, so the first
    # round is 2 workloads x 3 kinds x 2 cases (nominal, peak), not x 3
    first = [label for _, _, label in ticks if "sizing" not in label and "range" not in label]
    assert len(first) == 2 * 3 * 2


def test_every_executor_gives_the_same_json(fleet, plan):
    ref = json.dumps(to_json(plan), sort_keys=False)
    again = plan_fleet(fleet, executor=ProcessExecutor(2))
    assert json.dumps(to_json(again)) == ref


def _kill_a_child_mid_plan(stop: threading.Event, killed: list[int]) -> None:
    """Kill one forked worker of this process (a child with this process's own command line) with SIGKILL as soon
    as one runs."""
    me = os.getpid()
    mine = Path(f"/proc/{me}/cmdline").read_bytes()
    while not stop.is_set() and not killed:
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                forked = (entry / "cmdline").read_bytes() == mine
            except (OSError, ValueError):
                continue
            if ppid == me and forked and int(entry.name) != me:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except ProcessLookupError:
                    continue
                return
        time.sleep(0.02)


def test_a_worker_process_killed_mid_plan_leaves_the_plan_complete_and_the_same(fleet, plan):
    stop, killed = threading.Event(), []
    t = threading.Thread(target=_kill_a_child_mid_plan, args=(stop, killed), daemon=True)
    t.start()
    try:
        again = plan_fleet(fleet, executor=ProcessExecutor(2))
    finally:
        stop.set()
        t.join(5)
    assert killed, "no worker process was seen to kill"
    assert json.dumps(to_json(again)) == json.dumps(to_json(plan))


def test_a_workload_no_kind_can_serve_is_infeasible_with_why(fleet):
    # 0.1 ms between tokens: no kind decodes an 8B model that fast even alone
    f = parse_fleet(
        FLEET.replace("p95_itl_s: 0.05}", "p95_itl_s: 0.0001}").replace(
            "requests_per_simulation: 400, max_simulations: 6", "requests_per_simulation: 100, max_simulations: 1"
        )
    )
    p = plan_fleet(f.model_copy(update={"scenarios": ()}), executor=SERIAL)
    assert [n for n, _ in p.infeasible] == ["code"] and p.nominal.pick_of("code") is None
    why = dict(p.infeasible)["code"]
    assert all(g in why for g in ("h100-sxm", "h200-sxm", "mi300x")) and "ITL" in why
    j = to_json(p)
    assert j["infeasible"] == [{"workload": "code", "why": why}] and [w["name"] for w in j["workloads"]] == ["chat"]


def test_a_gpu_count_moves_a_workload_and_a_budget_leaves_one_out(fleet, plan):
    chat = plan.nominal.pick_of("chat")
    code = plan.nominal.pick_of("code")
    both = chat.gpus + code.gpus
    capped = fleet.model_copy(
        update={
            "scenarios": (),
            "constraints": fleet.constraints.model_copy(update={"max_gpus": (("mi300x", both - 1),)}),
        }
    )
    p = plan_fleet(capped)
    assert sum(o.gpus for o in p.nominal.picks if o.gpu == "mi300x") <= both - 1
    assert p.nominal.cost_per_hour > plan.nominal.cost_per_hour and not p.nominal.left_out
    budget = fleet.model_copy(
        update={
            "scenarios": (),
            "workloads": tuple(
                w.model_copy(update={"priority": 2}) if w.name == "chat" else w for w in fleet.workloads
            ),
            "constraints": fleet.constraints.model_copy(update={"max_usd_per_hour": code.cost_per_hour + 0.01}),
        }
    )
    p = plan_fleet(budget)
    assert [n for n, _ in p.nominal.left_out] == ["chat"] and p.nominal.pick_of("code") is not None
