"""Multi-LoRA serving: adapter bytes from the model's shapes, the engine's slots out of the KV budget, the step's
adapter terms, the simulator's slot rule and loads, the optimizer's slots and the per-variant comparison."""

import math

import numpy as np
import pytest

from core import catalog
from core.config import AdapterSet, RabitConfig, from_query, parse_trace_adapters, problems, resolve, to_query
from core.decision import Constraints, ServingGoal, per_variant, recommend
from core.physics import StepModel, adapter_footprint, adapter_kv_cost, adapter_load_s, serving_memory
from core.serving import effective_adapters, max_throughput, sim_spec, simulate, speed_summary

EIGHT_B = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, input_tokens=1000, output_tokens=250)


def with_adapters(cfg: RabitConfig, **kw) -> RabitConfig:
    return cfg.with_(adapters=AdapterSet(**kw))


# --- bytes ---------------------------------------------------------------------------------------------------


def test_llama_8b_rank_16_all_linear_bf16_by_hand():
    # Llama-3.1-8B: h = 4,096, 32 heads of 128 (q: 4,096 wide), 8 KV heads (k, v: 1,024), MLP 14,336, 32 layers.
    # A rank-r LoRA adds r x (d_in + d_out) weights to each targeted layer:
    #   q 4,096 + 4,096 = 8,192; k 4,096 + 1,024 = 5,120; v 5,120; o 8,192; gate, up, down 4,096 + 14,336 = 18,432
    #   per layer: 8,192 + 5,120 + 5,120 + 8,192 + 3 x 18,432 = 81,920 weights per unit rank
    #   16 x 81,920 x 32 layers x 2 B = 83,886,080 B (80 MiB)
    mem = serving_memory(with_adapters(EIGHT_B, count=50, ranks=(16,), targets="all", dtype="bf16"))
    assert mem.adapter_bytes == 83_886_080
    assert mem.adapter_set_bytes == 50 * 83_886_080
    # attention only: 26,624 per layer -> 16 x 26,624 x 32 x 2 = 27,262,976 B; the MLP: 55,296 -> 56,623,104 B
    qkvo = serving_memory(with_adapters(EIGHT_B, count=1, targets="qkvo")).adapter_bytes
    mlp = serving_memory(with_adapters(EIGHT_B, count=1, targets="mlp")).adapter_bytes
    assert (qkvo, mlp) == (27_262_976, 56_623_104)
    assert qkvo + mlp == mem.adapter_bytes
    # FP32 doubles it
    assert serving_memory(with_adapters(EIGHT_B, count=1, dtype="fp32")).adapter_bytes == 2 * 83_886_080


def test_tensor_parallel_splits_the_slots_as_vllm_does():
    # TP 2, vLLM's default sharding: column-parallel layers keep A whole and split B's rows, row-parallel ones split
    # A and keep B whole. Per layer per unit rank on one GPU:
    #   q 4,096 + 4,096/2 = 6,144; k, v 4,096 + 1,024/2 = 4,608 each; o 4,096/2 + 4,096 = 6,144;
    #   gate, up 4,096 + 14,336/2 = 11,264 each; down 14,336/2 + 4,096 = 11,264  -> 55,296
    #   one slot at rank 16: 16 x 55,296 x 32 x 2 B = 56,623,104 B; max_loras 4 -> 226,492,416 B per GPU
    cfg = EIGHT_B.with_(gpus_per_node=2, tp=2, adapters=AdapterSet(count=10, max_loras=4))
    fp = adapter_footprint(cfg)
    assert fp.slot_bytes_per_gpu == 56_623_104
    assert fp.reserved_bytes_per_gpu == 226_492_416
    assert serving_memory(cfg).adapter_reserved_bytes_per_gpu == 226_492_416
    # the whole adapter is not split: every GPU holds more than half of it (only half of the work is sharded)
    assert fp.slot_bytes_per_gpu > fp.adapter_bytes / 2


