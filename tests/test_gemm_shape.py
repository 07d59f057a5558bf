"""The GEMM rates a short reduction costs (core.physics.gemm_shape), checked by hand.

eff(K) = K / (K + K0), K0 = gemm_k0_ridge (base 1) x the part's ridge point (dense peak of the compute precision /
HBM bandwidth); a group of GEMMs with FLOPs f_i at depths K_i runs at eta = sum f_i / sum f_i / min(1, eff(K_i) /
eff(h)) of the ceiling: eta_d for the dense projections, eta_e for the routed experts.
"""

from __future__ import annotations

import pytest

from core.config import RabitConfig, resolve
from core.physics import StepModel, dense_gemm_eff, expert_gemm_eff, k_depth_eff


def _dep(**kw):
    base = dict(model="qwen3-235b-a22b", gpu="h200-sxm", gpus_per_node=8, tp=8, weights="fp8", batch=1)
    return resolve(RabitConfig(**{**base, **kw}))


def test_deepgemm_depth_curve_follows_the_published_table():
    # DeepGEMM README (H800, FP8, M = 4,096): 1,304 TFLOP/s at K = 7,168 and 590 at K = 512, i.e. a ratio of 2.21.
    # K / (K + K0) gives that ratio at K0 = 735 (1.24 ridge points of 1,979 / 3.35 = 591), the pessimistic bound:
    # (7,168 / 7,903) / (512 / 1,247) = 0.9070 / 0.4106 = 2.209.
    assert k_depth_eff(7168, 735) / k_depth_eff(512, 735) == pytest.approx(1304 / 590, rel=0.01)
    # and the K = 2,048 row (1,025 TFLOP/s) within 4 %: (2,048 / 2,783) / 0.9070 = 0.8114 against 1,025 / 1,304 = 0.786
    assert k_depth_eff(2048, 735) / k_depth_eff(7168, 735) == pytest.approx(1025 / 1304, rel=0.04)


def test_qwen3_tp8_down_projection_is_the_short_reduction():
    # Qwen3-235B-A22B, FP8, TP 8 on H200 (1,979 TFLOP/s FP8, 4.8 TB/s): ridge 412.29 FLOP/B = K0.
    # h = 4,096: eff = 4,096 / 4,508.29 = 0.908548; K_d = 1,536 / 8 = 192: eff = 192 / 604.29 = 0.317728;
    # ratio 2.859515; SwiGLU: eta_e = 1 / (2/3 + 2.859515 / 3) = 1 / 1.619839 = 0.61734.
    assert expert_gemm_eff(_dep()) == pytest.approx(0.61734, rel=1e-4)
    # under EP 8 the experts are whole: K_d = 1,536, eff = 1,536 / 1,948.29 = 0.788384, ratio 1.152418,
    # eta_e = 1 / (2/3 + 0.384139) = 0.95165
    assert expert_gemm_eff(_dep(ep=8)) == pytest.approx(0.95165, rel=1e-4)


def test_mixtral_rate_falls_with_tp_and_is_whole_where_the_reduction_is_deep():
    # Mixtral-8x7B FP8 on H100 (1,979 / 3.35 = 590.75): TP 8 slices the 14,336-wide expert to K_d = 1,792:
    # eff(4,096) = 0.873953, eff(1,792) = 0.752072, ratio 1.162063, eta_e = 1 / (2/3 + 0.387354) = 0.94875.
    mix = dict(model="mixtral-8x7b", gpu="h100-sxm")
    assert expert_gemm_eff(_dep(**mix, tp=8)) == pytest.approx(0.94875, rel=1e-4)
    # TP 1 and 2 reduce over 14,336 and 7,168 >= h: no loss; the rate only falls as TP grows
    effs = [expert_gemm_eff(_dep(**mix, tp=t)) for t in (1, 2, 4, 8)]
    assert effs[0] == effs[1] == 1.0
    assert effs[1] > effs[2] > effs[3]
    # a dense model and K0 = 0 (the write fully hidden) lose nothing
    assert expert_gemm_eff(_dep(model="llama-3.1-70b")) == 1.0
    cfg = _dep().config
    assert expert_gemm_eff(resolve(cfg.with_(assumptions=cfg.assumptions.with_(gemm_k0_ridge=0)))) == 1.0


