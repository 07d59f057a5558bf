"""The one shared configuration: a frozen, hashable pydantic model.

It flows from the sidebar to every page and into every ``core`` call; Streamlit's
``st.cache_data`` keys on it. It round-trips through a URL query string
(:func:`to_query` / :func:`from_query`) and through a JSON file
(:meth:`RabitConfig.model_dump_json` / :func:`from_json`).

Field-level checks (positive sizes, enumerations) live in the model; checks that need
the catalogs (TP must divide heads, the model must fit at batch 1) live in
:func:`core.config.checks.problems`, which names the field each message belongs to.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar, Self, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from core.base import (
    CONFIG_DOMAINS,
    DAY_S,
    GROUP_DOMAINS,
    MAX_LINK_PARAM_CHARS,
    REGISTRY,
    Assumptions,
    GiB,
    choices,
    in_domain,
    inflate,
    kept,
    nearest,
    number_from_text,
    parse_json,
    validated_copy,
)
from core.catalog import ModelArch
from core.config.adapters import AdapterSet
from core.config.fleet import Fleet
from core.config.sessions import Sessions
from core.config.video import VideoRequest
from core.config.workload import DEFAULT_INPUT_TOKENS, DEFAULT_LENGTH_SPREAD, DEFAULT_OUTPUT_TOKENS, ServingLoad

# The choices and the format facts live in core.base.choices; re-exported here for the callers that import them
# from the config.
WEIGHT_BYTES = choices.WEIGHT_BYTES
KV_BYTES = choices.KV_BYTES
COMPUTE_PRECISION = choices.COMPUTE_PRECISION
WeightFormat = choices.WeightFormat
KvDtype = choices.KvDtype


class _Group(BaseModel):
    """A group of config fields; each numeric field lies in its domain ``<group>.<field>``
    (:data:`core.base.limits.GROUP_DOMAINS`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: the group's name in the config (the prefix of its fields' domains)
    _group: ClassVar[str] = ""

    def with_(self, **changes: Any) -> Self:
        """A validated copy with some fields changed."""
        return validated_copy(self, changes)

    @field_validator("*", mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: ValidationInfo) -> Any:
        path = f"{cls._group}.{info.field_name}"
        return in_domain(path, v) if path in GROUP_DOMAINS and not kept(cls, info) else v


class Workload(ServingLoad):
    """How requests arrive, how their lengths spread and how one replica schedules them.

    The arrival and scheduler fields (and their defaults) are :class:`core.config.workload.ServingLoad`'s, shared
    with the simulator's ``SimSpec``; the mean prompt and output lengths are the config's ``input_tokens`` /
    ``output_tokens``. :func:`core.serving.simulation.sim_spec` turns it into the simulator's ``SimSpec``.
    Times in seconds, lengths in tokens.
    """

    lengths: choices.LengthKind = "fixed"  # distribution of prompt and output lengths around their means
    spread: float = DEFAULT_LENGTH_SPREAD  # lognormal sigma, or uniform relative half-width
    # the serving engine sized for (core.catalog.engines: its documented defaults fill the scheduler fields when chosen
    # with `rabit simulate --engine`)
    engine: choices.Engine = "vllm"
    # CUDA graphs for iterations up to the engine's capture size (core.catalog.engines); False = eager mode
    # (vLLM --enforce-eager): every kernel launched from the host (core.physics.step)
    cuda_graphs: bool = True
    # the deployment: replicas behind a router (None: the config's GPUs / (TP x PP), RabitConfig.dp)
    replicas: int | None = None
    router: choices.RouterPolicy = "least-outstanding"


