"""A decode step's two byte streams, each at its own bandwidth: the weights at mbu, the paged K/V reads at
mbu x kv_read_bw_eff (core.physics.read_factors.kv_read_factor), in the one step formula and the simulator's
timing table alike.

Llama-2-7B, BF16, one H100 SXM (catalog: 3.35 TB/s), base assumptions (mbu 0.78, kv_read_bw_eff 1.05). A decode
step of 16 sequences at 700 cached tokens each.
"""

import pytest

from core.base import REGISTRY
from core.config import RabitConfig, resolve
from core.physics import StepModel
from core.serving import timing_for

CFG = RabitConfig(model="llama-2-7b", gpu="h100-sxm", gpus_per_node=1, tp=1)

# --- the hand computation -----------------------------------------------------------------------------------------
# weights streamed (no embedding: a lookup): 32 layers x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 4096
# + LM head 4096 x 32,000 = 32 x 202,383,360 + 4,096 + 131,072,000 = 6,607,343,616 params x 2 B = 13.2147 GB
P = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 4096 + 4096 * 32000
W_BYTES = 2 * P
K_G = 2 * 32 * 32 * 128 * 2  # K and V of one token, 32 layers x 32 KV heads x 128 x 2 B = 524,288 B
BW_W = 3.35e12 * 0.78  # 2.613 TB/s: the weights' streams
BW_KV = BW_W * 1.05  # 2.74365 TB/s: the K/V gathered from 16-token pages
B, CTX = 16, 700
R = B * CTX  # 11,200 cached tokens read
# memory: 13.2147 GB / 2.613 TB/s = 5.0573 ms of weights, 16 new tokens' K/V written (8.4 MB, 3.2 us) at the
# weights' bandwidth, 11,200 x 524,288 B = 5.8720 GB of K/V read / 2.74365 TB/s = 2.1402 ms
T_W = (W_BYTES + B * K_G) / BW_W
T_KV = R * K_G / BW_KV
HAND_MEM_S = T_W + T_KV  # 5.0605 + 2.1402 = 7.2007 ms


def test_decode_memory_prices_each_stream_at_its_own_bandwidth_by_hand():
    assert P == 6_607_343_616
    assert HAND_MEM_S == pytest.approx(7.2007e-3, rel=1e-4)
    sm = StepModel.from_deployment(resolve(CFG))
    assert sm.kv_read_factor == pytest.approx(1 / 1.05, rel=1e-12)
    _, t_mem, _ = sm.scalar_parts(float(B), float(R + B), float(R))
    assert t_mem == pytest.approx(HAND_MEM_S, rel=1e-9)
    # attention's own roofline (busy_s) sees the same K/V stream
    assert sm.attention_s(float(R + B), float(R))[1] == pytest.approx(T_KV, rel=1e-9)
    # the simulator's tabulated timing reads the same formula
    it = sm.iteration_s(float(B), float(R + B), float(R))
    assert timing_for(sm, 1, 2048, 32768.0).one(B, R + B, R, B) == pytest.approx(it, rel=1e-9)


def test_each_assumption_moves_only_its_own_stream():
    base = CFG.assumptions
    sm = StepModel.from_deployment(resolve(CFG))
    _, t0, _ = sm.scalar_parts(float(B), float(R + B), float(R))
    # K/V reads at a contiguous stream's rate (the high bound, 1.15): only the K/V term shrinks, by
    # 1 - 1.05 / 1.15 = 8.7 % of itself
    fast_kv = StepModel.from_deployment(resolve(CFG.with_(assumptions=base.with_(kv_read_bw_eff=1.15))))
    _, t1, _ = fast_kv.scalar_parts(float(B), float(R + B), float(R))
    assert t0 - t1 == pytest.approx(T_KV * (1 - 1.05 / 1.15), rel=1e-9)
    # no cached tokens: kv_read_bw_eff moves nothing (a batch-1 first decode reads weights only)
    assert fast_kv.scalar_parts(1.0, 1.0, 0.0)[1] == sm.scalar_parts(1.0, 1.0, 0.0)[1]
    # mbu scales both streams (the K/V reads are a share of it)
    slow = StepModel.from_deployment(resolve(CFG.with_(assumptions=base.with_(mbu=0.39))))
    assert slow.scalar_parts(float(B), float(R + B), float(R))[1] == pytest.approx(2 * t0, rel=1e-9)


def test_the_kv_stream_never_beats_a_contiguous_stream_or_the_peak_and_bounds_are_ordered():
    i = REGISTRY["kv_read_bw_eff"]
    assert i.low <= i.base <= i.high <= i.max_value
    m = REGISTRY["mbu"]
    assert m.low <= m.base <= m.high <= 1.0
    # base: a contiguous stream's 0.91 of peak (STREAM on H100, mbu's high bound) x FlashInfer's paged kernels at
    # 0.90 of their dense ones = 0.819 of peak; high: the contiguous stream itself
    assert m.base * i.base == pytest.approx(0.91 * 0.90, abs=0.002)
    assert m.base * i.high == pytest.approx(m.high, abs=0.005)
    # the domain's edge: at mbu's low bound the gather stays at or below peak
    assert i.max_value * m.low <= 1.0
