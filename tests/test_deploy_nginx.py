"""The deployment with its real parts: Debian's nginx running ``deploy/nginx.conf`` (its upstream pointed at two
loopback dashboard replicas, its listen address at a free loopback port; every other line as shipped) in front of
replicas that keep their analyses in PostgreSQL. One replica is killed with SIGKILL in the middle of its visitors'
sessions: they land on the other replica when they reconnect, every saved analysis is intact, and the other
replica's visitors never notice.

Which replica a visitor reaches is read from the kernel's table of established TCP connections (each session's
websocket is one nginx -> replica connection), so the test needs no change to the app or the file.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import live
import pgserver
import pytest
from store_fixtures import pg_server  # noqa: F401 - fixture

from dashboard import wsclient

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def _require_nginx() -> str:
    if NGINX is None:
        if live.in_ci() or os.environ.get("RABIT_REQUIRE_POSTGRES"):
            raise RuntimeError("CI runs the deployment test with Debian's nginx (.ci/run installs it)")
        pytest.skip("nginx is not installed (apt-get install nginx)")
    return NGINX


def test_ci_installs_the_tools_and_a_missing_one_fails_there(monkeypatch):
    """.ci/run installs Debian's nginx and chromium and marks the run as CI; under that mark a missing nginx or
    chromium fails the tests that need it instead of skipping them (a skipped deployment test would pass CI)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"apt-get install -y -q nginx\b", ci) and re.search(r"apt-get install -y -q chromium\b", ci)
    assert "export RABIT_CI=1" in ci
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("RABIT_CI", "1")
    monkeypatch.setattr(live, "CHROMIUM", None)
    monkeypatch.setattr(sys.modules[__name__], "NGINX", None)
    with pytest.raises(RuntimeError, match="nginx"):
        _require_nginx()
    with pytest.raises(RuntimeError, match="chromium"):
        live.require_chromium()
    monkeypatch.delenv("RABIT_CI")
    monkeypatch.delenv("RABIT_REQUIRE_POSTGRES", raising=False)
    with pytest.raises(pytest.skip.Exception):  # outside CI a missing tool skips, saying what to install
        _require_nginx()


def test_the_upload_limit_is_the_apps():
    """nginx's body limit is the app's upload limit (Streamlit's server.maxUploadSize, in MB) plus room for the
    multipart framing of one file: a file the app accepts passes the proxy, a larger one is refused there."""
    app_mb = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]["maxUploadSize"]
    m = re.search(r"client_max_body_size\s+(\d+)m;", CONF.read_text())
    assert m, "deploy/nginx.conf sets no client_max_body_size"
    assert app_mb <= int(m.group(1)) <= app_mb + 1


def _established(port: int) -> int:
    """Established TCP connections whose local end is ``port`` on 127.0.0.1 (the kernel's table)."""
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "01" and int(local.split(":")[1], 16) == port:
            n += 1
    return n


def _conf(tmp: Path, listen: int, upstreams: list[int]) -> Path:
    """deploy/nginx.conf with its upstream server line pointed at the loopback replicas and its listen line at a
    loopback port; nothing else changes."""
    text = CONF.read_text()
    server_line = re.search(r"^\s*server dashboard:8501(.*);$", text, re.M)
    assert server_line, "the upstream's server line changed; update this test"
    opts = server_line.group(1)
    text = text.replace(server_line.group(0), "\n".join(f"        server 127.0.0.1:{p}{opts};" for p in upstreams), 1)
    text, n = re.subn(r"^\s*listen 80;$", f"        listen 127.0.0.1:{listen};", text, flags=re.M)
    assert n == 1, "the listen line changed; update this test"
    out = tmp / "nginx.conf"
    out.write_text(text)
    return out


