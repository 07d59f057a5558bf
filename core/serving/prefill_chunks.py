"""Prefill of long prompts: one prompt as chunks of the engine's token budget, the numbers of a batch's prefill.

vLLM and SGLang prefill a prompt longer than the token budget (``max_num_batched_tokens``) one chunk per iteration,
each chunk attending every earlier token of the prompt (its keys and values already cached) and its own causally.
:func:`prompt_chunks` lays the chunks out, :func:`chunked_prompt_s` times them with the one step-time body (arrays over
a stack of step models welcome), :func:`chunked_prefill` records them for the Speed page; the TTFT of one prompt is
the sum of its chunk iterations. :class:`PrefillNumbers` is what :func:`core.serving.speed.prefill_numbers` returns,
chunked or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import Trace, fmt_time
from core.catalog import ModelArch
from core.config import RabitConfig
from core.physics import IterationParts, StepModel, iteration

__all__ = [
    "ChunkPart",
    "PrefillNumbers",
    "PromptChunks",
    "attended_pairs",
    "chunk_parts",
    "chunked_prefill",
    "chunked_prompt_s",
    "prompt_chunks",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class ChunkPart(_Frozen):
    """One prefill chunk of one prompt: its tokens, what it attends, and the parts of its iteration [s]."""

    start_tokens: int  # tokens of the prompt before this chunk (cached or prefilled by earlier chunks)
    tokens: int  # T: the chunk's new tokens
    pairs: float  # A: (query, key) pairs it attends (every earlier token of the prompt, and its own causally)
    linear_s: float  # the matmuls' share of the compute (linear in T)
    attention_s: float  # attention's share of the compute (quadratic in the context over the chunks)
    compute_s: float
    memory_s: float
    comm_s: float
    time_s: float


def attended_pairs(m: ModelArch, start: float, end: float) -> float:
    """Sum over query positions j = start+1 .. end of the keys each attends (itself included), averaged over the
    attention layers (a hybrid's state-space layers attend nothing; the FLOPs per pair count attention layers).

    Full layers: sum j = (end (end+1) - start (start+1)) / 2; sliding layers: sum min(j, w).
    """

    def full(n: float) -> float:
        return n * (n + 1) / 2

    if not m.sliding_layers:
        return full(end) - full(start)
    w = m.sliding_window

    def slide(n: float) -> float:
        return full(n) if n <= w else full(w) + (n - w) * w

    return (
        m.full_attention_layers * (full(end) - full(start)) + m.sliding_layers * (slide(end) - slide(start))
    ) / m.attention_layers


@dataclass(frozen=True)
class PrefillNumbers:
    """The numbers of one batch's prefill: its prompts, the iteration's ``T``, ``A``, ``R`` (the whole batch), one
    micro-batch's iteration and one prompt's alone (a long prompt: its last chunk), the TTFT, the chunk schedule."""

    batch: int
    prompt: int
    cached: int
    uncached: int
    T: float
    A: float
    R: float
    it: IterationParts  # one micro-batch: the whole batch without a pipeline (or with one prompt)
    one: IterationParts
    m: float  # micro-batches, min(pp, B)
    ttft_s: float  # the whole batch through an empty pipeline
    chunks: PromptChunks  # one prompt's chunk schedule (a single chunk: the prompt in one pass)
    chunked: bool = False  # the prompt is longer than the token budget
    ttft_one_s: float = 0.0  # a chunked prompt alone: the sum of its chunk iterations (else ``one.time_s``)


@dataclass(frozen=True)
class PromptChunks:
    """One prompt's prefill as chunks of at most ``C`` tokens, arrays over the chunks: ``T`` new tokens, ``A`` pairs
    (each chunk attends every earlier token of the prompt and its own causally), ``R`` cached tokens read."""

    chunk: int
    start: np.ndarray
    T: np.ndarray
    A: np.ndarray
    R: np.ndarray


def prompt_chunks(sm: StepModel, cached: int, prompt: int, chunk: int) -> PromptChunks:
    """The chunks of one prompt of ``prompt`` tokens whose first ``cached`` are in the prefix cache: chunk ``j``
    starts at ``c + j C``, holds ``T_j = min(C, I - start_j)`` tokens, attends ``sum_{q=start+1..start+T} q`` pairs
    (window-clipped) and reads the ``start_j`` tokens before it (vLLM / SGLang chunked prefill: one chunk of a long
    prompt per iteration)."""
    start = np.arange(cached, prompt, chunk, dtype=float)
    T = np.minimum(float(chunk), prompt - start)
    A = np.array([attended_pairs(sm.model, a, a + t) for a, t in zip(start, T)])
    R = np.asarray(sm.kv_read_tokens(start), dtype=float)
    return PromptChunks(chunk, start, T, A, R)


def chunked_prompt_s(sm: StepModel, ch: PromptChunks):
    """One prompt's prefill chunk after chunk [s] (arrays over a stack of step models welcome): the chunks follow
    one another through the ``pp`` stages, each after the one before it (its keys and values are needed), so::

        TTFT_1 = sum_j (t_b + t_x + t_o)_j + (pp - 1)(t_b + t_x + hop)_last

    with each chunk's busy time ``t_b`` (``StepModel.busy_s``) and its launches by ``StepModel.launch_s`` (a chunk
    carries prompt tokens), the sum of the chunk iterations without a pipeline (``pp = 1``: each chunk one
    ``iteration_s``)."""
    c, mm, x, k = sm.stage_parts(ch.T, ch.A, ch.R)
    stage = sm.busy_s(c, mm, ch.A, ch.R) + x
    fixed = sm.fixed_s(sm.launch_s(k, ch.T, 1.0), 1.0)
    hop = sm.pp_hop_alpha + sm.pp_hop_beta * ch.T[-1]  # (K, 1) over a stack of models, as the last chunk's stage
    tail = (sm.pp - 1) * (stage[..., -1:] + hop)
    return np.sum(stage + fixed, axis=-1) + tail[..., 0]


def chunk_parts(sm: StepModel, ch: PromptChunks) -> tuple[ChunkPart, ...]:
    """Each chunk's iteration taken apart (its compute split into the matmuls' and attention's shares)."""
    c, mm, x, k = sm.stage_parts(ch.T, ch.A, ch.R)
    lin = sm.stage_parts(ch.T, 0.0 * ch.A, ch.R)[0]
    t = sm.iteration_s(ch.T, ch.A, ch.R, np.ones_like(ch.T))
    return tuple(
        ChunkPart(
            start_tokens=int(ch.start[j]),
            tokens=int(ch.T[j]),
            pairs=float(ch.A[j]),
            linear_s=float(lin[j]),
            attention_s=float(c[j] - lin[j]),
            compute_s=float(c[j]),
            memory_s=float(mm[j]),
            comm_s=float(x[j]),
            time_s=float(t[j]),
        )
        for j in range(len(ch.T))
    )


