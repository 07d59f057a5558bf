"""Next experiment: the default scenario (Llama-3.1-70B at 10 requests/s, lognormal 1000/250 tokens, p95 TTFT
2 s and end-to-end 20 s, the whole GPU catalog, +-30 % workload spreads), cold, in a fresh process.

Target (issue 11): under 10 s cold on 2 cores. "Cold" is a fresh process with nothing cached, timed from the
call (imports reported apart). Reported three ways: the default (re-runs split between the process and one
forked child), one process, and the CPU seconds the single-process run used (what a loaded machine stretches).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_COLD = """
import json, sys, time
t0 = time.perf_counter()
from core.next_experiment import NextExperimentSpec, next_experiment
from core.optimizer import ServingGoal
from core.simulate import Lengths, SimSpec
t1 = time.perf_counter()
goal = ServingGoal(model="llama-3.1-70b", rate_per_s=10.0,
                   workload=SimSpec(num_requests=2000, input=Lengths(kind="lognormal", mean=1000),
                                    output=Lengths(kind="lognormal", mean=250)),
                   p95_ttft_s=2.0, p95_e2e_s=20.0)
c0 = time.process_time()
ticks = []
r = next_experiment(NextExperimentSpec(goal=goal), workers=int(sys.argv[1]), progress=lambda d, t, l: ticks.append(d))
t2 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "cold_s": t2 - t1, "cpu_s": time.process_time() - c0, "reruns": r.reruns,
                  "ticks": len(ticks), "top": r.top.input.key if r.top else None}))
"""


def _run(workers: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _COLD, str(workers)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run() -> list[tuple[str, float, str, str]]:
    par, one = _run(2), _run(1)
    return [
        (f"next experiment, default scenario cold: {par['reruns']} optimizer re-runs", par["cold_s"], "s", "< 10 s"),
        ("next experiment, same in one process", one["cold_s"], "s", ""),
        ("next experiment, CPU seconds of the one-process run", one["cpu_s"], "s", ""),
        ("next experiment process imports (excluded above)", par["imports_s"], "s", ""),
    ]
