"""Every numeric domain and work budget, defined once, each with its reason (payload limits: core.base.payloads).

RA-BIT runs as one shared server that anyone can send a link, a sidebar value or a file to.
Whatever arrives is checked here before it is parsed or computed on:

* :data:`CONFIG_DOMAINS`: the finite range of every numeric field of :class:`core.config.RabitConfig`.
  The config's validator, the sidebar widgets and the CLI read the same entry, so a value one accepts
  the others accept too.
* :data:`ARCH_DOMAINS`: the range of every size of a :class:`core.catalog.arch.ModelArch` (a config.json).
* :data:`MEASUREMENT_DOMAINS`, :data:`RUN_LOAD_DOMAINS`, :data:`TELEMETRY_TIME_DOMAIN`: what a measured run or a
  telemetry sample may report. Every domain's type is part of it (:func:`type_problem`): no text, boolean or, for
  a count, decimal number stands in for a number, whichever way it came in.
* :class:`WorkBudget`: the events and wall time one simulation, or one search (:func:`search_budget`,
  :func:`next_budget`), may use before it stops with :class:`BudgetExceeded`, a ``ValueError`` whose
  message says what to change.

Pure: no Streamlit, no global mutable state.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from core.base import choices
from core.base.payloads import MAX_JSON_NUMBER_CHARS
from core.base.payloads import shown_value as _shown

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

# --- numeric domains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """A closed range ``[lo, hi]`` (or a set of ``choices``) and why it ends where it does."""

    lo: float
    hi: float
    reason: str
    integer: bool = True
    choices: tuple[int, ...] = ()
    #: the widget's step (None: 1 for integers)
    step: float | None = None

    def problem(self, value: Any) -> str | None:
        """None when ``value`` is inside the domain, else what is wrong (for a message).

        The type is part of the domain: a boolean or a text is never a number, and an integer domain takes no
        number written with a decimal point (``1e10`` or ``32.0`` from a file), so every way in refuses the same.
        """
        p = type_problem(value, self.integer)
        if p is not None:
            return p
        if self.choices:
            if value not in self.choices:
                return f"{_num(value)} is not one of {', '.join(map(str, self.choices))} ({self.reason})"
            return None
        if value < self.lo:
            return f"{_num(value)} is below the minimum {_num(self.lo)}"
        if value > self.hi:
            return f"{_num(value)} is above the maximum {_num(self.hi)} ({self.reason})"
        return None

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` or raise ``ValueError`` naming ``name``."""
        p = self.problem(value)
        if p is not None:
            raise ValueError(f"{name}: {p}")
        return value


def type_problem(value: Any, integer: bool = False) -> str | None:
    """None when ``value`` is a finite number of the right kind (an integer where ``integer``), else why not."""
    t = type(value)  # the common cases first: an exact int, or a finite float where decimals are allowed
    if t is int or (t is float and not integer and math.isfinite(value)):
        return None
    if isinstance(value, bool):
        return f"{str(value).lower()} is not a number"
    if isinstance(value, str):
        return f"{_shown(value)} is text, not a number"
    if not isinstance(value, (numbers.Integral, float)):
        return f"{_shown(value)} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if integer and not isinstance(value, numbers.Integral):
        return f"{value!r} is not a whole number (write it without a decimal point or exponent)"
    return None


def checked(value: Any, problem: str | None) -> Any:
    """A field validator's body: ``value`` when ``problem`` is None, else ``ValueError(problem)`` (pydantic names the
    field). ``checked(v, type_problem(v))``."""
    if problem is not None:
        raise ValueError(problem)
    return value


def _num(x: float) -> str:
    if isinstance(x, numbers.Integral) and abs(int(x)) >= 10**15:
        x = int(x)
        return f"a {len(str(abs(x))) if x.bit_length() < 14_000 else 'many'}-digit number"
    if isinstance(x, numbers.Integral) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.6g}"


#: vLLM's paged-attention kernels take these block sizes (docs.vllm.ai, engine args ``--block-size``).
BLOCK_SIZES = choices.BLOCK_SIZES  # defined once, with the other choices

