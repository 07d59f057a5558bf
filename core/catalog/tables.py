"""Catalogs: GPUs, models, inter-node fabrics and prices, read from ``catalogs/`` and validated.

Each file has one pydantic schema; every row carries ``source`` and ``as_of``.
A bad file fails with :class:`CatalogError` naming the file, the row and the field.
Catalog fields use the datasheet's human units (GiB, TB/s, TFLOP/s, GB/s); the
properties convert to SI (bytes, bytes/s, FLOP/s) for ``core``.

Loading is memoised per process (the files are read-only data, not session state).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.base import GB, TB, TERA, US, GiB
from core.catalog.arch import ModelArch
from core.catalog.hf_config import from_hf_config

CATALOG_DIR = Path(__file__).resolve().parents[2] / "catalogs"

Precision = Literal["bf16", "fp8", "fp4", "int8", "int4"]


class CatalogError(ValueError):
    """A catalog file failed validation; the message names file, row and field."""


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str = Field(min_length=3)
    as_of: dt.date


#: PCIe Gen5 x16: 32 GT/s x 16 lanes x 128b/130b = 63 GB/s per direction (PCI-SIG PCIe 5.0 specification),
#: quoted as 64 GB/s; the host link of a GPU whose catalog row names none.
PCIE_GEN5_X16_GB_PER_S = 64.0


class GpuSpec(_Row):
    """One accelerator, per GPU. Peaks are dense (never 2:4 sparse)."""

    slug: str
    name: str
    vendor: Literal["nvidia", "amd", "intel", "google"]
    memory_gib: float = Field(gt=0, description="HBM capacity; vendor 'GB' for HBM is binary (80 GB = 80 GiB)")
    memory_bw_tb_per_s: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0, description="dense BF16/FP16 tensor peak")
    fp8_tflops: float | None = Field(None, gt=0)
    fp4_tflops: float | None = Field(None, gt=0)
    int8_tops: float | None = Field(None, gt=0)
    int4_tops: float | None = Field(None, gt=0)
    bf16_tflops_sparse: float | None = Field(None, gt=0, description="2:4 sparse figure, display only")
    scale_up: str = Field(description="scale-up fabric, e.g. 'NVLink 4'")
    topology: Literal["nvswitch", "mesh", "pcie"]
    scale_up_bw_gb_per_s: float = Field(gt=0, description="per GPU, per direction")
    mesh_links: int = Field(0, ge=0, description="links per GPU in a full mesh (MI300X: 7)")
    link_bw_gb_per_s: float = Field(0, ge=0, description="per link, per direction (mesh)")
    scale_up_latency_us: float = Field(gt=0, description="alpha of one collective hop")
    nvlink_domain: int = Field(gt=0, description="GPUs reachable over the scale-up fabric")
    in_switch_reduction: bool = Field(False, description="NVLink SHARP (NVLS): the switch reduces all-reduce data")
    gpus_per_node: int = Field(gt=0)
    power_w: float = Field(gt=0)
    peak_clock_mhz: float | None = Field(None, gt=0, description="the engine clock the datasheet peaks assume")
    dense_clock_mhz_bf16: float | None = Field(
        None, gt=0, description="median engine clock under a dense BF16 GEMM, where the vendor publishes it"
    )
    dense_clock_mhz_fp8: float | None = Field(
        None, gt=0, description="median engine clock under a dense FP8 GEMM, where the vendor publishes it"
    )
    #: the GPU's link to its host CPU's memory (what an adapter or an offloaded model crosses): its name and
    #: bandwidth per direction; None where the row does not say (a PCIe Gen5 x16 link is then assumed)
    host_link: str = ""
    host_bw_gb_per_s: float | None = Field(None, gt=0, description="GPU <-> host memory, per direction")
    verification: Literal["V", "S", "U"] = "S"
    notes: str = ""

    def dense_clock_share(self, precision: str) -> float:
        """Share of the datasheet peak's clock a dense matrix kernel holds: the median clock the vendor measured
        under a dense GEMM over the clock the peak assumes (MI300X FP8: 1,230 / 2,100 MHz = 0.586); 1 where no
        clock is published (the efficiency ceiling ``mfu_max`` was set on parts whose datasheet clock holds)."""
        dense = self.dense_clock_mhz_bf16 if precision == "bf16" else self.dense_clock_mhz_fp8
        if not (dense and self.peak_clock_mhz):
            return 1.0
        return min(1.0, dense / self.peak_clock_mhz)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GiB

    @property
    def memory_bw_bytes_per_s(self) -> float:
        return self.memory_bw_tb_per_s * TB

    @property
    def host_bw_bytes_per_s(self) -> float:
        """GPU <-> host memory bandwidth per direction [B/s]; a PCIe Gen5 x16 link (64 GB/s) where the row names
        none."""
        return (self.host_bw_gb_per_s or PCIE_GEN5_X16_GB_PER_S) * 1e9

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense datasheet peak for a compute precision [FLOP/s]; falls back to the next wider one."""
        order = {
            "fp4": ("fp4_tflops", "fp8_tflops", "bf16_tflops"),
            "int4": ("int4_tops", "int8_tops", "fp8_tflops", "bf16_tflops"),
            "fp8": ("fp8_tflops", "bf16_tflops"),
            "int8": ("int8_tops", "fp8_tflops", "bf16_tflops"),
            "bf16": ("bf16_tflops",),
        }[precision]
        for f in order:
            v = getattr(self, f)
            if v:
                return v * TERA
        return self.bf16_tflops * TERA

    def supports(self, precision: str) -> bool:
        field = {
            "bf16": "bf16_tflops",
            "fp8": "fp8_tflops",
            "fp4": "fp4_tflops",
            "int8": "int8_tops",
            "int4": "int4_tops",
        }[precision]
        return getattr(self, field) is not None

    @property
    def scale_up_domain(self) -> int:
        """GPUs one group can span over the scale-up fabric: a rack-scale NVSwitch domain (GB200 NVL72: 72 GPUs
        across trays of 4), otherwise one node."""
        if self.topology == "nvswitch" and self.nvlink_domain > self.gpus_per_node:
            return self.nvlink_domain
        return min(self.gpus_per_node, self.nvlink_domain)

    @property
    def scale_up_bw_bytes_per_s(self) -> float:
        return self.scale_up_bw_gb_per_s * GB

    @property
    def scale_up_latency_s(self) -> float:
        return self.scale_up_latency_us * US


