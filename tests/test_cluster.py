"""A deployment of replicas behind a router, and disaggregated prefill/decode pools with the KV transfer.

Queueing laws, determinism, the one-replica limit (byte for byte the one-replica simulation), each routing policy's
rule, and the KV transfer time against a hand computation.
"""

import numpy as np
import pytest

from core.config import RabitConfig
from core.serving import (
    Layout,
    Lengths,
    PoolLayout,
    Request,
    SimSpec,
    kv_transfer_s,
    layout_of,
    make_policy,
    simulate,
    simulate_deployment,
)

L8 = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, input_tokens=1000, output_tokens=250)
LOGN = dict(
    input=Lengths(kind="lognormal", mean=1000, spread=0.5), output=Lengths(kind="lognormal", mean=250, spread=0.5)
)
#: a replica that queues: at most 16 sequences at once (closed-form capacity about 8.2 requests/s)
QUEUEING = SimSpec(num_requests=3000, max_batch=16, token_budget=4096, **LOGN)
ARRAYS = ("arrival_s", "input_tokens", "output_tokens", "status", "admitted_s", "first_token_s", "finish_s")
SERIES = ("ts_s", "ts_waiting", "ts_running", "ts_kv_frac")


def _same(a, b, fields=ARRAYS + SERIES):
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in fields)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"policy": "prefill_priority"},
        {"admission": "reserve"},
        {"timeout_s": 2.0, "rate_per_s": 12.0},
        {"arrival": "closed", "users": 12, "think_s": 0.5},
    ],
)
def test_one_replica_deployment_is_the_one_replica_simulation(changes):
    spec = QUEUEING.with_(**{"num_requests": 800, "rate_per_s": 6.0, **changes})
    alone = simulate(L8, spec)
    dep = simulate_deployment(L8, spec, Layout(replicas=1, router="least-outstanding"))
    assert _same(alone, dep.result)
    assert alone.summary == dep.summary
    # the deployment's own loop (taken with a shared prefix: here 0.01 % of prompts below 10,000 tokens, none)
    looped = simulate_deployment(L8, spec.with_(prefix_cache_frac=1e-4), Layout(replicas=1, router="round-robin"))
    assert _same(alone, looped.result) and alone.summary == looped.summary
    assert dep.per_replica_rate_per_s == (
        spec.rate_per_s if spec.arrival == "poisson" else dep.summary.arrival_rate_per_s
    )


def test_same_seed_same_bytes_and_another_seed_other_draws():
    spec = QUEUEING.with_(rate_per_s=20.0, num_requests=1500, prefix_cache_frac=0.5)
    lay = Layout(replicas=3, router="power-of-two")
    a, b = simulate_deployment(L8, spec, lay), simulate_deployment(L8, spec, lay)
    assert _same(a.result, b.result) and a.replicas == b.replicas and a.summary == b.summary
    c = simulate_deployment(L8, spec.with_(seed=1), lay)
    assert not np.array_equal(a.result.arrival_s, c.result.arrival_s)


def test_round_robin_two_replicas_at_twice_the_rate_match_one_replica():
    """Round-robin splits a Poisson stream of rate 2r into two streams of rate r (Erlang-2 gaps: a little more
    regular than Poisson), so each replica of the pair queues like one replica at r. Within sampling noise: the
    p50 and p95 end-to-end of 3,000 requests move by about 2 % from one seed to the next."""
    for seed in (0, 1):
        one = simulate(L8, QUEUEING.with_(rate_per_s=3.0, seed=seed)).summary
        two = simulate_deployment(
            L8, QUEUEING.with_(rate_per_s=6.0, seed=seed, num_requests=6000), Layout(replicas=2, router="round-robin")
        )
        assert two.load_imbalance == 1.0
        s = two.summary
        for key in ("e2e_s", "itl_s"):
            for q in ("p50", "p95"):
                a, b = getattr(getattr(one, key), q), getattr(getattr(s, key), q)
                assert abs(b / a - 1) < 0.06, (key, q, a, b)
        assert abs(two.per_replica_rate_per_s - 3.0) < 1e-12
        assert all(abs(r.rate_per_s / 3.0 - 1) < 0.05 for r in two.replicas)


@pytest.mark.parametrize(("replicas", "rate"), [(2, 11.0), (4, 26.0)])
def test_least_outstanding_never_queues_longer_at_p95_than_round_robin(replicas, rate):
    """Joining the replica with the fewest requests in flight against blind rotation, on the same arrival and
    length draws, at 65-80 % of the deployment's closed-form capacity (8.2 requests/s a replica): queues form
    from bursts and the shorter one is taken. (Close to saturation, where a run of 3,000 requests never reaches a
    steady state and lengths vary 3x, fewest-requests is not fewest-work and the order can flip within noise.)"""
    for seed in (0, 1, 2):
        spec = QUEUEING.with_(rate_per_s=rate, seed=seed)
        rr = simulate_deployment(L8, spec, Layout(replicas=replicas, router="round-robin")).summary
        lo = simulate_deployment(L8, spec, Layout(replicas=replicas, router="least-outstanding")).summary
        assert lo.queue_s.p95 <= rr.queue_s.p95, (seed, lo.queue_s.p95, rr.queue_s.p95)
        assert lo.arrival_rate_per_s == rr.arrival_rate_per_s  # the same draws


