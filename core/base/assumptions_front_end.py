"""The assumptions of the serving engine's front end, the API server a request passes before the scheduler sees
it (HTTP, the chat template, tokenization, validation, the hand-off to the engine process) and again when its first
token goes out: rows of :data:`core.base.assumptions.REGISTRY`, declared here beside the rest of the registry's rows.

The simulator's event loop times the GPU's iterations only; :func:`core.serving.front_end.front_end_s` adds this
time to each request's time to first token and end-to-end latency (the GPU's timeline, its queue and its ITL do not
move: the front end works beside the engine, in its own process)."""

from __future__ import annotations

from core.base.assumption_info import AssumptionInfo

__all__ = ["FRONT_END_ASSUMPTIONS"]

FRONT_END_ASSUMPTIONS = (
    AssumptionInfo(
        "api_request_ms",
        "API server time per request outside tokenization (HTTP, validation, hand-off to the engine, first chunk out)",
        "ms",
        3.0,
        5.0,  # pessimistic: a slower front end
        1.0,
        "vLLM's OpenAI server parses the request, applies the chat template and hands the tokens to the engine core "
        "over ZeroMQ before the scheduler can queue it, and streams the first token back through the same path "
        "(vllm/entrypoints/openai, vllm/v1/engine/async_llm.py): a millisecond or two of Python and IPC each way. "
        "Cross-check, not the source of the base: vLLM's request-journey tracing on H100 runs (inference-sim/training "
        "DESIGN.md, output/fit/coefficients.json, 2026-03) measured arrival to queued 9.3 ms mean for ~590-token "
        "prompts, ~3.4 ms once the per-token term below is taken off, and 1.8 ms from finish to response: ~5 ms in "
        "all, the pessimistic bound. Base 3 ms, bounds 1-5 ms.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="more than ten seconds per request is a stalled front end, not an overhead",
    ),
    AssumptionInfo(
        "api_token_us",
        "API server tokenization time per prompt token",
        "us",
        10.0,
        20.0,  # pessimistic: a slower tokenizer
        5.0,
        "A Rust (Hugging Face tokenizers) encode of a chat-templated prompt measured 10-21 us per token for a "
        "131-token prompt, the first call the slowest (tenstorrent/tt-inference-server issue 2173, 2026-02); "
        "tokenization runs in the API server for the whole prompt, cached prefix or not. Base 10 us, bounds 5-20 us.",
        -1,
        moves=("serving_speed",),
        min_value=0.0,
        max_value=10000.0,
        domain_reason="more than 10 ms per token is not a tokenizer",
    ),
)
