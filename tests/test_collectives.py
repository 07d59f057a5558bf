"""Alpha-beta collectives against hand-derived numbers, per topology, and their limits."""

import numpy as np
import pytest

from core import catalog
from core.config import RabitConfig, resolve
from core.physics import Collectives, StepModel

EFF, BASE, NVLS = 0.8, 8e-6, 0.84  # comm_bw_eff, collective_base_us and nvls_bw_share at their base values


def coll(gpu: str, fabric: str = "ib-ndr", per_node: int = 8) -> Collectives:
    return Collectives.for_cluster(catalog.gpu(gpu), catalog.fabric(fabric), per_node, EFF, BASE, NVLS)


def test_all_reduce_over_one_gpu_costs_nothing():
    for g in ("h100-sxm", "mi300x", "h100-pcie"):
        c = coll(g)
        assert c.all_reduce_s(1e9, 1) == 0
        assert c.all_gather_s(1e9, 1) == 0 and c.all_to_all_s(1e9, 1) == 0
        assert np.all(c.all_reduce_s(np.array([1e3, 1e9]), 1) == 0)
    sm = StepModel.from_deployment(resolve(RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1)))
    assert sm.parts(4096, 4096 * 2048, 0)[2] == 0


def test_hand_numbers_on_h100_nvswitch():
    c = coll("h100-sxm")
    n, p = 1e9, 8
    beta = 450e9 * EFF  # 360 GB/s achieved per direction
    ring = BASE + 2 * 7 * 2.5e-6 + 2 * 7 / 8 * n / beta  # 43 us + 4.861 ms
    tree = BASE + 2 * 3 * 2.5e-6 + 2 * n / beta  # 23 us + 5.556 ms
    # NVLS: each GPU moves (1 + 1/8) n each way at 0.84 of the ring's 360 GB/s: 13 us + 1.125 / 302.4 GB/s
    nvls = BASE + 2 * 2.5e-6 + 9 / 8 * n / (beta * NVLS)  # 13 us + 3.720 ms
    lv = c.intra(p)
    assert Collectives._ring_ar(n, p, lv) == pytest.approx(ring)
    assert Collectives._tree_ar(n, p, lv) == pytest.approx(tree)
    assert c.all_reduce_s(n, p) == pytest.approx(nvls) == pytest.approx(3.733e-3, rel=1e-3)
    # against nccl-tests on 8 H100s (NCCL maintainer, NVIDIA/nccl-tests issue #212): NVLS algbw ~275 GB/s, busbw
    # ~480 GB/s; the ring's busbw 370 GB/s. Here: 1 GB / 3.733 ms = 268 GB/s algbw, x 2 x 7/8 = 469 GB/s busbw,
    # within 3 % of both, and the ring's 2 x 7/8 x 1 GB / 4.904 ms = 357 GB/s busbw
    algbw = n / c.all_reduce_s(n, p)
    assert algbw == pytest.approx(275e9, rel=0.03)
    assert algbw * 2 * 7 / 8 == pytest.approx(480e9, rel=0.03)
    assert 2 * 7 / 8 * n / Collectives._ring_ar(n, p, lv) == pytest.approx(370e9, rel=0.04)
    assert c.all_gather_s(n, p) == pytest.approx(BASE + 7 * 2.5e-6 + 7 / 8 * n / beta)
    assert c.p2p_s(n) == pytest.approx(BASE + 2.5e-6 + n / beta)


def test_ring_for_bandwidth_tree_for_latency_without_nvls():
    c = coll("a100-80gb")  # NVSwitch without SHARP: min(ring, tree)
    lv = c.intra(8)
    beta = 300e9 * EFF
    # 1 GB: ring 43 us + 2 x 7/8 x 1e9 / 2.4e11 = 7.335 ms beats tree 23 us + 8.333 ms
    assert c.all_reduce_s(1e9, 8) == pytest.approx(BASE + 35e-6 + 1.75e9 / beta)
    assert c.all_reduce_s(1e9, 8) == pytest.approx(Collectives._ring_ar(1e9, 8, lv))
    # 1 KB: the tree's 3 hops beat the ring's 7 x 2
    assert c.all_reduce_s(1e3, 8) == pytest.approx(Collectives._tree_ar(1e3, 8, lv))
    assert Collectives._tree_ar(1e3, 8, lv) < Collectives._ring_ar(1e3, 8, lv)


