"""Video generation decided: the request's numbers with their ranges, the queue at a rate, and the cheapest fleet.

:func:`video_report` is the one function the Video generation page and ``rabit video`` both call: the request's
estimate (:func:`core.physics.video_estimate`), the heuristic range of every headline number from the assumption
bounds (:func:`core.decision.uncertainty.spread` over the assumptions tagged ``video``), and, with a rate, the
queue (:func:`core.serving.simulate_queue`) with its p95 latency, cost per video and saturation verdict, ranged
the same way.

:func:`recommend_video` searches GPU kinds x GPUs per request x layout (Ulysses or ring, with or without the
guidance passes on two halves, FSDP where replicated weights do not fit) for the cheapest fleet that carries
``rate_per_hour`` videos per hour with p95 latency at most ``p95_target_s``: a closed-form screen (one video on
an idle replica must already meet the target; replicas to carry the rate at 90 % load) orders the candidates by
cost, the cheapest layout of each GPU kind is simulated (the cheapest kinds first), adding replicas until the
simulated p95 meets the target, and the cheapest that meets it is the pick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import HOUR_S, Range, sig
from core.config import RabitConfig, resolve_video, video_problems
from core.decision.uncertainty import spread
from core.physics import VideoEstimate, video_estimate, video_quick
from core.serving import (
    VideoQueueResult,
    VideoQueueSpec,
    VideoTiming,
    simulate_queue,
    video_timing,
)

#: Headline numbers of one request that carry a range (``rabit video --json``: ``ranges[key]``);
#: ``cost_per_video_full_load_usd`` only where the GPU is priced.
VIDEO_KEYS = (
    "video_s",
    "step_s",
    "denoise_s",
    "text_encoder_s",
    "vae_s",
    "memory_bytes_per_gpu",
    "attention_share",
    "cost_per_video_full_load_usd",
)
#: Queue numbers that carry a range when a rate is given.
QUEUE_KEYS = ("p95_latency_s", "p50_latency_s", "cost_per_video_usd", "capacity_per_hour")
#: Load at which the screen sizes replicas before the simulation checks them.
SCREEN_LOAD = 0.9
#: Candidates the optimizer simulates (the cheapest by the screen), and replicas it adds to one before giving up.
MAX_SIMULATED = 8
MAX_EXTRA_REPLICAS = 6
#: GPU counts per request each GPU kind is simulated at (its cheapest layout at each).
PER_KIND = 3
#: Videos each optimizer simulation runs (p95 needs 20; a few hundred keep it steady).
SEARCH_VIDEOS = 300


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class VideoReport(_F):
    """Everything the page and the CLI show for one request: the estimate, its ranges, and the queue at a rate."""

    estimate: VideoEstimate
    ranges: dict[str, Range]
    queue: VideoQueueResult | None = None
    queue_ranges: dict[str, Range] = {}
    price_basis: str = ""
    #: one video on a replica kept busy (None: the GPU has no price of the config's kind)
    cost_per_video_full_load_usd: float | None = None
    #: the saturation verdicts over the base run and every bound run
    saturated_inside_range: tuple[bool, ...] = ()


def price_of(cfg: RabitConfig, gpu: str, prices: tuple | None = None):
    """The GPU-hour price of ``gpu`` under the config's price kind, policy and providers (None: unpriced)."""
    t = cfg.targets
    return catalog.gpu_price(
        gpu,
        prices if prices is not None else catalog.prices(),
        kind=t.price_kind,
        policy=t.price_policy,
        providers=t.providers,
    )


def queue_spec(cfg: RabitConfig, rate_per_hour: float | None = None) -> VideoQueueSpec | None:
    """The queue the config's video group describes (None: no rate)."""
    v = cfg.video
    rate = rate_per_hour if rate_per_hour is not None else v.rate_per_hour
    if rate is None:
        return None
    return VideoQueueSpec(
        rate_per_hour=rate, replicas=v.replicas, max_batch=v.batch, num_videos=v.num_videos, seed=v.seed
    )