#: The numeric fields of the shared config. Lower bounds are the physical minimum; upper bounds are
#: beyond any deployment in the catalogs yet finite, so no input can make the server loop or overflow.
CONFIG_DOMAINS: dict[str, Domain] = {
    "gpus_per_node": Domain(1, 72, "the largest scale-up domain in the catalog is a 72-GPU NVL72 rack"),
    "nodes": Domain(1, 8192, "8,192 nodes of 8 is 65,536 GPUs, beyond the largest published training clusters"),
    "tp": Domain(1, 512, "tensor parallelism splits attention heads; no catalog model has more than 128"),
    "pp": Domain(1, 512, "pipeline stages split layers; no catalog model has more than 128"),
    "ep": Domain(1, 512, "expert parallelism splits experts; the catalog's largest MoE has 256 routed experts"),
    "cp": Domain(
        1, 256, "context parallelism splits a sequence; 256 ranks of a 1M-token prompt hold 4,096 tokens each"
    ),
    "dcp": Domain(1, 512, "decode context parallelism reuses the TP ranks, so it is at most the TP degree"),
    "kv_offload_gib": Domain(
        0.0, 65_536.0, "host memory per replica; 64 TiB is beyond any server's DRAM", integer=False, step=64.0
    ),
    "batch": Domain(
        1, 100_000, "vLLM's default max_num_seqs is 256; 100,000 concurrent sequences is far beyond any one replica"
    ),
    "input_tokens": Domain(
        1, 10_485_760, "the longest context in the catalogs is Llama 4 Scout's 10,485,760 tokens (10 x 2^20)"
    ),
    "output_tokens": Domain(
        1, 10_485_760, "the longest context in the catalogs is Llama 4 Scout's 10,485,760 tokens (10 x 2^20)"
    ),
    "prefix_cache_frac": Domain(
        0.0, 0.99, "a share of the prompt; at least one token per request is computed", integer=False, step=0.01
    ),
    "block_size": Domain(8, 256, "the block sizes vLLM's paged-attention kernels take", choices=BLOCK_SIZES),
    "spec_k": Domain(1, 16, "speculative decoding gains nothing beyond 16 draft tokens at any acceptance rate"),
    "spec_alpha": Domain(0.0, 1.0, "an acceptance rate is a probability", integer=False, step=0.05),
    "micro_batch": Domain(1, 1024, "micro-batches beyond 1,024 sequences never fit one GPU's activations"),
    "seq_len": Domain(1, 1_048_576, "2^20 tokens, beyond every published training sequence length"),
    "lora_rank": Domain(0, 4096, "a LoRA rank above 4,096 is no longer low-rank for any catalog model"),
    "train_tokens": Domain(
        1e6, 1e15, "from a small fine-tune (1M tokens) to 1,000x the 15T tokens of Llama 3", integer=False
    ),
    "global_batch_tokens": Domain(1, 2**30, "2^30 tokens, 64x the 16M-token batches of Llama 3 405B"),
}

#: The numeric fields of the shared config's ``video`` group (:class:`core.config.VideoRequest`), shared with the
#: Video generation page's inputs and ``rabit video``'s flags (FLAG_DOMAINS["video.<flag>"]).
VIDEO_DOMAINS: dict[str, Domain] = {
    "height": Domain(16, 4096, "4K frames; the catalog's models are trained at 480-1024 pixels"),
    "width": Domain(16, 4096, "4K frames; the catalog's models are trained at 720-1360 pixels"),
    "frames": Domain(1, 2049, "about 85 s at 24 fps, 16x the longest default clip in the catalog (129 frames)"),
    "seconds": Domain(0.01, 120.0, "two minutes of video; the catalog's clips are 5-6 s", integer=False, step=0.5),
    "fps": Domain(1.0, 120.0, "frame rates from 1 to 120 per second", integer=False, step=1.0),
    "steps": Domain(1, 1000, "samplers run 1-100 steps; 1,000 is the training schedule's length"),
    "batch": Domain(1, 64, "videos stepping together on one replica; 64 clips of 75,600 tokens is 4.8M tokens"),
    "gpus": Domain(
        1, 256, "GPUs sharing one request (sequence x guidance parallel); beyond 256 each holds a few tokens"
    ),
    "replicas": Domain(1, 10_000, "replicas of the request's GPUs; 10,000 is beyond any video fleet published"),
    "rate_per_hour": Domain(1e-3, 1e6, "from one video in 40 days to a million per hour", integer=False),
    "p95_target_s": Domain(1e-3, 1e6, "a latency target from a millisecond to 11 days", integer=False),
    "num_videos": Domain(20, 20_000, "p95 needs 20 videos; 20,000 simulate in about a second"),
    "seed": Domain(0, 2**32 - 1, "NumPy seeds a generator from an unsigned 32-bit integer"),
}

