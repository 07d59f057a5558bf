"""RA-BIT's store: saved analyses with revisions, measured runs and telemetry (SQLAlchemy 2 + Alembic).

It lives at the edge: the CLI and the dashboard call it; ``core`` never does. See :mod:`store.db` for
where the data lives (the embedded SQLite file or ``RABIT_DATABASE_URL``).
"""

from store.analyses import (
    EXPORT_FORMAT,
    Analysis,
    Conflict,
    NotFound,
    RevisionInfo,
    Store,
    StoredRun,
    StoreError,
    Summary,
)
from store.db import data_dir, database_url

__all__ = [
    "EXPORT_FORMAT",
    "Analysis",
    "Conflict",
    "NotFound",
    "RevisionInfo",
    "Store",
    "StoreError",
    "StoredRun",
    "Summary",
    "data_dir",
    "database_url",
]
