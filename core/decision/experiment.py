"""The next experiment: which measurement could change the decision, and what it costs to make.

The RA-BIT spec, "The next experiment, and diagnostics": some uncertainties change the decision and some do
not. For every uncertain input (the decode, prefill and communication efficiency of each priced GPU kind, on an
AMD kind under vLLM or SGLang also the bandwidth of the engine's ROCm attention kernels, the mean prompt and
output length, the arrival rate) this module moves the input across its range, re-runs the
serving optimizer (:func:`core.decision.optimizer.recommend`) at each point, and records whether the recommendation
flips::

    points     low, (low + base) / 2, (base + high) / 2, high      (``points_per_side`` = 2)
    flip       a different GPU kind, layout (GPUs per replica, TP, PP), precision (weights, KV) or replica
               count than the baseline recommendation
    flip chance = flipping points / points
    score      = flip chance / GPU-hours of the measurement that pins the input down   (free: first)

Bounds come from the assumptions registry (:data:`core.base.assumptions.REGISTRY`: ``mbu`` for decode, ``mfu_max``
for prefill, ``comm_bw_eff`` for the fabric, ``rocm_attn_bw_eff`` for ROCm attention) and, for the workload, from the user's own spread (default
+-30 % of the mean prompt length, output length and rate).

Speed: every re-run passes one ``memo`` to the optimizer, which shares its per-GPU-kind screens and its
simulations across re-runs (moving one kind's efficiency re-screens that kind only) and skips the
leftover-budget simulations (they feed alternatives, never the pick). A GPU kind other than today's whose
cheapest estimate stays above today's cost even at its optimistic bound cannot take the pick at any point
(:func:`out_of_reach`): one screen settles its points. The re-runs are independent tasks (:class:`Rerun`) for an
executor the edge supplies (:class:`core.base.Executor`: the dashboard and the CLI share them between worker
processes; ``core`` itself runs them one after another); ``bench/next_experiment.py`` measures both ways.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from core import catalog
from core.base import REGISTRY, SERIAL, Executor, WorkBudget, next_budget, sig
from core.catalog import Price
from core.decision.goal import Constraints, Pick, ServingGoal
from core.decision.measurement import measurement
from core.decision.optimizer import Recommendation, recommend, screen

InputKind = Literal["decode", "prefill", "comm", "attention", "prompt", "output", "rate", "train"]

#: Which assumption each per-GPU input moves.
ASSUMPTION_OF: dict[str, str] = {
    "decode": "mbu",
    "prefill": "mfu_max",
    "comm": "comm_bw_eff",
    "attention": "rocm_attn_bw_eff",
}


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UncertainInput(_F):
    """One input the decision rests on, with the range it may take."""

    key: str  # "decode:h100-sxm", "rate", ...
    kind: InputKind
    gpu: str | None = None
    label: str
    base: float
    low: float  # the pessimistic end (slower, longer, busier)
    high: float
    unit: str
    source: str


class Point(_F):
    """One re-run: the input at ``value`` and the recommendation it gives."""

    value: float
    choice: str  # the pick's label, or "nothing meets the target"
    flipped: bool
    changes: tuple[str, ...]  # what differs from the baseline: "GPU kind h200 -> h100-sxm", ...
    cost_per_hour: float | None
    rerun: bool = True  # False: settled by the out-of-reach check (:func:`out_of_reach`), not re-run


class Experiment(_F):
    """The measurement that pins one input down, and how likely it is to change the decision."""

    input: UncertainInput
    points: tuple[Point, ...]
    flip_chance: float
    flips_to: str  # the most frequent alternative choice ("" when nothing flips)
    measurement: str  # what to run, in words
    gpu: str | None
    gpus: int  # GPUs the measurement holds
    duration_s: float
    gpu_hours: float
    cost_usd: float
    command: str
    then: str  # what to do with the output
    note: str = ""  # why an input cannot flip the decision, when that was shown without re-running it

    @property
    def score(self) -> float:
        """Flip chance per GPU-hour (a free measurement that can flip ranks first)."""
        if self.flip_chance <= 0:
            return 0.0
        return math.inf if self.gpu_hours <= 0 else self.flip_chance / self.gpu_hours


class NextExperimentSpec(_F):
    """The analysis to question: the serving goal and constraints, and the workload's spread."""

    goal: ServingGoal
    constraints: Constraints = Constraints()
    prompt_spread_frac: float = Field(0.3, ge=0, lt=1)
    output_spread_frac: float = Field(0.3, ge=0, lt=1)
    rate_spread_frac: float = Field(0.3, ge=0, lt=1)
    points_per_side: int = Field(2, ge=1, le=5)


