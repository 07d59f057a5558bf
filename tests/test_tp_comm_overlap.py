"""TP communication overlap in the training step (Transformer Engine userbuffers: Megatron-LM ``--tp-comm-overlap``,
NeMo ``ub_tp_comm_overlap``): a share ``o_tp`` of the micro-batch's TP collectives hides behind its GEMMs, never more
than the GEMMs last; without the setting all of it is exposed."""

from __future__ import annotations

import pytest

from core.config import RabitConfig
from core.training import Layout, attention_flops_per_token, evaluate_layout, flops_per_token, tp_exposed_s

GPT3_TP4 = Layout(tp=4, pp=8, dp=16, micro_batch=1, zero=1, recompute="selective", vpp=12)


def _cfg(**kw) -> RabitConfig:
    return RabitConfig(
        model="gpt-3-175b",
        gpu="h100-sxm",
        phase="train",
        gpus_per_node=8,
        nodes=64,
        tp=4,
        pp=8,
        seq_len=2048,
        global_batch_tokens=2048 * 2048,
        train_precision="fp8",
        recompute="selective",
        **kw,
    )


def test_hidden_share_by_hand():
    # 96 collectives of 0.139 ms = 13.344 ms; o_tp 0.75 hides 10.008 ms behind 95 ms of GEMMs: 3.336 ms exposed
    exposed, hidden = tp_exposed_s(96 * 0.139e-3, 95e-3, 0.75)
    assert hidden == pytest.approx(10.008e-3)
    assert exposed == pytest.approx(3.336e-3)
    # GEMMs of only 4 ms bound what hides: 13.344 - 4 = 9.344 ms stays
    exposed, hidden = tp_exposed_s(96 * 0.139e-3, 4e-3, 0.75)
    assert (exposed, hidden) == pytest.approx((9.344e-3, 4e-3))
    # no overlap: all exposed
    assert tp_exposed_s(13.344e-3, 95e-3, 0.0) == pytest.approx((13.344e-3, 0.0))


def test_gemm_flops_are_the_hardware_flops_less_the_attention_core():
    # Llama-3.1-70B, s = 4,096, selective, fused kernel (flops.py docstrings): attention core 12 x 8,192 x 163,880
    # = 1.611e10 model FLOPs, x (1 + 1/3 + 1/6) = 2.417e10 hardware; the hardware total less it is 6 N (4.17e11)
    from core import catalog

    m = catalog.model("llama-3.1-70b")
    attn, attn_hw = attention_flops_per_token(m, 4096, recompute="selective")
    assert attn == pytest.approx(1.611e10, rel=1e-3)
    assert attn_hw == pytest.approx(attn * 1.5)
    model, hw = flops_per_token(m, 4096, recompute="selective")
    assert hw - attn_hw == pytest.approx(6.0 * m.active_matmul_params())


def test_overlap_hides_the_share_of_the_tp_collectives_and_nothing_else():
    off = evaluate_layout(_cfg(), GPT3_TP4)
    on = evaluate_layout(_cfg(tp_comm_overlap=True), GPT3_TP4)
    o_tp = _cfg().assumptions.tp_overlap_train
    # the GEMMs (about 95 % of the FLOPs) far outlast the collectives here: exactly the share o_tp hides
    assert on.tp_comm_s == pytest.approx(off.tp_comm_s * (1 - o_tp), rel=1e-9)
    assert on.compute_s == off.compute_s and on.dp_comm_s == off.dp_comm_s
    assert on.step_s < off.step_s


def test_hidden_share_monotone_and_tp1_unchanged():
    steps = [
        evaluate_layout(
            _cfg(tp_comm_overlap=True, assumptions=_cfg().assumptions.with_(tp_overlap_train=o)), GPT3_TP4
        ).step_s
        for o in (0.0, 0.25, 0.5, 0.75, 0.9)
    ]
    assert all(b < a for a, b in zip(steps, steps[1:]))
    assert steps[0] == evaluate_layout(_cfg(), GPT3_TP4).step_s
    one = Layout(tp=1, pp=8, dp=64, micro_batch=1, zero=1, recompute="selective", vpp=12)
    assert evaluate_layout(_cfg(tp_comm_overlap=True), one).step_s == evaluate_layout(_cfg(), one).step_s


def test_the_traced_tp_step_reevaluates_with_overlap():
    from core.training import training_math

    steps = {s.key: s for s in training_math(_cfg(tp_comm_overlap=True))}
    t_tp = steps["t_tp"]
    assert t_tp.evaluate() == pytest.approx(t_tp.value, rel=1e-9)
    assert "o_tp" in t_tp.expr and dict(t_tp.inputs)["o_tp"] == _cfg().assumptions.tp_overlap_train


def test_cli_flag(capsys):
    import json

    from cli.main import main as rabit

    args = ["train", "--model", "gpt-3-175b", "--gpu", "h100-sxm", "--tokens", "1e9", "--layout", "4,8,16"]
    args += ["--vpp", "12", "--precision", "fp8", "--seq", "2048", "--global-batch-tokens", "4194304", "--json"]
    assert rabit(args) == 0
    off = json.loads(capsys.readouterr().out)
    assert rabit([*args, "--tp-comm-overlap"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert (off["tp_comm_overlap"], on["tp_comm_overlap"]) == (False, True)
    assert on["step_s"] < off["step_s"]