class Disagg(_Group):
    """A disaggregated deployment: ``prefill_instances`` prefill instances and ``decode_instances`` decode
    instances, each of its own GPU kind and TP (None: the config's ``gpu`` / ``tp``; PP is the config's), the KV
    cache of each prompt moved from the prefill to the decode instance (core.serving.kv_transfer), layer by layer
    overlapped with the prefill when ``overlap``. Off (``enabled`` False): every replica prefills and decodes."""

    _group: ClassVar[str] = "disagg"

    enabled: bool = False
    prefill_instances: int = 1
    prefill_tp: int | None = None
    prefill_gpu: str | None = None
    decode_instances: int = 1
    decode_tp: int | None = None
    decode_gpu: str | None = None
    overlap: bool = True


class Targets(_Group):
    """What a recommendation must meet, the hard constraints on it, and the price basis.

    Latency targets are p95 values [s]; ``None`` means no target on that metric.

    The defaults are a per-token service level, not an end-to-end one, so they suit any output length: TTFT
    2 s and 40 ms between tokens (25 tokens/s per user), MLPerf Inference's bounds for Llama-2-70B (Server
    scenario TTFT 2,000 ms; Interactive scenario TPOT 40 ms; both P99 in mlperf.conf). An end-to-end target
    grows with the output length (20 s is 4.9 ms a token at the default 4,096), so it is left for a user who
    has one.
    """

    _group: ClassVar[str] = "targets"

    p95_ttft_s: float | None = 2.0
    p95_itl_s: float | None = 0.04
    p95_e2e_s: float | None = None
    gpus_allowed: tuple[str, ...] = ()  # empty: the whole catalog
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    weights_allowed: tuple[choices.WeightFormat, ...] = Field(choices.SEARCH_WEIGHT_FORMATS, min_length=1)
    kv_allowed: tuple[choices.KvDtype, ...] = Field(choices.SEARCH_KV_DTYPES, min_length=1)
    providers: tuple[str, ...] = ()  # substrings of provider names; empty: all
    price_kind: choices.PriceKind = "on-demand"
    price_policy: choices.PricePolicy = "median"
    max_simulations: int = 16
    requests_per_simulation: int = 2000
    disagg: bool = True  # the search includes disaggregated prefill/decode layouts
    # training run
    deadline_days: float = 30.0
    train_gpus_allowed: tuple[str, ...] = ()  # empty: every priced kind

    @property
    def deadline_s(self) -> float:
        """The training run's deadline [s]."""
        return self.deadline_days * DAY_S


class TrainingRun(_Group):
    """How a training run is sized: to the deadline ``targets.deadline_days`` (the smallest GPU count, up to
    ``max_gpus``, that finishes in time) or on a GPU budget; whether the config's ZeRO stage, recomputation and
    micro-batch are pinned (otherwise searched); the checkpoint interval (None: Daly's optimum).

    The Training page's inputs and ``rabit train``'s flags (``--gpus``, ``--max-gpus``,
    ``--checkpoint-interval-s``) read these defaults; domains as the CLI flags' (core.base.limits.FLAG_DOMAINS).
    """

    _group: ClassVar[str] = "training"

    mode: choices.TrainMode = "deadline"
    budget_gpus: int | None = None  # None: the config's cluster (gpus_per_node x nodes)
    max_gpus: int = choices.TRAIN_SEARCH_LIMITS[-1]
    pin: bool = False
    checkpoint_interval_s: float | None = None


class WorkloadSpread(_Group):
    """How far the workload's means may be off (relative, each side): the next experiment moves the mean prompt
    length, output length and arrival rate across these ranges (``rabit next-experiment --prompt-spread``...)."""

    _group: ClassVar[str] = "experiment"

    prompt_spread_frac: float = choices.DEFAULT_WORKLOAD_SPREAD_FRAC
    output_spread_frac: float = choices.DEFAULT_WORKLOAD_SPREAD_FRAC
    rate_spread_frac: float = choices.DEFAULT_WORKLOAD_SPREAD_FRAC


