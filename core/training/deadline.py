"""The smallest and the cheapest GPU count that meet a training deadline.

GPU-hours do not fall smoothly with the count: a layout must divide the count (``gpus = tp x pp x dp``) and
the global batch must split into ``dp`` x micro-batches, so a count with awkward factors runs a poorer layout
(more bubble, more exposed communication) than a slightly larger one. The smallest count that meets the
deadline can therefore cost more than a larger count that also meets it. Both come from the deadline curve
of :func:`core.training.plan`:

* smallest: the first count on the curve that meets the deadline;
* cheapest: the count that meets the deadline at the lowest cost, ``price x gpus x T_wall`` (expected
  wall-clock with failures), or at the fewest GPU-hours with failures ``gpus x T_wall`` when there is no
  price; ties go to the smaller count.

Worked number (the RA-BIT spec example): Llama-3.1-70B on H100 PCIe, 2T tokens in 30 days: 1,728 GPUs is the
smallest count that meets it (TP4 PP2 DP216, MFU 27 %, 1.19M GPU-hours), 1,960 GPUs the cheapest (TP2 PP10
DP98 with 4 virtual stages, MFU 35 %, 0.92M GPU-hours): the smallest costs 29 % more.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from core.base import fmt_num, fmt_pct, fmt_usd


class DeadlineChoice(BaseModel):
    """The two candidates and what choosing the smallest would cost extra."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    smallest: Any  # core.training.CurvePoint (not imported: no cycle through the training search)
    cheapest: Any  # core.training.CurvePoint
    basis: str  # "cost [USD]" or "GPU-hours with failures"
    smallest_value: float
    cheapest_value: float

    @property
    def extra_frac(self) -> float:
        """How much more the smallest count costs than the cheapest (0 when they are the same count)."""
        return self.smallest_value / self.cheapest_value - 1.0 if self.cheapest_value > 0 else 0.0

    @property
    def extra_text(self) -> str:
        """What choosing the smallest count would cost extra, in words precise enough to be told from zero
        ("$3,503 more (+0.16%)")."""
        d = self.smallest_value - self.cheapest_value
        amount = fmt_usd(d) if self.basis.startswith("cost") else f"{fmt_num(d)} GPU-hours"
        return f"{amount} more ({'+' if d >= 0 else ''}{fmt_pct(self.extra_frac)})"

    @property
    def mfu_text(self) -> str:
        """The two layouts' MFU, with the digits that tell them apart ("MFU 46.1% against 46.3%")."""
        s, c = self.smallest.mfu, self.cheapest.mfu
        digits = next((d for d in (0, 1, 2) if round(100 * s, d) != round(100 * c, d)), 2)
        return f"MFU {100 * s:.{digits}f}% against {100 * c:.{digits}f}%"

    def headline(self, tokens: str, deadline_days: str) -> str:
        """The recommendation in one sentence: the cheapest count that meets the deadline, and the smallest
        beside it when it is another count."""
        c = self.cheapest
        head = f"{c.gpus:,} GPUs is the cheapest count that finishes {tokens} tokens within {deadline_days} days"
        if self.smallest.gpus == c.gpus:
            return f"{head}, and the smallest (expected wall-clock with failures)"
        return (
            f"{head} (expected wall-clock with failures); the smallest, {self.smallest.gpus:,} GPUs, costs "
            f"{self.extra_text}"
        )

    @property
    def message(self) -> str:
        s, c = self.smallest, self.cheapest
        if s.gpus == c.gpus:
            return f"{s.gpus:,} GPUs is both the smallest and the cheapest count that meets the deadline"
        value = (
            f"cost {fmt_usd(self.cheapest_value)}"
            if self.basis.startswith("cost")
            else f"{fmt_num(self.cheapest_value)} {self.basis}"
        )
        return (
            f"recommended: {c.gpus:,} GPUs, the cheapest count that meets the deadline ({value}); "
            f"the smallest, {s.gpus:,} GPUs, costs {self.extra_text}: its layout runs at {self.mfu_text}"
        )


def _value(p, priced: bool) -> float:
    return p.cost_usd if priced else p.gpus * p.wall_clock_s / 3600.0


def deadline_choice(curve) -> DeadlineChoice | None:
    """The smallest and the cheapest count of a deadline curve; None when no count meets the deadline."""
    meeting = [p for p in curve if p.feasible and p.meets_deadline]
    if not meeting:
        return None
    priced = all(p.cost_usd is not None for p in meeting)
    smallest = min(meeting, key=lambda p: p.gpus)
    cheapest = min(meeting, key=lambda p: (_value(p, priced), p.gpus))
    return DeadlineChoice(
        smallest=smallest,
        cheapest=cheapest,
        basis="cost [USD]" if priced else "GPU-hours with failures",
        smallest_value=_value(smallest, priced),
        cheapest_value=_value(cheapest, priced),
    )
