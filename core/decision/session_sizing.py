"""How many GPUs of which kind serve ``N`` concurrent agents at a p95 TTFT per turn, and at what cost.

For each GPU kind, the config's replica (its model, TP, PP, formats and scheduler) on that GPU serves ``N`` agents,
each running the session workload back to back (:class:`core.config.Sessions` with ``arrival="agents"``), in the
session simulator (:func:`core.serving.simulate_sessions`: prefix caching, eviction and session affinity included).
The replica count is searched: doubled from 1 until the p95 TTFT over every turn meets the target, then bisected
between the last count that missed and the first that met (more replicas never hold fewer sessions' prefixes
and never queue longer, so the p95 falls with the count). A kind whose replica cannot hold the model's weights and
a KV cache is left out with the reason, as is one without a price row.

The optimizer sizes for sessions too (:func:`session_goal`): its search over GPU kinds, layouts and precisions with
each candidate simulated as ``N`` agents' sessions (:func:`simulate_session_candidate`), so the answer is the
cheapest configuration of any shape, not only the config's replica on each kind. Its screen reads an equivalent
independent-request workload, which seeds the replica count each simulation starts from (the simulations decide):
turns at the mean length of a session's turns, at the rate of the interactive response-time law ``X = N / (Z + R)``
with the think gap ``Z`` and each turn's response ``R`` taken at the TTFT target, and the share of their prompts a
cache that kept every prefix would hold (:attr:`core.config.Sessions.cached_share`), so the screen's batch-1 TTFT is the best case a
session sees and prunes only a candidate that misses even then. Sessions have no rate that bounds the replicas
from below (agents send turns as fast as they are answered), so the optimizer's bisection may go down to one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core import catalog
from core.base import WorkBudget
from core.config import Lengths, RabitConfig, Sessions, SimSpec
from core.decision.goal import Candidate, ServingGoal, meets
from core.serving import SessionResult, simulate_sessions

#: GPU kinds searched when none are named: the catalog's current NVIDIA and AMD data-centre parts.
SIZING_GPUS = ("h100-sxm", "h200-sxm", "b200", "mi300x", "l40s")
#: Sessions each agent runs in a sizing run (the first ones start cold; three give a warm steady state).
SESSIONS_PER_AGENT = 3


@dataclass(frozen=True)
class SessionOption:
    """One GPU kind's answer: the fewest replicas meeting the target (or why none does)."""

    gpu: str
    replicas: int | None  # None: no count up to the ceiling meets the target, or the kind cannot run the model
    gpus: int | None
    usd_per_hour: float | None
    ttft_p95_s: float | None
    cost_per_agent_hour_usd: float | None
    prefix_hit_rate: float | None
    reason: str  # "meets", or why not

    @property
    def meets(self) -> bool:
        return self.reason == "meets"


@dataclass(frozen=True)
class SessionSizing:
    """The options of every GPU kind, cheapest meeting first; ``answer`` the cheapest that meets (None: none)."""

    agents: int
    ttft_p95_target_s: float
    options: tuple[SessionOption, ...]

    @property
    def answer(self) -> SessionOption | None:
        return next((o for o in self.options if o.meets), None)


def agent_sessions(sessions: Sessions, agents: int) -> Sessions:
    """The sizing workload: ``agents`` agents running the session distributions back to back."""
    if sessions.trace is not None:
        raise ValueError("size for agents from the session distributions: a replayed trace has its own arrivals")
    return sessions.with_(arrival="agents", agents=agents, num_sessions=max(agents * SESSIONS_PER_AGENT, agents))


def _meets(r: SessionResult, target_s: float) -> bool:
    return r.ttft_p95_s is not None and r.ttft_p95_s <= target_s


def size_sessions(
    cfg: RabitConfig,
    sessions: Sessions,
    *,
    agents: int,
    ttft_p95_s: float,
    gpus: tuple[str, ...] = SIZING_GPUS,
    max_replicas: int = 256,
    budget: WorkBudget | None = None,
    progress: Callable[[float], None] | None = None,
) -> SessionSizing:
    """The fewest replicas of each GPU kind in ``gpus`` that serve ``agents`` concurrent agents at p95 TTFT per turn
    ``<= ttft_p95_s`` [s], and their cost (see the module docstring), cheapest meeting first."""
    if agents < 1:
        raise ValueError(f"agents must be at least 1, got {agents}")
    if not ttft_p95_s > 0:
        raise ValueError(f"the p95 TTFT target must be a positive number of seconds, got {ttft_p95_s}")
    work = agent_sessions(sessions, agents)
    options = []
    for n, gpu in enumerate(gpus):
        options.append(_size_one(cfg, work, gpu, ttft_p95_s, max_replicas, budget))
        if progress is not None:
            progress((n + 1) / len(gpus))
    options.sort(key=lambda o: (not o.meets, o.usd_per_hour if o.usd_per_hour is not None else float("inf"), o.gpu))
    return SessionSizing(agents=agents, ttft_p95_target_s=ttft_p95_s, options=tuple(options))


