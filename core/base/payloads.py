"""What a file, a form or a link may carry before it is parsed or shown: sizes, encodings, JSON, compressed link
objects, and text a person typed.

* :func:`read_regular_file`, :func:`decode_text`, :func:`parse_json`, :func:`inflate`: size before reading,
  encoding, nesting depth and number length before parsing, only regular files read, NaN, infinities and a key
  given twice refused; each raises :class:`PayloadError` (a ``ValueError``) with a one-line reason.
* :func:`text_problem`: names, notes and authors are text a person typed (no control characters).
* The bounds of a saved analysis (:data:`MAX_ANALYSIS_BYTES`) and of the import that reads its export back.

The numeric domains and the work budgets are :mod:`core.base.limits`'. Pure: no Streamlit, no global mutable state.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import unicodedata
import zlib
from typing import Any


def shown_value(value: Any, limit: int = 40) -> str:
    """A value as a message quotes it, cut to ``limit`` characters."""
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


_shown = shown_value


#: A Hugging Face config.json is 1-10 kB (the largest multimodal ones about 30 kB); a RA-BIT config file
#: with a custom model about 3 kB.
MAX_CONFIG_BYTES = 1_000_000
#: Traces and price lists: 100,000 rows of a few numbers fit in about 5 MB.
MAX_TABLE_BYTES = 20_000_000
#: One CSV field: a number or a name, never more than a line of text.
MAX_CSV_FIELD_CHARS = 4096
#: An encoded link parameter (custom model, assumptions): a few kB compressed; URLs beyond 64 kB are
#: dropped by browsers and proxies anyway.
MAX_LINK_PARAM_CHARS = 65_536
#: What a link parameter may inflate to: the JSON of a model or the assumptions is a few kB.
MAX_INFLATED_BYTES = 1_000_000
#: JSON nesting: a config.json nests 3-4 levels (text_config inside a multimodal config).
MAX_JSON_DEPTH = 32
#: Digits of one JSON number: a 64-bit integer has at most 20.
MAX_JSON_NUMBER_CHARS = 40


class PayloadError(ValueError):
    """A payload over its size, depth or encoding limit, refused before it was parsed."""


def read_regular_file(path: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of a regular file no larger than ``max_bytes``.

    A named pipe, device or directory is refused without blocking (opened non-blocking, checked with
    fstat before any read). Raises ``OSError`` for an unreadable path and :class:`PayloadError` for a
    file that is not regular or too large.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PayloadError(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise PayloadError(f"{path} is {st.st_size:,} bytes; the limit is {max_bytes:,}")
        chunks, left = [], max_bytes + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise PayloadError(f"{path} is over {max_bytes:,} bytes")
    return data


def decode_text(data: bytes | str, what: str = "the file", max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """UTF-8 text (a leading byte-order mark is dropped) or :class:`PayloadError` saying why not."""
    if isinstance(data, str):
        if len(data) > max_bytes:
            raise PayloadError(f"{what} is over {max_bytes:,} characters")
        return data.removeprefix("\ufeff")
    if len(data) > max_bytes:
        raise PayloadError(f"{what} is {len(data):,} bytes; the limit is {max_bytes:,}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"{what} is not UTF-8 text (byte {exc.start})") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
#: json_depth reads the text this many bytes at a time (its running depth is carried from one to the next).
_DEPTH_CHUNK = 1 << 23


def json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, strings skipped (computed before parsing).

    Linear and vectorised (an export of a saved analysis runs to tens of MB): strings are cut out, then the
    running count of opening minus closing brackets is summed a chunk at a time. After an unterminated string
    nothing is structure.
    """
    import numpy as np  # local: limits is read by every wing; numpy only when a payload is checked

    bare = _JSON_STRING.sub("", text).split('"', 1)[0].encode("utf-8")  # UTF-8 never reuses ASCII bytes
    best = depth = 0
    for i in range(0, len(bare), _DEPTH_CHUNK):
        b = np.frombuffer(bare, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(bare) - i), offset=i)
        steps = (b == 91).astype(np.int32) + (b == 123) - (b == 93) - (b == 125)
        run = np.cumsum(steps, dtype=np.int64) + depth
        if run.size:
            best, depth = max(best, int(run.max())), int(run[-1])
    return best


class _NotFinite(PayloadError):
    """A JSON number (or NaN/Infinity constant) that is not a finite double; ``token`` is how it was written."""

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


