"""When requests wait for an adapter slot: the share of their time to first token the wait takes, and the fewest
``max_loras`` that meets the latency target.

A batch holds the requests of at most ``max_loras`` distinct adapters (vLLM's ``--max-loras``, default 1; the
simulator plays the rule, :mod:`core.serving.sim.adapters`). With more adapters in the traffic than slots, a request
whose adapter is not running waits until a running adapter's requests have all left, so its time to first token
is mostly that wait, however long the run or light the load. :func:`slot_limit` measures that share from the
simulated run and searches the slot grid (:func:`core.decision.optimizer.slot_choices`) by simulating the same
workload at each slot count, bisecting, since more slots only shorten the wait.
"""

from __future__ import annotations

from core.base import WorkBudget, fmt_latency
from core.config import RabitConfig
from core.decision.goal import _F
from core.decision.optimizer import slot_choices
from core.serving import DeploymentResult, SimSpec, simulate_deployment

__all__ = ["SLOT_CAUSE_SHARE", "SlotLimit", "slot_limit"]

#: The slot limit is named as the cause of the latency when the wait for a slot is at least this share of the
#: completed requests' summed time to first token: the wait is then the larger part of it, more than the queue for
#: the batch, the prefill and the adapter loads together.
SLOT_CAUSE_SHARE = 0.5


class SlotLimit(_F):
    """The adapter slots of one simulated run: how much of the time to first token was the wait for a slot, and
    the fewest slots that meet the target (simulated at the same workload)."""

    slots: int  # max_loras the run had
    adapters: int  # adapters in the traffic
    blocked_requests: int  # requests that waited for a slot at least once
    completed: int
    wait_share: float  # summed slot wait over summed TTFT of the completed requests, in [0, 1]
    is_cause: bool  # wait_share >= SLOT_CAUSE_SHARE
    target_name: str  # "p95 TTFT" or "p95 end-to-end", "" without a latency target
    target_s: float | None
    fix_slots: int | None  # the fewest max_loras whose simulated p95 meets the target; None: no slot count does
    fix_p95_s: float | None  # that run's p95 of the target's latency [s]

    def text(self) -> str:
        """The cause and the fix in one paragraph (empty when the slots are not the cause)."""
        if not self.is_cause:
            return ""
        head = (
            f"**Requests wait for an adapter slot**: {self.wait_share:.0%} of the time to first token is the wait for "
            f"one of max_loras = {self.slots:,} slot{'s' if self.slots != 1 else ''} ({self.blocked_requests:,} of "
            f"{self.completed:,} requests waited; {self.adapters:,} adapters in the traffic). The slot limit, not the "
            "run length or the load, sets these latencies."
        )
        if self.fix_slots is None:
            if self.target_s is None:
                return head
            return head + (
                f" No slot count up to {self.adapters:,} meets the {self.target_name} target of "
                f"{fmt_latency(self.target_s)}: add replicas as well."
            )
        what = (
            f"meets the {self.target_name} target of {fmt_latency(self.target_s)}"
            if self.target_s is not None
            else f"brings the slot wait under {SLOT_CAUSE_SHARE:.0%} of the time to first token"
        )
        got = f" (simulated {self.target_name or 'p95 TTFT'} {fmt_latency(self.fix_p95_s)})" if self.fix_p95_s else ""
        return head + f" Fix: **max_loras = {self.fix_slots:,}** (vLLM `--max-loras {self.fix_slots}`) {what}{got}."


def _wait_share(res: DeploymentResult) -> tuple[float, int, int]:
    """(summed slot wait / summed TTFT, requests that waited, completed requests) of one run."""
    s = res.summary
    ad = s.adapters
    if ad is None or not ad.blocked_requests or not s.ttft_s.n or not s.ttft_s.mean:
        return 0.0, ad.blocked_requests if ad is not None else 0, s.ttft_s.n
    waited = ad.blocked_requests * (ad.wait_s.mean or 0.0)
    return min(1.0, waited / (s.ttft_s.n * s.ttft_s.mean)), ad.blocked_requests, s.ttft_s.n


def _with_slots(cfg: RabitConfig, k: int) -> RabitConfig:
    return cfg.with_(adapters=cfg.adapters.model_copy(update={"max_loras": k}))


def _target(cfg: RabitConfig) -> tuple[str, float | None]:
    """(the p95 the fix is held to, its target [s]): TTFT's when set, else end-to-end's; ("", None) without one."""
    t = cfg.targets
    name, target = ("p95 TTFT", t.p95_ttft_s) if t.p95_ttft_s else ("p95 end-to-end", t.p95_e2e_s)
    return ("", None) if target is None else (name, target)


def _meets_with(
    cfg: RabitConfig, spec: SimSpec, budget: WorkBudget | None, name: str, target: float | None, k: int
) -> tuple[bool, float | None]:
    """Whether ``k`` slots meet the target (without one: the slot wait under :data:`SLOT_CAUSE_SHARE` of the time to
    first token), and the p95 simulated with them (None when withheld, or when the slots leave no KV cache)."""
    try:
        res = simulate_deployment(_with_slots(cfg, k), spec, budget=budget)
    except ValueError:  # more slots leave no room for a KV cache
        return False, None
    s = res.summary
    v = None if s.latency_withheld else (s.ttft_s if name != "p95 end-to-end" else s.e2e_s).p95
    if target is None:
        return _wait_share(res)[0] < SLOT_CAUSE_SHARE, v
    return v is not None and v <= target, v


def _fewest(grid: list[int], meets) -> tuple[int, dict[int, float | None]]:
    """Bisect ``grid`` for the first slot count that meets (len(grid): none does), with the p95 of each that did."""
    lo, hi = 0, len(grid)  # the answer's index lies in [lo, hi]; hi = len(grid): none meets
    found: dict[int, float | None] = {}
    while lo < hi:
        mid = (lo + hi) // 2
        ok, v = meets(grid[mid])
        if ok:
            hi = mid
            found[mid] = v
        else:
            lo = mid + 1
    return lo, found


def slot_limit(
    cfg: RabitConfig, spec: SimSpec, run: DeploymentResult, budget: WorkBudget | None = None
) -> SlotLimit | None:
    """The slot limit of ``run`` (the deployment ``cfg`` simulated at ``spec``); None without adapters.

    When the slots are the cause, the fix is the fewest slots of the grid above ``max_loras`` whose simulated p95
    (TTFT against the TTFT target, else end-to-end against its target) meets the target, or, without a target,
    whose slot wait falls under :data:`SLOT_CAUSE_SHARE` of the time to first token; bisected over the grid.
    """
    a = cfg.adapters
    if not a.enabled or run.summary.adapters is None:
        return None
    engine = cfg.workload.engine
    k_now = a.slots(engine)
    share, blocked, done = _wait_share(run)
    name, target = _target(cfg)
    cause = share >= SLOT_CAUSE_SHARE
    base = dict(
        slots=k_now,
        adapters=a.count,
        blocked_requests=blocked,
        completed=done,
        wait_share=share,
        is_cause=cause,
        target_name=name,
        target_s=target,
    )
    if not cause:
        return SlotLimit(**base, fix_slots=None, fix_p95_s=None)

    def meets(k: int) -> tuple[bool, float | None]:
        return _meets_with(cfg, spec, budget, name, target, k)

    grid = [k for k in slot_choices(a.count) if k > k_now]
    lo, found = _fewest(grid, meets)
    if lo == len(grid):
        return SlotLimit(**base, fix_slots=None, fix_p95_s=None)
    return SlotLimit(**base, fix_slots=grid[lo], fix_p95_s=found.get(lo))
