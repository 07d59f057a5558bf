"""Training: the deadline search over every node-aligned GPU count up to 32,768 (target < 5 s on 2 cores)."""

from __future__ import annotations

import statistics
import time

from core.base import DAY_S
from core.config import RabitConfig
from core.training import MAX_GPUS, TrainingGoal, gpu_counts, plan


def _time(cfg: RabitConfig, goal: TrainingGoal, repeat: int = 3) -> tuple[float, object]:
    times, p = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        p = plan(cfg, goal)
        times.append(time.perf_counter() - t)
    return statistics.median(times), p


def run() -> list[tuple[str, float, str, str]]:
    cfg = RabitConfig(model="llama-3.1-70b", phase="train", train_tokens=15e12)
    goal = TrainingGoal(deadline_s=30 * DAY_S)
    t70, p70 = _time(cfg, goal)
    n_counts = len(gpu_counts(cfg.gpus_per_node, MAX_GPUS))
    big = RabitConfig(model="llama-3.1-70b", phase="train", train_tokens=15e12, global_batch_tokens=64 * 2**20)
    t_big, p_big = _time(big, goal)
    moe = RabitConfig(model="deepseek-v3", phase="train", train_tokens=15e12, global_batch_tokens=16 * 2**20)
    t_moe, p_moe = _time(moe, TrainingGoal(deadline_s=60 * DAY_S), repeat=1)
    t_budget, _ = _time(cfg, TrainingGoal(gpus=1024))
    return [
        (f"training: 70B deadline search, {n_counts:,} counts to 32,768 GPUs (4M-token batch)", t70, "s", "< 5 s"),
        ("training: 70B, 15T tokens in 30 days -> GPUs", float(p70.gpus), "GPUs", ""),
        ("training: 70B deadline search, 64M-token batch (more counts feasible)", t_big, "s", "< 5 s"),
        ("training: 70B, 64M batch, 15T tokens in 30 days -> GPUs", float(p_big.gpus), "GPUs", ""),
        ("training: DeepSeek-V3 (MoE, EP axis) deadline search", t_moe, "s", ""),
        ("training: DeepSeek-V3, 15T tokens in 60 days -> GPUs", float(p_moe.gpus), "GPUs", ""),
        ("training: 70B plan on a 1,024-GPU budget", t_budget, "s", ""),
    ]
