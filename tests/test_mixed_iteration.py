"""An iteration that mixes a prompt chunk with decode tokens, priced as vLLM V1 runs it, against a hand computation.

vLLM V1 schedules decode tokens and prompt chunks into one batch and runs ONE forward over all of its tokens
(``vllm/v1/core/sched/scheduler.py``: a token budget shared by running and waiting requests;
``vllm/v1/worker/gpu_model_runner.py``: one ``input_ids`` tensor, ``query_start_loc`` per request): the weights are
read once for the whole batch and the GEMMs see all ``T`` rows; a chunk attends the prompt's cached prefix (its K/V
read from the cache) and itself causally; the logits are computed at each scheduled request's last position
(``logits_indices = query_start_loc[1:] - 1``) and every row is sampled, the partial prefills' tokens discarded
afterwards (``discard_sampled_tokens_req_indices``), so the sampler runs on ``S`` = the scheduled requests.

Llama-3.1-8B, BF16, one H100 SXM (catalog: 989 TFLOP/s BF16 dense, 3.35 TB/s), base assumptions (mfu_max 0.65,
mbu 0.78 on the weight streams and the paged K/V reads at kv_read_bw_eff 0.96 of that, T0 = 64 tokens, step overhead 0.5 ms, 1 us per kernel from a CUDA graph, 2 us per sequence, 16 B per
vocabulary entry sampled). The iteration: 32 sequences decoding at context 1,000, and a 480-token chunk of a prompt
whose first 512 tokens are already cached.
"""

import pytest

from core.config import RabitConfig, resolve
from core.physics import StepModel, iteration
from core.serving import timing_for

CFG = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)

# --- the hand computation -----------------------------------------------------------------------------------------
# parameters a token meets: 32 layers x (q 4096x4096 + k, v 4096x1024 each + o 4096x4096 + gate, up, down
# 3 x 4096x14336 + two RMSNorm weights 2 x 4096) + the final norm 4096 + the LM head 4096 x 128,256
# = 32 x 218,112,000 + 4,096 + 525,336,576 = 7,504,924,672 (the input embedding is a lookup, not read whole)
P_ACT = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096) + 4096 + 4096 * 128256
F_T = 2 * P_ACT  # FLOP per token: 15,009,849,344 (a norm weight's multiply counted as a matmul's 2)
W_BYTES = 2 * P_ACT  # BF16 weights read once per iteration: 15.01 GB
F_A = 4 * 32 * 4096  # FLOP per (query, key) pair: QK^T and PV over 32 heads x 128 dims, 32 layers: 524,288
K_G = 2 * 32 * 8 * 128 * 2  # K and V bytes per token: 131,072 B
PEAK = 989e12 * 0.65  # 642.85 TFLOP/s
BW = 3.35e12 * 0.78  # 2.613 TB/s: the weights (and the sampler's logits) stream at mbu
BW_KV = BW * 0.96  # 2.50848 TB/s: the cached K/V gathered from 16-token pages
# the batch
DEC, CTX = 32, 1000
CHUNK, PREFIX = 480, 512
T = DEC + CHUNK  # 512 tokens in one forward
A = DEC * (CTX + 1) + CHUNK * PREFIX + CHUNK * (CHUNK + 1) // 2  # 32,032 + 245,760 + 115,440 = 393,232 pairs
R = DEC * CTX + PREFIX  # cached tokens read: 32,512 (each decode's context, and the chunk's prefix)
S = DEC + 1  # 33 requests scheduled and sampled
# GEMMs: compute at T / (T + T0) = 512 / 576 of the ceiling, against the weights read once
GEMM_C = F_T * T / (PEAK * T / (T + 64))  # 7.6850e12 FLOP / 571.42 TFLOP/s = 13.449 ms
GEMM_M = (W_BYTES + T * K_G) / BW  # (15.010 GB + 67.1 MB new K/V) / 2.613 TB/s = 5.7700 ms
# attention: its pairs at the ceiling, against the cached K/V it reads
ATT_C = F_A * A / PEAK  # 2.0617e11 / 642.85 TFLOP/s = 0.3207 ms
ATT_M = R * K_G / BW_KV  # 4.2614 GB / 2.50848 TB/s = 1.6988 ms
BUSY = max(GEMM_C, GEMM_M) + max(ATT_C, ATT_M)  # 13.449 + 1.699 = 15.148 ms: the GEMMs compute-bound, attention not
# fixed costs: the step, 323 kernels (32 x 10 + 3) from CUDA graphs (512 tokens <= the capture size 512), and per
# scheduled request its bookkeeping and its sampler pass over 128,256 logits
FIXED = 0.5e-3 + 323 * 1e-6 + S * (2e-6 + 128256 * 16 / BW)  # 0.5 + 0.323 + 33 x 2.785 us = 0.915 ms
HAND_S = BUSY + FIXED  # 16.063 ms


def test_a_mixed_iteration_is_one_forward_priced_by_hand():
    sm = StepModel.from_deployment(resolve(CFG))
    it = iteration(sm, T, A, R, S)
    assert it.time_s == pytest.approx(HAND_S, rel=1e-9)
    assert HAND_S == pytest.approx(16.063e-3, rel=1e-4)
    # the weights are read once: the iteration's bytes are one weights' worth plus the K/V read and written, the
    # reads counted at the weights' bandwidth (g_r = 1 / 0.96 bytes per byte gathered)
    assert it.bytes == pytest.approx(W_BYTES + (R / 0.96 + T) * K_G, rel=1e-12)
    # the simulator's timing (the tabulated form its loops read) gives the same number
    assert timing_for(sm, 1, 2048, 32768.0).one(T, A, R, S) == pytest.approx(HAND_S, rel=1e-9)


def test_mixing_shares_the_weights_read():
    """Priced apart, the decode batch and the chunk would each read the 15 GB of weights: the mixed iteration costs
    less than the two alone by at least the fixed step and the memory-bound decode's weights read (6.0 ms here),
    and more than the compute-bound chunk alone (its GEMMs are the bound; the decodes add their rows and K/V)."""
    sm = StepModel.from_deployment(resolve(CFG))
    mixed = iteration(sm, T, A, R, S).time_s
    decode = iteration(sm, DEC, DEC * (CTX + 1), DEC * CTX, DEC).time_s
    chunk = iteration(sm, CHUNK, CHUNK * PREFIX + CHUNK * (CHUNK + 1) // 2, PREFIX, 1).time_s
    assert decode + chunk - mixed > 0.5e-3 + W_BYTES / BW * 0.9
    assert chunk < mixed < decode + chunk