#: The numeric fields of a fleet description (:class:`core.config.Fleet`: its workloads, scenarios, sites,
#: availability and plan settings), shared with the Fleet page's tables and ``rabit fleet``'s file check. A field
#: that is also a config field (a rate, a length, a p95 target) takes that field's domain.
FLEET_DOMAINS: dict[str, Domain] = {
    "peak_factor": Domain(
        1.0, 100.0, "a peak hour 100x the mean is beyond any published diurnal profile", integer=False
    ),
    "hourly_rate": Domain(
        0.0, 1e6, "a relative rate of an hour; only the ratio of the peak to the mean is used", integer=False
    ),
    "priority": Domain(
        1, 10, "1 is served first when the constraints cannot hold every workload; 10 levels are plenty"
    ),
    "adapters": Domain(0, 100_000, "LoRA adapters over one base: 100,000 is beyond any published multi-LoRA serving"),
    "factor": Domain(0.01, 100.0, "a scenario scales a rate, a length or a price by 1/100 to 100x", integer=False),
    "gpu_count": Domain(0, 65_536, "as targets.max_gpus: 0 withdraws the kind"),
    "pue": Domain(
        1.0, 3.0, "PUE is facility over IT power: at least 1; the industry average is 1.56-1.58", integer=False
    ),
    "power_budget_kw": Domain(1e-3, 1e7, "from a watt to 10 GW, beyond any announced campus", integer=False),
    "failure_rate_per_gpu_hour": Domain(
        0.0, 0.1, "one failure per GPU every 10 hours is 1,000x the large-cluster figures", integer=False
    ),
    "repair_hours": Domain(0.0, 8760.0, "a repair longer than a year is a replacement", integer=False),
}
#: Most workloads and scenarios one fleet description holds: 500 x 20 scenarios x 15 GPU kinds is 150,000
#: optimizer runs, hours on a cluster; a larger study is split into several files.
MAX_FLEET_WORKLOADS = 500
MAX_FLEET_SCENARIOS = 20

