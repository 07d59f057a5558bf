"""Training: work against 6N and Narayanan et al., the layout search, the deadline search, goodput, the CLI."""

import dataclasses
import json
import math

import numpy as np
import pytest

from cli.main import main as rabit
from core import catalog
from core.base import DAY_S, Trace
from core.config import RabitConfig
from core.physics import Collectives, training_memory_for
from core.training import (
    Layout,
    TrainingGoal,
    bubble_fraction,
    catalog_price,
    daly_interval_s,
    evaluate_layout,
    flops_per_token,
    goodput,
    group_allreduce_s,
    group_gather_s,
    layout_context,
    layout_grid,
    layouts_at,
    mtbf_s,
    plan,
    training_math,
    wall_clock_s,
)

L70 = RabitConfig(model="llama-3.1-70b", phase="train", train_tokens=1e12)


# --- work ------------------------------------------------------------------------------------------------


def test_flops_per_token_is_6n_plus_attention_for_a_dense_model():
    m = catalog.model("llama-3.1-70b")
    P = m.total_params()  # 70.55e9
    # Short sequences: attention is negligible and the count is the 6N rule (the embedding lookup does no
    # matmul: 6 x 69.50e9 of 6 x 70.55e9, 1.5 % below 6P).
    f128, _ = flops_per_token(m, 128)
    assert f128 == pytest.approx(6 * P, rel=0.02)
    assert f128 < 6 * P
    # At 4k the causal attention term 12 x (64 x 128) x 80 x 2,048.5 = 16.11 GFLOP adds 3.9 % to
    # 6N = 6 x 69.503e9 = 417.02 GFLOP (N = 70.554e9 - 128,256 x 8,192 embedding rows).
    f4k, _ = flops_per_token(m, 4096)
    assert f4k == pytest.approx(417.02e9 + 16.11e9, rel=1e-4)


def test_flops_per_token_matches_narayanan_with_causal_attention():
    # Narayanan et al. 2021 (SC21) FLOP count per token without recomputation: 72 l h^2 (1 + s/6h + V/12hl);
    # its attention term 12 l h s counts the full score matrix, a causal kernel computes half: subtract 6 l h s.
    m = catalog.model("gpt-3-175b")
    l, h, V, s = 96, 12288, 50257, 2048
    narayanan = 72 * l * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    ours, _ = flops_per_token(m, s)
    assert ours == pytest.approx(narayanan - 6 * l * h * s, rel=1e-3)  # biases and norms are the 0.01 % left


def test_recomputation_counts_as_hardware_flops_only():
    m = catalog.model("llama-3.1-8b")
    model, hw_none = flops_per_token(m, 128, recompute="none", kernel="eager")
    _, hw_full = flops_per_token(m, 128, recompute="full")
    _, hw_sel = flops_per_token(m, 4096, recompute="selective", kernel="eager")
    assert hw_none == model
    # a fused kernel's backward rebuilds Q K^T: 2 x d_qk per pair on top, 32 x 4096 x 64.5 pairs per token at s = 128
    _, hw_flash = flops_per_token(m, 128, recompute="none")
    assert hw_flash - model == pytest.approx(2 * 4096 * 32 * 129 / 2, rel=1e-12)
    # full recomputation reruns the forward: 8N / 6N = 4/3 when attention is negligible
    assert hw_full / model == pytest.approx(4 / 3, rel=0.005)
    # selective reruns only the attention core: a few per cent at most
    assert 1 < hw_sel / flops_per_token(m, 4096, kernel="eager")[0] < 1.03
    # LoRA: the frozen base does forward + activation-gradient backward, 4N instead of 6N
    lora, _ = flops_per_token(m, 128, lora_rank=16)
    assert lora / model == pytest.approx(4 / 6, rel=0.01)


# --- pipeline, ZeRO, FP8 -------------------------------------------------------------------------------------


