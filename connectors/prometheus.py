"""Telemetry from a Prometheus server's HTTP API (optional, off unless a URL is given).

One ``GET /api/v1/query_range`` (prometheus.io/docs/prometheus/latest/querying/api, "Range queries") asks for
every series the diagnostic rules read, over ``since_s`` seconds back from now at ``step_s``; the answer's
``matrix`` becomes :class:`core.operations.telemetry.Telemetry` samples. Direct connection (no proxy from the
environment: the server is on the intranet), one hard timeout, at most :data:`core.operations.telemetry.MAX_BYTES` read.
A bad URL, a refused connection, a timeout, an HTTP error or an answer that is not the API's JSON raises
:class:`PrometheusError` with one line.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from core import operations
from core.base import QUERY_DOMAINS
from core.operations import MAX_BYTES, MAX_SAMPLES, Sample, Telemetry

#: Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS = 11_000


class PrometheusError(ValueError):
    """The server could not be asked or did not answer usably (one line)."""


def metric_names() -> tuple[str, ...]:
    """Every sample name the rules read (histograms as their _bucket, _sum and _count series)."""
    out: list[str] = []
    for rule in operations.RULES:
        for metric in rule.needs:
            for name in metric:
                names = [name + s for s in ("_bucket", "_sum", "_count")] if metric in operations.HISTOGRAMS else [name]
                out += [n for n in names if n not in out]
    return tuple(out)


def check_url(url: str) -> str:
    """The base URL without a trailing slash (PrometheusError when it is not an http(s) URL with a host)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(f"{url!r} is not a Prometheus URL: give http://HOST:9090 (http or https, with a host)")
    if parts.query or parts.fragment:
        raise PrometheusError(f"{url!r}: give the server's base URL without a query")
    try:
        _ = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        raise PrometheusError(f"{url!r}: the port is not a number") from None
    return url.strip().rstrip("/")


def query_range(
    url: str, since_s: float = 3600.0, step_s: float = 15.0, timeout_s: float = 5.0, now_s: float | None = None
) -> Telemetry:
    """The rules' series over the last ``since_s`` seconds from the server at ``url``."""
    base = check_url(url)
    longest = QUERY_DOMAINS["timeout_s"].hi
    if not (0 < timeout_s <= longest):
        raise PrometheusError(f"timeout {timeout_s:g} s: give 0-{longest:g} s")
    if since_s <= 0 or step_s <= 0:
        raise PrometheusError("the range and the step must be positive")
    end = time.time() if now_s is None else now_s
    step = max(step_s, since_s / MAX_POINTS)
    query = '{__name__=~"' + "|".join(n.replace(".", "\\\\.") for n in metric_names()) + '"}'
    qs = urllib.parse.urlencode(
        {"query": query, "start": f"{end - since_s:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    )
    req = urllib.request.Request(f"{base}/api/v1/query_range?{qs}", headers={"Accept": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            body = _read(resp, deadline, timeout_s)
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            detail = json.loads(exc.read(65536) or b"{}").get("error", "")
        except (ValueError, OSError):
            pass
        raise PrometheusError(f"{base} answered HTTP {exc.code}{': ' + detail if detail else ''}") from None
    except TimeoutError:
        raise PrometheusError(f"{base} did not answer within {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise PrometheusError(f"{base} did not answer within {timeout_s:g} s") from None
        raise PrometheusError(f"cannot reach {base}: {getattr(reason, 'strerror', None) or reason}") from None
    except OSError as exc:
        raise PrometheusError(f"cannot reach {base}: {exc.strerror or exc}") from None
    return _to_telemetry(body, base)


def _read(resp, deadline: float, timeout_s: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise PrometheusError(f"the answer took longer than {timeout_s:g} s")
        chunk = resp.read(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BYTES:
            raise PrometheusError(
                f"the answer is over {MAX_BYTES / 1e6:.0f} MB: ask for a shorter range or a larger step"
            )
        chunks.append(chunk)


def _to_telemetry(body: bytes, base: str) -> Telemetry:
    try:
        doc = json.loads(body)
    except ValueError:
        raise PrometheusError(
            f"{base} did not answer with the Prometheus API's JSON (is it a Prometheus server?)"
        ) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error", "no status") if isinstance(doc, dict) else "not an object"
        raise PrometheusError(f"{base}: the query failed: {err}")
    data = doc.get("data") or {}
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{base}: expected a matrix answer, got {data.get('resultType')!r}")
    samples: list[Sample] = []
    for series in data["result"]:
        try:
            labels = dict(series["metric"])
            name = labels.pop("__name__")
            for t, v in series["values"]:
                if str(v) == "NaN":  # no value at that step (Prometheus writes NaN where a rule divided by 0)
                    continue
                samples.append(Sample(name=name, labels=tuple(sorted(labels.items())), value=float(v), t_s=float(t)))
        except (KeyError, TypeError, ValueError) as exc:
            raise PrometheusError(f"{base}: a series in the answer is malformed ({exc})") from None
        if len(samples) > MAX_SAMPLES:
            raise PrometheusError(f"the answer has more than {MAX_SAMPLES:,} samples: ask for a larger step")
    if not samples:
        raise PrometheusError(f"{base} has none of the vLLM or dcgm-exporter series in that range")
    return Telemetry(fmt="prometheus-api", name=base, samples=tuple(samples))