def test_mi300x_group_of_p_uses_p_minus_1_links():
    c = coll("mi300x")
    link = catalog.gpu("mi300x").link_bw_gb_per_s * 1e9  # 64 GB/s per Infinity Fabric link and direction
    for p in range(2, 9):
        assert c.intra(p).bw_bytes_per_s == pytest.approx((p - 1) * link * EFF)
    # so a reduce-scatter's bandwidth term n (p-1)/p / ((p-1) l) = n / (p l) shrinks as the group grows
    t = [c.all_gather_s(1e9, p) for p in (2, 4, 8)]
    assert t[0] > t[1] > t[2]
    # and TP 8 on the mesh moves its all-reduce at 7 x 64 = 448 GB/s, TP 2 at 64 GB/s
    assert c.all_reduce_s(1e9, 2) > 3 * c.all_reduce_s(1e9, 8)


def test_nvswitch_tp_beats_the_same_tp_over_pcie():
    sxm, pcie = coll("h100-sxm"), coll("h100-pcie")
    for n in (1e4, 1e6, 1e9):
        assert sxm.all_reduce_s(n, 8) < pcie.all_reduce_s(n, 8)
    # the same model, TP 8, same tokens: exposed communication per iteration (compute and memory differ by part)
    cfg = RabitConfig(model="llama-3.1-70b", tp=8, batch=32)
    c_sxm = StepModel.from_deployment(resolve(cfg)).parts(32, 32 * 4097, 32 * 4096)[2]
    c_pcie = StepModel.from_deployment(resolve(cfg.with_(gpu="h100-pcie"))).parts(32, 32 * 4097, 32 * 4096)[2]
    assert c_sxm < c_pcie
    # PCIe Gen5 x16 at 64 GB/s x 0.8: 1 GB ring all-reduce = 2 x 7/8 x 1e9 / 5.12e10 = 34.2 ms + 92 us
    assert pcie.all_reduce_s(1e9, 8) == pytest.approx(BASE + 14 * 6e-6 + 1.75e9 / (64e9 * EFF))


def test_groups_spanning_nodes_use_the_inter_node_fabric():
    c = coll("h100-sxm")
    n = 1e9
    intra = 450e9 * EFF
    ib = 50e9 * EFF  # NDR 400 Gb/s per GPU
    # 16 GPUs on 2 nodes: reduce-scatter + all-gather in the node (25.5 us + 2.431 ms each) and a 2-node ring
    # all-reduce of 1/8 of the data over IB (8 + 7 us + 125 MB / 40 GB/s = 3.140 ms): 8.017 ms.
    rs = BASE + 7 * 2.5e-6 + 7 / 8 * n / intra
    ar = BASE + 2 * 3.5e-6 + 2 * 1 / 2 * (n / 8) / ib
    assert c.all_reduce_s(n, 16) == pytest.approx(2 * rs + ar)
    assert c.all_reduce_s(n, 16) > c.all_reduce_s(n, 8)
    assert c.p2p_s(n, cross_node=True) > c.p2p_s(n)


def test_all_to_all_and_monotone_in_bytes():
    c = coll("h100-sxm")
    assert c.all_to_all_s(1e6, 8) == pytest.approx(BASE + 7 * 2.5e-6 + 7 / 8 * 1e6 / (450e9 * EFF))
    sizes = np.geomspace(1, 1e10, 50)
    for f in (
        lambda n: c.all_reduce_s(n, 8),
        lambda n: c.all_reduce_s(n, 32),
        lambda n: c.all_gather_s(n, 8),
        lambda n: c.all_to_all_s(n, 16),
    ):
        t = np.asarray(f(sizes))
        assert np.all(np.diff(t) >= 0)


def test_comm_overlap_hides_a_share():
    cfg = RabitConfig(model="llama-3.1-70b", tp=8)
    full = StepModel.from_deployment(resolve(cfg)).parts(32, 32 * 100, 0)[2]
    half = StepModel.from_deployment(resolve(cfg.with_(assumptions=cfg.assumptions.with_(comm_overlap=0.5)))).parts(
        32, 32 * 100, 0
    )[2]
    assert half == pytest.approx(full / 2)


def test_nvls_pays_off_only_in_wide_groups():
    # bandwidth terms per byte over 360 GB/s: ring 2 (p-1)/p, NVLS (1 + 1/p) / 0.84.
    # p = 2: ring 1.0 against NVLS 1.786 -> the ring; p = 8: ring 1.75 against NVLS 1.339 -> NVLS
    c = coll("h100-sxm")
    for p, nvls_wins in ((2, False), (8, True)):
        lv = c.intra(p)
        ring = Collectives._ring_ar(1e9, p, lv)
        nvls = Collectives._nvls_ar(1e9, p, lv)
        assert (nvls < ring) is nvls_wins
        assert c.all_reduce_s(1e9, p) == pytest.approx(min(ring, nvls))
