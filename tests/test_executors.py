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
