"""Engine defaults as the engines document them, and what they do to the simulation."""

import pytest

from core import catalog
from core.catalog import apply_engine, engine_defaults
from core.config import RabitConfig
from core.serving import Lengths, SimSpec, simulate


@pytest.mark.parametrize(
    "engine,gpu,budget,seqs,admission",
    [
        # vLLM get_batch_defaults: >= 70 GiB and not an A100 -> 8192 / 1024; else 2048 / 256
        ("vllm", "h100-sxm", 8192, 1024, "preempt"),
        ("vllm", "mi300x", 8192, 1024, "preempt"),
        ("vllm", "a100-80gb", 2048, 256, "preempt"),
        ("vllm", "l40s", 2048, 256, "preempt"),
        # SGLang chunked_prefill_size: < 35 GB 2048 (L4, 24 GB); < 160 GB 8192 (H100 80, H200 141); else 16384
        ("sglang", "l4", 2048, 4096, "preempt"),
        ("sglang", "h200-sxm", 8192, 4096, "preempt"),
        ("sglang", "b200", 16384, 4096, "preempt"),
        ("sglang", "mi300x", 16384, 4096, "preempt"),
        # TensorRT-LLM: max_num_tokens 8192, max_batch_size 2048, GUARANTEED_NO_EVICT
        ("trtllm", "h100-sxm", 8192, 2048, "reserve"),
    ],
)
def test_documented_defaults(engine, gpu, budget, seqs, admission):
    d = engine_defaults(engine, catalog.gpu(gpu))
    assert (d.token_budget, d.max_batch, d.admission) == (budget, seqs, admission)
    assert d.prefix_caching and d.policy == "chunked" and d.source


def test_unknown_engine():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_defaults("tgi", catalog.gpu("h100-sxm"))


def test_trtllm_never_evicts_where_vllm_preempts():
    # 20 prompts of 3,000 tokens, up to 3,000 output tokens, into a 40,000-token pool: preempt-mode engines
    # admit ~13 prompts and preempt as they grow; GUARANTEED_NO_EVICT admits only what fits at 6,000 tokens
    # each (6 at a time) and never preempts.
    cfg = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
    spec = SimSpec(
        rate_per_s=50, num_requests=20, input=Lengths(mean=3000), output=Lengths(mean=3000), kv_pool_tokens=40_000
    )
    g = catalog.gpu("h100-sxm")
    vllm = simulate(cfg, apply_engine(spec, "vllm", g)).summary
    trt = simulate(cfg, apply_engine(spec, "trtllm", g)).summary
    assert vllm.preemptions > 0 and trt.preemptions == 0
    assert vllm.completed == trt.completed == 20


def test_cli_engine_fills_the_scheduler_flags_left_at_their_defaults():
    import json
    import subprocess
    import sys
    from pathlib import Path

    base = [
        sys.executable,
        "-m",
        "cli.main",
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "1",
        "--tp",
        "1",
        "--rate",
        "5",
        "--requests",
        "100",
        "--json",
    ]
    root = Path(__file__).resolve().parents[1]
    out = json.loads(
        subprocess.run(
            base + ["--engine", "trtllm"], cwd=root, capture_output=True, text=True, timeout=120, check=True
        ).stdout
    )
    assert (out["engine"], out["kv_admission"], out["max_batch"], out["token_budget"]) == (
        "trtllm",
        "reserve",
        2048,
        8192,
    )
    # an explicit flag wins over the engine's default
    out = json.loads(
        subprocess.run(
            base + ["--engine", "vllm", "--max-batch", "64", "--no-prefix-caching"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert (out["max_batch"], out["token_budget"], out["prefix_caching"]) == (64, 8192, False)


def test_engine_defaults_fill_only_the_settings_left_at_their_default():
    # The workload's defaults: chunked, budget 8,192, max batch 256, preempt, prefix caching on.
    from core.config import DEFAULT

    w = DEFAULT.workload.model_dump()
    trt = engine_defaults("trtllm", catalog.gpu("h100-sxm"))
    # a max batch of 64 chosen by hand stays; TensorRT-LLM's reserve admission and 8,192 budget fill the rest
    got = trt.fill({**w, "max_batch": 64}, w)
    assert "max_batch" not in got and got["admission"] == "reserve" and got["token_budget"] == 8192
    # vLLM on an 80 GB H100 differs from the workload's defaults only in max_num_seqs: 1,024 against 256
    vllm = engine_defaults("vllm", catalog.gpu("h100-sxm"))
    assert vllm.differences(w) == {"max_batch": (256, 1024)}
    assert vllm.differences({**w, **vllm.fill(w, w)}) == {}