#: The numeric fields of the config's groups (``group.field``) and of the simulator's workload
#: (:class:`core.config.SimSpec` shares the ``workload`` fields). The group's validator, the page widgets and
#: the CLI flags read the same entry. An optional field (``None``: unset) is checked only when set; a widget
#: that shows 0 for "none" starts at 0.
GROUP_DOMAINS: dict[str, Domain] = {
    **{f"video.{field}": d for field, d in VIDEO_DOMAINS.items()},
    "workload.rate_per_s": Domain(
        1e-6, 1e6, "from one request in 11 days to a million requests per second", integer=False, step=0.5
    ),
    "workload.users": Domain(1, 100_000, "as the batch: 100,000 concurrent users is far beyond one replica"),
    "workload.think_s": Domain(0.0, 86_400.0, "a think time beyond a day is not a serving workload", integer=False),
    "workload.num_requests": Domain(
        1, 5_000_000, "5 million requests simulate in about a minute; more is a batch job", step=100
    ),
    "workload.duration_s": Domain(1e-3, 1e8, "from a millisecond to three years of arrivals", integer=False),
    "workload.spread": Domain(
        0.0, 3.0, "a lognormal sigma above 3 is not a usable length distribution", integer=False, step=0.1
    ),
    "workload.token_budget": Domain(
        1, 10_000_000, "at most the longest context in the catalogs per iteration", step=512
    ),
    "workload.max_batch": Domain(1, 100_000, "as the batch", step=16),
    "workload.timeout_s": Domain(1e-3, 1e8, "from a millisecond to three years", integer=False),
    "workload.kv_pool_tokens": Domain(1, 10**12, "a trillion tokens of KV cache is beyond any cluster's HBM"),
    "workload.replicas": Domain(1, 4096, "4,096 replicas is beyond any published serving deployment of one model"),
    "workload.prefix_cache_frac": Domain(
        0.0, 0.99, "a share of the prompt; at least one token per request is computed", integer=False, step=0.05
    ),
    "workload.prefix_groups": Domain(
        1, 1_000_000, "distinct shared prefixes (system prompts, documents); a million is one per request", step=1
    ),
    "disagg.prefill_instances": Domain(1, 1024, "1,024 prefill instances is beyond any published P:D deployment"),
    "disagg.decode_instances": Domain(1, 1024, "1,024 decode instances is beyond any published P:D deployment"),
    "disagg.prefill_tp": Domain(1, 512, "as tp"),
    "disagg.decode_tp": Domain(1, 512, "as tp"),
    "workload.seed": Domain(
        0, 2**32 - 1, "NumPy seeds a generator from an unsigned 32-bit integer or more; negative seeds are refused"
    ),
    "targets.p95_ttft_s": Domain(1e-6, 1e6, "a latency target from a microsecond to 11 days", integer=False),
    "targets.p95_itl_s": Domain(1e-6, 1e6, "a latency target from a microsecond to 11 days", integer=False),
    "targets.p95_e2e_s": Domain(1e-6, 1e6, "a latency target from a microsecond to 11 days", integer=False),
    "targets.max_gpus": Domain(
        1, 65_536, "72 x 8,192 nodes is the largest cluster a config describes; 65,536 GPUs is beyond it"
    ),
    "targets.max_usd_per_hour": Domain(
        1e-6, 1e9, "a budget from a micro-dollar to a billion dollars per hour", integer=False
    ),
    "targets.max_simulations": Domain(1, 64, "the optimizer simulates at most 64 finalists"),
    "targets.requests_per_simulation": Domain(
        1, 5_000_000, "5 million requests simulate in about a minute; more is a batch job"
    ),
    "targets.deadline_days": Domain(
        1e-3, 3650.0, "from about a minute and a half to ten years", integer=False, step=1.0
    ),
    "training.budget_gpus": Domain(
        1,
        65_536,
        "72 x 8,192 nodes is the largest cluster a config describes; 65,536 GPUs is "
        "beyond the largest published training clusters",
    ),
    "training.max_gpus": Domain(
        1, choices.TRAIN_SEARCH_LIMITS[-1], "the training deadline search stops at 32,768 GPUs"
    ),
    "training.checkpoint_interval_s": Domain(
        1.0, 1e7, "from a second to four months between checkpoints", integer=False, step=300.0
    ),
    **{
        f"experiment.{name}_spread_frac": Domain(
            0.0,
            0.99,
            "a relative spread each side of the mean; at 100 % the mean could be zero",
            integer=False,
            step=0.05,
        )
        for name in ("prompt", "output", "rate")
    },
    "adapters.count": Domain(
        0, 10_000, "S-LoRA serves 2,000 adapters on one GPU; 10,000 is five times the most published", step=10
    ),
    "adapters.ranks": Domain(1, 4096, "a LoRA rank above 4,096 is no longer low-rank for any catalog model"),
    "adapters.skew": Domain(
        0.0, 5.0, "a Zipf exponent; at 5 the hottest adapter takes 96 % of the traffic", integer=False, step=0.1
    ),
    "adapters.max_loras": Domain(1, 4096, "GPU slots for adapters; beyond 4,096 the slots outweigh any KV cache"),
    "adapters.max_lora_rank": Domain(1, 4096, "as an adapter's rank"),
    "adapters.max_cpu_loras": Domain(1, 100_000, "adapters held in host memory; 100,000 is ten times the most served"),
    "predicted.p95_ttft_s": Domain(1e-6, 1e6, "a latency from a microsecond to 11 days", integer=False),
    "predicted.p95_itl_s": Domain(1e-6, 1e6, "a latency from a microsecond to 11 days", integer=False),
    "predicted.prefix_cache_frac": CONFIG_DOMAINS["prefix_cache_frac"],
}


def group_domain(path: str) -> Domain:
    """The one domain of a group's field (``"workload.rate_per_s"``) or of a top-level config field (``"tp"``)."""
    return GROUP_DOMAINS[path] if "." in path else CONFIG_DOMAINS[path]


#: The validation context key under which :func:`validated_copy` names the fields it keeps.
_KEPT = "kept_fields"


def validated_copy(model: M, changes: Mapping[str, Any]) -> M:
    """A validated copy of the frozen pydantic ``model`` with ``changes``.

    The changed fields go through every validator and the model's cross-field checks run as on construction;
    the fields kept as they are were validated when ``model`` was, so the per-field domain checks skip them
    (:func:`kept`): a search's copies that move one field no longer re-check forty. Nested groups are handed
    over as the instances they are (pydantic does not re-validate an instance)."""
    cls = type(model)
    keep = frozenset(cls.model_fields).difference(changes)
    return cls.model_validate({**model.__dict__, **changes}, context={_KEPT: (cls, keep)})


def kept(cls: type, info: Any) -> bool:
    """Whether a field validator of ``cls`` (``info``: its ``ValidationInfo``) sees a value :func:`validated_copy`
    kept from an already validated instance of the same class."""
    ctx = info.context
    if not ctx or _KEPT not in ctx:
        return False
    owner, names = ctx[_KEPT]
    return owner is cls and info.field_name in names


