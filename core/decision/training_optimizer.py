"""The cheapest training run that meets a deadline across GPU kinds and their prices.

For each allowed, priced GPU kind the training deadline search (:func:`core.training.plan`) runs once; the
cheapest count of that kind that meets the deadline is its option, and the cheapest option wins.
"""

from __future__ import annotations

import numpy as np

from core import catalog, training
from core.base import WorkBudget, fmt_days, search_budget
from core.catalog import Price, gpu_price
from core.config import RabitConfig
from core.decision.goal import _F, Constraints


class TrainingOption(_F):
    """The cheapest run of one GPU kind that meets the deadline (or its fastest, when none does)."""

    gpu: str
    gpus: int
    layout: str
    runtime_s: float  # failure-free
    wall_clock_s: float  # expected, with failures
    gpu_hours: float  # failure-free
    cost_usd: float  # every option searched is priced (a kind without a price is skipped)
    usd_per_gpu_hour: float | None
    price_basis: str
    mfu: float
    meets_deadline: bool
    note: str = ""


class TrainingRecommendation(_F):
    deadline_s: float
    met: bool
    recommendation: TrainingOption | None
    options: tuple[TrainingOption, ...]  # one per GPU kind searched, cheapest first
    skipped: tuple[str, ...]  # GPU kinds left out, with the reason
    summary: str
    why_gpu: str
    relax: str = ""


def recommend_training(
    cfg: RabitConfig,
    deadline_s: float,
    cons: Constraints = Constraints(),
    prices: tuple[Price, ...] | None = None,
    progress=None,
    budget: WorkBudget | None = None,
) -> TrainingRecommendation:
    """The cheapest training run that meets ``deadline_s`` across GPU kinds and prices.

    For each allowed GPU kind with a price, the training deadline search (:func:`core.training.plan`) gives
    the runtime of every node-aligned count up to 32,768 GPUs; the cheapest count that meets the deadline
    (expected wall-clock with failures x GPUs x price) is that kind's option; the cheapest option wins.
    ``budget``: each kind's search is an evaluation (:func:`core.base.limits.search_budget` when None).
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else search_budget()
    kinds = [g for g in sorted(catalog.gpus()) if not cons.gpus_allowed or g in cons.gpus_allowed]
    options: list[TrainingOption] = []
    skipped: list[str] = []
    for i, slug in enumerate(kinds):
        if progress:
            progress(i, len(kinds), slug)
        wb.tick()
        price = gpu_price(slug, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
        if price is None:
            skipped.append(f"{slug}: no {cons.price_kind} price")
            continue
        g = catalog.gpu(slug)
        try:
            cg = cfg.with_(gpu=slug, gpus_per_node=g.gpus_per_node, nodes=1, tp=1, pp=1, ep=1)
        except Exception as exc:  # noqa: BLE001 - a config the part cannot hold is a skip, said
            skipped.append(f"{slug}: {exc}")
            continue
        p = training.plan(
            cg,
            training.TrainingGoal(
                deadline_s=deadline_s, max_gpus=min(cons.max_gpus or training.MAX_GPUS, training.MAX_GPUS)
            ),
        )
        pts = [pt for pt in p.curve if pt.feasible and np.isfinite(pt.wall_clock_s)]
        if not pts:
            skipped.append(f"{slug}: no layout fits ({p.message})")
            continue
        usd = price.usd_per_gpu_hour

        def cost(pt, usd: float = usd) -> float:  # this GPU kind's price, bound now
            return usd * pt.gpus * pt.wall_clock_s / 3600.0

        meeting = [pt for pt in pts if pt.meets_deadline]
        if cons.max_usd_per_hour is not None:
            meeting = [pt for pt in meeting if usd * pt.gpus <= cons.max_usd_per_hour]
        pt = min(meeting, key=cost) if meeting else min(pts, key=lambda q: q.wall_clock_s)
        options.append(
            TrainingOption(
                gpu=slug,
                gpus=pt.gpus,
                layout=pt.layout.label() if pt.layout else "",
                runtime_s=pt.runtime_s,
                wall_clock_s=pt.wall_clock_s,
                gpu_hours=pt.gpu_hours,
                cost_usd=cost(pt),
                usd_per_gpu_hour=usd,
                price_basis=price.basis,
                mfu=pt.mfu,
                meets_deadline=bool(meeting),
                note="" if meeting else f"fastest is {fmt_days(pt.wall_clock_s)} on {pt.gpus:,} GPUs",
            )
        )
    options.sort(key=lambda o: (not o.meets_deadline, o.cost_usd if o.meets_deadline else o.wall_clock_s))
    best = options[0] if options and options[0].meets_deadline else None
    if best is None:
        fastest = min(options, key=lambda o: o.wall_clock_s) if options else None
        return TrainingRecommendation(
            deadline_s=deadline_s,
            met=False,
            recommendation=None,
            options=tuple(options),
            skipped=tuple(skipped),
            summary=f"No priced GPU kind finishes within {fmt_days(deadline_s)}"
            + (
                f"; the fastest is {fastest.gpus:,} x {fastest.gpu} at {fmt_days(fastest.wall_clock_s)}"
                if fastest
                else ""
            ),
            why_gpu="",
            relax="move the deadline, raise the global batch (it caps useful data parallelism), "
            "train in FP8, or allow more GPUs",
        )
    others = [o for o in options if o.meets_deadline and o.gpu != best.gpu]
    why = f"{best.gpu} costs ${best.cost_usd:,.0f} for the run" + (
        f"; the next kind, {others[0].gpu}, costs ${others[0].cost_usd:,.0f} ({others[0].cost_usd / best.cost_usd - 1:+.0%})"
        if others
        else "; no other priced kind meets the deadline"
    )
    return TrainingRecommendation(
        deadline_s=deadline_s,
        met=True,
        recommendation=best,
        options=tuple(options),
        skipped=tuple(skipped),
        summary=(
            f"Train on {best.gpus:,} x {best.gpu} ({best.layout}): {fmt_days(best.wall_clock_s)} expected "
            f"with failures, {best.gpu_hours:,.0f} GPU-hours, ${best.cost_usd:,.0f} at {best.price_basis}"
        ),
        why_gpu=why,
    )