async def _texts(url: str, query: str, sess: wsclient.Session, deadline: float) -> list[str]:
    """Open a session through ``url`` and run its first page; return every markdown and caption it drew."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    await wsclient._open(url, sess, deadline)
    await sess.ws.send(wsclient._rerun_msg("", query))
    out: list[str] = []
    while True:
        raw = await asyncio.wait_for(sess.ws.recv(), timeout=max(1.0, deadline - time.monotonic()))
        if isinstance(raw, str):
            continue
        msg = ForwardMsg()
        msg.ParseFromString(raw)
        kind = msg.WhichOneof("type")
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            if el.WhichOneof("type") == "markdown":
                out.append(el.markdown.body)
            wsclient._note_widgets(msg.delta, sess)
        elif kind == "new_session":
            sess.page_hash = msg.new_session.page_script_hash or sess.page_hash
        elif kind == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            return out


def test_nginx_keeps_every_visitor_when_a_replica_is_killed(pg_server, tmp_path):  # noqa: F811
    nginx = _require_nginx()
    db = pgserver.fresh_database(pg_server)
    env = {"RABIT_DATABASE_URL": db}
    from store import Store

    store = Store(db)
    ids = [store.create(f"plan {i}", live_config(i), results={}, note=f"note {i}", saved_by="t") for i in range(4)]
    before = {aid: (store.get(aid).config, store.get(aid).revision) for aid in ids}
    replicas = [live.start(env=env) for _ in range(2)]
    ports = [int(url.rsplit(":", 1)[1]) for _, url in replicas]
    listen = live.free_port()
    (tmp_path / "logs").mkdir()
    proxy = subprocess.Popen(
        [
            nginx,
            "-p",
            str(tmp_path),
            "-c",
            str(_conf(tmp_path, listen, ports)),
            "-g",
            f"daemon off; pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{listen}"
    try:
        live.wait_healthy(url, proxy)

        async def scenario():
            deadline = time.monotonic() + 300
            on: dict[int, list[tuple[wsclient.Session, str]]] = {0: [], 1: []}
            # visitors from distinct loopback addresses (nginx hashes the client's address) until both replicas
            # serve someone; each opens a saved analysis by its link
            for last in range(2, 40):
                counts = [_established(p) for p in ports]
                sess = wsclient.Session(source_ip=f"127.0.0.{last}")
                aid = ids[last % len(ids)]
                texts = await _texts(url, f"analysis={aid}", sess, deadline)
                assert any(f"plan {ids.index(aid)}" in t for t in texts), texts  # the sidebar names the analysis
                grew = [i for i, p in enumerate(ports) if _established(p) > counts[i]]
                assert len(grew) == 1, (counts, [_established(p) for p in ports])
                on[grew[0]].append((sess, aid))
                if all(len(v) >= 2 for v in on.values()):
                    break
            assert all(on.values()), "the client addresses did not reach both replicas"
            os.kill(replicas[0][0].pid, signal.SIGKILL)  # mid-session: replica 0 dies with its visitors' sockets
            replicas[0][0].wait(timeout=10)
            # the other replica's visitors never notice: the same socket reruns their page, analysis still open
            for sess, _ in on[1]:
                await wsclient._rerun("", "", sess, "cfg.batch", 48, deadline)
                assert not sess.errors and sess.times_s, sess.errors
            # the killed replica's visitors see their socket close, reconnect through nginx and land on replica 1
            for sess, aid in on[0]:
                await wsclient._rerun("", "", sess, "cfg.batch", 48, deadline)
                assert sess.errors, "a session of the killed replica still answered"
                again = wsclient.Session(source_ip=sess.source_ip)
                texts = await _texts(url, f"analysis={aid}", again, deadline)
                assert any(f"plan {ids.index(aid)}" in t for t in texts), texts
                await again.ws.close()
            for sess, _ in on[1]:
                await sess.ws.close()
            return on

        on = asyncio.run(scenario())
        assert len(on[0]) >= 1 and len(on[1]) >= 1
        # every saved analysis intact: the same configs and revisions, read back from PostgreSQL
        assert {aid: (store.get(aid).config, store.get(aid).revision) for aid in ids} == before
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        for proc, _ in replicas:
            if proc.poll() is None:
                live.stop(proc)
        from store import db as store_db

        store_db.dispose_all()
        pgserver.drop_database(db)


def live_config(i: int):
    from core.config import DEFAULT

    return DEFAULT.with_(batch=8 * (i + 1))