def test_the_slots_take_exactly_their_bytes_from_the_kv_budget():
    base = serving_memory(EIGHT_B)
    for slots, rank in ((1, 16), (8, 16), (32, 64)):
        cfg = with_adapters(EIGHT_B, count=100, ranks=(rank,), max_loras=slots)
        mem = serving_memory(cfg)
        reserved = slots * rank * 81_920 * 32 * 2  # slots x one adapter at the slot rank (TP 1)
        assert mem.adapter_reserved_bytes_per_gpu == reserved
        assert mem.kv_budget_bytes_per_gpu == base.kv_budget_bytes_per_gpu - reserved
        assert mem.total_bytes_per_gpu == base.total_bytes_per_gpu + reserved
        assert mem.max_sequences == math.floor(
            (base.kv_budget_bytes_per_gpu - reserved) / base.kv_bytes_per_seq_per_gpu
        )
        cost = adapter_kv_cost(cfg)
        assert (cost.sequences_without, cost.sequences_with) == (base.max_sequences, mem.max_sequences)


def test_a_slot_rank_above_the_adapters_pads_every_slot():
    # rank-8 adapters in rank-64 slots: the slots hold 8x what the adapters need, and the step reads 8x too
    tight = with_adapters(EIGHT_B, count=20, ranks=(8,), max_loras=8, max_lora_rank=8)
    loose = with_adapters(EIGHT_B, count=20, ranks=(8,), max_loras=8, max_lora_rank=64)
    assert (
        serving_memory(loose).adapter_reserved_bytes_per_gpu == 8 * serving_memory(tight).adapter_reserved_bytes_per_gpu
    )
    a, b = StepModel.from_deployment(resolve(tight)), StepModel.from_deployment(resolve(loose))
    assert b.lora_bytes_per_adapter == 8 * a.lora_bytes_per_adapter
    assert b.lora_flop_per_token == 8 * a.lora_flop_per_token
    # vLLM's default slot rank is 16: rank-8 adapters left at the default waste half of each slot
    assert serving_memory(with_adapters(EIGHT_B, count=20, ranks=(8,))).adapter_slot_rank == 16


def test_no_adapters_is_the_base_alone():
    """Zero adapters: every figure is the plain deployment's, whatever else the group says."""
    off = with_adapters(EIGHT_B, count=0, ranks=(64,), max_loras=32, skew=2.0)
    assert serving_memory(off) == serving_memory(EIGHT_B)
    assert StepModel.from_deployment(resolve(off)) == StepModel.from_deployment(resolve(EIGHT_B))
    assert speed_summary(off).decode.step_s == speed_summary(EIGHT_B).decode.step_s
    w = EIGHT_B.workload.with_(rate_per_s=10, num_requests=300)
    a, b = (
        simulate(EIGHT_B.with_(workload=w), sim_spec(EIGHT_B.with_(workload=w))),
        simulate(off.with_(workload=w), sim_spec(off.with_(workload=w))),
    )
    assert a.summary == b.summary and b.summary.adapters is None
    assert np.array_equal(a.finish_s, b.finish_s)


# --- the step ------------------------------------------------------------------------------------------------


def test_step_time_grows_with_distinct_adapters_and_with_rank():
    cfg = with_adapters(EIGHT_B, count=64, max_loras=64)
    sm = StepModel.from_deployment(resolve(cfg))
    T, ctx = 32, 1125
    times = [sm.iteration_s(T, T * ctx, T * ctx, adapters=d) for d in (0, 1, 4, 16, 32)]
    assert all(x < y for x, y in zip(times, times[1:]))
    # each extra distinct adapter adds its slot's weights read once: 83.9 MB / (3.35 TB/s x MBU x eta_l) at TP 1
    a = cfg.assumptions
    per_adapter = 83_886_080 / (3.35e12 * a.mbu * a.lora_kernel_eff)
    assert times[2] - times[1] == pytest.approx(3 * per_adapter, rel=1e-9)
    by_rank = []
    for r in (8, 16, 64):  # the slots at the adapters' own rank (vLLM's default 16 would pad rank 8 to 16)
        s = StepModel.from_deployment(
            resolve(with_adapters(EIGHT_B, count=64, ranks=(r,), max_loras=64, max_lora_rank=r))
        )
        by_rank.append(s.iteration_s(T, T * ctx, T * ctx, adapters=8))
    assert by_rank[0] < by_rank[1] < by_rank[2]
    base = StepModel.from_deployment(resolve(EIGHT_B)).iteration_s(T, T * ctx, T * ctx)
    assert base < times[0]  # no adapter read: the GEMMs and the extra kernels remain


