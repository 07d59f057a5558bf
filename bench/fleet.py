"""Fleet planning: a 50-workload x 3-scenario plan on the local executor on 2 cores, and the speed-up of a smaller
plan with 1 and 2 Ray workers on a local cluster.

The fleet (:func:`fleet`): 50 workloads cycling through five catalog models (8B, 7B, 32B, 70B dense, a MoE), rates
of 2 to 20 requests/s, prompts of 500 to 4,000 tokens, 100 to 800 output tokens, p95 TTFT 1-3 s and ITL 40-60 ms;
three GPU kinds (H100 SXM, H200, MI300X); three scenarios (traffic +30 %, prompts twice as long, MI300X withdrawn);
the optimizer at 300 requests a simulation and 4 simulations a search, no cost ranges. Each run is a fresh
process (nothing cached), timed from the call; the CPU seconds of the process and its workers are reported beside
the wall time, which a loaded machine stretches. The Ray runs start a loopback head with 1, then 2 CPUs
(:mod:`executors.ray_head`) and plan the first 12 workloads on it; without the ``ray`` extra they are skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("llama-3.1-8b", "mistral-7b", "qwen3-32b", "llama-3.1-70b", "mixtral-8x7b")


def fleet(n: int = 50) -> str:
    """The benchmark's fleet description (YAML), ``n`` workloads."""
    lines = ["workloads:"]
    for i in range(n):
        lines.append(
            f"  - {{name: w{i:02d}, model: {MODELS[i % len(MODELS)]}, rate_per_s: {2 + (i * 7) % 19}, "
            f"input_tokens: {500 + (i * 350) % 3500}, output_tokens: {100 + (i * 70) % 700}, "
            f"p95_ttft_s: {1 + i % 3}, p95_itl_s: {0.04 + 0.01 * (i % 3):.2f}}}"
        )
    lines += [
        "scenarios:",
        "  - {name: peak, rate_factor: 1.3}",
        "  - {name: long-prompts, input_factor: 2}",
        "  - {name: no-mi300x, withdraw: [mi300x]}",
        "constraints: {gpus: [h100-sxm, h200-sxm, mi300x]}",
        "settings: {requests_per_simulation: 300, max_simulations: 4, ranges: false}",
    ]
    return "\n".join(lines) + "\n"


_COLD = """
import json, resource, sys, time
t0 = time.perf_counter()
from core.config import parse_fleet
from core.decision import plan_fleet
from executors import ProcessExecutor, RayExecutor
t1 = time.perf_counter()
fleet = parse_fleet(open(sys.argv[1]).read())
ex = RayExecutor(sys.argv[3]) if sys.argv[2] == "ray" else ProcessExecutor(int(sys.argv[2]))
if sys.argv[2] == "ray":
    ex.connect()
t2 = time.perf_counter()
c0 = time.process_time()
p = plan_fleet(fleet, executor=ex)
t3 = time.perf_counter()
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"imports_s": t1 - t0, "connect_s": t2 - t1, "plan_s": t3 - t2, "cpu_s": time.process_time() - c0,
                  "child_cpu_s": ch.ru_utime + ch.ru_stime, "units": p.units,
                  "nominal": p.nominal.cost_per_hour, "robust": p.robust.cost_per_hour}))
"""


def _run(path: Path, how: str, address: str = "") -> dict:
    p = subprocess.run([sys.executable, "-c", _COLD, str(path), how, address], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"the fleet plan ({how}) failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _ray(path: Path, cpus: int) -> dict | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return None
    from executors import ray_head

    with tempfile.TemporaryDirectory(prefix="rabit-bench-ray-") as d:
        address, _ = ray_head.start(d, num_cpus=cpus)
        try:
            _run(path, "ray", address)  # the workers' first imports, so both counts are timed warm
            return _run(path, "ray", address)
        finally:
            ray_head.stop(d)


def run() -> list[tuple[str, float, str, str]]:
    with tempfile.TemporaryDirectory(prefix="rabit-bench-fleet-") as d:
        big, small = Path(d) / "fleet50.yaml", Path(d) / "fleet12.yaml"
        big.write_text(fleet(50))
        small.write_text(fleet(12))
        two = _run(big, "2")
        rows = [
            (
                f"fleet plan, 50 workloads x 3 scenarios x 3 GPU kinds on 2 local processes ({two['units']} "
                "optimizer runs)",
                two["plan_s"],
                "s",
                "",
            ),
            ("fleet plan, same: CPU seconds of the process and its worker", two["cpu_s"] + two["child_cpu_s"], "s", ""),
        ]
        one_r, two_r = _ray(small, 1), _ray(small, 2)
        if one_r is not None and two_r is not None:
            rows += [
                (f"fleet plan, 12 workloads on Ray with 1 worker ({one_r['units']} units)", one_r["plan_s"], "s", ""),
                ("fleet plan, 12 workloads on Ray with 2 workers", two_r["plan_s"], "s", ""),
                ("fleet plan on Ray, speed-up of 2 workers over 1", one_r["plan_s"] / two_r["plan_s"], "x", "~2x"),
                ("fleet plan on Ray, joining the cluster", two_r["connect_s"], "s", ""),
            ]
        return rows


if __name__ == "__main__":
    for r in run():
        print(r)
