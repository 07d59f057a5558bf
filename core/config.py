"""The one shared configuration: a frozen, hashable pydantic model.

It flows from the sidebar to every page and into every ``core`` call; Streamlit's
``st.cache_data`` keys on it. It round-trips through a URL query string
(:func:`to_query` / :func:`from_query`) and through a JSON file
(:meth:`RabitConfig.model_dump_json` / :func:`from_json`).

Field-level checks (positive sizes, enumerations) live in the model; checks that need
the catalogs (TP must divide heads, the model must fit at batch 1) live in
:func:`core.validate.problems`, which names the field each message belongs to.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.assumptions import Assumptions
from core.limits import (
    CONFIG_DOMAINS,
    MAX_LINK_PARAM_CHARS,
    inflate,
    nearest,
    parse_json,
)
from core.model import ModelArch

WeightFormat = Literal["bf16", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
KvDtype = Literal["bf16", "fp8"]

#: Bytes per parameter by weight format, scales included.
#: INT4 at group 128 with one FP16 scale per group: 0.5 + 2/128 = 0.5156 B (seed: about 0.52).
#: MXFP4: 4-bit E2M1 + one 8-bit E8M0 scale per 32: 0.5 + 1/32 = 0.53125 B (OCP MX spec v1.0).
#: NVFP4: 4-bit E2M1 + one FP8 E4M3 scale per 16: 0.5 + 1/16 = 0.5625 B (NVIDIA Blackwell docs).
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2 / 128, "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16,
}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}

#: Compute precision a weight format runs its GEMMs in (weight-only INT4 dequantises to BF16).
COMPUTE_PRECISION: dict[str, str] = {
    "bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16", "mxfp4": "fp4", "nvfp4": "fp4",
}


class RabitConfig(BaseModel):
    """Everything a page or CLI command needs to size one workload (frozen, hashable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # what
    model: str = "llama-3.1-70b"
    custom_model: ModelArch | None = None  # a user-supplied config.json; wins over ``model``
    # where
    gpu: str = "h100-sxm"
    gpus_per_node: int = Field(8, ge=1, le=72)
    nodes: int = Field(1, ge=1, le=8192)
    fabric: str = "ib-ndr"
    # layout
    tp: int = Field(8, ge=1)
    pp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    # workload
    phase: Literal["serve", "train"] = "serve"
    batch: int = Field(32, ge=1)
    input_tokens: int = Field(4096, ge=1)
    output_tokens: int = Field(4096, ge=1)
    prefix_cache_frac: float = Field(0.0, ge=0.0, lt=1.0)
    weights: WeightFormat = "bf16"
    kv_dtype: KvDtype = "bf16"
    kv_alloc: Literal["paged", "contiguous"] = "paged"
    block_size: int = Field(16, ge=1, le=1024)
    # speculative decoding
    spec_method: Literal["none", "draft", "ngram", "eagle"] = "none"
    spec_k: int = Field(4, ge=1, le=16)
    spec_alpha: float = Field(0.7, ge=0.0, le=1.0)
    draft_model: str = "llama-3.1-8b"
    # training
    train_precision: Literal["bf16", "fp8"] = "bf16"
    zero: Literal[0, 1, 2, 3] = 1
    micro_batch: int = Field(1, ge=1)
    seq_len: int = Field(4096, ge=1)
    recompute: Literal["none", "selective", "full"] = "selective"
    sequence_parallel: bool = True
    lora_rank: int = Field(0, ge=0)
    qlora: bool = False
    train_tokens: float = Field(1e12, gt=0)
    global_batch_tokens: int = Field(4 * 2**20, ge=1)
    # assumptions
    assumptions: Assumptions = Assumptions()

    @field_validator(*CONFIG_DOMAINS, mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: Any) -> Any:
        """Every numeric field inside its one finite domain (core.limits, shared with the widgets and CLI)."""
        d = CONFIG_DOMAINS[info.field_name]
        if isinstance(v, str):
            try:
                v = float(v) if not d.integer else int(v) if v.strip().lstrip("+-").isdigit() else float(v)
            except ValueError:
                raise ValueError(f"{v!r} is not a number") from None
        if isinstance(v, float) and d.integer and v.is_integer() and abs(v) < 2**53:
            v = int(v)
        p = d.problem(v)
        if p is not None:
            raise ValueError(p)
        return v

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def dp(self) -> int:
        """Data-parallel degree (serving: replicas) = GPUs / (TP x PP)."""
        return max(1, self.gpus // (self.tp * self.pp))

    @property
    def replica_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES[self.weights]

    @property
    def kv_bytes_per_elem(self) -> float:
        return KV_BYTES[self.kv_dtype]

    def with_(self, **changes: Any) -> RabitConfig:
        """A validated copy with some fields changed."""
        return RabitConfig.model_validate({**self.model_dump(), **changes})


DEFAULT = RabitConfig()


def to_query(cfg: RabitConfig) -> dict[str, str]:
    """The fields that differ from the defaults, as strings for a URL query.

    Nested objects (a custom model, changed assumptions) travel as compressed
    base64 JSON so a pasted link reproduces the view exactly.
    """
    out: dict[str, str] = {}
    base = DEFAULT.model_dump(mode="json")
    for k, v in cfg.model_dump(mode="json").items():
        if v == base.get(k):
            continue
        if isinstance(v, (dict, list)):
            blob = zlib.compress(json.dumps(v, separators=(",", ":")).encode())
            out[k] = "z" + base64.urlsafe_b64encode(blob).decode().rstrip("=")
        elif isinstance(v, bool):
            out[k] = "1" if v else "0"
        else:
            out[k] = str(v)
    return out


#: Query parameters Streamlit itself reads (never RA-BIT settings, never reported).
STREAMLIT_PARAMS = frozenset({"embed", "embed_options"})
#: Fields that name a catalog entry, with the catalog they are checked against.
_CATALOG_FIELDS = {"model": "models", "draft_model": "models", "gpu": "gpus", "fabric": "fabrics"}


class LinkIssue(BaseModel):
    """One link parameter that was not used, and why (the rest of the link still applies)."""

    model_config = ConfigDict(frozen=True)

    param: str
    value: str
    reason: str

    def message(self) -> str:
        shown = self.value if len(self.value) <= 40 else self.value[:37] + "..."
        return f"link parameter {self.param}={shown} was not used: {self.reason}"


def _decode_param(k: str, s: str) -> Any:
    """Decode one raw query value (encoded objects inflated within their limits)."""
    if k in ("custom_model", "assumptions"):
        if not s.startswith("z"):
            raise ValueError("not an encoded object")
        if len(s) > MAX_LINK_PARAM_CHARS:
            raise ValueError(f"{len(s):,} characters; the limit is {MAX_LINK_PARAM_CHARS:,}")
        pad = "=" * (-len(s[1:]) % 4)
        try:
            blob = base64.urlsafe_b64decode(s[1:] + pad)
        except (ValueError, TypeError):
            raise ValueError("not base64") from None
        return parse_json(inflate(blob), what="the encoded object")
    if _int_literal(k):
        return int(s) if s.lstrip("-").isdigit() and len(s) < 20 else s
    return s


def from_query_report(params: dict[str, str | list[str]]) -> tuple[RabitConfig, tuple[LinkIssue, ...]]:
    """Rebuild a config from a link, using every parameter that can be honoured.

    Each parameter that cannot (unknown name, catalog entry or value outside its domain) is left at
    its default and reported as a :class:`LinkIssue` naming it and why; a mistyped catalog name gets
    the nearest catalog name as a suggestion. Never raises for a bad link.
    """
    from core import catalog  # local: the catalogs are read only when a link is opened

    issues: list[LinkIssue] = []
    data: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for k, v in params.items():
        s = str(v[-1] if isinstance(v, (list, tuple)) and v else v if not isinstance(v, (list, tuple)) else "")
        if k in STREAMLIT_PARAMS:
            continue
        if k not in RabitConfig.model_fields:
            near = nearest(k, RabitConfig.model_fields)
            issues.append(LinkIssue(param=k, value=s, reason="not a RA-BIT setting"
                                    + (f" (did you mean {near}?)" if near else "")))
            continue
        if s == "":
            issues.append(LinkIssue(param=k, value=s, reason="empty value"))
            continue
        if k in _CATALOG_FIELDS:
            known = getattr(catalog, _CATALOG_FIELDS[k])()
            if s not in known:
                near = nearest(s, known)
                what = {"models": "model", "gpus": "GPU", "fabrics": "fabric"}[_CATALOG_FIELDS[k]]
                issues.append(LinkIssue(param=k, value=s, reason=f"unknown {what} '{s}'"
                                        + (f"; did you mean {near}?" if near else "")))
                continue
        try:
            data[k] = _decode_param(k, s)
            raw[k] = s
        except ValueError as exc:
            issues.append(LinkIssue(param=k, value=s, reason=f"could not be decoded: {exc}"))
    for _ in range(len(data) + 1):
        try:
            return RabitConfig.model_validate(data), tuple(issues)
        except ValidationError as exc:
            dropped = False
            for e in exc.errors():
                k = str(e["loc"][0]) if e["loc"] else ""
                if k in data:
                    sub = ".".join(str(x) for x in e["loc"][1:])
                    why = error_text(e)
                    issues.append(LinkIssue(param=k, value=raw[k], reason=f"{sub}: {why}" if sub else why))
                    inner = e["loc"][1] if len(e["loc"]) > 1 else None
                    if k == "assumptions" and isinstance(data[k], dict) and inner in data[k]:
                        del data[k][inner]  # the other assumptions of the link still apply
                    else:
                        del data[k]
                    dropped = True
            if not dropped:  # a rule across fields: drop nothing silently, use the defaults
                issues.append(LinkIssue(param="(link)", value="", reason=describe_validation_error(exc)))
                return DEFAULT, tuple(issues)
    return DEFAULT, tuple(issues)


def from_query(params: dict[str, str | list[str]]) -> RabitConfig:
    """Rebuild a config from query parameters, strictly: unknown keys are ignored, any bad value raises.

    Raises ``ValueError`` with the offending parameter named when a value is invalid. The app uses
    :func:`from_query_report`, which keeps the parameters it can use and reports the others.
    """
    cfg, issues = from_query_report({k: v for k, v in params.items() if k in RabitConfig.model_fields})
    if issues:
        i = issues[0]
        raise ValueError(f"query parameter '{i.param}' {i.reason}" if i.param in RabitConfig.model_fields
                         else i.reason)
    return cfg


def _int_literal(field: str) -> bool:
    """True for fields typed as a Literal of ints (pydantic will not coerce "3" to Literal[3])."""
    args = get_args(RabitConfig.model_fields[field].annotation)
    return bool(args) and all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def from_json(text: str | bytes) -> RabitConfig:
    """Load a config saved with ``model_dump_json``; raises ValueError naming the bad field."""
    try:
        return RabitConfig.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "config"
    return f"{loc}: {error_text(e)}"


def error_text(e: Any) -> str:
    """One pydantic error's message without pydantic's 'Value error, ' prefix."""
    return str(e["msg"]).removeprefix("Value error, ")
