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
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
MAX_SESSIONS = 200
MAX_SECONDS = 600.0
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

#: The targets on a 2-core machine (README, "A room full of people").
TARGET_FIRST_LOAD_P95_S = 5.0
TARGET_RERUN_P95_S = 1.5


@dataclass
class Session:
    """One simulated user: its socket, the widget ids seen on its page, its timings and errors."""

    ws: object = None
    source_ip: str | None = None  # a loopback address to connect from (127.0.0.2 ...), to look like another client
    widget_ids: dict[str, tuple[str, str]] = field(default_factory=dict)  # user key -> (widget id, value kind)
    page_hash: str = ""
    times_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _protos():
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    return BackMsg, ForwardMsg


def _rerun_msg(page: str, query: str, page_hash: str = "", widgets: tuple = ()) -> bytes:
    BackMsg, _ = _protos()
    msg = BackMsg()
    cs = msg.rerun_script
    cs.query_string = query
    cs.page_name = page
    cs.page_script_hash = page_hash
    for wid, kind, value in widgets:
        w = cs.widget_states.widgets.add()
        w.id = wid
        setattr(w, kind, value)
    return msg.SerializeToString()


def _note_widgets(delta, sess: Session) -> None:
    """Remember the widget id of every keyed input (its id ends with ``-<key>``)."""
    el = delta.new_element
    kind = el.WhichOneof("type")
    if kind is None:
        return
    body = getattr(el, kind)
    wid = getattr(body, "id", "")
    parts = wid.split("-", 2)  # "$$ID-<hash>-<user key>"; the key itself may hold dashes
    if len(parts) != 3 or not parts[2]:
        return
    if kind == "number_input":
        value_kind = "int_value" if body.data_type == body.INT else "double_value"
    elif kind == "checkbox":
        value_kind = "bool_value"
    elif kind == "text_input":
        value_kind = "string_value"
    else:
        value_kind = ""
    sess.widget_ids[parts[2]] = (wid, value_kind)


async def _run_once(sess: Session, payload: bytes, deadline: float) -> None:
    """Send one rerun request and read until the script finishes; record the time or the error."""
    _, ForwardMsg = _protos()
    t0 = time.perf_counter()
    await sess.ws.send(payload)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            sess.errors.append("timed out waiting for script_finished")
            return
        raw = await asyncio.wait_for(sess.ws.recv(), timeout=left)
        if isinstance(raw, str):
            continue
        msg = ForwardMsg()
        msg.ParseFromString(raw)
        kind = msg.WhichOneof("type")
        if kind == "delta":
            if msg.delta.WhichOneof("type") == "new_element":
                if msg.delta.new_element.WhichOneof("type") == "exception":
                    ex = msg.delta.new_element.exception
                    sess.errors.append(f"exception on the page: {ex.type}: {ex.message[:200]}")
                _note_widgets(msg.delta, sess)
        elif kind == "new_session":
            sess.page_hash = msg.new_session.page_script_hash or sess.page_hash
        elif kind == "page_not_found":
            sess.errors.append("page not found")
        elif kind == "script_finished":
            status = msg.script_finished
            if status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                continue
            if status != ForwardMsg.FINISHED_SUCCESSFULLY:
                sess.errors.append(f"script finished with status {status}")
            sess.times_s.append(time.perf_counter() - t0)
            return


async def _open(url: str, sess: Session, deadline: float) -> None:
    import websockets

    ws_url = url.replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
    extra = {"local_addr": (sess.source_ip, 0)} if sess.source_ip else {}
    sess.ws = await asyncio.wait_for(
        websockets.connect(ws_url, subprotocols=["streamlit"], max_size=2**28, open_timeout=30, **extra),
        timeout=max(1.0, deadline - time.monotonic()),
    )


async def _first_load(url: str, page: str, query: str, sess: Session, deadline: float) -> None:
    t0 = time.perf_counter()
    try:
        await _open(url, sess, deadline)
        await _run_once(sess, _rerun_msg(page, query), deadline)
        if sess.times_s:  # the first load counts from opening the socket
            sess.times_s[-1] = time.perf_counter() - t0
    except (asyncio.TimeoutError, TimeoutError):
        sess.errors.append("timed out")
    except Exception as exc:  # noqa: BLE001 - any failure of a session is an error to count, not to raise
        sess.errors.append(f"{type(exc).__name__}: {exc}")


async def _rerun(page: str, query: str, sess: Session, key: str, value: float | str, deadline: float) -> None:
    if key not in sess.widget_ids or not sess.widget_ids[key][1]:
        sess.errors.append(f"no input with key {key!r} on the page (seen: {sorted(sess.widget_ids)[:12]} ...)")
        return
    wid, kind = sess.widget_ids[key]
    v = (
        int(value)
        if kind == "int_value"
        else (
            str(value)
            if kind == "string_value"
            else (value in (True, "1", "true", "True"))
            if kind == "bool_value"
            else float(value)
        )
    )
    sess.times_s.clear()
    try:
        await _run_once(sess, _rerun_msg(page, query, sess.page_hash, ((wid, kind, v),)), deadline)
    except (asyncio.TimeoutError, TimeoutError):
        sess.errors.append("timed out")
    except Exception as exc:  # noqa: BLE001
        sess.errors.append(f"{type(exc).__name__}: {exc}")


def _summary(label: str, sessions: list[Session], wall_s: float) -> dict:
    times = sorted(t for s in sessions for t in s.times_s[-1:])
    errors = [e for s in sessions for e in s.errors]

    def pct(q: float) -> float | None:
        if not times:
            return None
        return times[min(len(times) - 1, max(0, round(q * len(times) + 0.5) - 1))]  # nearest rank

    return {
        "scenario": label,
        "sessions": len(sessions),
        "completed": len(times),
        "errors": len(errors),
        "p50_s": pct(0.5),
        "p95_s": pct(0.95),
        "max_s": times[-1] if times else None,
        "mean_s": statistics.fmean(times) if times else None,
        "wall_s": wall_s,
        "error_samples": list(dict.fromkeys(errors))[:5],
    }


async def first_loads(url: str, n: int, page: str = "", query: str = "", timeout_s: float = 120.0) -> dict:
    """``n`` sessions open the page at the same moment; each time is socket open -> script finished."""
    sessions = [Session() for _ in range(n)]
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    await asyncio.gather(*(_first_load(url, page, query, s, deadline) for s in sessions))
    out = _summary(f"{n} simultaneous first loads of /{page}", sessions, time.perf_counter() - t0)
    for s in sessions:
        if s.ws is not None:
            await s.ws.close()
    return out


async def reruns(
    url: str, n: int, page: str, key: str, values: list, query: str = "", timeout_s: float = 120.0
) -> dict:
    """``n`` sessions open the page one after another (not timed), then all change input ``key`` at once,
    session i to ``values[i % len(values)]``; each time is change sent -> script finished."""
    sessions = [Session() for _ in range(n)]
    deadline = time.monotonic() + timeout_s
    for s in sessions:
        await _first_load(url, page, query, s, deadline)
    errors_before = sum(len(s.errors) for s in sessions)
    t0 = time.perf_counter()
    await asyncio.gather(
        *(_rerun(page, query, s, key, values[i % len(values)], deadline) for i, s in enumerate(sessions))
    )
    out = _summary(f"{n} simultaneous reruns of /{page} ({key} changed)", sessions, time.perf_counter() - t0)
    out["errors_while_opening"] = errors_before
    for s in sessions:
        if s.ws is not None:
            await s.ws.close()
    return out


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
