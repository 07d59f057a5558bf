"""The ``store_url`` fixture: every store test runs on SQLite and on PostgreSQL.

PostgreSQL: ``RABIT_TEST_POSTGRES_URL`` (``.ci/run`` starts a throwaway cluster and sets it), else a
cluster started here from Debian's packages. When none can be started the PostgreSQL half is skipped
with the reason printed, except under CI (``CI`` or ``RABIT_REQUIRE_POSTGRES`` set), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pgserver


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    url = os.environ.get("RABIT_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="rabit-pg-"))  # under /tmp: the postgres user must reach it
    try:
        url = pgserver.start(folder)
    except (RuntimeError, OSError, Exception) as exc:  # noqa: BLE001 - any failure to start is the reason
        reason = f"no PostgreSQL server could be started: {exc}"
        if os.environ.get("CI") or os.environ.get("RABIT_CI") or os.environ.get("RABIT_REQUIRE_POSTGRES"):
            pytest.fail(reason + " (CI must run the PostgreSQL store tests)")
        print(f"\nSKIP PostgreSQL store tests: {reason}", file=sys.stderr)
        pytest.skip(reason)
    yield url
    pgserver.stop(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rabit.sqlite3'}"
    else:
        url = pgserver.fresh_database(request.getfixturevalue("pg_server"))
        yield url
        from store import db

        db.dispose_all()
        pgserver.drop_database(url)
