"""Executors the edges hand to ``core`` (:class:`core.base.Executor`): the dashboard and the CLI run the next
experiment's re-runs on a pool of forked worker processes. ``core`` starts no processes itself.

The package's face: it only hands names on."""

from __future__ import annotations

from executors.processes import (
    WORKER_SILENCE_S,
    ProcessExecutor,
)

__all__ = [
    "ProcessExecutor",
    "WORKER_SILENCE_S",
]
