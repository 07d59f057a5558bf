"""The dashboard as an ASGI app (``streamlit run dashboard/asgi.py``, what ``dashboard.serve`` starts): Streamlit's
own server for ``dashboard/app.py`` with one middleware, :class:`NamedBackend`.

A page opened at its own path (``/memory?batch=8``, a pasted link) makes Streamlit's browser code look for the
server under that path first: ``/memory/_stcore/health`` and ``/memory/_stcore/host-config``, two 404s in the
browser's log on every deep link, before it tries ``/``. Streamlit reads where its server is from
``window.__streamlit.BACKEND_BASE_URL`` when a page sets it; the middleware sets it in the page's HTML to the
server's root (``server.baseUrlPath`` included), so the first request finds it.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: What the page learns before Streamlit's code runs: its server's root, from the address the browser used.
_SCRIPT = (
    "<script>window.__streamlit=Object.assign({{}},window.__streamlit,"
    "{{BACKEND_BASE_URL:window.location.origin+{base!r}}});</script>"
)


def _base_path() -> str:
    from streamlit import config

    base = str(config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}/" if base else "/"


def _is_page(path: str) -> bool:
    """A path that Streamlit answers with its HTML page (a page's url_path or the root), not a file or an endpoint."""
    last = path.rsplit("/", 1)[-1]
    return (
        "." not in last
        and "/_stcore/" not in path + "/"
        and not path.startswith(("/static/", "/component/", "/media/", "/app/"))
    )


class NamedBackend:
    """Pure ASGI middleware: the HTML of a page carries ``window.__streamlit.BACKEND_BASE_URL`` (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or not _is_page(scope["path"]):
            await self.app(scope, receive, send)
            return
        # the page uncompressed, so that the script can go in (it is a few kB)
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}
        start: Message | None = None
        chunks: list[bytes] = []

        async def edit(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = list(start.get("headers", []))
            kinds = [v for k, v in headers if k.lower() == b"content-type"]
            if start["status"] == 200 and kinds and kinds[0].startswith(b"text/html") and b"<head>" in body:
                body = body.replace(b"<head>", b"<head>" + _SCRIPT.format(base=_base_path()).encode(), 1)
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})

        await self.app(scope, receive, edit)


app = st.App(Path(__file__).resolve().with_name("app.py"), middleware=[Middleware(NamedBackend)])