def test_expected_distinct_adapters_in_a_batch():
    # uniform over N: N (1 - (1 - 1/N)^S), at most max_loras
    sm = StepModel.from_deployment(resolve(with_adapters(EIGHT_B, count=50, max_loras=64)))
    assert sm.distinct_adapters(1) == pytest.approx(1.0)
    assert sm.distinct_adapters(32) == pytest.approx(50 * (1 - 0.98**32))  # 23.8
    capped = StepModel.from_deployment(resolve(with_adapters(EIGHT_B, count=50, max_loras=8)))
    assert capped.distinct_adapters(32) == 8.0
    # Zipf: the hot adapters repeat, so fewer distinct ones than uniform
    zipf = StepModel.from_deployment(resolve(with_adapters(EIGHT_B, count=50, max_loras=64, skew=1.0)))
    assert zipf.distinct_adapters(32) < sm.distinct_adapters(32)
    assert np.allclose(
        zipf.distinct_adapters(np.array([1.0, 32.0])), [zipf.distinct_adapters(1), zipf.distinct_adapters(32)]
    )


def test_every_recorded_adapter_step_reevaluates():
    for cfg in (
        with_adapters(EIGHT_B, count=50, ranks=(8, 64), max_loras=8, skew=1.0),
        RabitConfig(adapters=AdapterSet(count=300, max_loras=16)),
        RabitConfig(model="deepseek-v3", gpu="h200-sxm", adapters=AdapterSet(count=4, targets="qkvo")),
        RabitConfig(tp=4, pp=2, adapters=AdapterSet(count=30, max_loras=4, targets="mlp")),
    ):
        steps = speed_summary(cfg).steps + serving_memory(cfg).steps
        keys = {s.key for s in steps}
        assert {
            "adapter_bytes",
            "adapter_reserved_bytes_per_gpu",
            "lora_flop_per_token",
            "decode_mid_lora_bytes",
        } <= keys
        for st in steps:
            if not math.isnan(st.value):
                assert st.evaluate() == pytest.approx(st.value, rel=1e-9, abs=1e-300), (cfg.model, st.key)


def test_load_time_over_the_host_link_by_hand():
    # Llama-3.1-8B rank 16 on one H100 (PCIe Gen5 x16, 64 GB/s each way): 128 wrapped layers (qkv, o, gate_up,
    # down on 32 layers) x t_l + 83,886,080 B / (64e9 x eta_h); from storage add 83,886,080 B / BW_s
    cfg = with_adapters(EIGHT_B, count=10)
    a = cfg.assumptions
    host = 128 * a.adapter_layer_load_us * 1e-6 + 83_886_080 / (64e9 * a.adapter_link_eff)
    assert adapter_load_s(cfg, 16, from_storage=False) == pytest.approx(host, rel=1e-12)
    storage = host + 83_886_080 / (a.adapter_storage_gb_per_s * 1e9)
    assert adapter_load_s(cfg, 16, from_storage=True) == pytest.approx(storage, rel=1e-12)
    # the GB200's NVLink-C2C is faster than PCIe: the same adapter copies sooner
    assert adapter_load_s(cfg.with_(gpu="gb200"), 16, from_storage=False) < host


# --- the simulator -------------------------------------------------------------------------------------------


def _sim(cfg: RabitConfig, rate: float = 10.0, n: int = 800):
    cfg = cfg.with_(workload=cfg.workload.with_(rate_per_s=rate, num_requests=n))
    return simulate(cfg, sim_spec(cfg)).summary


