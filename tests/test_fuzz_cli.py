"""The CLI never shows a traceback, never hangs past its work budget and never prints NaN, infinity or an
impossible negative: every bad value exits 2 with one line naming the flag as typed.

The regression cases are the examples of a fuzz pass with careless and hostile input (one per root
cause); the hypothesis test then throws hostile values at every flag of every subcommand.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cli.common
from cli.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hostile")
    f = {
        "fifo": d / "fifo",
        "deep": d / "deep.json",
        "latin1_json": d / "latin1.json",
        "bom_json": d / "bom.json",
        "latin1_csv": d / "latin1.csv",
        "bigfield_csv": d / "bigfield.csv",
        "inf_price": d / "inf.csv",
        "big_tokens": d / "big_tokens.csv",
        "heads": d / "heads.json",
        "metrics": d / "metrics.txt",
        "dir": d,
    }
    f["metrics"].write_text("vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n")
    os.mkfifo(f["fifo"])
    f["deep"].write_text("[" * 100_000 + "]" * 100_000)
    f["latin1_json"].write_bytes(b'{"_name_or_path": "caf\xe9", "hidden_size": 64}')
    base = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "intermediate_size": 11008,
        "max_position_embeddings": 131072,
    }
    f["bom_json"].write_bytes(b"\xef\xbb\xbf" + json.dumps(base).encode())
    header = "gpu,provider,kind,usd_per_gpu_hour,source,as_of\n"
    f["latin1_csv"].write_bytes(header.encode() + b"h100-sxm,caf\xe9,on-demand,2.0,a source,2025-01-01\n")
    f["bigfield_csv"].write_text(header + "h100-sxm," + "x" * 200_000 + ",on-demand,2,a source,2025-01-01\n")
    f["inf_price"].write_text(header + "h100-sxm,p,on-demand,inf,a source,2025-01-01\n")
    f["big_tokens"].write_text("input_tokens,output_tokens\n9223372036854775808,10\n")
    f["heads"].write_text(json.dumps({**base, "num_attention_heads": 10_000_000_000}))
    return {k: str(v) for k, v in f.items()}


# --- regression: one case per root cause -------------------------------------------------------------

REGRESSIONS = [
    # pydantic ValidationError tracebacks (train and the --train path of recommend skipped the checks)
    (["train", "--tokens", "1e12", "--deadline-days", "nan"], "--deadline-days"),
    (["train", "--tokens", "1e12", "--gpus", "8", "--checkpoint-interval-s", "nan"], "--checkpoint-interval-s"),
    (["train", "--tokens", "1e12", "--deadline-days", "30", "--max-gpus", "32769"], "--max-gpus"),
    (["recommend", "--train", "--tokens", "1e12", "--deadline-days", "30", "--max-gpus", "0"], "--max-gpus"),
    # OverflowError
    (["train", "--tokens", "1e400", "--gpus", "8"], "--tokens"),
    (["recommend", "--rate", "inf"], "--rate"),
    # ZeroDivisionError
    (["recommend", "--train", "--tokens", "1e-320", "--deadline-days", "30"], "--tokens"),
    # ValueError from the random generator
    (["recommend", "--rate", "1", "--seed", "-1"], "--seed"),
    # the wrong flag named, or a flag that does not exist
    (["memory", "--output", "1e23"], "--output"),
    (["memory", "--pp", "1000"], "--pp"),
    (["simulate", "--rate", "1", "--requests", "5000001"], "--requests"),
    (["recommend", "--rate", "1e9"], "--rate"),
    (["train", "--tokens", "1e20", "--gpus", "8"], "--tokens"),
    (["memory", "--seq", "0", "--phase", "train"], "--seq"),
    # empty values are errors, never defaults
    (["memory", "--model", ""], "--model"),
    (["memory", "--gpus-per-node", "0"], "--gpus-per-node"),
    (["train", "--tokens", "1e12", "--layout", ""], "--layout"),
    (["speed", "--draft-model", " "], "--draft-model"),
]


@pytest.mark.parametrize("argv, flag", REGRESSIONS, ids=[" ".join(a) for a, _ in REGRESSIONS])
def test_bad_values_exit_2_naming_the_flag(argv, flag):
    rc, out, err = run_cli(argv)
    assert rc == 2, (rc, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"argument {flag}" in err, err


@pytest.mark.parametrize(
    "argv, flag, words",
    [
        (["memory", "--model-config", "{fifo}"], "--model-config", "not a regular file"),
        (["memory", "--model-config", "{dir}"], "--model-config", ""),
        (["memory", "--model-config", "{deep}"], "--model-config", "nests 100000 levels"),
        (["memory", "--model-config", "{latin1_json}"], "--model-config", "not UTF-8"),
        (["memory", "--model-config", "{heads}"], "--model-config", "num_attention_heads"),
        (["recommend", "--rate", "1", "--price-file", "{latin1_csv}"], "--price-file", "not UTF-8"),
        (["recommend", "--rate", "1", "--price-file", "{bigfield_csv}"], "--price-file", "not readable CSV"),
        (["recommend", "--rate", "1", "--price-file", "{inf_price}"], "--price-file", "finite"),
        (["recommend", "--rate", "1", "--price-file", "{fifo}"], "--price-file", "not a regular file"),
        (["simulate", "--rate", "1", "--trace", "{bigfield_csv}"], "--trace", ""),
        (["simulate", "--rate", "1", "--trace", "{big_tokens}"], "--trace", "at most 10,000,000"),
        (["simulate", "--rate", "1", "--trace", "{fifo}"], "--trace", "not a regular file"),
        (["diagnose", "--metrics", "{fifo}"], "--metrics", "not a regular file"),
        (["analyses", "import", "{fifo}"], "file", "not a regular file"),
    ],
)
def test_bad_files_exit_2_naming_the_flag(files, argv, flag, words):
    rc, _out, err = run_cli([a.format(**files) for a in argv])
    assert rc == 2 and err.count("\n") == 1 and f"argument {flag}" in err and words in err, err


def test_a_byte_order_mark_is_accepted_as_the_upload_accepts_it(files):
    rc, out, err = run_cli(
        ["memory", "--model-config", files["bom_json"], "--tp", "1", "--input", "1024", "--output", "1024", "--json"]
    )
    assert rc == 0, err
    assert json.loads(out)["model"] == "bom"


def test_a_kv_budget_is_never_negative():
    # Llama 3.1 405B in BF16 (810 GB) on one 80 GB H100: the shortfall is reported, not a negative budget
    rc, out, _err = run_cli(["memory", "--model", "llama-3.1-405b", "--gpus", "1", "--tp", "1", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["fits"] is False
    assert d["kv_budget_bytes_per_gpu"] == 0 and d["shortfall_bytes_per_gpu"] > 700e9


def test_no_nan_or_infinity_is_written_as_null(monkeypatch):
    # a result that is not finite is exit 2 naming the key, never "null"
    rc, out, _err = run_cli(["memory", "--json"])
    assert rc == 0 and "null" not in out.replace('"reason": null', "")
    with pytest.raises(SystemExit) as e, contextlib.redirect_stderr(io.StringIO()) as buf:
        cli.common.emit({"a": {"b": [1.0, float("nan")]}}, True, "")
    assert e.value.code == 2 and "a.b[1]" in buf.getvalue()


def test_json_piped_into_head_is_not_a_traceback():
    p = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "models", "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p.stdout.close()  # the reader has gone before the first write, as `| head -0` does
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_long_simulation_stops_on_its_budget(monkeypatch):
    monkeypatch.setattr(cli.common, "CLI_SIM_MAX_WALL_S", 0.5)
    rc, _out, err = run_cli(
        ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1", "--rate", "50", "--requests", "5000000"]
    )
    assert rc == 2 and "stopped after" in err and "simulate fewer requests" in err, err


# --- fuzz: hostile values at every flag of every subcommand -----------------------------------------

BASE = {
    "memory": ["memory", "--model", "llama-3.1-8b", "--json"],
    "speed": ["speed", "--model", "llama-3.1-8b", "--json"],
    "simulate": [
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpus",
        "1",
        "--tp",
        "1",
        "--rate",
        "2",
        "--requests",
        "30",
        "--json",
    ],
    "train": ["train", "--model", "llama-3.1-8b", "--tokens", "1e9", "--gpus", "8", "--json"],
    "recommend": [
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "1",
        "--requests",
        "20",
        "--max-simulations",
        "1",
        "--gpus-allowed",
        "h100-sxm",
        "--json",
    ],
    "next-experiment": [
        "next-experiment",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "1",
        "--requests",
        "20",
        "--max-simulations",
        "1",
        "--gpus-allowed",
        "h100-sxm",
        "--points-per-side",
        "1",
        "--json",
    ],
    "models": ["models", "--json"],
    "gpus": ["gpus", "--json"],
    "diagnose": ["diagnose", "--metrics", "{metrics}", "--json"],
    "video": ["video", "--rate", "5", "--videos", "40", "--json"],
}
HOSTILE = [
    "",
    " ",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "-1e400",
    "1e-320",
    "0",
    "-0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "17",
    "64",
    "1024",
    "32769",
    "100001",
    "5000001",
    "9223372036854775808",
    "1e23",
    "1.5",
    "abc",
    "llama-3.1-8x",
    "h100",
    "fp4",
    "1,2,3",
    "8,1,1",
    "0,0,0",
    "../../etc/passwd",
    "{fifo}",
    "{deep}",
    "{latin1_json}",
    "{bom_json}",
    "{bigfield_csv}",
    "{inf_price}",
    "{big_tokens}",
    "{heads}",
    "{dir}",
    "/dev/zero",
    "![x](http://e.example/x.png)",
]
NUMERIC_SUFFIXES = (
    "_bytes",
    "_bytes_per_gpu",
    "_s",
    "_usd",
    "_usd_per_hour",
    "_tokens",
    "_per_s",
    "_params",
    "_frac",
    "_share",
    "gpus",
    "_count",
    "_per_token",
)


def _flags(sub: str) -> list[str]:
    parser = build_parser()
    for a in parser._actions:
        if hasattr(a, "choices") and isinstance(a.choices, dict) and sub in a.choices:
            return sorted(
                o for act in a.choices[sub]._actions for o in act.option_strings if o.startswith("--") and o != "--help"
            )
    return []


FLAGS = {sub: _flags(sub) for sub in BASE}


def _check_numbers(x, key=""):
    if isinstance(x, float):
        assert math.isfinite(x), key
    if isinstance(x, (int, float)) and not isinstance(x, bool) and key.endswith(NUMERIC_SUFFIXES):
        assert x >= 0, (key, x)
    if isinstance(x, dict):
        for k, v in x.items():
            _check_numbers(v, str(k))
    if isinstance(x, list):
        for v in x:
            _check_numbers(v, key)


@st.composite
def invocations(draw):
    sub = draw(st.sampled_from(sorted(BASE)))
    argv = list(BASE[sub])
    for _ in range(draw(st.integers(1, 2))):
        if not FLAGS[sub]:
            break
        flag = draw(st.sampled_from(FLAGS[sub]))
        value = draw(
            st.one_of(
                st.sampled_from(HOSTILE),
                st.integers(-(10**20), 10**20).map(str),
                st.floats(allow_nan=True, allow_infinity=True).map(repr),
                st.text(max_size=12),
            )
        )
        argv += [flag, value] if not flag.startswith(("--json", "--train", "--qlora", "--no-")) else [flag]
    return argv


@settings(
    max_examples=int(os.environ.get("RABIT_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=os.environ.get("RABIT_FUZZ_RANDOM") is None,
    suppress_health_check=list(HealthCheck),
)
@given(argv=invocations())
def test_fuzz_every_subcommand(files, argv, monkeypatch_module):
    argv = [a.format(**files) if a.startswith("{") and a.endswith("}") and a[1:-1] in files else a for a in argv]
    t0 = time.monotonic()
    rc, out, err = run_cli(argv)
    # no hang past the work budget: a search stops on its budget, each simulation on its own
    assert time.monotonic() - t0 < FUZZ_BUDGET_S + HANG_SLACK_S, (argv, time.monotonic() - t0)
    assert "Traceback" not in err and "Traceback" not in out
    if rc == 0:
        if "--json" in argv:
            _check_numbers(json.loads(out))
        assert "nan" not in out.lower().split() and "inf" not in out.lower().split()
    else:
        assert rc == 2, (argv, rc, err)
        assert err.count("\n") == 1 and err.startswith("rabit"), (argv, err)


#: Every fuzzed simulation and search runs under this budget [s]; an invocation that takes longer than it plus
#: HANG_SLACK_S (the CLI's own start, a check's granularity, a loaded machine) counts as a hang.
FUZZ_BUDGET_S = 3.0
HANG_SLACK_S = 12.0


@pytest.fixture(scope="module")
def monkeypatch_module():
    """Every fuzzed simulation and search runs under a short budget: a hang past it is a failure, not a wait."""
    mp = pytest.MonkeyPatch()
    mp.setattr(cli.common, "CLI_SIM_MAX_WALL_S", FUZZ_BUDGET_S)
    mp.setattr(cli.common, "CLI_SEARCH_MAX_WALL_S", FUZZ_BUDGET_S)
    yield mp
    mp.undo()


def _subcommands() -> dict[str, list[str]]:
    parser = build_parser()
    for a in parser._actions:
        if hasattr(a, "choices") and isinstance(a.choices, dict):
            out = {}
            for name, sub in a.choices.items():
                nested = [x for x in sub._actions if hasattr(x, "choices") and isinstance(x.choices, dict)]
                if nested:  # e.g. rabit analyses list|show|...: each of its own subcommands
                    for n2, s2 in nested[0].choices.items():
                        out[f"{name} {n2}"] = sorted(
                            o for act in s2._actions for o in act.option_strings if o.startswith("--") and o != "--help"
                        )
                else:
                    out[name] = sorted(
                        o for act in sub._actions for o in act.option_strings if o.startswith("--") and o != "--help"
                    )
            return out
    return {}


ALL_FLAGS = _subcommands()


def test_every_subcommand_is_known_to_the_fuzz():
    assert {"memory", "speed", "simulate", "train", "recommend", "next-experiment", "models", "gpus"} <= set(ALL_FLAGS)
    assert {"recommend", "next-experiment"} <= set(BASE)  # the searches are fuzzed end to end, under a budget


@settings(
    max_examples=int(os.environ.get("RABIT_FUZZ_EXAMPLES", "150")) * 2,
    deadline=None,
    derandomize=os.environ.get("RABIT_FUZZ_RANDOM") is None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_fuzz_every_flag_of_every_subcommand_parses_or_exits_2(data):
    """Argument parsing of every subcommand (the slow ones too): a value is taken, or exit 2 with one line."""
    sub = data.draw(st.sampled_from(sorted(ALL_FLAGS)))
    argv = sub.split()
    flags = ALL_FLAGS[sub]
    if flags:
        flag = data.draw(st.sampled_from(flags))
        value = data.draw(
            st.one_of(
                st.sampled_from(HOSTILE),
                st.integers(-(10**20), 10**20).map(str),
                st.floats(allow_nan=True, allow_infinity=True).map(repr),
                st.text(max_size=12),
            )
        )
        argv += [flag, value]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code in (0, 2), (argv, exc.code)
            if exc.code == 2:
                assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("rabit"), (argv, err.getvalue())


# --- the searches at the edges of their valid inputs: a result or a budget stop, never past the budget ---

#: Valid values at and inside the edges of each search flag's domain (core.base.limits.FLAG_DOMAINS).
SEARCH_VALUES = {
    "--rate": ["1e-6", "0.5", "10", "1000", "1e6"],
    "--requests": ["20", "2000", "50000"],
    "--max-simulations": ["1", "16", "64"],
    "--input": ["1", "1000", "100000", "10000000"],
    "--output": ["1", "250", "100000", "10000000"],
    "--p95-ttft-s": ["1e-6", "2", "1e6"],
    "--p95-e2e-s": ["1e-6", "20", "1e6"],
    "--model": ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"],
    "--gpus-allowed": ["h100-sxm", "h100-sxm,h200-sxm"],
}


@settings(
    max_examples=int(os.environ.get("RABIT_FUZZ_SEARCH_EXAMPLES", "12")),
    deadline=None,
    derandomize=os.environ.get("RABIT_FUZZ_RANDOM") is None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_fuzz_the_searches_at_the_edges_of_their_inputs(monkeypatch_module, data):
    """recommend and next-experiment with valid but heavy inputs (up to 64 finalists x 50,000 requests, contexts of
    10M tokens, the whole catalog): a result or exit 2 with one line, within the search budget."""
    sub = data.draw(st.sampled_from(["recommend", "next-experiment"]))
    argv = [sub, "--json"]
    for flag in data.draw(st.lists(st.sampled_from(sorted(SEARCH_VALUES)), min_size=2, max_size=5, unique=True)):
        argv += [flag, data.draw(st.sampled_from(SEARCH_VALUES[flag]))]
    if "--rate" not in argv:
        argv += ["--rate", "10"]
    if sub == "next-experiment":
        argv += ["--points-per-side", data.draw(st.sampled_from(["1", "5"]))]
    t0 = time.monotonic()
    rc, out, err = run_cli(argv)
    assert time.monotonic() - t0 < FUZZ_BUDGET_S + HANG_SLACK_S, (argv, time.monotonic() - t0)
    assert "Traceback" not in err and "Traceback" not in out
    if rc == 0:
        _check_numbers(json.loads(out))
    else:
        assert rc == 2 and err.count("\n") == 1 and err.startswith("rabit"), (argv, err)