class NextExperiment(_F):
    spec: NextExperimentSpec
    baseline: Recommendation
    experiments: tuple[Experiment, ...]  # inputs that can flip the decision, best score first
    stable: tuple[Experiment, ...]  # "not worth measuring now": no point of their range flips the decision
    reruns: int

    @property
    def top(self) -> Experiment | None:
        return self.experiments[0] if self.experiments else None


# --- inputs and points ------------------------------------------------------------------------------------

#: What each per-GPU input is, in words (the label says on which GPU kind).
INPUT_LABELS: dict[str, str] = {
    "decode": "Decode efficiency (memory-bandwidth utilisation)",
    "prefill": "Prefill efficiency (compute-efficiency ceiling)",
    "comm": "Communication efficiency (collective bus bandwidth / link peak)",
    "attention": "Paged-attention bandwidth of the engine's ROCm kernels (share of the CUDA kernels')",
    "train": "Training efficiency (MFU ceiling)",
}


def assumption_input(kind: InputKind, gpu: str, name: str, base: float) -> UncertainInput:
    """A per-GPU input: assumption ``name`` on GPU kind ``gpu``, at ``base`` now, across its registry range."""
    info = REGISTRY[name]
    return UncertainInput(
        key=f"{kind}:{gpu}",
        kind=kind,
        gpu=gpu,
        label=f"{INPUT_LABELS[kind]} on {gpu}",
        base=base,
        low=info.low,
        high=info.high,
        unit=info.unit,
        source=info.source,
    )


def uncertain_inputs(spec: NextExperimentSpec, baseline: Recommendation) -> tuple[UncertainInput, ...]:
    """The inputs to move: three per priced GPU kind the optimizer considered, then the workload."""
    kinds = sorted({c.gpu for c in baseline.candidates if c.usd_per_gpu_hour is not None})
    return (*_gpu_inputs(spec, kinds), *workload_inputs(spec))


def _gpu_inputs(spec: NextExperimentSpec, kinds: list[str]) -> list[UncertainInput]:
    goal = spec.goal
    engine = goal.settings.workload.engine
    return [
        assumption_input(kind, g, ASSUMPTION_OF[kind], getattr(goal.assumptions_for(g), ASSUMPTION_OF[kind]))
        for kind in ("decode", "prefill", "comm", "attention")
        for g in kinds
        if kind != "attention" or catalog.rocm_attention(catalog.gpu(g), engine)
    ]


def _points_bound(spec: NextExperimentSpec, prices: tuple[Price, ...]) -> int:
    """At least as many per-GPU points as the baseline will name (every priced kind the constraints allow, where
    the baseline names the priced kinds it considered): the progress bar's total before the baseline is known,
    so the bar never runs backwards when the true total replaces it."""
    allowed = set(spec.constraints.gpus_allowed)
    known = set(catalog.gpus())
    kinds = sorted({p.gpu for p in prices if p.gpu in known and (not allowed or p.gpu in allowed)})
    return sum(len(points(i, spec.points_per_side)) for i in _gpu_inputs(spec, kinds))


def workload_inputs(spec: NextExperimentSpec) -> tuple[UncertainInput, ...]:
    """The workload's inputs to move (prompt and output length unless a trace gives them, the rate): the spec's
    own, whatever the baseline picks."""
    goal = spec.goal
    out = []
    i_mean, o_mean = goal.workload.mean_lengths()
    if goal.workload.trace is None:
        for kind, mean, frac, label in (
            ("prompt", i_mean, spec.prompt_spread_frac, "Mean prompt length"),
            ("output", o_mean, spec.output_spread_frac, "Mean output length"),
        ):
            out.append(
                UncertainInput(
                    key=kind,
                    kind=kind,
                    label=label,
                    base=mean,
                    low=mean * (1 + frac),
                    high=max(1.0, mean * (1 - frac)),
                    unit="tokens",
                    source=f"your spread: +-{frac:.0%} of the analysis's mean",
                )
            )
    r, frac = goal.rate_per_s, spec.rate_spread_frac
    out.append(
        UncertainInput(
            key="rate",
            kind="rate",
            label="Arrival rate",
            base=r,
            low=r * (1 + frac),
            high=r * (1 - frac),
            unit="requests/s",
            source=f"your spread: +-{frac:.0%} of the analysis's rate",
        )
    )
    return tuple(out)