def test_policies_pick_by_their_rule():
    req = Request(0, 0.0, 100, 10, 3)
    rr = make_policy("round-robin", 3)
    assert [rr.pick(req, [5, 0, 0]) for _ in range(4)] == [0, 1, 2, 0]
    lo = make_policy("least-outstanding", 3)
    assert lo.pick(req, [2, 1, 1]) == 1 and lo.pick(req, [2, 1, 1]) == 2  # ties rotate
    p2 = make_policy("power-of-two", 4, seed=7)
    load = [9, 0, 5, 3]
    picks = [p2.pick(req, load) for _ in range(200)]
    assert 0 not in picks or load[0] == min(load)  # replica 0 is the heaviest: never the lighter of two
    assert set(picks) <= {1, 2, 3}
    pa = make_policy("prefix-affinity", 3)
    first = pa.pick(req, [4, 0, 2])
    assert first == 1 and pa.pick(req, [4, 3, 2]) == 1  # the group stays where its prefix is
    assert pa.pick(req, [4, 200, 50]) == 0  # out of balance (200 - 4 > 64 and 200 > 1.5 x 4): the least loaded
    with pytest.raises(ValueError, match="unknown router"):
        make_policy("random", 2)


def test_prefix_affinity_finds_more_cached_prefixes_than_round_robin():
    spec = QUEUEING.with_(rate_per_s=20.0, num_requests=2000, prefix_cache_frac=0.8, prefix_groups=8, max_batch=256)
    rr = simulate_deployment(L8, spec, Layout(replicas=4, router="round-robin"))
    pa = simulate_deployment(L8, spec, Layout(replicas=4, router="prefix-affinity"))
    # every replica sees every group under round-robin: 8 x 4 first visits compute the prefix, affinity 8
    assert pa.summary.prefill_time_share < rr.summary.prefill_time_share


def test_layout_of_the_config_defaults_to_gpus_over_tp_pp():
    cfg = RabitConfig(gpu="h100-sxm", gpus_per_node=8, tp=4)
    lay = layout_of(cfg)
    assert (lay.mode, lay.replicas, lay.router) == ("aggregated", 2, "least-outstanding")
    assert layout_of(cfg.with_(workload=cfg.workload.with_(replicas=3))).replicas == 3
    d = layout_of(cfg.with_(disagg={"enabled": True, "prefill_instances": 3, "decode_tp": 8}))
    assert d.mode == "disaggregated" and d.prefill == PoolLayout(instances=3, gpu="h100-sxm", tp=4, pp=1)
    assert d.decode == PoolLayout(instances=1, gpu="h100-sxm", tp=8, pp=1) and d.gpus == 20


def test_kv_transfer_time_by_hand():
    """Llama-3.1-8B, BF16 KV: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token; TP 8 splits the 8 KV
    heads, so one GPU holds 16,384 B per token on either side. A 1,000-token prompt: 16.384 MB per GPU. Two TP-8
    instances are 16 GPUs, more than one 8-GPU NVLink domain, so the KV crosses InfiniBand NDR: 50 GB/s per GPU,
    3.5 us. At the base efficiency 0.70 and setup 500 us:
    t = 500 us + 3.5 us + 16.384e6 / (50e9 x 0.70) = 0.5035 ms + 0.468114 ms = 0.971614 ms."""
    hand = 500e-6 + 3.5e-6 + 16.384e6 / (50e9 * 0.70)
    assert kv_transfer_s(1000, 16384.0, 16384.0, 50e9, 3.5e-6, 0.70, 500e-6) == pytest.approx(hand, rel=1e-12)
    cfg = L8.with_(gpus_per_node=8, tp=8)
    spec = SimSpec(
        rate_per_s=0.2,
        num_requests=30,
        input=Lengths(kind="fixed", mean=1000),
        output=Lengths(kind="fixed", mean=20),
    )
    pools = {"instances": 1, "gpu": "h100-sxm", "tp": 8, "pp": 1}
    lay = Layout(mode="disaggregated", prefill=PoolLayout(**pools), decode=PoolLayout(**pools), overlap=False)
    d = simulate_deployment(cfg, spec, lay)
    assert d.kv_path.startswith("InfiniBand")
    assert d.kv_transfer_s.n == 30
    # one request at a time (a request every 5 s, each done in well under a second): no transfer shares the links
    assert d.kv_transfer_s.p50 == pytest.approx(hand, rel=1e-9)
    assert d.kv_transfer_s.p95 == pytest.approx(hand, rel=1e-9)
    # TTFT includes the transfer: at least prefill + transfer + the decode instance's first iteration
    assert d.summary.ttft_s.p50 > hand
    assert 0 < d.kv_transfer_share_of_ttft < 1
    assert d.pools["prefill"].requests == d.pools["decode"].requests == 30


