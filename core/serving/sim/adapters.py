"""The adapters of one simulated replica: which adapter each request carries, which are on the GPU, which in host
memory, and what bringing one in costs.

vLLM's scheduler and LoRA manager, as the engine below follows them (``vllm/v1/core/sched/scheduler.py``,
``vllm/lora/models.py``, ``vllm/lora/worker_manager.py``):

* A batch holds at most ``max_loras`` distinct adapters: a waiting request whose adapter is not among the running
  requests' while that many are running is skipped (it keeps its place in the queue) and the scheduler goes on to
  the next waiting request ("Scheduling would exceed max_loras, skip").
* The GPU holds ``max_loras`` adapter slots. An adapter a newly admitted request needs that is not in a slot
  replaces the least recently used adapter no running request uses (``LRUCacheWorkerLoRAManager``); its weights
  come from host memory over the host link, or, when it is not among the ``max_cpu_loras`` adapters host memory
  holds (least recently used evicted), from storage first. The copy happens before the iteration runs, so the
  whole batch waits for it.

Each request's adapter is drawn from the traffic's popularity with a generator of its own, seeded from the
workload's seed, so the arrivals and lengths are the same draws with and without adapters.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from typing import Any

import numpy as np

#: Offset of the adapter draws' stream from the workload's seed (a generator of their own).
ADAPTER_STREAM = 0x4C6F5241  # "LoRA"
_CHUNK = 8192


class AdapterDraws:
    """Which adapter each request of a run carries, by its number in the run's arrival order: drawn from the
    traffic's popularity (a generator of its own) or read from a trace that names them. A deployment shares one
    among its replicas (its router reads it too), so every router sees the same requests carry the same adapters."""

    def __init__(self, popularity: tuple[float, ...], seed: int, trace: tuple[int, ...] | None = None) -> None:
        self.n = len(popularity)
        self.rng = np.random.default_rng([seed, ADAPTER_STREAM])
        self.cdf = np.cumsum(np.asarray(popularity, dtype=float))
        self.cdf[-1] = 1.0
        self.trace = trace
        self.of: list[int] = []

    def adapter(self, i: int) -> int:
        """The adapter of request ``i`` (drawn on first use, in request order)."""
        while len(self.of) <= i:
            if self.trace is not None:
                start = len(self.of)
                self.of.extend(self.trace[(start + k) % len(self.trace)] for k in range(_CHUNK))
            else:
                u = self.rng.random(_CHUNK)
                self.of.extend(np.searchsorted(self.cdf, u, side="right").tolist())
        return self.of[i]


class Adapters:
    """Residency and loads of the adapters of one replica (the engine calls it; it owns no clock)."""

    def __init__(
        self,
        draws: AdapterDraws,
        ranks: tuple[int, ...],
        slots: int,
        host_slots: int,
        load_host_s: dict[int, float],
        load_storage_s: dict[int, float],
        gids: list[int] | None = None,
    ) -> None:
        self.draws = draws
        self.gids = gids  # a deployment's replica: the deployment's number of each of its requests (None: the same)
        self.ranks = ranks
        self.slots = max(1, slots)
        self.host_slots = max(self.slots, host_slots)
        self.load_host_s, self.load_storage_s = load_host_s, load_storage_s
        self.gpu: OrderedDict[int, None] = OrderedDict()  # adapters in GPU slots, least recently used first
        self.host: OrderedDict[int, None] = OrderedDict()  # adapters in host memory, least recently used first
        self.running: dict[int, int] = {}  # adapter -> running requests that carry it
        self.loads = 0
        self.storage_loads = 0
        self.load_s = array("d")  # each load's time
        self.blocked_since: dict[int, float] = {}  # request -> when it was first skipped for want of a slot
        self.wait_s: dict[int, float] = {}  # request -> time it waited for a slot

    def adapter(self, rid: int) -> int:
        """The adapter request ``rid`` (this replica's number) carries."""
        return self.draws.adapter(rid if self.gids is None else self.gids[rid])

    def admissible(self, rid: int, now_s: float) -> bool:
        """Whether request ``rid`` may join the batch: its adapter is running, or a slot is free of running ones.
        A request turned away is marked blocked from now on (its wait for a slot is counted)."""
        a = self.adapter(rid)
        if a in self.running or len(self.running) < self.slots:
            return True
        self.blocked_since.setdefault(rid, now_s)
        return False

    def acquire(self, rid: int, now_s: float) -> float:
        """Request ``rid`` is admitted: its adapter joins the running set; the time to load it into a slot [s] (0 when
        it is there already)."""
        since = self.blocked_since.pop(rid, None)
        if since is not None:
            self.wait_s[rid] = self.wait_s.get(rid, 0.0) + now_s - since
        a = self.adapter(rid)
        self.running[a] = self.running.get(a, 0) + 1
        if a in self.gpu:
            self.gpu.move_to_end(a)
            return 0.0
        if len(self.gpu) >= self.slots:  # the least recently used slot no running request needs
            victim = next(x for x in self.gpu if x not in self.running)
            del self.gpu[victim]
        self.gpu[a] = None
        rank = self.ranks[a % len(self.ranks)]
        if a in self.host:
            self.host.move_to_end(a)
            t = self.load_host_s[rank]
        else:
            if len(self.host) >= self.host_slots:  # host memory keeps every adapter on the GPU
                victim = next(x for x in self.host if x not in self.gpu)
                del self.host[victim]
            self.host[a] = None
            t = self.load_storage_s[rank]
            self.storage_loads += 1
        self.loads += 1
        self.load_s.append(t)
        return t

    def release(self, rid: int) -> None:
        """Request ``rid`` leaves the running set (finished, preempted or timed out)."""
        a = self.adapter(rid)
        left = self.running[a] - 1
        if left:
            self.running[a] = left
        else:
            del self.running[a]

    @property
    def distinct(self) -> int:
        """Distinct adapters among the running requests (what one iteration reads)."""
        return len(self.running)

    def waits(self, n: int) -> array:
        """Each request's wait for an adapter slot [s] (NaN for a request never turned away)."""
        return array("d", (self.wait_s.get(i, math.nan) for i in range(n)))

    def records(self, n: int, distinct_s: float) -> dict[str, Any]:
        """The adapter fields of the engine's records for ``n`` requests (``distinct_s``: busy time x distinct
        adapters, summed)."""
        return {
            "adapter": array("l", (self.adapter(i) for i in range(n))),
            "adapter_load_s": self.load_s,
            "adapter_storage_loads": self.storage_loads,
            "adapter_wait_s": self.waits(n),
            "adapter_distinct_s": distinct_s,
            "adapter_engines": 1,
        }