def test_one_slot_over_many_adapters_cuts_throughput_and_loads_appear():
    plenty = _sim(with_adapters(EIGHT_B, count=50, max_loras=50, max_cpu_loras=50))
    one = _sim(with_adapters(EIGHT_B, count=50, max_loras=1))
    assert one.throughput_requests_per_s < 0.8 * plenty.throughput_requests_per_s
    assert one.adapters.loads > 50  # the single slot changes hands again and again
    assert one.adapters.distinct_mean <= 1.0 + 1e-9  # never more than max_loras adapters in a batch
    assert one.adapters.blocked_requests > 0 and one.adapters.wait_s.n > 0
    # with a slot for every adapter each is loaded once, from storage, into a host cache that keeps them all
    assert plenty.adapters.loads == plenty.adapters.loads_from_storage <= 50
    assert plenty.adapters.blocked_requests == 0


def test_a_small_host_cache_reads_from_storage_again():
    small = _sim(with_adapters(EIGHT_B, count=40, max_loras=8, max_cpu_loras=8))
    large = _sim(with_adapters(EIGHT_B, count=40, max_loras=8, max_cpu_loras=40))
    assert small.adapters.loads_from_storage > 40  # evicted from host memory, read again
    assert large.adapters.loads_from_storage <= 40  # each read once, then held in host memory
    assert large.adapters.load_s.p50 < small.adapters.load_s.p50


def test_simulation_is_deterministic_and_the_draws_follow_the_popularity():
    cfg = with_adapters(EIGHT_B, count=20, max_loras=4, skew=1.5)
    w = cfg.workload.with_(rate_per_s=5, num_requests=400)
    a, b = (
        simulate(cfg.with_(workload=w), sim_spec(cfg.with_(workload=w))),
        simulate(cfg.with_(workload=w), sim_spec(cfg.with_(workload=w))),
    )
    assert a.summary == b.summary and np.array_equal(a.finish_s, b.finish_s)
    # the arrivals and lengths are the base's draws: adapters take a stream of their own
    base = simulate(EIGHT_B.with_(workload=w), sim_spec(EIGHT_B.with_(workload=w)))
    assert np.array_equal(a.arrival_s, base.arrival_s) and np.array_equal(a.output_tokens, base.output_tokens)


def test_tabulated_timing_matches_direct_calls_with_adapters():
    cfg = with_adapters(EIGHT_B, count=30, max_loras=6)
    w = cfg.workload.with_(rate_per_s=8, num_requests=300)
    c = cfg.with_(workload=w)
    fast, ref = simulate(c, sim_spec(c)), simulate(c, sim_spec(c), timing="direct")
    assert fast.timing == "tabulated"
    assert np.allclose(fast.finish_s, ref.finish_s, rtol=1e-9, atol=1e-9)


def test_closed_form_slot_wait_falls_with_slots():
    # W = t_r (N_e - K) / K with N_e = 1 / sum p^2 (N for uniform traffic)
    assert effective_adapters((0.25,) * 4) == pytest.approx(4.0)
    waits = []
    for k in (1, 4, 16, 50):
        cfg = with_adapters(EIGHT_B, count=50, max_loras=k)
        cap = max_throughput(cfg, sim_spec(cfg))
        waits.append(cap.adapter_slot_wait_s)
        t_r = cap.batch / cap.requests_per_s
        if k < 50:
            assert cap.adapter_slot_wait_s == pytest.approx(t_r * (50 - k) / k, rel=1e-12)
    assert waits[0] > waits[1] > waits[2] > waits[3] == 0.0


def test_a_trace_names_each_requests_adapter():
    text = "input_tokens,output_tokens,adapter\n100,10,sql\n100,10,chat\n120,12,sql\n90,9,sql\n"
    # sql is the most frequent: adapter 0 (hottest first)
    assert parse_trace_adapters(text) == (0, 1, 0, 0)
    assert parse_trace_adapters("input_tokens,output_tokens\n1,1\n") is None
    # a vLLM benchmark's "model" field names the adapter; equal counts go by name
    jsonl = '{"prompt_len": 5, "output_len": 2, "model": "b"}\n{"prompt_len": 5, "output_len": 2, "model": "a"}\n'
    assert parse_trace_adapters(jsonl) == (1, 0)


