"""Training memory's one body (core.physics.training_footprint.training_memory_parts) and the resolved deployment it takes.

The traced Memory view (training_memory_for) and the layout search (training_layout.layout_grid) both call
the body; these tests pin it to hand-derived numbers, check that array inputs give element by element what
scalar inputs give, and that a Deployment is resolved once and reused.
"""

import itertools

import numpy as np
import pytest

from core.base import Trace
from core.config import Deployment, RabitConfig, as_deployment, resolve
from core.physics import training_memory, training_memory_for, training_memory_parts
from core.training import Layout, layout_context, layout_grid, layout_memory

L70 = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", phase="train", seq_len=4096, sequence_parallel=True)


def test_hand_derived_zero3_full_recompute():
    # Llama-3.1-70B: P = 70,553,706,496 parameters, L = 80, h = 8,192, V = 128,256.
    # TP 8 x PP 2 x DP 4, ZeRO-3: every state is split 8 x 2 x 4 = 64 ways.
    #   W = G = 2 P / 64 = 2,204,803,328 B;  S = 12 P / 64 = 13,228,819,968 B.
    # Full recomputation with SP keeps 2 s b h / t = 2 x 4,096 x 8,192 / 8 = 8,388,608 B per layer; 1F1B
    # holds PP = 2 micro-batches of 40 layers = 80 layers' worth: 671,088,640 B; FP32 logits
    # 4 s b V / t = 4 x 4,096 x 128,256 / 8 = 262,668,288 B; activations 933,756,928 B.
    dep = resolve(L70)
    p = training_memory_parts(dep, dp=4, tp=8, pp=2, ep=1, zero=3, micro_batch=1, recompute="full", micro_batches=16)
    assert p.trainable_params == 70_553_706_496
    assert p.weight == p.gradient == 2_204_803_328
    assert p.optimizer == 13_228_819_968
    assert p.activation_per_layer == 8_388_608
    assert p.activation == 933_756_928
    # + 1.5 GiB runtime overhead (assumption runtime_overhead_gib)
    assert p.total == 2 * 2_204_803_328 + 13_228_819_968 + 933_756_928 + 1.5 * 2**30


def test_arrays_broadcast_to_the_scalar_values():
    cfgs = [
        L70,
        L70.with_(train_precision="fp8", sequence_parallel=False),
        RabitConfig(model="mixtral-8x7b", phase="train", lora_rank=8),
        RabitConfig(model="deepseek-v3", phase="train"),
    ]
    dps, vs, bs, rcs, zs = (1, 3, 8), (1, 2, 4), (1, 2, 4), ("none", "selective", "full"), (0, 1, 2, 3)
    for cfg in cfgs:
        dep = resolve(cfg)
        tp, pp, ep = 2, 4, (8 if dep.model.is_moe else 1)
        D = np.array(dps, dtype=float)[:, None, None, None, None]
        V = np.array(vs, dtype=float)[None, :, None, None, None]
        B = np.array(bs, dtype=float)[None, None, :, None, None]
        R = np.array(rcs)[None, None, None, :, None]
        Z = np.array(zs)[None, None, None, None, :]
        mm = np.full(D.shape, 3.0)  # fewer micro-batches than PP: min(PP, m) in flight
        grid = training_memory_parts(
            dep, dp=D, tp=tp, pp=pp, ep=ep, zero=Z, micro_batch=B, recompute=R, vpp=V, micro_batches=mm
        )
        total = np.broadcast_to(grid.total, (3, 3, 3, 3, 4))
        for (i, d), (j, v), (k, b), (r, rc), (z, zero) in itertools.product(*map(enumerate, (dps, vs, bs, rcs, zs))):
            one = training_memory_parts(
                dep, dp=d, tp=tp, pp=pp, ep=ep, zero=zero, micro_batch=b, recompute=rc, vpp=v, micro_batches=3
            )
            assert total[i, j, k, r, z] == pytest.approx(one.total, rel=1e-12)


def test_search_and_traced_view_share_the_body(monkeypatch):
    # Doubling the body's activations moves both callers by the same bytes: neither has a copy of its own.
    import core.physics.training_footprint
    import core.training.layout

    dep = resolve(L70.with_(nodes=8))
    lay = Layout(tp=8, pp=2, dp=4, micro_batch=1, zero=1, recompute="selective")
    c = layout_context(dep)

    def grid_mem() -> tuple[float, int]:
        r = layout_grid(c, 8, 2, 1, np.array([4]), (1,), (1,), ("selective",), (1,), 1e9)
        return float(np.ravel(r["mem"])[0]), int(np.ravel(r["mm"])[0])

    g0, mm = grid_mem()
    t0 = layout_memory(dep, lay, mm).total_bytes_per_gpu
    assert g0 == t0
    real = core.physics.training_footprint.training_memory_parts

    def doubled(*args, **kw):
        p = real(*args, **kw)
        return type(p)(**{**p.__dict__, "total": p.total + p.activation})

    monkeypatch.setattr(core.physics.training_footprint, "training_memory_parts", doubled)
    monkeypatch.setattr(core.training.layout, "training_memory_parts", doubled)
    g1, _ = grid_mem()
    t1 = layout_memory(dep, lay, mm).total_bytes_per_gpu
    assert g1 > g0 and g1 == t1


def test_deployment_resolved_once_and_reused():
    dep = resolve(L70)
    assert as_deployment(dep) is dep
    assert as_deployment(L70) == dep and isinstance(as_deployment(L70), Deployment)
    z3 = dep.with_(zero=3, nodes=2)
    assert z3.model is dep.model and z3.gpu is dep.gpu  # no second catalog lookup for a layout change
    assert z3.config == L70.with_(zero=3, nodes=2)
    b200 = dep.with_(gpu="b200")
    assert b200.gpu.memory_bytes > dep.gpu.memory_bytes and b200.model is dep.model
    # the config and its deployment give the same memory, step by step
    a, b = training_memory(L70), training_memory(dep)
    assert a == b
    assert L70.dp == 1
    t = training_memory_for(dep, Trace(), dp=4, zero=3)  # ZeRO-3 over DP 4 shards every state four ways
    assert t.weight_bytes_per_gpu == pytest.approx(a.weight_bytes_per_gpu / 4)
