"""Telemetry from a running deployment: a Prometheus text exposition dump or a CSV of time series.

Formats:

* **Prometheus text exposition** (what ``curl http://HOST:8000/metrics`` prints for vLLM and
  ``curl http://HOST:9400/metrics`` for NVIDIA's dcgm-exporter), parsed with
  ``prometheus_client.parser.text_string_to_metric_families`` (prometheus.github.io/client_python; the format
  is prometheus.io/docs/instrumenting/exposition_formats). One scrape: gauges are the value at that moment,
  counters and histograms are cumulative since the server started.
* **CSV time series**, long form: a header ``timestamp_s,metric,value`` and optionally ``labels`` (``k=v;k=v``),
  one row per sample; or wide form: ``timestamp_s`` then one column per metric. Counters and histogram
  buckets over a series count from the first row to the last.

Limits: at most :data:`MAX_BYTES` of UTF-8 text and :data:`MAX_SAMPLES` samples. Anything else raises
:class:`TelemetryError` with one line saying what is wrong and how to fix it; nothing is half-read.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from core.base import TELEMETRY_MAX_ABS, TELEMETRY_TIME_DOMAIN, checked, type_problem

#: A vLLM /metrics scrape is 50-300 kB and a dcgm-exporter scrape of 8 GPUs about 100 kB; a day of 15-second
#: samples of the metrics the rules read is a few MB of CSV. 20 MB leaves room and refuses accidents.
MAX_BYTES = 20_000_000
MAX_SAMPLES = 500_000

Labels = tuple[tuple[str, str], ...]


class TelemetryError(ValueError):
    """The input is not telemetry RA-BIT can read (message: one line, what and how to fix)."""


class Sample(BaseModel):
    """One sample: a finite value below :data:`core.base.limits.TELEMETRY_MAX_ABS` in size, at a time stamp inside
    :data:`core.base.limits.TELEMETRY_TIME_DOMAIN` (every way in: a dump, a CSV, a Prometheus answer, a stored
    analysis)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # the sample's name as exposed: vllm:num_preemptions_total, vllm:time_to_first_token_seconds_bucket
    labels: Labels = ()
    value: float
    t_s: float | None = None  # None: a single scrape

    @field_validator("value", mode="before")
    @classmethod
    def _finite(cls, v: object) -> object:
        return checked(v, value_problem(v))

    @field_validator("t_s", mode="before")
    @classmethod
    def _time(cls, v: object) -> object:
        why = None if v is None else TELEMETRY_TIME_DOMAIN.problem(v)
        return checked(v, None if why is None else f"time stamp {why}")


def value_problem(v: object) -> str | None:
    """None for a sample value RA-BIT can aggregate, else why not."""
    why = type_problem(v)
    if why is None and abs(float(v)) > TELEMETRY_MAX_ABS:  # type: ignore[arg-type]
        why = f"{float(v):.3g} is beyond {TELEMETRY_MAX_ABS:.0e} in size, which no server exposes"  # type: ignore[arg-type]
    return why


