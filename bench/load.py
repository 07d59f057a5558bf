"""A room full of people on one URL: many Streamlit sessions at once against a running dashboard.

A websocket client that speaks the dashboard's own protocol (``streamlit.proto`` ``BackMsg`` / ``ForwardMsg``
over ``/_stcore/stream``), so it measures what a browser would wait for: from opening the socket (or sending
a changed input) to the server's ``script_finished``. Loopback only, bounded in sessions and in time.

    python -m bench.load --url http://127.0.0.1:8501 --sessions 20            # 20 first loads at once
    python -m bench.load --url http://127.0.0.1:8501 --sessions 10 --page serving \\
        --rerun cfg.workload.rate_per_s=0.4                                    # 10 reruns at once
    python -m bench.load --start                 # start a server on a free port, run both, stop it

Each session's time is measured on the loopback socket, so it is the server's time to run the page and send
it (no browser rendering). An error is an exception drawn on the page, a run that did not finish
successfully, a refused or dropped connection, or a session past the time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import urlparse

from dashboard.wsclient import first_loads, reruns

ROOT = Path(__file__).resolve().parent.parent
MAX_SESSIONS = 200
MAX_SECONDS = 600.0
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

#: The targets on a 2-core machine (README, "A room full of people").
TARGET_FIRST_LOAD_P95_S = 5.0
TARGET_RERUN_P95_S = 1.5


def _check_bounds(url: str, n: int, timeout_s: float) -> None:
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise SystemExit(f"--url must be a loopback address ({', '.join(sorted(LOOPBACK))}), got {host!r}")
    if not 1 <= n <= MAX_SESSIONS:
        raise SystemExit(f"--sessions must be 1..{MAX_SESSIONS}, got {n}")
    if not 0 < timeout_s <= MAX_SECONDS:
        raise SystemExit(f"--timeout must be in (0, {MAX_SECONDS:g}] seconds, got {timeout_s}")


def _start_server(extra_env: dict | None = None):
    sys.path.insert(0, str(ROOT / "tests"))
    import live  # tests/live.py: start the dashboard on a free loopback port

    return live.start(env=extra_env)


def _default_scenarios(url: str, timeout_s: float) -> list[dict]:
    """The README's figures: 20 first loads of the default page, then 10 reruns of the Serving page."""
    out = [asyncio.run(first_loads(url, 20, "", "", timeout_s))]
    out.append(asyncio.run(reruns(url, 10, "serving", RERUN_KEY, [RERUN_VALUE], "", timeout_s)))
    return out


#: The rerun scenario: everyone in the room changes the arrival rate on the Serving page to the same value.
RERUN_KEY, RERUN_VALUE = "cfg.workload.rate_per_s", 0.4


def run() -> list[tuple[str, float, str, str]]:
    """For ``python -m bench.run``: start a server, run the two scenarios, stop it."""
    proc, url = _start_server()
    try:
        results = _default_scenarios(url, 300.0)
    finally:
        import live

        live.stop(proc)
    rows = []
    for r, target in zip(results, (TARGET_FIRST_LOAD_P95_S, TARGET_RERUN_P95_S)):
        rows.append((f"{r['scenario']}: p50", r["p50_s"] or float("nan"), "s", ""))
        rows.append((f"{r['scenario']}: p95", r["p95_s"] or float("nan"), "s", f"< {target:g} s"))
        rows.append((f"{r['scenario']}: errors", float(r["errors"]), "", "0"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running dashboard on a loopback address, e.g. http://127.0.0.1:8501")
    ap.add_argument("--start", action="store_true", help="start a dashboard on a free loopback port for the run")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--page", default="", help="url path of the page ('' = the default page)")
    ap.add_argument("--query", default="", help="query string of the link, without '?'")
    ap.add_argument("--rerun", metavar="KEY=VALUE", help="open the sessions, then change this input in all at once")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole scenario")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not a.url and not a.start:
        ap.error("give --url of a running dashboard or --start")
    proc = None
    if a.start:
        proc, a.url = _start_server()
    try:
        _check_bounds(a.url, a.sessions, a.timeout)
        if a.rerun:
            key, _, value = a.rerun.partition("=")
            results = [asyncio.run(reruns(a.url, a.sessions, a.page, key, value.split(","), a.query, a.timeout))]
        elif a.start and a.page == "" and a.sessions == 20:
            results = _default_scenarios(a.url, a.timeout)
        else:
            results = [asyncio.run(first_loads(a.url, a.sessions, a.page, a.query, a.timeout))]
    finally:
        if proc is not None:
            import live

            live.stop(proc)
    if a.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            f = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
            print(
                f"{r['scenario']}: p50 {f(r['p50_s'])}, p95 {f(r['p95_s'])}, max {f(r['max_s'])}, "
                f"{r['completed']}/{r['sessions']} completed, {r['errors']} errors"
                + (f" ({'; '.join(r['error_samples'])})" if r["error_samples"] else "")
            )
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
