"""The serving workload (frozen): how requests arrive, how long they are, how one replica schedules them, and
the draws they imply.

One model: :class:`ServingLoad` holds every arrival and scheduler field with its one default and its one domain
(:data:`core.base.limits.GROUP_DOMAINS`, ``workload.*``). The shared config's ``workload`` group
(:class:`core.config.settings.Workload`) adds how the lengths spread around the config's mean prompt and output
tokens; the simulator's :class:`SimSpec` adds the resolved length distributions (or a replayed trace).
:func:`core.serving.simulation.sim_spec` turns the first into the second, field for field. The config says
*what* runs *where*; the workload says *how requests arrive*, *how long they are* and *how the engine
schedules them*. Both are frozen and hashable, so ``st.cache_data`` keys on the pair.

Length distributions (token counts, integers >= 1, clipped at ``max_tokens``):

* ``fixed``: every request has ``mean`` tokens.
* ``uniform``: integers uniform on ``[mean (1 - spread), mean (1 + spread)]``, ``0 <= spread <= 1``.
* ``lognormal``: ``exp(N(mu, sigma))`` with ``sigma = spread`` and ``mu = ln(mean) - sigma^2 / 2``, so the
  mean before clipping and rounding is ``mean``. The default clip is the 4-sigma quantile
  ``exp(mu + 4 sigma)`` (0.003 % of draws are clipped).
* a replayed trace: rows of (input, output) tokens, used in order and cycled.

Arrivals: ``poisson`` at ``rate_per_s`` (exponential gaps), or ``closed`` loop: ``users`` each send a
request, wait for its end (completion, rejection or timeout), think for an exponential time of mean
``think_s`` and send the next. The run stops issuing after ``num_requests`` requests or at
``duration_s`` (whichever is first) and then drains.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from core.base import (
    GROUP_DOMAINS,
    MAX_JSON_DEPTH,
    Admission,
    Arrival,
    LengthKind,
    SchedulerPolicy,
    in_domain,
    json_depth,
    kept,
    unique_object,
    validated_copy,
)

#: vLLM engine defaults (docs.vllm.ai, engine arguments): max_num_seqs = 256 and, for the V1
#: OpenAI server on large GPUs, max_num_batched_tokens = 8192.
DEFAULT_MAX_BATCH = 256
DEFAULT_TOKEN_BUDGET = 8192
#: The mean prompt and output lengths of the shared config (``input_tokens``, ``output_tokens``) and of a
#: workload built without them [tokens]: the textbook example's 4,096 / 4,096.
DEFAULT_INPUT_TOKENS = 4096
DEFAULT_OUTPUT_TOKENS = 4096
#: How far lengths spread around their means: lognormal sigma, or uniform relative half-width.
DEFAULT_LENGTH_SPREAD = 0.5
#: The clip of a lognormal length, in standard deviations of the underlying normal.
LOGNORMAL_CLIP_SIGMAS = 4.0


class Lengths(BaseModel):
    """A distribution of token counts (prompt or output) [tokens]."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LengthKind = "fixed"
    mean: float = Field(DEFAULT_INPUT_TOKENS, ge=1)
    spread: float = Field(DEFAULT_LENGTH_SPREAD, ge=0)  # uniform: relative half-width (<= 1); lognormal: sigma
    max_tokens: int | None = Field(None, ge=1)  # clip; default: see :meth:`upper`

    @model_validator(mode="after")
    def _check(self) -> "Lengths":
        if self.kind == "uniform" and self.spread > 1:
            raise ValueError("a uniform spread is a relative half-width and must be at most 1")
        if self.kind == "lognormal" and self.spread > 3:
            raise ValueError("a lognormal spread (sigma) above 3 is not a usable length distribution")
        return self

    def upper(self) -> int:
        """The largest length this distribution can draw [tokens] (what a client sets as max_tokens)."""
        if self.kind == "fixed":
            hi = round(self.mean)
        elif self.kind == "uniform":
            hi = round(self.mean * (1 + self.spread))
        else:
            s = self.spread
            hi = math.ceil(self.mean * math.exp(-s * s / 2 + LOGNORMAL_CLIP_SIGMAS * s))
        hi = max(1, hi)
        return min(hi, self.max_tokens) if self.max_tokens else hi

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths >= 1 [tokens]."""
        hi = self.upper()
        if self.kind == "fixed":
            return np.full(n, hi, dtype=np.int64)
        if self.kind == "uniform":
            lo = max(1, round(self.mean * (1 - self.spread)))
            return rng.integers(min(lo, hi), hi + 1, size=n, dtype=np.int64)
        s = self.spread
        x = rng.lognormal(math.log(self.mean) - s * s / 2, s, size=n)
        return np.clip(np.rint(x), 1, hi).astype(np.int64)


class ServingLoad(BaseModel):
    """How requests arrive and how one replica schedules them: the fields the shared config's workload and the
    simulator's :class:`SimSpec` have in common, each with its one default. Times in seconds.

    Each numeric field lies in its domain ``workload.<field>`` of :data:`core.base.limits.GROUP_DOMAINS` (shared
    with the page widgets and the CLI flags).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # arrivals
    arrival: Arrival = "poisson"
    # Poisson arrival rate [requests/s]. The default is a round rate clearly inside the closed-form capacity of
    # the default deployment (Llama-3.1-70B, TP 8 on H100 SXM, 4,096/4,096 tokens: about 1.44 requests/s), so the
    # first page a user opens shows a stable replica rather than a runaway queue.
    rate_per_s: float = 0.5
    users: int = 16  # closed loop: concurrent users
    think_s: float = 0.0  # closed loop: mean think time between a response and the next request
    num_requests: int | None = 1000
    duration_s: float | None = None  # stop issuing after this long
    # scheduler
    policy: SchedulerPolicy = "chunked"
    token_budget: int = DEFAULT_TOKEN_BUDGET  # tokens per iteration (max_num_batched_tokens)
    max_batch: int = DEFAULT_MAX_BATCH  # running sequences (max_num_seqs)
    admission: Admission = "preempt"
    # a preempted request's full KV blocks stay in the prefix cache until other allocations evict them, so its
    # re-admission recomputes only what was evicted (vLLM V1 enable_prefix_caching, on by default; SGLang's
    # radix cache; TensorRT-LLM's KV block reuse). Off: recompute from scratch (vLLM V0 without the cache).
    prefix_caching: bool = True
    # vLLM V1's asynchronous scheduling (``--async-scheduling``, on by default since vLLM 0.12): the scheduler plans
    # iteration k+1 while iteration k runs (vllm/v1/engine/core.py ``step_with_batch_queue``, a batch queue of two;
    # vllm/v1/core/sched/async_scheduler.py), so a request that arrives during iteration k is first seen when k+2 is
    # planned and runs from the end of k+1; an idle engine plans at once. Off: each plan sees every arrival up to
    # the end of the previous iteration.
    async_scheduling: bool = True
    timeout_s: float | None = None  # a request not finished this long after arrival is cancelled
    kv_pool_tokens: int | None = None  # override of the KV pool size (what-if); default: from memory
    seed: int = 0
    # shared prefixes: each request belongs to one of ``prefix_groups`` groups (drawn uniformly, seeded) whose
    # first ``prefix_cache_frac`` of the prompt is the same for every request of the group (a system prompt, a
    # document); a replica that has already served the group finds those tokens in its prefix cache
    prefix_cache_frac: float = 0.0
    prefix_groups: int = 32

    @field_validator(
        *(k.removeprefix("workload.") for k in GROUP_DOMAINS if k.startswith("workload.")),
        mode="before",
        check_fields=False,  # the config's workload adds ``spread``
    )
    @classmethod
    def _in_domain(cls, v: Any, info: ValidationInfo) -> Any:
        return v if kept(cls, info) else in_domain(f"workload.{info.field_name}", v)

    def with_(self, **changes: Any) -> Self:
        """A validated copy with some fields changed."""
        return validated_copy(self, changes)

    @model_validator(mode="after")
    def _issues_requests(self) -> "ServingLoad":
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give a number of requests or a duration")
        return self


