"""Why the optimizer chose what it chose, in words: the GPU, the count, the bottleneck, the risks, the alternatives,
what to relax when nothing meets the target, and why each configuration is on the Pareto front.

The prose of :func:`core.decision.optimizer.recommend`; its latencies in the one formatter family
(:func:`core.base.units.fmt_latency`).
"""

from __future__ import annotations

import math

from core.base import REGISTRY, fmt_latency, fmt_pct, sig
from core.decision.goal import (
    _F,
    SCREEN_SLOT_WAIT_SHARE,
    SCREEN_UTILISATION,
    WEIGHT_FORMATS,
    Candidate,
    Constraints,
    ServingGoal,
    worst_ratio,
)
from core.serving import THRASH_REMEDIES, sessions_text


class Explanation(_F):
    summary: str
    why_gpu: str
    why_count: str
    bottleneck: str
    assumptions: tuple[str, ...]
    risks: tuple[str, ...]
    cheaper_alternative: str
    faster_alternative: str
    relax: str = ""  # when nothing meets the target: which constraint to relax
    disaggregation: str = ""  # why separate prefill and decode pools won or lost


def _load(goal) -> str:
    """The load an answer is for, in words: the request rate, or a session goal's agents and turns (whose request
    rate is only the screen's estimate, :func:`core.decision.session_sizing.session_goal`)."""
    if goal.sessions is not None:
        return "for " + sessions_text(goal.sessions)
    return f"at {sig(goal.rate_per_s, 6)} requests/s"


def _more(cost: float, base: float) -> str:
    """How much more ``cost`` is than ``base``, in digits that are not zero ("+54%", "+0.3%", "the same cost")."""
    if cost == base:
        return "the same cost"
    d = cost / base - 1
    return ("+" if d > 0 else "") + fmt_pct(d)


def explain(
    goal: ServingGoal,
    cons: Constraints,
    best: Candidate | None,
    nearest: Candidate | None,
    simulated: list[Candidate],
    cands: list[Candidate],
) -> Explanation:
    """The structured why: GPU, count, bottleneck, assumptions, risks, alternatives, what to relax."""
    assumptions = _assumption_lines(goal, cons)
    targets = _targets_text(goal)
    if best is None:
        return _nothing_meets(goal, cons, nearest, cands, assumptions, targets)
    others = [c for c in simulated if c.meets and c.gpu != best.gpu]
    runner = min(others, key=lambda c: c.cost) if others else None
    why_gpu = f"{best.gpu} meets the target at ${best.cost:,.2f}/h" + (
        f"; the best other GPU, {runner.gpu}, needs ${runner.cost:,.2f}/h ({_more(runner.cost, best.cost)})"
        if runner
        else "; no other GPU kind met the target within the simulation budget"
    )
    why_count = _why_count(goal, best)
    bott = f"decode at batch {int(best.screen_batch or 0)} is {best.bottleneck}-bound" + (
        "; the weights and KV cache stream from HBM every step" if best.bottleneck == "memory" else ""
    )
    risks = _risks(goal, best)
    cheap_txt, fast_txt = _alternatives(best, simulated)
    return Explanation(
        disaggregation=disaggregation_text(goal, best, simulated, cands),
        summary=f"Use {best.label}: ${best.cost_per_hour:,.2f}/h, meeting {targets} {_load(goal)}.",
        why_gpu=why_gpu,
        why_count=why_count,
        bottleneck=bott,
        assumptions=assumptions,
        risks=tuple(risks),
        cheaper_alternative=cheap_txt,
        faster_alternative=fast_txt,
    )


