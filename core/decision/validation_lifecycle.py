"""Public vLLM runs replayed as the benchmark sent them: the ``vllm-lifecycle`` validation family.

``validation/vllm_lifecycle.csv`` holds one row per run and load stage of the inference-sim/training runs
(``default_args/<run>``: vLLM V1 on H100 SXM, Llama-2-7B / 70B, Mixtral-8x7B, CodeLlama-34B, inference-perf
``shared_prefix`` workloads at one or two request rates; ``validation/convert_vllm_lifecycle.py`` built it).
Each row becomes nine cases, ``<id>-<metric>`` with ``metric`` one of :data:`LIFECYCLE_METRICS`: the end-to-end
latency, the time to first token and a request's time per output token (``itl_s``, vLLM's TPOT), each as its
mean, p90 and p99 over the stage's requests.

The replay (:func:`lifecycle_config`, :func:`replay`): one replica of ``tp`` GPUs under the run's vLLM flags
(``max_num_seqs`` -> ``max_batch``, ``max_num_batched_tokens`` -> ``token_budget``, chunked prefill -> the
``chunked`` policy, prefix caching on, preempt-and-recompute), serving the stage's requests as inference-perf sent
them: ``requests`` Poisson arrivals at ``rate_per_s`` (its ``constant`` load draws exponential gaps and scales
them to the stage's duration), every prompt ``input`` tokens, every output ``output`` tokens (``ignore_eos``).
The load generator cycles ``prompt_groups x prompts_per_group`` fixed prompts, so after the first pass every
prompt finds its own earlier copy in vLLM's prefix cache: all its full KV blocks but the one holding the last
prompt token, ``floor((input - 1) / block) x block`` tokens with vLLM's 16-token block (:data:`VLLM_BLOCK_TOKENS`;
at most :data:`MAX_CACHED_FRAC` of the prompt), one prefix group per distinct prompt.

Each stage runs on its own from an empty replica with a cold prefix cache: a second stage's first sight of each
prompt (100 requests, 1-3 % of the stage) prefills in full where the server had it cached from the first stage,
and the first stage's requests still in flight are not carried over. Percentiles are numpy's linear
interpolation, as the load generator's report computes them (inference-perf ``reportgen/base.py``). A case's
range replays the whole stage at each assumption bound (``core.decision.validation.SIMULATED_FILES``).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from core import catalog
from core.base import GROUP_DOMAINS
from core.config import RabitConfig
from core.decision.validation_files import raw_rows

FAMILY = "vllm-lifecycle"
FILE = "vllm_lifecycle.csv"
#: The metrics of one row, ``<latency>.<statistic>``; their measured column is :data:`COLUMN_OF`.
LIFECYCLE_METRICS = tuple(f"{m}.{s}" for m in ("e2e_s", "ttft_s", "itl_s") for s in ("mean", "p90", "p99"))
COLUMN_OF = {m: f"{m.split('_s.')[0]}_{m.split('.')[1]}_s" for m in LIFECYCLE_METRICS}
#: The targets the family is held to: median |error| of the mean E2E and of the mean TTFT at every stage.
TARGETS = {"e2e_s.mean": 0.10, "ttft_s.mean": 0.20}
#: vLLM's KV block (``--block-size`` default on CUDA): the prefix cache keeps only full blocks.
VLLM_BLOCK_TOKENS = 16
#: The largest cached share of a prompt the simulator takes (``workload.prefix_cache_frac``): a 786-token prompt
#: caches 784 tokens in vLLM, 778 here (6 more tokens prefilled, well under a millisecond on these GPUs).
MAX_CACHED_FRAC = GROUP_DOMAINS["workload.prefix_cache_frac"].hi
_INTS = ("gpus", "tp", "max_num_seqs", "max_num_batched_tokens", "requests", "input", "output")
_INTS_OPT = ("prompt_groups", "prompts_per_group", "stage")
_FLOATS = ("rate_per_s", "duration_s", *COLUMN_OF.values())
_FLAGS = ("chunked_prefill", "prefix_caching")


def _bad(r: Mapping[str, str], col: str, why: str) -> ValueError:
    return ValueError(f"{FILE}: row {r.get('id') or '?'}: column {col!r} {why}")


def check_row(r: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the row and the column when a row cannot be replayed."""
    for col in ("family", "id", "model", "gpu", "arrival", "source", "date", *_INTS, *_FLOATS, *_FLAGS):
        if not (r.get(col) or "").strip():
            raise _bad(r, col, "is empty")
    _check_counts(r)
    _check_figures(r)
    for col in _FLAGS:
        if r[col] not in ("0", "1"):
            raise _bad(r, col, f"must be 0 or 1, got {r[col]!r}")
    _check_run(r)


