r"""Runs from the CSV template and typed rows (the Calibration page's table, ``rabit calibrate add --csv``) and from
an uploaded file of either kind: the template itself, the parser of its rows into :class:`core.operations.runs.Run`\ s
with each row's problems named, and the dispatch of a file by its name."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from core.config import RabitConfig
from core.operations.runs import (
    CSV_COLUMNS,
    LIMIT_PERCENTILES,
    LOADS,
    METRICS,
    Measurement,
    Run,
    RunError,
    _int,
    _load,
    _measured,
    _number,
    _positive,
    build_config,
    parse_json,
)

__all__ = ["csv_template", "parse_csv", "parse_file", "parse_rows"]

# --- CSV template and typed rows -------------------------------------------------------------------

_INT_FIELDS = (
    "gpus",
    "tp",
    "pp",
    "input_tokens",
    "output_tokens",
    "concurrency",
    "batch",
    "seq_len",
    "micro_batch",
    "global_batch_tokens",
    "zero",
    "max_batch",
    "token_budget",
)
_STR_FIELDS = ("model", "gpu", "weights", "train_precision", "engine", "admission")


#: The template's example rows: one per kind of run (columns left out are blank).
#: The scheduler and load of the template's rate-driven run, shared by its two metric rows.
_SERVE_RUN = {
    "label": "serve-run-1",
    "rate_per_s": 2.0,
    "num_requests": 400,
    "engine": "vllm",
    "max_batch": 256,
    "token_budget": 8192,
    "admission": "preempt",
}
_TEMPLATE_ROWS: tuple[dict[str, Any], ...] = (
    {**_SERVE_RUN, "metric": "ttft_s.p50", "value": 0.036},
    {**_SERVE_RUN, "metric": "itl_s.p50", "value": 0.0075},
    {"label": "batch-run", "batch": 32, "metric": "itl_s.p50", "value": 0.0095},
    {
        "label": "offline-run",
        "load": "offline",
        "num_requests": 1000,
        "engine": "vllm",
        "metric": "throughput_tokens_per_s",
        "value": 9000.0,
    },
    {
        "label": "rate-search",
        "load": "rate-search",
        "engine": "vllm",
        "limit_ttft_s": 2.0,
        "limit_itl_s": 0.05,
        "limit_percentile": "p99",
        "metric": "max_rate_per_s",
        "value": 12.0,
    },
    {
        "label": "train-run",
        "gpus": 8,
        "weights": "",
        "input_tokens": "",
        "output_tokens": "",
        "train_precision": "bf16",
        "seq_len": 4096,
        "micro_batch": 1,
        "global_batch_tokens": 4194304,
        "zero": 1,
        "metric": "step_s",
        "value": 52.0,
    },
)
_TEMPLATE_SHARED = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpus": 1,
    "tp": 1,
    "pp": 1,
    "weights": "bf16",
    "input_tokens": 1024,
    "output_tokens": 256,
}


def csv_template() -> str:
    """The template the Calibration page offers: the columns and one example row per kind of run."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, restval="", lineterminator="\r\n")
    w.writeheader()
    for row in _TEMPLATE_ROWS:
        w.writerow({**_TEMPLATE_SHARED, **row})
    return buf.getvalue()


def _limits(row: dict[str, Any], what: str) -> tuple[tuple[str, float], ...]:
    """A rate search's latency limits: ``limit_ttft_s`` and ``limit_itl_s`` at ``limit_percentile`` (p99)."""
    q = str(row.get("limit_percentile") or "p99").strip().lower()
    if q not in LIMIT_PERCENTILES:
        raise RunError(f"{what}: field 'limit_percentile': {q!r} is not one of {', '.join(LIMIT_PERCENTILES)}")
    out = []
    for col, key in (("limit_ttft_s", "ttft_s"), ("limit_itl_s", "itl_s")):
        x = _positive(_number(row, col, what, text=True), col, what)
        if x is not None:
            if not math.isfinite(x):
                raise RunError(f"{what}: field '{col}' is not a finite number")
            out.append((f"{key}.{q}", float(x)))
    if not out:
        raise RunError(f"{what}: a rate search needs a latency limit: fill limit_ttft_s or limit_itl_s")
    return tuple(out)


def _blank(v: Any) -> bool:
    return v in (None, "") or (isinstance(v, float) and math.isnan(v))


def _row_values(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row with its keys and text stripped and every blank cell as None (None: the whole row is blank)."""
    row = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items() if k is not None}
    if all(_blank(v) for v in row.values()):
        return None
    return {k: (None if (v == "" or (isinstance(v, float) and math.isnan(v))) else v) for k, v in row.items()}


def _row_measurement(row: dict[str, Any], what: str) -> tuple[str, float]:
    """The row's metric and its value, a positive finite number inside the metric's plausible range."""
    metric = row.get("metric")
    if not metric:
        raise RunError(f"{what}: field 'metric' is empty; use one of {', '.join(METRICS)}")
    if metric not in METRICS:
        raise RunError(f"{what}: field 'metric': unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    value = _number(row, "value", what, text=True)
    if value is None:
        raise RunError(f"{what}: field 'value' is empty")
    if not value > 0 or not math.isfinite(value):
        raise RunError(f"{what}: field 'value' must be a positive number, got {value:g}")
    _measured(metric, value, "value", what, 1.0, METRICS[metric][2])
    return metric, value


def _row_fields(row: dict[str, Any], what: str) -> dict[str, Any]:
    """The row's config fields: the integer ones (positive, ZeRO's stage from 0) and the text ones."""
    fields: dict[str, Any] = {}
    for k in _INT_FIELDS:
        x = _number(row, k, what, text=True)
        if x is not None:
            if not math.isfinite(x):
                raise RunError(f"{what}: field '{k}' is not a finite number")
            fields[k] = _int(x if k == "zero" else _positive(x, k, what), k, what)
    for k in _STR_FIELDS:
        if row.get(k):
            fields[k] = str(row[k])
    return fields


def _row_load_kind(row: dict[str, Any], what: str) -> str:
    """The row's ``load`` cell, normalised (``rate_search`` as ``rate-search``), one of :data:`LOADS` or empty."""
    kind = str(row.get("load") or "").strip().lower().replace("_", "-")
    if kind and kind not in LOADS:
        raise RunError(f"{what}: field 'load': {kind!r} is not one of {', '.join(LOADS)}")
    return kind