def _assumption_lines(goal: ServingGoal, cons: Constraints) -> tuple[str, ...]:
    """The assumptions a recommendation rests on, with their bounds (and the adapters' slots when served)."""
    a = goal.assumptions
    assumptions: tuple[str, ...] = (
        f"decode memory-bandwidth utilisation {sig(a.mbu, 6)} ({sig(REGISTRY['mbu'].low, 6)}-{sig(REGISTRY['mbu'].high, 6)})",
        f"prefill compute efficiency ceiling {sig(a.mfu_max, 6)} ({sig(REGISTRY['mfu_max'].low, 6)}-{sig(REGISTRY['mfu_max'].high, 6)})",
        f"replicas sized in the screen at {SCREEN_UTILISATION:.0%} utilisation, then checked by simulation",
        f"prices: {cons.price_policy} {cons.price_kind} listing per GPU-hour",
    )
    ad = goal.settings.adapters
    if ad.enabled:  # multi-LoRA serving: how the slots were chosen, and the adapter kernels' efficiency
        assumptions += (
            f"{ad.count:,} adapters over one base: max_loras is the fewest slots whose mean wait for a slot stays "
            f"within {SCREEN_SLOT_WAIT_SHARE:.0%} of the latency target (closed form), then checked by simulation; "
            "adapter kernels at "
            f"{sig(a.lora_kernel_eff, 6)} of the step's efficiency "
            f"({sig(REGISTRY['lora_kernel_eff'].low, 6)}-{sig(REGISTRY['lora_kernel_eff'].high, 6)})",
        )
    return assumptions


def _targets_text(goal: ServingGoal) -> str:
    """The p95 targets in words (or that there are none)."""
    return (
        ", ".join(
            f"p95 {n} <= {fmt_latency(v)}"
            for n, v in (("TTFT", goal.p95_ttft_s), ("ITL", goal.p95_itl_s), ("end-to-end", goal.p95_e2e_s))
            if v is not None
        )
        or "no latency target (cheapest that keeps up)"
    )


def _nothing_meets(
    goal: ServingGoal,
    cons: Constraints,
    nearest: Candidate | None,
    cands: list[Candidate],
    assumptions: tuple[str, ...],
    targets: str,
) -> Explanation:
    """Why nothing meets the targets: the closest configuration, and what to relax given the commonest reason the
    screen pruned candidates."""
    near = (
        f"{nearest.label} (p95 TTFT {fmt_latency(nearest.p95_ttft_s)}, ITL {fmt_latency(nearest.p95_itl_s)}, end-to-end "
        f"{fmt_latency(nearest.p95_e2e_s)}{'; ' + nearest.sim_notes if not nearest.simulated else ''})"
        if nearest
        else "no configuration fits under these constraints"
    )
    pruned = [c for c in cands if c.pruned]
    reasons: dict[str, int] = {}
    for c in pruned:
        key = c.pruned.split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    top = max(reasons, key=lambda k: reasons[k]) if reasons else ""
    relax = relax_hint(goal, cons, nearest, top)
    return Explanation(
        summary=f"Nothing meets {targets} {_load(goal)}. Closest: {near}.",
        why_gpu="",
        why_count="",
        bottleneck=nearest.bottleneck if nearest else "",
        assumptions=assumptions,
        risks=(),
        cheaper_alternative="",
        faster_alternative="",
        relax=relax,
    )


def _why_count(goal: ServingGoal, best: Candidate) -> str:
    """How many replicas (or prefill and decode instances) and the load each carries against its capacity."""
    why_count = (
        f"{best.replicas} replica(s) of {best.gpus_per_replica} GPU(s): each carries "
        f"{sig(goal.rate_per_s / best.n_replicas)} of the {sig(goal.rate_per_s, 6)} requests/s against a closed-form "
        f"capacity of {sig(best.capacity_per_replica_rps)}/s at batch {int(best.screen_batch or 0)}; simulated p95 "
        f"TTFT {fmt_latency(best.p95_ttft_s)}, ITL {fmt_latency(best.p95_itl_s)}, end-to-end {fmt_latency(best.p95_e2e_s)}"
    )
    if best.prefill is not None and best.decode is not None:
        P, D = best.prefill, best.decode
        why_count = (
            f"{P.instances} prefill instance(s) of {P.gpus_per_instance} GPU(s), each taking "
            f"{sig(goal.rate_per_s / P.instances)} of the {sig(goal.rate_per_s, 6)} requests/s against a closed-form "
            f"{sig(P.capacity_per_instance_rps)}/s, and {D.instances} decode instance(s) of {D.gpus_per_instance} GPU(s) "
            f"at {sig(goal.rate_per_s / D.instances)} against {sig(D.capacity_per_instance_rps)}/s (batch cap "
            f"{D.max_num_seqs}); simulated p95 TTFT {fmt_latency(best.p95_ttft_s)}, ITL {fmt_latency(best.p95_itl_s)}, "
            f"end-to-end {fmt_latency(best.p95_e2e_s)}"
        )
    return why_count


