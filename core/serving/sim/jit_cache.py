"""The compiled loop's decorators and the key of its on-disk cache.

numba's ``cache=True`` stamps each function's cache with a hash of the one file that defines it, and keys each
entry on the function's own bytecode. The loop is many files compiled as one: a function inlined from
:mod:`core.serving.sim.jit_parts` into :mod:`core.serving.sim.jit_loop`, a column number from
:mod:`core.serving.sim.jit_layout` or a status from :mod:`core.serving.sim.records` read as a compile-time
constant, all end up in the machine code of a caller whose file did not change; with numba's stamp an edit there
kept the old machine code running until ``__pycache__`` was cleared. Here every compiled function's cache is
stamped with one hash of all the engine's sources
(:data:`core.serving.sim.jit_sources.ENGINE_SOURCES`), so an edit to any of them makes every
cached entry stale and the next process compiles afresh (numba: ``numba/core/caching.py``, ``_CacheLocator``
``get_source_stamp``, ``IndexDataCacheFile._load_index``, which drops an index whose stamp differs).

The cache stays in the ``__pycache__`` beside the modules (numba's in-tree place; its ``NUMBA_CACHE_DIR`` and
user-wide places where that is not writable), one index per function, overwritten on a recompile.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from numba import njit
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    InTreeCacheLocator,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
)

from core.serving.sim.jit_sources import engine_source_hash


class _EngineStamp:
    """numba's locators with the engine's hash as the source stamp, in place of the defining file's alone."""

    _py_file: str

    def get_source_stamp(self) -> str:
        return engine_source_hash(Path(os.path.abspath(self._py_file)).parent)


class _InTree(_EngineStamp, InTreeCacheLocator):
    pass


class _UserProvided(_EngineStamp, UserProvidedCacheLocator):
    pass


class _UserWide(_EngineStamp, UserWideCacheLocator):
    pass


class _EngineImpl(CompileResultCacheImpl):
    _locator_classes = [_UserProvided, _InTree, _UserWide]


class _EngineCache(FunctionCache):
    _impl_class = _EngineImpl


def _cached(dispatcher):
    # Dispatcher.enable_caching() sets ``_cache = FunctionCache(py_func)``; the same with the engine's stamp.
    dispatcher._cache = _EngineCache(dispatcher.py_func)
    return dispatcher


#: Every engine function's compile options: no GIL held (sessions' simulations run side by side) and no numba
#: runtime (``_nrt=False``): the engine allocates nothing in compiled code (its arrays come from the caller), so the
#: reference counts numba's runtime keeps on every array passed to an inlined helper are pure cost.
OPTIONS: dict[str, Any] = {"nogil": True, "_nrt": False}


def jit(f):
    """Compiled with numba (cached on disk, keyed on the engine's sources; no GIL held, so sessions'
    simulations run side by side)."""
    return _cached(njit(**OPTIONS)(f))


def jit_inline(f):
    """:func:`jit`, and inlined where it is called: the small helpers of the hot path, where a call costs more than
    they do."""
    return _cached(njit(inline="always", **OPTIONS)(f))
