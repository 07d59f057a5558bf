"""What each session of a run will send, drawn before it runs, and when its turns arrive as the run unfolds.

:class:`SessionPlan` holds every session's turns: turn 1's input and output from the workload's
:class:`~core.config.Draws` (session ``s`` is request ``s`` of a plain run: its Poisson gap, prompt and output), the
later turns' new tokens, outputs and gaps from a generator of their own, so a run of one-turn sessions draws exactly
what a plain run of as many requests draws. Turn ``k``'s input is turn ``k - 1``'s input and output plus the new
tokens: the whole context so far, as a chat or agent client sends it.

:class:`SessionStream` is the deployment's arrival stream: a heap of the turns due, each session's next turn pushed
when its last one ends (a closed loop per session).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from core.config import Draws, Sessions, SimSpec, gamma_gaps

INF = math.inf
#: The tag of the later turns' generator (the seed's second word: the workload's draws stay put).
_TURN_STREAM = 0x5E55


class SessionPlan:
    """Every session's turns (see the module docstring): ``starts[s]`` its start [s] (NaN: an agent starts it),
    ``first[s]`` the index of its first turn in the per-turn arrays, ``turns[s]`` its turns; per turn ``inp`` and
    ``out`` [tokens], ``gap`` the wait after the previous turn's end [s] (NaN: ``at`` says when it arrives), ``at``
    a recorded start [s] (NaN: none)."""

    def __init__(self, sessions: Sessions, spec: SimSpec, draws: Draws) -> None:
        rng = np.random.default_rng([spec.seed, _TURN_STREAM])
        self.sessions = sessions
        if sessions.trace is not None:
            self._from_trace(sessions, spec, draws, rng)
        else:
            self._drawn(sessions, spec, draws, rng)
        # plain lists: the event loop reads them once a turn (numpy scalar indexing costs several times more)
        self.first: list[int] = np.concatenate(([0], np.cumsum(self.turns)[:-1])).astype(np.int64).tolist()
        self.turn_counts: list[int] = np.asarray(self.turns, dtype=np.int64).tolist()
        self.agent_gaps = gamma_gaps(rng, self.count, sessions.gap_s, sessions.gap_cv).tolist()

    @property
    def count(self) -> int:
        return len(self.turns)

    def _starts(self, sessions: Sessions, draws: Draws, rng: np.random.Generator, n: int) -> list[float]:
        if sessions.arrival == "agents":
            return [math.nan] * n
        if sessions.arrival == "poisson":
            draws.ensure(n)
            gaps = draws.gaps[:n]
        else:
            gaps = gamma_gaps(rng, n, 1.0 / sessions.rate_per_s, sessions.cv).tolist()
        out, t = [], 0.0
        for k, g in enumerate(gaps):  # the plain run's clock: the first gap, then t + gap, in that order
            t = g if k == 0 else t + g
            out.append(t)
        return out

    def _drawn(self, sessions: Sessions, spec: SimSpec, draws: Draws, rng: np.random.Generator) -> None:
        n = sessions.num_sessions
        self.starts = self._starts(sessions, draws, rng, n)
        turns = sessions.turns.draw(rng, n)
        later = int(turns.sum()) - n
        new, out, gap = sessions.new_input.draw(rng, later), sessions.output.draw(rng, later), sessions.gaps(rng, later)
        draws.ensure(n)
        # per turn, in session order: a session's first turn is the plain run's request, each later one adds the
        # previous turn's output and its new tokens to the context (a running sum within each session)
        t = turns.astype(np.int64)
        first = np.concatenate(([0], np.cumsum(t)[:-1]))
        is_first = np.zeros(int(t.sum()), dtype=bool)
        is_first[first] = True
        out_all = np.empty(is_first.size, dtype=np.int64)
        out_all[first] = np.asarray(draws.out[:n], dtype=np.int64)
        out_all[~is_first] = out.astype(np.int64)
        grow = np.empty(is_first.size, dtype=np.int64)
        grow[first] = np.asarray(draws.inp[:n], dtype=np.int64)
        later_at = np.flatnonzero(~is_first)
        grow[later_at] = out_all[later_at - 1] + new.astype(np.int64)
        total = np.cumsum(grow)
        inp_all = total - np.repeat(total[first] - grow[first], t)
        gap_all = np.full(is_first.size, math.nan)
        gap_all[later_at] = gap
        inp_l: list[int] = inp_all.tolist()
        out_l: list[int] = out_all.tolist()
        gap_l: list[float] = gap_all.tolist()
        self.turns = turns.astype(np.int64)
        self.inp, self.out, self.gap = inp_l, out_l, gap_l
        self.at = [math.nan] * len(inp_l)

    def _from_trace(self, sessions: Sessions, spec: SimSpec, draws: Draws, rng: np.random.Generator) -> None:
        rows = sessions.trace or ()
        n = 1 + max(r.session for r in rows)
        counts = np.zeros(n, dtype=np.int64)
        for r in rows:
            counts[r.session] += 1
        ordered = sorted(rows, key=lambda r: r.session)  # stable: each session's turns stay in order
        timed = all(r.start_s is not None for r in rows)
        drawn = self._starts(sessions, draws, rng, n) if not timed else [math.nan] * n
        self.starts = [math.nan] * n
        firsts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        gaps = sessions.gaps(rng, len(ordered)).tolist()
        self.inp = [r.input_tokens for r in ordered]
        self.out = [r.output_tokens for r in ordered]
        self.at = [r.start_s if (timed and r.start_s is not None) else math.nan for r in ordered]
        self.gap = [r.gap_s if r.gap_s is not None else (math.nan if timed else gaps[k]) for k, r in enumerate(ordered)]
        for s in range(n):
            self.starts[s] = self.at[int(firsts[s])] if timed else drawn[s]
        self.turns = counts


class SessionStream:
    """The deployment's arrivals: each session's turns in time order, a turn pushed when the one before it ends.

    Stands in for :class:`core.serving.sim.arrivals.ArrivalStream` in :class:`core.serving.sim.replicas.ReplicaSet`
    (``next_arr``, ``issued``); the session loop tells it when a turn ends (:meth:`turn_ended`)."""

    def __init__(self, plan: SessionPlan) -> None:
        self.plan = plan
        self.issued = 0
        self.seq = 0
        self.heap: list[tuple[float, int, int, int]] = []  # (time, seq, session, turn)
        self.started = 0
        self.ended_s = [math.nan] * plan.count
        s = plan.sessions
        if s.arrival == "agents" and s.trace is None:
            m = min(s.agents, plan.count)
            for a in range(m):  # the agents' first sessions spread over one mean gap
                self._start(a * s.gap_s / m)
        else:
            for k in range(plan.count):
                self._push(plan.starts[k], k, 0)
            self.started = plan.count
        self.next_arr = self.heap[0][0] if self.heap else INF

    def _push(self, t: float, session: int, turn: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, session, turn))

    def _start(self, t: float) -> None:
        self._push(t, self.started, 0)
        self.started += 1

    def pop(self) -> tuple[float, int, int]:
        """The next turn due: (time, session, turn)."""
        t, _, s, k = heapq.heappop(self.heap)
        self.next_arr = self.heap[0][0] if self.heap else INF
        return t, s, k

    def turn_ended(self, session: int, turn: int, t_end: float, done: bool) -> None:
        """Turn ``turn`` of ``session`` ended at ``t_end``: its next turn is due after its gap (or at its recorded
        start, not before this end); a session whose turn failed, or that has no turn left, is over (an agent then
        starts its next session after a gap)."""
        p = self.plan
        if done and turn + 1 < p.turn_counts[session]:
            j = p.first[session] + turn + 1
            g = p.gap[j]
            t = t_end + g if not math.isnan(g) else max(p.at[j], t_end)
            self._push(t, session, turn + 1)
        else:
            self.ended_s[session] = t_end
            if p.sessions.arrival == "agents" and p.sessions.trace is None and self.started < p.count:
                self._start(t_end + p.agent_gaps[session])
        self.next_arr = self.heap[0][0] if self.heap else INF