# --- the config, the link, the checks --------------------------------------------------------------------------


def test_the_adapter_set_travels_in_the_link():
    cfg = RabitConfig(adapters=AdapterSet(count=300, ranks=(8, 64), targets="qkvo", skew=1.2, max_loras=16))
    q = to_query(cfg)
    assert q["adapters.count"] == "300" and q["adapters.ranks"] == "8,64"
    assert from_query(q) == cfg
    assert "adapters.count" not in to_query(RabitConfig())


def test_engine_limits_are_named_next_to_their_input():
    bad_rank = RabitConfig(adapters=AdapterSet(count=5, ranks=(64,), max_lora_rank=32))
    assert any(p.field == "adapters.max_lora_rank" and "below" in p.message for p in problems(bad_rank))
    not_allowed = RabitConfig(adapters=AdapterSet(count=5, ranks=(8,), max_lora_rank=24))
    assert any("1, 8, 16, 32" in p.message for p in problems(not_allowed))
    small_host = RabitConfig(adapters=AdapterSet(count=5, max_loras=4, max_cpu_loras=2))
    assert any(p.field == "adapters.max_cpu_loras" for p in problems(small_host))
    with pytest.raises(ValueError):
        AdapterSet(count=-1)
    with pytest.raises(ValueError):
        AdapterSet(ranks=(0,))


# --- the decision ----------------------------------------------------------------------------------------------


def _goal(count: int, rate: float, **kw) -> ServingGoal:
    cfg = with_adapters(EIGHT_B, count=count, **kw)
    cfg = cfg.with_(
        workload=cfg.workload.with_(rate_per_s=rate),
        targets=cfg.targets.with_(p95_ttft_s=2.0, p95_itl_s=None, p95_e2e_s=20.0, requests_per_simulation=400),
    )
    return ServingGoal.from_config(cfg)


CONS = Constraints(gpus_allowed=("h100-sxm", "l40s"), max_simulations=4)


def test_three_hundred_fine_tunes_one_base_against_one_deployment_each():
    goal = _goal(300, 10.0)
    rec = recommend(goal, CONS)
    assert rec.met and rec.recommendation.adapter_slots >= 1
    pv = per_variant(goal, CONS, catalog.prices(), rec.recommendation)
    # every variant needs at least one replica of its own: at least 300 GPUs, against a handful with adapters
    assert pv.variants == 300 and pv.gpus >= 300 and pv.replicas >= 300
    assert pv.multi_lora_gpus <= 4 and pv.cost_per_hour > 10 * pv.multi_lora_cost_per_hour
    assert not pv.own_replica  # 0.033 requests/s each fill no replica


def test_a_variant_whose_traffic_fills_a_replica_earns_its_own():
    goal = _goal(10, 60.0, skew=3.0)  # Zipf 3 over 10: the hottest takes 83 % of the traffic
    rec = recommend(goal, CONS)
    pick = rec.recommendation or rec.nearest
    pv = per_variant(goal, CONS, catalog.prices(), pick)
    hot = [v for v in pv.own_replica if v.adapter == "adapter-1"]
    assert hot and "fills a dedicated replica" in hot[0].reason
    assert hot[0].rate_per_s >= pv.dedicated_capacity_rps * 0.8


def test_max_loras_is_searched():
    # few adapters: every one gets a slot; many with a tight TTFT target: enough slots that few wait
    few = recommend(_goal(4, 5.0), CONS).recommendation
    assert few.adapter_slots == 4
    many = recommend(_goal(200, 5.0), CONS).recommendation
    assert 1 <= many.adapter_slots <= 200
    # and the slot rank: rank-8 adapters get rank-8 slots (vLLM's default 16 would pad each to twice its size)
    from core.decision import candidate_config

    goal = _goal(20, 5.0, ranks=(8,))
    pick = recommend(goal, CONS).recommendation
    searched = candidate_config(goal, pick).adapters
    assert searched.slot_rank("vllm") == 8 and searched.max_loras == pick.adapter_slots
    assert searched.host_slots("vllm") == 20  # host memory holds every adapter (not priced)