def points(inp: UncertainInput, per_side: int = 2) -> tuple[float, ...]:
    """Values across the range, base excluded: ``per_side`` evenly spaced on each side, the bounds included.

    Mean prompt length 1000, +-30 %, two per side: (1300, 1150, 850, 700).
    """
    out: list[float] = []
    for end in (inp.low, inp.high):
        for k in range(per_side, 0, -1):
            v = inp.base + (end - inp.base) * k / per_side
            if not math.isclose(v, inp.base) and v not in out:
                out.append(v)
    return tuple(out)


def moved_goal(goal: ServingGoal, inp: UncertainInput, value: float) -> ServingGoal:
    """``goal`` with one input moved to ``value``."""
    if inp.kind in ASSUMPTION_OF:
        assert inp.gpu is not None
        moved = goal.assumptions_for(inp.gpu).with_(**{ASSUMPTION_OF[inp.kind]: value})
        rest = tuple((g, a) for g, a in goal.gpu_assumptions if g != inp.gpu)
        return goal.model_copy(update={"gpu_assumptions": rest + ((inp.gpu, moved),)})
    if inp.kind == "rate":
        return goal.model_copy(update={"workload": goal.workload.with_(rate_per_s=value)})
    w = goal.workload
    field = "input" if inp.kind == "prompt" else "output"
    lengths = getattr(w, field).model_copy(update={"mean": max(1.0, value)})
    return goal.model_copy(update={"workload": w.with_(**{field: lengths})})


# --- the decision ---------------------------------------------------------------------------------------

NOTHING = "nothing meets the target"


def _choice(rec: Recommendation) -> Pick | None:
    return rec.recommendation


def changes(base: Pick | None, new: Pick | None) -> tuple[str, ...]:
    """What differs between two picks, in the order GPU kind, layout, precision, replicas."""
    if new is None:
        return () if base is None else ("nothing meets the target any more",)
    if base is None:
        return (f"a configuration now meets the target: {new.label}",)
    out = []
    if new.gpu != base.gpu:
        out.append(f"GPU kind {base.gpu} -> {new.gpu}")
    if (new.gpus_per_replica, new.tp, new.pp) != (base.gpus_per_replica, base.tp, base.pp):
        out.append(
            f"layout {base.gpus_per_replica} GPUs TP {base.tp} PP {base.pp} -> "
            f"{new.gpus_per_replica} GPUs TP {new.tp} PP {new.pp}"
        )
    if (new.weights, new.kv_dtype) != (base.weights, base.kv_dtype):
        out.append(f"precision {base.weights}/{base.kv_dtype} KV -> {new.weights}/{new.kv_dtype} KV")
    if new.replicas != base.replicas:
        out.append(f"replicas {base.replicas} -> {new.replicas}")
    return tuple(out)


# --- the analysis ------------------------------------------------------------------------------------

Progress = Callable[[int, int, str], None]

#: One task's plan: an uncertain input (by position) and the values to evaluate.
_Task = tuple[int, tuple[float, ...]]
_Result = tuple[tuple[Point, ...], list, str]


def out_of_reach(
    spec: NextExperimentSpec,
    prices: tuple[Price, ...],
    base_pick: Pick | None,
    inp: UncertainInput,
    budget: WorkBudget | None = None,
) -> str:
    """Why no point of a per-GPU input's range can flip the decision without re-running it, or "".

    For a GPU kind other than today's, the optimizer simulates that kind's candidates only while their
    closed-form cost is below the cheapest verified cost (branch and bound, :func:`core.decision.optimizer.recommend`),
    and every candidate's estimate falls as the kind's efficiency rises. So if even at the optimistic bound the
    kind's cheapest estimate is above today's verified cost, none of its candidates is simulated at any point of
    the range and today's pick stands: one closed-form screen settles all the points.
    """
    if base_pick is None or inp.gpu is None or inp.gpu == base_pick.gpu:
        return ""
    one = spec.constraints.model_copy(update={"gpus_allowed": (inp.gpu,)})
    cands = [
        c
        for c in screen(moved_goal(spec.goal, inp, inp.high), one, prices, budget)
        if not c.pruned and c.cost_per_hour is not None
    ]
    if not cands:
        return (
            f"no {inp.gpu} configuration survives the screen even at the optimistic bound "
            f"({sig(inp.high, 6)}): the choice cannot move to {inp.gpu}"
        )
    cheapest = min(c.cost_per_hour or math.inf for c in cands)
    if cheapest > base_pick.cost_per_hour:
        return (
            f"even at the optimistic bound ({sig(inp.high, 6)}) the cheapest {inp.gpu} configuration is estimated "
            f"at ${cheapest:,.2f}/h, above today's ${base_pick.cost_per_hour:,.2f}/h: no point of the range "
            "can flip the decision"
        )
    return ""