def in_domain(path: str, v: Any) -> Any:
    """A field validator's body: ``v`` inside the domain of ``path`` (type included: no text, boolean or, for an
    integer domain, decimal number), else ``ValueError`` saying what is wrong. None (an unset optional field)
    passes. Text from a link is turned into a number by the link's parser first (core.config.settings)."""
    if v is None:
        return v
    d = group_domain(path)
    p = d.problem(v)
    if p is not None:
        raise ValueError(p)
    return int(v) if d.integer else v


def number_from_text(text: str, integer: bool) -> int | float:
    """A number typed as text (a link parameter, a CSV cell): ``ValueError`` saying why it is not one.

    Text has no type of its own, so a whole number may be written ``4096``, ``4096.0`` or ``4.096e3`` where an
    integer is meant; anything else is refused. Finiteness and range are the domain's (:meth:`Domain.problem`).
    """
    s = text.strip()
    if len(s) > MAX_JSON_NUMBER_CHARS:
        raise ValueError(f"a number of {len(s):,} characters is out of range")
    if integer and _INT_TEXT.fullmatch(s):
        return int(s)
    try:
        x = float(s)
    except ValueError:
        raise ValueError(f"{_shown(s)} is not a number") from None
    if integer:
        if not math.isfinite(x) or not x.is_integer():
            raise ValueError(f"{_shown(s)} is not a whole number")
        return int(x)
    return x


_INT_TEXT = re.compile(r"[+-]?[0-9]+")


#: Inputs of the Diagnostics page's Prometheus query (connectors.prometheus.query_range checks them too).
QUERY_DOMAINS: dict[str, Domain] = {
    "since_min": Domain(1, 7 * 24 * 60, "a week of history at the query's step stays within the answer's size"),
    "timeout_s": Domain(1, 60, "a page waits at most a minute for a server"),
}

#: Sizes read from a config.json (:class:`core.catalog.arch.ModelArch`): finite, about 50x beyond the largest
#: published model, so the layout checks and parameter counts stay cheap and exact.
ARCH_DOMAINS: dict[str, Domain] = {
    "hidden_size": Domain(1, 1_048_576, "2^20, 40x the widest published model (PaLM 540B: 18,432)"),
    "num_layers": Domain(1, 10_000, "100x the deepest published decoder (GPT-3 and PaLM: 96-118)"),
    "num_heads": Domain(1, 65_536, "2^16, 500x the most attention heads published (128)"),
    "num_kv_heads": Domain(1, 65_536, "at most the number of attention heads"),
    "head_dim": Domain(1, 65_536, "2^16, 100x the widest published head (256-576)"),
    "intermediate_size": Domain(0, 16_777_216, "2^24, 200x the widest published MLP (PaLM 540B: 73,728)"),
    "vocab_size": Domain(1, 16_777_216, "2^24, 64x the largest published vocabulary (Gemma 3: 262,144)"),
    "max_context": Domain(1, 134_217_728, "2^27, 13x the longest published context (Llama 4 Scout: 10M)"),
    "num_experts": Domain(0, 65_536, "2^16, 256x the most routed experts published (DeepSeek-V3: 256)"),
    "experts_per_tok": Domain(0, 65_536, "at most the number of experts"),
    "moe_intermediate_size": Domain(0, 16_777_216, "as intermediate_size"),
    "num_shared_experts": Domain(0, 65_536, "at most 2^16 experts"),
    "shared_intermediate_size": Domain(0, 16_777_216, "as intermediate_size"),
    "first_dense_layers": Domain(0, 10_000, "at most the number of layers"),
    "q_lora_rank": Domain(0, 1_048_576, "at most 2^20 (hidden_size)"),
    "kv_lora_rank": Domain(0, 1_048_576, "at most 2^20 (hidden_size)"),
    "qk_nope_head_dim": Domain(0, 65_536, "as head_dim"),
    "qk_rope_head_dim": Domain(0, 65_536, "as head_dim"),
    "v_head_dim": Domain(0, 65_536, "as head_dim"),
    "sliding_window": Domain(0, 134_217_728, "as max_context"),
    "sliding_layers": Domain(0, 10_000, "at most the number of layers"),
    "learned_pos_embeddings": Domain(0, 134_217_728, "as max_context"),
    "num_mamba_layers": Domain(0, 10_000, "at most the number of layers"),
    "ssm_layers": Domain(0, 10_000, "at most the number of layers"),
    "ssm_mixer_params": Domain(0, 10**13, "a state-space mixer is a fraction of a layer (Jamba: 105M)"),
    "ssm_d_inner": Domain(0, 16_777_216, "as intermediate_size (Jamba: 2 x 4,096)"),
    "ssm_d_conv": Domain(0, 1024, "a causal convolution of at most 1,024 taps (Mamba and Jamba: 4)"),
    "ssm_d_state": Domain(0, 65_536, "as head_dim (Mamba and Jamba: 16)"),
}


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in ascending order, in O(sqrt n) (never a loop over ``range(n)``)."""
    if n < 1:
        return []
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The catalog name closest to a mistyped ``name`` (difflib), or None when nothing is close."""
    got = difflib.get_close_matches(str(name).lower(), list(known), n=1, cutoff=0.5)
    return got[0] if got else None


