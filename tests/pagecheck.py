"""What a visitor reads on a page (AppTest), and the numbers on it that cannot be: NaN, an infinity, or a size, a
count or a time below zero. Used by the page fuzz tests (tests/test_fuzz_pages.py) and the regressions.

Text is read from every element that shows text (markdown, captions, alerts, metrics with their deltas, LaTeX,
headers, widget labels), the cells of tables and data frames, and the strings of every chart (titles, axis
titles, annotations, hover templates, trace names). Prose may say that a quantity is undefined; a value may not.
Markdown escapes (``\\-753``) are removed first, so an escaped number is read as shown.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

#: Every page a visitor can open, by name: the files under pages/ (a new page is checked without being listed).
PAGES = tuple(sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "pages").glob("*.py")))

_UNITS = (
    r"(?:%|[kMGTPE]i?B|B|bytes?|tokens?|tok(?:/s)?|seq(?:uences?)?|GPUs?|GPU-hours?|ms|µs|us|ns|s|min|h|hours?|days?|"
    r"req(?:uests)?/s|requests|replicas?|FLOP|TFLOP|GFLOP|x|×)"
)
#: Not a number where a value is shown (a metric's value, a table cell, a formula): "nan", "inf", "infinity", "∞".
NON_FINITE = re.compile(r"(?<![\w.])(?:nan|[+-]?inf|infinity|∞)(?![\w])", re.IGNORECASE)
#: The same in prose (a caption may explain that a quantity is undefined): only as a value, with its unit or after
#: "=" ("inf days", "inf% of the capacity", "= nan").
NON_FINITE_IN_PROSE = re.compile(
    r"(?:(?<![\w.])(?:nan|[+-]?inf|infinity|∞)\s?" + _UNITS + r"(?![\w])|=\s?(?:nan|[+-]?inf|infinity|∞)(?![\w]))",
    re.IGNORECASE,
)
_PROSE = frozenset(
    {"markdown", "caption", "error", "warning", "info", "success", "text", "title", "header", "subheader"}
)
#: Table columns whose values are signed by design (a change, a gap, a log-move of a range).
SIGNED_COLUMNS = re.compile(r"change|delta|Δ|gap|d↓|d↑|\bvs\b|saving|difference|ln\(", re.IGNORECASE)

#: A negative amount of something that cannot be negative: bytes, tokens, sequences, GPUs, time, rates. The sign is
#: attached to the number (a formula's "x − 1.5 GB" has a space and is not a value) and follows no word or digit
#: (so a range "1-2 GB" is not read as -2 GB).
NEGATIVE_SIZE = re.compile(r"(?<![\w.)\]}])[-−]\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?\s?" + _UNITS + r"(?![\w/])")
_TEXT_KINDS = (
    "markdown",
    "caption",
    "error",
    "warning",
    "info",
    "success",
    "exception",
    "latex",
    "text",
    "code",
    "title",
    "header",
    "subheader",
)


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def texts(at) -> list[tuple[str, str]]:
    """(where, text) for everything the page shows as text."""
    out: list[tuple[str, str]] = []
    for kind in _TEXT_KINDS:
        for e in getattr(at, kind, ()):
            out.append((kind, _unescape(str(e.value))))
    for m in at.metric:
        out.append(("metric", _unescape(f"{m.label}: {m.value} {m.delta or ''}")))
    for kind in ("button", "checkbox", "toggle", "selectbox", "number_input", "slider", "text_input", "radio"):
        for w in getattr(at, kind, ()):
            out.append((kind, _unescape(str(getattr(w, "label", "")))))
    for e in at.get("expander"):
        out.append(("expander", _unescape(str(getattr(e, "label", "")))))
    for df in list(at.dataframe) + list(at.table):
        frame = df.value
        for col in frame.columns:
            out.append(("table column", str(col)))
            if SIGNED_COLUMNS.search(str(col)):
                continue
            for v in frame[col].tolist():
                if isinstance(v, str):
                    out.append((f"table {col}", v))
                elif isinstance(v, float) and math.isinf(v):
                    out.append((f"table {col}", "inf"))
    for chart in at.get("plotly_chart"):
        out.extend(_chart_texts(json.loads(chart.proto.spec)))
    return out


_CHART_STRINGS = frozenset({"text", "hovertext", "hovertemplate", "name", "title", "texttemplate"})


def _chart_texts(spec: Any) -> list[tuple[str, str]]:
    """The strings a chart shows (its numbers are drawn, and a tornado's bars are signed moves by design)."""
    out: list[tuple[str, str]] = []

    def walk(x: Any, key: str = "") -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, str) and key in _CHART_STRINGS:
            out.append((f"chart {key}", re.sub(r"%\{[^}]*\}", "", x)))  # a template's %{x:.3g} is filled in later

    walk(spec)
    return out


def impossible(at) -> list[str]:
    """Every place the page shows NaN, an infinity or a negative size, count or time ("" when none)."""
    bad = []
    for where, text in texts(at):
        for pat in (NON_FINITE_IN_PROSE if where in _PROSE else NON_FINITE, NEGATIVE_SIZE):
            m = pat.search(text)
            if m:
                bad.append(f"{where}: ...{text[max(0, m.start() - 40) : m.end() + 20]}...")
    return bad
