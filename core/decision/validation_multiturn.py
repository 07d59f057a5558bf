"""A public multi-turn conversation benchmark replayed through the session simulator: the ``vllm-multiturn``
validation family.

Each row of ``validation/vllm_multiturn.csv`` is one run of vLLM's multi-turn benchmark
(``benchmarks/multi_turn/benchmark_serving_multi_turn.py``) with its synthetic-conversation generator
(``bench_dataset.py``): ``conversations`` conversations served by ``clients`` clients, each client holding one
conversation and sending its next user turn as soon as the answer streams back (no pause between turns), so the
replay is ``clients`` concurrent agents with a zero gap (:class:`core.config.Sessions`, ``arrival="agents"``). How the
generator's settings map onto the session workload:

* **turns.** ``num_turns`` counts messages (user and assistant), drawn uniform in ``[turns_min, turns_max]`` and
  rounded up to an even number, so a conversation has ``num_turns / 2`` user turns. 12-18 messages: 6, 7, 8 or 9
  user turns with probabilities 1, 2, 2, 2 of 7 (mean 54 / 7 = 7.71); the session workload draws whole turns
  uniform over ``[6, 9]`` (mean 7.5, 2.8 % fewer turns).
* **the first prompt.** ``common_prefix`` tokens shared by every conversation, the conversation's own prefix
  (lognormal with median / mean 0.85, scaled to the stated average, clipped at ``prefix_max``) and the first user
  message (uniform ``[new_min, new_max]``). Its mean is ``common + average + (new_min + new_max) / 2``; the
  session workload draws it lognormal with that mean and the prefix's standard deviation: the generator's
  ``sigma^2 = 2 ln(1 / 0.85)`` gives ``sd / mean = sqrt(exp(sigma^2) - 1) = 0.619``, so sd = 0.619 x average, and
  a lognormal of mean ``F`` and that sd has ``sigma = sqrt(ln(1 + (sd / F)^2))`` (:func:`first_input_sigma`).
* **later turns** add the previous answer and a user message uniform in ``[new_min, new_max]``; answers are
  uniform in ``[output_min, output_max]`` (the generator's ``max_tokens``).

The replica is the row's engine with vLLM V1's defaults for a GPU under 70 GiB served through the OpenAI server
(``max_num_seqs`` 256, ``max_num_batched_tokens`` 2,048, chunked prefill, prefix caching on, preemption), one
replica of ``tp`` GPUs. The metrics are the benchmark's means over its requests: ``ttft_mean_s``, ``tpot_mean_s``
(per request ``(latency - ttft) / (output - 1)``), and ``input_tokens_per_s`` / ``total_tokens_per_s``, the run's
prompt (and prompt + generated) tokens over its span.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np

from core.config import Lengths, RabitConfig, Sessions

FILE = "vllm_multiturn.csv"
FAMILY = "vllm-multiturn"
METRICS = ("ttft_mean_s", "tpot_mean_s", "input_tokens_per_s", "total_tokens_per_s")

#: The generator's default median / mean of a lognormal given by its average (``bench_dataset.py``,
#: ``LognormalDistribution``: ``median_ratio`` 0.85 when the file does not set one).
PREFIX_MEDIAN_RATIO = 0.85


def user_turns(messages_min: int, messages_max: int) -> tuple[int, int]:
    """The fewest and most user turns of a conversation of ``messages_min..messages_max`` messages (rounded up to
    an even count: every user message has an answer). 12-18 messages: 6-9 turns."""
    return (messages_min + messages_min % 2) // 2, (messages_max + messages_max % 2) // 2


def first_input_sigma(first_mean_tokens: float, prefix_average_tokens: float) -> float:
    """The lognormal sigma of a first prompt of mean ``first_mean_tokens`` whose spread is the conversation
    prefix's (module docstring). 4,640 tokens over a 4,000-token prefix: sd 2,477, sigma 0.501."""
    s2 = 2.0 * math.log(1.0 / PREFIX_MEDIAN_RATIO)
    sd = prefix_average_tokens * math.sqrt(math.exp(s2) - 1.0)
    return math.sqrt(math.log(1.0 + (sd / first_mean_tokens) ** 2))


def _uniform(lo: int, hi: int) -> Lengths:
    mean = (lo + hi) / 2
    return Lengths(kind="uniform", mean=mean, spread=(hi - lo) / 2 / mean)


def session_workload(r: Mapping[str, str]) -> Sessions:
    """The benchmark's conversations as a session workload (module docstring)."""
    t_lo, t_hi = user_turns(int(r["turns_min"]), int(r["turns_max"]))
    n_lo, n_hi = int(r["new_min"]), int(r["new_max"])
    first = int(r["common_prefix"]) + int(r["prefix_average"]) + (n_lo + n_hi) / 2
    return Sessions(
        arrival="agents",
        agents=int(r["clients"]),
        num_sessions=int(r["conversations"]),
        turns=_uniform(t_lo, t_hi),
        first_input=Lengths(
            kind="lognormal",
            mean=first,
            spread=first_input_sigma(first, int(r["prefix_average"])),
            max_tokens=int(r["common_prefix"]) + int(r["prefix_max"]) + n_hi,
        ),
        new_input=_uniform(n_lo, n_hi),
        output=_uniform(int(r["output_min"]), int(r["output_max"])),
        gap_s=0.0,
        gap_cv=0.0,
    )


def multiturn_config(r: Mapping[str, str]) -> RabitConfig:
    """The run's replica, its engine's scheduler and the benchmark's sessions."""
    tp = int(r["tp"])
    cfg = RabitConfig(
        model=r["model"],
        gpu=r["gpu"],
        gpus_per_node=tp,
        nodes=1,
        tp=tp,
        pp=1,
        weights=r["weights"],
        kv_dtype=r["kv_dtype"],
        batch=1,
    )
    w = cfg.workload.with_(
        engine=r["engine"],
        policy="chunked",
        admission="preempt",
        prefix_caching=True,
        max_batch=int(r["max_num_seqs"]),
        token_budget=int(r["max_num_batched_tokens"]),
        seed=0,
    )
    return cfg.with_(workload=w, sessions=session_workload(r))


@functools.lru_cache(maxsize=64)
def replay(cfg: RabitConfig) -> tuple[tuple[str, float], ...]:
    """Every metric of :data:`METRICS` from one session simulation of ``cfg`` (deterministic: seeded)."""
    from core.serving import simulate_sessions

    if cfg.sessions is None:
        raise ValueError(f"{FILE}: the case's config has no session workload")
    res = simulate_sessions(cfg, cfg.sessions).result
    ttft, itl = res.samples("ttft_s"), res.samples("itl_s")
    if ttft.size == 0 or itl.size == 0:
        raise ValueError(f"{FILE}: no turn completed in the replay of {cfg.model}")
    done = res.status == 0
    span_s = float(res.finish_s[done].max() - res.arrival_s.min())
    prompt = float(np.sum(res.input_tokens[done]))
    generated = float(np.sum(res.output_tokens[done]))
    return (
        ("ttft_mean_s", float(ttft.mean())),
        ("tpot_mean_s", float(itl.mean())),
        ("input_tokens_per_s", prompt / span_s),
        ("total_tokens_per_s", (prompt + generated) / span_s),
    )


def multiturn_predict(r: Mapping[str, str], cfg: RabitConfig) -> float:
    """The replayed value of the case's metric."""
    if r["metric"] not in METRICS:
        raise ValueError(f"{FILE}: unknown metric {r['metric']!r}; use one of {', '.join(METRICS)}")
    return dict(replay(cfg))[r["metric"]]
