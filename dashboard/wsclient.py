"""A client of the dashboard's own websocket protocol: many Streamlit sessions against one running server.

It speaks ``streamlit.proto`` ``BackMsg`` / ``ForwardMsg`` over ``/_stcore/stream``, so it measures what a
browser would wait for: from opening the socket (or sending a changed input) to the server's
``script_finished``. The server's warm-up (:func:`dashboard.serve.warm`) runs the default page once with it;
``bench.load`` fills a room with it. Callers keep it on loopback and bound it in sessions and in time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Session:
    """One simulated user: its socket, the widget ids seen on its page, its timings and errors."""

    ws: Any = None  # a websockets client connection once opened
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
        if _take(msg, sess, ForwardMsg):
            sess.times_s.append(time.perf_counter() - t0)
            return


def _take(msg, sess: Session, ForwardMsg) -> bool:
    """One message of a rerun into ``sess``: an exception drawn on the page and the widgets it draws, the page's
    hash, a missing page, how the script ended. True once the script has finished (not for a rerun's restart)."""
    kind = msg.WhichOneof("type")
    if kind == "delta":
        _take_delta(msg.delta, sess)
    elif kind == "new_session":
        sess.page_hash = msg.new_session.page_script_hash or sess.page_hash
    elif kind == "page_not_found":
        sess.errors.append("page not found")
    elif kind == "script_finished":
        status = msg.script_finished
        if status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            return False
        if status != ForwardMsg.FINISHED_SUCCESSFULLY:
            sess.errors.append(f"script finished with status {status}")
        return True
    return False


def _take_delta(delta, sess: Session) -> None:
    """A new element drawn: an exception is an error of the session, an input's id is noted for its key."""
    if delta.WhichOneof("type") == "new_element":
        if delta.new_element.WhichOneof("type") == "exception":
            ex = delta.new_element.exception
            sess.errors.append(f"exception on the page: {ex.type}: {ex.message[:200]}")
        _note_widgets(delta, sess)


async def _open(url: str, sess: Session, deadline: float) -> None:
    import websockets

    ws_url = url.replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
    options: dict[str, Any] = {"subprotocols": ["streamlit"], "max_size": 2**28, "open_timeout": 30}
    if sess.source_ip:
        options["local_addr"] = (sess.source_ip, 0)
    sess.ws = await asyncio.wait_for(
        websockets.connect(ws_url, **options),
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
