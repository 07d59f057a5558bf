"""Where a replica's requests come from: its own Poisson stream or closed loop of users (one replica simulated
alone), drawn from the workload's :class:`~core.config.Draws` in request order."""

from __future__ import annotations

import heapq
import math

from core.config import Draws, SimSpec

INF = math.inf


class ArrivalStream:
    """The arrivals of one replica simulated alone (the engine's base: it reads ``next_arr`` in its hot loop)."""

    spec: SimSpec
    draws: Draws
    issued: int
    arrivals: list[tuple[float, int]]
    next_poisson: float
    next_arr: float

    def _issue_cap(self, n: int) -> int:
        cap = self.spec.num_requests
        return n if cap is None else min(n, cap)

    def next_arrival_s(self) -> float:
        return self.next_arr

    def _pop_arrival(self) -> float:
        s = self.spec
        if s.arrival == "poisson":
            t = self.next_poisson
            n = self.issued + 1
            if s.num_requests is not None and n >= s.num_requests:
                self.next_poisson = INF
            else:
                self.draws.ensure(n + 1)
                nxt = t + self.draws.gaps[n]
                self.next_poisson = nxt if (s.duration_s is None or nxt <= s.duration_s) else INF
            self.next_arr = self.next_poisson
            return t
        t, _ = heapq.heappop(self.arrivals)
        self.next_arr = self.arrivals[0][0] if self.arrivals else INF
        return t

    def _user_done(self, rid: int, t_end: float) -> None:
        """Closed loop: the user of request ``rid`` thinks, then sends the next request."""
        s = self.spec
        if s.arrival != "closed":
            return
        if s.num_requests is not None and self.issued + len(self.arrivals) >= s.num_requests:
            return
        self.draws.ensure(rid + 1)
        t = t_end + self.draws.gaps[rid]
        if s.duration_s is not None and t > s.duration_s:
            return
        heapq.heappush(self.arrivals, (t, self.issued + len(self.arrivals)))
        self.next_arr = self.arrivals[0][0]

    def _next_request(self) -> tuple[float, int, int, int]:
        """The next arrival: (time, prompt tokens, output tokens, prompt tokens already in the prefix cache)."""
        t = self._pop_arrival()
        rid = self.issued
        self.draws.ensure(rid + 1)
        return t, self.draws.inp[rid], self.draws.out[rid], 0
