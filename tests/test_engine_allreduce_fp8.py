"""Two serving-kernel rates against published kernel measurements and hand computations: the engines' one-shot
all-reduce (core.physics.collectives.Collectives.one_shot_ar_line) and FP8 weights streamed by FP8 GEMMs at small
batch (core.physics.step.weight_read_factor)."""

import numpy as np
import pytest

from core import catalog
from core.config import RabitConfig, resolve
from core.physics import Collectives, StepModel

EFF, BASE, NVLS = 0.8, 8e-6, 0.84  # comm_bw_eff, collective_base_us, nvls_bw_share at their base values
CUSTOM = 3e-6  # custom_ar_base_us at its base
ALPHA = 2.5e-6  # the H100 catalog's NVLink hop
BETA = 450e9 * EFF  # 360 GB/s achieved per direction
ROW = 8192 * 2  # one token of an 8,192-wide BF16 activation: 16,384 B


def coll(gpu: str, per_node: int = 8) -> Collectives:
    return Collectives.for_cluster(catalog.gpu(gpu), catalog.fabric("ib-ndr"), per_node, EFF, BASE, NVLS)


# vLLM's all-reduce table on H100 (benchmarks/kernels/benchmark_device_communicators.py, hidden 8,192, BF16; the
# one-shot custom all-reduce "ca_1stage", ms per call; vllm-project/vllm PRs 24111 (TP 2, TP 6) and 24532 (TP 4)):
# (TP, tokens, measured seconds)
VLLM_CA_1STAGE = (
    (2, 32, 7e-6),
    (4, 32, 10e-6),
    (4, 64, 14e-6),
    (4, 96, 19e-6),
    (4, 128, 23e-6),
    (6, 32, 13e-6),
    (6, 64, 21e-6),
    (6, 96, 30e-6),
    (6, 128, 38e-6),
)


@pytest.mark.parametrize("p,T,measured", VLLM_CA_1STAGE)
def test_one_shot_all_reduce_follows_vllms_h100_table(p, T, measured):
    # the one-shot kernel's own cost at every size the table has (the engine stops taking it above 512 KB over 4
    # GPUs and 256 KB over 5-8: test_one_shot_below_the_engines_size_limit_and_nvls_above_at_tp8)
    # by hand: t = t0' + alpha + (p - 1) T h 2 B / beta; TP 4, 96 tokens (1.5 MB): 3 + 2.5 + 3 x 1,572,864 B / 360
    # GB/s = 5.5 + 13.11 = 18.61 us against 19 us measured; TP 2, 32 tokens: 5.5 + 1.46 = 6.96 us against 7 us
    a_o, b_o = coll("h100-sxm").one_shot_ar_line(p, 8192, 2.0, CUSTOM)
    hand = CUSTOM + ALPHA + (p - 1) * T * ROW / BETA
    assert a_o + b_o * T == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(measured, rel=0.10)


def test_one_shot_below_the_engines_size_limit_and_nvls_above_at_tp8():
    # vLLM runs the one-shot kernel over 5-8 GPUs below 256 KB: 262,144 / 16,384 = 16 tokens of h = 8,192. At 8
    # tokens it costs 5.5 + 8 x 7 x 16,384 B / 360 GB/s = 5.5 + 2.55 = 8.05 us against NVLS 13 + 8 x 9/8 x 16,384 B /
    # 302.4 GB/s = 13.49 us; from 16 tokens the step takes the cheaper of ring and NVLS (at 16 tokens the one-shot
    # line, 10.6 us, would still be cheaper than NVLS's 13.98 us, but the engine does not run it)
    sm = StepModel.from_deployment(resolve(RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=8, tp=8)))
    assert sm.tp_ar_one_max_tokens == pytest.approx(16.0, rel=1e-12)
    T = np.array([8.0, 15.0, 16.0, 512.0])
    one = sm.tp_ar_alpha_one + sm.tp_ar_beta_one * T
    nvls = sm.tp_ar_alpha_tree + sm.tp_ar_beta_tree * T
    ring = sm.tp_ar_alpha_ring + sm.tp_ar_beta_ring * T
    assert one[0] == pytest.approx(8.05e-6, rel=1e-3) and nvls[0] == pytest.approx(13.49e-6, rel=1e-3)
    assert one[2] < nvls[2]
    z = np.zeros_like(T)
    comm = sm.parts(T, z, z)[2]
    expect = np.where(T < 16, np.minimum(one, nvls), np.minimum(ring, nvls)) * sm.ar_per_iter  # 160 an iteration
    assert np.allclose(comm, expect, rtol=1e-12)
    for i, t in enumerate(T):  # the scalar path agrees
        assert sm.parts(float(t), 0.0, 0.0)[2] == pytest.approx(expect[i], rel=1e-12)
    # over two GPUs every buffer goes in one shot
    sm2 = StepModel.from_deployment(resolve(RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=2, tp=2)))
    assert sm2.tp_ar_one_max_tokens > 1e12