#: The fields a :class:`SimSpec` takes from the shared config's workload as they are.
LOAD_FIELDS = tuple(ServingLoad.model_fields)


class SimSpec(ServingLoad):
    """Arrivals, lengths and scheduler of one simulated replica (frozen, hashable).

    Times in seconds, lengths in tokens. Built without lengths, it is the default config's workload.
    """

    # lengths
    input: Lengths = Lengths(kind="fixed", mean=DEFAULT_INPUT_TOKENS)
    output: Lengths = Lengths(kind="fixed", mean=DEFAULT_OUTPUT_TOKENS)
    trace: tuple[tuple[int, int], ...] | None = None  # replayed (input, output) rows; wins over the distributions
    #: the adapter each replayed row names (0-based, hottest first; cycled like the rows); None: drawn from the
    #: config's adapter popularity (core.config.adapters)
    adapter_trace: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> "SimSpec":
        if self.token_budget < self.max_batch:
            raise ValueError(
                f"token_budget ({self.token_budget}) must be at least max_batch ({self.max_batch}): "
                "every running sequence needs one token of the budget per iteration"
            )
        if self.trace is not None:
            if not self.trace:
                raise ValueError("the trace has no rows")
            for i, (a, b) in enumerate(self.trace):
                if a < 1 or b < 1:
                    raise ValueError(f"trace row {i + 1}: input and output tokens must be at least 1")
        return self

    def max_output_tokens(self) -> int:
        """What a client asks for as max_tokens: the largest output the workload can draw [tokens]."""
        if self.trace is not None:
            return max(b for _, b in self.trace)
        return self.output.upper()

    def mean_lengths(self) -> tuple[float, float]:
        """(mean input, mean output) tokens of the workload (after clipping for traces only)."""
        if self.trace is not None:
            arr = np.asarray(self.trace, dtype=float)
            return float(arr[:, 0].mean()), float(arr[:, 1].mean())
        return float(self.input.mean), float(self.output.mean)