def test_bubble_formula_at_known_values():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert bubble_fraction(4, 8, 2) == pytest.approx(3 / 19)
    assert bubble_fraction(1, 5) == 0
    assert bubble_fraction(8, 1) == pytest.approx(7 / 8)
    # the timed layout has the same bubble share of its pipeline time
    r = evaluate_layout(L70.with_(nodes=8), Layout(tp=8, pp=4, dp=2, micro_batch=1, zero=1))
    pipe = r.compute_s + r.bubble_s + r.tp_comm_s + r.ep_comm_s + r.pp_comm_s
    assert r.micro_batches == 512
    assert r.bubble_s / pipe == pytest.approx(3 / (512 + 3))
    rv = evaluate_layout(L70.with_(nodes=8), Layout(tp=8, pp=4, dp=2, micro_batch=1, zero=1, vpp=2))
    assert rv.bubble_s < r.bubble_s


def test_zero1_traffic_by_hand_and_zero3_moves_more():
    cfg = L70.with_(nodes=16)
    lay = Layout(tp=8, pp=1, dp=16, micro_batch=1, zero=1, recompute="full")
    z1 = evaluate_layout(cfg, lay)
    # ZeRO-1: reduce-scatter + all-gather of the BF16 shard 70.55e9 x 2 / 8 = 17.64 GB over 16 nodes, one GPU of the
    # group per node, IB NDR 50 GB/s x 0.8: each (p-1)/p n / beta = 15/16 x 17.64e9 / 40e9 = 0.4134 s,
    # + 8 us launch + 15 x 3.5 us hops.
    n = catalog.model("llama-3.1-70b").total_params() * 2 / 8
    one = 8e-6 + 15 * 3.5e-6 + 15 / 16 * n / 40e9
    assert z1.dp_comm_s == pytest.approx(2 * one, rel=1e-9)
    z3 = evaluate_layout(cfg, lay.model_copy(update={"zero": 3}))
    assert z3.dp_comm_s > z1.dp_comm_s  # 3 units per micro-batch against 2 per step
    assert z3.dp_comm_s == pytest.approx(3 * z3.micro_batches * one, rel=1e-9)
    assert z3.memory_bytes_per_gpu < z1.memory_bytes_per_gpu


def test_fp8_speedup_stays_within_the_assumption_bounds():
    lay = Layout(tp=8, pp=2, dp=4, micro_batch=1, zero=1)
    for bound in ("low", "base", "high"):
        a = L70.assumptions.at(bound)
        # the GEMMs' main loops alone (K0 = 0): exactly the assumption
        a0 = a.with_(gemm_k0_ridge=0)
        bf = evaluate_layout(L70.with_(nodes=8, assumptions=a0), lay)
        f8 = evaluate_layout(L70.with_(nodes=8, assumptions=a0, train_precision="fp8"), lay)
        assert bf.compute_s / f8.compute_s == pytest.approx(a.fp8_speedup)
        assert 1.3 <= bf.compute_s / f8.compute_s <= 1.5 * (1 + 1e-12)  # never the 2x datasheet ratio
        # FP8's ridge point is twice BF16's: TP 8's short reductions (core.physics.gemm_shape) give back part of it
        bf = evaluate_layout(L70.with_(nodes=8, assumptions=a), lay)
        f8 = evaluate_layout(L70.with_(nodes=8, assumptions=a, train_precision="fp8"), lay)
        assert 1.0 < bf.compute_s / f8.compute_s < a.fp8_speedup
        assert 1.0 < bf.step_s / f8.step_s <= a.fp8_speedup  # communication does not speed up
    # A100 has no FP8 tensor cores: no speed-up
    a100 = L70.with_(gpu="a100-80gb", nodes=8)
    assert evaluate_layout(a100, lay).compute_s == pytest.approx(
        evaluate_layout(a100.with_(train_precision="fp8"), lay).compute_s
    )


# --- the search --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg,gpus",
    [
        (L70, 64),
        (L70, 1024),
        (L70.with_(train_precision="fp8", seq_len=8192), 256),
        (RabitConfig(model="mixtral-8x7b", phase="train"), 32),
        (RabitConfig(model="llama-3.1-70b", phase="train", lora_rank=16, qlora=True, global_batch_tokens=2**17), 1),
    ],
)
def test_the_chosen_layout_fits_memory(cfg, gpus):
    p = plan(cfg, TrainingGoal(gpus=gpus))
    b = p.best
    assert b is not None and b.fits and b.gpus == gpus
    lay = b.layout
    traced = training_memory_for(
        cfg,
        Trace(),
        dp=lay.dp,
        tp=lay.tp,
        pp=lay.pp,
        zero=lay.zero,
        micro_batch=lay.micro_batch,
        recompute=lay.recompute,
        ep=lay.ep,
        vpp=lay.vpp,
        micro_batches=b.micro_batches,
        cp=lay.cp,
    )
    assert traced.fits and traced.total_bytes_per_gpu <= traced.usable_bytes_per_gpu
    assert b.memory_bytes_per_gpu == pytest.approx(traced.total_bytes_per_gpu, rel=1e-9)
    # no feasible alternative is faster
    assert all(a.runtime_s >= b.runtime_s * (1 - 1e-12) for a in p.alternatives if a.feasible)


