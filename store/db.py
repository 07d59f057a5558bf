"""Where the store lives and how to connect: the embedded SQLite file or any SQLAlchemy URL.

* ``RABIT_DATABASE_URL`` (any SQLAlchemy URL, e.g. ``postgresql+psycopg://rabit@db.internal/rabit``):
  a hosted store that several dashboard replicas share.
* Otherwise the embedded SQLite file ``rabit.sqlite3`` in the data folder: ``$RABIT_DATA_DIR``, else
  ``$XDG_DATA_HOME/rabit``, else ``~/.local/share/rabit``; created on first use.

SQLite runs in WAL mode with ``synchronous=FULL`` (a committed save survives a killed process and a power
cut), a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions so concurrent writers queue instead
of failing on a lock upgrade. Migrations (Alembic, shipped in ``store/migrations``) run on first use
under the database's write lock (SQLite) or an advisory lock (PostgreSQL), so replicas starting together
migrate once.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SQLITE_FILE = "rabit.sqlite3"
#: Any number, the same in every process: PostgreSQL advisory lock taken while migrating.
_PG_MIGRATE_LOCK = 4_242_017

_lock = threading.Lock()
_engines: dict[str, Engine] = {}


def data_dir() -> Path:
    """The folder of the embedded store (see the module docstring)."""
    env = os.environ.get("RABIT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "rabit"


def database_url() -> str:
    """``RABIT_DATABASE_URL``, else the embedded SQLite file (its folder created on first use)."""
    url = os.environ.get("RABIT_DATABASE_URL", "").strip()
    if url:
        return url
    d = data_dir()
    d.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{d / SQLITE_FILE}"


def describe(url: str) -> str:
    """The URL without its password, for the screen."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _sqlite_engine(url: str) -> Engine:
    eng = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn, _rec):
        dbapi_conn.isolation_level = None  # the driver issues no BEGIN of its own; we do, below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout = 60000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = FULL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("rabit_read") else "BEGIN IMMEDIATE")

    return eng


def engine(url: str | None = None) -> Engine:
    """One migrated engine per URL per process."""
    url = url or database_url()
    with _lock:
        eng = _engines.get(url)
        if eng is None:
            if url.startswith("sqlite"):
                eng = _sqlite_engine(url)
            else:
                eng = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
            migrate(eng)
            _engines[url] = eng
        return eng


def migrate(eng: Engine) -> None:
    """Bring the schema to the newest migration (idempotent; safe with several processes at once)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with eng.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATE_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def dispose_all() -> None:
    """Close every pooled connection (tests)."""
    with _lock:
        for eng in _engines.values():
            eng.dispose()
        _engines.clear()
