"""The request lengths in every serving headline, and the note that says when they drive the answer
(core.serving.lengths)."""

from __future__ import annotations

import math

import pytest

from core.config import DEFAULT, resolve
from core.serving import (
    LENGTH_DRIVEN_RATIO,
    TYPICAL_CHAT_INPUT_TOKENS,
    TYPICAL_CHAT_OUTPUT_TOKENS,
    kv_pool,
    length_note,
    sim_spec,
    workload_text,
)


def test_the_workload_reads_as_people_write_it():
    assert workload_text(4096, 4096, 5.0) == "4,096 in + 4,096 out tokens at 5 requests/s"
    assert workload_text(1000, 250) == "1,000 in + 250 out tokens"


def test_the_defaults_are_length_driven_and_say_what_shorter_requests_give():
    # 4,096 + 4,096 tokens on the defaults (Llama-3.1-70B, 8 x H100, TP 8): one replica carries 1.21 requests/s,
    # 21.5 at the typical chat request's 1,020 + 129 tokens, 18x the GPU time a request
    n = length_note(DEFAULT)
    assert n.gpus_ratio >= LENGTH_DRIVEN_RATIO
    assert "4,096 + 4,096 tokens" in n.message and "1,020 + 129 tokens" in n.message
    # the KV cache caps the batch: the pool's blocks over the blocks of one whole context (I + O - 1 tokens in
    # 16-token blocks): 88,541 / ceil(8,191 / 16) = 88,541 / 512 = 172.9 -> 172 sequences, below the scheduler's 256
    pool = kv_pool(resolve(DEFAULT), sim_spec(DEFAULT))
    per_seq = math.ceil((DEFAULT.input_tokens + DEFAULT.output_tokens - 1) / pool.block)
    assert n.batch == math.floor(pool.blocks / per_seq) < n.max_batch == 256
    assert n.kv_bound and f"{n.batch:,} fit a replica" in n.message


def test_typical_lengths_drive_nothing_and_longer_answers_need_more():
    typical = DEFAULT.with_(input_tokens=TYPICAL_CHAT_INPUT_TOKENS, output_tokens=TYPICAL_CHAT_OUTPUT_TOKENS)
    n = length_note(typical)
    assert n.gpus_ratio == 1.0 and n.message == ""  # the reference itself
    ratios = [length_note(DEFAULT.with_(output_tokens=o)).gpus_ratio for o in (129, 512, 2048, 4096)]
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]  # longer answers: more GPU time a request


def test_a_model_that_does_not_fit_is_left_to_the_fit_check():
    # 405B in BF16 on one H100: no KV cache at any length; the closed form says so (the pages show the fit error and
    # no length note, never "infx the GPUs")
    with pytest.raises(ValueError, match="no room for a KV cache"):
        length_note(DEFAULT.with_(model="llama-3.1-405b", gpus_per_node=1, tp=1))
