"""A link over Streamlit's query limits says so instead of vanishing.

A module of its own, importing nothing of the dashboard's: ``dashboard.serve`` installs the guard before the server
listens, and importing :mod:`dashboard.state` there (which imports :mod:`dashboard.cache`) decorated about a hundred
``st.cache_data`` functions before Streamlit's runtime existed, each logging "No runtime found, using
MemoryCacheStorageManager" at start-up.
"""

from __future__ import annotations

#: The query parameter that stands in for a link Streamlit would drop whole (:func:`guard_query_limits`).
DROPPED_QUERY = "_rabit_dropped_query"


def guard_query_limits() -> None:
    """Make a link over Streamlit's limits say so instead of vanishing.

    Streamlit drops a query string of more than 1,000 parameters or 512 Ki characters before any script runs and
    only logs it, so the page would open at the defaults without a word. This wraps its check so that such a
    query arrives as one parameter, :data:`DROPPED_QUERY` = ``<parameters>:<characters>``, which
    ``dashboard.state`` reports on the page. Idempotent; a Streamlit without the check is left alone (tests/test_fuzz_app.py notices).
    """
    from streamlit.runtime import app_session
    from streamlit.runtime.state import query_params

    original = getattr(query_params, "sanitize_query_string", None)
    if original is None or getattr(original, "rabit_guard", False):
        return

    def sanitize(query_string: str) -> str:
        kept = original(query_string)
        if query_string and not kept:
            return f"{DROPPED_QUERY}={query_string.count('&') + 1}:{len(query_string)}"
        return kept

    sanitize.rabit_guard = True  # type: ignore[attr-defined]
    query_params.sanitize_query_string = sanitize
    if hasattr(app_session, "sanitize_query_string"):
        app_session.sanitize_query_string = sanitize