def _bad_constant(s: str) -> Any:
    raise _NotFinite(f"{s} is not a finite number", s)


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (``json.loads(..., object_pairs_hook=unique_object)``): a key
    given twice would silently keep only its last value. Raises :class:`PayloadError` naming the key."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise PayloadError(f"the key {_shown(k)} is given twice")
            seen.add(k)
    return out


def _line_of(text: str, token: str) -> str:
    """The ``" at line N"`` of the first place ``token`` is written in ``text`` ("" when it cannot be found)."""
    at = text.find(token)
    return f" at line {text.count(chr(10), 0, at) + 1}" if at >= 0 else ""


def _int(s: str) -> int:
    if len(s) > MAX_JSON_NUMBER_CHARS:
        raise PayloadError(f"a number with {len(s):,} digits is out of range")
    return int(s)


def _float(s: str) -> float:
    if len(s) > MAX_JSON_NUMBER_CHARS:
        raise PayloadError(f"a number with {len(s):,} characters is out of range")
    x = float(s)
    if not math.isfinite(x):
        raise _NotFinite(f"{s} is out of range", s)
    return x


def parse_json(
    data: bytes | str, what: str = "the file", max_bytes: int = MAX_CONFIG_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """JSON with every limit checked first: size, UTF-8, nesting depth; NaN/Infinity, huge numbers and a key given
    twice in one object refused.

    Raises :class:`PayloadError` (a ``ValueError``) with a one-line reason (and the line of a number that is not
    finite).
    """
    text = decode_text(data, what, max_bytes)
    d = json_depth(text)
    if d > max_depth:
        raise PayloadError(f"{what} nests {d} levels deep; the limit is {max_depth}")
    try:
        return json.loads(
            text, parse_constant=_bad_constant, parse_int=_int, parse_float=_float, object_pairs_hook=unique_object
        )
    except _NotFinite as exc:
        raise PayloadError(f"{what}{_line_of(text, exc.token)}: {exc}") from None
    except PayloadError as exc:
        raise PayloadError(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise PayloadError(f"{what} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"{what} is not usable JSON ({exc})") from None


def inflate(blob: bytes, max_bytes: int = MAX_INFLATED_BYTES) -> bytes:
    """zlib-decompress at most ``max_bytes`` (a compression bomb is refused, never expanded whole)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(blob, max_bytes + 1)
    except zlib.error as exc:
        raise PayloadError(f"not compressed data ({exc})") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise PayloadError(f"expands beyond {max_bytes:,} bytes")
    if not d.eof:
        raise PayloadError("the compressed data is cut short")
    if d.unused_data:
        raise PayloadError(f"{len(d.unused_data):,} bytes follow the end of the compressed data")
    return out


# --- text a person typed ---------------------------------------------------------------------------

#: An analysis's name: one line of text, as a list shows it.
MAX_NAME_CHARS = 200
#: A note on an analysis, or who saved it.
MAX_NOTE_CHARS = 10_000
#: Everything one saved analysis stores (revisions, runs, telemetry) as its export writes it: 100 MB, five full
#: telemetry files (core.operations.telemetry.MAX_BYTES) with room to spare. Attaching more is refused.
MAX_ANALYSIS_BYTES = 100_000_000
#: An export file read back by import: what an analysis can hold, plus the export's own keys.
MAX_IMPORT_BYTES = MAX_ANALYSIS_BYTES + 10_000_000

#: Characters that make text that is shown change how other text is shown: bidirectional overrides and isolates.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def text_problem(text: Any, *, max_chars: int = MAX_NAME_CHARS, multiline: bool = False) -> str | None:
    """None when ``text`` is text a person typed (no control characters but, where ``multiline``, newlines and
    tabs; at most ``max_chars``), else what is wrong."""
    if not isinstance(text, str):
        return f"{_shown(text)} is not text"
    if len(text) > max_chars:
        return f"{len(text):,} characters; the limit is {max_chars:,}"
    allowed = "\n\t" if multiline else ""
    for i, ch in enumerate(text):
        cat = unicodedata.category(ch)
        if (
            (cat in ("Cc", "Cs") and ch not in allowed)
            or ch in _BIDI_CONTROLS
            or (not multiline and cat in ("Zl", "Zp"))
        ):
            what = "a line break" if ch in "\r\n\u2028\u2029" else f"the control character U+{ord(ch):04X}"
            return f"{what} at character {i + 1}" + ("" if multiline else " (a name is one line of text)")
    return None
