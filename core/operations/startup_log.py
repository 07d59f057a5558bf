"""An engine's start-up log as evidence: the memory numbers vLLM and SGLang print, and how a start-up failed.

vLLM and SGLang say what they did with memory when they start. :func:`parse_log` reads those lines into a
frozen :class:`StartupLog` (every size in bytes, every count in tokens), names what it did not find, and
classifies an out-of-memory failure in the log as a *start-up* failure (profiling, the weights or the KV
reservation did not fit) or a failure *under load* (after the server was up: a batch or prompt past what the
profile reserved). Nothing here predicts; :mod:`core.operations.log_compare` sets the numbers beside RA-BIT's
prediction and :mod:`core.operations.oom` ranks the remedies.

The format strings, as the engines' sources print them (read from the PyPI wheels; vLLM divides by 2**30 in
every version, labelled ``GB`` up to about 0.8 and ``GiB`` since; SGLang prints ``GB`` but divides by
``1 << 30``, so every size below is GiB):

vLLM, V1 engine (0.8.5 ... 0.26):
  ``Model loading took %.4f GiB and %.6f seconds`` (``v1/worker/gpu_model_runner.py``; per worker, i.e.
  per GPU; 0.12 adds ``memory``, 0.14 prints ``format_gib``, two decimals), ``Available KV cache memory: %.2f
  GiB`` (``v1/worker/gpu_worker.py``; per worker; negative when the weights and the profiled peak exceed the
  budget), ``GPU KV cache size: %s tokens`` (``v1/core/kv_cache_utils.py``, thousands separators; tokens of
  the whole tensor-parallel group), ``Maximum concurrency for %s tokens per request: %.2fx``; 0.33 prints
  the last two on one line. Flags: ``non-default args: {...}`` and ``Chunked prefill is enabled with
  max_num_batched_tokens=N``, ``Using max model len N``.
vLLM, V0 engine (0.6.x): ``Loading model weights took %.4f GB``, ``# GPU blocks: %d, # CPU blocks: %d``
  (``executor/gpu_executor.py``; tokens = blocks x block size, 16 by default), ``Maximum concurrency for %s
  tokens per request: %.2fx`` and ``Memory profiling results: total_gpu_memory=...GiB ...
  kv_cache_size=...GiB gpu_memory_utilization=...`` (``worker/worker.py``).
SGLang (0.4.1 ... 0.5.x, ``python/sglang/srt/model_executor/model_runner.py``, ``mem_cache/memory_pool.py``,
  ``managers/scheduler.py``): ``Load weight begin. avail mem=%.2f GB``, ``Load weight end. ... avail mem=%.2f
  GB[, mem usage=%.2f GB]`` (0.4.1 has no ``mem usage``: the weights are the drop in available memory),
  ``KV Cache is allocated. [dtype: ..., ][#tokens: N, ]K size: %.2f GB, V size: %.2f GB`` (MLA: ``KV size``),
  ``Memory pool end. avail mem=%.2f GB`` and ``max_total_num_tokens=N, [chunked_prefill_size=N, ]
  max_prefill_tokens=N, max_running_requests=N, context_len=N[, available_gpu_mem=...]``.

A number is matched only with the text that follows it (``tokens``, ``GiB``, ``x``), so a line cut inside a
number is not read as a smaller one. Where a number appears more than once (a tensor-parallel group prints
it per worker, a restarted server again) the last one counts.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from core.base import MAX_LOG_BYTES, GiB, PayloadError, decode_text

Engine = Literal["vllm", "sglang"]
Phase = Literal["start-up", "under load"]

#: The numbers a comparison is made of (``rabit memory --log FILE --json``'s ``log`` keys, a contract).
NUMBERS = ("weights_bytes", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "context_tokens")
#: What each number is, on screen.
NUMBER_TEXT = {
    "weights_bytes": "weights per GPU",
    "kv_cache_bytes": "KV cache memory per GPU",
    "kv_cache_tokens": "KV cache size (tokens)",
    "max_concurrency": "maximum concurrency at the context length",
    "context_tokens": "context length (max model len)",
}
#: vLLM's default block size (``--block-size``, CacheConfig: 16 on CUDA).
VLLM_DEFAULT_BLOCK = 16


def number_text(key: str, value: float | None) -> str:
    """One of :data:`NUMBERS` as a person reads it: sizes in GiB (as the engines print them), counts whole."""
    if value is None:
        return "-"
    if key.endswith("_bytes"):
        return f"{value / GiB:,.2f} GiB"
    return f"{value:,.2f}" if key == "max_concurrency" else f"{value:,.0f}"


class LogError(ValueError):
    """A text that cannot be read as a start-up log; the message says why, in one line."""


class Failure(BaseModel):
    """An out-of-memory (or KV-does-not-fit) failure found in the log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phase: Phase
    #: ``kv-negative`` (no memory left for the KV cache), ``context-too-long`` (the KV cache holds fewer tokens
    #: than one request of the max model len), ``memory-in-use`` (another process holds GPU memory),
    #: ``cuda-oom`` (the allocator ran out), ``request-slots`` (SGLang's request table is full)
    kind: str
    stage: str  # where in the start-up (or "serving requests") it happened
    line: str  # the line that says so (trimmed)
    line_no: int
    #: numbers the failure message gives (bytes / tokens): needed_tokens, kv_tokens, needed_kv_bytes,
    #: available_kv_bytes, estimated_max_len, tried_bytes, total_bytes, free_bytes, reserved_unallocated_bytes,
    #: requested_util
    numbers: dict[str, float] = {}