class Rerun(NamedTuple):
    """One task of the next experiment: one uncertain input and the values to re-run the optimizer at (one value
    for a workload point or a point of today's kind, all of another kind's points at once: those are cheap, and
    most end at the out-of-reach check), with all it reads. Picklable, so any executor can run it; ``memo`` is the
    optimizer's shared screens and simulations (a worker may hold a copy: they only save work, never change an
    answer). ``base_pick`` None with ``input`` None: the task is the baseline itself (:func:`picks`)."""

    spec: NextExperimentSpec
    prices: tuple[Price, ...]
    memo: dict
    base_pick: Pick | None
    input: UncertainInput | None
    values: tuple[float, ...]
    budget: WorkBudget | None = None


def picks(task: Rerun) -> tuple[tuple[Pick | None, ...], str] | Recommendation:
    """The optimizer's pick at each value of one task (none where the out-of-reach check settles them all, its
    reason beside), or the baseline's recommendation for the baseline's task. A workload point needs nothing of
    the baseline, so the baseline and the workload's points run side by side."""
    spec, prices, memo, base_pick, inp, values, budget = task
    if inp is None:
        return recommend(spec.goal, spec.constraints, prices, memo=memo, alternatives=False, budget=budget)
    note = out_of_reach(spec, prices, base_pick, inp, budget) if len(values) > 1 else ""
    if note:
        return (), note
    return tuple(
        _choice(
            recommend(
                moved_goal(spec.goal, inp, v), spec.constraints, prices, memo=memo, alternatives=False, budget=budget
            )
        )
        for v in values
    ), ""


def as_points(base_pick: Pick | None, values: tuple[float, ...], found: tuple[tuple[Pick | None, ...], str]) -> _Result:
    """One task's points against the baseline's pick, the picks its flips lead to, and the out-of-reach reason."""
    got, note = found
    pts: list[Point] = []
    flips: list[Pick | None] = []
    for i, v in enumerate(values):
        if note:
            pts.append(
                Point(
                    value=v,
                    choice=base_pick.label if base_pick else NOTHING,
                    flipped=False,
                    changes=(),
                    cost_per_hour=base_pick.cost_per_hour if base_pick else None,
                    rerun=False,
                )
            )
            continue
        pick = got[i]
        diff = changes(base_pick, pick)
        pts.append(
            Point(
                value=v,
                choice=pick.label if pick else NOTHING,
                flipped=bool(diff),
                changes=diff,
                cost_per_hour=pick.cost_per_hour if pick else None,
            )
        )
        if diff:
            flips.append(pick)
    return tuple(pts), flips, note


def rerun(task: Rerun) -> _Result:
    """The points of one task: the optimizer re-run at each value (or the out-of-reach check's reason for all of
    them), the picks the flips lead to, and that reason."""
    found = picks(task)
    assert not isinstance(found, Recommendation), "rerun takes an input's task, not the baseline's"
    return as_points(task.base_pick, task.values, found)


def _plan(spec: NextExperimentSpec, inputs: tuple[UncertainInput, ...], base_pick: Pick | None) -> list[_Task]:
    """The per-GPU inputs' tasks, heaviest first (today's kind re-simulates its candidates at each point, one task
    a point; other kinds mostly end at the out-of-reach check, all their points in one task), so parallel workers
    finish together. The workload's points are not here: they run beside the baseline (:func:`next_experiment`)."""

    def order(k: int) -> int:
        return 0 if base_pick is not None and inputs[k].gpu == base_pick.gpu else 1

    out: list[_Task] = []
    for k in sorted((k for k in range(len(inputs)) if inputs[k].gpu is not None), key=order):
        values = points(inputs[k], spec.points_per_side)
        if order(k) == 0:
            out.extend((k, (v,)) for v in values)
        elif values:
            out.append((k, values))
    return out


