"""How ``core`` runs many independent tasks: one ordered ``map`` that the edges supply.

``core`` starts no processes and no threads. A search with many independent tasks (the next experiment's
optimizer re-runs) hands them to an :class:`Executor`: ``map(fn, tasks)`` yields ``fn(task)`` for every task, in
the tasks' order. The default, :data:`SERIAL`, runs them here, one after another, as the results are asked for.
The edges supply others: the dashboard and the CLI a pool of forked worker processes (``executors``, a package
beside ``core``), and a distributed engine can take their place.

A task is a top-level function and one picklable argument. Its result depends on that argument alone (nothing
shared but what it carries, which a worker may hold a copy of), and the caller merges the results by their
position, so every executor gives the same answer, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs ``fn`` on each task and yields the results in the tasks' order."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]: ...


class SerialExecutor:
    """Every task in this process, one after another, each when its result is asked for (so a caller's progress
    follows the tasks). Holds nothing between calls."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        return (fn(t) for t in tasks)


#: The executor ``core`` uses when an edge supplies none.
SERIAL: Executor = SerialExecutor()