def chunked_prefill(sm: StepModel, cfg: RabitConfig, B: int, c: int, chunk: int, tr: Trace) -> PrefillNumbers:
    """A batch of prompts longer than the token budget, prefilled chunk by chunk (:func:`prompt_chunks`): the batch's
    prompts one after another, each as its chunks, ``TTFT = B x TTFT_1``; recorded on ``tr``."""
    on = tr.enabled
    I = cfg.input_tokens
    u = I - c
    ch = prompt_chunks(sm, c, I, chunk)
    n = len(ch.T)
    t_one = float(chunked_prompt_s(sm, ch))
    if on:
        tr.step(
            "prefill_chunks",
            "Prefill: chunks of one prompt",
            "n_c",
            "ceil((s_in - c) / C)",
            n,
            unit="chunks",
            s_in=I,
            c=c,
            C=chunk,
            note=f"the {u:,} uncached tokens exceed the token budget C = {chunk:,} (workload.token_budget, "
            "max_num_batched_tokens): the engine prefills the prompt one chunk per iteration, each chunk attending "
            "every earlier token of the prompt",
        )
    first = iteration(
        sm,
        float(ch.T[0]),
        float(ch.A[0]),
        float(ch.R[0]),
        1.0,
        tr=tr,
        key="prefill_chunk_first",
        what="First prefill chunk",
        compact=True,
        final_label="Prefill: the first chunk",
        final_symbol=r"t_{1}",
        note=f"{int(ch.T[0]):,} tokens after {int(ch.start[0]):,}",
    )
    last = iteration(
        sm,
        float(ch.T[-1]),
        float(ch.A[-1]),
        float(ch.R[-1]),
        1.0,
        tr=tr,
        key="prefill_chunk_last",
        what="Last prefill chunk",
        compact=True,
        final_label="Prefill: the last chunk",
        final_symbol=r"t_{n}",
        note=f"{int(ch.T[-1]):,} tokens after {int(ch.start[-1]):,}: it attends the whole prompt before it",
    )
    if on:
        parts = chunk_parts(sm, ch)
        lin = sum(p.linear_s for p in parts)
        att = sum(p.attention_s for p in parts)
        tr.step(
            "ttft_one_s",
            "Time to first token (one prompt alone)",
            r"\mathrm{TTFT}_1",
            "n_c * t_bar",
            t_one,
            unit="s",
            units={"t_bar": "s"},
            n_c=n,
            t_bar=t_one / n,
            note=f"the sum of the {n} chunk iterations (t_bar their mean; {fmt_time(first.time_s)} the first, "
            f"{fmt_time(last.time_s)} the last); over the chunks the matmuls take {fmt_time(lin)} and attention "
            f"{fmt_time(att)}: "
            + ("attention, quadratic in the prompt, dominates" if att > lin else "the linear GEMMs dominate"),
        )
        tr.step(
            "prefill_s",
            "Time to first token (one batch)",
            r"\mathrm{TTFT}",
            "B * TTFT_1",
            B * t_one,
            unit="s",
            units={"TTFT_1": "s"},
            B=B,
            TTFT_1=t_one,
            note="the batch's long prompts are prefilled one after another, chunk by chunk",
        )
    T, A, R = float(B * u), B * float(ch.A.sum()), B * float(ch.R.sum())
    return PrefillNumbers(B, I, c, u, T, A, R, last, last, 1.0, B * t_one, chunks=ch, chunked=True, ttft_one_s=t_one)
