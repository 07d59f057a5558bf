"""Multi-LoRA serving in the compiled loop (:mod:`core.serving.sim.compiled`), its caller's half: the adapters of a
run laid out in the loop's arrays (:mod:`core.serving.sim.jit_lora` reads them) and read back as the Python loop's
adapter records (:meth:`core.serving.sim.adapters.Adapters.records`). Plain Python (no numba).
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from core.serving.sim.jit_layout import (
    I_AFF,
    I_AHSLOTS,
    I_ASLOTS,
    I_ASTOR,
    N_RI,
    Q_ADP,
    R_ADS,
    RQ_AWAIT,
    TB_HOST,
    TB_MB,
    TB_MD,
    TB_STORE,
)


def adapter_numbers(adapters) -> int | None:
    """The adapter numbers a run's requests may carry (``adapters``: the run's
    :class:`~core.serving.sim.adapters.AdapterDraws` or a replica's :class:`~core.serving.sim.adapters.Adapters`;
    None without), or None where a trace names a negative one (the compiled loop's columns are by number)."""
    draws = getattr(adapters, "draws", adapters)
    trace = draws.trace
    if trace is not None and trace and min(trace) < 0:
        return None
    return max(draws.n, max(trace) + 1 if trace else 0)


def lay_out(lora, n: int, router: str, timing, TB: np.ndarray, RI: np.ndarray, RQI: np.ndarray):
    """The loop's arrays with the adapters of ``lora`` (a replica's :class:`~core.serving.sim.adapters.Adapters`, as
    each of the deployment's is built; None: none) for ``n`` requests: the timing table with the adapters' rows,
    the replicas' state with their columns, and the loop's status with room for the log of loads after it
    (:class:`~core.serving.sim.jit_layout.Engines`' ``err``); ``RQI`` gets each request's adapter."""
    if lora is None:
        RQI[Q_ADP] = -1
        return TB, RI, np.zeros(1, dtype=np.int64)
    na = int(adapter_numbers(lora) or 0)
    draws = lora.draws
    if n:
        draws.adapter(n - 1)
    RQI[Q_ADP] = np.asarray(draws.of[:n], dtype=np.int64)
    wide = np.zeros((TB_STORE + 1, max(TB.shape[1], na)))
    wide[: TB.shape[0], : TB.shape[1]] = TB
    t = TB.shape[1]
    wide[TB_MB, :t] = np.asarray(timing.mb, dtype=float) if timing.lora else 1.0
    wide[TB_MD, :] = timing.md
    ranks = lora.ranks
    wide[TB_HOST, :na] = [lora.load_host_s[ranks[a % len(ranks)]] for a in range(na)]
    wide[TB_STORE, :na] = [lora.load_storage_s[ranks[a % len(ranks)]] for a in range(na)]
    R = RI.shape[0]
    ri = np.zeros((R, N_RI + 4 * na), dtype=np.int64)
    ri[:, :N_RI] = RI
    ri[:, I_ASLOTS] = lora.slots
    ri[:, I_AHSLOTS] = lora.host_slots
    ri[:, I_AFF] = 1 if router == "adapter-affinity" else 0
    err = np.zeros(2 + 2 * (n + 2 * R * lora.slots + 64), dtype=np.int64)
    return wide, ri, err


def loads_by_replica(R: int, TB: np.ndarray, err: np.ndarray) -> list[array]:
    """Each replica's adapter loads in order, their times [s] (``Adapters.load_s``), from the loop's log."""
    k = int(err[1])
    eng, code = err[2 : 2 + 2 * k : 2], err[3 : 3 + 2 * k : 2]
    times = np.where(code % 2 == 1, TB[TB_STORE, code // 2], TB[TB_HOST, code // 2])
    out = []
    for e in range(R):
        a = array("d")
        a.frombytes(np.ascontiguousarray(times[eng == e], dtype=float).tobytes())
        out.append(a)
    return out


def replica_adapters(
    e: int, g: np.ndarray, loads: array, RQF: np.ndarray, RQI: np.ndarray, RF: np.ndarray, RI: np.ndarray
) -> dict[str, Any]:
    """Replica ``e``'s adapter records (``Adapters.records``) for its requests ``g`` (the deployment's numbers, in
    the order it took them) and its ``loads``."""
    adapter = array("l")
    adapter.frombytes(np.ascontiguousarray(RQI[Q_ADP, g], dtype=np.int64).tobytes())
    wait = array("d")
    wait.frombytes(np.ascontiguousarray(RQF[RQ_AWAIT, g], dtype=float).tobytes())
    return {
        "adapter": adapter,
        "adapter_load_s": loads,
        "adapter_storage_loads": int(RI[e, I_ASTOR]),
        "adapter_wait_s": wait,
        "adapter_distinct_s": float(RF[e, R_ADS]),
        "adapter_engines": 1,
    }