def test_fully_sharded_adapters_split_both_matrices():
    # TP 2, fully sharded: every module's d_in and d_out split 2 ways (k, v outputs by their 8 KV heads, 2 ways):
    # per layer 81,920 / 2 = 40,960 per unit rank -> 16 x 40,960 x 32 x 2 B = 41,943,040 B, half the adapter
    cfg = EIGHT_B.with_(gpus_per_node=2, tp=2, adapters=AdapterSet(count=4, max_loras=1, fully_sharded=True))
    assert adapter_footprint(cfg).slot_bytes_per_gpu == 41_943_040


def test_the_adapter_cases_are_predicted_and_the_overhead_family_stays_close():
    from core.decision import run

    r = run(("lora-overhead-throughput", "lora-engine-throughput"))
    assert {c.id for c in r.cases} >= {"punica-7b", "punica-70b-tp8", "vllm-pr11613-llama2-7b-r8"}
    assert all(0 < c.predicted < float("inf") for c in r.cases)
    fam = next(f for f in r.families if f.family == "lora-overhead-throughput")
    assert fam.median_abs_error <= 0.15 and fam.within_2x == 1.0


# --- routing a deployment's adapters ------------------------------------------------------------------------


def test_adapter_affinity_picks_by_its_rule():
    """The lora-affinity-scorer's tiers: active adapter, then room to load one (fewer adapters in flight than
    max_loras), then the rest; the least loaded within the best tier; out-of-balance replicas left out first."""
    from core.serving import Request, make_policy

    def req(a: int) -> Request:
        return Request(0, 0.0, 100, 10, -1, a)

    p = make_policy("adapter-affinity", 3, adapter_slots=2)
    assert p.pick(req(5), [3, 0, 1]) == 1  # nowhere active, room everywhere: the least loaded
    assert p.pick(req(5), [3, 1, 1]) == 1  # active on 1: kept there although 2 is as light
    assert p.pick(req(6), [3, 2, 1]) == 2  # 6 nowhere active, room on all: the least loaded
    assert p.pick(req(7), [3, 2, 2]) == 1  # room on all; 1 and 2 tie, the first after the last pick (0) wins
    assert p.pick(req(8), [3, 3, 2]) == 2  # 1 is full (5 and 7 in flight): the lighter of 0 and 2
    assert p.pick(req(9), [3, 3, 3]) == 0  # 1 and 2 are full: only 0 has room
    assert p.pick(req(10), [4, 3, 3]) == 0  # room before load: 0 is the heaviest but the only one with room
    assert p.pick(req(11), [5, 3, 4]) == 1  # every replica full: the least loaded
    assert p.active == [{9: 1, 10: 1}, {5: 2, 7: 1, 11: 1}, {6: 1, 8: 1}]
    # a hot adapter active on a replica out of balance (200 - 4 > 64 and 200 > 1.5 x 4) goes to the lightest
    assert p.pick(req(5), [30, 200, 4]) == 2
    # the base model's requests (no adapter) go to the least loaded and are not tracked
    assert p.pick(req(-1), [1, 0, 2]) == 1
    # every request that ends leaves the table: what was routed, once ended, leaves it empty
    for j, a in ((0, 9), (0, 10), (1, 5), (1, 5), (1, 7), (1, 11), (2, 6), (2, 8), (2, 5), (1, -1)):
        p.ended(j, req(a))
    assert p.active == [{}, {}, {}]


#: a four-replica deployment serving 40 adapters, uniform traffic, 4 slots each (vLLM's max_loras default is 1)
FOUR = with_adapters(EIGHT_B.with_(gpus_per_node=4), count=40, max_loras=4)


