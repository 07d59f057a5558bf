"""User-supplied text shown as text: never interpreted as Markdown, HTML or Streamlit directives.

A model name from a link or an uploaded config.json (``_name_or_path``) ends up in ``st.error`` and
``st.caption``, which render Markdown: ``![x](http://...)`` would make every viewer's browser fetch a
remote URL and ``[text](url)`` would plant a misleading link. :func:`plain` escapes every ASCII
punctuation character (CommonMark allows a backslash before any of them), so the text reads the same
and renders as typed.
"""

from __future__ import annotations

import string

_ESCAPE = {ord(c): "\\" + c for c in string.punctuation}
#: Longest user-supplied string shown (a name, a value): enough for any real model name.
MAX_SHOWN_CHARS = 200


def folded(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` with its newlines folded, cut to ``limit`` characters (not yet escaped)."""
    s = " ".join(str(text).split())
    return s[: limit - 1] + "…" if len(s) > limit else s


def plain(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` escaped for Streamlit's Markdown, newlines folded, cut to ``limit`` characters."""
    return folded(text, limit).translate(_ESCAPE)