def _check_counts(r: Mapping[str, str]) -> None:
    """The whole-number columns (and the optional ones given): at least 1 (a stage from 0)."""
    for col in _INTS + tuple(c for c in _INTS_OPT if r.get(c)):
        try:
            v = int(r[col])
        except ValueError:
            raise _bad(r, col, f"must be a whole number, got {r[col]!r}") from None
        if v < (0 if col == "stage" else 1):
            raise _bad(r, col, f"must be at least {0 if col == 'stage' else 1}, got {v}")


def _check_figures(r: Mapping[str, str]) -> None:
    """The rate, the duration and the measured columns: positive finite numbers."""
    for col in _FLOATS:
        try:
            x = float(r[col])
        except ValueError:
            raise _bad(r, col, f"must be a number, got {r[col]!r}") from None
        if not x > 0 or not np.isfinite(x):
            raise _bad(r, col, f"must be a positive number, got {r[col]!r}")


def _check_run(r: Mapping[str, str]) -> None:
    """What the replay can run: Poisson arrivals, two output tokens or more, one replica, catalog parts."""
    if r["arrival"] != "poisson":
        raise _bad(r, "arrival", f"must be 'poisson' (the load generator's gaps), got {r['arrival']!r}")
    if int(r["output"]) < 2:
        raise _bad(r, "output", "must be at least 2 tokens (a time per output token needs two)")
    if int(r["gpus"]) != int(r["tp"]):
        raise _bad(r, "gpus", f"must equal tp (one replica), got {r['gpus']} GPUs at TP {r['tp']}")
    if r["model"] not in catalog.models():
        raise _bad(r, "model", f"is not a catalog model: {r['model']!r}")
    if r["gpu"] not in catalog.gpus():
        raise _bad(r, "gpu", f"is not a catalog GPU: {r['gpu']!r}")