# --- measured values and stored text ------------------------------------------------------------------

#: What one measured run may report, by metric (core.operations.runs.METRICS): finite, positive and within what
#: any deployment measures, so a calibration's log-ratios and their spread stay finite.
MEASUREMENT_DOMAINS: dict[str, Domain] = {
    **{
        f"{m}_s.{q}": Domain(1e-6, 1e6, "a latency from a microsecond to 11 days", integer=False)
        for m in ("ttft", "itl", "e2e")
        for q in ("p50", "p99")
    },
    "throughput_tokens_per_s": Domain(
        1e-6, 1e9, "a billion tokens per second is beyond any one deployment", integer=False
    ),
    "step_s": Domain(1e-6, 1e7, "a training step from a microsecond to four months", integer=False),
    # a rate-search result: the highest Poisson rate that met the limits, in the workload rate's own domain
    "max_rate_per_s": GROUP_DOMAINS["workload.rate_per_s"],
    "mfu": Domain(1e-6, 1.0, "model FLOPs utilisation is a share of the peak", integer=False),
}
#: How a measured run was driven (a benchmark's request rate, concurrency and number of requests).
RUN_LOAD_DOMAINS: dict[str, Domain] = {
    "rate_per_s": GROUP_DOMAINS["workload.rate_per_s"],
    "concurrency": Domain(1, 100_000, "as the batch: 100,000 concurrent requests is far beyond one deployment"),
    "num_requests": Domain(1, 10**9, "a billion requests is beyond any benchmark run"),
}
#: One telemetry sample's value: finite and below 10^30 in size (no server exposes a larger counter), so a sum
#: over every sample of a file stays finite.
TELEMETRY_MAX_ABS = 1e30
#: A telemetry time stamp [s]: since the series started, or since 1970 (1.7e9 today); 1e11 s is the year 5138,
#: so milliseconds since 1970 (1.7e12) are refused rather than read as seconds.
TELEMETRY_TIME_DOMAIN = Domain(0.0, 1e11, "seconds, since the series started or since 1970", integer=False)

# --- work budgets ------------------------------------------------------------------------------------

#: One simulation on the shared server: 200,000 requests of typical lengths take about 5 s; a run that
#: needs more than 20 s holds a server thread too long.
SIM_MAX_WALL_S = 20.0
#: Engine loop passes (an iteration, a run of decode iterations, an idle gap or an arrival batch).
#: 200,000 requests need about 2 million.
SIM_MAX_EVENTS = 50_000_000
#: The simulated clock: a run that reaches a billion seconds (32 years) of simulated time has a step
#: time or arrival gap out of any meaningful range.
SIM_MAX_CLOCK_S = 1e9


class BudgetExceeded(ValueError):
    """A computation stopped because it used up its work budget (the message says what to change)."""


#: One optimizer search on the shared server (serving: the closed-form screen of every configuration and at
#: most 64 simulations; training: the deadline search of each GPU kind). The whole catalog for a 70B model
#: takes about 1 s cold with 16 simulations; 64 simulations of 50,000 requests take about a minute.
SEARCH_MAX_WALL_S = 60.0
#: Configurations one optimizer search may screen or simulate: the whole catalog is about 600 per model
#: and precision set (588 for Llama-3.1-70B), the simulations at most 64.
SEARCH_MAX_EVALUATIONS = 20_000
#: The next-experiment search: the optimizer re-run at every point of every uncertain input (156 re-runs,
#: 8-10 s on two idle cores, for the default scenario; up to about 400 at five points per side).
NEXT_MAX_WALL_S = 120.0
#: Screens and simulations over all of its re-runs (shared screens and simulations are counted once).
NEXT_MAX_EVALUATIONS = 200_000


