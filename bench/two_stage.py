"""One simulation of a 2,000-request run in two load stages, in-process: the vLLM lifecycle run of Llama-2-7B on one
H100 (``validation/vllm_lifecycle.csv``, life-llama-2-7b-tp1-codegen: vLLM's max_num_seqs 128 and
max_num_batched_tokens 2,048, 592-token prompts cycled over 100 distinct ones, so 576 tokens of each are found in
the prefix cache, 247 output tokens), its stages at 5 and 10 requests/s with 1,000 requests each, replayed as the
``vllm-lifecycle`` family replays them (each stage from an empty replica, through the deployment's simulator that
shares prefixes). Target: under 1 s for both stages."""

from __future__ import annotations

import time

from core import serving
from core.config import RabitConfig

BASE = RabitConfig(
    model="llama-2-7b", gpu="h100-sxm", gpus_per_node=1, nodes=1, tp=1, batch=1, input_tokens=592, output_tokens=247
)


def _stage(rate_per_s: float) -> RabitConfig:
    w = BASE.workload.with_(
        engine="vllm",
        policy="chunked",
        admission="preempt",
        prefix_caching=True,
        max_batch=128,
        token_budget=2048,
        arrival="poisson",
        rate_per_s=rate_per_s,
        num_requests=1000,
        duration_s=None,
        lengths="fixed",
        prefix_cache_frac=576 / 592,
        prefix_groups=100,
        seed=0,
    )
    return BASE.with_(workload=w)


def run() -> list[tuple[str, float, str, str]]:
    cfgs = [_stage(5.0), _stage(10.0)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for cfg in cfgs:
            serving.simulate_deployment(cfg, serving.sim_spec(cfg))
        best = min(best, time.perf_counter() - t0)
    return [("simulate 2,000 requests in two stages (lifecycle replay)", best, "s", "< 1")]