def test_search_memory_equals_the_traced_memory_everywhere():
    rng = np.random.default_rng(7)
    cfgs = [
        L70,
        L70.with_(train_precision="fp8", sequence_parallel=False),
        RabitConfig(model="deepseek-v3", phase="train"),
        RabitConfig(model="mixtral-8x7b", phase="train", lora_rank=8),
        RabitConfig(model="llama-3.1-70b", phase="train", lora_rank=16, qlora=True),
    ]
    for cfg in cfgs:
        c = layout_context(cfg)
        for _ in range(25):
            tp, pp, dp = (int(rng.choice(x)) for x in ([1, 2, 4, 8], [1, 2, 3, 5, 16], [1, 3, 8, 64]))
            ep = int(rng.choice([1, 2, 8])) if c.m.is_moe else 1
            v, b, z = int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4])), int(rng.choice([0, 1, 2, 3]))
            rc = str(rng.choice(["none", "selective", "full"]))
            r = layout_grid(c, tp, pp, ep, np.array([dp]), (v,), (b,), (rc,), (z,), 1e9)
            mem = training_memory_for(
                c.dep,
                Trace(),
                dp=dp,
                tp=tp,
                pp=pp,
                zero=z,
                micro_batch=b,
                recompute=rc,
                ep=ep,
                vpp=v,
                micro_batches=int(np.ravel(r["mm"])[0]),
            )
            assert float(np.ravel(r["mem"])[0]) == pytest.approx(mem.total_bytes_per_gpu, rel=1e-9)


def test_alternatives_say_why_they_lost():
    alts = layouts_at(L70, 64)
    assert alts[0].why == "fastest that fits"
    reasons = " ".join(a.why for a in alts[1:])
    assert "memory" in reasons  # TP x PP too small for 70B on 64 GPUs
    assert any(k in reasons for k in ("pipeline bubble", "communication"))
    assert all(not a.fits for a in alts if a.why.startswith("memory"))


def test_full_training_of_405b_on_one_node_is_refused_with_a_reason():
    p = plan(RabitConfig(model="llama-3.1-405b", phase="train"), TrainingGoal(gpus=8))
    assert p.best is None and "no layout fits" in p.message


def test_expert_parallelism_splits_expert_memory():
    cfg = RabitConfig(model="mixtral-8x7b", phase="train", nodes=2)
    e1 = evaluate_layout(cfg, Layout(tp=1, pp=2, dp=8, ep=1, zero=1))
    e8 = evaluate_layout(cfg, Layout(tp=1, pp=2, dp=8, ep=8, zero=1))
    # Experts: 32 layers x 8 x 3 x 4,096 x 14,336 = 45.10e9 parameters. EP 1: split over PP 2, ZeRO-1 over DP 8:
    # (2 + 2 + 12/8) B = 5.5 B each -> 124.0 GB. EP 8 x PP 2: one expert per GPU, expert-DP = 1 x 8 / 8 = 1 so
    # nothing to shard: 16 B each -> 45.1 GB. Everything else is the same: 78.9 GB apart.
    P_e = 32 * 8 * 3 * 4096 * 14336
    assert e1.memory_bytes_per_gpu - e8.memory_bytes_per_gpu == pytest.approx(P_e / 2 * 5.5 - P_e / 16 * 16)
    assert e8.ep_comm_s > 0 == e1.ep_comm_s


