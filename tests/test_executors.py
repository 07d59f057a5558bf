"""The executor seam: core maps its independent tasks through core.base.Executor and starts no processes; the
edges' ProcessExecutor gives the serial answer in the tasks' order, survives a dying or silent worker, and
leaves no worker behind however the map ends."""

import ast
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from core.base import SERIAL, SerialExecutor
from executors import ProcessExecutor

ROOT = Path(__file__).resolve().parent.parent


def square_slowly(x: int) -> int:
    """A task whose time grows with its argument, so the workers finish out of order."""
    time.sleep(0.002 * (x % 5))
    return x * x


def fails_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError("task 7 failed")
    return x


def _alive() -> list:
    return [p for p in multiprocessing.active_children() if p.is_alive()]


def test_core_starts_no_processes_or_threads():
    banned = {"multiprocessing", "subprocess", "threading", "concurrent", "signal"}
    found = []
    for p in (ROOT / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{p.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in banned]
    assert found == []


def test_the_serial_executor_runs_each_task_when_asked():
    ran = []
    it = SerialExecutor().map(lambda x: ran.append(x) or x, [1, 2, 3])
    assert ran == []  # nothing before the first result is asked for
    assert next(it) == 1 and ran == [1]
    assert list(it) == [2, 3]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_pool_gives_the_serial_results_in_order(workers):
    tasks = list(range(40))
    assert list(ProcessExecutor(workers).map(square_slowly, tasks)) == list(SERIAL.map(square_slowly, tasks))
    assert _alive() == []


def test_a_dying_worker_leaves_its_tasks_to_the_parent(monkeypatch):
    import executors.processes as pe

    def dies(conn, counter, fn, tasks):  # takes a task, then the process vanishes without a word
        pe._take(counter, len(tasks))
        os._exit(1)

    monkeypatch.setattr(pe, "_child", dies)
    assert list(ProcessExecutor(2).map(square_slowly, list(range(10)))) == [x * x for x in range(10)]
    assert _alive() == []


def test_a_silent_worker_is_given_up(monkeypatch):
    import executors.processes as pe

    def hangs(conn, counter, fn, tasks):  # takes a task and never answers
        pe._take(counter, len(tasks))
        time.sleep(600)

    monkeypatch.setattr(pe, "_child", hangs)
    t0 = time.monotonic()
    out = list(ProcessExecutor(2, silence_s=1.0).map(square_slowly, list(range(6))))
    assert out == [x * x for x in range(6)]
    assert time.monotonic() - t0 < 30 and _alive() == []


def test_a_task_that_raises_ends_the_map_and_every_worker():
    with pytest.raises(ValueError, match="task 7 failed"):
        list(ProcessExecutor(3).map(fails_on_seven, list(range(20))))
    assert _alive() == []


def test_an_abandoned_map_leaves_no_worker():
    it = ProcessExecutor(2).map(square_slowly, list(range(200)))
    assert next(it) == 0
    it.close()
    assert _alive() == []


class PicklingExecutor:
    """Runs each task from its pickled form and hands back the pickled result, as an executor on other
    machines would (issue 24's distributed engine): what a task reads must travel with it."""

    def map(self, fn, tasks):
        import pickle

        for t in tasks:
            f, arg = pickle.loads(pickle.dumps((fn, t)))
            yield pickle.loads(pickle.dumps(f(arg)))


def test_the_next_experiment_is_the_same_whichever_executor_runs_it():
    from core.catalog import parse_prices
    from core.decision import Constraints, NextExperimentSpec, ServingGoal, next_experiment
    from core.serving import Lengths, SimSpec

    header = "gpu,provider,kind,usd_per_gpu_hour,region,source,as_of,verification\n"
    prices = parse_prices(
        header
        + "h100-sxm,test,on-demand,1.0,x,crafted,2026-11-30,S\nh200-sxm,test,on-demand,1.1,x,crafted,2026-11-30,S\n"
    )
    goal = ServingGoal(
        model="llama-3.1-8b",
        rate_per_s=20.0,
        workload=SimSpec(num_requests=200, input=Lengths(mean=512), output=Lengths(mean=128)),
        p95_ttft_s=1.0,
    )
    cons = Constraints(
        gpus_allowed=("h100-sxm", "h200-sxm"), weights_allowed=("bf16",), kv_allowed=("bf16",), max_simulations=3
    )
    spec = NextExperimentSpec(goal=goal, constraints=cons, points_per_side=1)
    runs = [next_experiment(spec, prices, executor=ex) for ex in (SERIAL, PicklingExecutor(), ProcessExecutor(2))]
    dumps = [r.model_dump_json() for r in runs]
    assert dumps[0] == dumps[1] == dumps[2]
    assert _alive() == []