def test_one_shot_only_inside_an_nvlink_switch_domain():
    # over PCIe, across nodes and on AMD's mesh the engines' kernel does not run: it is taken below 0 tokens (never),
    # and the step's all-reduce is the cheaper of NCCL's two lines at every size
    for gpu, per_node, p in (("h100-pcie", 8, 4), ("mi300x", 8, 8), ("h100-sxm", 8, 16)):
        c = coll(gpu, per_node)
        assert not c.one_shot_available(p) and c.one_shot_max_tokens(p, 8192, 2.0) == 0.0, gpu
    assert coll("h100-sxm").one_shot_available(8) and coll("h100-sxm").one_shot_max_tokens(8, 8192, 2.0) == 16.0
    assert coll("h100-sxm").one_shot_ar_line(1, 8192, 2.0, CUSTOM) == (0.0, 0.0)
    # the step model on 8 x H100 PCIe at TP 4: NCCL's minimum, one token to a long prompt
    sm = StepModel.from_deployment(resolve(RabitConfig(model="llama-3.1-70b", gpu="h100-pcie", gpus_per_node=4, tp=4)))
    T = np.array([1.0, 16.0, 64.0, 4096.0])
    ring = sm.tp_ar_alpha_ring + sm.tp_ar_beta_ring * T
    tree = sm.tp_ar_alpha_tree + sm.tp_ar_beta_tree * T
    assert sm.tp_ar_one_max_tokens == 0.0
    assert np.allclose(sm.tp_all_reduce_s(T, True), np.minimum(ring, tree), rtol=1e-12)
    assert all(sm.tp_all_reduce_s(float(t), False) == pytest.approx(min(r, q)) for t, r, q in zip(T, ring, tree))


def _decode_memory_s(weights: str, kv: str, **assume) -> tuple[StepModel, float]:
    cfg = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=2, tp=2, weights=weights, kv_dtype=kv)
    if assume:
        cfg = cfg.with_(assumptions=cfg.assumptions.with_(**assume))
    sm = StepModel.from_deployment(resolve(cfg))
    return sm, float(sm.parts(np.array([1.0]), np.array([5251.0]), np.array([5250.0]))[1][0])


def test_fp8_weights_stream_at_their_own_share_of_the_bandwidth():
    # batch-1 decode of Llama-3.1-70B on 2 x H100 at context 5,250: the FP8 weights' bytes W_d on one GPU are read at
    # 0.78 x 0.87 of 3.35 TB/s instead of 0.78: the memory time grows by W_d (1 / 0.87 - 1) / (3.35 TB/s x 0.78)
    sm8, t8 = _decode_memory_s("fp8", "fp8")
    _, t8_free = _decode_memory_s("fp8", "fp8", fp8_stream_eff=1.0)
    assert sm8.weight_read_factor == pytest.approx(1 / 0.87, rel=1e-12)
    assert t8 - t8_free == pytest.approx(sm8.dense_weight_bytes * (1 / 0.87 - 1) / (3.35e12 * 0.78), rel=1e-9)
    # 35.28 GB of FP8 weights a GPU: 13.50 ms at the BF16 streams' rate, 15.52 ms at FP8's
    assert sm8.dense_weight_bytes == pytest.approx(35.28e9, rel=1e-3)
    # BF16 weights do not read the assumption
    _, t16 = _decode_memory_s("bf16", "bf16")
    _, t16_other = _decode_memory_s("bf16", "bf16", fp8_stream_eff=0.5)
    assert t16 == t16_other


def test_nim_70b_fp8_tp2_inter_token_latency():
    # NVIDIA NIM 1.8.0 (TensorRT-LLM), Llama-3.3-70B FP8 on 2 x H100, concurrency 1, 5,000 in / 500 out: ITL 18.58 ms
    # (validation/serving.csv). A decode step at context ~5,250: the FP8 weights at 0.68 of peak, 160 one-shot
    # all-reduces of 16 KB (5.5 + 0.05 us each), the kernels and the step's fixed cost: 18.0 ms (17.2 ms with the
    # weights at 0.78 of peak and NCCL-priced all-reduces of 13 us)
    cfg = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", gpus_per_node=2, tp=2, weights="fp8", kv_dtype="fp8")
    cfg = cfg.with_(workload=cfg.workload.with_(engine="trtllm"))
    sm = StepModel.from_deployment(resolve(cfg))
    t = sm.iteration_s(1, 5251, 5250)
    assert t == pytest.approx(18.58e-3, rel=0.05)
    comm = float(sm.parts(np.array([1.0]), np.array([5251.0]), np.array([5250.0]))[2][0])
    assert comm == pytest.approx(160 * (CUSTOM + ALPHA + ROW / BETA), rel=1e-9)