def test_lora_and_qlora_fine_tunes():
    full = RabitConfig(model="llama-3.1-70b", phase="train", train_tokens=1e8, global_batch_tokens=2**17)
    assert plan(full, TrainingGoal(gpus=8)).best is None  # 16 B/param = 1.13 TB > 8 x 85.9 GB
    lora = plan(full.with_(lora_rank=16), TrainingGoal(gpus=8)).best
    assert lora is not None and lora.fits
    lay = Layout(tp=8, pp=1, dp=1, micro_batch=1, zero=0, recompute="full")
    t_lora = evaluate_layout(full.with_(lora_rank=16), lay).compute_s
    t_qlora = evaluate_layout(full.with_(lora_rank=16, qlora=True), lay).compute_s
    assert t_qlora / t_lora == pytest.approx(full.assumptions.qlora_slowdown)
    assert evaluate_layout(full, lay).compute_s > 1.3 * t_lora  # 8N against 6N hardware FLOPs per token
    assert plan(full.with_(lora_rank=16, qlora=True), TrainingGoal(gpus=1)).best.fits


# --- GPU counts and the deadline -------------------------------------------------------------------------------


def test_deadline_search_returns_the_smallest_count_that_meets_it():
    goal = TrainingGoal(deadline_s=30 * DAY_S, max_gpus=4096)
    p = plan(L70, goal)
    assert p.deadline_met and p.best is not None
    assert p.goodput.wall_clock_s <= goal.deadline_s
    point = next(c for c in p.curve if c.gpus == p.gpus)  # the curve and the detailed plan agree
    assert point.runtime_s == pytest.approx(p.best.runtime_s) and point.meets_deadline
    smaller = [c for c in p.curve if c.gpus < p.gpus]
    assert smaller and not any(c.meets_deadline for c in smaller)
    assert all(c.wall_clock_s > goal.deadline_s for c in smaller)
    # the count just below, planned on its own, misses the deadline
    below = max(c.gpus for c in smaller if c.feasible)
    assert plan(L70, TrainingGoal(gpus=below)).goodput.wall_clock_s > goal.deadline_s
    assert p.cost_usd == pytest.approx(p.price.usd_per_gpu_hour * p.gpus * p.goodput.wall_clock_s / 3600)


def test_an_impossible_deadline_reports_the_fastest_count():
    p = plan(L70.with_(train_tokens=15e12), TrainingGoal(deadline_s=1 * DAY_S, max_gpus=2048))
    assert p.deadline_met is False and "no count" in p.message
    fastest = min((c for c in p.curve if c.feasible), key=lambda c: c.wall_clock_s)
    assert p.gpus == fastest.gpus


def test_more_gpus_are_never_slower_unless_the_curve_says_why():
    # a 64M-token batch leaves room for data parallelism: doubling nodes always helps up to 1,024 GPUs
    cfg = RabitConfig(model="llama-3.1-8b", phase="train", train_tokens=1e11, global_batch_tokens=64 * 2**20)
    p = plan(cfg, TrainingGoal(deadline_s=DAY_S, max_gpus=1024))
    family = [c for c in p.curve if c.gpus in (8, 16, 32, 64, 128, 256, 512, 1024)]
    times = [c.runtime_s for c in family]
    assert all(c.feasible for c in family) and times == sorted(times, reverse=True)
    # with a 4M batch the 70B curve does rise; every rise names its cause
    q = plan(L70, TrainingGoal(deadline_s=DAY_S))
    best = math.inf
    rises = 0
    for c in q.curve:
        if not c.feasible:
            continue
        if c.runtime_s > best * (1 + 1e-9):
            rises += 1
            assert any(k in c.slower_reason for k in ("bubble", "communication", "compute")), c
        else:
            assert c.slower_reason == ""
        best = min(best, c.runtime_s)
    assert rises > 0


