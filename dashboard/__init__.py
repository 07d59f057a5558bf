"""Streamlit glue: the shared sidebar, the cached wrappers around ``core``, and drawing helpers."""