def _size_one(
    cfg: RabitConfig, work: Sessions, gpu: str, target_s: float, max_replicas: int, budget: WorkBudget | None
) -> SessionOption:
    if gpu not in catalog.gpus():
        return SessionOption(
            gpu, None, None, None, None, None, None, f"unknown GPU; known: {', '.join(catalog.gpus())}"
        )
    c = cfg.with_(gpu=gpu, gpus_per_node=max(cfg.replica_gpus, 1), nodes=1, workload=cfg.workload.with_(replicas=None))
    if catalog.gpu_price(gpu, catalog.prices()) is None:
        return SessionOption(gpu, None, None, None, None, None, None, "no on-demand price in the catalog")
    runs: dict[int, SessionResult] = {}

    def run(r: int) -> SessionResult:
        if r not in runs:
            runs[r] = simulate_sessions(c, work, replicas=r, budget=budget)
        return runs[r]

    try:
        lo, hi = 0, 1
        while not _meets(run(hi), target_s):
            if hi >= max_replicas:
                best = run(hi)
                return SessionOption(
                    gpu, None, None, None, best.ttft_p95_s, None, best.prefix_hit_rate,
                    f"p95 TTFT {best.ttft_p95_s} s at {hi} replicas, the most searched",
                )  # fmt: skip
            lo, hi = hi, min(2 * hi, max_replicas)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _meets(run(mid), target_s):
                hi = mid
            else:
                lo = mid
    except ValueError as exc:  # no room for a KV cache on this GPU at this TP
        return SessionOption(gpu, None, None, None, None, None, None, str(exc))
    r = run(hi)
    return SessionOption(
        gpu, hi, r.gpus, r.usd_per_hour, r.ttft_p95_s, r.cost_per_agent_hour_usd, r.prefix_hit_rate, "meets"
    )


def session_goal(cfg: RabitConfig, sessions: Sessions, *, agents: int, ttft_p95_s: float) -> ServingGoal:
    """The optimizer's goal for ``agents`` concurrent agents running ``sessions`` at p95 TTFT per turn
    ``<= ttft_p95_s`` [s], the one target (as :func:`size_sessions` sizes), see the module docstring."""
    if not ttft_p95_s > 0:
        raise ValueError(f"the p95 TTFT target must be a positive number of seconds, got {ttft_p95_s}")
    work = agent_sessions(sessions, agents)
    base = ServingGoal.from_config(cfg)
    screen: SimSpec = base.workload.with_(
        rate_per_s=sessions.turn_rate_per_s(agents, ttft_p95_s),
        input=Lengths(kind="fixed", mean=max(1.0, sessions.mean_turn_input_tokens)),
        output=Lengths(kind="fixed", mean=sessions.output.mean),
    )
    settings = base.settings.with_(prefix_cache_frac=sessions.cached_share)  # < 1: the first prompt is computed
    return base.model_copy(
        update={
            "workload": screen,
            "p95_ttft_s": ttft_p95_s,
            "p95_itl_s": None,
            "p95_e2e_s": None,
            "sessions": work,
            "settings": settings,
        }
    )


def simulate_session_candidate(
    goal: ServingGoal, c: Candidate, dep, spec: SimSpec, budget: WorkBudget | None = None
) -> Candidate:
    """One optimizer candidate (``dep``: it resolved; ``spec``: its scheduler limits) simulated as the goal's
    sessions on its replicas: its p95s over every turn, and whether it meets the goal (every session completed, no
    turn rejected)."""
    assert goal.sessions is not None
    r = simulate_sessions(
        dep,
        goal.sessions,
        replicas=c.replicas or 1,
        budget=budget.child() if budget is not None else None,
        batch_limits=(spec.max_batch, spec.token_budget),
    )
    s = r.result.summary
    done = c.model_copy(
        update={
            "simulated": True,
            "p95_ttft_s": r.ttft_p95_s,
            "p95_itl_s": s.itl_s.p95,
            "p95_e2e_s": s.e2e_s.p95,
            "sim_notes": (
                f"{r.sessions_completed}/{r.sessions} sessions of {goal.sessions.agents} agents, prefix hit rate "
                f"{r.prefix_hit_rate:.0%}, {s.preemptions} preemptions, batch cap {spec.max_batch}"
            ),
        }
    )
    ok = meets(done, goal) and s.rejected == 0 and r.sessions_completed == r.sessions
    return done.model_copy(update={"meets": ok})