class Fabric(_Row):
    """An inter-node (scale-out) network, per GPU."""

    slug: str
    name: str
    bw_gb_per_s: float = Field(gt=0, description="per GPU, per direction (one NIC per GPU)")
    latency_us: float = Field(gt=0)
    verification: Literal["V", "S", "U"] = "S"

    @property
    def bw_bytes_per_s(self) -> float:
        return self.bw_gb_per_s * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * US


class Price(_Row):
    """A price for one GPU-hour at one provider."""

    gpu: str
    provider: str
    kind: Literal["on-demand", "spot", "reserved", "marketplace"]
    usd_per_gpu_hour: float = Field(gt=0, lt=1e6, allow_inf_nan=False)  # finite: a price feeds every cost
    region: str = ""
    verification: Literal["V", "S", "U"] = "S"


class ModelMeta(_Row):
    """The ``_rabit`` block of a model file: provenance and published counts."""

    slug: str
    name: str
    published_total_params: float
    published_active_params: float | None = None
    active_excludes_embedding: bool = False
    #: the published active figure is a label rounded to this many parameters ("17B active": 1e9), not a count
    published_active_rounding: float | None = Field(None, gt=0)
    verification: Literal["V", "S", "U"] = "S"
    notes: str = ""


class ModelEntry(BaseModel):
    model_config = ConfigDict(frozen=True)
    arch: ModelArch
    meta: ModelMeta