@dataclass
class WorkBudget:
    """Events and wall time one computation may use; :meth:`check` raises :class:`BudgetExceeded`.

    Checked every few thousand events so the hot loop pays almost nothing. ``progress`` (optional) is
    called with the events done so far at each check. A search counts its evaluations with :meth:`tick`
    and gives each simulation inside it a :meth:`child` budget that ends no later than its own, so the
    whole search, not only each simulation, stops on time.
    """

    max_events: int = SIM_MAX_EVENTS
    max_wall_s: float = SIM_MAX_WALL_S
    max_clock_s: float = SIM_MAX_CLOCK_S
    what: str = "the simulation"
    progress: Callable[[int, float], None] | None = None
    started: float = field(default_factory=time.monotonic)
    #: what one event is, in the message ("events", "evaluations")
    unit: str = "events"
    #: what to change, in the message, when the events or the wall time run out
    events_hint: str = "simulate fewer requests"
    wall_hint: str = "simulate fewer requests or a faster configuration"
    #: the budget this one is part of (a simulation inside a search): its wall time is checked too
    parent: WorkBudget | None = None
    #: events counted by :meth:`tick`
    spent: int = 0

    def left_s(self) -> float:
        """Wall time left [s] (negative once over)."""
        return self.max_wall_s - (time.monotonic() - self.started)

    def _wall_error(self) -> BudgetExceeded:
        spent = time.monotonic() - self.started
        return BudgetExceeded(
            f"{self.what} stopped after {spent:.0f} s (the limit is {self.max_wall_s:.0f} s); {self.wall_hint}"
        )

    def _check_wall(self) -> None:
        if self.parent is not None:
            self.parent._check_wall()
        if time.monotonic() - self.started > self.max_wall_s:
            # a simulation cut short by the search's time left says so in the search's words
            cut = self.parent is not None and self.max_wall_s < SIM_MAX_WALL_S
            raise self.parent._wall_error() if cut and self.parent is not None else self._wall_error()

    def check(self, events: int, clock_s: float = 0.0) -> None:
        if not clock_s <= self.max_clock_s:
            raise BudgetExceeded(
                f"{self.what} stopped: its clock passed {self.max_clock_s:.0e} s of simulated time, so a step time "
                "or arrival gap is out of range (check the per-iteration overhead and the arrival rate)"
            )
        if events > self.max_events:
            raise BudgetExceeded(
                f"{self.what} stopped after {events:,} {self.unit} (the limit is {self.max_events:,}); "
                f"{self.events_hint}"
            )
        self._check_wall()
        if self.progress is not None:
            self.progress(events, clock_s)

    def tick(self, n: int = 1) -> None:
        """Count ``n`` evaluations and check the budget."""
        self.spent += n
        self.check(self.spent)

    def child(self, what: str = "the simulation") -> WorkBudget:
        """A simulation's budget inside this one: the usual per-simulation limits, cut to the time left here."""
        return WorkBudget(max_wall_s=max(0.0, min(SIM_MAX_WALL_S, self.left_s())), what=what, parent=self)


def search_budget(max_wall_s: float | None = None, max_evaluations: int | None = None) -> WorkBudget:
    """The work budget of one optimizer search (serving or training); None: :data:`SEARCH_MAX_WALL_S`,
    :data:`SEARCH_MAX_EVALUATIONS` (read at the call)."""
    return WorkBudget(
        max_events=SEARCH_MAX_EVALUATIONS if max_evaluations is None else max_evaluations,
        max_wall_s=SEARCH_MAX_WALL_S if max_wall_s is None else max_wall_s,
        what="the optimizer search",
        unit="evaluations",
        events_hint="allow fewer GPU kinds or precisions",
        wall_hint="allow fewer GPU kinds, fewer simulations or fewer requests per simulation",
    )


def next_budget(max_wall_s: float | None = None, max_evaluations: int | None = None) -> WorkBudget:
    """The work budget of one next-experiment search (all of its optimizer re-runs together); None:
    :data:`NEXT_MAX_WALL_S`, :data:`NEXT_MAX_EVALUATIONS` (read at the call)."""
    return WorkBudget(
        max_events=NEXT_MAX_EVALUATIONS if max_evaluations is None else max_evaluations,
        max_wall_s=NEXT_MAX_WALL_S if max_wall_s is None else max_wall_s,
        what="the next-experiment search",
        unit="evaluations",
        events_hint="allow fewer GPU kinds or fewer points per side",
        wall_hint="allow fewer GPU kinds, fewer points per side or fewer simulations",
    )


# --- command-line flags ------------------------------------------------------------------------------

