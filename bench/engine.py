"""The simulator's engine on the shapes beyond the plain aggregated run: a disaggregated 1P1D deployment of 100,000
requests under 1 s, 16 replicas behind prefix affinity (a shared prompt prefix per group) with 1,000,000 requests
under 10 s, and multi-LoRA serving: 4 replicas behind adapter affinity, 16 adapters (uniform traffic) in 4 slots each
(max_loras 4), 20,000 requests, on the compiled loop and on the Python loop.
Each row names the loop that ran it (the compiled loop, or the Python loop and why: the result's
``fallback_reason``). CPU seconds of ``simulate_deployment`` (``time.process_time``: what the code costs on a
shared machine; the wall time on an idle one).

Workload: bench/simulator.py's (Poisson, lognormal 1,000 in / 250 out, chunked prefill, Llama-3.1-8B on one H100
per instance) at 20 requests/s per replica; prefix affinity with half of each prompt shared within 64 groups.
"""

from __future__ import annotations

import time

from bench.simulator import CFG, RATE_PER_S, spec
from core.base import WorkBudget
from core.config import AdapterSet
from core.serving import Layout, PoolLayout, simulate_deployment

LONG = WorkBudget(max_wall_s=3600.0)
LORA = CFG.with_(adapters=AdapterSet(count=16, max_loras=4))


def _cpu(s, layout, cfg=CFG, loop: str = "auto") -> tuple[float, str]:
    c0 = time.process_time()
    r = simulate_deployment(cfg, s, layout, budget=LONG, loop=loop).result
    return time.process_time() - c0, r.loop + (f" ({r.fallback_reason})" if r.fallback_reason else "")


def run() -> list[tuple[str, float, str, str]]:
    pool = PoolLayout(instances=1, gpu="h100-sxm", tp=1, pp=1)
    _cpu(spec(200), Layout(replicas=2))  # warm imports, catalogs and the compiled loop
    d_cpu, d_loop = _cpu(spec(100_000), Layout(mode="disaggregated", prefill=pool, decode=pool))
    affinity = spec(1_000_000).with_(rate_per_s=16 * RATE_PER_S, prefix_cache_frac=0.5, prefix_groups=64)
    a_cpu, a_loop = _cpu(affinity, Layout(replicas=16, router="prefix-affinity"))
    lora, lora_layout = spec(20_000).with_(rate_per_s=4 * RATE_PER_S), Layout(replicas=4, router="adapter-affinity")
    _cpu(spec(200), lora_layout, LORA)  # the adapters' compiled functions
    l_cpu, l_loop = _cpu(lora, lora_layout, LORA)
    p_cpu, p_loop = _cpu(lora, lora_layout, LORA, loop="python")
    return [
        (f"disaggregated 1P1D, 100k requests, CPU seconds [{d_loop}]", d_cpu, "s", "< 1"),
        (f"16 replicas, prefix affinity, 1M requests, CPU seconds [{a_loop}]", a_cpu, "s", "< 10"),
        (f"4 replicas, adapter affinity, 16 adapters / 4 slots, 20k requests, CPU seconds [{l_loop}]", l_cpu, "s", ""),
        (f"  same [{p_loop}]", p_cpu, "s", ""),
    ]
