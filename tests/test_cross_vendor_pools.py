"""Disaggregated prefill and decode pools are one vendor's GPUs: no serving engine moves a KV cache between a ROCm
and a CUDA instance (vLLM's NIXL / NCCL connectors, SGLang's Mooncake / NIXL backends run on one runtime), so the
config check, the optimizer's pool pairs and a fleet's mixed-kind runs refuse the pairs across vendors, saying why."""

from __future__ import annotations

from app_state import set_input

from core import catalog
from core.config import DEFAULT, problems
from core.decision import Constraints, ServingGoal, disagg_candidates, screen


def test_a_pool_pair_across_vendors_is_refused_with_the_runtimes_named():
    h100, h200, mi = catalog.gpu("h100-sxm"), catalog.gpu("h200-sxm"), catalog.gpu("mi300x")
    assert catalog.kv_pool_refusal(h100, h200) == "" == catalog.kv_pool_refusal(mi, mi)
    why = catalog.kv_pool_refusal(mi, h200)
    assert "ROCm" in why and "CUDA" in why and mi.name in why and h200.name in why
    assert catalog.kv_pool_refusal(h100, mi) != ""  # either direction


def test_the_config_check_refuses_a_cross_vendor_decode_pool_next_to_its_input():
    on = DEFAULT.disagg.with_(enabled=True, prefill_gpu="mi300x", decode_gpu="h200-sxm")
    found = [p for p in problems(DEFAULT.with_(disagg=on)) if p.field == "disagg.decode_gpu"]
    assert found and found[0].blocking and "ROCm" in found[0].message
    same = DEFAULT.disagg.with_(enabled=True, prefill_gpu="h100-sxm", decode_gpu="h200-sxm")
    assert not [p for p in problems(DEFAULT.with_(disagg=same)) if p.field == "disagg.decode_gpu"]


def test_the_search_pairs_pools_of_one_vendor_only():
    # 8,000-token prompts at 4 requests/s under tight targets (tests/test_disagg_recommend.py): the cheapest pools of
    # H100, H200 and MI300X paired across kinds; before the refusal the search paired H100 prefill with MI300X
    # decode (the fleet example's chat workload at $12.085/h, tests/test_fleet_plan.py)
    cfg = DEFAULT.with_(
        model="llama-3.1-70b",
        input_tokens=8000,
        output_tokens=200,
        workload=DEFAULT.workload.with_(rate_per_s=4.0),
        targets=DEFAULT.targets.with_(p95_ttft_s=2.0, p95_itl_s=0.03, weights_allowed=("fp8",), kv_allowed=("bf16",)),
    )
    goal = ServingGoal.from_config(cfg)
    cons = Constraints.from_config(cfg).model_copy(
        update={"gpus_allowed": ("h100-sxm", "h200-sxm", "mi300x"), "mixed_pools": True}
    )
    cands = screen(goal, cons, catalog.prices())
    assert {c.gpu for c in cands if c.prefill_capacity_rps} >= {"h100-sxm", "mi300x"}  # both vendors screened
    pairs = {(c.prefill.gpu, c.decode.gpu) for c in disagg_candidates(goal, cons, cands)}
    assert pairs, "no pair of one vendor found (H100 with H200 should pair)"
    assert all(catalog.gpu(p).vendor == catalog.gpu(d).vendor for p, d in pairs), pairs


def test_the_serving_page_says_why_a_cross_vendor_pool_pair_is_refused(clear_cache):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    for k, v in {"enabled": True, "prefill_gpu": "mi300x", "decode_gpu": "h200-sxm"}.items():
        set_input(at, f"cfg.disagg.{k}", v)
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value.replace("\\", "") for e in at.error]
    assert any("ROCm" in e and "CUDA" in e and "one vendor" in e for e in shown), shown
