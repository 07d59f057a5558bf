"""Long context and attention parallelism: the attention kernel and the headroom of training memory, context
parallelism in training, data-parallel attention, prefill and decode context parallelism, chunked prefill of long
prompts, the host KV tier, and the long-context view. Expected numbers are derived by hand in the comments."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from core import catalog
from core.base import Trace
from core.config import RabitConfig
from core.physics import training_memory, training_memory_for
from core.training import Layout, TrainingGoal, evaluate_layout, plan

GB = 1e9
GiB = 2**30

# --- training: the attention kernel -----------------------------------------------------------------------------

#: The issue's case: ``rabit memory --phase train --model llama-3.1-70b --gpus 8 --tp 8 --seq 8192 --recompute none``
T70 = RabitConfig(model="llama-3.1-70b", phase="train", tp=8, seq_len=8192, recompute="none", zero=1)


def test_fused_kernel_activations_of_the_70b_at_8k_without_recomputation():
    # Llama-3.1-70B: h = 8,192, a = 64 heads, L = 80, V = 128,256; s = 8,192, b = 1, t = 8 with sequence
    # parallelism, PP 1 (1F1B holds one micro-batch of all 80 layers).
    # Per layer, fused kernel (Korthikanti et al. Table 2 without the 5 a s / h score term, plus one FP32
    # log-sum-exp per head and query): s b h 34 / t + 4 a s b / t = 67,108,864 x 4.25 + 4 x 64 x 8,192 / 8
    #   = 285,212,672 + 262,144 = 285,474,816 B.
    # x 80 layers = 22,837,985,280 B; FP32 logits 4 s b V / t = 4 x 8,192 x 128,256 / 8 = 525,336,576 B.
    # Total 23,363,321,856 B = 23.4 GB ("about 23 GB", the issue).
    r = training_memory(T70)
    assert r.activation_bytes_per_gpu == 80 * (8192 * 8192 * 34 / 8 + 4 * 64 * 8192 / 8) + 4 * 8192 * 128256 / 8
    assert r.activation_bytes_per_gpu == 23_363_321_856


def test_eager_kernel_keeps_the_korthikanti_score_term():
    # The eager softmax stores the s x s scores: s b h (34 / t + 5 a s / (h t)) = 67,108,864 x (4.25 + 40)
    #   = 2,969,567,232 B per layer; x 80 + 525,336,576 = 238,090,715,136 B (238 GB: the number before the choice).
    r = training_memory(T70.with_(attention_kernel="eager"))
    assert r.activation_bytes_per_gpu == 238_090_715_136
    assert training_memory(T70).activation_bytes_per_gpu < r.activation_bytes_per_gpu / 10


def test_selective_recomputation_under_a_fused_kernel_saves_only_its_statistics():
    # Megatron's selective recomputation reruns the core attention; a fused kernel stores no scores, so all it
    # saves is the 4 a s b / t log-sum-exp: 80 x 262,144 B = 20,971,520 B. Under the eager kernel it saves the
    # score term, 80 x 67,108,864 x 40 = 214.7 GB.
    none, sel = training_memory(T70), training_memory(T70.with_(recompute="selective"))
    assert none.activation_bytes_per_gpu - sel.activation_bytes_per_gpu == 80 * 4 * 64 * 8192 / 8
    e_none = training_memory(T70.with_(attention_kernel="eager"))
    e_sel = training_memory(T70.with_(attention_kernel="eager", recompute="selective"))
    assert e_none.activation_bytes_per_gpu - e_sel.activation_bytes_per_gpu == 80 * 8192 * 8192 * 40


def test_cli_memory_takes_the_attention_kernel(capsys):
    base = "memory --phase train --model llama-3.1-70b --gpus 8 --tp 8 --seq 8192 --recompute none --json".split()
    assert main(base) == 0
    fused = json.loads(capsys.readouterr().out)
    assert main([*base, "--attention-kernel", "eager"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert fused["attention_kernel"] == "flash" and eager["attention_kernel"] == "eager"
    assert fused["activation_bytes_per_gpu"] == 23_363_321_856
    assert eager["activation_bytes_per_gpu"] == 238_090_715_136


def test_an_attention_flag_the_phase_does_not_read_is_refused(capsys):
    # the kernel sizes training only (serving engines always run a fused kernel); data-parallel attention, DCP and
    # the host KV tier size serving only; the deadline search picks CP itself: each is refused naming its flag
    train = "memory --phase train --model llama-3.1-70b --gpus 8 --tp 8 --seq 8192 --json".split()
    serve = "--model llama-3.1-8b --gpus 1 --tp 1 --json".split()
    refused = [
        ([*train, "--dcp", "2"], "--dcp"),
        ([*train, "--kv-offload-gib", "64"], "--kv-offload-gib"),
        (["memory", *serve, "--attention-kernel", "eager"], "--attention-kernel"),
        (["speed", *serve, "--attention-kernel", "flash"], "--attention-kernel"),
        (["simulate", *serve, "--rate", "1", "--requests", "20", "--attention-kernel", "eager"], "--attention-kernel"),
        (["recommend", "--model", "llama-3.1-8b", "--rate", "1", "--attention-kernel", "eager"], "--attention-kernel"),
        # disaggregated pools run plain TP attention: a split attention layout is refused, not dropped
        (["simulate", *serve[:-1], "--gpus", "2", "--cp", "2", "--disagg", "--rate", "1", "--requests", "20"], "--cp"),
        (
            ["recommend", "--train", "--model", "llama-3.1-8b", "--tokens", "1e9", "--deadline-days", "1", "--cp", "2"],
            "--cp",
        ),
    ]
    for argv, flag in refused:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and flag in err[0], (argv, err)


# --- training: the memory headroom ------------------------------------------------------------------------------


def test_training_fit_is_against_the_headroom():
    # H100 SXM: 80 GiB = 85.90 GB; headroom 5 % -> 81.60 GB usable. The traced view records C_u = C (1 - f_h).
    r = training_memory(T70.with_(nodes=8, zero=3, recompute="full"))
    assert r.usable_bytes_per_gpu == pytest.approx(80 * GiB * 0.95)
    step = next(s for s in r.steps if s.key == "usable_bytes_per_gpu")
    assert step.evaluate() == pytest.approx(step.value)
    assert r.fits == (r.total_bytes_per_gpu <= r.usable_bytes_per_gpu)


def test_no_training_layout_is_accepted_above_the_headroom():
    # Every layout the search keeps (the best and the feasible alternatives) lies at or below C (1 - 5 %) =
    # 81.6 GB on H100 SXM, at several GPU counts and sequence lengths.
    cfg = RabitConfig(model="llama-3.1-70b", phase="train", nodes=8, train_tokens=1e11)
    for gpus in (64, 128, 256):
        for seq in (4096, 8192):
            p = plan(cfg.with_(seq_len=seq), TrainingGoal(gpus=gpus))
            if p.best is None or not p.best.fits:
                continue
            assert p.best.memory_bytes_per_gpu <= p.best.usable_bytes_per_gpu
            assert p.best.usable_bytes_per_gpu == pytest.approx(80 * GiB * 0.95)
            for a in p.alternatives:
                assert not a.fits or a.memory_bytes_per_gpu <= a.usable_bytes_per_gpu
    # one layout by hand: raise the headroom until the layout sits above it; it is then refused, by the traced
    # memory and by the layout model alike
    lay = Layout(tp=8, pp=2, dp=4, micro_batch=1, zero=1, recompute="selective")
    r0 = evaluate_layout(cfg, lay)
    frac = r0.memory_bytes_per_gpu / r0.capacity_bytes_per_gpu  # about 0.51
    over = cfg.with_(assumptions=cfg.assumptions.with_(train_mem_headroom_frac=1 - frac + 0.01))
    r1 = evaluate_layout(over, lay)
    assert r1.memory_bytes_per_gpu == r0.memory_bytes_per_gpu and not r1.fits
    traced = training_memory_for(over, Trace(), dp=4, tp=8, pp=2, zero=1, micro_batch=1, recompute="selective")
    assert not traced.fits and traced.total_bytes_per_gpu < traced.capacity_bytes_per_gpu


# --- training: context parallelism ------------------------------------------------------------------------------


def test_training_context_parallelism_splits_activations_and_shards_zero_over_dp_cp():
    # CP 4 on Llama-3.1-70B at s = 32,768: every activation and the logits divide by 4; the distributed optimizer
    # shards over DP x CP, so ZeRO-1 on TP 8, DP 2, CP 4 divides the 12 B/param of optimizer state by 8, like DP 8.
    cfg = T70.with_(seq_len=32768, nodes=8)
    one = training_memory_for(cfg, Trace(), dp=2, tp=8, pp=1, zero=1, micro_batch=1, recompute="none", cp=1)
    four = training_memory_for(cfg, Trace(), dp=2, tp=8, pp=1, zero=1, micro_batch=1, recompute="none", cp=4)
    dp8 = training_memory_for(cfg, Trace(), dp=8, tp=8, pp=1, zero=1, micro_batch=1, recompute="none", cp=1)
    assert four.activation_bytes_per_gpu == pytest.approx(one.activation_bytes_per_gpu / 4, rel=1e-12)
    assert four.optimizer_bytes_per_gpu == pytest.approx(dp8.optimizer_bytes_per_gpu, rel=1e-12)
    assert four.weight_bytes_per_gpu == one.weight_bytes_per_gpu  # the CP ranks hold the same weights
    for s in four.steps:
        assert s.evaluate() == pytest.approx(s.value, rel=1e-9), s.key


def test_the_cp_ring_hides_behind_long_blocks_and_shows_behind_short_ones():
    # One KV block of one layer on one TP rank: b (s / cp) x 2 x 8 heads x 128 x 2 B / 8 = 512 B per token; its
    # forward attention 4 d_qk / tp = 4 x 8,192 / 8 FLOP per pair over (s^2 / 2) / cp^2 pairs at 989 x 0.55 TFLOP/s.
    # Across nodes (NDR: 50 GB/s x 0.8) t_att / t_kv = 4 s beta / (cp R) = s / (cp x 3,400): the forward send hides
    # once each rank holds more than ~3.4k tokens, the backward (2.5 t_att against 2 t_kv) above ~2.7k.
    cfg = T70.with_(nodes=64, gpus_per_node=8)
    long = evaluate_layout(cfg.with_(seq_len=131072), Layout(tp=8, pp=1, dp=4, cp=16, micro_batch=1, zero=1))
    assert long.cp_comm_s == 0.0  # 8,192 tokens a rank: hidden
    short = evaluate_layout(cfg.with_(seq_len=8192), Layout(tp=8, pp=1, dp=4, cp=16, micro_batch=1, zero=1))
    assert short.cp_comm_s > 0  # 512 tokens a rank: the ring shows
    assert short.step_s > short.compute_s


def test_search_picks_context_parallelism_for_a_long_sequence():
    # 70B at s = 131,072 (a long-context stage: Llama 3 trained it with CP 16): without CP one sequence's
    # activations alone are 80 x s h 34 / 8 = 365 GB per GPU at TP 8, so the search must split the sequence.
    cfg = RabitConfig(
        model="llama-3.1-70b", phase="train", seq_len=131072, global_batch_tokens=2**24, train_tokens=1e10, nodes=64
    )
    p = plan(cfg, TrainingGoal(gpus=512))
    assert p.best is not None and p.best.fits and p.best.layout.cp >= 2
    pinned = plan(cfg, TrainingGoal(gpus=512, cp=1))
    assert pinned.best is None or not pinned.best.fits or pinned.best.runtime_s >= p.best.runtime_s
    # short sequences do not search CP (each rank would hold less than 4,096 tokens)
    assert plan(cfg.with_(seq_len=4096), TrainingGoal(gpus=64)).best.layout.cp == 1


def test_the_deadline_search_may_pick_context_parallelism():
    # the same 128k stage with a deadline instead of a GPU count: no layout without CP fits (365 GB of one
    # sequence's activations per GPU at TP 8, above), so the smallest GPU count that meets 7 days splits the sequence
    cfg = RabitConfig(
        model="llama-3.1-70b", phase="train", seq_len=131072, global_batch_tokens=2**24, train_tokens=1e11, nodes=64
    )
    p = plan(cfg, TrainingGoal(deadline_s=7 * 86400))
    assert p.best is not None and p.best.fits and p.best.layout.cp >= 2
    assert p.best.runtime_s <= 7 * 86400


def test_cli_train_takes_cp_and_a_five_number_layout(capsys):
    args = "train --model llama-3.1-70b --tokens 1e10 --seq 131072 --global-batch-tokens 16777216 --json".split()
    assert main([*args, "--layout", "8,1,4,1,16"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"] == 512 and d["cp"] == 16 and d["layout"]["cp"] == 16
    assert main([*args, "--gpus", "512", "--cp", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["cp"] == 8
    with pytest.raises(SystemExit) as exc:
        main([*args, "--layout", "8,1,4,1,16", "--cp", "4"])
    assert exc.value.code == 2
    assert "--cp" in capsys.readouterr().err


# --- serving: data-parallel attention ---------------------------------------------------------------------------

H200 = dict(gpu="h200-sxm", gpus_per_node=8, nodes=1, tp=8)


def test_dp_attention_lets_deepseek_hold_more_tokens_than_a_dense_70b():
    # 8 x H200 (141 GiB = 151,397,597,184 B each), usable x 0.9 = 136,257,837,465.6 B, overhead 1.5 GiB =
    # 1,610,612,736 B, workspace 2 B S h 2 / tp (B 32, S 8,192).
    # Llama-3.1-70B BF16, TP 8: W = 17,638,426,624 B, A = 2 x 32 x 8,192 x 8,192 x 2 / 8 = 1,073,741,824 B, left
    #   115,935,056,281.6 B for KV; 2 x 80 x 8 x 128 x 2 = 327,680 B per token split 8 ways = 40,960 B per GPU:
    #   2,830,445.7 tokens per replica.
    # DeepSeek-V3 FP8, plain TP 8: the 70,272 B MLA latent is held whole by every rank; W = 84,110,080,512 B,
    #   A = 2 x 32 x 8,192 x 7,168 x 2 / 8 = 939,524,096 B -> 49,597,620,121.6 B left / 70,272 = 705,795 tokens
    #   (today's number, unchanged).
    # With data-parallel attention each rank holds its own sequences' latent: 1/8 of the replica's KV per GPU,
    #   8,784 B per token on average; every rank holds whole attention blocks, 61 x 187,107,328 parameters x 1 B
    #   x 7/8 = 9,986,853,632 B more weights (W = 94,096,934,144 B) -> 39,610,766,489.6 B left / 8,784 =
    #   4,509,422 tokens: 1.59x the dense 70B's 2.83M.
    from core.physics import serving_memory

    llama = serving_memory(RabitConfig(model="llama-3.1-70b", **H200))
    ds_tp = serving_memory(RabitConfig(model="deepseek-v3", weights="fp8", **H200))
    ds_dp = serving_memory(RabitConfig(model="deepseek-v3", weights="fp8", dp_attention=True, ep=8, **H200))
    usable = 141 * GiB * 0.9
    assert llama.kv_tokens_per_replica == pytest.approx((usable - 1.5 * GiB - 17_638_426_624 - 2**30) / 40_960)
    assert ds_tp.kv_tokens_per_replica == pytest.approx((usable - 1.5 * GiB - 84_110_080_512 - 939_524_096) / 70_272)
    assert ds_dp.weights_bytes_per_gpu == 84_110_080_512 + 61 * 187_107_328 * 7 / 8
    assert ds_dp.kv_tokens_per_replica == pytest.approx(
        (usable - 1.5 * GiB - 94_096_934_144 - 939_524_096) / (70_272 / 8)
    )
    assert ds_dp.kv_tokens_per_replica > llama.kv_tokens_per_replica > ds_tp.kv_tokens_per_replica
    assert ds_dp.kv_tokens_per_replica == pytest.approx(4_509_422, rel=1e-6)
    assert ds_tp.kv_tokens_per_replica == pytest.approx(705_795, rel=1e-6)
    # sequences are whole on one rank: 8 ranks of floor(pool / (8 x per-sequence KV)) each
    assert ds_dp.max_sequences % 8 == 0 and ds_dp.max_sequences > 4 * ds_tp.max_sequences


def test_cli_memory_dp_attention(capsys):
    args = "memory --model deepseek-v3 --gpu h200-sxm --gpus 8 --tp 8 --weights fp8 --json".split()
    assert main(args) == 0
    tp = json.loads(capsys.readouterr().out)
    assert main([*args, "--dp-attention", "--ep", "8"]) == 0
    dp = json.loads(capsys.readouterr().out)
    assert tp["dp_attention"] is False and dp["dp_attention"] is True and dp["cp"] == 1 and dp["dcp"] == 1
    assert dp["kv_tokens_per_replica"] > 6 * tp["kv_tokens_per_replica"]
    with pytest.raises(SystemExit) as exc:  # a dense GQA model: DP attention is refused, naming the flag
        main("memory --model llama-3.1-70b --gpus 8 --tp 8 --dp-attention --json".split())
    assert exc.value.code == 2 and "--dp-attention" in capsys.readouterr().err


def test_dp_attention_decode_reads_one_ranks_share_and_drops_the_attention_all_reduce():
    from core.config import resolve
    from core.physics import StepModel

    base = RabitConfig(model="deepseek-v3", weights="fp8", ep=8, **H200)
    tp, dp = StepModel.from_deployment(resolve(base)), StepModel.from_deployment(resolve(base.with_(dp_attention=True)))
    assert tp.kv_bytes_per_token == 70_272 and dp.kv_bytes_per_token == 70_272 / 8
    # 61 layers: TP has 2 per layer less the 58 MoE layers' (EP all-to-alls instead) = 64 all-reduces; DP attention
    # keeps one gather/scatter per dense layer (3) and none on the MoE layers (EP)
    assert tp.ar_per_iter == 64 and dp.ar_per_iter == 3
    # at a long context the latent reads dominate decode: DP attention is faster per step
    B, ctx = 64, 32_000.0
    assert dp.iteration_s(B, B * ctx, B * ctx) < tp.iteration_s(B, B * ctx, B * ctx)


# --- serving: decode context parallelism ------------------------------------------------------------------------


def test_dcp_recovers_the_replicated_kv_and_pays_a_combine():
    from core.config import resolve
    from core.physics import StepModel, kv_shard, serving_memory

    m = catalog.model("deepseek-v3")
    g = catalog.model("llama-3.1-70b")
    assert kv_shard(m, 8) == 1 and kv_shard(m, 8, dcp=8) == 8 and kv_shard(m, 8, dcp=2) == 2
    assert kv_shard(g, 8, dcp=2) == 8  # 8 KV heads on 8 ranks: nothing replicated, nothing to recover
    assert kv_shard(g, 16, dcp=2) == 16  # TP 16 replicates each KV head twice; DCP 2 splits the tokens instead
    cfg = RabitConfig(model="deepseek-v3", weights="fp8", **H200)
    one, eight = serving_memory(cfg), serving_memory(cfg.with_(dcp=8))
    assert eight.kv_tokens_per_replica == pytest.approx(8 * one.kv_tokens_per_replica)
    sm1, sm8 = StepModel.from_deployment(resolve(cfg)), StepModel.from_deployment(resolve(cfg.with_(dcp=8)))
    # same compute, an eighth of the KV reads, a combine per attention layer (61 of them)
    B, ctx = 32, 64_000.0
    c1, m1, x1, _ = sm1.stage_parts(float(B), B * ctx, B * ctx)
    c8, m8, x8, _ = sm8.stage_parts(float(B), B * ctx, B * ctx)
    assert c8 == pytest.approx(c1) and x8 > x1
    # read (gathered from pages at kv_read_bw_eff 1.05 of the weights' bandwidth) + written
    assert m1 - m8 == pytest.approx((B * ctx / 1.05 + B) * 70_272 * 7 / 8 / sm1.mem_bw_bytes_per_s)


# --- serving: prefill context parallelism -----------------------------------------------------------------------


def _cp_cfg(cp: int, prompt: int) -> RabitConfig:
    # Llama-3.1-405B FP8, TP 8 inside each H100 node, CP across nodes over NDR (50 GB/s per GPU), one prompt;
    # a budget above the prompt: one pass
    cfg = RabitConfig(
        model="llama-3.1-405b",
        weights="fp8",
        tp=8,
        gpus_per_node=8,
        nodes=cp,
        cp=cp,
        batch=1,
        input_tokens=prompt,
        output_tokens=2,
    )
    return cfg.with_(workload=cfg.workload.with_(token_budget=max(8192, prompt)))


def test_prefill_time_falls_with_cp_until_the_ring_stops_hiding():
    # A ring step sends one KV block across nodes: t_kv = a + (s / cp) x 512 B / 40 GB/s (BF16 K and V of 8 KV
    # heads of 128 over 8 TP ranks: 2 x 8 x 128 x 2 / 8 = 512 B per token per layer), and the rank attends the
    # block it holds meanwhile: t_blk = 4 x 16,384 / 8 FLOP x (s / cp)^2 / 2 / (989 x 0.65 TFLOP/s).
    # t_blk / t_kv grows as s / cp: the send hides while each rank holds more than ~2.7k tokens. At s = 32,768:
    # CP 2, 4, 8 (16k, 8k, 4k tokens a rank) hide it, CP 16 and 32 (2k, 1k) do not.
    from core.serving import speed_summary

    s = 32_768
    runs = {cp: speed_summary(_cp_cfg(cp, s)).prefill for cp in (1, 2, 4, 8, 16, 32)}
    from core.config import resolve
    from core.physics import StepModel

    def ring(cp: int) -> float:  # the exposed ring: the prefill's communication beyond its TP all-reduces
        sm = StepModel.from_deployment(resolve(_cp_cfg(cp, s)))
        T, A = float(s), s * (s + 1) / 2
        return sm.stage_parts(T, A, 0.0)[2] - sm.stage_body(T / cp, A / cp, 0.0)[2]

    for cp in (2, 4, 8):  # hidden side: the ring costs nothing and TTFT halves with each doubling (within 6 %)
        assert ring(cp) == 0.0
        assert runs[cp].ttft_s < runs[cp // 2].ttft_s
        assert runs[cp].ttft_s / runs[cp // 2].ttft_s == pytest.approx(0.5, abs=0.03)
    for cp in (16, 32):  # exposed side: the ring shows and doubling the ranks buys clearly less than half
        assert ring(cp) > 0.0
        assert runs[cp].ttft_s / runs[cp // 2].ttft_s > 0.5 + 0.03
    # and the invariant the other way round: with CP the prefill never gets slower than one rank's linear share
    assert all(runs[cp].ttft_s <= runs[1].ttft_s for cp in runs)


def test_a_million_tokens_with_and_without_context_parallelism(capsys):
    # Qwen2.5-7B-Instruct-1M (28 layers, 4 KV heads of 128: 57,344 B of KV per token), a 1,000,000-token prompt on
    # L40S (48 GiB = 51.54 GB, usable 46.39 GB). One GPU: weights 15.23 GB + KV 1,000,001 tokens x 57,344 B
    # (whole blocks of 16) = 57.34 GB + overhead 1.61 GB + a chunk's workspace -> 74.3 GB: does not fit.
    # CP 2: the sequence's KV splits over two GPUs, 28.67 GB each -> 45.6 GB: fits.
    # TTFT: 123 chunks of 8,192 tokens, chunk j attending the ~8,192 j tokens before it: attention (quadratic)
    # dominates the matmuls (linear) by an order of magnitude; CP 2 halves it (the ring hides at 4k a rank).
    base = "--model qwen2.5-7b-instruct-1m --gpu l40s --tp 1 --batch 1 --input 1000000 --output 1 --json".split()
    assert main(["memory", "--gpus", "1", *base]) == 0
    m1 = json.loads(capsys.readouterr().out)
    assert main(["memory", "--gpus", "2", "--cp", "2", *base]) == 0
    m2 = json.loads(capsys.readouterr().out)
    assert not m1["fits"] and m2["fits"] and m2["cp"] == 2
    assert m1["kv_bytes_per_token"] == 57_344
    assert m1["kv_bytes_per_seq_per_gpu"] == pytest.approx(57_344 * 1_000_016)  # 62,501 blocks of 16
    assert m2["kv_bytes_per_seq_per_gpu"] == pytest.approx(m1["kv_bytes_per_seq_per_gpu"] / 2)
    assert "context parallelism" in m1["reason"]
    assert main(["speed", "--gpus", "1", *base]) == 0
    s1 = json.loads(capsys.readouterr().out)
    assert main(["speed", "--gpus", "2", "--cp", "2", *base]) == 0
    s2 = json.loads(capsys.readouterr().out)
    assert s1["prefill_chunk_tokens"] == 8192 and len(s1["prefill_chunks"]) == 123
    chunks = s1["prefill_chunks"]
    assert sum(c["time_s"] for c in chunks) == pytest.approx(s1["prefill_s"], rel=1e-9)  # TTFT = the chunks' sum
    assert chunks[-1]["start_tokens"] == 122 * 8192 and chunks[-1]["tokens"] == 1_000_000 - 122 * 8192
    att, lin = sum(c["attention_s"] for c in chunks), sum(c["linear_s"] for c in chunks)
    assert att > 10 * lin  # the quadratic term dominates at a million tokens
    assert s1["prefill_s"] > 600  # minutes, on one L40S
    assert s2["prefill_s"] == pytest.approx(s1["prefill_s"] / 2, rel=0.03)
    # each later chunk attends more: the chunk times grow
    assert all(b["attention_s"] > a["attention_s"] for a, b in zip(chunks[:-2], chunks[1:-1]))


def test_every_attention_parallel_step_reevaluates():
    from core.serving import speed_summary

    cfgs = [
        RabitConfig(model="deepseek-v3", weights="fp8", dp_attention=True, ep=8, **H200),
        RabitConfig(model="deepseek-v3", weights="fp8", dcp=8, batch=8, input_tokens=32_000, **H200),
        _cp_cfg(4, 65_536),
        RabitConfig(model="qwen2.5-7b-instruct-1m", tp=1, gpus_per_node=2, cp=2, batch=1, input_tokens=200_000),
        RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1, batch=4, input_tokens=100_000, kv_offload_gib=256),
    ]
    for cfg in cfgs:
        s = speed_summary(cfg)
        assert len({st.key for st in s.steps}) == len(s.steps), "duplicate step keys"
        for st in s.steps:
            assert st.evaluate() == pytest.approx(st.value, rel=1e-9, abs=1e-300), (cfg.model, st.key)
        assert [x for x in s.steps if x.key == "prefill_s"][0].value == pytest.approx(s.prefill.ttft_s, rel=1e-12)


def test_the_speed_pages_attention_layouts_compare_one_replica():
    # DeepSeek-V3 FP8 on 8 x H200, TP 8, the default batch: plain TP holds 705,795 tokens (the
    # MLA latent on every rank, test above); data-parallel attention with EP 8 and DCP 8 each keep 1/8 of the
    # latent per rank, so they hold more than 6x (DP attention pays 7/8 of the attention weights again per rank);
    # CP 2 and 4 take 16 and 32 GPUs and split each prompt's prefill over the TP groups.
    from core.serving import attention_options

    cfg = RabitConfig(model="deepseek-v3", weights="fp8", **H200)
    opts = {o.label: o for o in attention_options(cfg)}
    assert list(opts) == [
        "TP 8",
        "data-parallel attention, EP 8",
        "decode context parallelism 8",
        "context parallelism 2",
        "context parallelism 4",
    ]
    tp, dpa, dcp = opts["TP 8"], opts["data-parallel attention, EP 8"], opts["decode context parallelism 8"]
    assert tp.current and not dpa.current and tp.kv_tokens_per_replica == pytest.approx(705_795, rel=1e-6)
    assert dpa.kv_tokens_per_replica > 6 * tp.kv_tokens_per_replica
    assert dcp.kv_tokens_per_replica == pytest.approx(8 * tp.kv_tokens_per_replica)
    assert dcp.decode_step_s != tp.decode_step_s  # an eighth of the latent read, a combine per layer
    cp2, cp4 = opts["context parallelism 2"], opts["context parallelism 4"]
    assert (cp2.gpus_per_replica, cp4.gpus_per_replica) == (16, 32)
    assert cp4.prefill_s < cp2.prefill_s < tp.prefill_s
    # a dense GQA model has no data-parallel attention or DCP row at TP 8 (8 KV heads on 8 ranks: none replicated)
    dense = [o.label for o in attention_options(RabitConfig(model="llama-3.1-70b", **H200))]
    assert dense == ["TP 8", "context parallelism 2", "context parallelism 4"]


# --- the optimizer and the launch configs -----------------------------------------------------------------------


def test_the_optimizer_screens_attention_parallel_layouts():
    from core.decision import Constraints, ServingGoal, screen
    from core.serving import sim_spec

    cfg = RabitConfig(model="deepseek-v3", input_tokens=40_000, output_tokens=500)
    goal = ServingGoal.from_config(cfg).with_(p95_ttft_s=30.0, p95_itl_s=0.1)
    cands = screen(goal, Constraints(gpus_allowed=("h200-sxm",), weights_allowed=("fp8",), kv_allowed=("bf16",)), ())
    kinds = {(c.dp_attention, c.cp > 1, c.dcp > 1) for c in cands}
    assert {(False, False, False), (True, False, False), (False, True, False), (False, False, True)} <= kinds
    # a CP candidate's replica is its TP groups times CP; every candidate resolves and labels itself
    cp4 = next(c for c in cands if c.cp == 4 and c.tp == 8)
    assert cp4.gpus_per_replica == 32 and "CP 4" in cp4.label
    assert any("DP attention" in c.label for c in cands) and any("DCP 8" in c.label for c in cands)
    assert sim_spec(cfg).mean_lengths()[0] == 40_000


def test_launch_configs_carry_each_engines_attention_flags():
    import shlex

    from core.operations import DOCUMENTED_FLAGS, LaunchSpec, command

    def parsed(engine: str, spec: LaunchSpec) -> tuple[list[str], str]:
        text = command(engine, spec)  # comment lines, then the command
        notes = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        return shlex.split("\n".join(line for line in text.splitlines() if not line.startswith("#"))), notes

    s = LaunchSpec(
        model_repo="deepseek-ai/DeepSeek-V3",
        gpu="h200-sxm",
        vendor="nvidia",
        gpus_per_replica=8,
        tp=8,
        pp=1,
        replicas=1,
        weights="fp8",
        kv_dtype="bf16",
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        max_model_len=65_536,
        gpu_memory_utilization=0.9,
        gpus_per_node=8,
        ep=8,
        dp_attention=True,
        kv_offload_gib=512.0,
    )
    v, _ = parsed("vllm", s)
    assert v[v.index("--tensor-parallel-size") + 1] == "1" and v[v.index("--data-parallel-size") + 1] == "8"
    assert "--enable-expert-parallel" in v and v[v.index("--kv-offloading-size") + 1] == "512"
    g, _ = parsed("sglang", s)
    assert "--enable-dp-attention" in g and g[g.index("--dp-size") + 1] == "8"
    # vLLM's limits are per DP rank (64 sequences, 8,192 tokens each); SGLang divides its by --dp-size, so it is
    # given the replica's: 8 x 64 = 512 and 8 x 8,192 = 65,536
    assert v[v.index("--max-num-seqs") + 1] == "64" and v[v.index("--max-num-batched-tokens") + 1] == "8192"
    assert g[g.index("--max-running-requests") + 1] == "512" and g[g.index("--chunked-prefill-size") + 1] == "65536"
    assert g[g.index("--hicache-size") + 1] == "68.72"  # 512 GiB over 8 ranks, in GB
    _, notes = parsed("trtllm", s)
    assert "enable_attention_dp: true" in notes
    d = s.model_copy(update={"dp_attention": False, "dcp": 8, "kv_offload_gib": 0.0})
    vd = parsed("vllm", d)[0]
    assert vd[vd.index("--decode-context-parallel-size") + 1] == "8"
    gd = parsed("sglang", d)[0]
    assert "--dcp-size" in gd and gd[gd.index("--max-running-requests") + 1] == "64"  # one scheduler: as given
    c = d.model_copy(update={"dcp": 1, "cp": 4, "gpus_per_replica": 32})
    assert "--prefill-context-parallel-size" in parsed("vllm", c)[0] and "--attn-cp-size" in parsed("sglang", c)[0]
    for spec in (s, d, c):  # every emitted flag is one the engine documents
        for engine in ("vllm", "sglang"):
            argv, _ = parsed(engine, spec)
            assert {a for a in argv if a.startswith("--")} <= DOCUMENTED_FLAGS[engine][1]


# --- the host KV tier, the scheduler of data-parallel attention, the long-context view ----------------------------


def test_a_host_kv_tier_adds_capacity_and_charges_the_host_link():
    # Llama-3.1-8B on one H100 at 100,000-token contexts: 131,072 B of KV per token. A 256 GiB host tier holds
    # 274,877,906,944 / 131,072 = 2,097,152 tokens more; a decode step that reads cached tokens beyond HBM reads
    # them over the host link at offload_gb_per_s (25 GB/s): 131,072 B / 25e9 B/s = 5.24 us per token, far slower
    # than HBM (3.35 TB/s x 0.78 x 1.05: 48 ns).
    from core.config import resolve
    from core.physics import StepModel, serving_memory

    cfg = RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1, batch=4, input_tokens=100_000, output_tokens=1000)
    hbm, tier = serving_memory(cfg), serving_memory(cfg.with_(kv_offload_gib=256))
    assert tier.kv_host_bytes_per_gpu == 256 * GiB
    assert tier.kv_tokens_per_replica - hbm.kv_tokens_per_replica == pytest.approx(256 * GiB / 131_072)
    assert tier.max_sequences > hbm.max_sequences
    sm = StepModel.from_deployment(resolve(cfg.with_(kv_offload_gib=256)))
    n_h = sm.hbm_kv_tokens
    inside = sm.stage_parts(1.0, n_h * 0.5, n_h * 0.5)[1]
    beyond = sm.stage_parts(1.0, n_h + 1e6, n_h + 1e6)[1]
    assert beyond == pytest.approx((1e6 + 1) * 131_072 / 25e9, rel=1e-6)  # the host stream, beside HBM's
    assert beyond > 10 * inside


def test_data_parallel_attention_runs_one_scheduler_per_rank():
    from core.serving import sim_spec

    cfg = RabitConfig(model="deepseek-v3", weights="fp8", ep=8, **H200)
    plain, dpa = sim_spec(cfg), sim_spec(cfg.with_(dp_attention=True))
    assert dpa.max_batch == 8 * plain.max_batch and dpa.token_budget == 8 * plain.token_budget


def test_the_long_context_view_answers_the_topic():
    from core.serving import long_context_view

    v = long_context_view(RabitConfig(model="qwen2.5-7b-instruct-1m", gpu="l40s", tp=1, gpus_per_node=1))
    assert v.points[-1].context_tokens == 1_010_000 and not v.points[-1].fits
    assert v.points[0].dominant == "linear GEMMs" and v.points[-1].dominant == "quadratic attention"
    assert v.attention_overtakes_at == 131_072
    kv = [p.kv_bytes_per_seq for p in v.points]
    assert all(b > a for a, b in zip(kv, kv[1:])) and kv[-1] == pytest.approx(57_344 * 1_010_000, rel=1e-4)
    alone, *rest = v.fits
    cp2 = next(f for f in rest if f.option == "context parallelism 2")
    assert alone.max_context_tokens < 1_010_000 <= cp2.max_context_tokens  # CP buys the window
    tier = next(f for f in rest if f.option.startswith("host KV tier"))
    assert tier.max_context_tokens == 1_010_000 and tier.decode_step_s > 10 * alone.decode_step_s  # its bandwidth
    (gqa,) = v.savings
    assert gqa.saved_frac == pytest.approx(1 - 4 / 28)
    # the model's own choices: latent attention, windows, linear layers
    ds = long_context_view(RabitConfig(model="deepseek-v3", gpu="h200-sxm", weights="fp8", **{"tp": 8}))
    assert ds.savings[0].choice.startswith("latent attention") and ds.savings[0].saved_frac == pytest.approx(
        1 - 576 / (128 * (128 + 64 + 128)), rel=1e-9
    )
    nxt = long_context_view(RabitConfig(model="qwen3-next-80b-a3b", gpu="h200-sxm", tp=8))
    assert any("linear-attention" in s.choice for s in nxt.savings)
    g3 = long_context_view(RabitConfig(model="gemma-3-12b-it", tp=1, gpus_per_node=1))
    assert any("window of 1,024" in s.choice for s in g3.savings) and g3.attention_overtakes_at is None
