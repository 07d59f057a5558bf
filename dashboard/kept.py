"""The kept copy of the dashboard's config inputs and view choices: a dict under a session key no widget owns, which
only a widget's callback (the user's edit, a form's submit) and the program (dashboard.state.put) change;
dashboard.state._keep writes it back at the start of every run. Apart from dashboard.state, so that any dashboard
module may draw a view choice with :func:`view` without importing the sidebar."""

from __future__ import annotations

from typing import Any

import streamlit as st

#: The session key of the kept copy.
KEY = "_rabit_kept"


def copy() -> dict[str, Any]:
    """The kept copy of this session (created empty on first use)."""
    kept = st.session_state.get(KEY)
    if kept is None:
        kept = st.session_state[KEY] = {}
    return kept


def edited(k: str) -> None:
    """``on_change`` of a widget that edits a config input or a view choice: the user's edit becomes the kept value
    (Streamlit calls it before the run, so the run writes the edit back, not the older copy)."""
    if k in st.session_state:
        copy()[k] = st.session_state[k]


def commit(keys: tuple[str, ...]) -> None:
    """``on_click`` of a form's submit button: the form's inputs, submitted with it, become the kept values."""
    ss = st.session_state
    kept = copy()
    for k in keys:
        if k in ss:
            kept[k] = ss[k]


def view(k: str) -> dict[str, Any]:
    """The widget arguments of a view choice (dashboard.state.VIEW_PARAMS: ``"speed.bound"``): its key and the
    callback that keeps the user's choice."""
    return {"key": k, "on_change": edited, "args": (k,)}