def test_transfers_leaving_one_prefill_instance_share_its_links():
    """Two users send a 1,000-token prompt at 0 s: one prefill iteration computes both, both transfers leave the
    prefill instance together and share its links (processor sharing), so each takes twice the wire time of the
    hand computation above before the fixed 503.5 us: 2 x 0.468114 ms + 0.5035 ms = 1.439729 ms."""
    wire = 16.384e6 / (50e9 * 0.70)
    cfg = L8.with_(gpus_per_node=8, tp=8)
    spec = SimSpec(
        arrival="closed",
        users=2,
        num_requests=2,
        input=Lengths(kind="fixed", mean=1000),
        output=Lengths(kind="fixed", mean=20),
    )
    pools = {"instances": 1, "gpu": "h100-sxm", "tp": 8, "pp": 1}
    lay = Layout(mode="disaggregated", prefill=PoolLayout(**pools), decode=PoolLayout(**pools), overlap=False)
    d = simulate_deployment(cfg, spec, lay)
    assert d.kv_transfer_s.n == 2
    assert d.kv_transfer_s.p50 == pytest.approx(2 * wire + 503.5e-6, rel=1e-9)


def test_overlapped_transfer_hides_behind_the_prefill_and_disaggregation_reports_its_pools():
    cfg = L8.with_(gpus_per_node=8, tp=8)
    spec = SimSpec(rate_per_s=2.0, num_requests=200, **LOGN)
    pools = {"instances": 1, "gpu": "h100-sxm", "tp": 8, "pp": 1}
    lay = Layout(mode="disaggregated", prefill=PoolLayout(**pools), decode=PoolLayout(**pools), overlap=False)
    plain = simulate_deployment(cfg, spec, lay)
    over = simulate_deployment(cfg, spec, lay.model_copy(update={"overlap": True}))
    assert over.kv_transfer_s.p50 < plain.kv_transfer_s.p50
    assert set(plain.pools) == {"prefill", "decode"}
    assert plain.summary.completed == 200
    assert [r.pool for r in plain.replicas] == ["prefill", "decode"]


def test_decode_instance_waits_for_blocks_for_the_whole_prompt():
    """A decode pool that holds about three requests' KV: requests wait in its queue (never partly recomputed),
    and every one still completes."""
    cfg = L8
    spec = SimSpec(
        rate_per_s=50.0,
        num_requests=60,
        input=Lengths(kind="fixed", mean=2000),
        output=Lengths(kind="fixed", mean=50),
    )
    pools = {"instances": 1, "gpu": "h100-sxm", "tp": 1, "pp": 1}
    lay = Layout(mode="disaggregated", prefill=PoolLayout(**pools), decode=PoolLayout(**pools))
    small = simulate_deployment(cfg, spec.with_(kv_pool_tokens=6400), lay)
    big = simulate_deployment(cfg, spec, lay)
    assert small.summary.completed == 60
    assert small.pools["decode"].queue_s.p95 > big.pools["decode"].queue_s.p95


def test_rabit_simulate_answers_eight_h100_at_tp4_and_five_requests_per_second(capsys):
    from clirun import run

    out = run(
        capsys,
        *"simulate --model llama-3.1-70b --gpu h100-sxm --gpus 8 --tp 4 --rate 5 --requests 300 --input 1000 "
        "--output 100 --json".split(),
    )
    assert (out["mode"], out["replicas"], out["per_replica_rate_per_s"], out["router"]) == (
        "aggregated",
        2,
        2.5,
        "least-outstanding",
    )
    assert len(out["replica_utilization"]) == len(out["per_replica"]) == 2
    assert out["load_imbalance"] >= 1.0
    assert sum(r["requests"] for r in out["per_replica"]) == 300


def test_rabit_simulate_disaggregated_keys(capsys):
    from clirun import fails, run

    out = run(
        capsys,
        *"simulate --model llama-3.1-8b --gpus 2 --tp 1 --rate 4 --requests 200 --input 2000 --output 50 --disagg "
        "--prefill-instances 1 --decode-instances 1 --decode-gpu h200-sxm --json".split(),
    )
    assert out["mode"] == "disaggregated" and out["replicas"] == 2 and out["gpus"] == 2
    assert set(out["kv_transfer_s"]) >= {"p50", "p95", "p99"}
    assert out["pools"]["decode"]["gpu"] == "h200-sxm" and out["pools"]["prefill"]["gpu"] == "h100-sxm"
    for pool in out["pools"].values():
        assert set(pool) >= {"instances", "tp", "gpu", "utilization"}
    assert not out["kv_path"].startswith("NVLink")  # two GPU kinds: across the fabric
    assert "--router" in fails(capsys, "simulate", "--rate", "1", "--router", "random")
    assert "--decode-gpu" in fails(capsys, "simulate", "--rate", "1", "--disagg", "--decode-gpu", "nope")
