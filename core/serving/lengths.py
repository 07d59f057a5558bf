"""How much of a serving answer the request lengths decide.

Every serving headline names the workload it answers for (``4,096 in + 4,096 out tokens at 5 requests/s``), and a
note says when the lengths drive the answer: when a request at these lengths needs many times the GPU time of a
typical chat request, or when the KV cache each sequence holds caps how many run at once. Both read one replica's
closed-form capacity (:func:`core.serving.simulation.max_throughput`) at the config's lengths and at the typical
chat request's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.base import sig
from core.config import RabitConfig
from core.serving.simulation import max_throughput, sim_spec

#: A typical chat request: the median prompt and output of Azure's LLM inference conversation trace (Patel et al.,
#: "Splitwise", ISCA 2024, Table 2: prompt 1,020 tokens, output 129 tokens).
TYPICAL_CHAT_INPUT_TOKENS = 1020
TYPICAL_CHAT_OUTPUT_TOKENS = 129
#: The lengths drive the answer when one request needs at least this many times the GPU time of the typical chat
#: request (the GPUs a rate needs scale with it): a factor of 4 moves a sizing by more than any efficiency
#: assumption's range does.
LENGTH_DRIVEN_RATIO = 4.0


def workload_text(input_tokens: float, output_tokens: float, rate_per_s: float | None = None) -> str:
    """The workload in words: ``4,096 in + 4,096 out tokens`` and, with a rate, ``at 5 requests/s``."""
    text = f"{input_tokens:,.0f} in + {output_tokens:,.0f} out tokens"
    return text + (f" at {sig(rate_per_s)} requests/s" if rate_per_s else "")


def sessions_text(sessions) -> str:
    """A session workload in words (:class:`core.config.Sessions`): ``64 concurrent agents, 10 turns a session:
    a 2,000-token first request, 300 new and 400 out tokens a turn, 5 s between turns``."""
    s = sessions
    who = f"{s.agents:,} concurrent agents" if s.arrival == "agents" else f"{sig(s.rate_per_s)} sessions/s"
    return (
        f"{who}, {s.turns.mean:,.0f} turns a session: a {s.first_input.mean:,.0f}-token first request, "
        f"{s.new_input.mean:,.0f} new and {s.output.mean:,.0f} out tokens a turn, {sig(s.gap_s)} s between turns"
    )


class LengthNote(BaseModel):
    """One replica at the config's lengths against the typical chat request's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int
    output_tokens: int
    capacity_rps: float  # one replica at these lengths [requests/s]
    typical_capacity_rps: float  # one replica at the typical chat request's
    batch: int  # sequences resident at once at these lengths
    typical_batch: int
    max_batch: int  # the scheduler's limit
    limited_by: str  # what sets the batch: "max batch", "KV pool" or "token budget"

    @property
    def gpus_ratio(self) -> float:
        """GPU time per request here over the typical chat request's (= the GPUs a rate needs, in ratio)."""
        return self.typical_capacity_rps / self.capacity_rps if self.capacity_rps > 0 else float("inf")

    @property
    def kv_bound(self) -> bool:
        """The KV cache each sequence holds caps the batch below the scheduler's limit."""
        return self.limited_by == "KV pool" and self.batch < min(self.max_batch, self.typical_batch)

    @property
    def message(self) -> str:
        """What the lengths do to the answer and what the typical chat request would give; "" when they do not
        drive it."""
        typical = f"{TYPICAL_CHAT_INPUT_TOKENS:,} + {TYPICAL_CHAT_OUTPUT_TOKENS:,} tokens"
        parts = []
        if self.capacity_rps > 0 and self.gpus_ratio >= LENGTH_DRIVEN_RATIO:  # 0: nothing fits (said elsewhere)
            parts.append(
                f"{self.input_tokens:,} + {self.output_tokens:,} tokens a request need {self.gpus_ratio:,.0f}x the "
                f"GPUs of a typical chat request ({typical}, the median of Azure's conversation trace): one replica "
                f"carries {sig(self.capacity_rps)} requests/s here, {sig(self.typical_capacity_rps)} at those lengths"
            )
        if self.kv_bound:
            parts.append(
                f"each sequence holds {self.input_tokens + self.output_tokens:,} tokens of KV cache, so "
                f"{self.batch:,} fit a replica at once (the scheduler allows {self.max_batch:,}); at {typical}, "
                f"{self.typical_batch:,} would"
            )
        if not parts:
            return ""
        text = "; ".join(parts)
        return "The lengths drive this answer: " + text + ". Check them against the traffic you expect."


def length_note(cfg: RabitConfig) -> LengthNote:
    """One replica's closed-form capacity at the config's lengths and at the typical chat request's.

    Worked number: Llama-3.1-70B in FP8 on 8 x H100 at TP 4 (the defaults), 4,096 + 4,096 tokens: see
    tests/test_lengths.py."""
    spec = sim_spec(cfg)
    here = max_throughput(cfg, spec)
    typ_cfg = cfg.with_(input_tokens=TYPICAL_CHAT_INPUT_TOKENS, output_tokens=TYPICAL_CHAT_OUTPUT_TOKENS)
    typ = max_throughput(typ_cfg, sim_spec(typ_cfg))
    return LengthNote(
        input_tokens=cfg.input_tokens,
        output_tokens=cfg.output_tokens,
        capacity_rps=here.requests_per_s,
        typical_capacity_rps=typ.requests_per_s,
        batch=here.batch,
        typical_batch=typ.batch,
        max_batch=spec.max_batch,
        limited_by=here.limited_by,
    )