# --- draws -----------------------------------------------------------------------------------------

CHUNK = 8192


class Draws:
    """Per-request random draws, indexed by request number, produced in fixed-size chunks.

    Every draw comes from the one injected generator in a fixed order (gaps, inputs, outputs per
    chunk), so the same spec and seed give the same numbers whatever the run's length.
    """

    def __init__(self, spec: SimSpec, rng: np.random.Generator) -> None:
        self.spec, self.rng = spec, rng
        self.inp: list[int] = []
        self.out: list[int] = []
        self.gaps: list[float] = []
        # all requests in one draw when their number is the only limit; chunks when a duration may end it early
        self._extend(spec.num_requests if spec.num_requests is not None and spec.duration_s is None else CHUNK)

    def _extend(self, n: int) -> None:
        s = self.spec
        mean_gap = (1.0 / s.rate_per_s) if s.arrival == "poisson" else s.think_s
        gaps = self.rng.exponential(mean_gap, size=n) if mean_gap > 0 else np.zeros(n)
        if s.trace is not None:
            start = len(self.inp)
            rows = np.asarray(s.trace, dtype=np.int64)
            idx = (start + np.arange(n)) % len(rows)
            inp, out = rows[idx, 0], rows[idx, 1]
        else:
            inp, out = s.input.draw(self.rng, n), s.output.draw(self.rng, n)
        self.gaps.extend(gaps.tolist())
        self.inp.extend(inp.tolist())
        self.out.extend(out.tolist())

    def ensure(self, n: int) -> None:
        while len(self.inp) < n:
            self._extend(CHUNK)


# --- trace upload ----------------------------------------------------------------------------------

INPUT_COLUMNS = (
    "input_tokens",
    "input_len",
    "input_length",
    "prompt_tokens",
    "prompt_len",
    "prompt_length",
    "num_prompt_tokens",
    "input",
    "prompt",
)
OUTPUT_COLUMNS = (
    "output_tokens",
    "output_len",
    "output_length",
    "completion_tokens",
    "response_len",
    "response_tokens",
    "num_output_tokens",
    "generated_tokens",
    "output",
    "completion",
    "response",
)
#: A column naming each request's adapter (a vLLM benchmark's ``model`` field names the LoRA it asked for).
ADAPTER_COLUMNS = ("adapter", "adapter_name", "lora", "lora_name", "lora_id", "model")
MAX_TRACE_ROWS = 1_000_000
#: One request's tokens: the longest context in the catalogs (core.base.limits, input_tokens).
MAX_TRACE_TOKENS = 10_000_000


def _pick(names: list[str], wanted: tuple[str, ...], what: str) -> str:
    low = {n.strip().lower(): n for n in names}
    for w in wanted:
        if w in low:
            return low[w]
    raise ValueError(f"no {what} column: expected one of {', '.join(wanted)}; found {', '.join(names) or 'none'}")