def expand(rows: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """One case per row and metric: the row's fields with ``id`` ``<id>-<metric>``, ``metric`` and ``measured``."""
    out = []
    for r in rows:
        check_row(r)
        for m in LIFECYCLE_METRICS:
            out.append({**r, "id": f"{r['id']}-{m}", "row_id": r["id"], "metric": m, "measured": r[COLUMN_OF[m]]})
    return out


def cached_prefix_tokens(prompt_tokens: int, block_tokens: int = VLLM_BLOCK_TOKENS) -> int:
    """Prompt tokens a repeated prompt finds in vLLM's prefix cache [tokens]: its full blocks, less the block of
    the last token, which is always computed (it yields the first output token's logits).

    .. math:: \\lfloor (I - 1) / b \\rfloor \\, b

    592 tokens in 16-token blocks: floor(591 / 16) x 16 = 36 x 16 = 576.
    """
    return (prompt_tokens - 1) // block_tokens * block_tokens


def lifecycle_config(r: Mapping[str, str]) -> RabitConfig:
    """The run's replica and the stage's workload (module docstring)."""
    tp, prompt = int(r["tp"]), int(r["input"])
    cfg = RabitConfig(
        model=r["model"],
        gpu=r["gpu"],
        gpus_per_node=tp,
        nodes=1,
        tp=tp,
        pp=1,
        weights=r["weights"] or "bf16",
        kv_dtype=r["kv_dtype"] or "bf16",
        batch=1,
        input_tokens=prompt,
        output_tokens=int(r["output"]),
    )
    caching = r["prefix_caching"] == "1"
    distinct = int(r["prompt_groups"] or 1) * int(r["prompts_per_group"] or 1)
    w = cfg.workload.with_(
        engine=r["engine"] or "vllm",
        policy="chunked" if r["chunked_prefill"] == "1" else "prefill_priority",
        admission="preempt",
        prefix_caching=caching,
        max_batch=int(r["max_num_seqs"]),
        token_budget=max(int(r["max_num_batched_tokens"]), int(r["max_num_seqs"])),
        arrival="poisson",
        rate_per_s=float(r["rate_per_s"]),
        num_requests=int(r["requests"]),
        duration_s=None,
        lengths="fixed",
        prefix_cache_frac=min(cached_prefix_tokens(prompt) / prompt, MAX_CACHED_FRAC) if caching else 0.0,
        prefix_groups=distinct,
        seed=0,
    )
    return cfg.with_(workload=w)


@functools.lru_cache(maxsize=2048)
def replay(cfg: RabitConfig) -> tuple[tuple[str, float], ...]:
    """Every metric of :data:`LIFECYCLE_METRICS` from one simulation of ``cfg`` (deterministic: seeded)."""
    from core import serving

    # the deployment's simulator: it routes each request with its prompt's prefix group and finds the group's
    # blocks cached on the replica that served it before (the one-replica loop does not share prefixes)
    res = serving.simulate_deployment(cfg, serving.sim_spec(cfg)).result
    out = []
    for key in ("e2e_s", "ttft_s", "itl_s"):
        x = res.samples(key)
        if x.size == 0:
            raise ValueError(
                f"{FILE}: no request completed in the replay of {cfg.model} at {cfg.workload.rate_per_s}/s"
            )
        p90, p99 = (float(v) for v in np.percentile(x, [90, 99]))
        out += [(f"{key}.mean", float(x.mean())), (f"{key}.p90", p90), (f"{key}.p99", p99)]
    return tuple(out)


def lifecycle_predict(r: Mapping[str, str], cfg: RabitConfig) -> float:
    """The replayed value of the case's metric."""
    if r["metric"] not in LIFECYCLE_METRICS:
        raise ValueError(f"{FILE}: unknown metric {r['metric']!r}; use one of {', '.join(LIFECYCLE_METRICS)}")
    return dict(replay(cfg))[r["metric"]]


def breakdown(cases: Iterable[Any]) -> dict[str, Any]:
    """Per run and stage the nine metrics (measured, predicted, error), and the family's median |error| per
    metric, over all stages and per stage index (``stage_0`` is each run's lower rate, ``stage_1`` its higher one);
    ``targets``: each of :data:`TARGETS` with whether the median of every stage index meets it.

    ``cases``: :class:`core.decision.validation.CaseResult` (cases of other families are skipped).
    """
    rows = {r["id"]: r for r in raw_rows(FILE)}
    runs: dict[str, dict[str, Any]] = {}
    errs: dict[str, list[float]] = {}
    by_stage: dict[str, dict[str, list[float]]] = {}
    for c in cases:
        if c.family != FAMILY:
            continue
        row_id, metric = c.id.rsplit("-", 1)
        r = rows[row_id]
        run = runs.setdefault(
            row_id,
            {
                "run": r["run"],
                "stage": int(r["stage"]),
                "model": r["model"],
                "gpu": r["gpu"],
                "tp": int(r["tp"]),
                "rate_per_s": float(r["rate_per_s"]),
                "metrics": {},
            },
        )
        run["metrics"][metric] = {"measured": c.measured, "predicted": c.predicted, "error": c.error}
        errs.setdefault(metric, []).append(abs(c.error))
        by_stage.setdefault(f"stage_{r['stage']}", {}).setdefault(metric, []).append(abs(c.error))
    stage_medians = {s: {m: statistics.median(v) for m, v in ms.items()} for s, ms in sorted(by_stage.items())}
    targets = {}
    for m, limit in TARGETS.items():
        per_stage = [sm[m] for sm in stage_medians.values() if m in sm]
        targets[m] = {"median_abs_error_max": limit, "meets": bool(per_stage) and max(per_stage) <= limit}
    return {
        "runs": runs,
        "median_abs_error": {m: statistics.median(v) for m, v in errs.items()},
        "median_abs_error_by_stage": stage_medians,
        "targets": targets,
    }