#: CLI flag (argparse ``dest``) -> the config field whose domain it shares.
FLAG_FIELDS: dict[str, str] = {
    "batch": "batch",
    "input": "input_tokens",
    "output": "output_tokens",
    "block_size": "block_size",
    "prefix_cache": "prefix_cache_frac",
    "tp": "tp",
    "pp": "pp",
    "ep": "ep",
    "cp": "cp",
    "dcp": "dcp",
    "kv_offload_gib": "kv_offload_gib",
    "micro_batch": "micro_batch",
    "seq": "seq_len",
    "lora_rank": "lora_rank",
    "global_batch_tokens": "global_batch_tokens",
    "spec_k": "spec_k",
    "spec_alpha": "spec_alpha",
    "gpus_per_node": "gpus_per_node",
    "tokens": "train_tokens",
}

#: ``rabit video``'s flag (argparse ``dest``) -> the video group's field whose domain it shares.
VIDEO_FLAG_FIELDS: dict[str, str] = {
    "height": "height",
    "width": "width",
    "frames": "frames",
    "seconds": "seconds",
    "fps": "fps",
    "steps": "steps",
    "batch": "batch",
    "gpus": "gpus",
    "replicas": "replicas",
    "rate": "rate_per_hour",
    "p95_target_s": "p95_target_s",
    "videos": "num_videos",
    "seed": "seed",
}

#: The domain of every numeric CLI flag, by argparse ``dest`` (checked as the flag is parsed).
FLAG_DOMAINS: dict[str, Domain] = {
    **{dest: CONFIG_DOMAINS[f] for dest, f in FLAG_FIELDS.items()},
    "gpus": GROUP_DOMAINS["training.budget_gpus"],
    "max_gpus": GROUP_DOMAINS["training.max_gpus"],
    "seed": GROUP_DOMAINS["workload.seed"],
    "requests": GROUP_DOMAINS["workload.num_requests"],
    "recommend.requests": Domain(
        20, 50_000, "each of up to 64 finalists is simulated: 64 x 50,000 requests take about a minute"
    ),
    "users": GROUP_DOMAINS["workload.users"],
    "think": GROUP_DOMAINS["workload.think_s"],
    "duration": GROUP_DOMAINS["workload.duration_s"],
    "timeout": GROUP_DOMAINS["workload.timeout_s"],
    "rate": GROUP_DOMAINS["workload.rate_per_s"],
    "spread": GROUP_DOMAINS["workload.spread"],
    "max_batch": GROUP_DOMAINS["workload.max_batch"],
    "token_budget": GROUP_DOMAINS["workload.token_budget"],
    "kv_pool_tokens": GROUP_DOMAINS["workload.kv_pool_tokens"],
    "max_simulations": GROUP_DOMAINS["targets.max_simulations"],
    "replicas": GROUP_DOMAINS["workload.replicas"],
    "prefix_groups": GROUP_DOMAINS["workload.prefix_groups"],
    "prefix_share": GROUP_DOMAINS["workload.prefix_cache_frac"],
    "prefill_instances": GROUP_DOMAINS["disagg.prefill_instances"],
    "decode_instances": GROUP_DOMAINS["disagg.decode_instances"],
    "prefill_tp": GROUP_DOMAINS["disagg.prefill_tp"],
    "decode_tp": GROUP_DOMAINS["disagg.decode_tp"],
    "p95_ttft_s": GROUP_DOMAINS["targets.p95_ttft_s"],
    "p95_itl_s": GROUP_DOMAINS["targets.p95_itl_s"],
    "p95_e2e_s": GROUP_DOMAINS["targets.p95_e2e_s"],
    "max_usd_per_hour": GROUP_DOMAINS["targets.max_usd_per_hour"],
    "deadline_days": GROUP_DOMAINS["targets.deadline_days"],
    "checkpoint_interval_s": GROUP_DOMAINS["training.checkpoint_interval_s"],
    "batch_tolerance": Domain(0.0, 1.0, "a relative tolerance on the global batch", integer=False),
    # multi-LoRA serving: the adapter flags share the adapters group's domains
    "adapters": GROUP_DOMAINS["adapters.count"],
    "adapter_skew": GROUP_DOMAINS["adapters.skew"],
    "max_loras": GROUP_DOMAINS["adapters.max_loras"],
    "max_lora_rank": GROUP_DOMAINS["adapters.max_lora_rank"],
    "max_cpu_loras": GROUP_DOMAINS["adapters.max_cpu_loras"],
    # rabit video: its flags share the video group's domains
    **{f"video.{flag}": VIDEO_DOMAINS[field] for flag, field in VIDEO_FLAG_FIELDS.items()},
}