class StartupLog(BaseModel):
    """What a vLLM or SGLang start-up log says about memory (bytes per GPU unless named otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Engine
    version: str  # as printed, or the format era when the log does not print it
    weights_bytes: float | None = None
    kv_cache_bytes: float | None = None  # per GPU
    kv_cache_tokens: int | None = None  # the whole replica (every GPU holds its shard of each token)
    max_concurrency: float | None = None
    context_tokens: int | None = None
    # the flags the log shows (None: not in the log)
    gpu_memory_utilization: float | None = None  # vLLM --gpu-memory-utilization / SGLang --mem-fraction-static
    token_budget: int | None = None  # --max-num-batched-tokens / --chunked-prefill-size
    max_num_seqs: int | None = None  # --max-num-seqs / --max-running-requests
    tp: int | None = None
    kv_dtype: str | None = None
    block_size: int | None = None
    model: str | None = None  # the model name or path the engine loaded
    total_memory_bytes: float | None = None  # the GPU's total memory, when the log prints it
    cuda_graph_bytes: float | None = None
    #: the numbers of :data:`NUMBERS` the log does not state in a form RA-BIT reads
    unrecognised: tuple[str, ...] = ()
    #: the numbers of :data:`NUMBERS` computed from others (SGLang's concurrency = tokens / context length)
    derived: tuple[str, ...] = ()
    #: number -> (line number, line) it was read from
    evidence: dict[str, tuple[int, str]] = {}
    failure: Failure | None = None

    def numbers(self) -> dict[str, float | int | None]:
        """The five numbers of :data:`NUMBERS` (None where the log has none)."""
        return {k: getattr(self, k) for k in NUMBERS}

    def as_json(self) -> dict:
        """``rabit memory --log FILE --json``'s ``log`` object (the five numbers and ``unrecognised`` are a
        contract; the rest is added)."""
        out: dict = {k: getattr(self, k) for k in NUMBERS}
        out["unrecognised"] = list(self.unrecognised)
        out.update(
            engine=self.engine,
            version=self.version,
            derived=list(self.derived),
            flags={
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "token_budget": self.token_budget,
                "max_num_seqs": self.max_num_seqs,
                "tp": self.tp,
                "kv_dtype": self.kv_dtype,
                "block_size": self.block_size,
            },
            model=self.model,
            cuda_graph_bytes=self.cuda_graph_bytes,
            failure=None if self.failure is None else self.failure.model_dump(),
        )
        return out


# --- patterns ------------------------------------------------------------------------------------------

_NUM = r"(-?\d+(?:\.\d+)?)"
_INT = r"(\d[\d,]*)"
_UNIT = r"\s*(GiB|GB|MiB|MB)"

_VLLM_MARKERS = (
    "vLLM API server version",
    "Initializing a V1 LLM engine",
    "Initializing an LLM engine",
    "Model loading took",
    "Loading model weights took",
    "GPU KV cache size",
    "# GPU blocks",
    "Available KV cache memory",
    "vllm.entrypoints",
    "MQLLMEngine",
    "EngineCore",
)
_SGLANG_MARKERS = (
    "server_args=ServerArgs(",
    "Load weight begin.",
    "Load weight end.",
    "KV Cache is allocated.",
    "Memory pool end.",
    "max_total_num_tokens=",
    "sglang",
)

#: Lines that say the server is up and serving (an OOM after one of them is a failure under load).
_READY = (
    "Starting vLLM API server",
    "Application startup complete",
    "Uvicorn running on",
    "The server is fired up",
    "Added request",
    "POST /v1/",
    "POST /generate",
    "Prefill batch",
    "Decode batch",
    "Avg prompt throughput",
    "Engine 000: Avg",
)
#: Start-up stages, in the order they come: (marker, stage name after it).
_STAGES = (
    ("Load weight begin", "loading the weights"),
    ("Starting to load model", "loading the weights"),
    ("Loading model weights took", "profiling the memory (one forward pass of the largest iteration)"),
    ("Model loading took", "profiling the memory (one forward pass of the largest iteration)"),
    ("Load weight end", "allocating the KV cache"),
    ("Available KV cache memory", "allocating the KV cache"),
    ("# GPU blocks", "allocating the KV cache"),
    ("GPU KV cache size", "allocating the KV cache"),
    ("Memory pool end", "capturing CUDA graphs"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Capture cuda graph begin", "capturing CUDA graphs"),
    ("Capturing the model for CUDA graphs", "capturing CUDA graphs"),
    ("Graph capturing finished", "starting the server"),
    ("Capture cuda graph end", "starting the server"),
    ("max_total_num_tokens=", "starting the server"),
)


#: The stage a failure of each kind happens in, whatever line came before it.
_KIND_STAGE = {
    "kv-negative": "sizing the KV cache after the memory profile",
    "context-too-long": "sizing the KV cache after the memory profile",
    "memory-in-use": "checking the GPU's free memory before loading",
}


def _bytes(value: str, unit: str) -> float:
    return float(value) * (2.0**20 if unit in ("MiB", "MB") else GiB)


def _tokens(s: str) -> int:
    return int(s.replace(",", ""))


class _Found:
    """The last match of each number, with its line."""

    def __init__(self) -> None:
        self.values: dict[str, float | int | str] = {}
        self.where: dict[str, tuple[int, str]] = {}

    def put(self, key: str, value: float | int | str, no: int, line: str) -> None:
        self.values[key] = value
        self.where[key] = (no, line.strip()[:300])

    def get(self, key: str):
        return self.values.get(key)


def _engine_of(lines: list[str]) -> Engine | None:
    head = "\n".join(lines[:4000])
    v = sum(head.count(m) for m in _VLLM_MARKERS)
    s = sum(head.count(m) for m in _SGLANG_MARKERS if m != "sglang") + (2 if "sglang." in head else 0)
    if v == 0 and s == 0:
        text = "\n".join(lines)
        v = sum(text.count(m) for m in _VLLM_MARKERS)
        s = sum(text.count(m) for m in _SGLANG_MARKERS if m != "sglang")
    if v == 0 and s == 0:
        return None
    return "vllm" if v >= s else "sglang"


def _flag(text: str, names: tuple[str, ...], number: str = _NUM) -> str | None:
    """The last value of a flag in a ``'name': v`` (dict), ``name=v`` (config) or ``--name v`` (argv) form."""
    best: tuple[int, str] | None = None
    for n in names:
        dash = n.replace("_", "-")
        for pat in (
            rf"['\"]{n}['\"]\s*:\s*['\"]?{number}",
            rf"\b{n}\s*=\s*['\"]?{number}",
            rf"--{dash}['\"]?[,=\s]+['\"]?{number}",
        ):
            for m in re.finditer(pat, text):
                if best is None or m.start() > best[0]:
                    best = (m.start(), m.group(1))
    return None if best is None else best[1]


#: (number, pattern, how the groups become it, a substring the line must hold): ``bytes`` is (value, unit),
#: ``bytes2`` two such pairs added (SGLang's K and V sizes), ``tokens`` a count with thousands separators.
_Pattern = tuple[str, str, str, str]

_VLLM: tuple[_Pattern, ...] = (
    ("weights_bytes", r"(?:Model loading took|Loading model weights took)\s+" + _NUM + _UNIT, "bytes", ""),
    ("kv_cache_bytes", r"Available KV cache memory:\s*" + _NUM + _UNIT, "bytes", ""),
    ("kv_cache_bytes", r"reserved for KV Cache is\s*" + _NUM + _UNIT, "bytes", ""),  # V0 0.8 profiling summary
    ("kv_cache_bytes", r"kv_cache_size=" + _NUM + _UNIT, "bytes", "Memory profiling results:"),
    ("kv_cache_tokens", r"KV cache size:\s*" + _INT + r"\s+tokens\b", "tokens", ""),
    ("gpu_blocks", r"#?\s*(?:GPU|cuda|[A-Za-z]+) blocks:\s*(\d+),\s*# CPU blocks", "int", ""),
    ("gpu_blocks", r"num_gpu_blocks is\s*:?\s*(\d+)\s*$", "int", ""),
    ("context_tokens", r"Maximum concurrency for\s+" + _INT + r"\s+tokens per request:", "tokens", ""),
    ("max_concurrency", r"Maximum concurrency for\s+[\d,]+\s+tokens per request:\s*" + _NUM + r"x", "float", ""),
    ("context_tokens_flag", r"Using max model len\s+(\d+)\b", "int", ""),
    ("token_budget", r"max_num_batched_tokens=(\d+)\b", "int", ""),
    ("total_memory_bytes", r"total_gpu_memory=" + _NUM + _UNIT, "bytes", "Memory profiling results:"),
    ("total_memory_bytes", r"total_gpu_memory \(" + _NUM + r"\s*(GiB|GB)\)", "bytes", ""),
    ("cuda_graph_bytes", r"Graph capturing finished in .*?took\s+" + _NUM + _UNIT, "bytes", ""),
    ("version", r"Initializing an? (?:V1 )?LLM engine \(v([^)]+)\)", "str", ""),
    ("version", r"vLLM API server version\s+(\S+)", "str", ""),
    ("model", r"\bmodel='([^']+)'", "str", ""),
    ("kv_dtype", r"\bkv_cache_dtype=([\w.]+)", "str", ""),
)
_SGLANG: tuple[_Pattern, ...] = (
    ("avail_before_bytes", r"Load weight begin\.\s*avail mem=" + _NUM + _UNIT, "bytes", ""),
    ("avail_after_bytes", r"avail mem=" + _NUM + _UNIT, "bytes", "Load weight end."),
    ("weights_bytes", r"mem usage=" + _NUM + _UNIT, "bytes", "Load weight end."),
    ("pool_tokens", r"#tokens:\s*(\d+)\s*,", "int", "KV Cache "),
    ("kv_cache_bytes", r"K size:\s*" + _NUM + _UNIT + r",\s*V size:\s*" + _NUM + _UNIT, "bytes2", "KV Cache "),
    ("kv_cache_bytes", r"(?<![KV] )\bKV size:\s*" + _NUM + _UNIT, "bytes", "KV Cache "),
    ("kv_dtype", r"dtype:\s*([\w.]+)", "str", "KV Cache "),
    ("kv_cache_tokens", r"max_total_num_tokens=(\d+),", "int", ""),
    ("token_budget", r"\bchunked_prefill_size=(\d+)\b", "int", "max_total_num_tokens="),
    ("max_num_seqs", r"\bmax_running_requests=(\d+)\b", "int", "max_total_num_tokens="),
    ("context_tokens", r"\bcontext_len=(\d+)\b", "int", "max_total_num_tokens="),
    ("cuda_graph_bytes", r"Capture cuda graph end\..*?mem usage=" + _NUM + _UNIT, "bytes", ""),
    ("kv_dtype", r"Using KV cache dtype:\s*([\w.]+)", "str", ""),
    ("model", r"\bmodel_path='([^']+)'", "str", ""),
    ("version", r"\bsglang(?:==| version:? ?)v?(\d+\.\d+[\w.]*)", "str", ""),
)


def _value(m: re.Match, how: str) -> float | int | str:
    g = m.groups()
    if how == "bytes":
        return _bytes(g[0], g[1])
    if how == "bytes2":
        return _bytes(g[0], g[1]) + _bytes(g[2], g[3])
    if how == "tokens":
        return _tokens(g[0])
    return {"int": int, "float": float, "str": str}[how](g[0])


def _scan(lines: list[str], f: _Found, patterns: tuple[_Pattern, ...]) -> None:
    """Every pattern over every line; the last match of each number wins (see the module docstring)."""
    compiled = [(key, re.compile(pat), how, within) for key, pat, how, within in patterns]
    for no, line in enumerate(lines, start=1):
        for key, rx, how, within in compiled:
            if within and within not in line:
                continue
            if m := rx.search(line):
                f.put(key, _value(m, how), no, line)


# --- failures ------------------------------------------------------------------------------------------

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|HIP out of memory|CUDA error: out of memory|"
    r"out of memory\. Tried to allocate|Prefill out of memory|KV cache pool is full"
)


def _oom_numbers(line: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, pat in (
        ("tried_bytes", r"Tried to allocate\s+" + _NUM + _UNIT),
        ("total_bytes", r"total capacity of\s+" + _NUM + _UNIT),
        ("free_bytes", r"of which\s+" + _NUM + _UNIT + r"\s+is free"),
        ("reserved_unallocated_bytes", _NUM + _UNIT + r"\s+is reserved by PyTorch but unallocated"),
        ("allocated_bytes", r"Of the allocated memory\s+" + _NUM + _UNIT),
    ):
        if m := re.search(pat, line):
            out[key] = _bytes(m.group(1), m.group(2))
    return out


#: What one line says went wrong: None when the line is not of this kind; (None, numbers) when it is but says all
#: is well (vLLM printing a KV cache size that is not negative); else (the kind, the figures it gives).
_Match = tuple[str | None, dict[str, float]] | None


def _kv_negative(line: str, lines: list[str], no: int) -> _Match:
    """vLLM: no memory left for the KV cache's blocks, or a negative KV cache size."""
    if not ("No available memory for the cache blocks" in line or re.search(r"Available KV cache memory:\s*-\d", line)):
        return None
    kind: str | None = "kv-negative"
    numbers: dict[str, float] = {}
    if m := re.search(r"Available KV cache memory:\s*" + _NUM + _UNIT, line):
        numbers["available_kv_bytes"] = _bytes(m.group(1), m.group(2))
        if float(m.group(1)) >= 0:
            kind = None
    return kind, numbers


