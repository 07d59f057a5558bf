"""Which executor an edge hands to ``core``: a Ray cluster when one is named, else the local pool of processes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from core.base import Executor
from executors.processes import ProcessExecutor
from executors.ray_cluster import RayExecutor

#: The environment variable that names a Ray cluster when no ``--ray`` is given (``auto``: the local one).
RAY_ADDRESS_ENV = "RABIT_RAY_ADDRESS"


def ray_address(flag: str | None = None) -> str | None:
    """The Ray address in force: the flag's, else :data:`RAY_ADDRESS_ENV`'s, else None (no cluster)."""
    address = flag if flag else os.environ.get(RAY_ADDRESS_ENV, "").strip()
    return address or None


def executor_for(ray: str | None = None, workers: int | None = None) -> Executor:
    """A :class:`RayExecutor` on the cluster at ``ray`` (or :data:`RAY_ADDRESS_ENV`'s), else a
    :class:`ProcessExecutor` with ``workers`` processes (its default when None: two, as a shared server spares)."""
    address = ray_address(ray)
    if address is not None:
        return RayExecutor(address)
    return ProcessExecutor(workers) if workers is not None else ProcessExecutor()


@contextlib.contextmanager
def joined(ray: str | None = None, workers: int | None = None) -> Iterator[Executor]:
    """:func:`executor_for`, joined to its cluster before it is handed out (a :class:`RayUnavailable` says why
    it cannot be) and left at the end (the cluster keeps running)."""
    executor = executor_for(ray, workers)
    try:
        connect = getattr(executor, "connect", None)
        if connect is not None:
            connect()
        yield executor
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