def test_prices_median_on_demand_or_none():
    p = catalog_price("h100-sxm")
    rows = sorted(r.usd_per_gpu_hour for r in catalog.prices() if r.gpu == "h100-sxm" and r.kind == "on-demand")
    # the median of the listings (odd count: the middle one), the optimizer's policy too
    assert len(rows) % 2 == 1 and p.kind == "on-demand" and p.usd_per_gpu_hour == rows[len(rows) // 2]
    assert catalog_price("b300") is None  # no dated public listing (catalogs/prices.csv header)
    q = plan(
        RabitConfig(model="llama-3.1-8b", phase="train", gpu="b300", gpus_per_node=8, train_tokens=1e10),
        TrainingGoal(gpus=8),
    )
    assert q.best is not None and q.cost_usd is None and q.price is None


# --- goodput ---------------------------------------------------------------------------------------------------


def test_goodput_at_llama3_scale_by_hand():
    # 16,384 GPUs x 2e-5 /GPU-h: M = 3600 / 0.32768 = 10,986 s; Young sqrt(2 x 60 x 10,986) = 1,148 s,
    # Daly's correction x (1 + sqrt(60 / 21,973) / 3 + ...) - 60 = 1,108.5 s.
    M = float(mtbf_s(16384, 2e-5))
    assert M == pytest.approx(10986.3, abs=0.1)
    tau = float(daly_interval_s(60.0, M))
    assert tau == pytest.approx(1108.5, abs=0.5)
    a = L70.assumptions
    g = goodput(30 * DAY_S, 16384, a)
    # T_w / T_s = M e^{R/M} (e^{(tau+delta)/M} - 1) / tau = 10,986 x 1.0561 x 0.11222 / 1,108.5 = 1.1747
    assert g.wall_clock_s / (30 * DAY_S) == pytest.approx(1.1747, abs=2e-4)
    assert g.goodput_frac == pytest.approx(0.8513, abs=2e-4)
    assert g.expected_interruptions == pytest.approx(g.wall_clock_s / M)
    # first-order (Young) limit for delta, R << M: overhead ~ delta/tau + tau/2M + R/M
    first = 60 / tau + tau / (2 * M) + 600 / M
    assert g.wall_clock_s / (30 * DAY_S) - 1 == pytest.approx(first, rel=0.1)


def test_goodput_invariants():
    a = L70.assumptions
    rates = [0, 1e-5, 2e-5, 4e-5]
    fracs = [goodput(10 * DAY_S, 4096, a.with_(failure_rate_per_gpu_hour=r)).goodput_frac for r in rates]
    assert fracs[0] == 1.0 and fracs == sorted(fracs, reverse=True)
    # the Daly interval beats a much shorter and a much longer one
    M = float(mtbf_s(4096, 2e-5))
    opt = float(daly_interval_s(60.0, M))
    best = float(wall_clock_s(1e6, opt, 60.0, 600.0, M))
    assert best < float(wall_clock_s(1e6, opt / 4, 60.0, 600.0, M))
    assert best < float(wall_clock_s(1e6, opt * 4, 60.0, 600.0, M))


# --- show the math -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        L70.with_(nodes=8, tp=8, pp=2, zero=1),
        L70.with_(nodes=8, tp=4, pp=4, zero=3, recompute="full", train_precision="fp8"),
        RabitConfig(model="llama-3.1-70b", phase="train", tp=8, lora_rank=16, qlora=True, recompute="none"),
        RabitConfig(model="deepseek-v3", phase="train", nodes=32, tp=1, pp=16, ep=8, recompute="full"),
        RabitConfig(model="gpt-oss-120b", phase="train", nodes=4, tp=4, ep=8, zero=2),
        RabitConfig(),  # the app's default (a serving config) must still give a chain
    ],
)
def test_training_math_reevaluates(cfg):
    steps = training_math(cfg)
    keys = [s.key for s in steps]
    for k in ("model_flop_per_token", "step_s", "runtime_s", "gpu_hours", "mfu", "goodput_frac", "total_bytes_per_gpu"):
        assert k in keys
    for s in steps:
        assert s.evaluate() == pytest.approx(s.value, rel=1e-9), s.key


# --- vectorised collectives --------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100-sxm", "mi300x", "a100-80gb", "l40s"])
def test_vectorised_group_collectives_match_core_collectives(gpu):
    g, f = catalog.gpu(gpu), catalog.fabric("ib-ndr")
    coll = Collectives.for_cluster(g, f, 8, 0.8, 8e-6)
    ps = np.array([1, 2, 3, 4, 8, 12, 16, 64, 1000])
    for k in (1, 2, 4, 8):
        ref = dataclasses.replace(coll, domain=k)
        for n in (0.0, 1e6, 3e9):
            assert group_allreduce_s(coll, n, ps, k) == pytest.approx([ref.all_reduce_s(n, int(p)) for p in ps])
            assert group_gather_s(coll, n, ps, k) == pytest.approx([ref.all_gather_s(n, int(p)) for p in ps])