class Telemetry(BaseModel):
    """Parsed samples (frozen). Aggregations live in the functions below."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fmt: Literal["prometheus", "csv", "prometheus-api"]
    name: str
    samples: tuple[Sample, ...]

    def names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.samples)

    @property
    def num_series(self) -> int:
        return len({(s.name, s.labels) for s in self.samples})


# --- parsing ---------------------------------------------------------------------------------------------


def parse(data: bytes | str, name: str = "telemetry") -> Telemetry:
    """Read a Prometheus text dump or a CSV of time series (detected from the first line)."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise TelemetryError(
                f"{name} is {len(data) / 1e6:,.1f} MB; the limit is {MAX_BYTES / 1e6:.0f} MB "
                "(scrape one /metrics page, or export a shorter range or fewer metrics)"
            )
        if b"\x00" in data[:65536]:
            raise TelemetryError(
                f"{name} is binary, not telemetry: give a Prometheus text dump "
                "(curl http://HOST:PORT/metrics) or a CSV of time series"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TelemetryError(
                f"{name} is not UTF-8 text (byte {exc.start}): give a Prometheus text dump or a CSV of time series"
            ) from None
    else:
        text = data
        if len(text) > MAX_BYTES:
            raise TelemetryError(f"{name} is {len(text) / 1e6:,.1f} MB; the limit is {MAX_BYTES / 1e6:.0f} MB")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not first:
        raise TelemetryError(f"{name} is empty: give a Prometheus text dump or a CSV of time series")
    if first[0] in "{[<":
        raise TelemetryError(
            f"{name} is not telemetry (its first line {first[:40]!r} looks like JSON, TOML or "
            "HTML): give a Prometheus text dump (curl http://HOST:PORT/metrics) or a CSV with a "
            "header timestamp_s,metric,value"
        )
    head = first.split("{", 1)[0]
    if "," in head and not first.startswith("#"):
        return _parse_csv(text, name)
    return _parse_exposition(text, name)


def _parse_exposition(text: str, name: str) -> Telemetry:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise TelemetryError(f"{name}: {_locate(text, exc)}") from None
    samples = []
    for fam in families:
        for s in fam.samples:
            if not isinstance(s.value, (int, float)) or isinstance(s.value, bool):
                raise TelemetryError(f"{name}: sample {s.name} has a non-numeric value {s.value!r}")
            if fam.type == "summary" and "quantile" in s.labels and math.isnan(s.value):
                continue  # a summary with no observations yet exposes NaN quantiles (Prometheus's own convention)
            why = value_problem(float(s.value))
            if why is None and s.value < 0 and fam.type in ("counter", "histogram", "summary"):
                why = f"{s.value:g} is negative, and a {fam.type}'s samples count up from 0"
            if why is not None:
                raise TelemetryError(f"{name}: {_sample_line(text, s.name)}sample {s.name}: {why}")
            samples.append(Sample(name=s.name, labels=tuple(sorted(s.labels.items())), value=float(s.value)))
            if len(samples) > MAX_SAMPLES:
                raise TelemetryError(f"{name} has more than {MAX_SAMPLES:,} samples; scrape fewer targets")
    if not samples:
        raise TelemetryError(f"{name} has no samples: is it a Prometheus text dump of /metrics?")
    _check_histograms(samples, name)
    return Telemetry(fmt="prometheus", name=name, samples=tuple(samples))


def _sample_line(text: str, sample: str) -> str:
    """The ``"line N: "`` of the first sample line of ``sample`` whose value is not a finite number ("" when none is)."""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#") or s.partition("{")[0].split(" ", 1)[0] != sample:
            continue
        parts = s.rsplit("}", 1)[-1].split() if "}" in s else s.split()[1:]
        try:
            if parts and (value_problem(float(parts[0])) is not None or float(parts[0]) < 0):
                return f"line {i}: "
        except ValueError:
            continue
    return ""


def _locate(text: str, exc: Exception) -> str:
    """The first line the parser refuses on its own, with its number (the parser itself does not say)."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(s + "\n"))
        except (ValueError, TypeError, IndexError, KeyError) as e:
            cut = " (the file looks truncated)" if i == len(lines) and not text.endswith("\n") else ""
            return f"line {i}: {_why(e)}{cut}: {s[:80]!r}"
    return f"not a Prometheus text exposition ({_why(exc)})"


def _why(exc: Exception) -> str:
    msg = str(exc)
    if "convert string to float" in msg:
        return "the sample value is not a number"
    return msg.splitlines()[0][:120] if msg else type(exc).__name__


def _check_histograms(samples: list[Sample], name: str) -> None:
    """Every histogram series needs its +Inf bucket and its _count: a dump cut short loses them."""
    buckets: dict[tuple[str, Labels], set[str]] = defaultdict(set)
    counts: set[tuple[str, Labels]] = set()
    for s in samples:
        if s.name.endswith("_bucket"):
            key = (s.name[:-7], tuple(kv for kv in s.labels if kv[0] != "le"))
            buckets[key].add(dict(s.labels).get("le", ""))
        elif s.name.endswith("_count"):
            counts.add((s.name[:-6], s.labels))
    for (base, labels), les in buckets.items():
        if "+Inf" not in les or (base, labels) not in counts:
            raise TelemetryError(
                f"{name}: histogram {base} has no {'+Inf bucket' if '+Inf' not in les else '_count'}"
                " (the file looks truncated; scrape /metrics again)"
            )


def _parse_csv(text: str, name: str) -> Telemetry:
    """A telemetry CSV: a timestamp column, then either one column per metric (wide) or ``metric``, ``value`` and
    optional ``labels`` columns (long); at most :data:`MAX_SAMPLES` samples."""
    rows = csv.reader(io.StringIO(text))
    header = _csv_header(rows, name)
    samples: list[Sample] = []
    try:
        for n, row in enumerate(rows, 2):
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TelemetryError(
                    f"{name}: line {n} has {len(row)} fields, the header has {len(header)}"
                    + (" (the file looks truncated)" if n > 2 else "")
                )
            samples.extend(_csv_samples(header, row, name, n))
            if len(samples) > MAX_SAMPLES:
                raise TelemetryError(f"{name} has more than {MAX_SAMPLES:,} samples; export a shorter range")
    except csv.Error as exc:
        raise TelemetryError(f"{name}: not a readable CSV ({exc})") from None
    if not samples:
        raise TelemetryError(f"{name} has a header but no rows")
    return Telemetry(fmt="csv", name=name, samples=tuple(samples))


def _csv_header(rows: Iterator[list[str]], name: str) -> list[str]:
    """The CSV's header, which starts with the timestamp column."""
    try:
        header = [h.strip() for h in next(rows)]
    except (StopIteration, csv.Error) as exc:
        raise TelemetryError(f"{name}: not a CSV ({exc})") from None
    if not header or header[0] not in ("timestamp_s", "timestamp", "time"):
        raise TelemetryError(
            f"{name}: a telemetry CSV starts with a timestamp_s column "
            f"(long form: timestamp_s,metric,value[,labels]); got {header[0]!r}"
        )
    return header


def _csv_samples(header: list[str], row: list[str], name: str, n: int) -> list[Sample]:
    """Line ``n``'s samples: one (its metric, labels and value) in the long form, one per non-empty cell in the
    wide form."""
    t = _number(row[0], name, n, header[0], time=True)
    if "metric" in header and "value" in header:
        rec = dict(zip(header, row))
        labels = _labels(rec.get("labels", ""), name, n)
        return [Sample(name=rec["metric"].strip(), labels=labels, value=_number(rec["value"], name, n, "value"), t_s=t)]
    return [
        Sample(name=col, value=_number(cell, name, n, col), t_s=t)
        for col, cell in zip(header[1:], row[1:])
        if cell.strip()
    ]


def _number(cell: str, name: str, line: int, col: str, *, time: bool = False) -> float:
    """A CSV cell's number (``time``: a time stamp [s]), or TelemetryError naming the line, the column and why."""
    try:
        v = float(cell.strip())
    except ValueError:
        raise TelemetryError(f"{name}: line {line}, column {col}: {cell.strip()[:40]!r} is not a number") from None
    why = TELEMETRY_TIME_DOMAIN.problem(v) if time else value_problem(v)
    if why is not None:
        raise TelemetryError(f"{name}: line {line}, column {col}: {why}")
    return v


def _labels(cell: str, name: str, line: int) -> Labels:
    out = []
    for part in cell.split(";"):
        if not part.strip():
            continue
        if "=" not in part:
            raise TelemetryError(f"{name}: line {line}: labels are k=v;k=v, got {part.strip()[:40]!r}")
        k, v = part.split("=", 1)
        out.append((k.strip(), v.strip().strip('"')))
    return tuple(sorted(out))


# --- aggregation -----------------------------------------------------------------------------------------


def _by_series(tel: Telemetry, name: str) -> dict[Labels, list[tuple[float, float]]]:
    out: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for s in tel.samples:
        if s.name == name and not math.isnan(s.value):
            out[s.labels].append((s.t_s if s.t_s is not None else 0.0, s.value))
    for v in out.values():
        v.sort()
    return out


def gauge(tel: Telemetry, name: str, how: Literal["mean", "max", "min"] = "mean") -> float | None:
    """A gauge over label sets (GPUs, replicas) and time: the mean (or max, min) of each series' time-mean."""
    series = _by_series(tel, name)
    if not series:
        return None
    means = [sum(v for _, v in pts) / len(pts) for pts in series.values()]
    return {"mean": sum(means) / len(means), "max": max(means), "min": min(means)}[how]


def gauge_sum(tel: Telemetry, name: str) -> float | None:
    """A gauge summed over label sets (e.g. requests waiting on every replica), averaged over time."""
    series = _by_series(tel, name)
    if not series:
        return None
    return sum(sum(v for _, v in pts) / len(pts) for pts in series.values())


def counter(tel: Telemetry, name: str) -> float | None:
    """A counter summed over label sets: its last value, or last - first over a time series."""
    series = _by_series(tel, name)
    if not series:
        return None
    return sum(pts[-1][1] - (pts[0][1] if len(pts) > 1 else 0.0) for pts in series.values())


def trend(tel: Telemetry, name: str) -> tuple[float, float] | None:
    """(mean of the first third, mean of the last third) of a gauge summed over label sets; None for one scrape."""
    by_t: dict[float, float] = defaultdict(float)
    for s in tel.samples:
        if s.name == name and s.t_s is not None and not math.isnan(s.value):
            by_t[s.t_s] += s.value
    if len(by_t) < 3:
        return None
    vals = [by_t[t] for t in sorted(by_t)]
    k = max(1, len(vals) // 3)
    return sum(vals[:k]) / k, sum(vals[-k:]) / k


def histogram(tel: Telemetry, base: str) -> tuple[tuple[tuple[float, float], ...], float, float] | None:
    """((upper bound, cumulative count), ...), sum, count of a histogram over every label set."""
    buckets: dict[float, float] = defaultdict(float)
    found = False
    for labels, pts in _by_series(tel, base + "_bucket").items():
        le = dict(labels).get("le")
        if le is None:
            continue
        bound = math.inf if le in ("+Inf", "inf", "Inf") else float(le)
        buckets[bound] += pts[-1][1] - (pts[0][1] if len(pts) > 1 else 0.0)
        found = True
    if not found:
        return None
    total = counter(tel, base + "_sum") or 0.0
    count = counter(tel, base + "_count") or buckets.get(math.inf, 0.0)
    return tuple(sorted(buckets.items())), total, count


def quantile(tel: Telemetry, base: str, q: float) -> float | None:
    """The q-quantile of a histogram, interpolated linearly inside its bucket (as PromQL's histogram_quantile)."""
    h = histogram(tel, base)
    if h is None:
        return None
    buckets, _, _ = h
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lo_bound, lo_count = 0.0, 0.0
    for bound, cum in buckets:
        if cum >= rank:
            if math.isinf(bound):
                return lo_bound  # in the +Inf bucket: the highest finite bound, as histogram_quantile does
            if cum == lo_count:
                return bound
            return lo_bound + (bound - lo_bound) * (rank - lo_count) / (cum - lo_count)
        lo_bound, lo_count = bound, cum
    return lo_bound


def mean(tel: Telemetry, base: str) -> float | None:
    """Histogram mean = _sum / _count."""
    h = histogram(tel, base)
    if h is None or h[2] <= 0:
        return None
    return h[1] / h[2]


# --- storage -------------------------------------------------------------------------------------------


def to_payload(tel: Telemetry) -> dict:
    """A JSON-ready form of parsed telemetry (what a saved analysis stores)."""
    return {
        "format": tel.fmt,
        "name": tel.name,
        "samples": [[s.name, dict(s.labels), s.value, s.t_s] for s in tel.samples],
    }


def from_payload(payload: dict) -> Telemetry:
    """Telemetry back from :func:`to_payload` (TelemetryError when the stored form is not one)."""
    try:
        rows = payload["samples"]
        if not isinstance(rows, list):
            raise TypeError("its samples are not a list")
        samples = []
        for i, (n, lab, v, t) in enumerate(rows, 1):
            if v is None:  # a NaN stored by an earlier version: a sample with no value
                continue
            why = value_problem(v) or (None if t is None else TELEMETRY_TIME_DOMAIN.problem(t))
            if why is not None:
                raise ValueError(f"sample {i} ({str(n)[:60]}): {why}")
            samples.append(Sample(name=n, labels=tuple(sorted(lab.items())), value=v, t_s=t))
        return Telemetry(fmt=payload["format"], name=payload["name"], samples=tuple(samples))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TelemetryError(f"stored telemetry cannot be read: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    """The first line of an exception's message (a pydantic error's own is several)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(map(str, e['loc']))}: {str(e['msg']).removeprefix('Value error, ')}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]