def _risks(goal: ServingGoal, best: Candidate) -> list[str]:
    """What could undo the pick: little headroom, low-precision formats, unverified prices, KV thrash, replicas near
    their capacity."""
    risks = []
    margin = worst_ratio(best, goal)
    if margin > 0.9:
        risks.append(f"the tightest p95 is at {margin:.0%} of its target: little headroom for burstier traffic")
    if best.weights in ("int4", "nvfp4") or best.kv_dtype == "fp8":
        risks.append(f"{best.weights} weights / {best.kv_dtype} KV need a quality evaluation before shipping")
    if best.price_unverified:
        risks.append(f"the price rests on unverified listings: {best.price_basis}")
    if "KV thrash" in best.sim_notes:
        risks.append(
            "the simulation preempts at least once per request (KV thrash); remedies: " + "; ".join(THRASH_REMEDIES)
        )
    if goal.rate_per_s / best.n_replicas > 0.85 * (best.capacity_per_replica_rps or math.inf):
        risks.append("replicas run above 85% of their closed-form capacity")
    return risks


def _alternatives(best: Candidate, simulated: list[Candidate]) -> tuple[str, str]:
    """(the cheapest simulated configuration that misses a target, the fastest that meets them all), in words."""
    cheaper = [c for c in simulated if not c.meets and c.cost < best.cost]
    cheap_txt = ""
    if cheaper:
        ch = min(cheaper, key=lambda c: c.cost)
        cheap_txt = (
            f"{ch.label} at ${ch.cost:,.2f}/h gives up the target: p95 end-to-end "
            f"{fmt_latency(ch.p95_e2e_s)}, TTFT {fmt_latency(ch.p95_ttft_s)}, ITL {fmt_latency(ch.p95_itl_s)}"
        )
    best_e2e = best.p95_e2e_s
    faster = [
        (e2e, c)
        for c in simulated
        if c.meets and (e2e := c.p95_e2e_s) is not None and best_e2e is not None and e2e < best_e2e
    ]
    fast_txt = ""
    if faster:
        fa = min(faster, key=lambda ec: ec[0])[1]
        fast_txt = (
            f"{fa.label}: p95 end-to-end {fmt_latency(fa.p95_e2e_s)} instead of {fmt_latency(best_e2e)} for "
            f"${fa.cost:,.2f}/h ({_more(fa.cost, best.cost)})"
        )
    return cheap_txt, fast_txt


