"""How a deployment's router assigns each arriving request to one of its replicas.

A policy is a small class: it is built once per simulation with the replica count and a seed, and
:meth:`Policy.pick` is called once per request, in arrival order, with the request and the number of requests
each replica has in flight at that instant (routed to it and not yet ended: exact, since the deployment's
replicas step side by side, :mod:`core.serving.sim.replicas`). A policy may keep its own state (a counter, where
each prefix went); it never sees the future. Add a policy by subclassing :class:`Policy`, naming it in
:data:`core.base.choices.RouterPolicy` and registering it in :data:`POLICIES`.

The four policies and the production routers they mimic (sources: the SGLang router's ``router_args.py`` in the
``sglang-router`` 0.3.2 wheel and docs/advanced_features/router.md; llm-d inference scheduler
docs/architecture.md and its scorer READMEs; vLLM production-stack ``routing_logic.py``; kubernetes.io
"Virtual IPs and Service Proxies"):

* ``round-robin``: replica ``k mod R`` for the k-th request. A Kubernetes Service under kube-proxy's IPVS ``rr``
  scheduler (iptables mode picks at random, which behaves like this on average), the vLLM production-stack
  router's ``roundrobin`` and the SGLang router's ``round_robin``.
* ``least-outstanding`` (the default): the replica with the fewest requests in flight; ties go to the next replica
  after the last one picked. llm-d's ``active-request-scorer`` / ``queue-scorer`` (shortest queue scores 1.0),
  the shortest-queue fallback of SGLang's ``cache_aware``, Envoy's ``LEAST_REQUEST``.
* ``power-of-two``: two distinct replicas drawn at random (a generator of its own, seeded from the workload's
  seed, so the arrival and length draws do not move), the less loaded of the two. The SGLang router's
  ``power_of_two`` ("samples two workers and picks the lighter one").
* ``prefix-affinity``: a request of prefix group ``g`` goes to the replica that served ``g`` before (its prefix
  is in that replica's cache), the first request of a group to the least loaded replica; when the load is out
  of balance, by both of the SGLang router's default thresholds (``max - min > 64`` and ``max > 1.5 min``
  requests in flight), the least loaded replica instead. SGLang's ``cache_aware`` (default), llm-d's
  ``prefix-cache-scorer``, production-stack's ``prefixaware`` ("we assume that there is no eviction of prefix
  cache": neither does this one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import numpy as np

#: SGLang router defaults (``--balance-abs-threshold 64``, ``--balance-rel-threshold 1.5``, sglang-router 0.3.2).
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
#: Random draws a seeded policy takes from its generator at a time.
_DRAW_CHUNK = 4096


class Request(NamedTuple):
    """What a router sees of an arriving request."""

    rid: int  # request number in arrival order
    arrival_s: float
    input_tokens: int
    output_tokens: int
    group: int  # prefix group (-1: none)


class Policy(ABC):
    """One routing policy: :meth:`pick` returns the replica (0 .. replicas - 1) for each request."""

    name: ClassVar[str]
    mimics: ClassVar[str]

    def __init__(self, replicas: int, seed: int = 0) -> None:
        if replicas < 1:
            raise ValueError(f"a deployment needs at least one replica, got {replicas}")
        self.replicas = replicas
        self.seed = seed

    @abstractmethod
    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        """The replica for ``req``; ``outstanding[j]`` = requests in flight on replica ``j`` now."""


def least_loaded(outstanding: Sequence[int], start: int) -> int:
    """The replica with the fewest requests in flight; among equals, the first at or after ``start`` (cyclic)."""
    m = min(outstanding)
    n = len(outstanding)
    for k in range(n):
        j = (start + k) % n
        if outstanding[j] == m:
            return j
    return 0  # unreachable


class RoundRobin(Policy):
    name = "round-robin"
    mimics = "Kubernetes Service (kube-proxy IPVS rr), vLLM production-stack roundrobin, SGLang router round_robin"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self._next = 0

    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        j = self._next
        self._next = (j + 1) % self.replicas
        return j


class LeastOutstanding(Policy):
    name = "least-outstanding"
    mimics = "llm-d active-request / queue scorers, SGLang cache_aware's shortest-queue fallback, Envoy LEAST_REQUEST"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self._last = -1

    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        j = least_loaded(outstanding, (self._last + 1) % self.replicas)
        self._last = j
        return j


class PowerOfTwo(Policy):
    name = "power-of-two"
    mimics = "SGLang router power_of_two (two workers sampled, the lighter one picked)"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self._rng = np.random.default_rng([seed, 0x524F55])  # its own stream: the workload's draws stay put
        self._pairs: list[tuple[int, int]] = []
        self._at = 0

    def _draw(self) -> None:
        n = self.replicas
        a = self._rng.integers(0, n, size=_DRAW_CHUNK)
        b = self._rng.integers(0, max(1, n - 1), size=_DRAW_CHUNK)
        b = b + (b >= a)  # a second replica, different from the first
        self._pairs = list(zip(a.tolist(), b.tolist()))
        self._at = 0

    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        if self.replicas == 1:
            return 0
        if self._at >= len(self._pairs):
            self._draw()
        a, b = self._pairs[self._at]
        self._at += 1
        return b if outstanding[b] < outstanding[a] else a


class PrefixAffinity(Policy):
    name = "prefix-affinity"
    mimics = "SGLang router cache_aware (its default), llm-d prefix-cache-scorer, vLLM production-stack prefixaware"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self.owner: dict[int, int] = {}
        self._last = -1

    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        lo, hi = min(outstanding), max(outstanding)
        imbalanced = hi - lo > BALANCE_ABS_THRESHOLD and hi > BALANCE_REL_THRESHOLD * lo
        j = self.owner.get(req.group) if req.group >= 0 else None
        if j is None or imbalanced:
            j = least_loaded(outstanding, (self._last + 1) % self.replicas)
            self._last = j
            if req.group >= 0 and req.group not in self.owner:
                self.owner[req.group] = j
        return j


#: Every policy by its name (:data:`core.base.choices.ROUTERS`).
POLICIES: dict[str, type[Policy]] = {p.name: p for p in (RoundRobin, LeastOutstanding, PowerOfTwo, PrefixAffinity)}


def make_policy(name: str, replicas: int, seed: int = 0) -> Policy:
    """The policy called ``name`` for ``replicas`` replicas (``ValueError`` naming the choices otherwise)."""
    if name not in POLICIES:
        raise ValueError(f"unknown router {name!r}; use one of {', '.join(POLICIES)}")
    return POLICIES[name](replicas, seed)