def _implied_load(
    kind: str,
    metric: str,
    phase: str,
    all_at_once: bool,
    rate: float | None,
    conc: Any,
    batch: Any,
    missing: str | None,
) -> str:
    """The load a row ran under: training; a rate search (named, or a maximum-rate metric); the one it names; else
    what its fields imply (all at once, a rate, a concurrency, a batch). ``missing``: the error when nothing does and
    there is no base config to fill in from (None: a batch)."""
    if phase == "train":
        return "train"
    if kind == "rate-search" or metric == "max_rate_per_s":
        return "rate_search"
    if kind:
        return kind
    if all_at_once:
        return "offline"
    if rate is not None and math.isfinite(rate):
        return "rate"
    if conc is not None:
        return "concurrency"
    if batch is not None:
        return "batch"
    if missing is not None:
        raise RunError(missing)
    return "batch"


def parse_rows(rows: list[dict[str, Any]], base: RabitConfig | None = None, source: str = "table") -> tuple[Run, ...]:
    """Typed rows (CSV template columns) -> runs; rows with the same label and config form one run."""
    grouped: dict[tuple, dict[str, Any]] = {}
    for i, raw in enumerate(rows, start=1):
        row = _row_values(raw)
        if row is None:
            continue
        what = f"row {i}"
        metric, value = _row_measurement(row, what)
        phase = METRICS[metric][1]
        fields = _row_fields(row, what)
        rate = _positive(_number(row, "rate_per_s", what, text=True), "rate_per_s", what)
        _load(rate, "rate_per_s", "rate_per_s", what)
        _load(fields.get("concurrency"), "concurrency", "concurrency", what)
        all_at_once = rate is not None and math.isinf(rate)  # vLLM's request rate of an all-at-once run
        rate = None if all_at_once else rate
        conc = fields.pop("concurrency", None)
        n = _number(row, "num_requests", what, text=True)
        n = _int(_positive(n, "num_requests", what), "num_requests", what)
        _load(n, "num_requests", "num_requests", what)
        kind = _row_load_kind(row, what)
        missing = (
            f"{what}: incomplete run config, missing rate_per_s, concurrency, batch or load" if base is None else None
        )
        load = _implied_load(kind, metric, phase, all_at_once, rate, conc, fields.get("batch"), missing)
        limits: tuple[tuple[str, float], ...] = _limits(row, what) if load == "rate_search" else ()
        if load == "rate" and rate is None:
            raise RunError(f"{what}: load 'rate' needs rate_per_s")
        if load == "concurrency" and conc is None:
            raise RunError(f"{what}: load 'concurrency' needs concurrency")
        key = (row.get("label") or f"run {i}", phase, load, rate, conc, n, limits, tuple(sorted(fields.items())))
        g = grouped.setdefault(
            key,
            {
                "what": what,
                "fields": fields,
                "phase": phase,
                "load": load,
                "rate": rate,
                "conc": conc,
                "n": n,
                "limits": limits,
                "meas": {},
            },
        )
        if metric in g["meas"]:
            raise RunError(f"{what}: metric {metric!r} given twice for run {key[0]!r}")
        g["meas"][metric] = value
    if not grouped:
        raise RunError("no rows: fill in at least one run (config fields, metric and value)")
    return tuple(_run_of(key, g, base, source) for key, g in grouped.items())


def _run_of(key: tuple, g: dict[str, Any], base: RabitConfig | None, source: str) -> Run:
    """One run from its group of rows: the config built once, each metric's measurement."""
    cfg = build_config(g["fields"], base, g["phase"], g["what"])
    return Run(
        label=str(key[0]),
        source=source,
        config=cfg,
        load=g["load"],
        rate_per_s=g["rate"] if g["load"] == "rate" else None,
        concurrency=g["conc"],
        num_requests=g["n"],
        limits=g["limits"],
        measurements=tuple(Measurement(metric=m, value=v) for m, v in g["meas"].items()),
    )


def parse_csv(text: str | bytes, base: RabitConfig | None = None) -> tuple[Run, ...]:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise RunError("the CSV is not UTF-8 text") from None
    reader = csv.DictReader(io.StringIO(text))
    try:
        cols = set(reader.fieldnames or ())
        missing = [c for c in ("metric", "value") if c not in cols]
        if missing:
            raise RunError(f"CSV: missing column(s) {', '.join(missing)}; download the template for the columns")
        rows = list(reader)
    except csv.Error as exc:  # e.g. a field over the csv module's size limit
        raise RunError(f"CSV: line {reader.line_num}: not readable ({exc})") from None
    return parse_rows(rows, base, source="csv")


def parse_file(name: str, content: str | bytes, base: RabitConfig | None = None) -> tuple[Run, ...]:
    """A file by its name: ``.csv`` is the template, anything else a vLLM JSON."""
    if name.lower().endswith(".csv"):
        return parse_csv(content, base)
    return (parse_json(content, base, label=name.rsplit("/", 1)[-1]),)
