"""The compiled loop's sources and their hash: the stamp of its on-disk cache (:mod:`core.serving.sim.jit_cache`).
Plain Python (no numba), so the serving face can name them where numba is absent."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: The files whose code or constants the compiled loop's machine code holds: the ``jit_*`` modules and the record
#: statuses (:mod:`core.serving.sim.records`) they import. Their hash stamps the loop's on-disk cache
#: (:mod:`core.serving.sim.jit_cache`).
ENGINE_SOURCES = (
    "jit_arrivals.py",
    "jit_cache.py",
    "jit_deadline.py",
    "jit_disagg.py",
    "jit_engine.py",
    "jit_layout.py",
    "jit_loop.py",
    "jit_lora.py",
    "jit_parts.py",
    "jit_plan.py",
    "jit_sessions.py",
    "jit_sources.py",
    "jit_window.py",
    "records.py",
)


def engine_source_hash(folder: Path | None = None) -> str:
    """SHA-256 over the engine's source files in ``folder`` (default: this package's), name and bytes of each, in
    the order of :data:`ENGINE_SOURCES` (re-read on every call: a few tens of kB, once per compiled function at
    import)."""
    folder = folder or Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ENGINE_SOURCES:
        h.update(name.encode())
        h.update((folder / name).read_bytes())
    return h.hexdigest()