def full_load_cost_usd(t: VideoTiming, batch: int, usd_per_gpu_hour: float) -> float:
    """What one video costs on a replica kept busy at full batches [USD]: its GPUs' price for a batch's time over
    the batch: ``G price (s t_step(B) + B (t_text + t_vae)) / (B 3600)``."""
    return t.gpus * usd_per_gpu_hour * t.batch_s(batch) / batch / HOUR_S


def _estimate_numbers(prices: tuple | None):
    def run(cfg: RabitConfig) -> dict[str, Any]:
        dep = resolve_video(cfg)
        e = video_quick(dep)
        out: dict[str, Any] = {k: getattr(e, k) for k in VIDEO_KEYS if hasattr(e, k)} | {"fits": e.fits}
        p = price_of(cfg, cfg.gpu, prices)
        if p is not None:
            out["cost_per_video_full_load_usd"] = full_load_cost_usd(
                video_timing(dep), cfg.video.batch, p.usd_per_gpu_hour
            )
        return out

    return run


def _queue_numbers(prices: tuple | None):
    def run(cfg: RabitConfig) -> dict[str, Any]:
        dep = resolve_video(cfg)
        spec = queue_spec(cfg)
        assert spec is not None
        p = price_of(cfg, cfg.gpu, prices)
        q = simulate_queue(video_timing(dep), spec, p.usd_per_gpu_hour if p else None)
        return {
            "p95_latency_s": q.latency_s.p95,
            "p50_latency_s": q.latency_s.p50,
            "cost_per_video_usd": q.cost_per_video_usd,
            "capacity_per_hour": q.capacity_per_hour,
            "saturated": q.saturated,
        }

    return run


def _timing_screen(cfg: RabitConfig) -> VideoTiming:
    """All the queue reads from the assumptions: where a bound leaves it unchanged, the queue is not re-run."""
    return video_timing(resolve_video(cfg))


def video_report(
    cfg: RabitConfig, prices: tuple | None = None, *, ranges: bool = True, queue: bool = True
) -> VideoReport:
    """The request of ``cfg.video`` on ``cfg.gpu``: estimate with its derivation, ranges, and (with a rate and
    ``queue``) the simulated queue with its ranges. One body for the page and ``rabit video``."""
    dep = resolve_video(cfg)
    est = video_estimate(dep)
    rng = spread(cfg, _estimate_numbers(prices), ("video",)).ranges if ranges else {}
    p = price_of(cfg, cfg.gpu, prices)
    full = full_load_cost_usd(video_timing(dep), cfg.video.batch, p.usd_per_gpu_hour) if p else None
    spec = queue_spec(cfg) if queue else None
    basis = p.basis if p else f"no {cfg.targets.price_kind} price for {cfg.gpu}"
    if spec is None:
        return VideoReport(estimate=est, ranges=rng, cost_per_video_full_load_usd=full, price_basis=basis)
    q = simulate_queue(video_timing(dep), spec, p.usd_per_gpu_hour if p else None)
    q_rng: dict[str, Range] = {}
    labels: tuple[bool, ...] = (q.saturated,)
    if ranges:
        sp = spread(cfg, _queue_numbers(prices), ("video",), screen=_timing_screen)
        q_rng = {k: sp.ranges[k] for k in QUEUE_KEYS if k in sp.ranges}
        labels = tuple(bool(x) for x in sp.labels("saturated"))
    return VideoReport(
        estimate=est,
        ranges=rng,
        queue=q,
        queue_ranges=q_rng,
        price_basis=basis,
        cost_per_video_full_load_usd=full,
        saturated_inside_range=labels,
    )


