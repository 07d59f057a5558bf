"""Power: each GPU kind's board power and the rating of the system it ships in (``catalogs/power.csv``).

A node's non-GPU share per GPU (CPUs, memory, NICs, switches, fans, PSU losses) is its rating less the GPUs'
board power, per GPU::

    node_rating_w_per_gpu = (system_max_w - system_gpus x gpu_tdp_w) / system_gpus

DGX H100: (10,200 - 8 x 700) / 8 = 575 W per GPU. A kind without a published system rating (PCIe cards, AMD and
Intel platforms: the file's notes say what was not found) takes the median ratio of that share to the board power
over the kinds that have one, times its own board power, and says so in its ``basis``. These are ratings; what a
node draws in service is a share of them (``node_power_draw_frac`` in :mod:`core.base.assumptions`).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import Field, ValidationError

from core.catalog.tables import CATALOG_DIR, CatalogError, _fmt_err, _Row


class PowerRow(_Row):
    """One GPU kind's board power and its system's rating [W]."""

    gpu: str
    gpu_tdp_w: float = Field(gt=0)
    system_name: str = ""
    system_gpus: int | None = Field(None, ge=1)
    system_max_w: float | None = Field(None, gt=0)
    verification: Literal["V", "S", "U"] = "S"
    notes: str = ""

    @property
    def node_rating_w_per_gpu(self) -> float | None:
        """The system rating's non-GPU share per GPU [W] (None without a system rating)."""
        if self.system_max_w is None or not self.system_gpus:
            return None
        return max(0.0, (self.system_max_w - self.system_gpus * self.gpu_tdp_w) / self.system_gpus)


def load_power(path: Path | None = None) -> dict[str, PowerRow]:
    """The power table, one row per GPU kind."""
    p = path or CATALOG_DIR / "power.csv"
    text = p.read_text()
    reader = csv.DictReader(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    out: dict[str, PowerRow] = {}
    for i, row in enumerate(reader, start=1):
        try:
            r = PowerRow.model_validate({k: v for k, v in row.items() if v not in (None, "")})
        except ValidationError as exc:
            raise CatalogError(_fmt_err(p, f"{i} ({row.get('gpu', '?')})", exc)) from None
        if r.gpu in out:
            raise CatalogError(f"{p.name}: row {i} ({r.gpu}): field 'gpu': duplicate GPU kind")
        out[r.gpu] = r
    if not out:
        raise CatalogError(f"{p.name}: no rows")
    return out


@lru_cache(maxsize=1)
def power_rows() -> Mapping[str, PowerRow]:
    return MappingProxyType(load_power())


@dataclass(frozen=True)
class GpuPower:
    """What the fleet plan's power formula reads of one GPU kind [W], and where the figures come from."""

    gpu: str
    tdp_w: float
    node_rating_w_per_gpu: float
    basis: str
    row: PowerRow


def node_share_ratio(rows: Mapping[str, PowerRow]) -> float:
    """The median of (non-GPU rating per GPU / board power) over the kinds with a system rating."""
    ratios = [r.node_rating_w_per_gpu / r.gpu_tdp_w for r in rows.values() if r.node_rating_w_per_gpu is not None]
    return statistics.median(ratios) if ratios else 0.0


def gpu_power(gpu: str, rows: Mapping[str, PowerRow] | None = None) -> GpuPower:
    """The board power and the node's rated share per GPU of ``gpu`` (see the module docstring)."""
    rows = rows if rows is not None else power_rows()
    if gpu not in rows:
        raise KeyError(f"no power row for GPU {gpu!r}; add one to catalogs/power.csv")
    r = rows[gpu]
    share = r.node_rating_w_per_gpu
    if share is not None:
        basis = f"{r.system_name}: {r.system_max_w:,.0f} W rating for {r.system_gpus} GPUs of {r.gpu_tdp_w:,.0f} W ({r.as_of})"
    else:
        ratio = node_share_ratio(rows)
        share = ratio * r.gpu_tdp_w
        basis = (
            f"no published system rating: the node's share is {ratio:.2f} x the {r.gpu_tdp_w:,.0f} W board power, the "
            "median over the kinds with one"
        )
    return GpuPower(gpu=gpu, tdp_w=r.gpu_tdp_w, node_rating_w_per_gpu=share, basis=basis, row=r)