def _deployment(router: str, cfg: RabitConfig = FOUR, rate: float = 16.0, n: int = 1200):
    from core.serving import Layout, simulate_deployment

    w = cfg.workload.with_(rate_per_s=rate, num_requests=n)
    c = cfg.with_(workload=w)
    return simulate_deployment(c, sim_spec(c), Layout(replicas=4, router=router))


def test_adapter_affinity_loads_fewer_adapters_than_round_robin_on_the_same_draws():
    """Round-robin sends each replica every adapter (40 adapters over 4 slots: nearly every admission changes a
    slot); affinity keeps an adapter's requests where it is active, so the same requests need fewer loads."""
    rr = _deployment("round-robin")
    aff = _deployment("adapter-affinity")
    assert np.array_equal(rr.result.arrival_s, aff.result.arrival_s)  # the same arrival and length draws
    assert aff.summary.adapters.adapters_seen == rr.summary.adapters.adapters_seen == 40
    assert aff.summary.adapters.loads < 0.9 * rr.summary.adapters.loads, (
        aff.summary.adapters.loads,
        rr.summary.adapters.loads,
    )
    assert aff.summary.adapters.distinct_mean <= 4 + 1e-9 and rr.summary.adapters.distinct_mean <= 4 + 1e-9
    # nothing is lost or counted twice: every request ends on one replica
    assert sum(r.requests for r in aff.replicas) == aff.summary.requests == rr.summary.requests


def test_a_one_replica_deployment_with_adapters_is_the_one_replica_simulation():
    """The deployment's own loop (a shared prefix too small to cache anything forces it) reads each request's
    adapter by its number in the deployment: the same records, adapters included, as the one-replica engine."""
    from core.serving import Layout, simulate_deployment

    cfg = with_adapters(EIGHT_B, count=30, max_loras=2, skew=0.8)
    c = cfg.with_(workload=cfg.workload.with_(rate_per_s=6.0, num_requests=500))
    alone = simulate(c, sim_spec(c))
    looped = simulate_deployment(c, sim_spec(c).with_(prefix_cache_frac=1e-4), Layout(replicas=1, router="round-robin"))
    assert alone.summary == looped.summary
    assert alone.summary.adapters is not None and alone.summary.adapters.loads > 0
    assert np.array_equal(alone.finish_s, looped.result.finish_s, equal_nan=True)


def test_every_router_is_labelled_and_names_what_it_mimics():
    from core.base import choices
    from core.serving import POLICIES

    assert set(choices.ROUTER_LABELS) == set(choices.ROUTERS) == set(POLICIES)
    assert "lora-affinity-scorer" in POLICIES["adapter-affinity"].mimics


def test_the_adapter_kernel_efficiency_moves_the_speed_range_only_with_adapters():
    """The tornado's inputs: lora_kernel_eff (registry bounds 0.17-1.00) moves the decode step of a batch of 32
    over 50 adapters (32 slots) and is absent from the base model's ranges."""
    from core.decision import speed_spread

    cfg = EIGHT_B.with_(batch=32)
    base = speed_spread(cfg).ranges["decode_step_s"]
    assert all(c.name != "lora_kernel_eff" for c in base.contributions)
    served = speed_spread(with_adapters(cfg, count=50, max_loras=32)).ranges["decode_step_s"]
    (c,) = [c for c in served.contributions if c.name == "lora_kernel_eff"]
    assert c.d_up > 0 > c.d_down  # one bound (0.17) slows the step, the other (1.00) speeds it up
    assert served.low <= served.value <= served.high


def test_without_adapters_adapter_affinity_is_least_outstanding():
    """The base model's requests carry no adapter: the adapter-affinity router falls back to the fewest requests in
    flight with the same rotation of ties, so a deployment without adapters is least-outstanding's to the byte."""
    from core.serving import Layout, simulate_deployment

    c = EIGHT_B.with_(gpus_per_node=3, workload=EIGHT_B.workload.with_(rate_per_s=20.0, num_requests=600))
    lo = simulate_deployment(c, sim_spec(c), Layout(replicas=3, router="least-outstanding"))
    aff = simulate_deployment(c, sim_spec(c), Layout(replicas=3, router="adapter-affinity"))
    assert lo.summary == aff.summary and lo.replicas == aff.replicas and aff.summary.adapters is None
    assert np.array_equal(lo.result.finish_s, aff.result.finish_s, equal_nan=True)


