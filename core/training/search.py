"""The training search: the fastest layout on a GPU count, the curve over counts, the deadline and the cost.

**Search**: every TP (power of 2 dividing the heads, inside the scale-up domain) x CP (context parallelism, powers
of two that leave each rank at least :data:`CP_MIN_TOKENS` of the sequence) x PP (divisors of L and powers of two)
x EP (MoE) is a small python loop; DP over all GPU counts x v x b x recompute x ZeRO are
numpy axes of :func:`core.training.layout.layout_grid`. A layout is kept if it fits memory (the one body
:func:`core.physics.training_footprint.training_memory_parts`, evaluated on arrays) and splits the global batch within
``batch_tolerance``. The fastest wins.

**Deadline**: the recommended GPU count is the cheapest whose expected wall-clock *with failures*
(:mod:`core.training.reliability`) meets the deadline (:mod:`core.training.deadline`; the smallest such count is
named beside it when it differs). Counts are the powers of two below one node and every whole number of nodes up to 32,768.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core import catalog
from core.base import DAY_S, HOUR_S, Step, Trace, choices, fmt_num, fmt_pct, sig
from core.catalog import Price, gpu_price
from core.config import Deployment, RabitConfig, as_deployment, whole_nodes_problem
from core.physics import TrainingMemory
from core.training.deadline import deadline_choice
from core.training.flops import RECOMPUTES, Work, work
from core.training.layout import (
    Layout,
    LayoutContext,
    LayoutResult,
    layout_context,
    layout_grid,
    layout_of,
    result_at,
)
from core.training.layout_math import evaluate_layout, layout_memory
from core.training.reliability import Goodput, goodput, goodput_arrays

__all__ = [
    "MAX_GPUS",
    "MICRO_BATCHES",
    "VIRTUAL_STAGES",
    "ZERO_STAGES",
    "CurvePoint",
    "TrainingGoal",
    "TrainingPlan",
    "budget_problem",
    "catalog_price",
    "goal_from_inputs",
    "gpu_counts",
    "layouts_at",
    "plan",
]

Recompute = choices.Recompute

#: Search axes (recomputation: :data:`core.training.flops.RECOMPUTES`).
MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
VIRTUAL_STAGES: tuple[int, ...] = (1, 2, 4)
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
#: Largest GPU count the deadline search covers (the issue's bound).
MAX_GPUS = 32_768
#: Context parallelism is searched only where each rank keeps at least this many tokens of the sequence: shorter
#: blocks underfill the GEMMs and their ring sends cannot hide behind their attention (Megatron-Core's context
#: parallelism is for long sequences; Llama 3's 128k stage ran CP 16: 8,192 tokens a rank, arXiv 2407.21783 sec. 3.3).
CP_MIN_TOKENS = 4096
#: Context-parallel degrees the search tries (each within CP_MIN_TOKENS).
CP_DEGREES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrainingGoal(_Frozen):
    """What the user asks for beyond the shared config.

    deadline_s: wall-clock the run must finish in (expected, with failures) [s]; enables the deadline search.
    gpus: a GPU budget: plan on exactly this many (default: the config's GPUs).
    layout: evaluate this layout instead of searching (a team checking the run it already has).
    zero / recompute / micro_batch / cp / vpp: pin that knob (None: search it). A pinned layout keeps its own
    micro-batch, recomputation and ZeRO stage; its virtual pipeline stages are searched too (the fastest of
    ``VIRTUAL_STAGES`` that fits, Megatron-LM's interleaved 1F1B) unless ``vpp`` or the layout's own ``vpp > 1``
    pins them, so a pinned PP16 layout is not charged the plain 1F1B bubble a real run would interleave away.
    batch_tolerance: the global batch may move this much to split evenly into DP x micro-batches x m.
    checkpoint_interval_s: None = Daly's optimum.
    """

    deadline_s: float | None = Field(None, gt=0)
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS)
    max_gpus: int = Field(MAX_GPUS, ge=1, le=MAX_GPUS)
    layout: Layout | None = None
    zero: choices.ZeroStage | None = None
    recompute: Recompute | None = None
    micro_batch: int | None = Field(None, ge=1)
    cp: int | None = Field(None, ge=1)  # pin context parallelism (None: search it)
    vpp: int | None = Field(None, ge=1)  # pin the virtual pipeline stages per GPU (None: search them)
    batch_tolerance: float = Field(0.1, ge=0, le=1)
    checkpoint_interval_s: float | None = Field(None, gt=0)
    top_k: int = Field(12, ge=1, le=100)


class CurvePoint(_Frozen):
    """The best layout at one GPU count."""

    gpus: int
    feasible: bool
    layout: Layout | None = None
    runtime_s: float = math.inf  # failure-free
    wall_clock_s: float = math.inf  # expected, with failures
    gpu_hours: float = math.inf  # failure-free
    cost_usd: float | None = None  # wall-clock with failures x price
    goodput_frac: float = 0.0
    mfu: float = 0.0
    bubble_frac: float = 0.0
    comm_frac: float = 0.0
    meets_deadline: bool | None = None
    slower_reason: str = ""  # set where more GPUs are slower than a smaller count


class TrainingPlan(_Frozen):
    """Everything the training page and ``rabit train`` show."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    mode: Literal["deadline", "budget", "layout"]
    goal: TrainingGoal
    work: Work
    gpus: int
    best: LayoutResult | None
    alternatives: tuple[LayoutResult, ...]
    memory: TrainingMemory | None
    goodput: Goodput | None
    price: Price | None
    cost_usd: float | None
    curve: tuple[CurvePoint, ...]
    deadline_met: bool | None
    message: str
    steps: tuple[Step, ...] = ()
    #: GPUs x the expected wall-clock with failures (checkpoint writes, lost work, restarts) [GPU-h]: what the
    #: cost is priced on, so the two cards count the same hours.
    gpu_hours_with_failures: float | None = None


def _cps(c: LayoutContext, goal: TrainingGoal) -> tuple[int, ...]:
    """Context-parallel degrees worth searching: the pinned layout's, else those leaving each rank at least
    :data:`CP_MIN_TOKENS` tokens (CP 1 alone for sequences shorter than twice that)."""
    if goal.layout is not None:
        return (goal.layout.cp,)
    if goal.cp is not None:
        return (goal.cp,)
    return tuple(k for k in CP_DEGREES if k == 1 or c.seq // k >= CP_MIN_TOKENS)


def _candidates(c: LayoutContext, goal: TrainingGoal) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(TP, PP, EP) values worth searching for this model and cluster."""
    m = c.m
    top = min(c.coll.domain, 64)
    tps = tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if t <= top and m.splits_heads(t))
    L = m.num_layers
    pps = sorted({d for d in range(1, L + 1) if L % d == 0} | {p for p in (2, 4, 8, 16, 32) if p <= L})
    eps: tuple[int, ...] = (1,)
    if m.is_moe:
        eps = tuple(e for e in (1, 2, 4, 8, 16, 32, 64) if e <= m.num_experts and m.num_experts % e == 0)
    if goal.layout is not None:
        return (goal.layout.tp,), (goal.layout.pp,), (goal.layout.ep,)
    return tps, tuple(pps), eps


def _axes(goal: TrainingGoal) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    if goal.layout is not None:
        lay = goal.layout
        return _vpp_axis(goal), (lay.micro_batch,), (lay.recompute,), (lay.zero,)
    bs = (goal.micro_batch,) if goal.micro_batch else MICRO_BATCHES
    rcs = (goal.recompute,) if goal.recompute else RECOMPUTES
    zs = (goal.zero,) if goal.zero is not None else ZERO_STAGES
    return _vpp_axis(goal), bs, rcs, zs


def _vpp_axis(goal: TrainingGoal) -> tuple[int, ...]:
    """The virtual-stage counts to try: the pinned one, a pinned layout's own when above 1, else every one."""
    if goal.vpp is not None:
        return (goal.vpp,)
    if goal.layout is not None and goal.layout.vpp > 1:
        return (goal.layout.vpp,)
    return VIRTUAL_STAGES


def _pinned_layout(dep: Deployment, goal: TrainingGoal) -> Layout:
    """The pinned layout with its virtual stages chosen: of the counts :func:`_vpp_axis` allows, the fastest
    valid one that fits (interleaving needs PP > 1, PP v <= L and m divisible by PP; it raises the first stage's
    activations), else the fastest valid one; v = 1 is always valid."""
    lay = goal.layout
    assert lay is not None
    if goal.vpp is not None:  # pinned: evaluated as asked, so an invalid count is reported, not replaced
        return lay.model_copy(update={"vpp": goal.vpp})
    best: tuple[tuple[bool, float], Layout] | None = None
    for v in _vpp_axis(goal):
        cand = lay.model_copy(update={"vpp": v})
        r = evaluate_layout(dep, cand)
        if not r.batch_ok and v > 1:
            continue
        key = (not r.fits, r.step_s)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1] if best is not None else lay


def gpu_counts(gpus_per_node: int, max_gpus: int = MAX_GPUS) -> np.ndarray:
    """Powers of two below one node, then every whole number of nodes up to ``max_gpus``."""
    small = [2**i for i in range(0, 16) if 2**i < gpus_per_node and 2**i <= max_gpus]
    nodes = np.arange(1, max_gpus // gpus_per_node + 1) * gpus_per_node
    return np.array(small + nodes.tolist(), dtype=np.int64)


_CURVE_KEYS = (
    "runtime",
    "step",
    "steps",
    "compute",
    "bubble",
    "t_tp",
    "t_ep",
    "t_p2p",
    "dp_exp",
    "opt",
    "mfu",
    "mem",
    "mm",
)


def _best_per_count(c: LayoutContext, goal: TrainingGoal, counts: np.ndarray) -> dict[str, np.ndarray]:
    """The fastest feasible layout at each GPU count (vectorised search); runtime inf where none."""
    vs, bs, rcs, zs = _axes(goal)
    tps, pps, eps = _candidates(c, goal)
    n = len(counts)
    best: dict[str, np.ndarray] = {k: np.full(n, np.inf) for k in _CURVE_KEYS}
    lay = np.zeros((n, 9), dtype=np.int64)  # tp, pp, dp, ep, b, zero, rc index, v, cp
    shape_tail = (len(vs), len(bs), len(rcs), len(zs))
    max_dp = c.batch_seqs * (1 + goal.batch_tolerance)
    for tp in tps:
        for cp in _cps(c, goal):
            for pp in pps:
                grp = tp * pp * cp
                sel = np.nonzero((counts % grp == 0) & (counts // grp <= max_dp))[0]
                if not len(sel):
                    continue
                for ep in eps:
                    dp = counts[sel] // grp
                    if ep > 1:
                        ok = (tp * dp) % ep == 0
                        if not ok.any():
                            continue
                        idx, dp = sel[ok], dp[ok]
                    else:
                        idx = sel
                    r = layout_grid(c, tp, pp, ep, dp, vs, bs, rcs, zs, goal.batch_tolerance, cp=cp)
                    full = (len(dp),) + shape_tail
                    rt = np.where(np.broadcast_to(r["feasible"], full), np.broadcast_to(r["runtime"], full), np.inf)
                    flat = rt.reshape(len(dp), -1)
                    j = np.argmin(flat, axis=1)
                    val = flat[np.arange(len(dp)), j]
                    better = val < best["runtime"][idx]
                    if not better.any():
                        continue
                    ii, jj, rows = idx[better], j[better], np.arange(len(dp))[better]
                    for key in _CURVE_KEYS:
                        arr = np.broadcast_to(r[key], full).reshape(len(dp), -1)
                        best[key][ii] = arr[rows, jj]
                    vi, bi, ri, zi = np.unravel_index(jj, shape_tail)
                    lay[ii] = np.stack(
                        [
                            np.full(len(ii), tp),
                            np.full(len(ii), pp),
                            dp[better],
                            np.full(len(ii), ep),
                            np.asarray(bs)[bi],
                            np.asarray(zs)[zi],
                            np.array([RECOMPUTES.index(x) for x in rcs])[ri],
                            np.asarray(vs)[vi],
                            np.full(len(ii), cp),
                        ],
                        axis=1,
                    )
    best["layout"] = lay
    return best


def _why_lost(best: LayoutResult, other: LayoutResult) -> str:
    if not other.fits:
        return (
            f"memory: needs {sig(other.memory_bytes_per_gpu / 1e9)} GB per GPU, "
            f"{sig(other.usable_bytes_per_gpu / 1e9)} GB usable of {sig(other.capacity_bytes_per_gpu / 1e9)} GB"
        )
    if not other.batch_ok:
        return (
            f"global batch: DP {other.layout.dp} x micro-batch {other.layout.micro_batch} cannot split the batch "
            "evenly" + (" (interleaving needs m divisible by PP)" if other.layout.vpp > 1 else "")
        )
    parts = {
        "compute (recomputation, stage imbalance)": other.compute_s * other.steps - best.compute_s * best.steps,
        "pipeline bubble": other.bubble_s * other.steps - best.bubble_s * best.steps,
        "communication": other.comm_exposed_s * other.steps - best.comm_exposed_s * best.steps,
        "optimizer step": other.optimizer_s * other.steps - best.optimizer_s * best.steps,
    }
    name, d = max(parts.items(), key=lambda kv: kv[1])
    slower = other.runtime_s / best.runtime_s - 1
    if slower <= 1e-9 or d <= 0:
        return "ties with the fastest"
    return f"{name}: +{sig(d / 3600)} h over the run ({slower:+.1%} runtime)"


def _shape_rows(r: dict, shape: tuple[int, ...], vs, bs, rcs, zs) -> list[tuple[float, float, Layout, dict, tuple]]:
    """The best setting of each ZeRO stage of one TP x PP x DP x EP x CP shape: (0, runtime, ...) when one fits,
    else (1, memory, ...) for the leanest that splits the batch."""
    tp, pp, dp, ep, cp = shape
    full = (1, len(vs), len(bs), len(rcs), len(zs))
    feas = np.broadcast_to(r["feasible"], full)
    rt = np.broadcast_to(r["runtime"], full)
    mem = np.broadcast_to(r["mem"], full)
    out: list[tuple[float, float, Layout, dict, tuple]] = []
    for zi, z in enumerate(zs):
        if dp * cp == 1 and zi > 0:
            break  # ZeRO shards over DP x CP: at 1 every stage is the same layout
        sub_f, sub_rt = feas[..., zi], rt[..., zi]
        if sub_f.any():
            j = np.unravel_index(np.argmin(np.where(sub_f, sub_rt, np.inf)), sub_f.shape)
            key = (0.0, float(sub_rt[j]))
        else:
            bo = np.broadcast_to(r["batch_ok"] & r["v_ok"], full)[..., zi]
            if not bo.any():
                continue
            j = np.unravel_index(np.argmin(np.where(bo, mem[..., zi], np.inf)), bo.shape)
            key = (1.0, float(mem[..., zi][j]))
        ix = tuple(int(x) for x in j) + (zi,)
        lay = Layout(
            tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=bs[ix[2]], zero=z, recompute=rcs[ix[3]], vpp=vs[ix[1]], cp=cp
        )
        out.append((key[0], key[1], lay, r, ix))
    return out


def layouts_at(dep: Deployment | RabitConfig, gpus: int, goal: TrainingGoal | None = None) -> tuple[LayoutResult, ...]:
    """The best setting of each TP x PP x EP x ZeRO shape on ``gpus`` GPUs, fastest feasible first, then
    shapes that do not fit; ``why`` says why each lost to the first."""
    goal = goal or TrainingGoal()
    c = layout_context(dep)
    vs, bs, rcs, zs = _axes(goal)
    tps, pps, eps = _candidates(c, goal)
    rows: list[tuple[float, float, Layout, dict, tuple]] = []
    for tp in tps:
        for cp in _cps(c, goal):
            for pp in pps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for ep in eps:
                    if ep > 1 and (tp * dp) % ep:
                        continue
                    r = layout_grid(
                        c,
                        tp,
                        pp,
                        ep,
                        np.array([dp]),
                        vs,
                        bs,
                        rcs,
                        zs,
                        goal.batch_tolerance if goal.layout is None else 1e9,
                        cp=cp,
                    )
                    rows.extend(_shape_rows(r, (tp, pp, dp, ep, cp), vs, bs, rcs, zs))
    rows.sort(key=lambda t: (t[0], t[1]))
    if not rows:
        return ()
    out = [result_at(c, lay, r, ix) for _, _, lay, r, ix in rows]
    fitting = [x for x in out if x.feasible]
    if not fitting:
        return tuple(x.model_copy(update={"why": _why_lost(x, x)}) for x in out[: goal.top_k])
    best = fitting[0]
    top = [best.model_copy(update={"why": "fastest that fits"})]
    top += [x.model_copy(update={"why": _why_lost(best, x)}) for x in fitting[1 : goal.top_k]]
    nofit = [x for x in out if not x.fits]
    top += [x.model_copy(update={"why": _why_lost(best, x)}) for x in nofit[: max(3, goal.top_k // 4)]]
    return tuple(top)


def budget_problem(cfg: RabitConfig, gpus: int) -> str | None:
    """Why ``gpus`` cannot be a GPU budget for this cluster (None when it can)."""
    node = cfg.gpus_per_node
    if gpus < 1:
        return "the GPU budget must be at least 1"
    if gpus > MAX_GPUS:
        return f"at most {MAX_GPUS:,} GPUs"
    return whole_nodes_problem(gpus, node)


def goal_from_inputs(
    cfg: RabitConfig,
    *,
    deadline_days: float | None = None,
    gpus: int | None = None,
    max_gpus: int = MAX_GPUS,
    pin_sidebar: bool = False,
    checkpoint_interval_min: float | None = None,
) -> TrainingGoal:
    """A :class:`TrainingGoal` from the page's human units (days, minutes); pins the config's ZeRO stage,
    recomputation, micro-batch and context parallelism when ``pin_sidebar``."""
    return TrainingGoal(
        deadline_s=deadline_days * DAY_S if deadline_days else None,
        gpus=gpus,
        max_gpus=max_gpus,
        zero=cfg.zero if pin_sidebar else None,
        recompute=cfg.recompute if pin_sidebar else None,
        micro_batch=cfg.micro_batch if pin_sidebar else None,
        cp=cfg.cp if pin_sidebar else None,
        checkpoint_interval_s=checkpoint_interval_min * 60 if checkpoint_interval_min else None,
    )


# --- prices --------------------------------------------------------------------------------------------------


def catalog_price(gpu: str) -> Price | None:
    """The on-demand price of ``gpu`` under the project's one price policy (:mod:`core.catalog.pricing`: the median
    listing across providers), as a price row; None when the catalog has none.

    The optimizer uses the same policy, so a run costs the same on the Training page and in the optimizer.
    """
    gp = gpu_price(gpu, catalog.prices())
    if gp is None:
        return None
    if len(gp.rows) == 1:
        return gp.rows[0]
    return Price(
        gpu=gpu,
        provider=f"median of {len(gp.rows)} on-demand listings",
        kind="on-demand",
        usd_per_gpu_hour=gp.usd_per_gpu_hour,
        source=gp.basis,
        as_of=max(r.as_of for r in gp.rows),
        verification="U" if any(r.verification == "U" for r in gp.rows) else "S",
    )


# --- the plan ------------------------------------------------------------------------------------------------


def _slower_reasons(counts: np.ndarray, best: dict[str, np.ndarray]) -> list[str]:
    """For each count whose best runtime exceeds that of a smaller count, which part of the runtime grew."""
    out = [""] * len(counts)

    def parts(k: int) -> dict[str, float]:
        n = best["steps"][k]
        comm = best["mm"][k] * (best["t_tp"][k] + best["t_ep"][k] + best["t_p2p"][k]) + best["dp_exp"][k]
        return {
            "pipeline bubble": best["bubble"][k] * n,
            "communication": comm * n,
            "compute per GPU (batch split, stage imbalance)": best["compute"][k] * n,
        }

    j = -1  # the fastest smaller count so far
    for i in range(len(counts)):
        rt = best["runtime"][i]
        if not np.isfinite(rt):
            continue
        if j >= 0 and rt > best["runtime"][j] * (1 + 1e-9):
            pi, pj = parts(i), parts(j)
            name, d = max(((k, pi[k] - pj[k]) for k in pi), key=lambda kv: kv[1])
            out[i] = (
                f"+{fmt_pct(rt / best['runtime'][j] - 1)} vs {int(counts[j]):,} GPUs: {name} grows by "
                f"{sig(d / 3600)} h over the run"
            )
        else:
            j = i
    return out


def plan(dep: Deployment | RabitConfig, goal: TrainingGoal | None = None) -> TrainingPlan:
    """Size a training run: the layout search, the GPU-count curve, the deadline, goodput and cost."""
    goal = goal or TrainingGoal()
    dep = as_deployment(dep)
    cfg = dep.config
    c = layout_context(dep)
    wk = work(dep)
    price = catalog_price(cfg.gpu)
    usd = price.usd_per_gpu_hour if price else None
    mode, n_target = _mode_of(goal, cfg.gpus)
    counts = _curve_counts(goal, cfg.gpus_per_node, n_target)
    best = _best_per_count(c, goal, counts)
    rt = best["runtime"]
    feasible = np.isfinite(rt)
    Tw, gfrac, _ = goodput_arrays(np.where(feasible, rt, 0.0), counts, cfg.assumptions, goal.checkpoint_interval_s)
    Tw = np.where(feasible, Tw, np.inf)
    meets = feasible & (Tw <= goal.deadline_s) if goal.deadline_s else None
    curve = _curve(counts, best, Tw, gfrac, meets, usd)
    deadline_met: bool | None = None
    message = ""
    if mode == "deadline":
        assert meets is not None
        n_target, deadline_met, message = _deadline_count(goal, wk, curve, counts, Tw, feasible)
    assert n_target is not None
    bres, tr, alts = _chosen_layout(dep, goal, mode, n_target)
    if bres is None:
        return TrainingPlan(
            mode=mode,
            goal=goal,
            work=wk,
            gpus=n_target,
            best=None,
            alternatives=alts,
            memory=None,
            goodput=None,
            price=price,
            cost_usd=None,
            curve=tuple(curve),
            deadline_met=deadline_met,
            message=(message + "; " if message else "") + _infeasible_message(c, n_target, alts),
        )
    mem = layout_memory(dep, bres.layout, bres.micro_batches)
    gp = goodput(bres.runtime_s, bres.gpus, cfg.assumptions, interval_s=goal.checkpoint_interval_s, tr=tr)
    cost = usd * bres.gpus * gp.wall_clock_s / HOUR_S if usd else None
    if mode == "budget":
        message = f"fastest layout on {_gpus(n_target)}: {bres.layout.label()}"
    elif mode == "layout":
        message = f"{bres.layout.label()} on {_gpus(bres.gpus)} " + (
            "fits" if bres.fits else f"does NOT fit: {mem.reason}"
        )
    if goal.deadline_s and mode != "deadline":
        deadline_met = gp.wall_clock_s <= goal.deadline_s
    return TrainingPlan(
        mode=mode,
        goal=goal,
        work=wk,
        gpus=bres.gpus,
        best=bres,
        alternatives=alts,
        memory=mem,
        goodput=gp,
        price=price,
        cost_usd=cost,
        curve=tuple(curve),
        deadline_met=deadline_met,
        message=message,
        steps=mem.steps + tr.frozen(),
        gpu_hours_with_failures=bres.gpus * gp.wall_clock_s / HOUR_S,
    )


def _mode_of(goal: TrainingGoal, gpus: int) -> tuple[Literal["budget", "deadline", "layout"], int | None]:
    """(what the goal asks, the GPU count it fixes): a pinned layout's count, a deadline's to be searched
    (None), else the goal's or the config's count to find the fastest layout on."""
    if goal.layout is not None:
        return "layout", goal.layout.gpus
    if goal.deadline_s is not None:
        return "deadline", None
    return "budget", goal.gpus or gpus


def _curve_counts(goal: TrainingGoal, node: int, n_target: int | None) -> np.ndarray:
    """The GPU counts of the curve: every count up to the bound for a deadline search, else up to four times the
    target (at least eight nodes), the target among them."""
    if n_target is None:
        return gpu_counts(node, goal.max_gpus)
    counts = gpu_counts(node, min(goal.max_gpus, max(4 * n_target, 8 * node)))
    if n_target not in counts:
        counts = np.sort(np.append(counts, n_target))
    return counts


def _curve(
    counts: np.ndarray, best: dict, Tw: np.ndarray, gfrac: np.ndarray, meets: np.ndarray | None, usd: float | None
) -> list[CurvePoint]:
    """One point per GPU count: its fastest layout's runtime, wall clock with failures, cost and shares."""
    rt = best["runtime"]
    reasons = _slower_reasons(counts, best)
    curve = []
    for i, n in enumerate(counts):
        if not np.isfinite(rt[i]):
            curve.append(CurvePoint(gpus=int(n), feasible=False, meets_deadline=False if meets is not None else None))
            continue
        st = best["step"][i]
        comm = best["mm"][i] * (best["t_tp"][i] + best["t_ep"][i] + best["t_p2p"][i]) + best["dp_exp"][i]
        curve.append(
            CurvePoint(
                gpus=int(n),
                feasible=True,
                layout=layout_of(best["layout"][i]),
                runtime_s=float(rt[i]),
                wall_clock_s=float(Tw[i]),
                gpu_hours=float(n * rt[i] / HOUR_S),
                cost_usd=float(usd * n * Tw[i] / HOUR_S) if usd else None,
                goodput_frac=float(gfrac[i]),
                mfu=float(best["mfu"][i]),
                bubble_frac=float(best["bubble"][i] / st),
                comm_frac=float(comm / st),
                meets_deadline=bool(meets[i]) if meets is not None else None,
                slower_reason=reasons[i],
            )
        )
    return curve


def _deadline_count(
    goal: TrainingGoal, wk: Work, curve: list[CurvePoint], counts: np.ndarray, Tw: np.ndarray, feasible: np.ndarray
) -> tuple[int, bool, str]:
    """(the GPU count, whether it meets the deadline, the headline): the cheapest count that meets it, else the
    fastest feasible one with what to change, else the largest count."""
    assert goal.deadline_s is not None
    choice = deadline_choice(curve)
    if choice is not None:
        return choice.cheapest.gpus, True, choice.headline(fmt_num(wk.tokens), sig(goal.deadline_s / DAY_S))
    if not feasible.any():
        return int(counts[-1]), False, ""
    i = int(np.argmin(Tw))
    n = int(counts[i])
    return (
        n,
        False,
        f"no count up to {goal.max_gpus:,} GPUs meets {sig(goal.deadline_s / 86400)} days; the fastest, "
        f"{n:,} GPUs, needs {sig(Tw[i] / 86400)} days. Raise the global batch (it caps useful "
        "data parallelism), use FP8 or a faster GPU, or move the deadline",
    )


def _chosen_layout(
    dep: Deployment, goal: TrainingGoal, mode: Literal["budget", "deadline", "layout"], n_target: int
) -> tuple[LayoutResult | None, Trace, tuple[LayoutResult, ...]]:
    """(the layout evaluated in full with its trace, the alternatives): the pinned layout, or the fastest feasible
    one on ``n_target`` GPUs (None when none fits)."""
    tr = Trace()
    if mode == "layout":
        return evaluate_layout(dep, _pinned_layout(dep, goal), tr), tr, ()
    alts = layouts_at(dep, n_target, goal)
    feas = [x for x in alts if x.feasible]
    return (evaluate_layout(dep, feas[0].layout, tr) if feas else None), tr, alts


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


def _infeasible_message(c: LayoutContext, gpus: int, alts: tuple[LayoutResult, ...]) -> str:
    if alts:
        lean = min(alts, key=lambda x: x.memory_bytes_per_gpu)
        return (
            f"no layout fits on {_gpus(gpus)}: the leanest ({lean.layout.label()}) needs "
            f"{sig(lean.memory_bytes_per_gpu / 1e9)} GB per GPU, {sig(c.usable / 1e9)} GB usable of "
            f"{sig(c.capacity / 1e9)} GB; add GPUs, use LoRA/QLoRA, or a GPU with more memory"
        )
    return (
        f"the global batch of {c.batch_seqs:,} sequences cannot be split over {gpus:,} GPUs (DP x micro-batch "
        "exceeds it for every TP x PP); raise the global batch or use fewer GPUs"
    )
