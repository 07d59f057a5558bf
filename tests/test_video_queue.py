"""The queue of minute-long video jobs (core.serving.video): queueing laws, saturation past capacity, batching,
progress, cost; and the optimizer over it (core.decision.video)."""

from __future__ import annotations

import math

import pytest

from core.config import RabitConfig, resolve_video
from core.decision import recommend_video, video_report
from core.serving import VideoQueueSpec, VideoTiming, simulate_queue, video_timing


def one_step(service_s: float, gpus: int = 1) -> VideoTiming:
    """A job of one round: deterministic service (text and decode folded in)."""
    return VideoTiming(step_s=(service_s,), text_s=0.0, vae_s=0.0, steps=1, gpus=gpus)


def test_md1_mean_wait_matches_pollaczek_khinchine():
    # M/D/1 with service S = 100 s at rho = 0.5 (18 videos/h): mean wait = rho S / (2 (1 - rho)) = 50 s, and the
    # mean latency = 150 s (Pollaczek-Khinchine with zero service variance). 20,000 videos: within 8 %.
    t = one_step(100.0)
    q = simulate_queue(t, VideoQueueSpec(rate_per_hour=18.0, num_videos=20_000, seed=3))
    assert q.offered_load == pytest.approx(0.5)
    assert q.wait_s.mean == pytest.approx(50.0, rel=0.08)
    assert q.latency_s.mean == pytest.approx(150.0, rel=0.03)
    # a utilisation of rho (busy time over the span)
    assert q.utilisation == pytest.approx(0.5, rel=0.05)


def test_littles_law_for_the_queue():
    # Little's law on the waiting line: the time-average queue length (the area under the queue-length step
    # function over the span) equals the arrival rate times the mean wait, L_q = lambda W_q. The two come from
    # different records (the queue's length at every event, each request's own wait). Two replicas of 90 s
    # jobs at 60 videos/h (rho = 0.75): within 5 %.
    t = one_step(90.0)
    q = simulate_queue(t, VideoQueueSpec(rate_per_hour=60.0, replicas=2, num_videos=10_000, seed=2))
    assert not q.saturated and q.completed == 10_000
    lam = q.completed / q.queue_t_s[-1]
    assert q.mean_queue_len == pytest.approx(lam * q.wait_s.mean, rel=0.05)
    assert q.throughput_per_hour == pytest.approx(60.0, rel=0.05)


def test_the_queue_saturates_past_capacity():
    t = one_step(120.0)  # capacity 30 videos/h
    below = simulate_queue(t, VideoQueueSpec(rate_per_hour=15.0, num_videos=400))
    above = simulate_queue(t, VideoQueueSpec(rate_per_hour=36.0, num_videos=400))
    assert below.capacity_per_hour == pytest.approx(30.0) and not below.saturated
    assert above.saturated and "saturated" in above.verdict
    assert above.latency_s.p95 > 5 * below.latency_s.p95
    # two replicas carry what one could not
    assert not simulate_queue(t, VideoQueueSpec(rate_per_hour=36.0, replicas=2, num_videos=400)).saturated


def test_deterministic_for_a_seed():
    t = one_step(30.0)
    a = simulate_queue(t, VideoQueueSpec(rate_per_hour=60.0, seed=7))
    assert a == simulate_queue(t, VideoQueueSpec(rate_per_hour=60.0, seed=7))
    assert a != simulate_queue(t, VideoQueueSpec(rate_per_hour=60.0, seed=8))


def test_batching_buys_little_throughput_for_a_compute_bound_step():
    # Wan 14B on 8 H100: a step of 4 videos takes about 4 times one video's, so four slots raise the capacity by
    # well under 10 % (the launch costs and per-step fixed parts are what is shared)
    t = video_timing(resolve_video(RabitConfig(video={"batch": 4})))
    one, four = t.capacity_per_s(1, 1), t.capacity_per_s(1, 4)
    assert t.step_s[3] == pytest.approx(4 * t.step_s[0], rel=0.02)
    assert one <= four < 1.10 * one