def _context_over_kv_tokens(line: str, lines: list[str], no: int) -> _Match:
    """vLLM V0: the maximum sequence is longer than the KV cache holds, in tokens."""
    m = re.search(
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache "
        r"\((\d+)\)",
        line,
    )
    if not m:
        return None
    return "context-too-long", {"needed_tokens": float(m.group(1)), "kv_tokens": float(m.group(2))}


def _context_over_kv_bytes(line: str, lines: list[str], no: int) -> _Match:
    """vLLM V1: the maximum sequence needs more KV cache than is available, in GiB (with the length that fits)."""
    m = re.search(r"max seq len \((\d+)\), \(" + _NUM + r"\s*GiB KV cache is needed", line)
    if not m:
        return None
    numbers = {"needed_tokens": float(m.group(1)), "needed_kv_bytes": _bytes(m.group(2), "GiB")}
    if k := re.search(r"available KV cache memory \(" + _NUM + r"\s*GiB\)", line):
        numbers["available_kv_bytes"] = _bytes(k.group(1), "GiB")
    if k := re.search(r"estimated maximum model length is (\d+)", line):
        numbers["estimated_max_len"] = float(k.group(1))
    return "context-too-long", numbers


def _memory_in_use(line: str, lines: list[str], no: int) -> _Match:
    """vLLM: less memory free at start-up than the utilisation asked for (another process holds some)."""
    m = re.search(
        r"Free memory on device.*?\(" + _NUM + r"/" + _NUM + r"\s*GiB\) on startup is less than desired GPU "
        r"memory utilization \(" + _NUM,
        line,
    )
    if not m:
        return None
    return "memory-in-use", {
        "free_bytes": _bytes(m.group(1), "GiB"),
        "total_bytes": _bytes(m.group(2), "GiB"),
        "requested_util": float(m.group(3)),
    }


