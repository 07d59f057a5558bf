"""RA-BIT dashboard entry point: ``streamlit run dashboard/app.py``.

Heavy libraries are imported once here, before any page runs: a cold server hit by several
first sessions at once can otherwise race on a partially initialised module (seen with
plotly express importing pandas; nothing here uses plotly express, so it is not imported).
``python -m dashboard.serve`` imports them before the server accepts anyone.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy  # noqa: E402,F401  - imported once, up front (see module docstring)
import pandas  # noqa: E402,F401
import plotly.graph_objects  # noqa: E402,F401
import streamlit as st  # noqa: E402

from dashboard import analyses, share, state  # noqa: E402

PAGES = ROOT / "pages"

#: The tab icon is served by this server: a ":material/...:" page icon makes the browser fetch it from an
#: external font host, which an offline intranet cannot reach (the menu icons below use the bundled font).
ICON = Path(__file__).resolve().parent / "icon.png"
st.set_page_config(page_title="RA-BIT", page_icon=str(ICON), layout="wide")

#: (file, title, icon, url path), in menu order; the first is the default page.
PAGE_SPECS = (
    ("memory.py", "Memory", ":material/memory:", "memory"),
    ("speed.py", "Speed", ":material/speed:", "speed"),
    ("serving.py", "Serving simulation", ":material/queue:", "serving"),
    ("training.py", "Training", ":material/model_training:", "training"),
    ("optimizer.py", "Optimizer", ":material/price_check:", "optimizer"),
    ("video.py", "Video generation", ":material/movie:", "video"),
    ("fleet.py", "Fleet", ":material/hub:", "fleet"),
    ("math.py", "Show the math", ":material/functions:", "math"),
    ("next_experiment.py", "Next experiment", ":material/science:", "next-experiment"),
    ("diagnostics.py", "Diagnostics", ":material/troubleshoot:", "diagnostics"),
    ("analyses.py", "Saved analyses", ":material/bookmarks:", "analyses"),
    ("calibration.py", "Calibration", ":material/tune:", "calibration"),
    ("compare.py", "Compare", ":material/compare_arrows:", "compare"),
)
# The first page is served at "/" (its url path is then only a name, "home"); a hidden twin serves its own path,
# so a link to /memory opens Memory instead of a "Page not found" dialog.
NAV = [
    st.Page(PAGES / f, title=t, icon=i, url_path="home" if n == 0 else u, default=(n == 0))
    for n, (f, t, i, u) in enumerate(PAGE_SPECS)
    if (PAGES / f).exists()
]
NAV.append(st.Page(PAGES / PAGE_SPECS[0][0], title=PAGE_SPECS[0][1], url_path=PAGE_SPECS[0][3], visibility="hidden"))
state.guard_query_limits()  # a link over Streamlit's limits says so (the first visit of a process too: serve.py)
analyses.require_login()  # off unless RABIT_LOGIN is set
pg = st.navigation(NAV)
share.begin(pg.title, pg.url_path)
share_slot = st.sidebar.container()  # above the inputs: the link, the page's summary and its tables
st.session_state["_config"] = state.sidebar(pg.url_path)
analyses.sidebar_badge()
share.bar(share_slot, st.session_state["_config"])  # the downloads are built on click, from what the page drew
try:
    pg.run()
except Exception as exc:  # st.stop / st.rerun are BaseExceptions and pass through
    # a short, useful message for the visitor; Streamlit logs the full trace on the server and (with
    # client.showErrorDetails = "none") shows no server paths
    st.error(
        f"This page could not be computed for these inputs ({type(exc).__name__}). Your settings are kept: "
        "change an input or open another page. The details are in the server's log."
    )
    raise
