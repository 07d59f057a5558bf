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
]


@pytest.mark.parametrize("name", sorted(UPLOADS))
@pytest.mark.parametrize("data", SEEDS, ids=range(len(SEEDS)))
def test_hostile_uploads_are_refused_cleanly(name, data):
    t0 = time.monotonic()
    try:
        UPLOADS[name](data)
    except ALLOWED as exc:
        assert str(exc) and "\n" not in str(exc).strip()
    assert time.monotonic() - t0 < 2.0


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
