"""Multi-turn sessions on a deployment: each session's context cached on its replica between turns, evicted under
pressure, its turns routed to the replica that holds it.

The replicas are the serving simulator's (:class:`core.serving.sim.replicas.Replica`, the one step-time body of
:class:`core.physics.StepModel`); this module adds three things:

* **the session prefix cache.** When a turn ends, the blocks of its context (input + output - 1 tokens: the last
  token's KV is never computed) are freed into the replica's free block queue and stay there as a cached prefix.
  vLLM V1's KV cache manager appends freed blocks to the tail of its free queue (a request's last block first, so
  its first blocks are the last to go) and allocates from the head, evicting the cached block it takes
  (``vllm/v1/core/block_pool.py``, ``FreeKVCacheBlockQueue``; docs "Automatic Prefix Caching"). So the cache is an
  LRU over freed prefixes whose room is the pool's free blocks: when running requests take blocks, the least
  recently freed prefix loses its tail blocks first. :class:`PrefixCache` keeps that order and is trimmed to the
  free blocks whenever the replica ends a step, a turn ends or a turn is routed to it.
* **hits.** A turn routed to a replica holding its session's prefix finds those tokens cached (whole blocks, at most
  all but its last prompt token); the engine's admission takes them back as computed and prefills only the rest
  (:meth:`core.serving.sim.engine.Engine._hit`), so an evicted prefix is recomputed on the next turn.
* **session affinity.** A session's turns go to the replica that served its last turn unless that replica is out
  of balance against the least loaded one (SGLang's cache-aware router thresholds,
  :func:`core.serving.router.out_of_balance`); a new session, or one passed over, goes to the least loaded replica.

This is the Python loop; :mod:`core.serving.sim.jit_sessions` is the same loop compiled, which runs the common
shapes (:func:`core.serving.session_compiled.fallback_reason`), byte for byte.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from core.config import Draws, Sessions, SimSpec
from core.serving.router import least_loaded, make_policy, out_of_balance
from core.serving.session_compiled import SessionRun
from core.serving.session_plan import SessionPlan, SessionStream
from core.serving.sim.engine import DONE
from core.serving.sim.pool import Pool
from core.serving.sim.replicas import Replica, ReplicaSet
from core.serving.sim.timing import Timing


class PrefixCache:
    """One replica's cached session prefixes in free-queue order (least recently freed first) [blocks].

    >>> c = PrefixCache(); c.put(1, 4); c.put(2, 3); c.trim(5)
    >>> list(c.blocks.items()), c.evicted_blocks, c.evicted
    ([(2, 3)], 4, [1])
    """

    def __init__(self) -> None:
        self.blocks: OrderedDict[int, int] = OrderedDict()  # session -> cached blocks, LRU first
        self.total = 0
        self.evicted_blocks = 0  # blocks taken for other allocations
        self.evicted: list[int] = []  # sessions whose whole prefix went, in eviction order

    def put(self, session: int, blocks: int) -> None:
        """``session``'s prefix of ``blocks`` blocks freed now (the tail of the queue); an older one is replaced."""
        old = self.blocks.pop(session, 0)
        self.total -= old
        if blocks > 0:
            self.blocks[session] = blocks
            self.total += blocks

    def take(self, session: int) -> int:
        """The blocks of ``session``'s cached prefix, taken out of the queue (its turn will hold them)."""
        b = self.blocks.pop(session, 0)
        self.total -= b
        return b

    def trim(self, free_blocks: float) -> None:
        """Evict from the head until the cached blocks fit in ``free_blocks``: the least recently freed prefix loses
        its tail blocks first, and leaves the queue when none are left."""
        over = self.total - max(0, math.floor(free_blocks + 1e-9))
        while over > 0 and self.blocks:
            s, b = next(iter(self.blocks.items()))
            cut = min(b, over)
            over -= cut
            self.total -= cut
            self.evicted_blocks += cut
            if cut == b:
                del self.blocks[s]
                self.evicted.append(s)
            else:
                self.blocks[s] = b - cut


