"""The store's tables (SQLAlchemy Core). The migrations under ``store/migrations`` create them.

* ``analyses``: one row per analysis, its current ``revision`` (the optimistic-concurrency token),
  the search fields (name, model, GPU), owner, times, and ``deleted_at`` (soft delete).
* ``revisions``: every save, never overwritten: ``(analysis_id, revision)`` is the primary key, so two
  writers can never both write revision N.
* ``runs``: measured runs attached to an analysis (a :class:`core.operations.runs.Run` as JSON).
* ``telemetry``: telemetry attached to an analysis (read by diagnostics).
* ``startup_logs``: an engine's start-up log attached to an analysis: the numbers read from it (a
  :class:`core.operations.StartupLog` as JSON) and the text (kept up to ``MAX_STORED_LOG_CHARS``).

Times are ISO 8601 UTC strings (``2026-12-01T09:30:00.000000Z``): portable, sortable, no timezone games.
"""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table, Text

metadata = MetaData()

analyses = Table(
    "analyses",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("gpu", String(64), nullable=False),
    Column("owner", String(200), nullable=True),
    Column("saved_by", String(200), nullable=False, default=""),
    Column("revision", Integer, nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
    Column("deleted_at", String(32), nullable=True),
)

revisions = Table(
    "revisions",
    metadata,
    Column("analysis_id", String(32), ForeignKey("analyses.id"), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("config_json", Text, nullable=False),
    Column("results_json", Text, nullable=False),
    Column("note", Text, nullable=False),
    Column("saved_by", String(200), nullable=False),
    Column("created_at", String(32), nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("analysis_id", String(32), ForeignKey("analyses.id"), nullable=False, index=True),
    Column("label", String(200), nullable=False),
    Column("source", String(32), nullable=False),
    Column("run_json", Text, nullable=False),
    Column("created_at", String(32), nullable=False),
)

telemetry = Table(
    "telemetry",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("analysis_id", String(32), ForeignKey("analyses.id"), nullable=False, index=True),
    Column("kind", String(64), nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("created_at", String(32), nullable=False),
)

startup_logs = Table(
    "startup_logs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("analysis_id", String(32), ForeignKey("analyses.id"), nullable=False, index=True),
    Column("name", String(200), nullable=False),
    Column("engine", String(32), nullable=False),
    Column("payload_json", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", String(32), nullable=False),
)
