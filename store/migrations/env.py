"""Alembic environment: run against the connection :func:`store.db.migrate` hands over (in its transaction)."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
