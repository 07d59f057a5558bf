"""Memory formulas against hand-derived numbers (the textbook example worked example) and invariants."""

import math

import pytest

from core import catalog
from core.base import GB, GiB
from core.config import RabitConfig
from core.physics import activation_bytes_per_layer, kv_bytes_per_token, lora_params, serving_memory, training_memory

EXAMPLE = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=8, batch=32, input_tokens=4096, output_tokens=4096)


def test_worked_example():
    r = serving_memory(EXAMPLE)
    # Weights: 70.55e9 params x 2 B / 8 = 17.64 GB (the textbook chain: "17.6 GB").
    assert r.weights_bytes_per_gpu / GB == pytest.approx(17.6, abs=0.05)
    # KV: 80 layers x 8,192 tokens x 4,096 B / 8 x 32 = 10.74 GB (the textbook chain: "11 GB").
    assert r.kv_bytes_per_gpu == 80 * 8192 * 4096 / 8 * 32
    # Activations 2 x 32 x 8192 x 8192 x 2 / 8 = 1.07 GB; overhead 1.5 GiB = 1.61 GB.
    assert r.activation_bytes_per_gpu / GB == pytest.approx(1.07, abs=0.005)
    assert r.overhead_bytes_per_gpu == 1.5 * GiB
    # Total: 17.64 + 10.74 + 1.07 + 1.61 = 31.06 GB. The textbook chain's "31.3 GB" adds its rounded terms
    # (17.6 + 11 + 1.07 + 1.61 = 31.28); we keep the unrounded sum, 0.8% below.
    assert r.total_bytes_per_gpu / GB == pytest.approx(31.3, rel=0.015)
    # Capacity: the H100's "80 GB" of HBM3 is 80 GiB = 85.9 GB.
    assert r.capacity_bytes_per_gpu / GB == pytest.approx(85.9, abs=0.05)
    assert r.fits


def test_kv_per_token_by_layout():
    m = catalog.models()
    # GQA: 2 x 32 x 8 x 128 x 2 = 131,072 B (Llama-3.1-8B); MHA: 2 x 32 x 32 x 128 x 2 = 524,288 B (Llama-2-7B).
    assert kv_bytes_per_token(m["llama-3.1-8b"].arch, 2) == 131_072
    assert kv_bytes_per_token(m["llama-2-7b"].arch, 2) == 524_288
    # MLA: (512 + 64) x 61 x 2 = 70,272 B (DeepSeek-V3); FP8 KV halves it.
    assert kv_bytes_per_token(m["deepseek-v3"].arch, 2) == 70_272
    assert kv_bytes_per_token(m["deepseek-v3"].arch, 1) == 35_136


def test_max_sequences_by_hand():
    # Llama-3.1-8B on one H100, BF16, 1 sequence of 2k+2k, batch 1:
    # usable 80 GiB x 0.9 = 77.31 GB; W = 16.06 GB; A = 2 x 1 x 4096 x 4096 x 2 = 67.1 MB; O = 1.61 GB.
    # budget = 77.31 - 1.61 - 16.06 - 0.067 = 59.57 GB; per seq = 4096 x 131,072 = 536.9 MB -> 110 sequences.
    cfg = RabitConfig(
        model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, batch=1, input_tokens=2048, output_tokens=2048
    )
    r = serving_memory(cfg)
    budget = 80 * GiB * 0.9 - 1.5 * GiB - r.weights_bytes_per_gpu - 2 * 4096 * 4096 * 2
    assert r.max_sequences == math.floor(budget / (4096 * 131_072)) == 110


def test_paged_blocks_round_up_and_contiguous_reserves_max_context():
    base = RabitConfig(
        model="llama-3.1-8b",
        gpu="h100-sxm",
        gpus_per_node=1,
        tp=1,
        batch=1,
        input_tokens=1000,
        output_tokens=1,
        block_size=16,
    )
    r = serving_memory(base)
    # 1,001 tokens occupy ceil(1001/16) = 63 blocks = 1,008 tokens.
    assert r.kv_bytes_per_seq_per_gpu == 1008 * 131_072
    # Contiguous allocation reserves Llama 3.1's 131,072-token maximum context per sequence.
    assert r.contiguous_reserved_tokens == 131_072
    assert r.max_sequences_contiguous < r.max_sequences


def test_tp_beyond_kv_heads_replicates():
    # Llama-3.1-8B has 8 KV heads: TP 8 and TP 16 hold the same KV per token per GPU (one head each).
    m8 = serving_memory(RabitConfig(model="llama-3.1-70b", tp=8, batch=1))
    m16 = serving_memory(RabitConfig(model="llama-3.1-70b", gpus_per_node=16, tp=16, batch=1, gpu="gb200"))
    assert m8.kv_bytes_per_token_per_gpu == m16.kv_bytes_per_token_per_gpu == 327_680 / 8


def test_prefix_sharing_and_fp8_raise_capacity():
    base = EXAMPLE.with_(batch=1)
    shared = serving_memory(base.with_(prefix_cache_frac=0.5))
    assert shared.max_sequences > serving_memory(base).max_sequences
    assert serving_memory(base.with_(kv_dtype="fp8")).max_sequences >= 2 * serving_memory(base).max_sequences - 1


