"""Multi-turn sessions (frozen): agents and chat users whose context grows turn by turn.

A session arrives (Poisson, gamma with a coefficient of variation for bursts, ``agents`` concurrent agents each
starting a new session when its last one ends, or at a replayed trace's recorded times) and runs ``turns`` turns.
Turn 1 sends ``first_input`` tokens (system prompt, tool definitions, the first message); turn ``k > 1`` sends the
whole context so far (turn ``k - 1``'s input and output) plus ``new_input`` tokens (the user's next message and the
tool output the last turn asked for). Between a turn's last token and the next turn's request the session waits a
think / tool-call gap, gamma-distributed with mean ``gap_s`` and coefficient of variation ``gap_cv`` (1: exponential,
0: fixed). Each turn's output length is drawn from ``output``.

A replayed trace (:mod:`core.config.session_trace`) gives each turn's input and output tokens as recorded, the
session's start and, where the trace has them, the gaps between turns.

Lengths in tokens, times in seconds, rates in sessions per second.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.config.workload import Lengths

SessionArrival = Literal["poisson", "gamma", "agents"]
SESSION_ARRIVALS: tuple[str, ...] = ("poisson", "gamma", "agents")

# Defaults of a coding-agent session, declared once (the page, the CLI and the sizing read them here). A coding
# agent's first request carries its system prompt and tool schemas (Claude Code / SWE-agent style prompts run to a
# few thousand tokens); each later turn adds a tool result or a user message of a few hundred tokens and the model
# answers with a tool call or a short message: SWE-bench agent trajectories average 20-40 turns, chat sessions of
# ShareGPT 2-5 (Mooncake's conversation trace: 8-10k-token inputs, about 350-token outputs per turn).
DEFAULT_SESSION_RATE_PER_S = 0.2
DEFAULT_NUM_SESSIONS = 200
DEFAULT_TURNS = 10
DEFAULT_FIRST_INPUT_TOKENS = 2000
DEFAULT_NEW_INPUT_TOKENS = 400
DEFAULT_TURN_OUTPUT_TOKENS = 300
DEFAULT_GAP_S = 5.0
DEFAULT_AGENTS = 32


class SessionTurn(BaseModel):
    """One turn of a replayed session trace: its session (0-based, in order of first appearance), its recorded
    start [s from the trace's first request], the gap since the previous turn's end [s] when the trace records span
    ends (NaN otherwise), its input and output tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session: int = Field(ge=0)
    start_s: float | None = Field(None, ge=0.0)  # None: the trace has no times (the arrival process starts it)
    gap_s: float | None = Field(None, ge=0.0)
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)


