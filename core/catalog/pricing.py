"""Prices: the USD per GPU-hour a configuration is costed at, with the row(s) it came from.

Policy ``"median"`` (default) takes the median of the matching rows across providers, a representative
market price that one outlier listing cannot move; ``"cheapest"`` takes the lowest. Rows are filtered by
kind (on-demand by default) and optionally by provider (case-insensitive substring). When a GPU has no
row of the requested kind, no price is returned: the caller says so instead of guessing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from core.base import PricePolicy
from core.catalog.tables import Price

__all__ = ["GpuPrice", "PricePolicy", "gpu_price"]


@dataclass(frozen=True)
class GpuPrice:
    gpu: str
    usd_per_gpu_hour: float
    kind: str
    policy: str
    rows: tuple[Price, ...]

    @property
    def basis(self) -> str:
        """One line naming where the price comes from."""
        if len(self.rows) == 1:
            r = self.rows[0]
            return f"{r.provider} {r.kind} ${r.usd_per_gpu_hour:.2f}/GPU-h ({r.as_of})"
        lo = min(r.usd_per_gpu_hour for r in self.rows)
        hi = max(r.usd_per_gpu_hour for r in self.rows)
        newest = max(r.as_of for r in self.rows)
        return f"{self.policy} of {len(self.rows)} {self.kind} listings (${lo:.2f}-${hi:.2f}/GPU-h, newest {newest})"


def gpu_price(
    gpu: str,
    prices: tuple[Price, ...],
    *,
    kind: str = "on-demand",
    policy: PricePolicy = "median",
    providers: tuple[str, ...] = (),
) -> GpuPrice | None:
    """The price of one GPU-hour of ``gpu`` under a policy, or None when no row matches."""
    rows = tuple(
        p
        for p in prices
        if p.gpu == gpu
        and p.kind == kind
        and (not providers or any(s.lower() in p.provider.lower() for s in providers))
    )
    if not rows:
        return None
    values = [r.usd_per_gpu_hour for r in rows]
    if policy == "cheapest":
        best = min(rows, key=lambda r: r.usd_per_gpu_hour)
        return GpuPrice(gpu, best.usd_per_gpu_hour, kind, policy, (best,))
    return GpuPrice(gpu, float(statistics.median(values)), kind, policy, rows)


def unpriced(
    gpus: tuple[str, ...], prices: tuple[Price, ...], *, kind: str = "on-demand", providers: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The GPU kinds among ``gpus`` with no price row of ``kind`` (and provider filter): left out of a search.

    The caller says so next to the GPU instead of dropping them silently.
    """
    return tuple(g for g in gpus if gpu_price(g, prices, kind=kind, providers=providers) is None)
