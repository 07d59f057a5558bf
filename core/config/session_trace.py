"""Replayed session traces: the turns of recorded multi-turn sessions, with their session, order and times.

Two shapes are read, each validated with the line (or record), the column and how to fix it:

* **rows** (CSV with a header, JSON lines, or a JSON array of objects), one per turn: a session column
  (:data:`SESSION_COLUMNS`), a turn index or a start time (:data:`TURN_COLUMNS`, :data:`TIME_COLUMNS`, seconds), the
  input and output tokens (the plain trace's columns, :data:`core.config.workload.INPUT_COLUMNS`), and optionally
  an end time (:data:`END_COLUMNS`, seconds) from which the gap to the next turn is taken;
* **OpenTelemetry spans** (an OTLP JSON export ``{"resourceSpans": ...}``, or spans one per line as the SDK's
  console exporter writes them): every span that carries ``gen_ai.usage.input_tokens`` is one model call, its
  session the ``gen_ai.conversation.id`` attribute or else its trace id, its start and end the span's
  (OpenTelemetry semantic conventions for generative AI, "gen-ai-spans", attributes ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.conversation.id``; opentelemetry.io/docs/specs/semconv/gen-ai/). Agent
  and tool spans without token usage are the gaps between the calls.

The input tokens of each turn are taken as recorded: they already hold the context the session had grown to.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime
from typing import Any

from core.base import MAX_JSON_DEPTH, json_depth
from core.config.sessions import SessionTurn
from core.config.workload import INPUT_COLUMNS, MAX_TRACE_ROWS, OUTPUT_COLUMNS, _as_tokens

SESSION_COLUMNS = ("session_id", "session", "conversation_id", "chat_id", "trace_id", "gen_ai.conversation.id")
TURN_COLUMNS = ("turn", "turn_index", "turn_id", "round", "step")
TIME_COLUMNS = ("timestamp", "timestamp_s", "start_s", "start_time_s", "time_s", "arrival_s", "arrival_time")
END_COLUMNS = ("end_s", "end_time_s", "end_timestamp", "finish_s")
OTEL_INPUT = "gen_ai.usage.input_tokens"
OTEL_OUTPUT = "gen_ai.usage.output_tokens"
OTEL_SESSION = "gen_ai.conversation.id"
_FIX = "name the columns session_id, turn (or timestamp), input_tokens, output_tokens"


def _find(names: list[str], wanted: tuple[str, ...]) -> str | None:
    low = {n.strip().lower(): n for n in names}
    return next((low[w] for w in wanted if w in low), None)


def _seconds(v: object, where: str, col: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{where}: {col} must be a time in seconds, got {v!r}")
    try:
        f = float(v)
    except ValueError:
        try:
            f = datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError(f"{where}: {col} must be a time in seconds or an ISO 8601 time, got {v!r}") from None
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{where}: {col} must be a finite time >= 0 s, got {v!r}")
    return f


# (session key, order key, start [s] or None, end [s] or None, input, output, where)
_Row = tuple[str, float, float | None, float | None, int, int, str]


def _flat_rows(records: list[tuple[str, dict[str, Any]]]) -> list[_Row]:
    names = list(dict.fromkeys(k for _, r in records for k in r))
    cs = _find(names, SESSION_COLUMNS)
    if cs is None:
        raise ValueError(f"no session column: expected one of {', '.join(SESSION_COLUMNS)}; {_FIX}")
    ct, cx, ce = _find(names, TURN_COLUMNS), _find(names, TIME_COLUMNS), _find(names, END_COLUMNS)
    if ct is None and cx is None:
        raise ValueError(
            f"no turn or time column: expected one of {', '.join(TURN_COLUMNS + TIME_COLUMNS)} to order each "
            f"session's turns; {_FIX}"
        )
    ci, co = _find(names, INPUT_COLUMNS), _find(names, OUTPUT_COLUMNS)
    if ci is None or co is None:
        miss = INPUT_COLUMNS if ci is None else OUTPUT_COLUMNS
        raise ValueError(f"no {'input' if ci is None else 'output'}-length column: expected one of {', '.join(miss)}")
    rows: list[_Row] = []
    for where, r in records:
        sid = r.get(cs)
        if sid is None or str(sid).strip() == "":
            raise ValueError(f"{where}: {cs} is empty; give every turn its session")
        start = _seconds(r.get(cx), where, cx) if cx is not None else None
        if ct is not None:
            v = r.get(ct)
            if not _is_num(v) or float(v) != int(float(v)):  # type: ignore[arg-type]
                raise ValueError(f"{where}: {ct} must be a whole turn number >= 0, got {v!r}")
            order = float(v)  # type: ignore[arg-type]
        else:
            order = start if start is not None else 0.0
        end = _seconds(r.get(ce), where, ce) if ce is not None and r.get(ce) not in (None, "") else None
        rows.append(
            (str(sid), order, start, end, _as_tokens(r.get(ci), where, ci), _as_tokens(r.get(co), where, co), where)
        )
    return rows


def _is_num(v: object) -> bool:
    try:
        return not isinstance(v, bool) and float(v) >= 0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    a = span.get("attributes") or {}
    if isinstance(a, dict):
        return a
    out: dict[str, Any] = {}
    for kv in a if isinstance(a, list) else []:  # OTLP JSON: [{"key": ..., "value": {"intValue": ...}}]
        if isinstance(kv, dict) and isinstance(kv.get("value"), dict):
            v = kv["value"]
            out[str(kv.get("key"))] = next(iter(v.values()), None)
    return out


def _span_time(span: dict[str, Any], which: str, where: str) -> float | None:
    nano = span.get(f"{which}TimeUnixNano", span.get(f"{which}_time_unix_nano"))
    if nano is not None:
        return _seconds(nano, where, f"{which}TimeUnixNano") / 1e9
    v = span.get(f"{which}_time", span.get(f"{which}Time"))
    return None if v is None else _seconds(v, where, f"{which}_time")


def _otel_rows(spans: list[tuple[str, dict[str, Any]]]) -> list[_Row]:
    rows: list[_Row] = []
    for where, sp in spans:
        at = _attrs(sp)
        if OTEL_INPUT not in at:
            continue  # an agent or tool span: no model call of its own
        if OTEL_OUTPUT not in at:
            raise ValueError(f"{where}: the span has {OTEL_INPUT} but no {OTEL_OUTPUT}; export both usage attributes")
        ctx: dict[str, Any] = sp["context"] if isinstance(sp.get("context"), dict) else {}
        sid = at.get(OTEL_SESSION) or sp.get("traceId") or sp.get("trace_id") or ctx.get("trace_id")
        if not sid:
            raise ValueError(f"{where}: the span has neither {OTEL_SESSION} nor a trace id to name its session")
        start = _span_time(sp, "start", where)
        if start is None:
            raise ValueError(f"{where}: the span has no start time (startTimeUnixNano or start_time)")
        end = _span_time(sp, "end", where)
        i = _as_tokens(at[OTEL_INPUT], where, OTEL_INPUT)
        rows.append((str(sid), start, start, end, i, _as_tokens(at[OTEL_OUTPUT], where, OTEL_OUTPUT), where))
    if not rows:
        raise ValueError(f"no span carries {OTEL_INPUT}: export the model-call spans with their token usage")
    return rows


def _otlp_spans(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for r, rs in enumerate(doc.get("resourceSpans") or [], 1):
        for s, ss in enumerate((rs or {}).get("scopeSpans") or (rs or {}).get("instrumentationLibrarySpans") or [], 1):
            for k, sp in enumerate((ss or {}).get("spans") or [], 1):
                if isinstance(sp, dict):
                    out.append((f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]", sp))
    return out


def _is_span(rec: dict[str, Any]) -> bool:
    return any(k in rec for k in ("startTimeUnixNano", "start_time", "spanId", "span_id", "context"))


def parse_session_trace(text: str) -> tuple[SessionTurn, ...]:
    """The turns of a session trace (see the module docstring), sessions numbered in order of their first start (or
    first appearance), each session's turns in order. Raises ``ValueError`` naming the line or record, the column
    and how to fix it."""
    text = text.lstrip("\ufeff").strip()
    if not text:
        raise ValueError("the session trace is empty")
    if text[0] in "{[" and json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"the session trace nests deeper than {MAX_JSON_DEPTH} levels")
    rows = _json_trace_rows(text) if text[0] in "{[" else _csv_trace_rows(text)
    if len(rows) > MAX_TRACE_ROWS:
        raise ValueError(f"the session trace has more than {MAX_TRACE_ROWS:,} turns")
    return _turns(rows)


def _json_trace_rows(text: str) -> list[_Row]:
    """The turns of a JSON trace: an OTLP export (``resourceSpans``), or an array or lines of records that are all
    spans (OpenTelemetry's attributes) or flat turns."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "resourceSpans" in whole:
        return _otel_rows(_otlp_spans(whole))
    records: list[tuple[str, dict[str, Any]]] = []
    for where, v in _json_items(text, whole):
        if not isinstance(v, dict):
            raise ValueError(f"{where}: expected an object (one turn or one span)")
        records.append((where, v))
    spans = [(w, r) for w, r in records if _is_span(r)]
    if spans and len(spans) == len(records):
        return _otel_rows(spans)
    return _flat_rows(records)


def _json_items(text: str, whole: Any) -> list[tuple[str, Any]]:
    """The records of a JSON array (``record`` n), or of JSON lines (``line`` n; a line that is not JSON refused)."""
    if isinstance(whole, list):
        return [(f"record {k}", v) for k, v in enumerate(whole, 1)]
    items = []
    for ln, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append((f"line {ln}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {ln}: not valid JSON ({exc.msg})") from None
    return items


def _csv_trace_rows(text: str) -> list[_Row]:
    """The turns of a CSV trace, one a line under its header."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        recs = [(f"line {reader.line_num}", dict(r)) for r in reader]
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: not readable CSV ({exc})") from None
    if not recs:
        raise ValueError("the session trace has a header but no rows")
    return _flat_rows(recs)


def _turns(rows: list[_Row]) -> tuple[SessionTurn, ...]:
    by: dict[str, list[_Row]] = {}
    for r in rows:
        by.setdefault(r[0], []).append(r)
    timed = all(r[2] is not None for r in rows)
    t0 = min(r[2] for r in rows if r[2] is not None) if timed else 0.0
    sessions = list(by.values())
    for turns in sessions:
        turns.sort(key=lambda r: r[1])
        for a, b in zip(turns, turns[1:]):
            if a[1] == b[1]:
                raise ValueError(
                    f"{b[6]}: session {b[0]!r} has two turns at the same turn / time ({a[6]} too); number its turns"
                )
    if timed:
        sessions.sort(key=lambda ts: ts[0][2])  # type: ignore[arg-type, return-value]
    out: list[SessionTurn] = []
    for k, turns in enumerate(sessions):
        prev_end: float | None = None
        for r in turns:
            start = (r[2] - t0) if timed and r[2] is not None else None
            gap = None
            if prev_end is not None and r[2] is not None:
                gap = max(0.0, r[2] - prev_end)
            out.append(SessionTurn(session=k, start_s=start, gap_s=gap, input_tokens=r[4], output_tokens=r[5]))
            prev_end = r[3]
    return tuple(out)
