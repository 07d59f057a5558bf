"""The shared config's ``adapters`` group: low-rank adapters (LoRA) served over one shared base model.

:class:`AdapterSet` says how many adapters one deployment serves, their ranks (one rank, or a list spread over
the adapters in turn), the linear layers they target, their dtype and how the traffic spreads over them (uniform,
or Zipf with an exponent), and the engine's reservation for them: ``max_loras`` GPU slots (distinct adapters one
batch may hold) at ``max_lora_rank``, and a host cache of ``max_cpu_loras`` adapters. A field left unset takes
the serving engine's documented default (:func:`core.catalog.lora_defaults`): vLLM 1 slot at rank 16 and a host
cache as large as the slots; SGLang 8 slots, the rank inferred from the adapters, every adapter in host memory.
``count = 0`` is the base model alone: nothing else in the group is read, and every figure is the plain
deployment's. The group travels in the link as ``adapters.<field>`` like the other groups.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from core.base import ADAPTER_BYTES, choices, in_domain, kept, validated_copy
from core.catalog import lora_defaults

#: At most this many distinct ranks in one adapter set (a list of ranks is spread over the adapters in turn).
MAX_RANKS = 64


class AdapterSet(BaseModel):
    """The adapters one deployment serves and the engine's reservation for them (frozen; see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = 0  # 0: the base model alone
    ranks: tuple[int, ...] = Field((16,), min_length=1, max_length=MAX_RANKS)  # adapter i has ranks[i % len]
    targets: choices.LoraTargets = "all"
    dtype: choices.AdapterDtype = "bf16"
    skew: float = 0.0  # 0: uniform traffic; s > 0: adapter i (from 1) draws a share proportional to i^-s
    max_loras: int | None = None  # GPU slots; None: the engine's default
    max_lora_rank: int | None = None  # slot rank; None: the engine's default (vLLM 16) or the adapters' own
    max_cpu_loras: int | None = None  # host cache; None: the engine's default
    #: TP splits both A and B of every adapter (vLLM --fully-sharded-loras; Punica and S-LoRA shard that way);
    #: off: vLLM's default, "only half of the LoRA computation is sharded with tensor parallelism"
    fully_sharded: bool = False

    @field_validator("count", "skew", "max_loras", "max_lora_rank", "max_cpu_loras", mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: ValidationInfo) -> Any:
        return v if kept(cls, info) else in_domain(f"adapters.{info.field_name}", v)

    @field_validator("ranks", mode="before")
    @classmethod
    def _ranks(cls, v: Any) -> Any:
        if isinstance(v, (int, str)) and not isinstance(v, bool):
            v = (v,)
        if isinstance(v, (list, tuple)):
            return tuple(in_domain("adapters.ranks", x) for x in v)
        return v

    def with_(self, **changes: Any) -> Self:
        """A validated copy with some fields changed."""
        return validated_copy(self, changes)

    def with_slots(self, slots: int, engine: str) -> AdapterSet:
        """The set as a search sizes it with ``slots`` GPU slots: the slots at the smallest rank the engine takes that
        holds the adapters (a larger one only pads them) unless ``max_lora_rank`` is set, and host memory (not
        priced) holding every adapter unless ``max_cpu_loras`` is set; ``slots`` 0 leaves the set as it is."""
        if not slots:
            return self
        return self.with_(
            max_loras=slots,
            max_lora_rank=self.max_lora_rank or self.tight_rank(engine),
            max_cpu_loras=self.max_cpu_loras or max(self.count, slots),
        )

    def tight_rank(self, engine: str) -> int:
        """The smallest slot rank ``engine`` takes that holds the set's largest rank."""
        need = self.max_rank
        return next((r for r in lora_defaults(engine).allowed_ranks if r >= need), need)

    @property
    def enabled(self) -> bool:
        """Whether any adapter is served (``count > 0``)."""
        return self.count > 0

    @property
    def bytes_per_param(self) -> float:
        """Bytes per adapter weight in the adapter dtype [B]."""
        return ADAPTER_BYTES[self.dtype]

    @property
    def max_rank(self) -> int:
        """The largest rank of the set (the rank of the adapters ``ranks`` spreads at most)."""
        return max(self.ranks[: max(1, min(self.count, len(self.ranks)))])

    @staticmethod
    def name_of(i: int) -> str:
        """The name of adapter ``i`` (0-based, hottest first) on screen, in reports and in launch configs."""
        return f"adapter-{i + 1}"

    def rank_of(self, i: int) -> int:
        """Rank of adapter ``i`` (0-based): the ranks spread over the adapters in turn."""
        return self.ranks[i % len(self.ranks)]

    def slots(self, engine: str) -> int:
        """GPU slots: distinct adapters one batch may hold (``max_loras``, else the engine's default)."""
        return self.max_loras if self.max_loras is not None else lora_defaults(engine).max_loras

    def slot_rank(self, engine: str) -> int:
        """The rank every GPU slot is allocated at (``max_lora_rank``, else the engine's default rank, else the
        smallest rank the engine accepts that holds the set's largest)."""
        if self.max_lora_rank is not None:
            return self.max_lora_rank
        default = lora_defaults(engine).max_lora_rank
        return default if default and default >= self.max_rank else self.tight_rank(engine)

    def host_slots(self, engine: str) -> int:
        """Adapters held in host memory (``max_cpu_loras``, else the engine's default: vLLM as many as the GPU
        slots, SGLang every adapter; never fewer than the slots)."""
        if self.max_cpu_loras is not None:
            return self.max_cpu_loras
        rule = lora_defaults(engine).max_cpu_loras
        if rule < 0:
            return max(self.count, self.slots(engine))
        return max(rule, self.slots(engine))

    def popularity(self) -> tuple[float, ...]:
        """Each adapter's share of the requests, hottest first: uniform, or Zipf ``i^-skew`` normalised."""
        n = self.count
        if n <= 0:
            return ()
        if self.skew == 0:
            return (1.0 / n,) * n
        w = [(i + 1) ** -self.skew for i in range(n)]
        total = sum(w)
        return tuple(x / total for x in w)


def adapter_problems(a: AdapterSet, engine: str) -> list[tuple[str, str]]:
    """(field, message) for each combination the engine refuses (nothing when no adapter is served)."""
    if not a.enabled:
        return []
    out: list[tuple[str, str]] = []
    rank = a.slot_rank(engine)
    if rank < a.max_rank:
        out.append(
            (
                "adapters.max_lora_rank",
                f"max LoRA rank {rank} is below the adapters' largest rank {a.max_rank}: the engine refuses to load "
                f"them; set it to at least {a.max_rank}",
            )
        )
    allowed = lora_defaults(engine).allowed_ranks
    if a.max_lora_rank is not None and allowed and a.max_lora_rank not in allowed:
        out.append(
            (
                "adapters.max_lora_rank",
                f"{engine} takes a max LoRA rank of {', '.join(map(str, allowed))}, not {a.max_lora_rank}",
            )
        )
    if a.host_slots(engine) < a.slots(engine):
        out.append(
            (
                "adapters.max_cpu_loras",
                f"max CPU LoRAs ({a.host_slots(engine)}) must be at least max LoRAs ({a.slots(engine)}): every adapter "
                "on the GPU is also held in host memory",
            )
        )
    return out
