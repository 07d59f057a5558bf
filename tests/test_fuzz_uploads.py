"""Every upload a page or the CLI takes, fed hostile bytes: a one-line ValueError (or the parser's own error
type) or a valid result, never another exception, and never a long wait.

The uploads: a Hugging Face config.json (sidebar), a RA-BIT config file (sidebar), a trace to replay (Serving
page, ``rabit simulate --trace``), a price list (Optimizer page, ``rabit recommend --price-file``), a
telemetry dump (Diagnostics page, ``rabit diagnose``) and measured runs (Calibration page, ``rabit calibrate``).
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.base import MAX_TABLE_BYTES, PayloadError, decode_text, parse_json
from core.catalog import CatalogError, from_hf_config, parse_prices
from core.config import DEFAULT, from_json
from core.operations import RunError, TelemetryError, parse_file
from core.operations import parse as parse_telemetry
from core.serving import parse_trace


def upload_model(data: bytes):
    return from_hf_config(parse_json(data, "config.json"))


def upload_config(data: bytes):
    return from_json(decode_text(data, "the config file"))


def upload_trace(data: bytes):
    return parse_trace(decode_text(data, "the trace", MAX_TABLE_BYTES))


def upload_prices(data: bytes):
    return parse_prices(decode_text(data, "the price list", MAX_TABLE_BYTES))


UPLOADS = {
    "config.json": upload_model,
    "config file": upload_config,
    "trace": upload_trace,
    "price list": upload_prices,
    "telemetry": parse_telemetry,
    "runs (json)": lambda data: parse_file("runs.json", data, base=DEFAULT),
    "runs (csv)": lambda data: parse_file("runs.csv", data, base=DEFAULT),
}
ALLOWED = (ValueError, CatalogError, TelemetryError, PayloadError, RunError)

VALID_MODEL = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32000,
    "intermediate_size": 11008,
}
SEEDS = [
    b"",
    b"\xef\xbb\xbf",
    b"\xff\xfe\x00",
    b"null",
    b"[]",
    b"{}",
    b"1e400",
    b"NaN",
    b"[" * 10_000,
    ("[" * 100_000 + "]" * 100_000).encode(),
    b'{"a": ' + b"9" * 5000 + b"}",
    json.dumps({**VALID_MODEL, "hidden_size": True}).encode(),
    json.dumps({**VALID_MODEL, "num_attention_heads": 10_000_000_000}).encode(),
    json.dumps({**VALID_MODEL, "architectures": 5}).encode(),
    json.dumps({**VALID_MODEL, "text_config": 5}).encode(),
    json.dumps({"text_config": VALID_MODEL}).encode(),
    b"input_tokens,output_tokens\n9223372036854775808,1\n",
    b"input_tokens,output_tokens\n-1,5\n",
    b"input_tokens,output_tokens\n1e400,5\n",
    b"x," + b"y" * 200_000 + b"\n1,2\n",
    b"gpu,provider,kind,usd_per_gpu_hour,source,as_of\nh100-sxm,p,on-demand,nan,a source,2025-01-01\n",
    b"gpu,provider,kind,usd_per_gpu_hour,source,as_of\nh100-sxm,p,on-demand,-1,a source,2025-01-01\n",
    b"vllm:num_requests_running 1e400\n",
    b"vllm:num_requests_running NaN\n",
    b'# TYPE x counter\nx{a="' + b"b" * 100_000,
    b"timestamp_s,metric,value\n0,m,inf\n",
    b"\x00" * 1000,
    "caf\u00e9,\u2603\n1,2".encode("latin-1", "replace"),
    # non-finite and absurd numbers inside files (each refused with its line or field, never aggregated)
    b"vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\n",
    b"vllm:num_requests_running +Inf\n",
    b"vllm:num_requests_running 1e31\n",
    b"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total -5\n",
    b"timestamp_s,metric,value\n0,m,nan\n",
    b"timestamp_s,metric,value\n1.7e12,m,1\n",
    b"timestamp_s,m\n0,-inf\n",
    b"input_tokens,output_tokens\nnan,5\n",
    b'[{"input_tokens": NaN, "output_tokens": 5}]',
    b"gpu,provider,kind,usd_per_gpu_hour,source,as_of\nh100-sxm,p,on-demand,inf,a source,2025-01-01\n",
    b'{"model_id": "meta-llama/Llama-3.1-8B", "completed": 10, "total_input_tokens": 100, '
    b'"total_output_tokens": 10, "median_ttft_ms": NaN, "gpu": "h100-sxm", "gpus": 1}',
    b'{"model_id": "meta-llama/Llama-3.1-8B", "completed": 10, "total_input_tokens": 100, '
    b'"total_output_tokens": 10, "median_ttft_ms": 1e308, "gpu": "h100-sxm", "gpus": 1}',
    b'{"model_id": "meta-llama/Llama-3.1-8B", "completed": true, "total_input_tokens": 100, '
    b'"total_output_tokens": 10, "median_ttft_ms": 5, "gpu": "h100-sxm", "gpus": 1}',
    b'{"workload": {"rate_per_s": Infinity}}',
    b'{"workload": {"rate_per_s": NaN}}',
    # strings and floats where an integer is meant
    json.dumps({**VALID_MODEL, "num_attention_heads": "32"}).encode(),
    json.dumps({**VALID_MODEL, "num_hidden_layers": 1e10}).encode(),
    b'{"batch": "32"}',
    b'{"batch": 32.5}',
    b'{"tp": true}',
    b'{"custom_model": {"slug": "x", "name": "x", "hidden_size": 4096.0, "num_layers": 32, "num_heads": 32, '
    b'"num_kv_heads": 8, "head_dim": 128, "vocab_size": 32000}}',
    b"input_tokens,output_tokens\n10.5,5\n",
    # a key or a column given twice
    b'{"hidden_size": 4096, "hidden_size": 8}',
    b"input_tokens,output_tokens,input_tokens\n1,2,3\n",
    # markup in text fields (kept as text: a name is cleaned, a label is data)
    json.dumps({**VALID_MODEL, "_name_or_path": "![x](http://e.example/x.png)"}).encode(),
]


@pytest.mark.parametrize("name", sorted(UPLOADS))
@pytest.mark.parametrize("data", SEEDS, ids=range(len(SEEDS)))
def test_hostile_uploads_are_refused_cleanly(name, data):
    t0 = time.monotonic()
    try:
        out = UPLOADS[name](data)
    except ALLOWED as exc:
        assert str(exc) and "\n" not in str(exc).strip()
    else:
        assert_finite(out)  # what a file gives is finite, whatever the file said
    assert time.monotonic() - t0 < 2.0


def assert_finite(x) -> None:
    """Every number in a parsed upload (a model, a config, trace rows, prices, telemetry, runs) is finite and no
    count is a boolean or a text."""
    import math

    from pydantic import BaseModel

    if isinstance(x, BaseModel):
        for _, v in x:
            assert_finite(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            assert_finite(v)
    elif isinstance(x, dict):
        for v in x.values():
            assert_finite(v)
    elif isinstance(x, float):
        assert math.isfinite(x), x


@pytest.mark.parametrize(
    "name, data, words",
    [
        ("telemetry", b"vllm:num_requests_running NaN\n", "line 1"),
        ("telemetry", b"timestamp_s,metric,value\n0,m,nan\n", "line 2, column value"),
        ("telemetry", b"timestamp_s,metric,value\n1.7e12,m,1\n", "line 2, column timestamp_s"),
        ("trace", b"input_tokens,output_tokens\nnan,5\n", "line 2"),
        ("runs (json)", SEEDS[-14], "median_ttft_ms"),
        ("config file", b'{"workload": {"rate_per_s": Infinity}}', "workload.rate_per_s"),
        ("config file", b'{"batch": "32"}', "batch"),
        ("config.json", json.dumps({**VALID_MODEL, "num_attention_heads": "32"}).encode(), "num_attention_heads"),
    ],
)
def test_a_refused_file_names_the_line_or_field(name, data, words):
    with pytest.raises(ALLOWED) as e:
        UPLOADS[name](data)
    assert words in str(e.value), str(e.value)


#: Values that stand where a number is meant in a file: the classes a fuzz pass found accepted.
NOT_A_COUNT = st.sampled_from(["32", "1e10", True, False, None, 32.0, 1e10, 32.5, -1, 0, 10**30, "", [], {}])
NON_FINITE_TOKENS = (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400")


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(["config.json", "config file", "runs (json)"]),
    key=st.sampled_from(
        [*VALID_MODEL, "num_key_value_heads", "head_dim", "batch", "tp", "input_tokens", "gpus", "completed"]
    ),
    value=NOT_A_COUNT,
)
def test_fuzz_strings_and_floats_in_integer_fields(name, key, value):
    base = {**VALID_MODEL} if name == "config.json" else {} if name == "config file" else json.loads(SEEDS[-14])
    if name == "runs (json)":
        base["median_ttft_ms"] = 5.0
    data = json.dumps({**base, key: value}).encode()
    try:
        out = UPLOADS[name](data)
    except ALLOWED as exc:
        assert "\n" not in str(exc).strip()
        return
    assert_finite(out)
    got = out if name != "runs (json)" else out[0].config
    # accepted: the count became a whole number of its field, never a text, a boolean or a decimal
    for field in ("hidden_size", "num_layers", "num_heads", "batch", "tp", "input_tokens"):
        v = getattr(got, field, None)
        assert v is None or (isinstance(v, int) and not isinstance(v, bool)), (field, v)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(sorted(UPLOADS)),
    seed=st.sampled_from([s for s in SEEDS if 10 < len(s) < 400]),
    token=st.sampled_from(NON_FINITE_TOKENS),
    at=st.integers(0, 400),
)
def test_fuzz_non_finite_numbers_inside_files(name, seed, token, at):
    """A number in any file replaced by NaN, an infinity or an overflowing literal: refused or dropped, never
    read as a number."""
    import re

    spots = [m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", seed)]
    if not spots:
        return
    a, b = spots[at % len(spots)]
    data = seed[:a] + token + seed[b:]
    try:
        out = UPLOADS[name](data)
    except ALLOWED:
        return
    assert_finite(out)


def test_an_oversized_upload_is_refused_before_it_is_parsed():
    big = b"input_tokens,output_tokens\n" + b"1,2\n" * (MAX_TABLE_BYTES // 4 + 1)
    with pytest.raises(PayloadError, match="limit"):
        upload_trace(big)
    with pytest.raises(PayloadError, match="limit"):
        upload_model(b" " * 2_000_000)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(sorted(UPLOADS)),
    data=st.one_of(
        st.binary(max_size=300),
        st.sampled_from(SEEDS).flatmap(lambda s: st.binary(max_size=20).map(lambda b: s[:200] + b)),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(
                    st.sampled_from(sorted(VALID_MODEL) + ["model_type", "text_config", "x"]), c, max_size=5
                )
            ),
            max_leaves=20,
        ).map(lambda o: json.dumps(o, allow_nan=True).encode()),
    ),
)
def test_fuzz_every_upload(name, data):
    try:
        UPLOADS[name](data)
    except ALLOWED:
        pass


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    rows=st.lists(st.tuples(st.integers(1, 300_000), st.integers(1, 300_000)), min_size=1, max_size=6),
    pool=st.one_of(st.none(), st.integers(1, 2_000_000)),
    name=st.sampled_from(["llama-3.1-8b", "mistral-7b", "gpt-oss-120b"]),
)
def test_fuzz_traces_past_the_context(rows, pool, name):
    """A replayed trace is refused exactly when one of its requests does not fit the model's context (the check a
    single ``--input`` gets), and a KV pool override exactly when it cannot hold the shortest replayed request in
    whole blocks; the message names the row and says by how much."""
    from core.catalog import model
    from core.config import DEFAULT, workload_problems

    text = "input_tokens,output_tokens\n" + "".join(f"{a},{b}\n" for a, b in rows)
    trace = upload_trace(text.encode())
    cfg = DEFAULT.with_(model=name, workload=DEFAULT.workload.with_(kv_pool_tokens=pool))
    probs = {p.field: p.message for p in workload_problems(cfg, trace)}
    ctx = model(name).max_context
    over = [i for i, (a, b) in enumerate(rows, 1) if a + b > ctx]
    assert ("trace" in probs) == bool(over)
    if over:
        assert probs["trace"].startswith(f"row {over[0]}:") and f"{ctx:,}-token context" in probs["trace"]
    shortest = min(a + b for a, b in rows)
    need = -(-shortest // cfg.block_size) * cfg.block_size
    assert ("workload.kv_pool_tokens" in probs) == (pool is not None and pool < need)