def test_progress_and_timeline_are_consistent():
    cfg = RabitConfig(video={"batch": 2, "rate_per_hour": 20.0, "num_videos": 120})
    t = video_timing(resolve_video(cfg))
    q = simulate_queue(t, VideoQueueSpec(rate_per_hour=20.0, max_batch=2, num_videos=120))
    assert q.progress, "some request is running at the snapshot"
    assert all(0 <= step < t.steps for _, step in q.progress)
    assert len(q.progress) <= 2  # one replica of two slots
    for r in q.timeline:
        assert r.arrival_s <= r.start_s < r.end_s
        # a request runs at least its own steps at the batch-1 step time
        assert r.end_s - r.start_s >= t.steps * t.step_s[0] - 1e-9
    assert 1.0 <= q.mean_batch <= 2.0


def test_cost_per_video_is_the_fleet_over_the_videos_it_serves():
    # 2 replicas x 4 GPUs at $3/GPU-h serving 10 videos/h below capacity: 2 x 4 x 3 / 10 = $2.40 per video; past
    # capacity the fleet serves only its capacity
    t = one_step(600.0, gpus=4)  # 6 videos/h per replica
    below = simulate_queue(t, VideoQueueSpec(rate_per_hour=10.0, replicas=2, num_videos=300), usd_per_gpu_hour=3.0)
    assert below.cost_per_video_usd == pytest.approx(2.40)
    above = simulate_queue(t, VideoQueueSpec(rate_per_hour=30.0, replicas=2, num_videos=300), usd_per_gpu_hour=3.0)
    assert above.cost_per_video_usd == pytest.approx(2 * 4 * 3 / 12)
    assert simulate_queue(t, VideoQueueSpec(rate_per_hour=10.0, replicas=2)).cost_per_video_usd is None


def test_p95_is_withheld_below_20_videos():
    q = simulate_queue(one_step(10.0), VideoQueueSpec(rate_per_hour=10.0, num_videos=12))
    assert q.latency_s.p95 is None and q.latency_s.p50 is not None


def test_report_ranges_and_saturation_inside_the_range():
    rep = video_report(RabitConfig())
    assert rep.queue is not None and not rep.queue.saturated
    for k in ("p95_latency_s", "capacity_per_hour"):
        r = rep.queue_ranges[k]
        assert r.basis == "heuristic" and r.low < r.value < r.high, k
    # at 95 % of the base capacity the pessimistic bound saturates: the verdict changes inside the range
    cap = rep.queue.capacity_per_hour
    near = video_report(RabitConfig(video={"rate_per_hour": 0.95 * cap}))
    assert set(near.saturated_inside_range) == {False, True}


def test_the_optimizer_picks_the_cheapest_fleet_meeting_the_target():
    cfg = RabitConfig(
        targets={"gpus_allowed": ("h100-sxm", "a100-80gb")},
        video={"rate_per_hour": 20.0, "p95_target_s": 900.0},
    )
    rec = recommend_video(cfg)
    assert rec.pick is not None and rec.pick.meets
    assert rec.pick.p95_latency_s <= 900.0
    meeting = [o for o in rec.options if o.meets]
    assert rec.pick.usd_per_hour == min(o.usd_per_hour for o in meeting)
    # the fleet carries the rate: replicas x capacity per replica > the rate
    assert rec.pick.capacity_per_hour > 20.0
    assert rec.pick.cost_per_video_usd == pytest.approx(rec.pick.usd_per_hour / 20.0)
    # a target no single video can meet has no pick, and says what to change
    hard = recommend_video(cfg.with_(video={**cfg.video.model_dump(), "p95_target_s": 1.0}))
    assert hard.pick is None and "raise the target" in hard.why and math.isfinite(hard.p95_target_s)


def test_an_idle_middle_arrival_snapshots_work_in_progress_not_step_zero():
    # the page's defaults (Wan2.1 14B, 8 GPUs, 10 videos/h, one replica): the replica is idle at the middle arrival,
    # so the snapshot is taken inside the next interval with work running, half-way to the next event; at that
    # interval's first moment every request in it is on step 0 (the chart drew one bar of height zero)
    cfg = RabitConfig()
    t = video_timing(resolve_video(cfg))
    v = cfg.video
    q = simulate_queue(t, VideoQueueSpec(rate_per_hour=v.rate_per_hour, num_videos=v.num_videos, seed=v.seed))
    assert q.progress and all(0 <= step < t.steps for _, step in q.progress)
    assert max(step for _, step in q.progress) > 0, q.progress
