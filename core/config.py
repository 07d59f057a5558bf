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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.assumptions import Assumptions
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

    def with_(self, **changes: Any) -> "RabitConfig":
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


def from_query(params: dict[str, str | list[str]]) -> RabitConfig:
    """Rebuild a config from query parameters; unknown keys are ignored.

    Raises ``ValueError`` with the offending parameter named when a value is invalid.
    """
    data: dict[str, Any] = {}
    for k, v in params.items():
        if k not in RabitConfig.model_fields:
            continue
        s = v[-1] if isinstance(v, list) else v
        if k in ("custom_model", "assumptions"):
            if not s.startswith("z"):
                raise ValueError(f"query parameter '{k}' is not an encoded object")
            pad = "=" * (-len(s[1:]) % 4)
            try:
                data[k] = json.loads(zlib.decompress(base64.urlsafe_b64decode(s[1:] + pad)))
            except Exception as exc:  # noqa: BLE001 - any decoding failure is the user's link
                raise ValueError(f"query parameter '{k}' could not be decoded: {exc}") from None
        elif _int_literal(k):
            data[k] = int(s) if s.lstrip("-").isdigit() else s
        else:
            data[k] = s
    try:
        return RabitConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc)) from None


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
    return f"{loc}: {e['msg']}"
