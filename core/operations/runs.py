"""Measured runs: parse the files people already have into frozen :class:`Run` objects.

A run is one measurement (or several metrics of one measurement) together with the configuration it
was measured on, so RA-BIT can predict the same metric on the same configuration and compare
(:mod:`core.decision.calibration`). Three sources and one typed form:

* ``vllm bench serve --save-result`` JSON. Field names as written by vLLM's
  ``vllm/benchmarks/serve.py`` (``benchmark()`` result and ``main()``'s ``result_json``):
  ``model_id``, ``num_prompts``, ``request_rate`` (a number or ``"inf"``), ``max_concurrency``,
  ``duration``, ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
  ``output_throughput``, and for each of ``ttft``, ``tpot``, ``itl``, ``e2el``: ``mean_<m>_ms``,
  ``median_<m>_ms``, ``std_<m>_ms`` and ``p99_<m>_ms`` (``--metric-percentiles`` adds ``p<N>_<m>_ms``).
  ``--metadata KEY=VALUE`` pairs land as top-level keys, which is how a file can name its own
  ``gpu``, ``gpus``, ``tp``, ``pp`` or ``weights``.
* ``vllm bench throughput --output-json`` (``vllm/benchmarks/throughput.py``): ``elapsed_time``,
  ``num_requests``, ``total_num_tokens``, ``requests_per_second``, ``tokens_per_second`` (prompt plus
  output tokens per second). The lengths are not in the file: they come from the analysis or the
  caller.
* The CSV template (:data:`CSV_COLUMNS`, :func:`csv_template`): one row per metric of a run.
* Typed rows (the Calibration page's table): the same columns as the CSV, as dicts.

Every metric is stored in SI under the estimate JSON key it calibrates (:data:`METRICS`).
A run whose configuration is incomplete is refused with :class:`RunError` naming the missing fields.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core import catalog
from core.base import ADMISSIONS, ENGINES, MEASUREMENT_DOMAINS, RUN_LOAD_DOMAINS, checked, type_problem
from core.base import parse_json as parse_json_payload
from core.catalog import engine_defaults
from core.config import RabitConfig, describe_validation_error, problems, split_nodes

#: metric name (the estimate JSON key) -> (family, phase, unit on screen, description).
#: The family is what "comparable" means in :mod:`core.decision.calibration`.
METRICS: dict[str, tuple[str, str, str, str]] = {
    "ttft_s.p50": ("ttft", "serve", "s", "time to first token, median"),
    "ttft_s.p99": ("ttft", "serve", "s", "time to first token, 99th percentile"),
    "itl_s.p50": ("itl", "serve", "s", "inter-token latency, median"),
    "itl_s.p99": ("itl", "serve", "s", "inter-token latency, 99th percentile"),
    "e2e_s.p50": ("e2e", "serve", "s", "end-to-end latency, median"),
    "e2e_s.p99": ("e2e", "serve", "s", "end-to-end latency, 99th percentile"),
    "throughput_tokens_per_s": ("throughput", "serve", "tokens/s", "output tokens per second"),
    "max_rate_per_s": ("max rate", "serve", "requests/s", "highest Poisson arrival rate that meets the latency limits"),
    "step_s": ("training step", "train", "s", "training step time"),
    "mfu": ("training step", "train", "", "model FLOPs utilisation"),
}

FAMILY_TEXT: dict[str, str] = {
    "ttft": "TTFT / prefill",
    "itl": "ITL / decode",
    "e2e": "end-to-end latency",
    "throughput": "throughput",
    "max rate": "highest rate under latency limits",
    "training step": "training step time",
}

#: vLLM serve key -> our metric, with the factor to SI (ms -> s).
_VLLM_SERVE: dict[str, tuple[str, float]] = {
    "median_ttft_ms": ("ttft_s.p50", 1e-3),
    "p99_ttft_ms": ("ttft_s.p99", 1e-3),
    "median_itl_ms": ("itl_s.p50", 1e-3),
    "p99_itl_ms": ("itl_s.p99", 1e-3),
    "median_e2el_ms": ("e2e_s.p50", 1e-3),
    "p99_e2el_ms": ("e2e_s.p99", 1e-3),
    "output_throughput": ("throughput_tokens_per_s", 1.0),
}

#: The CSV template's columns: config fields, the load, then metric and value.
CSV_COLUMNS = (
    "label",
    "model",
    "gpu",
    "gpus",
    "tp",
    "pp",
    "weights",
    "input_tokens",
    "output_tokens",
    "rate_per_s",
    "concurrency",
    "batch",
    "load",
    "num_requests",
    "engine",
    "max_batch",
    "token_budget",
    "admission",
    "limit_ttft_s",
    "limit_itl_s",
    "limit_percentile",
    "train_precision",
    "seq_len",
    "micro_batch",
    "global_batch_tokens",
    "zero",
    "metric",
    "value",
)

#: Fields a run must name (or inherit from the analysis), by phase.
REQUIRED_SERVE = ("model", "gpu", "gpus", "tp", "pp", "weights", "input_tokens", "output_tokens")
REQUIRED_TRAIN = ("model", "gpu", "gpus", "tp", "pp", "train_precision", "seq_len", "global_batch_tokens")

Load = Literal["rate", "concurrency", "batch", "offline", "rate_search", "train"]
#: The CSV's ``load`` column: how requests arrived (empty: told from rate_per_s, concurrency or batch).
LOADS = ("rate", "concurrency", "batch", "offline", "rate-search")
#: Scheduler settings a run may name (the config's ``workload`` fields, the engine's flags in brackets):
#: ``engine``, ``max_batch`` (--max-num-seqs), ``token_budget`` (--max-num-batched-tokens), ``admission``
#: (preempt, or reserve: TensorRT-LLM's GUARANTEED_NO_EVICT).
WORKLOAD_FIELDS = ("engine", "max_batch", "token_budget", "admission")
#: Latency percentiles a rate-search limit may be on.
LIMIT_PERCENTILES = ("p50", "p95", "p99")


class RunError(ValueError):
    """A file or row that cannot become a run; the message says what is wrong and how to fix it."""


class Measurement(BaseModel):
    """One measured figure, in SI, inside its metric's domain (core.base.limits.MEASUREMENT_DOMAINS)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    value: float = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _in_domain(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("metric"), str):
            d = MEASUREMENT_DOMAINS.get(data["metric"])
            if d is None:
                raise ValueError(f"unknown metric {data['metric']!r}; use one of {', '.join(METRICS)}")
            why = d.problem(data.get("value"))
            if why is not None:
                raise ValueError(f"{data['metric']}: {why}")
        return data


