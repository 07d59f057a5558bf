"""Every piece of text an AppTest run puts on the screen, for checks that read a page as a visitor does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

#: Python's exponent notation as ``:g`` / ``:e`` write it: 1e+12, 1.66e+03, 2e-05.
EXPONENT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[+-]\d+\b")
#: Keys of a plotly figure whose strings are drawn (titles, labels, hover and annotation texts, tick texts).
_PLOTLY_TEXT_KEYS = {"text", "name", "hovertemplate", "texttemplate", "ticktext", "ticksuffix", "tickprefix"}


def _strings(obj: Any, key: str = "") -> Iterator[str]:
    if isinstance(obj, str):
        if key in _PLOTLY_TEXT_KEYS or key == "":
            yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k == "title" and isinstance(v, str):
                yield v
            else:
                yield from _strings(v, k if k in _PLOTLY_TEXT_KEYS or k in ("title", "annotations") else key)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v, key)


def _figure_text(spec: str) -> Iterator[str]:
    fig = json.loads(spec)
    for tr in fig.get("data", []):
        for k in ("name", "text", "hovertemplate", "texttemplate"):
            yield from _strings(tr.get(k), "text")
        if isinstance(tr.get("customdata"), list) and "%{customdata" in str(tr.get("hovertemplate", "")):
            yield from _strings(tr.get("customdata"), "text")
    yield from _strings(fig.get("layout", {}), "")


def _proto_strings(msg: Any) -> Iterator[str]:
    """Every string field of a protobuf message, nested messages included (labels, values, help, options)."""
    for field, value in msg.ListFields():
        if field.name in ("spec", "data", "arrow_data", "id", "form_id", "key", "theme", "icon"):
            continue
        items = list(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else [value]
        for v in items:
            if isinstance(v, str):
                yield v
            elif hasattr(v, "ListFields"):
                yield from _proto_strings(v)


def texts(at) -> list[str]:
    """The text of every element of the page: markdown, captions, metrics, alerts, widget labels and options,
    the string cells of every table, and the titles, labels and hover texts of every chart."""
    out: list[str] = []

    def walk(node) -> None:
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)
        proto = getattr(node, "proto", None)
        kind = getattr(node, "type", "")
        if proto is None:
            return
        if kind == "plotly_chart":
            out.extend(_figure_text(proto.spec))
        elif kind in ("arrow_data_frame", "dataframe", "table", "arrow_table"):
            df = node.value
            out.extend(str(c) for c in df.columns)
            for col in df.columns:
                if df[col].dtype == object or str(df[col].dtype).startswith("str"):
                    out.extend(str(v) for v in df[col].tolist())
        else:
            out.extend(_proto_strings(proto))

    walk(at._tree)
    return out


def exponents(at) -> list[str]:
    """The texts on the page that show a number in Python's exponent notation."""
    return sorted({t for t in texts(at) if EXPONENT.search(t)})
