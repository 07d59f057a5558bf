"""A host KV tier costs the simulator about nothing: ``rabit simulate ... --kv-offload-gib 64`` against the same run
without it, in-process (the command's range pass included), best of a few runs.

The tier's stream beside HBM's is not affine in the cached tokens, so its iterations were once timed by direct
calls of the step model, every one of them, on the Python loop: 8.5x the plain run's time on the first case. The
timing is now the tabulated closed form plus the tier's term past the tokens HBM holds
(``core.serving.sim.timing.HostTierTiming``; a run of decode iterations that reaches the tier is summed iteration
by iteration), read by the compiled loop and the Python loop alike, so both cases run compiled. Target: within 2x of
the plain run.

Cases: Llama-3.1-8B on one H100 at 20 requests/s (1,000 in / 250 out, lognormal; the tier never reached), and
Llama-3.1-70B on two H100s at 0.25 requests/s (8,000 in / 1,000 out; HBM holds 30,576 tokens, the busiest moments
spill into the tier).
"""

from __future__ import annotations

import contextlib
import io
import time

from cli.main import main

CASES = {
    "8B, 1 x H100, 20k requests": "--model llama-3.1-8b --gpu h100-sxm --gpus 1 --tp 1 --rate 20 --requests 20000 "
    "--input 1000 --output 250 --lengths lognormal --json",
    "70B, 2 x H100, 2k requests": "--model llama-3.1-70b --gpu h100-sxm --gpus 2 --tp 2 --rate 0.25 --requests 2000 "
    "--input 8000 --output 1000 --lengths lognormal --json",
}


def timed(args: list[str], repeats: int = 2) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            main(["simulate", *args])
        best = min(best, time.perf_counter() - t0)
    return best


def run() -> list[tuple[str, float, str, str]]:
    rows = []
    timed(CASES["8B, 1 x H100, 20k requests"].replace("20000", "200").split(), 1)  # warm imports and the loop
    for name, args in CASES.items():
        plain = timed(args.split())
        tier = timed([*args.split(), "--kv-offload-gib", "64"])
        rows += [
            (f"simulate {name}", plain, "s", ""),
            ("  with --kv-offload-gib 64", tier, "s", ""),
            ("  offload / plain", tier / plain, "x", "< 2"),
        ]
    return rows