def next_experiment(
    spec: NextExperimentSpec,
    prices: tuple[Price, ...] | None = None,
    progress: Progress | None = None,
    executor: Executor = SERIAL,
    budget: WorkBudget | None = None,
) -> NextExperiment:
    """Move every uncertain input across its range, re-run the optimizer, rank the measurements.

    ``progress``: optional ``(done, total, label)`` callable, called as each re-run's result arrives (never
    stored). ``executor``: runs the tasks (:class:`Rerun`, :func:`rerun`; this process, one after another, when
    None is supplied); every executor gives the same answer, the results being merged by their task's position.
    ``budget``: the work budget of the whole search, baseline and every re-run (each worker checks the wall time
    and counts the evaluations of its copy; :func:`core.base.limits.next_budget` when None); past it,
    :class:`core.base.limits.BudgetExceeded`.
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else next_budget()
    memo: dict = {}
    # first the baseline and the workload's points side by side (a workload point needs nothing of the baseline),
    # then the per-GPU inputs, which the baseline names and measures against
    wl = workload_inputs(spec)
    wl_plan: list[_Task] = [(j, (v,)) for j, inp in enumerate(wl) for v in points(inp, spec.points_per_side)]
    wl_total = len(wl_plan)
    guess = wl_total + _points_bound(spec, prices)
    first = [Rerun(spec, prices, memo, None, None, (), wb)]
    first += [Rerun(spec, prices, memo, None, wl[j], values, wb) for j, values in wl_plan]
    found: list = []
    for i, got in enumerate(executor.map(picks, first)):
        found.append(got)
        if progress and i:
            j, at = wl_plan[i - 1]
            progress(i - 1, guess, f"{wl[j].label} = {sig(at[0], 4)}")
    baseline: Recommendation = found[0]
    base_pick = _choice(baseline)
    inputs = uncertain_inputs(spec, baseline)
    shift = len(inputs) - len(wl)  # the workload's inputs close the tuple
    plan = _plan(spec, inputs, base_pick)
    total = wl_total + sum(len(v) for _, v in plan)
    done = wl_total
    tasks = [Rerun(spec, prices, memo, base_pick, inputs[k], values, wb) for k, values in plan]
    results: list[_Result] = [as_points(base_pick, values, f) for (_, values), f in zip(wl_plan, found[1:])]
    for (k, values), res in zip(plan, executor.map(rerun, tasks)):
        results.append(res)
        for v in values:
            if progress:
                progress(done, total, f"{inputs[k].label} = {sig(v, 4)}")
            done += 1
    if progress:
        progress(total, total, "done")
    plan = [(j + shift, values) for j, values in wl_plan] + plan

    per_input: dict[int, list] = {k: [[], [], ""] for k in range(len(inputs))}
    for (k, _), (pts, flips, note) in zip(plan, results):
        per_input[k][0].extend(pts)
        per_input[k][1].extend(flips)
        per_input[k][2] = per_input[k][2] or note
    experiments = []
    for k, inp in enumerate(inputs):
        pts_l, flips, note = per_input[k]
        pts = tuple(sorted(pts_l, key=lambda p: points(inp, spec.points_per_side).index(p.value)))
        chance = sum(p.flipped for p in pts) / len(pts) if pts else 0.0
        labels = [p.choice for p in pts if p.flipped]
        flips_to = max(labels, key=labels.count) if labels else ""
        if not pts:
            note = "no spread given: the value is taken as known"
        m = measurement(inp, spec, baseline, flips, prices)
        experiments.append(Experiment(input=inp, points=pts, flip_chance=chance, flips_to=flips_to, note=note, **m))
    ranked = sorted(
        (e for e in experiments if e.flip_chance > 0), key=lambda e: (-e.score, -e.flip_chance, e.cost_usd, e.input.key)
    )
    stable = tuple(e for e in experiments if e.flip_chance == 0)
    return NextExperiment(spec=spec, baseline=baseline, experiments=tuple(ranked), stable=stable, reruns=total)


def outcomes(e: Experiment) -> tuple[str, ...]:
    """The decision under each outcome of one experiment, in words, one line per point."""
    inp = e.input
    out = []
    for p in sorted(e.points, key=lambda p: p.value):
        rel = (p.value / inp.base - 1) if inp.base else 0.0
        if inp.gpu is not None:
            how = f"{abs(rel):.0%} {'lower' if rel < 0 else 'higher'} than assumed ({sig(p.value)} vs {sig(inp.base)})"
        else:
            how = f"{sig(p.value, 4)} {inp.unit} ({rel:+.0%})"
        cost = f" (${p.cost_per_hour:,.2f}/h)" if p.flipped and p.cost_per_hour is not None else ""
        verdict = f"the choice becomes {p.choice}{cost}" if p.flipped else "the choice stays"
        out.append(f"If {inp.label[0].lower() + inp.label[1:]} is {how}, {verdict}.")
    return tuple(out)