def _sglang_kv_negative(line: str, lines: list[str], no: int) -> _Match:
    """SGLang: the static memory fraction leaves no room for the KV cache."""
    return ("kv-negative", {}) if "Not enough memory. Please try to increase --mem-fraction-static" in line else None


def _request_slots(line: str, lines: list[str], no: int) -> _Match:
    """SGLang: the request slots ran out under load."""
    return ("request-slots", {}) if "alloc_req_slots runs out of memory" in line else None


def _cuda_oom(line: str, lines: list[str], no: int) -> _Match:
    """PyTorch's allocator out of memory; its message may wrap onto the next lines."""
    if not _OOM.search(line):
        return None
    return "cuda-oom", _oom_numbers(" ".join(x.strip() for x in lines[no - 1 : no + 2]))


#: The failure kinds a line is tried against, in order: the first that recognises the line decides.
_FAILURES = (
    _kv_negative,
    _context_over_kv_tokens,
    _context_over_kv_bytes,
    _memory_in_use,
    _sglang_kv_negative,
    _request_slots,
    _cuda_oom,
)


def _failure(lines: list[str], engine: Engine) -> Failure | None:
    """The first line that says the engine failed, with the stage it was in (start-up, or serving requests once it
    printed that it was ready) and the figures the line gives."""
    stage, ready_at = "starting the engine", None
    for no, line in enumerate(lines, start=1):
        for marker, name in _STAGES:
            if marker in line:
                stage = name
        if ready_at is None and any(r in line for r in _READY):
            ready_at = no
        found = next((r for r in (f(line, lines, no) for f in _FAILURES) if r is not None), None)
        kind, numbers = found if found is not None else (None, {})
        if kind is None:
            continue
        under_load = ready_at is not None and ready_at < no or kind == "request-slots"
        where = _KIND_STAGE.get(kind, stage)
        return Failure(
            phase="under load" if under_load else "start-up",
            kind=kind,
            stage="serving requests" if under_load else where,
            line=line.strip()[:400],
            line_no=no,
            numbers=numbers,
        )
    return None


