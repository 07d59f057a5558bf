"""The optimizer searches disaggregated layouts beside aggregated replicas: a prompt-heavy workload under tight TTFT
and ITL targets is cheapest on separate prefill and decode pools; short prompts are not (a second pool does not
pay). Launch configs carry both pools with each engine's documented disaggregation flags."""

import shlex

import yaml
from clirun import fails, run

from core.operations import DOCUMENTED_FLAGS

#: 8,000-token prompts, 200-token answers at 4 requests/s: in an aggregated replica each 8,192-token prefill chunk
#: lengthens the decode iterations it joins, so the 30 ms ITL target needs many replicas; a decode pool runs none.
PROMPT_HEAVY = (
    "recommend --model llama-3.1-70b --rate 4 --input 8000 --output 200 --p95-ttft-s 2 --p95-itl-s 0.03 "
    "--gpus-allowed h100-sxm --weights-allowed fp8 --kv-allowed bf16 --requests 1000 --max-simulations 16"
).split()
#: short prompts, long answers at a low rate on a small model: one GPU carries it, two pools need two
SHORT = (
    "recommend --model llama-3.1-8b --rate 1 --input 200 --output 500 --p95-ttft-s 2 --p95-itl-s 0.05 "
    "--gpus-allowed h100-sxm --weights-allowed bf16 --kv-allowed bf16 --requests 400 --max-simulations 8"
).split()


def test_prompt_heavy_tight_targets_recommend_disaggregated_pools(capsys):
    out = run(capsys, *PROMPT_HEAVY, "--json")
    r = out["recommendation"]
    assert out["met"] and r["mode"] == "disaggregated"
    assert r["prefill"]["role"] == "prefill" and r["decode"]["role"] == "decode"
    for pool in ("prefill", "decode"):
        assert set(r[pool]) >= {"instances", "gpu", "tp", "pp", "gpus_per_instance", "max_num_seqs"}
    gpus = sum(r[p]["instances"] * r[p]["gpus_per_instance"] for p in ("prefill", "decode"))
    assert (
        r["cost_per_hour"] == round(r["cost_per_hour"], 10)
        and r["cost_per_hour"] == gpus * r["decode"]["usd_per_gpu_hour"]
    )
    assert r["p95_ttft_s"] <= 2 and r["p95_itl_s"] <= 0.03
    # its ranges: every assumption at each bound at once, the pools sized again there (the optimistic bound needs
    # no more GPUs than the pick, the pessimistic one no fewer; an end where nothing fits or meets is null)
    rg = out["ranges"]
    cost = rg["recommendation.cost_per_hour"]
    assert cost["low"] <= r["cost_per_hour"] and (cost["high"] is None or cost["high"] >= r["cost_per_hour"])
    assert cost["low"] < r["cost_per_hour"] or cost["high"] != cost["low"]  # the bounds move the pools
    for k in ("p95_ttft_s", "p95_itl_s", "p95_e2e_s"):
        got = rg[f"recommendation.{k}"]
        assert got["low"] <= r[k] and (got["high"] is None or got["high"] >= r[k])
    assert "at once" in out["range_note"]
    assert out["explanation"]["disaggregation"].startswith("Disaggregated wins")
    # the Pareto front says which is which
    assert {p["mode"] for p in out["pareto"]} <= {"aggregated", "disaggregated"}
    assert any(p["mode"] == "disaggregated" for p in out["pareto"])
    aggregated = [p for p in out["pareto"] if p["mode"] == "aggregated"]
    assert all("prefill" not in p for p in aggregated)
    # both pools' launch commands with the documented disaggregation flags
    vllm = run(capsys, *PROMPT_HEAVY, "--json", "--emit", "vllm")["launch"]["text"]
    assert vllm.count("vllm serve") == 2 and vllm.count("--kv-transfer-config") == 2 and "NixlConnector" in vllm
    sgl = run(capsys, *PROMPT_HEAVY, "--json", "--emit", "sglang")["launch"]["text"]
    assert "--disaggregation-mode prefill" in sgl and "--disaggregation-mode decode" in sgl
    assert "sglang_router.launch_router" in sgl and "--pd-disaggregation" in sgl
    for text, engine in ((vllm, "vllm"), (sgl, "sglang")):
        for line in text.replace("\\\n", " ").splitlines():
            if line.startswith("#") or not line.strip():
                continue
            flags = {a for a in shlex.split(line) if a.startswith("--")}
            which = "sglang-router" if "sglang_router" in line else engine
            assert flags <= DOCUMENTED_FLAGS[which][1], flags - DOCUMENTED_FLAGS[which][1]
    k8s = run(capsys, *PROMPT_HEAVY, "--json", "--emit", "k8s")["launch"]["text"]
    docs = [d for d in yaml.safe_load_all(k8s) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Deployment"]
    assert [d["spec"]["replicas"] for d in docs] == [r["prefill"]["instances"], r["decode"]["instances"]]
    assert all("--kv-transfer-config" in d["spec"]["template"]["spec"]["containers"][0]["command"] for d in docs)
    err = fails(capsys, *PROMPT_HEAVY, "--emit", "trtllm")
    assert "--emit" in err and "disaggregated" in err


def test_short_prompts_stay_aggregated_and_say_why(capsys):
    out = run(capsys, *SHORT, "--json")
    r = out["recommendation"]
    assert out["met"] and r["mode"] == "aggregated" and "prefill" not in r and "decode" not in r
    assert out["explanation"]["disaggregation"].startswith(("Aggregated wins", "No disaggregated"))
    # the search did consider disaggregated layouts: without them it evaluates fewer configurations
    only = run(capsys, *SHORT, "--json", "--no-disagg")
    assert only["evaluated"] < out["evaluated"]
    assert only["recommendation"]["cost_per_hour"] == r["cost_per_hour"]
