"""Every search stops on its overall work budget (core.base.limits.search_budget / next_budget), not only each
simulation inside it: the optimizer (serving and training) and the next-experiment search, in core, from the
CLI (exit 2, one line) and on their pages (st.error).

A pathological search is the whole catalog screened and up to 64 finalists each simulated at 50,000 requests:
tens of minutes without an overall budget. Under a budget of ``B`` seconds it must stop within ``B`` plus one
check's granularity (an engine checks its budget every few thousand events; a screen after each configuration).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import time
from pathlib import Path

import pytest

import cli.common
import core.base.limits
from cli.main import main
from core.base import BudgetExceeded, WorkBudget, next_budget, search_budget
from core.config import DEFAULT
from core.decision import (
    Constraints,
    NextExperimentSpec,
    ServingGoal,
    TrainingExperimentSpec,
    next_experiment,
    next_training_experiment,
    recommend,
    recommend_training,
)
from core.serving import SimSpec
from executors import ProcessExecutor

#: What one budget check may overrun on this 2-core machine shared with other processes (the granularity of
#: a check, not a performance figure): a budget of B s must end before B + SLACK_S.
SLACK_S = 4.0


def _heavy_goal(requests: int = 50_000) -> ServingGoal:
    """Llama-3.1-70B at 10 requests/s with no latency target (every configuration that fits survives the screen),
    50,000 requests per simulation: the search simulates for seconds. Spelled out, not the shared defaults, so a
    change of the defaults cannot prune every candidate and leave nothing to simulate."""
    return ServingGoal(model="llama-3.1-70b", workload=SimSpec(num_requests=requests, rate_per_s=10.0))


def _heavy_constraints() -> Constraints:
    return Constraints(max_simulations=64)


def _timed(fn):
    t0 = time.monotonic()
    with pytest.raises(BudgetExceeded) as exc:
        fn()
    return time.monotonic() - t0, str(exc.value)


# --- the budget object -------------------------------------------------------------------------------


def test_a_tick_past_the_evaluation_limit_stops_with_the_count_and_what_to_change():
    b = search_budget(max_evaluations=3)
    for _ in range(3):
        b.tick()
    with pytest.raises(BudgetExceeded, match=r"the optimizer search stopped after 4 evaluations \(the limit is 3\)"):
        b.tick()


def test_a_simulation_inside_a_search_ends_no_later_than_the_search():
    parent = search_budget(max_wall_s=5.0)
    child = parent.child()
    # a fresh search gives its simulation the usual per-simulation limit or the time left, whichever is less
    assert child.max_wall_s <= min(core.base.limits.SIM_MAX_WALL_S, 5.0)
    spent = search_budget(max_wall_s=0.0)
    with pytest.raises(BudgetExceeded, match="the optimizer search stopped after"):
        spent.child().check(0)  # the search's words, not the simulation's
    # a simulation on its own keeps the simulation's words (the CLI's simulate message)
    with pytest.raises(BudgetExceeded, match="simulate fewer requests"):
        WorkBudget(max_wall_s=0.0).check(0)


# --- core: each search under a tiny or a short budget ----------------------------------------------


def test_serving_search_stops_on_its_evaluation_budget():
    _dt, msg = _timed(lambda: recommend(_heavy_goal(), _heavy_constraints(), budget=search_budget(max_evaluations=50)))
    assert "stopped after 51 evaluations (the limit is 50)" in msg and "allow fewer GPU kinds" in msg


def test_pathological_serving_search_stops_within_its_wall_budget():
    # whole catalog x 64 finalists x 50,000 simulated requests each: the screen alone is ~600 configurations
    budget_s = 1.5
    dt, msg = _timed(lambda: recommend(_heavy_goal(), _heavy_constraints(), budget=search_budget(max_wall_s=budget_s)))
    assert "the optimizer search stopped after" in msg, msg
    assert dt < budget_s + SLACK_S, dt


def test_a_long_simulation_inside_the_search_is_cut_at_the_search_deadline():
    # one GPU kind, aggregated layouts: the screen is quick, so the time runs out inside a 500,000-request
    # simulation (about 2 s on the compiled loop, which checks the wall clock every 16,384 passes). Disaggregated
    # layouts are left out: since they run compiled one may top the screen, and its 500,000 requests behind a
    # saturated decode pool pass the simulation's own 50M-event limit before the search's deadline is reached.
    cons = _heavy_constraints().model_copy(update={"gpus_allowed": ("h100-sxm",), "disagg": False})
    goal = _heavy_goal(500_000)
    t0 = time.monotonic()
    recommend(goal, cons.model_copy(update={"max_simulations": 1}), budget=search_budget(max_wall_s=1e9))
    one_sim_s = time.monotonic() - t0
    budget_s = 0.5
    dt, msg = _timed(lambda: recommend(goal, cons, budget=search_budget(max_wall_s=budget_s)))
    assert "the optimizer search stopped after" in msg
    # the search with its one simulation takes longer than the budget, so the cut fell inside that simulation
    assert one_sim_s > budget_s and dt < budget_s + SLACK_S, (one_sim_s, dt)


def test_training_search_stops_on_its_budget():
    cfg = DEFAULT.with_(phase="train")
    cons = Constraints.from_config(cfg, training=True)
    dt, msg = _timed(lambda: recommend_training(cfg, 30 * 86400, cons, budget=search_budget(max_wall_s=0.0)))
    assert "the optimizer search stopped after" in msg and dt < SLACK_S
    _dt, msg = _timed(lambda: recommend_training(cfg, 30 * 86400, cons, budget=search_budget(max_evaluations=2)))
    assert "stopped after 3 evaluations" in msg


@pytest.mark.parametrize("workers", [1, 2])
def test_next_experiment_stops_within_its_budget_and_leaves_no_worker(workers):
    spec = NextExperimentSpec(goal=_heavy_goal(), constraints=_heavy_constraints(), points_per_side=5)
    budget_s = 2.0
    ex = ProcessExecutor(workers)
    dt, msg = _timed(lambda: next_experiment(spec, executor=ex, budget=next_budget(max_wall_s=budget_s)))
    assert "the next-experiment search stopped after" in msg and "fewer points per side" in msg, msg
    assert dt < budget_s + SLACK_S, dt
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def test_next_experiment_stops_on_its_evaluation_budget():
    spec = NextExperimentSpec(goal=_heavy_goal(), constraints=_heavy_constraints())
    _dt, msg = _timed(lambda: next_experiment(spec, budget=next_budget(max_evaluations=100)))
    assert "stopped after 101 evaluations (the limit is 100)" in msg


def test_training_next_experiment_stops_on_its_budget():
    cfg = DEFAULT.with_(phase="train")
    spec = TrainingExperimentSpec(
        config=cfg, deadline_s=30 * 86400, constraints=Constraints.from_config(cfg, training=True)
    )
    dt, msg = _timed(lambda: next_training_experiment(spec, budget=next_budget(max_wall_s=0.0)))
    assert "the next-experiment search stopped after" in msg and dt < SLACK_S


def test_the_default_budgets_are_finite_and_above_the_default_scenario():
    # default scenario (README benchmarks): 604 evaluations and ~1 s for the search, 9,533 evaluations and
    # ~10 s for the next experiment; the limits leave at least 10x headroom and stay finite
    assert 10 * 604 <= core.base.limits.SEARCH_MAX_EVALUATIONS < 10**6
    assert 10 * 9_533 <= core.base.limits.NEXT_MAX_EVALUATIONS < 10**7
    assert 10 <= core.base.limits.SEARCH_MAX_WALL_S <= core.base.limits.NEXT_MAX_WALL_S <= 600


# --- CLI: exit 2, one line -----------------------------------------------------------------------------


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


HEAVY_ARGS = ["--model", "llama-3.1-70b", "--rate", "10", "--requests", "50000", "--max-simulations", "64"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["recommend", *HEAVY_ARGS], "the optimizer search stopped after"),
        (["recommend", "--train", "--tokens", "1e12", "--deadline-days", "30"], "the optimizer search stopped after"),
        (["next-experiment", *HEAVY_ARGS, "--points-per-side", "5"], "the next-experiment search stopped after"),
    ],
    ids=["recommend", "recommend-train", "next-experiment"],
)
def test_cli_search_stops_on_its_budget_with_exit_2(monkeypatch, argv, words):
    monkeypatch.setattr(cli.common, "CLI_SEARCH_MAX_WALL_S", 1.0)
    t0 = time.monotonic()
    rc, _out, err = _cli(argv)
    assert rc == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert time.monotonic() - t0 < 1.0 + SLACK_S + 2.0  # + the CLI's start (argument checks, price list)


# --- pages: st.error, never a traceback ------------------------------------------------------------------


@pytest.mark.parametrize(
    "page, words",
    [("optimizer.py", "the optimizer search stopped after"), ("next_experiment.py", "next-experiment search stopped")],
)
def test_page_shows_the_budget_message(clear_cache, monkeypatch, page, words):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(core.base.limits, "SEARCH_MAX_WALL_S", 0.0)
    monkeypatch.setattr(core.base.limits, "NEXT_MAX_WALL_S", 0.0)
    app = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
    at = AppTest.from_file(app, default_timeout=180).run()
    at.switch_page(f"../pages/{page}").run()
    if page == "next_experiment.py":
        at.button(key="ne.submit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(words in e.value for e in at.error), [e.value for e in at.error]