# --- the reader ----------------------------------------------------------------------------------------


def _kv_tokens(f: _Found, engine: Engine, block: Any, derived: list[str]) -> Any:
    """The KV cache in tokens: as printed, or vLLM V0's blocks x block size, or SGLang's pool size."""
    tokens = f.get("kv_cache_tokens")
    if engine == "vllm" and tokens is None and f.get("gpu_blocks") is not None:
        tokens = int(f.get("gpu_blocks")) * int(block or VLLM_DEFAULT_BLOCK)  # V0: blocks x block size
        f.where["kv_cache_tokens"] = f.where["gpu_blocks"]
        derived.append("kv_cache_tokens")
    if engine == "sglang" and tokens is None and f.get("pool_tokens") is not None:
        tokens = f.get("pool_tokens")
        f.where["kv_cache_tokens"] = f.where["pool_tokens"]
    return tokens


def _context(f: _Found, text_flags: str) -> Any:
    """The context length: as printed, or the flag's value on the command line."""
    context = f.get("context_tokens") or f.get("context_tokens_flag")
    if context is None and (c := _flag(text_flags, ("max_model_len", "max_seq_len", "context_length"), r"(\d+)")):
        context = int(c)
    if "context_tokens" not in f.where and "context_tokens_flag" in f.where:
        f.where["context_tokens"] = f.where["context_tokens_flag"]
    return context


