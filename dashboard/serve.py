"""Start the dashboard for a room: ``python -m dashboard.serve [--no-warm] [streamlit options]``.

``streamlit run`` imports nothing until the first visitor arrives, so the first sessions of a fresh process
all wait on the same imports (pandas, plotly, pydantic, the catalogs: seconds on a small machine). This
launcher imports them before the server listens, then, once the server is healthy, opens one session of
the default page on its own loopback port so the default configuration's numbers and figures are computed
(and cached for everyone) before the first person does. Loopback only; it fetches nothing from outside.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
#: What the server runs: ``APP`` inside Streamlit's ASGI app with the middleware that spares a deep link its two
#: 404s (dashboard/asgi.py).
ASGI = ROOT / "dashboard" / "asgi.py"


def preload() -> None:
    """Import what every page needs and read the catalogs, in this (main) thread."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import importlib

    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import plotly.subplots  # noqa: F401

    from core import catalog

    catalog.models(), catalog.gpus(), catalog.fabrics(), catalog.prices()
    from dashboard import query_guard

    query_guard.guard_query_limits()  # before the first visitor: a link over Streamlit's limits says so
    # core's computation modules; nothing that imports dashboard.cache (dashboard.state, dashboard.analyses): its
    # st.cache_data functions belong to the running server, and each decorated before it exists logs a warning
    for name in (
        "core.physics.memory",
        "core.serving.speed",
        "core.serving.speed_views",
        "core.serving.simulation",
        "core.training",
        "core.decision.optimizer",
        "core.decision.experiment",
        "core.config.checks",
        "dashboard.charts",
    ):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _option(args: list[str], name: str, default: str) -> str:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def warm(port: int, timeout_s: float = 300.0) -> None:
    """Wait for the local server, then run the default page once over its websocket (dashboard.wsclient)."""
    import asyncio

    from dashboard import wsclient

    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.3)
    else:
        return
    result = asyncio.run(wsclient.first_loads(url, 1, "", "", timeout_s))
    print(
        f"rabit: warmed the default page in {result['max_s'] or float('nan'):.2f} s ({result['errors']} errors)",
        file=sys.stderr,
        flush=True,
    )


def _warm_simulator() -> None:
    from core.serving import warm_simulator

    t0 = time.time()
    try:
        warm_simulator()
    except Exception as exc:  # a failure here only costs the first simulation its compile time; say why
        print(f"rabit: the simulator's compiled loop did not warm up ({exc})", file=sys.stderr, flush=True)
        return
    print(f"rabit: the simulator's compiled loop is ready ({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)


#: Server settings for a room, also in .streamlit/config.toml (given here too, so that a launch from another
#: working directory keeps them; an option on the command line wins): no source watching (it resolved every
#: imported module's path after each run) and no full garbage collection after each run (about 0.1 CPU-s with
#: this heap), together over 80% of the server's CPU with 20 sessions loading at once; and nothing leaves the
#: server: headless (no browser opened), no usage statistics, and the address browsers use named, so Streamlit
#: neither asks checkip.amazonaws.com for the machine's external IP to print an "External URL" (it does whenever
#: no address is named and the server is headless, bound to every interface as in deploy/) nor opens a socket
#: towards 8.8.8.8 to learn its "Network URL".
ROOM_OPTIONS = (
    ("--server.fileWatcherType", "none"),
    ("--runner.postScriptGC", "false"),
    ("--server.headless", "true"),
    ("--browser.gatherUsageStats", "false"),
    ("--browser.serverAddress", "localhost"),
)


def room_args(args: list[str]) -> list[str]:
    """``args`` plus each room option it does not set itself."""
    out = list(args)
    for name, value in ROOM_OPTIONS:
        if not any(a == name or a.startswith(name + "=") for a in args):
            out += [name, value]
    return out


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    no_warm = "--no-warm" in args or os.environ.get("RABIT_NO_WARM") == "1"
    args = [a for a in args if a != "--no-warm"]
    preload()
    port = int(_option(args, "--server.port", os.environ.get("STREAMLIT_SERVER_PORT", "8501")))
    if not no_warm:
        threading.Thread(target=warm, args=(port,), daemon=True, name="rabit-warm").start()
    # the serving simulator's compiled loop: loaded from numba's cache (compiled once in a fresh install) before a
    # page needs it
    threading.Thread(target=_warm_simulator, daemon=True, name="rabit-warm-sim").start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(ASGI), *room_args(args)]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
