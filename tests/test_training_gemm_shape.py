"""The training step's weight GEMMs at their short-reduction rate (core.physics.gemm_shape.training_gemm_eff,
applied by core.training.layout), checked by hand.

Per weight a training step runs the forward (twice under full recomputation), the data gradient dX = dY W^T and the
weight gradient dW = X^T dY. Under TP the row-parallel forward reduces over a slice (attention output over
H d_h / tp, MLP down over I / tp) and so does the column-parallel data gradient (QKV over (q + kv) / tp, gate / up
over 2 I / tp, the LM head over V / tp); the weight gradient reduces over the micro-batch's tokens (full rate).
eff(K) = K / (K + K0), K0 = gemm_k0_ridge (base 1) x the part's ridge point; a GEMM at depth K runs at
min(1, eff(K) / eff(h)) of the ceiling, and the FLOP-weighted rate is eta_K = sum f_i / sum f_i / r_i.
"""

from __future__ import annotations

import pytest

from core.base import Trace
from core.config import RabitConfig, resolve
from core.physics import training_gemm_eff
from core.training import Layout, attention_flops_per_token, evaluate_layout, flops_per_token

# Llama-3.1-70B (h = 8,192, 64 query heads and 8 KV heads of 128, I = 28,672, 80 layers, V = 128,256) in BF16 on H100
# SXM (989 TFLOP/s, 3.35 TB/s): K0 = 989 / 3.35 = 295.224, eff(h) = 8,192 / 8,487.224 = 0.965215.
# Weights per token (all 80 layers):
#   QKV      (8,192 + 2,048) x 8,192 x 80 =  6,710,886,400   fwd K = h      dgrad K = 10,240 / 8 = 1,280
#   output   8,192 x 8,192 x 80           =  5,368,709,120   fwd K = 1,024  dgrad K = h
#   gate/up  2 x 8,192 x 28,672 x 80      = 37,580,963,840   fwd K = h      dgrad K = 57,344 / 8 = 7,168
#   down     8,192 x 28,672 x 80          = 18,790,481,920   fwd K = 3,584  dgrad K = h
#   LM head  128,256 x 8,192              =  1,050,673,152   fwd K = h      dgrad K = 16,032 (> h: full rate)
#   norms    161 x 8,192                  =      1,318,912   (full rate)
#   N = 69,503,033,344: shares QKV 9.656 %, output 7.724 %, gate/up 54.071 %, down 27.035 %, head 1.512 %.
# Rates against the ceiling, r(K) = eff(K) / eff(h):
#   r(1,024) = (1,024 / 1,319.224) / 0.965215 = 0.804187     r(3,584) = 0.923896 / 0.965215 = 0.957192
#   r(1,280) = 0.812583 / 0.965215 = 0.841867                 r(7,168) = 0.960443 / 0.965215 = 0.995055
# Forward time in units of N at the ceiling: 1 + 0.077244 (1 / 0.804187 - 1) + 0.270355 (1 / 0.957192 - 1)
#   = 1.030899; data gradient: 1 + 0.096555 (1 / 0.841867 - 1) + 0.540710 (1 / 0.995055 - 1) = 1.020823;
#   weight gradient 1.
# eta_K = 3 / (1.030899 + 1.020823 + 1) = 0.983051; full recomputation (forward twice): 4 / (2 x 1.030899 + 1.020823
#   + 1) = 0.979762; LoRA (the frozen base runs no weight gradient): 2 / (1.030899 + 1.020823) = 0.974791.
# FP8 (K0 = 1,979 / 3.35 = 590.746, eff(h) = 0.932738): r(1,024) = 0.679886, r(3,584) = 0.920404, r(1,280) = 0.733560,
#   r(7,168) = 0.990483; forward 1.059750, data gradient 1.040266, eta_K = 3 / 3.100016 = 0.967737.
ETA_TP8 = 0.983051
ETA_TP8_FULL = 0.979762
ETA_TP8_LORA = 0.974791
ETA_TP8_FP8 = 0.967737


def _dep(**kw):
    base = dict(
        model="llama-3.1-70b",
        gpu="h100-sxm",
        phase="train",
        gpus_per_node=8,
        nodes=8,
        tp=8,
        seq_len=8192,
        global_batch_tokens=8192 * 64,
        train_precision="bf16",
        recompute="selective",
    )
    return resolve(RabitConfig(**{**base, **kw}))


def _no_k0(dep):
    return resolve(dep.config.with_(assumptions=dep.config.assumptions.with_(gemm_k0_ridge=0)))


