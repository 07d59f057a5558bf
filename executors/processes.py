"""A pool of forked worker processes behind :class:`core.base.Executor`'s ordered ``map``.

The tasks are shared between this process and ``workers - 1`` forked children: each takes the next task's index
from a counter in shared memory, so the heaviest tasks, listed first, are spread and everyone finishes at about
the same time. A child inherits the function and the tasks when it is forked (nothing is pickled on the way
out) and sends each result back over a pipe. A child that dies, or says nothing for ``silence_s``, is given up:
the tasks it took and did not finish run here afterwards. A task that raises here (a search out of its work
budget) ends the map and every child with it; no worker outlives a map. Results come back in the tasks' order,
whichever process ran them, so the answer is the serial one. Where ``fork`` is not available, with one worker
or with one task, everything runs here.

Python re-runs hold the GIL, so threads would gain nothing: processes do (``bench/next_experiment.py`` measures
both ways).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: A forked worker silent this long is given up (it reports every task; one takes seconds) [s].
WORKER_SILENCE_S = 120.0


class _Counter:
    """The next task's index when no child shares it."""

    def __init__(self) -> None:
        self.value = 0

    def get_lock(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def _take(counter: Any, n: int) -> int | None:
    """The next task's index from the shared counter, or None when every task is taken."""
    with counter.get_lock():
        i = counter.value
        counter.value += 1
    return i if i < n else None


def _child(conn: Connection, counter: Any, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> None:  # pragma: no cover
    """A forked worker: take tasks until none is left, send each result, then say it is done (or what failed)."""
    try:
        while (i := _take(counter, len(tasks))) is not None:
            conn.send(("result", i, fn(tasks[i])))
        conn.send(("done", None, None))
    except BaseException as exc:  # noqa: BLE001 - the parent runs whatever is left
        try:
            conn.send(("error", None, repr(exc)))
        except OSError:
            pass
    finally:
        conn.close()


class _Worker:
    """One forked child, its end of the pipe, and when it last spoke."""

    def __init__(self, proc: Any, conn: Connection) -> None:
        self.proc, self.conn, self.heard = proc, conn, time.monotonic()


class ProcessExecutor:
    """Runs a map's tasks in this process and ``workers - 1`` forked children (see the module docstring)."""

    def __init__(self, workers: int = 2, silence_s: float = WORKER_SILENCE_S) -> None:
        self.workers = workers
        self.silence_s = silence_s

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        n = len(tasks)
        if self.workers <= 1 or n <= 1:
            yield from (fn(t) for t in tasks)
            return
        counter: Any = _Counter()
        workers: list[_Worker] = []
        try:
            ctx = mp.get_context("fork")
            counter = ctx.Value("i", 0)
            for _ in range(self.workers - 1):
                conn, child_end = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(child_end, counter, fn, tasks), daemon=True)
                proc.start()
                child_end.close()
                workers.append(_Worker(proc, conn))
        except (ValueError, OSError):  # no fork here, or no process to spare: the children started run on
            if not workers:
                counter = _Counter()
        results: dict[int, R] = {}
        nxt = 0
        try:
            while (i := _take(counter, n)) is not None:
                results[i] = fn(tasks[i])
                self._drain(workers, results, block=False)
                while nxt in results:
                    yield results.pop(nxt)
                    nxt += 1
            self._drain(workers, results, block=True)
        finally:  # a map stopped by an error (or abandoned) leaves no child running
            for w in workers:
                w.proc.join(timeout=0 if w.proc.exitcode is None and not w.conn.closed else 5)
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(timeout=5)
                if not w.conn.closed:
                    w.conn.close()
        for i in range(nxt, n):  # in order, running here what a child could not finish
            yield results.pop(i) if i in results else fn(tasks[i])

    def _drain(self, workers: list[_Worker], results: dict[int, Any], block: bool) -> None:
        """Take the children's messages (until every child is done, when ``block``). A child that dies, or says
        nothing for ``silence_s``, is given up: its unfinished tasks are run here afterwards."""
        while True:
            open_ = [w for w in workers if not w.conn.closed]
            if not open_:
                return
            ready = wait([w.conn for w in open_], timeout=1.0 if block else 0)
            if not ready:
                if not block:
                    return
                for w in open_:
                    if not w.proc.is_alive() or time.monotonic() - w.heard > self.silence_s:
                        w.conn.close()
                continue
            for w in open_:
                if w.conn not in ready:
                    continue
                w.heard = time.monotonic()
                try:
                    kind, i, payload = w.conn.recv()
                except (EOFError, OSError):
                    kind, i, payload = "error", None, "the worker process ended early"
                if kind == "result":
                    results[i] = payload
                else:  # done or error: the child is finished
                    w.conn.close()