def _as_tokens(v: object, where: str, col: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{where}: {col} must be a whole number of tokens, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {col} must be a whole number of tokens, got {v!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"{where}: {col} must be a whole number of tokens, got {v!r}")
    if f < 1:
        raise ValueError(f"{where}: {col} must be at least 1, got {int(f)}")
    if f > MAX_TRACE_TOKENS:
        raise ValueError(
            f"{where}: {col} must be at most {MAX_TRACE_TOKENS:,} tokens (the longest catalog context), got {v!r}"
        )
    return int(f)


def _csv_rows(reader: csv.DictReader):
    """The rows of ``reader``; a malformed row (a field over the csv module's limit) is a ValueError."""
    try:
        yield from reader
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: not readable CSV ({exc})") from None


def parse_trace_adapters(text: str) -> tuple[int, ...] | None:
    """The adapter each row of a trace names, as indices hottest first (the most frequent name is 0), or None when
    the trace has no adapter column (:data:`ADAPTER_COLUMNS`). Rows as :func:`parse_trace` reads them."""
    text = text.lstrip("\ufeff").strip()
    names: list[str] = []
    if text[:1] in "{[":
        if text[0] == "[":
            try:
                records = json.loads(text)
            except json.JSONDecodeError:
                return None
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        for rec in records:
            if not isinstance(rec, dict):
                return None
            col = next((c for c in rec if c.strip().lower() in ADAPTER_COLUMNS), None)
            if col is None:
                return None
            names.append(str(rec[col]))
    else:
        reader = csv.DictReader(io.StringIO(text))
        fields = [n for n in (reader.fieldnames or []) if n is not None]
        col = next((c for c in fields if c.strip().lower() in ADAPTER_COLUMNS), None)
        if col is None:
            return None
        names = [str(rec.get(col) or "") for rec in _csv_rows(reader)]
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    order = {n: i for i, n in enumerate(sorted(counts, key=lambda n: (-counts[n], n)))}
    return tuple(order[n] for n in names) if names else None


def parse_trace(text: str) -> tuple[tuple[int, int], ...]:
    """Rows of (input tokens, output tokens) from a CSV (with a header) or JSON-lines text.

    Recognised columns (case-insensitive): input ``input_tokens``, ``input_len``, ``prompt_tokens``,
    ``prompt_len`` ...; output ``output_tokens``, ``output_len``, ``completion_tokens`` ... (a
    ShareGPT-style export with token counts per conversation). Raises ``ValueError`` naming the line
    and the column of the first bad value.
    """
    text = text.lstrip("\ufeff").strip()
    if not text:
        raise ValueError("the trace is empty")
    if text[0] in "{[" and json_depth(text) > MAX_JSON_DEPTH:  # checked before parsing (no RecursionError)
        raise ValueError(f"the trace nests deeper than {MAX_JSON_DEPTH} levels; expected flat records")
    rows = _json_trace_rows(*_json_records(text)) if text[0] in "{[" else _csv_trace_rows(text)
    if not rows:
        raise ValueError("the trace has a header but no rows")
    return tuple(rows)


def _json_records(text: str) -> tuple[list[tuple[int, Any]], str]:
    """(numbered records, what a number counts) of a JSON array (``record`` n) or JSON lines (``line`` n); a key
    given twice is refused."""
    if text[0] == "[":
        try:
            records = json.loads(text, object_pairs_hook=unique_object)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(records, list):
            raise ValueError("expected a JSON array of records with input and output token counts")
        return list(enumerate(records, start=1)), "record"
    items = []
    for ln, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((ln, json.loads(line, object_pairs_hook=unique_object)))
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {ln}: not valid JSON ({exc.msg})") from None
        except ValueError as exc:  # a key given twice
            raise ValueError(f"line {ln}: {exc}") from None
    return items, "line"


def _json_trace_rows(items: list[tuple[int, Any]], label: str) -> list[tuple[int, int]]:
    """Each record's (input, output) tokens, read from the columns it names; at most :data:`MAX_TRACE_ROWS`."""
    rows: list[tuple[int, int]] = []
    for ln, rec in items:
        if not isinstance(rec, dict):
            raise ValueError(f"{label} {ln}: expected an object with input and output token counts")
        ci = _pick(list(rec), INPUT_COLUMNS, "input-length")
        co = _pick(list(rec), OUTPUT_COLUMNS, "output-length")
        rows.append((_as_tokens(rec[ci], f"{label} {ln}", ci), _as_tokens(rec[co], f"{label} {ln}", co)))
        if len(rows) > MAX_TRACE_ROWS:
            raise ValueError(f"the trace has more than {MAX_TRACE_ROWS:,} rows")
    return rows


def _csv_trace_rows(text: str) -> list[tuple[int, int]]:
    """Each CSV line's (input, output) tokens under the header's columns (two columns of one name refused); at
    most :data:`MAX_TRACE_ROWS`."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        names = [n for n in (reader.fieldnames or []) if n is not None]
    except csv.Error as exc:
        raise ValueError(f"line 1: not a readable CSV header ({exc})") from None
    seen: dict[str, int] = {}
    for col, n in enumerate(names, 1):
        key = n.strip().lower()
        if key in seen:  # csv would keep the last column of the name without a word
            raise ValueError(f"line 1: columns {seen[key]} and {col} are both named {n.strip()!r}")
        seen[key] = col
    ci = _pick(names, INPUT_COLUMNS, "input-length")
    co = _pick(names, OUTPUT_COLUMNS, "output-length")
    rows: list[tuple[int, int]] = []
    for rec in _csv_rows(reader):
        ln = reader.line_num
        rows.append((_as_tokens(rec.get(ci), f"line {ln}", ci), _as_tokens(rec.get(co), f"line {ln}", co)))
        if len(rows) > MAX_TRACE_ROWS:
            raise ValueError(f"the trace has more than {MAX_TRACE_ROWS:,} rows")
    return rows