def _weights(f: _Found, engine: Engine, derived: list[str]) -> Any:
    """The weights' bytes: as printed, or SGLang 0.4.1's free memory before the load less after it."""
    weights = f.get("weights_bytes")
    if engine == "sglang" and weights is None and f.get("avail_before_bytes") and f.get("avail_after_bytes"):
        weights = float(f.get("avail_before_bytes")) - float(f.get("avail_after_bytes"))  # 0.4.1: no mem usage
        f.where["weights_bytes"] = f.where["avail_after_bytes"]
        derived.append("weights_bytes")
    return weights


def _concurrency(f: _Found, tokens: Any, context: Any, derived: list[str]) -> Any:
    """The maximum concurrency: as printed, or what vLLM prints, the KV tokens over the context length."""
    conc = f.get("max_concurrency")
    if conc is None and tokens is not None and context:
        conc = int(tokens) / int(context)  # what vLLM prints: KV tokens / max model len
        f.where["max_concurrency"] = f.where.get("kv_cache_tokens", (0, ""))
        derived.append("max_concurrency")
    return conc


def _version(f: _Found, engine: Engine, text: str) -> str:
    """The engine's version as printed (``v0.x`` as ``0.x``), or the log format's era when it prints none."""
    version = str(f.get("version") or "")
    if not version:
        if engine == "sglang":
            version = "0.5.x format" if "Load weight end. elapsed=" in text or "#tokens:" in text else "0.4.x format"
        else:
            version = "V0 format" if f.get("gpu_blocks") is not None else "version not printed"
    if version.startswith("0.") or version.startswith("v0."):
        version = version.removeprefix("v")
    return version