def test_weight_formats_order():
    sizes = [
        serving_memory(EXAMPLE.with_(weights=w, batch=1)).weights_bytes_per_gpu
        for w in ("bf16", "fp8", "nvfp4", "int4")
    ]
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3]
    # INT4 at group 128 is about 0.52 B/param for block linears; embeddings and head stay BF16.
    assert sizes[3] / sizes[0] == pytest.approx(0.2578 + 0.03, abs=0.02)


def test_too_big_does_not_fit_with_reason():
    r = serving_memory(RabitConfig(model="llama-3.1-405b", gpu="h100-sxm", tp=1, gpus_per_node=1, batch=1))
    assert not r.fits and "weights" in r.reason


def test_training_16_bytes_per_param_and_zero_stages():
    cfg = RabitConfig(
        model="llama-3.1-70b", phase="train", tp=8, nodes=8, zero=0, micro_batch=1, seq_len=4096, recompute="full"
    )
    P = catalog.model("llama-3.1-70b").total_params()
    r0 = training_memory(cfg)
    assert r0.weight_bytes_per_gpu + r0.gradient_bytes_per_gpu + r0.optimizer_bytes_per_gpu == pytest.approx(16 * P / 8)
    totals = [training_memory(cfg.with_(zero=z)).total_bytes_per_gpu for z in (0, 1, 2, 3)]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    r3 = training_memory(cfg.with_(zero=3))
    # DP = 64 / 8 = 8: ZeRO-3 shards weights, gradients and optimizer state 8 ways.
    assert r3.weight_bytes_per_gpu == pytest.approx(2 * P / 8 / 8)


def test_korthikanti_activations():
    m = catalog.model("llama-3.1-70b")
    s, h, a = 8192, 8192, 64
    # the RA-BIT spec: "about 34 x sequence x hidden bytes per layer, 2.3 GB" (selective, t = 1).
    assert activation_bytes_per_layer(m, s, 1, 1, "selective", True) == 34 * s * h
    assert activation_bytes_per_layer(m, s, 1, 1, "selective", True) / GB == pytest.approx(2.28, abs=0.01)
    none = activation_bytes_per_layer(m, s, 1, 1, "none", True, "eager")
    assert none == s * h * (34 + 5 * a * s / h)
    # a fused kernel keeps one FP32 log-sum-exp per head and query instead of the scores
    assert activation_bytes_per_layer(m, s, 1, 1, "none", True) == s * h * 34 + 4 * a * s
    assert activation_bytes_per_layer(m, s, 1, 1, "full", True) == 2 * s * h
    # Tensor parallelism without SP leaves 10 sbh unsharded.
    assert activation_bytes_per_layer(m, s, 1, 8, "selective", False) == s * h * (10 + 24 / 8)


def test_lora_keeps_frozen_base_and_shrinks_state():
    cfg = RabitConfig(model="llama-3.1-70b", phase="train", tp=8, zero=0, recompute="full", lora_rank=16)
    r = training_memory(cfg)
    full = training_memory(cfg.with_(lora_rank=0))
    m = catalog.model("llama-3.1-70b")
    # Rank 16 on q,k,v,o,gate,up,down over 80 layers:
    # 16 x 80 x [(8192+8192) + 2(8192+1024) + (8192+8192) + 3(8192+28672)] = 207.1M adapters.
    assert lora_params(m, 16) == 16 * 80 * ((8192 + 8192) + 2 * (8192 + 1024) + (8192 + 8192) + 3 * (8192 + 28672))
    assert r.optimizer_bytes_per_gpu < full.optimizer_bytes_per_gpu / 100
    assert r.total_bytes_per_gpu < full.total_bytes_per_gpu
    q = training_memory(cfg.with_(qlora=True))
    assert q.weight_bytes_per_gpu < r.weight_bytes_per_gpu / 3


def test_every_step_reevaluates():
    """The displayed math cannot drift: every recorded expression reproduces its value."""
    for res in (
        serving_memory(EXAMPLE),
        serving_memory(EXAMPLE.with_(model="deepseek-v3", weights="fp8", tp=8, ep=8)),
        training_memory(EXAMPLE.with_(phase="train", lora_rank=8)),
        training_memory(EXAMPLE.with_(phase="train")),
    ):
        for s in res.steps:
            assert s.evaluate() == pytest.approx(s.value, rel=1e-9), s.key


def test_contiguous_allocation_reserves_max_context_for_the_batch():
    # Llama-3.1-70B, TP 8, batch 4: contiguous reserves 131,072 tokens x 40,960 B = 5.37 GB per sequence per GPU
    paged = serving_memory(EXAMPLE.with_(batch=4))
    contig = serving_memory(EXAMPLE.with_(batch=4, kv_alloc="contiguous"))
    assert contig.kv_bytes_per_gpu == 4 * 131_072 * 40_960
    assert paged.kv_bytes_per_gpu == 4 * 8192 * 40_960
    assert contig.fits and paged.fits
    # the example's batch 32 fits paged (169 sequences) but not contiguous (10 sequences)
    r = serving_memory(EXAMPLE.with_(kv_alloc="contiguous"))
    assert not r.fits and "contiguous" in r.reason and str(r.max_sequences_contiguous) in r.reason