def disaggregation_text(goal: ServingGoal, best: Candidate, simulated: list[Candidate], cands: list[Candidate]) -> str:
    """Why disaggregation won or lost: prefill/decode interference in the aggregated replicas (their simulated
    p95 TTFT and ITL) against the disaggregated pools' KV transfer and idle capacity."""
    agg = [c for c in simulated if c.mode == "aggregated"]
    dis = [c for c in simulated if c.mode == "disaggregated"]
    agg_ok = min((c for c in agg if c.meets), key=lambda c: c.cost, default=None)
    dis_ok = min((c for c in dis if c.meets), key=lambda c: c.cost, default=None)

    def lat(c: Candidate) -> str:
        return f"p95 TTFT {fmt_latency(c.p95_ttft_s)}, ITL {fmt_latency(c.p95_itl_s)}"

    if best.mode == "disaggregated":
        if agg_ok is not None:
            vs = f"the cheapest aggregated layout that meets them, {agg_ok.label}, costs ${agg_ok.cost:,.2f}/h ({lat(agg_ok)})"
        elif agg:
            near = min(agg, key=lambda c: (worst_ratio(c, goal), c.cost))
            vs = (
                f"no aggregated layout simulated met them: prompts interleaved with decode iterations hold {near.label} "
                f"at {lat(near)}"
            )
        else:
            vs = "no aggregated layout reached a simulation"
        return f"Disaggregated wins: its decode pool runs no prompts ({lat(best)}; {best.sim_notes}), while {vs}."
    if dis_ok is not None:
        return (
            f"Aggregated wins: the cheapest disaggregated layout that meets the targets, {dis_ok.label}, costs "
            f"${dis_ok.cost:,.2f}/h ({dis_ok.cost / best.cost - 1:+.0%}): {dis_ok.sim_notes}; the interference it removes "
            "is not worth a second pool here."
        )
    if dis:
        near = min(dis, key=lambda c: (worst_ratio(c, goal), c.cost))
        return f"Aggregated wins: the disaggregated layouts simulated miss the targets (closest {near.label}: {lat(near)})."
    screened = [c for c in cands if c.mode == "disaggregated" and not c.pruned]
    if screened:
        cheapest = min(screened, key=lambda c: c.cost)
        return (
            f"Aggregated wins: the cheapest disaggregated layout costs ${cheapest.cost:,.2f}/h in closed form, "
            f"more than the pick's ${best.cost:,.2f}/h, so none was simulated."
        )
    return "No disaggregated layout passes the closed-form screen (a prefill pool misses the TTFT target at batch 1)."


def relax_hint(goal: ServingGoal, cons: Constraints, nearest: Candidate | None, top_reason: str) -> str:
    """What to relax when nothing meets the target: each target the nearest option misses, each hard constraint."""
    hints = []
    if nearest is not None:
        for name, v, t in (
            ("p95 TTFT", nearest.p95_ttft_s, goal.p95_ttft_s),
            ("p95 ITL", nearest.p95_itl_s, goal.p95_itl_s),
            ("p95 end-to-end", nearest.p95_e2e_s, goal.p95_e2e_s),
        ):
            if t is not None and v is not None and v > t:
                hints.append(f"raise the {name} target to at least {fmt_latency(v)}")
    if cons.max_gpus is not None:
        hints.append(f"raise the GPU limit above {cons.max_gpus}")
    if cons.max_usd_per_hour is not None:
        hints.append(f"raise the price limit above ${cons.max_usd_per_hour:,.0f}/h")
    if cons.gpus_allowed:
        hints.append("allow more GPU kinds")
    if set(cons.weights_allowed) != set(WEIGHT_FORMATS):
        hints.append("allow FP8 or 4-bit weights")
    if top_reason:
        hints.append(f"most configurations were pruned because: {top_reason}")
    return "; ".join(hints)


def pareto_reasons(points) -> dict[str, str]:
    """Why each point of a three-criterion front is on it, in the terms a cost-against-p95 chart shows.

    ``points``: ``(label, cost_per_hour, p95_e2e_s, capacity_requests_per_s)`` of the front's members and the
    points they are compared with. A member no other point beats on both cost and p95 is on the plotted
    (two-criterion) front; a member that some cheaper-and-faster point beats is on the front only because it
    has more capacity than every one of those, which marker size alone does not make visible.
    """
    pts = [(lbl, c, p if p is not None else math.inf, cap) for lbl, c, p, cap in points]
    out: dict[str, str] = {}
    for lbl, c, p, cap in pts:
        beat = [q for q in pts if q[0] != lbl and q[1] <= c and q[2] <= p and (q[1] < c or q[2] < p)]
        if not beat:
            out[lbl] = "no other configuration is both cheaper and faster"
        else:
            out[lbl] = (
                f"{len(beat)} cheaper-and-faster configuration(s) hold at most "
                f"{sig(max(q[3] for q in beat))} requests/s; this one holds {sig(cap)}"
            )
    return out