def rate_sweep(cfg: RabitConfig, fractions: tuple[float, ...], prices: tuple | None = None) -> tuple[tuple, ...]:
    """(rate per hour, p50, p95 latency [s], saturated) at each fraction of the replicas' capacity (the knee)."""
    dep = resolve_video(cfg)
    t = video_timing(dep)
    v = cfg.video
    cap_h = t.capacity_per_s(v.replicas, v.batch) * HOUR_S
    out = []
    for f in fractions:
        spec = VideoQueueSpec(
            rate_per_hour=f * cap_h, replicas=v.replicas, max_batch=v.batch, num_videos=v.num_videos, seed=v.seed
        )
        q = simulate_queue(t, spec)
        out.append((f * cap_h, q.latency_s.p50, q.latency_s.p95, q.saturated))
    return tuple(out)


# --- the optimizer -----------------------------------------------------------------------------------------------


class VideoOption(_F):
    """One fleet: ``replicas`` x ``gpus`` ``gpu`` per request in one layout, what it costs and what it meets."""

    gpu: str
    gpus: int
    sp: str
    cfg_parallel: bool
    fsdp: bool
    replicas: int
    video_s: float
    memory_bytes_per_gpu: float
    capacity_per_hour: float
    usd_per_hour: float
    cost_per_video_usd: float
    p95_latency_s: float | None  # simulated (None: screened only)
    meets: bool
    note: str = ""

    @property
    def label(self) -> str:
        layout = self.sp + (" + CFG parallel" if self.cfg_parallel else "") + (" + FSDP" if self.fsdp else "")
        return f"{self.replicas} x {self.gpus} {self.gpu} ({layout})"


class VideoRecommendation(_F):
    """The cheapest fleet meeting the rate and the p95 target, the options that were simulated, and why."""

    rate_per_hour: float
    p95_target_s: float
    pick: VideoOption | None
    options: tuple[VideoOption, ...]
    screened: int
    unpriced: tuple[str, ...]
    why: str


#: GPUs per request the optimizer tries.
SEARCH_GPUS = (1, 2, 4, 8, 16)


def _candidates(cfg: RabitConfig, gpus: tuple[str, ...]) -> list[RabitConfig]:
    v = cfg.video
    m = catalog.diffusion_model(v.model)
    two = v.passes(m) == 2
    out = []
    for g in gpus:
        for n in SEARCH_GPUS:
            for sp in ("ulysses", "ring"):
                for cp in (False, True) if two else (False,):
                    if n == 1 and (sp == "ring" or cp):
                        continue
                    c = cfg.model_copy(
                        update={"gpu": g, "video": v.model_copy(update={"gpus": n, "sp": sp, "cfg_parallel": cp})}
                    )
                    if not video_problems(c):
                        out.append(c)
    return out


def _simulated(
    c: RabitConfig,
    t: VideoTiming,
    e: VideoEstimate,
    reps: int,
    price: float,
    rate: float,
    target: float,
    batch: int,
    seed: int,
) -> VideoOption:
    """One screened fleet simulated, with replicas added until its p95 meets the target (or the allowance ends)."""
    q = None
    n = reps
    for extra in range(MAX_EXTRA_REPLICAS + 1):
        n = reps + extra
        spec = VideoQueueSpec(
            rate_per_hour=max(rate, 1e-3), replicas=n, max_batch=batch, num_videos=SEARCH_VIDEOS, seed=seed
        )
        q = simulate_queue(t, spec, price)
        if not q.saturated and q.latency_s.p95 is not None and q.latency_s.p95 <= target:
            break
    assert q is not None
    ok = not q.saturated and q.latency_s.p95 is not None and q.latency_s.p95 <= target
    return VideoOption(
        gpu=c.gpu,
        gpus=c.video.gpus,
        sp=c.video.sp,
        cfg_parallel=c.video.cfg_parallel,
        fsdp=c.video.fsdp,
        replicas=n,
        video_s=e.video_s,
        memory_bytes_per_gpu=e.memory_bytes_per_gpu,
        capacity_per_hour=q.capacity_per_hour,
        usd_per_hour=n * c.video.gpus * price,
        cost_per_video_usd=q.cost_per_video_usd or 0.0,
        p95_latency_s=q.latency_s.p95,
        meets=ok,
        note="" if ok else f"p95 still {q.latency_s.p95 or math.inf:.0f} s with {n} replicas",
    )