def test_llama70b_tp8_rate_by_hand():
    dep = _dep()
    assert training_gemm_eff(dep, 8, 1, "selective", "bf16") == pytest.approx(ETA_TP8, abs=2e-6)
    # selective recomputation reruns only the attention core (not a weight GEMM): the same rate as none
    assert training_gemm_eff(dep, 8, 1, "none", "bf16") == training_gemm_eff(dep, 8, 1, "selective", "bf16")
    assert training_gemm_eff(dep, 8, 1, "full", "bf16") == pytest.approx(ETA_TP8_FULL, abs=2e-6)
    assert training_gemm_eff(dep, 8, 1, "selective", "fp8") == pytest.approx(ETA_TP8_FP8, abs=2e-6)
    lora = _dep(lora_rank=16)
    assert training_gemm_eff(lora, 8, 1, "selective", "bf16") == pytest.approx(ETA_TP8_LORA, abs=2e-6)


def test_the_step_divides_only_the_weight_gemms_by_the_rate():
    # t_mb = t_flop (1 + g (1 / eta_K - 1)) with g the weight GEMMs' share of the hardware FLOPs (the attention core
    # keeps the ceiling): against K0 = 0 the micro-batch's compute grows by exactly that factor.
    dep = _dep()
    lay = Layout(tp=8, pp=1, dp=8, micro_batch=1, recompute="selective")
    got, ref = evaluate_layout(dep, lay), evaluate_layout(_no_k0(dep), lay)
    m = dep.model
    attn_hw = attention_flops_per_token(m, 8192, recompute="selective", kernel=dep.config.attention_kernel)[1]
    hw = flops_per_token(m, 8192, recompute="selective", kernel=dep.config.attention_kernel)[1]
    g = 1 - attn_hw / hw
    assert got.compute_s / ref.compute_s == pytest.approx(1 + g * (1 / ETA_TP8 - 1), rel=1e-5)
    assert got.step_s > ref.step_s and got.mfu < ref.mfu


def test_tp1_leaves_training_unchanged_exactly():
    # at TP 1 every depth of a dense Llama is >= h: eta_K = 1 and the step is the one without the term, bit for bit
    dep = _dep(tp=1)
    assert training_gemm_eff(dep, 1, 1, "full", "bf16") == 1.0
    for rc in ("none", "selective", "full"):
        lay = Layout(tp=1, pp=8, dp=8, micro_batch=1, recompute=rc)
        for d in (dep, _dep(tp=1, train_precision="fp8"), _dep(tp=1, tp_comm_overlap=True)):
            assert evaluate_layout(d, lay) == evaluate_layout(_no_k0(d), lay)


@pytest.mark.parametrize("model", ["llama-3.1-70b", "gpt-3-175b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"])
def test_rate_never_rises_with_tp(model):
    dep = _dep(model=model)
    for ep in (1, 8):
        for rc in ("none", "full"):
            for prec in ("bf16", "fp8"):
                effs = [training_gemm_eff(dep, tp, ep, rc, prec) for tp in (1, 2, 4, 8, 16, 32)]
                assert all(0 < e <= 1 for e in effs)
                assert all(a >= b for a, b in zip(effs, effs[1:])), (ep, rc, prec, effs)
    # the deepest K0 (the pessimistic bound) costs at least as much as the base
    hi = resolve(dep.config.with_(assumptions=dep.config.assumptions.at("low")))
    assert training_gemm_eff(hi, 8, 1, "none", "bf16") <= training_gemm_eff(dep, 8, 1, "none", "bf16")


def test_the_traced_steps_reevaluate_and_name_the_rate():
    tr = Trace()
    dep = _dep(tp_comm_overlap=True)
    res = evaluate_layout(dep, Layout(tp=8, pp=1, dp=8, micro_batch=1), tr)
    steps = {s.key: s for s in tr.frozen()}
    for key in ("gemm_flop_share", "train_gemm_eff", "t_mb", "t_tp"):
        assert steps[key].evaluate() == pytest.approx(steps[key].value, rel=1e-9), key
    assert steps["train_gemm_eff"].value == pytest.approx(ETA_TP8, abs=2e-6)
    assert dict(steps["t_mb"].inputs)["eta_K"] == steps["train_gemm_eff"].value
    assert "1,024" in steps["train_gemm_eff"].note and "1,280" in steps["train_gemm_eff"].note
    assert steps["t_mb"].value * res.micro_batches == pytest.approx(res.compute_s, rel=1e-12)
