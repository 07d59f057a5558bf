"""Executors the edges hand to ``core`` (:class:`core.base.Executor`): a pool of forked worker processes on this
machine (the default of the dashboard and the CLI), or a Ray cluster when given one. ``core`` starts no processes
itself.

Which one: :class:`ProcessExecutor` for a plan or a next experiment that fits one machine (no set-up, the
machine's cores); :class:`RayExecutor` for a study that outgrows it (many workloads and scenarios on a cluster's
CPUs; a worker that dies is retried). :func:`executor_for` picks: ``--ray ADDRESS`` (or ``RABIT_RAY_ADDRESS``)
joins that cluster, ``auto`` the one started on this machine; otherwise the local pool.

The package's face: it only hands names on."""

from __future__ import annotations

from executors.choose import (
    RAY_ADDRESS_ENV,
    executor_for,
    joined,
    ray_address,
)
from executors.processes import (
    WORKER_SILENCE_S,
    ProcessExecutor,
)
from executors.ray_cluster import (
    RayExecutor,
    RayUnavailable,
)

__all__ = [
    "ProcessExecutor",
    "RAY_ADDRESS_ENV",
    "RayExecutor",
    "RayUnavailable",
    "WORKER_SILENCE_S",
    "executor_for",
    "joined",
    "ray_address",
]