def recommend_video(cfg: RabitConfig, prices: tuple | None = None) -> VideoRecommendation:
    """The cheapest fleet for ``cfg.video.rate_per_hour`` at p95 <= ``cfg.video.p95_target_s``."""
    v = cfg.video
    rate = v.rate_per_hour or 0.0
    target = v.p95_target_s or math.inf
    allowed = cfg.targets.gpus_allowed or tuple(sorted(catalog.gpus()))
    priced = tuple(g for g in allowed if price_of(cfg, g, prices) is not None)
    unpriced = tuple(g for g in allowed if g not in priced)
    lam = rate / HOUR_S
    screened: list[tuple[float, RabitConfig, VideoTiming, VideoEstimate, int, float]] = []
    for c in _candidates(cfg, priced):
        dep = resolve_video(c)
        e = video_quick(dep)
        if not e.fits and not c.video.fsdp and c.video.gpus > 1:
            c = c.model_copy(update={"video": c.video.model_copy(update={"fsdp": True})})
            dep = resolve_video(c)
            e = video_quick(dep)
        if not e.fits or e.video_s > target:
            continue
        t = video_timing(dep)
        mu1 = t.capacity_per_s(1, v.batch)
        reps = max(1, math.ceil(lam / (SCREEN_LOAD * mu1))) if lam > 0 else 1
        p = price_of(c, c.gpu, prices)
        assert p is not None
        usd_h = reps * c.video.gpus * p.usd_per_gpu_hour
        screened.append((usd_h, c, t, e, reps, p.usd_per_gpu_hour))
    screened.sort(key=lambda x: (x[0], x[3].video_s))
    # per GPU kind, its cheapest screened layout at each of up to PER_KIND GPU counts: the kinds are what is compared
    per_kind: dict[str, dict[int, tuple]] = {}
    for x in screened:
        counts = per_kind.setdefault(x[1].gpu, {})
        if len(counts) < PER_KIND or x[1].video.gpus in counts:
            counts.setdefault(x[1].video.gpus, x)
    options: list[VideoOption] = []
    for kind in list(per_kind)[:MAX_SIMULATED]:
        tried = [
            _simulated(c, t, e, reps, price, rate, target, v.batch, v.seed)
            for _, c, t, e, reps, price in per_kind[kind].values()
        ]
        ok = [o for o in tried if o.meets]
        options.append(min(ok or tried, key=lambda o: (o.usd_per_hour, o.video_s)))
    meeting = sorted((o for o in options if o.meets), key=lambda o: (o.usd_per_hour, o.video_s))
    pick = meeting[0] if meeting else None
    if pick is not None:
        why = (
            f"{pick.label}: ${pick.usd_per_hour:,.2f}/h, ${sig(pick.cost_per_video_usd)} per video, simulated p95 "
            f"{pick.p95_latency_s:,.0f} s against {target:,.0f} s at {sig(rate, 6)} videos/h; one video takes "
            f"{pick.video_s:,.0f} s on an idle replica"
        )
    elif not screened:
        why = (
            f"no priced GPU kind runs one video within {target:,.0f} s even on an idle replica: raise the target, "
            "lower the resolution, frames or steps, or allow more GPUs per request"
        )
    else:
        why = "no simulated fleet met the p95 target: allow more replicas or a looser target"
    return VideoRecommendation(
        rate_per_hour=rate,
        p95_target_s=target,
        pick=pick,
        options=tuple(sorted(options, key=lambda o: (not o.meets, o.usd_per_hour))),
        screened=len(screened),
        unpriced=unpriced,
        why=why,
    )


def ranges_of(report: VideoReport) -> Mapping[str, Range]:
    """Every range of a report, the queue's under their own keys."""
    return {**report.ranges, **report.queue_ranges}