class Run(BaseModel):
    """One measured run on the configuration it was measured on (frozen, hashable).

    ``load`` says how requests arrived: a Poisson ``rate`` [requests/s], a fixed ``concurrency`` (closed
    loop, no think time), a ``batch`` timed alone (the speed model), ``offline`` (every request at once,
    ``vllm bench throughput``), ``rate_search`` (the highest Poisson rate whose latencies stay under ``limits``,
    e.g. MLPerf's Server scenario or a sweep of ``vllm bench serve --request-rate``) or ``train`` (one training
    step). The scheduler the run used is its config's ``workload`` (engine, max batch, token budget, KV
    admission); ``num_requests`` how many requests it sent.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    source: Literal["vllm-serve", "vllm-throughput", "csv", "table"]
    config: RabitConfig
    load: Load
    rate_per_s: float | None = Field(None, gt=0)
    concurrency: int | None = Field(None, ge=1)
    num_requests: int | None = Field(None, ge=1)
    #: rate search: (latency metric, its limit [s]), e.g. (("ttft_s.p99", 2.0), ("itl_s.p99", 0.2))
    limits: tuple[tuple[str, float], ...] = ()
    measurements: tuple[Measurement, ...]

    @field_validator("rate_per_s", "concurrency", "num_requests", mode="before")
    @classmethod
    def _load_in_domain(cls, v: Any, info: Any) -> Any:
        return checked(v, None if v is None else RUN_LOAD_DOMAINS[info.field_name].problem(v))

    def value(self, metric: str) -> float | None:
        for m in self.measurements:
            if m.metric == metric:
                return m.value
        return None

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(m.metric for m in self.measurements)

    def describe(self) -> str:
        """The run's config in one line (the chart's hover text)."""
        c = self.config
        model = c.model_label
        if self.load == "train":
            return (
                f"{model} on {c.gpus} x {c.gpu}, TP {c.tp} PP {c.pp}, {c.train_precision}, seq {c.seq_len:,}, "
                f"global batch {c.global_batch_tokens:,} tokens"
            )
        if self.load == "rate":
            how = f"{self.rate_per_s:g} req/s"
        elif self.load == "concurrency":
            how = f"concurrency {self.concurrency}"
        elif self.load == "batch":
            how = f"batch {c.batch}"
        elif self.load == "rate_search":
            how = "highest rate with " + " and ".join(f"{m} <= {v:g} s" for m, v in self.limits)
        else:
            how = f"offline, {self.num_requests or c.batch} requests"
        w = c.workload
        return (
            f"{model} on {c.gpus} x {c.gpu}, TP {c.tp} PP {c.pp}, {c.weights}, "
            f"{c.input_tokens:,} in / {c.output_tokens:,} out, {how}; {w.engine} max batch {w.max_batch:,}, "
            f"token budget {w.token_budget:,}, {w.admission}"
        )


# --- helpers ---------------------------------------------------------------------------------------


def model_slug(name: str) -> str | None:
    """The catalog slug a Hugging Face model id names, if any (``meta-llama/Llama-3.1-70B-Instruct``)."""
    if name in catalog.models():
        return name
    s = name.rsplit("/", 1)[-1].lower()
    s = re.sub(r"-(instruct|chat|hf|base|it)$", "", s)
    s = re.sub(r"^meta-", "", s)
    if s in catalog.models():
        return s
    return None


def _number(data: dict[str, Any], key: str, what: str, *, text: bool = False) -> float | None:
    """Field ``key`` of a run's file as a number (None when absent). A JSON file's numbers are JSON numbers, never
    ``true`` or ``"12"`` (``"inf"`` is vLLM's own request rate of an all-at-once run); ``text``: a CSV cell or a
    table's, where every number is written as text."""
    v = data.get(key)
    if v is None or v == "":
        return None
    if isinstance(v, str) and v.strip().lower() == "inf":
        return math.inf
    if isinstance(v, str) and text:
        try:
            v = float(v)
        except ValueError:
            raise RunError(f"{what}: field '{key}' is not a number ({v!r})") from None
    why = type_problem(v)
    if why is not None:
        raise RunError(f"{what}: field '{key}': {why}")
    return float(v)


def _measured(metric: str, x: float, key: str, what: str, factor: float = 1.0, unit: str = "") -> Measurement:
    """A measurement of ``metric`` read from field ``key`` as ``x`` (in the file's unit, ``x * factor`` in SI),
    or RunError naming the field and the domain in the file's unit."""
    d = MEASUREMENT_DOMAINS[metric]
    if not d.lo <= x * factor <= d.hi:
        u = f" {unit}" if unit else ""
        raise RunError(
            f"{what}: field '{key}': {x:g}{u} is outside {d.lo / factor:g}..{d.hi / factor:g}{u} ({d.reason})"
        )
    return Measurement(metric=metric, value=x * factor)


def _load(x: float | None, key: str, field: str, what: str) -> float | None:
    """A run's load figure (rate, concurrency, requests) inside its domain, or RunError naming the field."""
    why = None if x is None or math.isinf(x) else RUN_LOAD_DOMAINS[field].problem(x)
    if why is not None:
        raise RunError(f"{what}: field '{key}': {why}")
    return x


def _positive(x: float | None, key: str, what: str) -> float | None:
    if x is not None and x <= 0:
        raise RunError(f"{what}: field '{key}' must be positive, got {x:g}")
    return x


def _int(x: float | None, key: str, what: str) -> int | None:
    if x is None:
        return None
    if not math.isfinite(x) or x != int(x):
        raise RunError(f"{what}: field '{key}' must be a whole number, got {x:g}")
    return int(x)


def _split_gpus(gpu: str, gpus: int) -> tuple[int, int]:
    try:
        return split_nodes(gpus, catalog.gpu(gpu).gpus_per_node)
    except ValueError as exc:
        raise RunError(f"field 'gpus' ({gpu}): {exc}") from None


def build_config(fields: dict[str, Any], base: RabitConfig | None, phase: str, what: str) -> RabitConfig:
    """The run's config: ``fields`` over ``base``; refuse with the missing required fields named."""
    required = REQUIRED_TRAIN if phase == "train" else REQUIRED_SERVE
    have = {k: v for k, v in fields.items() if v is not None}
    missing = [k for k in required if k not in have and base is None]
    if missing:
        raise RunError(
            f"{what}: incomplete run config, missing {', '.join(missing)} "
            "(name them in the file, or attach it to an analysis whose config supplies them)"
        )
    data = base.model_dump() if base is not None else RabitConfig().model_dump()
    if "model" in have:
        slug = model_slug(str(have.pop("model")))
        if slug is None:
            raise RunError(
                f"{what}: field 'model': {fields['model']!r} is not a catalog model "
                f"(known: {', '.join(sorted(catalog.models()))})"
            )
        data["model"], data["custom_model"] = slug, None
    if "gpu" in have and have["gpu"] not in catalog.gpus():
        raise RunError(f"{what}: field 'gpu': unknown GPU {have['gpu']!r}; known: {', '.join(sorted(catalog.gpus()))}")
    gpu = have.get("gpu", data["gpu"])
    data["gpu"] = gpu
    gpus = have.pop("gpus", None)
    if gpus is not None:
        data["gpus_per_node"], data["nodes"] = _split_gpus(gpu, int(gpus))
    have.pop("gpu", None)
    data["workload"] = _workload(data["workload"], {k: have.pop(k) for k in WORKLOAD_FIELDS if k in have}, gpu, what)
    data.update(have)
    data["phase"] = phase
    try:
        cfg = RabitConfig.model_validate(data)
    except ValidationError as exc:
        raise RunError(f"{what}: {describe_validation_error(exc)}") from None
    blocking = [p for p in problems(cfg) if p.blocking]  # the checks every config gets (TP must split the heads)
    if blocking:
        raise RunError(f"{what}: field '{_RUN_FIELD.get(blocking[0].field, blocking[0].field)}': {blocking[0].message}")
    return cfg


#: A config field a problem names -> the run's field that carries it.
_RUN_FIELD = {"gpus_per_node": "gpus", "nodes": "gpus"}


def _workload(base: dict[str, Any], given: dict[str, Any], gpu: str, what: str) -> dict[str, Any]:
    """The run's scheduler: what it names; for the rest, its engine's documented defaults on its GPU when it
    names an engine (core.catalog.engines), else the base config's."""
    w = dict(base)
    engine = given.get("engine")
    if engine is not None:
        if engine not in ENGINES:
            raise RunError(f"{what}: field 'engine': unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
        d = engine_defaults(engine, catalog.gpu(gpu))
        w.update(engine=engine, max_batch=d.max_batch, token_budget=d.token_budget, admission=d.admission)
    adm = given.get("admission")
    if adm is not None and adm not in ADMISSIONS:
        raise RunError(f"{what}: field 'admission': {adm!r} is not one of {', '.join(ADMISSIONS)}")
    w.update({k: v for k, v in given.items() if k != "engine"})
    if int(w["token_budget"]) < int(w["max_batch"]):
        raise RunError(
            f"{what}: fields 'token_budget' ({w['token_budget']}) and 'max_batch' ({w['max_batch']}): the token "
            "budget must be at least the max batch (every running sequence takes one token of it)"
        )
    return w


# --- vLLM ------------------------------------------------------------------------------------------

_META_FIELDS = {
    "gpu": str,
    "gpus": int,
    "tp": int,
    "pp": int,
    "weights": str,
    "kv_dtype": str,
    "model": str,
    "engine": str,
    "max_batch": int,
    "token_budget": int,
    "admission": str,
}
#: The engine flag names ``--metadata`` may use for the scheduler settings.
_META_ALIASES = {"max_num_seqs": "max_batch", "max_num_batched_tokens": "token_budget"}


def _metadata(data: dict[str, Any], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    data = {**{v: data[k] for k, v in _META_ALIASES.items() if k in data and v not in data}, **data}
    for k, typ in _META_FIELDS.items():
        if k in data and data[k] is not None:
            if typ is int:  # vllm bench's --metadata KEY=VALUE pairs are text
                out[k] = _int(_positive(_number(data, k, what, text=True), k, what), k, what)
            else:
                out[k] = str(data[k])
    return out


def _serve_model(data: dict[str, Any], meta: dict[str, Any], base: RabitConfig | None, what: str) -> None:
    """The catalog model the result's ``model_id`` names, into ``meta`` (unless the metadata names one); with no
    base config to fall back on, an unknown model is refused."""
    if "model" not in meta and data.get("model_id"):
        slug = model_slug(str(data["model_id"]))
        if slug is not None:
            meta["model"] = slug
        elif base is None:
            raise RunError(
                f"{what}: field 'model_id': {data['model_id']!r} is not a catalog model; add "
                "--metadata model=<slug> or attach the file to an analysis"
            )


def _serve_lengths(data: dict[str, Any], meta: dict[str, Any], what: str) -> int:
    """The completed requests; their mean input and output lengths (the totals over them) into ``meta``."""
    completed = _int(_positive(_number(data, "completed", what), "completed", what), "completed", what)
    if completed is None:
        raise RunError(f"{what}: missing field 'completed' (not a vllm bench serve --save-result file?)")
    for key, field in (("total_input_tokens", "input_tokens"), ("total_output_tokens", "output_tokens")):
        total = _positive(_number(data, key, what), key, what)
        if total is None:
            raise RunError(f"{what}: missing field '{key}' (not a vllm bench serve --save-result file?)")
        if not math.isfinite(total):
            raise RunError(f"{what}: field '{key}' is not a finite number")
        meta[field] = max(1, round(total / completed))
    return completed


def _serve_measurements(data: dict[str, Any], what: str) -> list[Measurement]:
    """Every metric the result holds (:data:`_VLLM_SERVE`), each positive; at least one."""
    meas = []
    for key, (metric, k) in _VLLM_SERVE.items():
        x = _number(data, key, what)
        if x is None:
            continue
        if x <= 0:
            raise RunError(f"{what}: field '{key}' must be positive, got {x:g}")
        meas.append(_measured(metric, x, key, what, k, "ms" if k == 1e-3 else "tokens/s"))
    if not meas:
        raise RunError(
            f"{what}: no metric found (expected median_ttft_ms, median_itl_ms, ... as vllm bench serve "
            "--save-result writes them)"
        )
    return meas


def parse_vllm_serve(data: dict[str, Any], base: RabitConfig | None = None, label: str = "") -> Run:
    """A ``vllm bench serve --save-result`` result; the config is ``base`` unless the file says otherwise."""
    what = label or "vllm bench serve result"
    meta = _metadata(data, what)
    _serve_model(data, meta, base, what)
    completed = _serve_lengths(data, meta, what)
    rate = _number(data, "request_rate", what)
    conc = _int(_number(data, "max_concurrency", what), "max_concurrency", what)
    _positive(rate, "request_rate", what)
    _positive(conc, "max_concurrency", what)
    _load(rate, "request_rate", "rate_per_s", what)
    _load(conc, "max_concurrency", "concurrency", what)
    n = _int(_number(data, "num_prompts", what), "num_prompts", what) or completed
    _load(n, "num_prompts", "num_requests", what)
    meas = _serve_measurements(data, what)
    if rate is not None and math.isfinite(rate):
        load, extra = "rate", {"rate_per_s": rate}
    elif conc is not None:
        load, extra = "concurrency", {"concurrency": conc}
    else:
        load, extra = "offline", {}
    cfg = build_config(meta, base, "serve", what)
    return Run(
        label=label or f"vllm serve {data.get('date', '')}".strip(),
        source="vllm-serve",
        config=cfg,
        load=load,
        num_requests=n,
        measurements=tuple(meas),
        **extra,
    )


def parse_vllm_throughput(
    data: dict[str, Any],
    base: RabitConfig | None = None,
    label: str = "",
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> Run:
    """A ``vllm bench throughput --output-json`` result (offline: every request submitted at once).

    ``tokens_per_second`` counts prompt and output tokens; the output share is ``O / (I + O)`` with the
    run's mean lengths, which the file does not carry (the analysis's, or the caller's).
    """
    what = label or "vllm bench throughput result"
    tps = _positive(_number(data, "tokens_per_second", what), "tokens_per_second", what)
    if tps is None:
        raise RunError(f"{what}: missing field 'tokens_per_second' (not a vllm bench throughput --output-json file?)")
    n = _int(_positive(_number(data, "num_requests", what), "num_requests", what), "num_requests", what)
    _load(n, "num_requests", "num_requests", what)
    meta = _metadata(data, what)
    for k, v in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if v is not None:
            meta[k] = v
        elif k in data:
            meta[k] = _int(_positive(_number(data, k, what), k, what), k, what)
    cfg = build_config(meta, base, "serve", what)
    share = cfg.output_tokens / (cfg.input_tokens + cfg.output_tokens)
    return Run(
        label=label or "vllm throughput",
        source="vllm-throughput",
        config=cfg,
        load="offline",
        num_requests=n,
        measurements=(_measured("throughput_tokens_per_s", tps, "tokens_per_second", what, share, "tokens/s"),),
    )


def parse_json(text: str | bytes, base: RabitConfig | None = None, label: str = "") -> Run:
    """Either vLLM file, told apart by its fields."""
    try:
        data = parse_json_payload(text, what=label or "file")  # size, UTF-8 and depth checked before parsing
    except ValueError as exc:
        raise RunError(str(exc)) from None
    if not isinstance(data, dict):
        raise RunError(f"{label or 'file'}: expected one JSON object from vllm bench, got {type(data).__name__}")
    if "tokens_per_second" in data and "completed" not in data:
        return parse_vllm_throughput(data, base, label)
    if "completed" in data or any(k in data for k in _VLLM_SERVE):
        return parse_vllm_serve(data, base, label)
    raise RunError(
        f"{label or 'file'}: neither a vllm bench serve --save-result nor a vllm bench throughput "
        "--output-json file (no 'completed' or 'tokens_per_second' field)"
    )