def _fmt_err(path: Path, row: str, err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "(row)"
    return f"{path.name}: row {row}: field '{loc}': {e['msg']}"


def _rows(path: Path, key: str) -> list[dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path.name}: cannot read: {exc}") from exc
    rows = data.get(key)
    if not isinstance(rows, list) or not rows:
        raise CatalogError(f"{path.name}: expected a non-empty [[{key}]] table array")
    return rows


def _load_table(path: Path, key: str, schema: type[BaseModel]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, row in enumerate(_rows(path, key), start=1):
        label = f"{i} ({row.get('slug', '?')})"
        try:
            obj = schema.model_validate(row)
        except ValidationError as exc:
            raise CatalogError(_fmt_err(path, label, exc)) from None
        if obj.slug in out:  # type: ignore[attr-defined]
            raise CatalogError(f"{path.name}: row {label}: field 'slug': duplicate slug")
        out[obj.slug] = obj  # type: ignore[attr-defined]
    return out


def load_gpus(path: Path | None = None) -> dict[str, GpuSpec]:
    return _load_table(path or CATALOG_DIR / "gpus.toml", "gpu", GpuSpec)


def load_fabrics(path: Path | None = None) -> dict[str, Fabric]:
    return _load_table(path or CATALOG_DIR / "fabrics.toml", "fabric", Fabric)


def load_model_file(path: Path) -> ModelEntry:
    """One model file: a Hugging Face config.json plus a ``_rabit`` provenance block."""
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogError(f"{path.name}: cannot read: {exc}") from exc
    meta_raw = cfg.pop("_rabit", None)
    if meta_raw is None:
        raise CatalogError(f"{path.name}: row 1: field '_rabit': missing provenance block")
    try:
        meta = ModelMeta.model_validate(meta_raw)
    except ValidationError as exc:
        raise CatalogError(_fmt_err(path, "1 (_rabit)", exc)) from None
    try:
        arch = from_hf_config(cfg, slug=meta.slug, name=meta.name)
    except (ValidationError, ValueError, TypeError) as exc:
        raise CatalogError(f"{path.name}: row 1 ({meta.slug}): {exc}") from None
    return ModelEntry(arch=arch, meta=meta)


def load_models(directory: Path | None = None) -> dict[str, ModelEntry]:
    d = directory or CATALOG_DIR / "models"
    out: dict[str, ModelEntry] = {}
    for p in sorted(d.glob("*.json")):
        e = load_model_file(p)
        if e.meta.slug in out:
            raise CatalogError(f"{p.name}: row 1: field 'slug': duplicate slug {e.meta.slug!r}")
        out[e.meta.slug] = e
    return out


def load_prices(path: Path | None = None) -> tuple[Price, ...]:
    """Prices from a CSV with a header naming the :class:`Price` fields."""
    p = path or CATALOG_DIR / "prices.csv"
    return parse_prices(p.read_text(), name=p.name)


def parse_prices(text: str, name: str = "prices.csv") -> tuple[Price, ...]:
    """Parse a price list (the catalog's or one a user uploads)."""
    reader = csv.DictReader(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    need = {"gpu", "provider", "kind", "usd_per_gpu_hour", "source", "as_of"}
    try:
        header = reader.fieldnames
    except csv.Error as exc:
        raise CatalogError(f"{name}: line 1: not a readable CSV header ({exc})") from None
    if not header or not need <= set(header):
        raise CatalogError(f"{name}: header must name {sorted(need)}")
    out = []
    rows = enumerate(reader, start=1)
    while True:
        try:
            i, row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:  # e.g. a field over the csv module's size limit
            raise CatalogError(f"{name}: line {reader.line_num}: not readable CSV ({exc})") from None
        try:
            out.append(Price.model_validate({k: v for k, v in row.items() if v not in (None, "")}))
        except ValidationError as exc:
            raise CatalogError(_fmt_err(Path(name), f"{i} ({row.get('gpu', '?')})", exc)) from None
    if not out:
        raise CatalogError(f"{name}: no price rows")
    return tuple(out)


# The memoised catalogs are shared by every session thread: read-only views, so no caller can mutate them.
@lru_cache(maxsize=1)
def gpus() -> Mapping[str, GpuSpec]:
    return MappingProxyType(load_gpus())


@lru_cache(maxsize=1)
def fabrics() -> Mapping[str, Fabric]:
    return MappingProxyType(load_fabrics())


@lru_cache(maxsize=1)
def models() -> Mapping[str, ModelEntry]:
    return MappingProxyType(load_models())


@lru_cache(maxsize=1)
def prices() -> tuple[Price, ...]:
    return load_prices()


def gpu(slug: str) -> GpuSpec:
    try:
        return gpus()[slug]
    except KeyError:
        raise KeyError(f"unknown GPU {slug!r}; known: {', '.join(sorted(gpus()))}") from None


def fabric(slug: str) -> Fabric:
    try:
        return fabrics()[slug]
    except KeyError:
        raise KeyError(f"unknown fabric {slug!r}; known: {', '.join(sorted(fabrics()))}") from None


def model(slug: str) -> ModelArch:
    try:
        return models()[slug].arch
    except KeyError:
        raise KeyError(f"unknown model {slug!r}; known: {', '.join(sorted(models()))}") from None
