"""Step-time function cost: the simulator calls ``StepModel.iteration_s`` in its inner loop.

Target: 100,000 iteration evaluations per second (issue 3), scalar or vectorised.
"""

from __future__ import annotations

import time

import numpy as np

from core.config import RabitConfig, resolve
from core.physics import StepModel
from core.serving import batch_sweep, default_batches, speed_summary

TARGET = ">= 1e5 /s"


def _best(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run() -> list[tuple[str, float, str, str]]:
    rows = []
    for label, cfg in (
        ("dense 70B TP8", RabitConfig()),
        ("MoE DeepSeek-V3 EP8", RabitConfig(model="deepseek-v3", weights="fp8", ep=8, gpu="h200-sxm")),
    ):
        sm = StepModel.from_deployment(resolve(cfg))
        n = 50_000
        tokens = [float(32 + (i % 64)) for i in range(n)]

        def scalar() -> None:
            f = sm.iteration_s
            for T in tokens:
                f(T, T * 4001.0, T * 4000.0)

        dt = _best(scalar, 3)
        rows.append((f"iteration_s scalar ({label})", n / dt, "eval/s", TARGET))
        T = np.asarray(tokens * 20)  # 1,000,000 evaluations in one call
        dt = _best(lambda: sm.iteration_s(T, T * 4001.0, T * 4000.0))
        rows.append((f"iteration_s vectorised, 1e6 per call ({label})", len(T) / dt, "eval/s", TARGET))
    cfg = RabitConfig()
    rows.append(
        ("speed_summary (traced chain), one config", _best(lambda: speed_summary(cfg)) * 1e3, "ms", "page budget")
    )
    bs = default_batches(cfg)
    rows.append((f"batch_sweep over {len(bs)} batches", _best(lambda: batch_sweep(cfg, bs)) * 1e3, "ms", "page budget"))
    return rows