def test_step_compute_charges_only_the_gemm_terms():
    # The expert GEMM term of t_c is divided by eta_e, the dense one by eta_d, and nothing else moves: at T = 4,096 (compute-bound)
    # t_c(base) - t_c(K0 = 0) = f_e T / (pi mfu eff(t_e)) x (1 / eta_e - 1).
    dep = _dep()
    sm = StepModel.from_deployment(dep)
    sm0 = StepModel.from_deployment(
        resolve(dep.config.with_(assumptions=dep.config.assumptions.with_(gemm_k0_ridge=0)))
    )
    assert sm.expert_gemm_eff == pytest.approx(0.61734, rel=1e-4) and sm0.expert_gemm_eff == 1.0
    T = 4096.0
    m = sm.model
    touched = m.num_experts * (1 - (1 - m.experts_per_tok / m.num_experts) ** T)
    rows = T * m.experts_per_tok / touched
    t_exp0 = sm.expert_flop_per_token * T / (sm.peak_flop_per_s * rows / (rows + sm.ramp_tokens))
    t_dense0 = (sm.flop_per_token - sm.expert_flop_per_token) * T / (sm.peak_flop_per_s * T / (T + sm.ramp_tokens))
    c, c0 = sm.scalar_parts(T, 0.0, 0.0)[0], sm0.scalar_parts(T, 0.0, 0.0)[0]
    gap = t_dense0 * (1 / sm.dense_gemm_eff - 1) + t_exp0 * (1 / sm.expert_gemm_eff - 1)
    assert c - c0 == pytest.approx(gap, rel=1e-9)
    assert sm.dense_gemm_eff < 1.0  # the attention output projection reduces over 8,192 / 8 = 1,024 rows
    # memory, communication and launches do not move
    assert sm.scalar_parts(T, 0.0, 0.0)[1:] == sm0.scalar_parts(T, 0.0, 0.0)[1:]


def test_llama70b_tp8_row_parallel_projections_by_hand():
    # Llama-3.1-70B FP8, TP 8 on H100: K0 = 1,979 / 3.35 = 590.75; h = 8,192: eff = 0.932738.
    # QKV (8,192 + 2,048) x 8,192 = 83,886,080 and gate / up 2 x 8,192 x 28,672 = 469,762,048 reduce over h (1);
    # the output projection 8,192 x 8,192 = 67,108,864 over 1,024: eff 0.634155, 0.679886 of the ceiling;
    # the down projection 8,192 x 28,672 = 234,881,024 over 3,584: eff 0.858495, 0.920404 of it.
    # eta_d = 855,638,016 / (83,886,080 + 67,108,864 / 0.679886 + 469,762,048 + 234,881,024 / 0.920404)
    #       = 855,638,016 / 907,547,699 = 0.942802
    dep = _dep(model="llama-3.1-70b", gpu="h100-sxm")
    assert dense_gemm_eff(dep) == pytest.approx(0.942802, rel=1e-5)
    # TP 1 reduces over h or more everywhere: no loss; the loss grows with TP
    effs = [dense_gemm_eff(_dep(model="llama-3.1-70b", gpu="h100-sxm", tp=t)) for t in (1, 2, 4, 8)]
    assert effs[0] == 1.0 and effs[0] > effs[1] > effs[2] > effs[3]
    # the step's dense term is divided by eta_d: at T = 8,192 (compute-bound) against K0 = 0
    sm = StepModel.from_deployment(dep)
    sm0 = StepModel.from_deployment(
        resolve(dep.config.with_(assumptions=dep.config.assumptions.with_(gemm_k0_ridge=0)))
    )
    T = 8192.0
    t_dense0 = sm.flop_per_token * T / (sm.peak_flop_per_s * T / (T + sm.ramp_tokens))
    gap = sm.scalar_parts(T, 0.0, 0.0)[0] - sm0.scalar_parts(T, 0.0, 0.0)[0]
    assert gap == pytest.approx(t_dense0 * (1 / 0.942802 - 1), rel=1e-5)