class Predicted(_Group):
    """What the analysis predicted, for the Diagnostics page's divergence and prefix-cache rules (None: the open
    saved analysis's figure, or unknown). Where to read telemetry from (a file, a Prometheus server) is not
    part of a link: opening a link never makes the server fetch from an address written in it."""

    _group: ClassVar[str] = "predicted"

    p95_ttft_s: float | None = None
    p95_itl_s: float | None = None
    prefix_cache_frac: float | None = None


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
    # attention parallelism (serving): data-parallel attention over the TP group (each rank holds its own sequences'
    # KV; the MoE layers go expert-parallel), context parallelism (ring attention over ``cp`` TP groups for the
    # prefill, the KV of a sequence split over them), decode context parallelism (the KV split over ``dcp`` of the TP
    # ranks, a partial attention per rank and a combine); and a KV tier in host memory [GiB per replica]
    dp_attention: bool = False
    cp: int = Field(1, ge=1)
    dcp: int = Field(1, ge=1)
    kv_offload_gib: float = Field(0.0, ge=0.0)
    # workload
    phase: choices.Phase = "serve"
    batch: int = Field(32, ge=1)
    input_tokens: int = Field(DEFAULT_INPUT_TOKENS, ge=1)
    output_tokens: int = Field(DEFAULT_OUTPUT_TOKENS, ge=1)
    prefix_cache_frac: float = Field(0.0, ge=0.0, lt=1.0)
    weights: WeightFormat = "bf16"
    kv_dtype: KvDtype = "bf16"
    kv_alloc: choices.KvAlloc = "paged"
    block_size: int = Field(16, ge=1, le=1024)
    # speculative decoding
    spec_method: choices.SpecMethod = "none"
    spec_k: int = Field(4, ge=1, le=16)
    spec_alpha: float = Field(0.7, ge=0.0, le=1.0)
    draft_model: str = "llama-3.1-8b"
    # training
    train_precision: choices.TrainPrecision = "bf16"
    zero: choices.ZeroStage = 1
    micro_batch: int = Field(1, ge=1)
    seq_len: int = Field(4096, ge=1)
    recompute: choices.Recompute = "selective"
    attention_kernel: choices.AttentionKernel = "flash"
    sequence_parallel: bool = True
    # TP communication overlap (Megatron-LM --tp-comm-overlap, NeMo tp_comm_overlap: Transformer Engine userbuffers
    # split each TP GEMM and run its all-gather / reduce-scatter under the other chunks); off by default
    tp_comm_overlap: bool = False
    lora_rank: int = Field(0, ge=0)
    qlora: bool = False
    train_tokens: float = Field(1e12, gt=0)
    global_batch_tokens: int = Field(4 * 2**20, ge=1)
    # the simulated workload and what a recommendation must meet
    workload: Workload = Workload()
    targets: Targets = Targets()
    # how a training run is sized, and how far the workload's means may be off (the next experiment)
    training: TrainingRun = TrainingRun()
    experiment: WorkloadSpread = WorkloadSpread()
    predicted: Predicted = Predicted()
    # a video (or image) generation request (core.config.video)
    video: VideoRequest = VideoRequest()
    # low-rank adapters served over the base model (core.config.adapters; count 0: the base alone)
    adapters: AdapterSet = AdapterSet()
    # a fleet of serving workloads and the scenarios its plan must survive (core.config.fleet; the Fleet page)
    fleet: Fleet | None = None
    # multi-turn sessions (core.config.sessions; None: independent requests, the workload group's arrivals)
    sessions: Sessions | None = None
    # separate prefill and decode pools (off: aggregated replicas)
    disagg: Disagg = Disagg()
    # assumptions
    assumptions: Assumptions = Assumptions()

    @field_validator(*CONFIG_DOMAINS, mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: ValidationInfo) -> Any:
        """Every numeric field inside its one finite domain (core.base.limits, shared with the widgets and CLI)."""
        return v if kept(cls, info) else in_domain(str(info.field_name), v)

    @property
    def model_label(self) -> str:
        """The model's name in every output: an uploaded config.json's slug, else the catalog slug."""
        return self.custom_model.slug if self.custom_model is not None else self.model

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def dp(self) -> int:
        """Data-parallel degree (serving: replicas) = GPUs / (TP x PP x CP)."""
        return max(1, self.gpus // (self.tp * self.pp * self.cp))

    @property
    def replica_gpus(self) -> int:
        """GPUs of one replica (serving) or of one model copy (training): TP x PP x CP."""
        return self.tp * self.pp * self.cp

    @property
    def kv_offload_bytes(self) -> float:
        """The host-memory KV tier of one replica [B] (vLLM ``--kv-offloading-size``: summed over its ranks)."""
        return self.kv_offload_gib * GiB

    @property
    def replicas(self) -> int:
        """Replicas the deployment serves with: ``workload.replicas``, else GPUs / (TP x PP x CP)."""
        return self.workload.replicas if self.workload.replicas is not None else self.dp

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
        """A validated copy with some fields changed (the unchanged fields and groups, already valid, are kept as
        they are: :func:`core.base.validated_copy`)."""
        return validated_copy(self, changes)


DEFAULT = RabitConfig()


def default_lengths(
    max_context: int | None, input_tokens: int | None = None, output_tokens: int | None = None
) -> tuple[int, int]:
    """Prompt and output tokens for the lengths a user left unset (None), fitted to the model's context.

    The shared defaults (:data:`DEFAULT`: 4,096 + 4,096) where they fit; else, with both unset, the context split
    in halves (OPT-13B's 2,048: 1,024 + 1,024); a length the user gave is kept and the other takes the rest, at
    most its default (--input 1,500 on 2,048: 1,500 + 548). What the user gave is never changed: a given pair
    that does not fit is the config checks' to refuse, naming the flags."""
    d_in, d_out = DEFAULT.input_tokens, DEFAULT.output_tokens
    if input_tokens is not None and output_tokens is not None:
        return input_tokens, output_tokens
    ctx = max_context or d_in + d_out
    if input_tokens is None and output_tokens is None:
        if d_in + d_out <= ctx:
            return d_in, d_out
        half = max(1, ctx // 2)
        return half, max(1, ctx - half)
    if input_tokens is not None:
        return input_tokens, max(1, min(d_out, ctx - input_tokens))
    assert output_tokens is not None
    return max(1, min(d_in, ctx - output_tokens)), output_tokens


def training_goal_args(cfg: RabitConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`core.training.goal_from_inputs` that ``cfg.training`` describes: the
    deadline (``targets.deadline_days``) and search ceiling, or the GPU budget (None: the config's cluster)."""
    t = cfg.training
    deadline = t.mode == "deadline"
    return {
        "deadline_days": cfg.targets.deadline_days if deadline else None,
        "gpus": None if deadline else (t.budget_gpus or cfg.gpus),
        "max_gpus": t.max_gpus if deadline else choices.TRAIN_SEARCH_LIMITS[-1],
        "pin_sidebar": t.pin,
        "checkpoint_interval_min": t.checkpoint_interval_s / 60 if t.checkpoint_interval_s else None,
    }


#: Nested groups whose fields travel as their own ``group.field`` query parameters.
GROUPS: dict[str, type[BaseModel]] = {
    "workload": Workload,
    "targets": Targets,
    "training": TrainingRun,
    "experiment": WorkloadSpread,
    "predicted": Predicted,
    "video": VideoRequest,
    "adapters": AdapterSet,
    "disagg": Disagg,
}
#: Nested objects that travel as one compressed blob.
_BLOBS = ("custom_model", "assumptions", "fleet", "sessions")


def _flat(cfg: RabitConfig) -> dict[str, Any]:
    """The config as JSON values with the groups' fields under ``group.field`` keys."""
    out: dict[str, Any] = {}
    for k, v in cfg.model_dump(mode="json").items():
        if k in GROUPS:
            out.update({f"{k}.{f}": x for f, x in v.items()})
        else:
            out[k] = v
    return out


def _annotation(key: str) -> Any:
    group, _, name = key.rpartition(".")
    fields = GROUPS[group].model_fields if group else RabitConfig.model_fields
    return fields[name].annotation if name in fields else None


def differences(a: RabitConfig, b: RabitConfig) -> tuple[tuple[str, Any, Any], ...]:
    """The settings in which two configs differ, as (setting, a's value, b's value), in the names a link uses
    (``workload.rate_per_s``); each efficiency assumption by its own name (``assumptions.mbu``) and an uploaded
    model by its name, in the order of the config's fields."""
    fa, fb = _flat(a), _flat(b)
    out: list[tuple[str, Any, Any]] = []
    for k in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(k), fb.get(k)
        if k == "assumptions":
            for n in dict.fromkeys([*(va or {}), *(vb or {})]):
                if (va or {}).get(n) != (vb or {}).get(n):
                    out.append((f"assumptions.{n}", (va or {}).get(n), (vb or {}).get(n)))
        elif k == "custom_model":
            na, nb = (va or {}).get("name"), (vb or {}).get("name")
            if va != vb:
                out.append(("custom_model", na, nb))
        elif va != vb:
            out.append((k, va, vb))
    return tuple(out)


def to_query(cfg: RabitConfig) -> dict[str, str]:
    """The fields that differ from the defaults, as strings for a URL query.

    Group fields travel as ``workload.rate_per_s=20``; ``none`` stands for an unset optional value and a
    comma-separated list for a tuple. Nested objects (a custom model, changed assumptions) travel as
    compressed base64 JSON so a pasted link reproduces the view exactly.
    """
    out: dict[str, str] = {}
    base = _flat(DEFAULT)
    for k, v in _flat(cfg).items():
        if v == base.get(k):
            continue
        if k in _BLOBS:
            blob = zlib.compress(json.dumps(v, separators=(",", ":")).encode())
            out[k] = "z" + base64.urlsafe_b64encode(blob).decode().rstrip("=")
        elif v is None:
            out[k] = "none"
        elif isinstance(v, list):
            out[k] = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            out[k] = "1" if v else "0"
        else:
            out[k] = str(v)
    return out


#: Every setting a link may carry (for "did you mean" suggestions).
_SETTINGS = tuple(k for k in RabitConfig.model_fields if k not in GROUPS) + tuple(
    f"{g}.{f}" for g, model in GROUPS.items() for f in model.model_fields
)

#: Query parameters Streamlit itself reads (never RA-BIT settings, never reported).
STREAMLIT_PARAMS = frozenset({"embed", "embed_options"})
#: Fields that name a catalog entry, with the catalog they are checked against.
_CATALOG_FIELDS = {
    "model": "models",
    "draft_model": "models",
    "gpu": "gpus",
    "fabric": "fabrics",
    "disagg.prefill_gpu": "gpus",
    "disagg.decode_gpu": "gpus",
}


class LinkIssue(BaseModel):
    """One link parameter that was not used, and why (the rest of the link still applies)."""

    model_config = ConfigDict(frozen=True)

    param: str
    value: str
    reason: str

    def message(self) -> str:
        if self.param.startswith(_BLOBS) or not self.value:  # an encoded object: its name says it
            return f"link parameter {self.param} was not used: {self.reason}"
        shown = self.value if len(self.value) <= 40 else self.value[:37] + "..."
        return f"link parameter {self.param}={shown} was not used: {self.reason}"


def _decode_param(k: str, s: str) -> Any:
    """Decode one raw query value: an encoded object inflated within its limits, a number read as the number its
    field's domain takes (a whole number where an integer is meant), a list, ``none`` for an unset value."""
    if k in _BLOBS:
        return _decode_blob(s)
    ann = _annotation(k)
    if s == "none" and type(None) in get_args(ann):
        return None
    domain = _DOMAINS.get(k)
    if get_origin(ann) is tuple:  # a list; of numbers where its field has a domain (the adapters' ranks)
        items = tuple(x for x in s.split(",") if x)
        return tuple(number_from_text(x, domain.integer) for x in items) if domain is not None else items
    if _int_literal(k):
        return int(s) if s.lstrip("-").isdigit() and len(s) < 20 else s
    if domain is not None:
        return number_from_text(s, domain.integer)
    return s


#: The numeric settings a link carries, by parameter name: each read from its text as its domain's kind of number.
_DOMAINS = {**CONFIG_DOMAINS, **GROUP_DOMAINS}


def _decode_blob(s: str) -> dict[str, Any]:
    """An encoded object of a link (``z`` + base64 of zlib-compressed JSON, as :func:`to_query` writes it): the
    JSON object, or ``ValueError`` saying why not. Nothing is ignored: not a byte-order mark, a key given twice,
    bytes after the compressed stream, nor a value that is not an object (``null`` included)."""
    if not s.startswith("z"):
        raise ValueError("not an encoded object")
    if len(s) > MAX_LINK_PARAM_CHARS:
        raise ValueError(f"{len(s):,} characters; the limit is {MAX_LINK_PARAM_CHARS:,}")
    pad = "=" * (-len(s[1:]) % 4)
    try:
        blob = base64.urlsafe_b64decode(s[1:] + pad)
    except (ValueError, TypeError):
        raise ValueError("not base64") from None
    raw = inflate(blob)
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ValueError("the encoded object starts with a byte-order mark")
    value = parse_json(raw, what="the encoded object")
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__.replace("dict", "object").replace("list", "array")
        raise ValueError(f"the encoded value is {kind}, not an object")
    return value


def is_setting(key: str) -> bool:
    """True for a config field (``tp``) or a group's field (``workload.rate_per_s``)."""
    group, _, name = key.partition(".")
    if name:
        return group in GROUPS and name in GROUPS[group].model_fields
    return key in RabitConfig.model_fields and key not in GROUPS


def from_query_report(params: Mapping[str, str | list[str]]) -> tuple[RabitConfig, tuple[LinkIssue, ...]]:
    """Rebuild a config from a link, using every parameter that can be honoured.

    Each parameter that cannot (unknown name, catalog entry or value outside its domain) is left at
    its default and reported as a :class:`LinkIssue` naming it and why; a mistyped catalog name gets
    the nearest catalog name as a suggestion. Never raises for a bad link.
    """
    issues: list[LinkIssue] = []
    data, raw = _link_values(params, issues)
    for _ in range(len(raw) + 1):
        try:
            return RabitConfig.model_validate(data), tuple(issues)
        except ValidationError as exc:
            if not _drop_invalid(exc, data, raw, issues):  # a rule across fields: drop nothing silently, use defaults
                issues.append(LinkIssue(param="(link)", value="", reason=describe_validation_error(exc)))
                return DEFAULT, tuple(issues)
    return DEFAULT, tuple(issues)


def _param_issue(k: str, s: str) -> LinkIssue | None:
    """Why a link's parameter cannot be read at all: not a setting, empty, or a catalog name the catalog lacks."""
    from core import catalog  # local: the catalogs are read only when a link is opened

    if not is_setting(k):
        near = nearest(k, _SETTINGS)
        return LinkIssue(param=k, value=s, reason="not a RA-BIT setting" + (f" (did you mean {near}?)" if near else ""))
    if s == "":
        return LinkIssue(param=k, value=s, reason="empty value")
    if k in _CATALOG_FIELDS:
        known = getattr(catalog, _CATALOG_FIELDS[k])()
        if s not in known:
            near = nearest(s, known)
            what = {"models": "model", "gpus": "GPU", "fabrics": "fabric"}[_CATALOG_FIELDS[k]]
            return LinkIssue(
                param=k, value=s, reason=f"unknown {what} '{s}'" + (f" (did you mean {near}?)" if near else "")
            )
    return None


def _link_values(
    params: Mapping[str, str | list[str]], issues: list[LinkIssue]
) -> tuple[dict[str, Any], dict[str, str]]:
    """(the decoded values, a group's fields nested under it; each read parameter's text), the link's own
    parameters skipped and every one that cannot be read reported in ``issues``."""
    data: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for k, v in params.items():
        s = str(v[-1] if isinstance(v, (list, tuple)) and v else v if not isinstance(v, (list, tuple)) else "")
        if k in STREAMLIT_PARAMS:
            continue
        if (issue := _param_issue(k, s)) is not None:
            issues.append(issue)
            continue
        try:
            value = _decode_param(k, s)
            raw[k] = s
        except ValueError as exc:
            issues.append(LinkIssue(param=k, value=s, reason=f"could not be decoded: {exc}"))
            continue
        group, _, name = k.partition(".")
        if name:
            data.setdefault(group, {})[name] = value
        else:
            data[k] = value
    return data, raw


def _drop_invalid(exc: ValidationError, data: dict[str, Any], raw: dict[str, str], issues: list[LinkIssue]) -> bool:
    """Drop from ``data`` each link value the config refused, reporting why (a group's field alone, so the group's
    other fields still apply; one assumption alone); False when no error names a value of the link."""
    dropped = False
    for e in exc.errors():
        k = str(e["loc"][0]) if e["loc"] else ""
        inner_key = f"{k}.{e['loc'][1]}" if k in GROUPS and len(e["loc"]) > 1 else ""
        if inner_key in raw and str(e["loc"][1]) in data.get(k, {}):
            issues.append(LinkIssue(param=inner_key, value=raw[inner_key], reason=error_text(e)))
            del data[k][str(e["loc"][1])]  # the group's other fields of the link still apply
            dropped = True
        elif k in data and k in raw:
            _drop_top_level(e, k, data, raw, issues)
            dropped = True
    return dropped


def _drop_top_level(e: Any, k: str, data: dict[str, Any], raw: dict[str, str], issues: list[LinkIssue]) -> None:
    """Drop the top-level value ``k`` an error names (or only the one assumption it names), saying why: an
    assumption outside its bounds in the registry's words."""
    sub = ".".join(str(x) for x in e["loc"][1:])
    why = error_text(e)
    info = REGISTRY.get(sub) if k == "assumptions" else None
    if info is not None and isinstance(e.get("input"), (int, float)):
        why = (info.check(float(e["input"])) or why).removeprefix(f"{sub}=")
    inner = e["loc"][1] if len(e["loc"]) > 1 else None
    if k == "assumptions" and isinstance(data[k], dict) and inner in data[k]:
        issues.append(LinkIssue(param=f"{k}.{sub}", value="", reason=why))
        del data[k][inner]  # the other assumptions of the link still apply
    else:
        issues.append(LinkIssue(param=k, value=raw[k], reason=f"{sub}: {why}" if sub else why))
        del data[k]


def from_query(params: Mapping[str, str | list[str]]) -> RabitConfig:
    """Rebuild a config from query parameters, strictly: unknown keys are ignored, any bad value raises.

    Raises ``ValueError`` with the offending parameter named when a value is invalid. The app uses
    :func:`from_query_report`, which keeps the parameters it can use and reports the others.
    """
    cfg, issues = from_query_report({k: v for k, v in params.items() if is_setting(k)})
    if issues:
        i = issues[0]
        raise ValueError(f"query parameter '{i.param}' {i.reason}" if is_setting(i.param) else i.reason)
    return cfg


def _int_literal(field: str) -> bool:
    """True for fields typed as a Literal of ints (pydantic will not coerce "3" to Literal[3])."""
    args = get_args(_annotation(field))
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