class Sessions(BaseModel):
    """A multi-turn session workload (see the module docstring). The scheduler, the deployment and the engine are
    the shared config's (``workload``); this group says how sessions arrive and how their turns grow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arrival: SessionArrival = "poisson"
    rate_per_s: float = Field(DEFAULT_SESSION_RATE_PER_S, gt=0.0, le=1e6)  # poisson / gamma: sessions per second
    cv: float = Field(1.0, gt=0.0, le=20.0)  # gamma: coefficient of variation of the gaps between sessions
    agents: int = Field(DEFAULT_AGENTS, ge=1, le=1_000_000)  # agents: concurrent agents
    num_sessions: int = Field(DEFAULT_NUM_SESSIONS, ge=1, le=1_000_000)
    turns: Lengths = Lengths(kind="fixed", mean=DEFAULT_TURNS)
    first_input: Lengths = Lengths(kind="lognormal", mean=DEFAULT_FIRST_INPUT_TOKENS, spread=0.5)
    new_input: Lengths = Lengths(kind="lognormal", mean=DEFAULT_NEW_INPUT_TOKENS, spread=1.0)
    output: Lengths = Lengths(kind="lognormal", mean=DEFAULT_TURN_OUTPUT_TOKENS, spread=0.8)
    gap_s: float = Field(DEFAULT_GAP_S, ge=0.0, le=86400.0)  # mean think / tool-call gap between turns
    gap_cv: float = Field(1.0, ge=0.0, le=20.0)  # 0: fixed gaps; 1: exponential
    # the router sends a session's turns to the replica holding its prefix unless that replica is out of balance
    # (SGLang's cache-aware thresholds, core.serving.router.out_of_balance); off: least outstanding requests
    affinity: bool = True
    # a replayed trace: its turns' lengths win over the distributions, its recorded times over the arrivals (a trace
    # without times starts its sessions by ``arrival``)
    trace: tuple[SessionTurn, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.trace is not None and not self.trace:
            raise ValueError("the session trace has no turns")
        if self.trace is not None:
            have = {r.session for r in self.trace}
            if len(have) != 1 + max(have):  # a number skipped: a session of no turns, which no loop can replay
                gap = min(set(range(max(have))) - have)
                raise ValueError(f"the session trace numbers its sessions 0 to {max(have)} but has no turn of {gap}")
        return self

    def with_(self, **changes: Any) -> Self:
        """A validated copy with some fields changed."""
        return type(self).model_validate({**self.model_dump(), **changes})

    @property
    def mean_turns(self) -> float:
        """Mean turns per session (a trace's own)."""
        if self.trace is not None:
            return len(self.trace) / (1 + max(t.session for t in self.trace))
        return float(self.turns.mean)

    @property
    def mean_turn_input_tokens(self) -> float:
        """Mean prompt of a session's turns [tokens]: turn ``k`` (0-based) sends ``F + k (O + N)`` (the first
        request ``F``, each turn's output ``O`` and new tokens ``N`` added), so over ``T`` turns
        ``F + (T - 1) (O + N) / 2``. Defaults: 2,000 + 9 x 700 / 2 = 5,150 tokens over 10 turns."""
        T = self.mean_turns
        return self.first_input.mean + (T - 1) * (self.output.mean + self.new_input.mean) / 2

    @property
    def cached_share(self) -> float:
        """The share of the turns' prompt tokens a cache keeping every prefix holds: turn ``k >= 1`` finds turn
        ``k - 1``'s whole context (its prompt and output) and computes only its ``N`` new tokens, so over ``T`` turns

        .. math:: 1 - (F + (T - 1) N) / (T F + (O + N) T (T - 1) / 2)

        Defaults (F 2,000, N 400, O 300, 10 turns): 1 - 5,600 / 51,500 = 0.891 (the simulator's hit rate on a
        pool that holds them, whole blocks and each turn's last token computed: 0.890)."""
        T = max(1.0, self.mean_turns)
        F, N, O = self.first_input.mean, self.new_input.mean, self.output.mean
        prompts = T * F + (O + N) * T * (T - 1) / 2
        return max(0.0, 1.0 - (F + (T - 1) * N) / prompts) if prompts > 0 else 0.0

    def turn_rate_per_s(self, agents: int, response_s: float) -> float:
        """Turns per second ``agents`` concurrent agents send when each turn's answer takes ``response_s`` [s]: the
        interactive response-time law ``X = N / (Z + R)`` with the think gap ``Z``. 64 agents, 5 s gaps, 0.5 s:
        64 / 5.5 = 11.6 turns/s."""
        return agents / (self.gap_s + response_s)

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` think / tool-call gaps [s]: gamma with mean ``gap_s`` and CV ``gap_cv``."""
        return gamma_gaps(rng, n, self.gap_s, self.gap_cv)


def gamma_gaps(rng: np.random.Generator, n: int, mean_s: float, cv: float) -> np.ndarray:
    """``n`` gamma-distributed gaps [s] of mean ``mean_s`` and coefficient of variation ``cv``: shape ``k = 1 / cv^2``,
    scale ``theta = mean cv^2`` (mean ``k theta``, variance ``k theta^2``, so CV ``1 / sqrt(k)``); ``cv = 1`` is the
    exponential (Poisson arrivals), ``cv = 0`` fixed gaps, ``cv > 1`` bursts. Mean 2 s at CV 2: k = 0.25, theta = 8 s."""
    if mean_s <= 0 or n <= 0:
        return np.zeros(max(n, 0))
    if cv == 0:
        return np.full(n, float(mean_s))
    return rng.gamma(1.0 / (cv * cv), mean_s * cv * cv, size=n)


def agents_as_turns(data: Any, ttft_default: float | None) -> Any:
    """A fleet workload of multi-turn sessions (:class:`core.config.FleetWorkload` with ``agents``): ``agents``
    concurrent agents each running ``sessions`` (the defaults when left out) back to back, sized by the optimizer
    simulating their sessions at ``p95_ttft_s`` per turn (the one target; the peak factor and a scenario's
    ``rate_factor`` scale the agents, its length factors the sessions' tokens). Its ``rate_per_s`` and
    ``input_tokens`` / ``output_tokens`` are its turns' (:meth:`Sessions.turn_rate_per_s` at the TTFT target, the
    mean turn, the output), which the plan's power and energy read; a file that gives them must agree."""
    if not isinstance(data, dict) or data.get("agents") is None:
        return data
    raw = data.get("sessions")
    s = Sessions.model_validate(raw) if isinstance(raw, dict) else (raw or Sessions())
    if s.trace is not None:
        raise ValueError("a workload of agents runs the session distributions: leave out the session trace")
    ttft = data.get("p95_ttft_s", ttft_default)
    if ttft is None:
        raise ValueError("agents are sized for a p95 TTFT per turn: give p95_ttft_s")
    agents = data["agents"]
    if not isinstance(agents, int) or isinstance(agents, bool) or not 1 <= agents <= 1_000_000:
        raise ValueError(f"agents must be a whole number from 1 to 1,000,000, got {agents!r}")
    derived = {
        "rate_per_s": s.turn_rate_per_s(agents, float(ttft)),
        "input_tokens": max(1, round(s.mean_turn_input_tokens)),
        "output_tokens": max(1, round(s.output.mean)),
    }
    for k, v in derived.items():  # a file written from a plan carries them: equal is fine
        if data.get(k) is not None and not math.isclose(float(data[k]), float(v), rel_tol=1e-9):
            raise ValueError(f"a workload of agents takes {k} from its sessions: give agents or {k}, not both")
    if data.get("hourly_profile"):
        raise ValueError("a workload of agents is sized for its agents (times peak_factor): no hourly_profile")
    return {**data, "sessions": s, **derived}