def parse_log(data: str | bytes, what: str = "the log") -> StartupLog:
    """Read a vLLM or SGLang start-up log (pasted text or a file's bytes).

    Raises :class:`LogError` with one line for a file over :data:`core.base.MAX_LOG_BYTES`, text that is not
    UTF-8, a log of another program, and a log that ends before the engine sized its KV cache (and shows no
    failure either).
    """
    try:
        text = decode_text(data, what, MAX_LOG_BYTES)
    except PayloadError as exc:
        raise LogError(str(exc)) from None
    if "\x00" in text:
        raise LogError(f"{what} is binary, not a text log")
    lines = text.splitlines()
    engine = _engine_of(lines)
    if engine is None:
        raise LogError(
            f"{what} is not a vLLM or SGLang start-up log: none of its {len(lines):,} lines is one the engines "
            "print while starting (e.g. 'Model loading took', 'GPU KV cache size', 'KV Cache is allocated')"
        )
    f = _Found()
    _scan(lines, f, _VLLM if engine == "vllm" else _SGLANG)
    failure = _failure(lines, engine)
    text_flags = "\n".join(lines[:20000])
    gmu = _flag(text_flags, ("gpu_memory_utilization", "mem_fraction_static"))
    budget = f.get("token_budget") or _flag(text_flags, ("max_num_batched_tokens", "chunked_prefill_size"), r"(\d+)")
    seqs = f.get("max_num_seqs") or _flag(text_flags, ("max_num_seqs", "max_running_requests"), r"(\d+)")
    tp = _flag(text_flags, ("tensor_parallel_size", "tp_size"), r"(\d+)")
    block = _flag(text_flags, ("block_size",), r"(\d+)") if engine == "vllm" else None
    derived: list[str] = []
    tokens = _kv_tokens(f, engine, block, derived)
    context = _context(f, text_flags)
    weights = _weights(f, engine, derived)
    conc = _concurrency(f, tokens, context, derived)
    version = _version(f, engine, text)
    log = StartupLog(
        engine=engine,
        version=version,
        weights_bytes=None if weights is None else float(weights),
        kv_cache_bytes=None if f.get("kv_cache_bytes") is None else float(f.get("kv_cache_bytes")),
        kv_cache_tokens=None if tokens is None else int(tokens),
        max_concurrency=None if conc is None else float(conc),
        context_tokens=None if context is None else int(context),
        gpu_memory_utilization=None if gmu is None else float(gmu),
        token_budget=None if budget is None else int(budget),
        max_num_seqs=None if seqs is None else int(seqs),
        tp=None if tp is None else int(tp),
        kv_dtype=None if f.get("kv_dtype") is None else str(f.get("kv_dtype")),
        block_size=None if block is None else int(block),
        model=None if f.get("model") is None else str(f.get("model")),
        total_memory_bytes=None if f.get("total_memory_bytes") is None else float(f.get("total_memory_bytes")),
        cuda_graph_bytes=None if f.get("cuda_graph_bytes") is None else float(f.get("cuda_graph_bytes")),
        derived=tuple(derived),
        evidence={k: v for k, v in f.where.items() if k in NUMBERS},
        failure=failure,
    )
    missing = tuple(k for k in NUMBERS if getattr(log, k) is None)
    log = log.model_copy(update={"unrecognised": missing})
    kv_known = any(getattr(log, k) is not None for k in ("kv_cache_bytes", "kv_cache_tokens", "max_concurrency"))
    if not kv_known and failure is None:
        last = "the weights were loaded" if log.weights_bytes is not None else "the engine began to start"
        tail = "'Maximum concurrency for ...'" if engine == "vllm" else "'max_total_num_tokens=...'"
        raise LogError(
            f"{what} looks truncated: this {'vLLM' if engine == 'vllm' else 'SGLang'} log ends after {last}, "
            f"before the KV cache was sized; paste it at least to the line {tail}"
        )
    return log
