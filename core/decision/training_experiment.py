"""The next experiment for a training run: which measurement could change the training recommendation.

The training efficiency (``mfu_train``) and the communication efficiency (``comm_bw_eff``) of every priced GPU
kind, each moved across its registry range; a re-run re-plans one kind (each kind's option depends on its own
assumptions only), and the pick is the cheapest option that meets the deadline over all kinds.
"""

from __future__ import annotations

import math

from pydantic import Field

from core import catalog
from core.base import WorkBudget, next_budget, sig
from core.catalog import Price
from core.config import RabitConfig
from core.decision.experiment import _F, Experiment, Point, Progress, assumption_input, points
from core.decision.goal import Constraints
from core.decision.measurement import training_measurement
from core.decision.training_optimizer import TrainingOption, TrainingRecommendation, recommend_training

TRAIN_ASSUMPTION_OF: dict[str, str] = {"train": "mfu_train", "comm": "comm_bw_eff"}


class TrainingExperimentSpec(_F):
    """A training run to question: the shared config (phase train), its deadline and the constraints."""

    config: RabitConfig
    deadline_s: float = Field(gt=0)
    constraints: Constraints = Constraints()
    points_per_side: int = Field(2, ge=1, le=5)


class TrainingNextExperiment(_F):
    spec: TrainingExperimentSpec
    baseline: TrainingRecommendation
    experiments: tuple[Experiment, ...]
    stable: tuple[Experiment, ...]
    reruns: int

    @property
    def top(self) -> Experiment | None:
        return self.experiments[0] if self.experiments else None


def _train_changes(base, new) -> tuple[str, ...]:
    if base is None and new is None:
        return ()
    if base is None:
        return (f"a run now meets the deadline: {new.gpus:,} x {new.gpu} ({new.layout})",)
    if new is None:
        return ("no priced run meets the deadline any more",)
    out = []
    if new.gpu != base.gpu:
        out.append(f"GPU kind {base.gpu} -> {new.gpu}")
    if new.gpus != base.gpus:
        out.append(f"GPUs {base.gpus:,} -> {new.gpus:,}")
    if new.layout != base.layout:
        out.append(f"layout {base.layout} -> {new.layout}")
    return tuple(out)


def _train_label(o) -> str:
    return f"{o.gpus:,} x {o.gpu} ({o.layout})" if o is not None else "no priced run meets the deadline"


def _pick_option(options: list):
    """The optimizer's rule (:func:`core.decision.optimizer.recommend_training`): the cheapest option that meets."""
    meeting = [o for o in options if o is not None and o.meets_deadline and o.cost_usd is not None]
    return min(meeting, key=lambda o: o.cost_usd) if meeting else None


def next_training_experiment(
    spec: TrainingExperimentSpec,
    prices: tuple[Price, ...] | None = None,
    progress: Progress | None = None,
    budget: WorkBudget | None = None,
) -> TrainingNextExperiment:
    """Which measurement could change the training recommendation: the training efficiency (``mfu_train``) and
    the communication efficiency of every priced GPU kind, each across its registry range.

    Each kind's option depends on that kind's assumptions only, so a re-run re-plans one kind and the pick is
    the cheapest option that meets the deadline over all kinds. A kind other than today's that misses the
    deadline or costs more than today's pick even at its optimistic bound cannot take it at any point.
    ``budget``: the work budget of the whole search (:func:`core.base.limits.next_budget` when None).
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else next_budget()
    cfg, cons = spec.config, spec.constraints
    baseline = recommend_training(cfg, spec.deadline_s, cons, prices, budget=wb)
    base = baseline.recommendation
    by_kind = {o.gpu: o for o in baseline.options}

    def option(kind: str, name: str, value: float) -> TrainingOption | None:
        moved = cfg.with_(assumptions=cfg.assumptions.with_(**{name: value}))
        one = cons.model_copy(update={"gpus_allowed": (kind,)})
        r = recommend_training(moved, spec.deadline_s, one, prices, budget=wb)
        return r.options[0] if r.options else None

    inputs = [
        assumption_input(kind, g, TRAIN_ASSUMPTION_OF[kind], getattr(cfg.assumptions, TRAIN_ASSUMPTION_OF[kind]))
        for kind in ("train", "comm")
        for g in sorted(by_kind)
    ]
    plan = [(inp, points(inp, spec.points_per_side)) for inp in inputs]
    total = sum(len(v) for _, v in plan)
    done = 0
    experiments: list[Experiment] = []
    for inp, values in plan:
        name = TRAIN_ASSUMPTION_OF[inp.kind]
        gpu = inp.gpu or ""
        note = ""
        if base is not None and inp.gpu != base.gpu:
            best = option(gpu, name, inp.high)
            if best is None or not best.meets_deadline or (best.cost_usd or math.inf) > (base.cost_usd or 0):
                note = (
                    f"even at the optimistic bound ({sig(inp.high, 6)}) {inp.gpu} "
                    + (
                        "misses the deadline"
                        if best is None or not best.meets_deadline
                        else f"costs ${best.cost_usd:,.0f}, above today's ${base.cost_usd:,.0f}"
                    )
                    + ": no point of the range can flip the decision"
                )
        pts: list[Point] = []
        for v in values:
            if progress:
                progress(done, total, f"{inp.label} = {sig(v, 4)}")
            done += 1
            if note:
                pts.append(
                    Point(
                        value=v, choice=_train_label(base), flipped=False, changes=(), cost_per_hour=None, rerun=False
                    )
                )
                continue
            new = _pick_option([option(gpu, name, v) if k == gpu else o for k, o in by_kind.items()])
            diff = _train_changes(base, new)
            pts.append(Point(value=v, choice=_train_label(new), flipped=bool(diff), changes=diff, cost_per_hour=None))
        chance = sum(p.flipped for p in pts) / len(pts) if pts else 0.0
        labels = [p.choice for p in pts if p.flipped]
        m = training_measurement(inp, cfg, cons, prices)
        experiments.append(
            Experiment(
                input=inp,
                points=tuple(pts),
                flip_chance=chance,
                flips_to=max(labels, key=labels.count) if labels else "",
                note=note,
                **m,
            )
        )
    if progress:
        progress(total, total, "done")
    ranked = sorted(
        (e for e in experiments if e.flip_chance > 0), key=lambda e: (-e.score, -e.flip_chance, e.cost_usd, e.input.key)
    )
    return TrainingNextExperiment(
        spec=spec,
        baseline=baseline,
        experiments=tuple(ranked),
        stable=tuple(e for e in experiments if e.flip_chance == 0),
        reruns=total,
    )
