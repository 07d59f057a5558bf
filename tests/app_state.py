"""Set a config input or view choice of an AppTest session between runs, as a user's edit or the program's write
does (dashboard.state.put): the session key and the kept copy. A key written alone is what Streamlit's page-switch
clean-up does to an input, and the next run puts the kept value back (dashboard.state._keep)."""

from typing import Any

from streamlit.testing.v1 import AppTest

KEPT = "_rabit_kept"  # dashboard.state._KEPT


def set_input(at: AppTest, key: str, value: Any) -> None:
    at.session_state[key] = value
    kept = at.session_state[KEPT] if KEPT in at.session_state else {}
    at.session_state[KEPT] = {**kept, key: value}
