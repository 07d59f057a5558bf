"""A Ray cluster behind :class:`core.base.Executor`'s ordered ``map``: each task a Ray task, retried when its
worker dies.

``RayExecutor(address)`` joins a running cluster (``ray.init(address=...)``: ``auto`` finds the one started on this
machine, ``HOST:PORT`` names a head's GCS, ``ray://HOST:10001`` goes through Ray Client) on the first map and
stays joined for the life of the process. Every task of a map is submitted at once (Ray schedules them on the
cluster's CPUs) and the results come back in the tasks' order, so the answer is the serial one, byte for byte. A
worker process that dies (killed, out of memory, its node lost) is a system failure Ray retries on another
worker, up to ``max_retries`` times; a task that raises is not retried, and its error ends the map. A map that
is abandoned cancels what has not run.

Ray is an optional extra (``pip install -e ".[ray]"``): this module imports it only when a map runs, and
:class:`RayUnavailable` says how to install it. Every node of the cluster needs RA-BIT installed (the tasks are
RA-BIT functions, sent by reference).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: How long a head's port may take to answer before joining is given up [s].
CONNECT_TIMEOUT_S = 10.0
#: How often Ray re-runs a task whose worker died before giving up (Ray's own default for tasks is 3).
MAX_RETRIES = 3


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached; the message says what to do."""


#: Addresses of a head on this machine's loopback interface.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``HOST:PORT``) names a head on the loopback interface."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host in LOOPBACK


_NOT_INSTALLED = 'Ray is not installed: pip install -e ".[ray]" (or pip install "rabit[ray]")'


def _ray(address: str = "") -> Any:
    """The ``ray`` module. For a loopback head, Ray is told clusters are off before it is imported: otherwise it
    replaces a loopback address with the machine's routable one, where a loopback head does not listen."""
    loopback = is_loopback(address)
    if loopback:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        import ray._private.ray_constants as ray_constants
    except ImportError:
        raise RayUnavailable(_NOT_INSTALLED) from None
    if loopback and ray_constants.ENABLE_RAY_CLUSTER:  # imported before the variable was set
        ray_constants.ENABLE_RAY_CLUSTER = False
    return ray


def _call(fn: Callable[[Any], Any], task: Any) -> Any:  # pragma: no cover - runs in a Ray worker
    """One task in a Ray worker."""
    return fn(task)


class RayExecutor:
    """Runs a map's tasks as Ray tasks on the cluster at ``address`` (see the module docstring)."""

    def __init__(self, address: str, max_retries: int = MAX_RETRIES) -> None:
        self.address = address
        self.max_retries = max_retries

    def resolved(self) -> str:
        """The address to join: ``auto`` read from the file ``ray start`` leaves on this machine
        (``$RAY_TMPDIR/ray/ray_current_cluster``, else ``$TMPDIR/ray/...``, else ``/tmp/ray/...``, Ray's own
        lookup), anything else as given."""
        if self.address != "auto":
            return self.address
        tmp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
        try:
            found = (Path(tmp) / "ray" / "ray_current_cluster").read_text().strip()
        except OSError:
            found = ""
        if not found:
            raise RayUnavailable("no Ray cluster runs on this machine (start one with ray start --head)")
        return found

    def _reachable(self, address: str) -> None:
        """A head's port answers within :data:`CONNECT_TIMEOUT_S`, or :class:`RayUnavailable` (``ray.init`` would
        retry an address where nothing listens for minutes)."""
        if address.startswith("ray://"):
            return  # Ray Client has its own connection timeout
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise RayUnavailable(f"{self.address!r} is not HOST:PORT, ray://HOST:PORT or auto")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise RayUnavailable(f"no Ray head answers at {address}: {exc.strerror or exc}") from None

    def connect(self) -> Any:
        """Join the cluster (once per process); returns the ``ray`` module. Without Ray installed that is said
        first, whatever the address."""
        if importlib.util.find_spec("ray") is None:
            raise RayUnavailable(_NOT_INSTALLED)
        address = self.resolved()
        ray = _ray(address)
        if not ray.is_initialized():
            self._reachable(address)
            try:
                ray.init(
                    address=address,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayUnavailable(f"cannot join the Ray cluster at {self.address}: {exc}") from None
        return ray

    def close(self) -> None:
        """Leave the cluster (the cluster keeps running); a later map joins again."""
        ray = sys.modules.get("ray")  # never imported here: a process that did not join has nothing to leave
        if ray is not None and ray.is_initialized():
            ray.shutdown()

    def workers(self) -> int:
        """The cluster's CPUs (how many tasks run at once)."""
        return int(self.connect().cluster_resources().get("CPU", 0))

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[R]:
        if not tasks:
            return
        ray = self.connect()
        remote = ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)(_call)
        name = getattr(fn, "__name__", "task")
        refs = [remote.options(name=name).remote(fn, t) for t in tasks]
        nxt = 0
        try:
            while nxt < len(refs):
                try:
                    result = ray.get(refs[nxt])
                except ray.exceptions.RayTaskError as exc:  # the task raised: its own error, not Ray's wrapper
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else exc) from None
                nxt += 1
                yield result
        finally:
            for ref in refs[nxt:]:  # abandoned or failed: nothing left running for this map
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - a finished or lost task cannot be cancelled, which is fine
                    pass
