"""Start-up with the network watched: the server as deploy/ starts it (the Dockerfile's command: the launcher, bound
to every interface, headless) and every page opened at its own path in headless Chromium; nothing may leave the
machine, no request may answer 404 and the server's log carries no warning.

The server process runs with a ``sitecustomize`` on its PYTHONPATH that wraps the socket module: a connection, a
datagram or a name lookup towards anything but the loopback interface is written to a file and refused (so the
test neither needs nor waits on the internet). Streamlit looked up the machine's external IP at
checkip.amazonaws.com whenever it ran headless with no browser address named, and opened a socket towards 8.8.8.8
for its "Network URL"; the launcher's preload decorated 98 cached functions before the runtime existed (97
warnings); a page opened at its own path asked for ``/<page>/_stcore/health`` and ``/<page>/_stcore/host-config``
first, two 404s (dashboard/asgi.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()

ROOT = Path(__file__).resolve().parent.parent

#: The watch, loaded by every Python process that has its folder on PYTHONPATH (the server and its children).
WATCH = r"""
import ipaddress
import os
import socket

_LOG = os.environ["RABIT_OUTSIDE_LOG"]


def _outside(host):
    if host is None:
        return False
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host)
    if host in ("", "localhost", "0.0.0.0", "::"):  # the loopback name and the wildcards a server binds to
        return False
    try:
        return not ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return True  # any other name: looking it up is already a request


def _note(what, target):
    with open(_LOG, "a") as f:
        f.write(f"{what} {target!r} (pid {os.getpid()})\n")


def _inet(sock):
    return sock.family in (socket.AF_INET, socket.AF_INET6)


_connect, _connect_ex, _sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto
_getaddrinfo, _gethostbyname = socket.getaddrinfo, socket.gethostbyname


def connect(self, address):
    if _inet(self) and _outside(address[0]):
        _note("connect", address)
        raise OSError(101, "an outside connection, refused by the test")
    return _connect(self, address)


def connect_ex(self, address):
    if _inet(self) and _outside(address[0]):
        _note("connect_ex", address)
        return 101
    return _connect_ex(self, address)


def sendto(self, data, *args):
    address = args[-1]
    if _inet(self) and _outside(address[0]):
        _note("sendto", address)
        raise OSError(101, "an outside datagram, refused by the test")
    return _sendto(self, data, *args)


def getaddrinfo(host, *args, **kwargs):
    if _outside(host):
        _note("getaddrinfo", host)
        raise socket.gaierror(socket.EAI_NONAME, "an outside name, refused by the test")
    return _getaddrinfo(host, *args, **kwargs)


def gethostbyname(host):
    if _outside(host):
        _note("gethostbyname", host)
        raise socket.gaierror(socket.EAI_NONAME, "an outside name, refused by the test")
    return _gethostbyname(host)


socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = connect, connect_ex, sendto
socket.getaddrinfo, socket.gethostbyname = getaddrinfo, gethostbyname
"""

#: Every page at its own path, two with a link's query string.
PATHS = (
    "",
    "memory?batch=8",
    "speed?batch=16",
    "serving",
    "training",
    "optimizer",
    "video",
    "math",
    "next-experiment",
    "diagnostics",
    "analyses",
    "calibration",
    "compare",
    "fleet",
)


def _deploy_command(port: int) -> list[str]:
    """The Dockerfile's CMD, on ``port``, run by this interpreter."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])\s*$", text, re.M).group(1))
    assert cmd[:3] == ["python", "-m", "dashboard.serve"], cmd
    i = cmd.index("--server.port")
    cmd[i + 1] = str(port)
    return [sys.executable, *cmd[1:]]


def test_start_up_and_every_page_keep_to_the_server(tmp_path, browser):
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "sitecustomize.py").write_text(WATCH)
    outside_log = tmp_path / "outside.log"
    port = live.free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(watch), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "RABIT_OUTSIDE_LOG": str(outside_log),
    }
    proc = subprocess.Popen(
        _deploy_command(port), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    failed: list[str] = []
    fetched_outside: list[str] = []
    try:
        live.wait_healthy(url, proc)
        ctx = browser.new_context(viewport={"width": 1280, "height": 720})

        def route(r):
            if r.request.url.startswith(("data:", "blob:")) or urlparse(r.request.url).hostname == "127.0.0.1":
                return r.continue_()
            fetched_outside.append(r.request.url)
            return r.abort()

        ctx.route("**/*", route)
        page = ctx.new_page()
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        for path in PATHS:
            page.goto(f"{url}/{path}")
            page.wait_for_selector('[data-testid="stMain"] [data-testid="stHeading"]', timeout=live.SETTLE_S * 1000)
            live.settle(page)  # the page's script has run to its end
        ctx.close()
    finally:
        live.stop(proc)
    log = proc.stdout.read() if proc.stdout else ""
    assert not outside_log.exists(), "the server reached outside:\n" + outside_log.read_text()
    assert fetched_outside == [], f"a page fetched from outside the server: {fetched_outside}"
    assert failed == [], "requests that failed:\n" + "\n".join(failed)
    warnings = [line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR)\b|Traceback", line)]
    assert warnings == [], f"{len(warnings)} warnings in the server's log, the first: {warnings[:3]}"
    assert "External URL" not in log and "Network URL" not in log, log[-2000:]
