"""A throwaway PostgreSQL cluster for the store tests.

``RABIT_TEST_POSTGRES_URL`` (set by ``.ci/run``) names a server to use. Without it, :func:`start` runs
``initdb`` + ``pg_ctl`` from Debian's packages in a temporary folder on 127.0.0.1 and a free port
(as the ``postgres`` user when run as root: initdb refuses root). ``python tests/pgserver.py start DIR``
prints the URL (``.ci/run`` uses this); ``stop DIR`` stops it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    user = "postgres" if _has_user("postgres") else "nobody"
    runuser = shutil.which("runuser")
    return [runuser, "-u", user, "--", *cmd] if runuser else ["su", user, "-s", "/bin/sh", "-c", " ".join(cmd)]


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def start(folder: str | Path) -> str:
    """Start a cluster in ``folder``; return its SQLAlchemy URL. Raises RuntimeError saying why it could not."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data, sock = folder / "data", folder / "sock"
    sock.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres" if _has_user("postgres") else "nobody")
        for p in (folder, sock):
            os.chown(p, user.pw_uid, user.pw_gid)
    port = _free_port()
    r = subprocess.run(
        _as_user([initdb, "-D", str(data), "-U", "rabit", "--auth=trust", "-E", "UTF8", "--no-sync"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if r.returncode:
        raise RuntimeError(f"initdb failed: {r.stderr.strip()[-300:]}")
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    r = subprocess.run(
        _as_user([pg_ctl, "-D", str(data), "-o", opts, "-l", str(folder / "log"), "-w", "-t", "60", "start"]),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    if r.returncode:
        log = (folder / "log").read_text()[-300:] if (folder / "log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {log}")
    (folder / "port").write_text(str(port))
    return f"postgresql+psycopg://rabit@127.0.0.1:{port}/postgres"


def stop(folder: str | Path) -> None:
    pg_ctl = _bin("pg_ctl")
    data = Path(folder) / "data"
    if pg_ctl and data.exists():
        subprocess.run(
            _as_user([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            check=False,
            timeout=60,
        )


def fresh_database(url: str) -> str:
    """A new empty database on the server ``url`` names; returns its URL."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = "rabit_" + uuid.uuid4().hex[:12]
    eng = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        eng.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop a database :func:`fresh_database` made (connections to it are closed first)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    u = make_url(url)
    eng = create_engine(u.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)'))
    finally:
        eng.dispose()


if __name__ == "__main__":
    what, where = sys.argv[1], sys.argv[2]
    if what == "start":
        try:
            print(start(where))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(1)
    else:
        stop(where)
        time.sleep(0.1)
