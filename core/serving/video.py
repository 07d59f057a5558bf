"""Minute-long jobs: a queue of video requests on replicas whose batches step through denoising together.

Why this is not the token simulator: a video request holds its GPUs for ``s`` denoising steps of seconds each
and returns nothing until the VAE has decoded the last one, so what matters is the queue in front of the
replicas, the step each running request is on, and the GPU-seconds each video costs. Each replica here runs one
*round* at a time: one denoising step of every request in its batch (each request may be on a different step,
the way continuous batching admits a request at a step boundary). A round lasts

    t_round = t_step(b) + sum(t_text of requests joining) + sum(t_vae of requests finishing)

where ``t_step(b)`` is the step of a batch of ``b`` (:func:`core.physics.video.estimate`: compute-bound, so about
``b`` times one video's step: batching buys almost no throughput, unlike decode). Requests arrive as a Poisson
process (seeded ``numpy`` Generator), wait first-come first-served, join the first replica with a free slot at its
next round boundary, and leave at the end of the round of their last step.

Capacity (closed form) of ``R`` replicas at batch ``B``: ``mu = R B / (s t_step(B) + B (t_text + t_vae))``
videos per second; the offered load is ``rho = lambda / mu``. Cost per video = ``R G price / min(lambda, mu)``:
the fleet is paid for while it waits, so a lightly loaded fleet costs more per video.

Saturation verdict, as the token simulator's (:mod:`core.serving.sim.metrics`): saturated when ``rho >= 1``, or
when over the second half of the arrivals the backlog grew by more than both 5 % of those arrivals and
``3 sqrt(2 max(L, 1))`` (the noise of a stable backlog of time-average ``L``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.base import HOUR_S, VIDEO_DOMAINS
from core.config import VideoDeployment
from core.physics import VideoEstimate, video_quick
from core.serving.sim.metrics import SAT_MIN_ARRIVALS, Percentiles, backlog_trend

#: Requests whose progress the result keeps for the timeline (the first ones to arrive).
TIMELINE_REQUESTS = 24
#: Samples of the queue length over time kept for the chart.
QUEUE_SAMPLES = 200


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VideoQueueSpec(_F):
    """Arrivals and replicas: ``rate_per_hour`` videos per hour (Poisson) at ``replicas`` replicas of
    ``max_batch`` slots each; ``num_videos`` requests, seeded by ``seed``."""

    rate_per_hour: float = Field(gt=0, le=VIDEO_DOMAINS["rate_per_hour"].hi)
    replicas: int = Field(1, ge=1, le=int(VIDEO_DOMAINS["replicas"].hi))
    max_batch: int = Field(1, ge=1, le=int(VIDEO_DOMAINS["batch"].hi))
    num_videos: int = Field(400, ge=1, le=int(VIDEO_DOMAINS["num_videos"].hi))
    seed: int = Field(0, ge=0)


class VideoTiming(_F):
    """What one replica's round costs: the step of a batch of ``b`` (``step_s[b - 1]``), per-video text encoding and
    decoding [s], the steps per video and the replica's GPUs."""

    step_s: tuple[float, ...] = Field(min_length=1)
    text_s: float = Field(ge=0)
    vae_s: float = Field(ge=0)
    steps: int = Field(ge=1)
    gpus: int = Field(ge=1)

    @property
    def max_batch(self) -> int:
        return len(self.step_s)

    def batch_s(self, b: int) -> float:
        """One batch of ``b`` videos start to finish, every video on the same step [s]."""
        return self.steps * self.step_s[b - 1] + b * (self.text_s + self.vae_s)

    def capacity_per_s(self, replicas: int, batch: int) -> float:
        """Videos per second the replicas drain at full batches of ``batch``."""
        return replicas * batch / self.batch_s(batch)


class RequestTrace(_F):
    """One request's life: arrival, start of its first step, end [s from the first arrival], replica and batch."""

    id: int
    arrival_s: float
    start_s: float
    end_s: float
    replica: int


class VideoQueueResult(_F):
    """The queue of one run: latencies and waits (p50/p95, p95 withheld below 20 videos), throughput, cost, verdict."""

    latency_s: Percentiles
    wait_s: Percentiles
    completed: int
    throughput_per_hour: float
    capacity_per_hour: float
    offered_load: float  # rho = lambda / mu
    utilisation: float  # busy replica-time / (replicas x span)
    mean_batch: float
    mean_queue_len: float  # time-average of the waiting requests (the area under the queue length over the span)
    gpu_s_per_video: float  # busy GPU-seconds per completed video
    usd_per_gpu_hour: float | None
    cost_per_video_usd: float | None
    saturated: bool
    verdict: str
    timeline: tuple[RequestTrace, ...]
    queue_t_s: tuple[float, ...]
    queue_len: tuple[int, ...]
    #: (time [s], request id, denoising step it is on) for the requests running at the snapshot time
    progress_at_s: float
    progress: tuple[tuple[int, int], ...]