def test_adapters_are_paid_on_the_context_parallel_path_too():
    # CP 2 over two H100s at TP 1: each rank steps half the tokens but reads every distinct adapter of the batch,
    # so, memory-bound (32 decode tokens over 1,125 cached each), each extra adapter still costs one slot's
    # weights read once: 83.9 MB / (3.35 TB/s x MBU x eta_l), as at CP 1 (the test above)
    cfg = with_adapters(EIGHT_B.with_(gpus_per_node=2, cp=2), count=64, max_loras=64)
    sm = StepModel.from_deployment(resolve(cfg))
    assert sm.attention_split and sm.cp == 2
    T, ctx = 32, 1125
    t1, t4 = (sm.iteration_s(T, T * ctx, T * ctx, adapters=d) for d in (1, 4))
    a = cfg.assumptions
    assert t4 - t1 == pytest.approx(3 * 83_886_080 / (3.35e12 * a.mbu * a.lora_kernel_eff), rel=1e-9)
    plain = StepModel.from_deployment(resolve(EIGHT_B.with_(gpus_per_node=2, cp=2)))
    assert plain.iteration_s(T, T * ctx, T * ctx) < sm.iteration_s(T, T * ctx, T * ctx, adapters=0)


def test_slot_limit_names_the_wait_and_the_fewest_slots_that_meet():
    """Fifty equally popular adapters on one slot (vLLM's default): requests wait for the slot most of their time
    to first token. The fix is the fewest slots of the grid whose simulated p95 TTFT meets 2 s: the simulator at
    that count meets it, at the grid's count below it does not."""
    from core.config import from_query
    from core.decision import SLOT_CAUSE_SHARE, slot_choices, slot_limit
    from core.serving import sim_spec, simulate_deployment

    q = {
        "model": "llama-3.1-8b",
        "tp": "1",
        "gpus_per_node": "1",
        "input_tokens": "1000",
        "output_tokens": "250",
        "adapters.count": "50",
        "adapters.ranks": "16",
        "workload.rate_per_s": "5",
        "workload.num_requests": "300",
    }
    cfg = from_query(q)
    spec = sim_spec(cfg)
    sl = slot_limit(cfg, spec, simulate_deployment(cfg, spec))
    assert sl is not None and sl.slots == 1 and sl.is_cause and sl.wait_share >= SLOT_CAUSE_SHARE
    assert 0 <= sl.wait_share <= 1 and sl.blocked_requests <= sl.completed == 300
    assert sl.fix_slots is not None and sl.fix_slots in slot_choices(50)

    def p95_ttft(k):
        c = cfg.with_(adapters=cfg.adapters.model_copy(update={"max_loras": k}))
        return simulate_deployment(c, spec).summary.ttft_s.p95

    assert p95_ttft(sl.fix_slots) <= 2.0 == sl.target_s
    below = max(k for k in slot_choices(50) if k < sl.fix_slots)
    p = p95_ttft(below)
    assert p is None or p > 2.0
    assert f"max_loras = {sl.fix_slots:,}" in sl.text() and f"{sl.wait_share:.0%}" in sl.text()
    # enough slots for every adapter: nobody waits, the slots are not the cause, nothing to say
    every = cfg.with_(adapters=cfg.adapters.model_copy(update={"max_loras": 50}))
    none = slot_limit(every, spec, simulate_deployment(every, spec))
    assert none is not None and not none.is_cause and none.text() == ""
    # the base alone: no slot limit at all
    base = cfg.with_(adapters=cfg.adapters.model_copy(update={"count": 0}))
    assert slot_limit(base, spec, simulate_deployment(base, spec)) is None