# --- CLI ---------------------------------------------------------------------------------------------------


def test_cli_json_contract(capsys):
    assert (
        rabit(["train", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tokens", "1e12", "--gpus", "512", "--json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    for k in ("gpus", "layout", "step_s", "runtime_s", "gpu_hours", "mfu", "goodput", "memory_bytes_per_gpu"):
        assert d[k] is not None, k
    assert set(d["layout"]) >= {"tp", "pp", "dp", "ep", "micro_batch", "zero"}
    lay = d["layout"]
    assert d["gpus"] == 512 == lay["tp"] * lay["pp"] * lay["dp"]
    assert d["runtime_s"] == pytest.approx(d["gpu_hours"] * 3600 / 512)
    assert d["memory_bytes_per_gpu"] <= d["capacity_bytes_per_gpu"]


def test_cli_deadline_and_layout(capsys):
    assert (
        rabit(
            [
                "train",
                "--model",
                "llama-3.1-70b",
                "--tokens",
                "1T",
                "--deadline-days",
                "30",
                "--max-gpus",
                "2048",
                "--precision",
                "fp8",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["deadline_met"] is True and d["mode"] == "deadline"
    # the recommendation is the cheapest count that meets the deadline (core.training.deadline): a smaller count may
    # meet it too, but never for less
    meeting = [c for c in d["curve"] if c["meets_deadline"]]
    pick = next(c for c in meeting if c["gpus"] == d["gpus"])
    assert all(c["cost_usd"] >= pick["cost_usd"] for c in meeting)
    assert (
        rabit(
            [
                "train",
                "--model",
                "llama-3.1-70b",
                "--tokens",
                "1e12",
                "--layout",
                "8,4,16",
                "--zero",
                "3",
                "--recompute",
                "full",
                "--json",
            ]
        )
        == 0
    )
    e = json.loads(capsys.readouterr().out)
    assert e["mode"] == "layout" and e["gpus"] == 512
    assert e["layout"] == {
        "tp": 8,
        "pp": 4,
        "dp": 16,
        "ep": 1,
        "micro_batch": 1,
        "zero": 3,
        "recompute": "full",
        "vpp": 4,  # interleaving is searched for a pinned layout: m = 64 divides by PP 4, v = 4 fits and is fastest
        "cp": 1,
    }


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--gpus", "12"], "--gpus"),
        (["--layout", "3,1,8"], "--layout"),
        (["--layout", "8,x,1"], "--layout"),
        (["--layout", "8,1,2", "--gpus", "32"], "--layout"),
        ([], "--gpus"),
        (["--gpus", "8", "--zero", "5"], "--zero"),
        (["--gpus", "8", "--qlora"], "--qlora"),
    ],
)
def test_cli_bad_arguments_exit_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        rabit(["train", "--model", "llama-3.1-70b", "--tokens", "1e12", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err, err


def test_training_compute_runs_at_the_clock_the_part_holds():
    """MI300X holds a median 1,207 MHz (BF16) / 1,230 MHz (FP8) under a dense GEMM where its datasheet peak assumes
    2,100 MHz (AMD ROCm blog, 'Measuring Max-Achievable FLOPs - Part 2', Table 1). Sustained compute per GPU:
    BF16 1,307.4 x mfu_train 0.55 x 1,207 / 2,100 = 413.3 TFLOP/s; FP8 1,307.4 x 1.4 x 0.55 x 1,230 / 2,100 =
    589.6 TFLOP/s; an H100 keeps 989.4 x 0.55 = 544.2 TFLOP/s (no published clock)."""
    from core.training import layout_context

    assert layout_context(RabitConfig(gpu="mi300x")).peak_eff == pytest.approx(413.3e12, rel=1e-3)
    assert layout_context(RabitConfig(gpu="mi300x", train_precision="fp8")).peak_eff == pytest.approx(
        589.6e12, rel=1e-3
    )
    assert layout_context(RabitConfig(gpu="h100-sxm")).peak_eff == pytest.approx(544.2e12, rel=1e-3)