def timing(dep: VideoDeployment, max_batch: int | None = None) -> VideoTiming:
    """The round costs of ``dep``'s request on one replica, for batches of 1 to ``max_batch`` (default: the
    request's batch), from the one step-time body :func:`core.physics.video.estimate`."""
    v = dep.request
    top = max_batch or v.batch
    ests: list[VideoEstimate] = [
        video_quick(dataclasses.replace(dep, config=_with_batch(dep, b))) for b in range(1, top + 1)
    ]
    one = ests[0]
    return VideoTiming(
        step_s=tuple(e.step_s for e in ests),
        text_s=one.text_encoder_s,
        vae_s=one.vae_s,
        steps=v.steps,
        gpus=v.gpus,
    )


def _with_batch(dep: VideoDeployment, b: int):
    return _with(dep.config, batch=b)


class _Queue:
    """One run's state: the arrivals, the waiting line, each replica's batch and current segment, the heap of
    segment ends keyed ``(time, replica)``, and the counters the result reads."""

    def __init__(self, t: VideoTiming, spec: VideoQueueSpec) -> None:
        self.t = t
        self.B = min(spec.max_batch, t.max_batch)
        self.R = R = spec.replicas
        self.lam = spec.rate_per_hour / HOUR_S
        rng = np.random.default_rng(spec.seed)
        arrivals = np.cumsum(rng.exponential(1.0 / self.lam, spec.num_videos))
        arrivals -= arrivals[0]
        self.arrivals = arrivals
        self.n = n = spec.num_videos
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.where = np.zeros(n, dtype=int)
        self.done_steps = np.zeros(n, dtype=int)
        self.running: list[list[int]] = [[] for _ in range(R)]
        self.busy = [False] * R
        self.heap: list[tuple[float, int, int]] = []  # (end time, replica, rounds)
        self.nxt = 0  # next arrival not yet queued
        self.queue: list[int] = []
        self.qhead = 0
        self.busy_s = 0.0
        self.batch_time = 0.0  # sum of b x round time, for the mean batch
        self.q_t: list[float] = []
        self.q_len: list[int] = []
        self.area = 0.0  # integral of the queue length over time
        self.last_t = 0.0
        self.snap_t = float(arrivals[n // 2]) if n > 1 else 0.0
        self.snap: list[tuple[int, int]] | None = None
        self.seg: list[tuple[float, float, float, int]] = [(0.0, 0.0, 1.0, 0)] * R  # (start, text, step, rounds)

    def _admit(self, r: int, now: float) -> int:
        """Move waiting requests into replica ``r``'s free slots, first come first served; how many joined."""
        running, joining = self.running[r], 0
        while len(running) < self.B and self.qhead < len(self.queue):
            i = self.queue[self.qhead]
            self.qhead += 1
            running.append(i)
            self.start[i] = now
            self.where[i] = r
            joining += 1
        return joining

    def start_segment(self, r: int, now: float) -> None:
        """Admit waiting requests, then run as many rounds as can pass with nothing to change: until the first
        request of the batch finishes, or (slots free) until the first round boundary after the next arrival."""
        t, running, done_steps = self.t, self.running[r], self.done_steps
        joining = self._admit(r, now)
        if not running:
            self.busy[r] = False
            return
        b = len(running)
        step = t.step_s[b - 1]
        head = joining * t.text_s
        rem = min(t.steps - int(done_steps[i]) for i in running)
        k = rem
        if b < self.B and self.nxt < self.n:  # a request arriving meanwhile joins at the first boundary after it
            k = min(rem, max(1, math.floor((float(self.arrivals[self.nxt]) - now - head) / step) + 1))
        finishing = sum(1 for i in running if t.steps - int(done_steps[i]) == k)
        dur = head + k * step + finishing * t.vae_s
        self.busy[r] = True
        self.busy_s += dur
        self.batch_time += b * dur
        self.seg[r] = (now, head, step, k)
        heapq.heappush(self.heap, (now + dur, r, k))

    def snapshot(self, at: float) -> list[tuple[int, int]]:
        """(request, denoising step it is on) of every request running at ``at``."""
        out = []
        for r in range(self.R):
            s0, head, step, k = self.seg[r]
            into = min(max(0, math.floor((at - s0 - head) / step)), k - 1) if self.busy[r] else 0
            out += [(i, int(self.done_steps[i]) + into) for i in self.running[r]]
        return out

    def _snap_due(self, now: float) -> bool:
        """Whether the progress snapshot is still to take and ``now`` has reached its time with work running."""
        return now >= self.snap_t and any(self.running)

    def end_segment(self) -> float:
        """The earliest segment ends: its requests advance by its rounds, the finished leave, the replica starts
        its next segment."""
        now, r, k = heapq.heappop(self.heap)
        if self.snap is None and self._snap_due(now):
            self.snap = self.snapshot(self.snap_t)  # the state of the interval that holds the middle arrival
        still = []
        for i in self.running[r]:
            self.done_steps[i] += k
            if self.done_steps[i] >= self.t.steps:
                self.end[i] = now
            else:
                still.append(i)
        self.running[r] = still
        self.start_segment(r, now)
        return now

    def arrive(self, now: float) -> None:
        """The next request arrives: it queues, and the first idle replica (if any) starts a segment."""
        if self.snap is None and self._snap_due(now):
            self.snap = self.snapshot(self.snap_t)
        self.queue.append(self.nxt)
        self.nxt += 1
        busy = self.busy
        for r in range(self.R):
            if not busy[r]:
                self.start_segment(r, now)
                break

    def next_arrival_s(self) -> float:
        return float(self.arrivals[self.nxt]) if self.nxt < self.n else math.inf

    def record(self, now: float) -> None:
        """After each event: the snapshot when the middle arrival found every replica idle, the queue's length."""
        if self.snap is None and self._snap_due(now):
            # idle at the middle arrival: the middle of the next interval with work running (at its first moment
            # every request in it is on step 0, a chart of zero-height bars); nothing changes before the next event
            following = min(self.heap[0][0] if self.heap else math.inf, self.next_arrival_s())
            at = (now + following) / 2 if math.isfinite(following) else now
            self.snap, self.snap_t = self.snapshot(at), at
        q_len = self.q_len
        self.area += (q_len[-1] if q_len else 0) * (now - self.last_t)
        self.last_t = now
        self.q_t.append(now)
        q_len.append(len(self.queue) - self.qhead)

    def run(self) -> None:
        """Events until every request has left: a segment's end before an arrival at the same time."""
        heap, n = self.heap, self.n
        while self.nxt < n or heap:
            t_arr = float(self.arrivals[self.nxt]) if self.nxt < n else math.inf
            if heap and heap[0][0] <= t_arr:
                now = self.end_segment()
            else:
                now = t_arr
                self.arrive(now)
            self.record(now)


def simulate_queue(t: VideoTiming, spec: VideoQueueSpec, usd_per_gpu_hour: float | None = None) -> VideoQueueResult:
    """Run the queue (one heap of segment ends keyed ``(time, replica)``; deterministic for a seed).

    A segment is the rounds a replica runs with nothing to change (no request finishing, none joining): one event
    each, so a batch of one costs one event per video rather than one per step. Round by round it is the same run.
    """
    q = _Queue(t, spec)
    q.run()
    return _queue_result(q, usd_per_gpu_hour)


def _queue_result(q: _Queue, usd_per_gpu_hour: float | None) -> VideoQueueResult:
    """The run's latencies, throughput, utilisation, cost per video, verdict and the chart's samples."""
    t, n, R, B, lam = q.t, q.n, q.R, q.B, q.lam
    arrivals, start, end = q.arrivals, q.start, q.end
    lat = end - arrivals
    wait = start - arrivals
    span = float(np.nanmax(end)) if n else 0.0
    mu = t.capacity_per_s(R, B)
    rho = lam / mu
    saturated, verdict = _verdict(arrivals, end, rho)
    usd = usd_per_gpu_hour
    cost = R * t.gpus * usd / (min(lam, mu) * HOUR_S) if usd is not None else None
    q_t, q_len, busy_s = q.q_t, q.q_len, q.busy_s
    keep = np.linspace(0, len(q_t) - 1, min(QUEUE_SAMPLES, len(q_t))).astype(int) if q_t else np.array([], int)
    return VideoQueueResult(
        latency_s=Percentiles.of(lat),
        wait_s=Percentiles.of(wait),
        completed=int(np.sum(~np.isnan(end))),
        throughput_per_hour=n / span * HOUR_S if span > 0 else 0.0,
        capacity_per_hour=mu * HOUR_S,
        offered_load=rho,
        utilisation=busy_s / (R * span) if span > 0 else 0.0,
        mean_batch=q.batch_time / busy_s if busy_s > 0 else 0.0,
        mean_queue_len=q.area / q.last_t if q.last_t > 0 else 0.0,
        gpu_s_per_video=busy_s * t.gpus / n,
        usd_per_gpu_hour=usd,
        cost_per_video_usd=cost,
        saturated=saturated,
        verdict=verdict,
        timeline=tuple(
            RequestTrace(
                id=i,
                arrival_s=float(arrivals[i]),
                start_s=float(start[i]),
                end_s=float(end[i]),
                replica=int(q.where[i]),
            )
            for i in range(min(n, TIMELINE_REQUESTS))
        ),
        queue_t_s=tuple(float(q_t[k]) for k in keep),
        queue_len=tuple(int(q_len[k]) for k in keep),
        progress_at_s=q.snap_t,
        progress=tuple(q.snap or ()),
    )


def _verdict(arrivals: np.ndarray, end: np.ndarray, rho: float) -> tuple[bool, str]:
    """Saturated when the offered load reaches the capacity, or the backlog's line rose over the second half of the
    arrivals beyond a stable backlog's noise (the token simulator's rule, :func:`backlog_trend`)."""
    if rho >= 1.0:
        return True, f"saturated: the arrivals are {rho:.0%} of the capacity, so the queue grows without bound"
    t_last = float(arrivals[-1]) if arrivals.size else 0.0
    lo, hi = t_last / 2, t_last
    a = int(np.sum((arrivals > lo) & (arrivals <= hi)))
    if a >= SAT_MIN_ARRIVALS:
        _, _, _, rise, noise = backlog_trend(arrivals, end, lo, hi)
        if rise >= noise:
            return True, f"saturated: the backlog grew by {rise:.0f} videos over the second half of the arrivals"
    return False, f"stable: the arrivals are {rho:.0%} of the capacity"


# --- the speed-up of one request against its GPUs ---------------------------------------------------------------

#: GPU counts the speed-up chart tries (each mode keeps those its layout allows).
SPEEDUP_GPUS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
#: Exposed communication above this share of a forward counts as no longer hidden (the chart's marker).
HIDDEN_FRAC = 0.10


class SpeedupPoint(_F):
    """One request on ``gpus`` GPUs in one layout: its time, speed-up over one GPU and where communication stands."""

    mode: str  # "ulysses", "ring", "ulysses + cfg", "ring + cfg"
    gpus: int
    video_s: float
    denoise_s: float
    speedup: float  # video_s on 1 GPU / video_s here
    compute_s: float  # one forward's compute on one GPU
    comm_s: float  # one forward's exposed communication
    comm_total_s: float  # one forward's communication, hidden or not
    hidden: bool  # exposed communication <= HIDDEN_FRAC of the forward
    comm_dominates: bool  # exposed communication > compute
    fits: bool


def _layouts(dep: VideoDeployment) -> list[tuple[str, str, bool]]:
    m = dep.model
    cfg_ok = dep.request.passes(m) == 2
    out = [("ulysses", "ulysses", False), ("ring", "ring", False)]
    if cfg_ok:
        out += [("ulysses + cfg", "ulysses", True), ("ring + cfg", "ring", True)]
    return out


def parallel_speedup(dep: VideoDeployment, gpus: tuple[int, ...] = SPEEDUP_GPUS) -> tuple[SpeedupPoint, ...]:
    """Time and speed-up of the request on each GPU count and layout it allows (Ulysses: the degree divides the
    heads; CFG parallel: an even count and a model with two passes)."""
    m, cfg0 = dep.model, dep.config
    base = video_quick(dataclasses.replace(dep, config=_with(cfg0, gpus=1, cfg_parallel=False)))
    out: list[SpeedupPoint] = []
    for mode, sp, cfg_par in _layouts(dep):
        for g in gpus:
            c = 2 if cfg_par else 1
            if g % c or (g == 1 and cfg_par):
                continue
            u = g // c
            if sp == "ulysses" and m.num_heads % u:
                continue
            e = video_quick(dataclasses.replace(dep, config=_with(cfg0, gpus=g, sp=sp, cfg_parallel=cfg_par)))
            exposed = e.sp_comm_s + e.fsdp_exposed_s
            out.append(
                SpeedupPoint(
                    mode=mode,
                    gpus=g,
                    video_s=e.video_s,
                    denoise_s=e.denoise_s,
                    speedup=base.video_s / e.video_s,
                    compute_s=e.compute_s,
                    comm_s=exposed,
                    comm_total_s=e.comm_total_s,
                    hidden=exposed <= HIDDEN_FRAC * e.forward_s,
                    comm_dominates=e.comm_dominates,
                    fits=e.fits,
                )
            )
    return tuple(out)


def _with(cfg, **video):
    return cfg.model_copy(update={"video": cfg.video.model_copy(update=video)})


def stops_hiding(points: tuple[SpeedupPoint, ...], mode: str) -> int | None:
    """The smallest GPU count of ``mode`` at which communication is no longer hidden (None: hidden throughout)."""
    for p in sorted((p for p in points if p.mode == mode), key=lambda p: p.gpus):
        if not p.hidden:
            return p.gpus
    return None