class SessionReplica(Replica):
    """A replica that records the cached tokens each turn found when first admitted."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hits: dict[int, int] = {}

    def _admit(self, rid: int, hit: int = 0, at: int = 0) -> None:
        if rid not in self.hits:
            self.hits[rid] = hit
        super()._admit(rid, hit, at)


class SessionSet(ReplicaSet):
    """The deployment's loop with sessions (see the module docstring)."""

    def __init__(self, spec: SimSpec, sessions: Sessions, draws: Draws, front: list[Replica]) -> None:
        super().__init__(spec, draws, make_policy("least-outstanding", len(front), spec.seed), front)
        self.plan = SessionPlan(sessions, spec, draws)
        self.stream = SessionStream(self.plan)  # type: ignore[assignment]
        self.affinity = sessions.affinity
        self.caching = spec.prefix_caching and all(e.keep_cache for e in front)
        self.caches = [PrefixCache() for _ in front]
        self.home: dict[int, int] = {}
        self._last = -1
        self.session_of: list[int] = []
        self.turn_of: list[int] = []
        self.replica_of: list[int] = []

    @property
    def ended_s(self) -> list[float]:
        """When each session ended [s] (its last turn's end, or the end of a turn that failed; NaN: never)."""
        return self.stream.ended_s  # type: ignore[attr-defined]

    def _pick(self, session: int) -> int:
        load = self.front[0].load
        home = self.home.get(session) if self.affinity else None
        if home is None or out_of_balance(load[home], min(load)):
            home = least_loaded(load, (self._last + 1) % len(load))
            self._last = home
        self.home[session] = home
        return home

    def _trim(self, j: int) -> None:
        eng = self.front[j]
        self.caches[j].trim(eng.pool_blocks - eng.used())

    def _route(self) -> None:
        st: SessionStream = self.stream  # type: ignore[assignment]
        t, s, k = st.pop()
        gid = st.issued
        st.issued += 1
        j0 = self.plan.first[s] + k
        i, o = self.plan.inp[j0], self.plan.out[j0]
        self.session_of.append(s)
        self.turn_of.append(k)
        j = self._pick(s)
        self.replica_of.append(j)
        hit = 0
        if self.caching and k > 0:
            self._trim(j)
            B = self.front[j].block_tokens
            hit = min(self.caches[j].take(s) * B, ((i - 1) // B) * B)
        eng = self.front[j]
        eng.deliver(t, i, o, hit, gid)
        self._wake(eng, t)

    def _pump(self, eng: Replica) -> None:
        c = self.caches[eng.index]
        if c.total:  # a step ended or a turn came: running requests may have taken cached blocks
            free = eng.pool_blocks - eng.used()
            if c.total > free:
                c.trim(free)
        super()._pump(eng)

    def _ended(self, eng: Replica) -> None:
        ended, eng.ended = eng.ended, []
        st: SessionStream = self.stream  # type: ignore[assignment]
        for rid in ended:
            gid = eng.gids[rid]
            s, k = self.session_of[gid], self.turn_of[gid]
            done = eng.status[rid] == DONE
            if done and self.caching:
                self.caches[eng.index].put(s, (eng.inp[rid] + eng.out[rid] - 1) // eng.block_tokens)
                self._trim(eng.index)
            st.turn_ended(s, k, eng.fin_s[rid], done)

    def outcome(self) -> SessionRun:
        """What the finished run leaves (as the compiled loop leaves it)."""
        merged, _, _ = self.records()
        n = len(self.session_of)
        hits = np.zeros(n, dtype=np.int64)
        for eng in self.front:
            assert isinstance(eng, SessionReplica)
            for rid, h in eng.hits.items():
                hits[eng.gids[rid]] = h
        return SessionRun(
            records=merged,
            plan=self.plan,
            session=np.asarray(self.session_of, dtype=np.int64),
            turn=np.asarray(self.turn_of, dtype=np.int64),
            replica=np.asarray(self.replica_of, dtype=np.int64),
            hit_tokens=hits,
            ended_s=np.array(self.ended_s, dtype=np.float64),
            evicted_prefixes=sum(len(c.evicted) for c in self.caches),
            evicted_blocks=sum(c.evicted_blocks for c in self.caches),
            block_tokens=self.front[0].block_tokens,
        )


def build_sessions(spec: SimSpec, sessions: Sessions, tm: Timing, pool: Pool, replicas: int) -> SessionSet:
    """The loop of ``sessions`` on ``replicas`` replicas of one timing and KV pool, ready to :meth:`~SessionSet.run`
    (``spec``: the scheduler, and session ``s``'s first turn as request ``s`` of a plain run)."""
    draws = Draws(spec, np.random.default_rng(spec.seed))
    load = [0] * replicas
    front: list[Replica] = [SessionReplica(k, spec, tm, pool, draws, load) for k in range(replicas)]
    return SessionSet(spec, sessions, draws, front)
