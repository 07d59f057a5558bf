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
        # the second pass's input classes: non-finite numbers inside files, text and decimals where a count is
        # meant, traces past the context, a column given twice, a crafted export
        "nan_metrics": d / "nan.txt",
        "nan_csv": d / "nan.csv",
        "nan_trace": d / "nan_trace.csv",
        "long_trace": d / "long_trace.csv",
        "dup_trace": d / "dup_trace.csv",
        "text_count_config": d / "text_count.json",
        "decimal_count_config": d / "decimal_count.json",
        "inf_config": d / "inf_config.json",
        "bool_assumption_config": d / "bool_assumption.json",
        "crafted_export": d / "export.json",
        "nan_run": d / "nan_run.json",
    }
    f["nan_metrics"].write_text("vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\n")
    f["nan_csv"].write_text("timestamp_s,metric,value\n0,vllm:num_requests_running,nan\n")
    f["nan_trace"].write_text("input_tokens,output_tokens\nnan,10\n")
    f["long_trace"].write_text("input_tokens,output_tokens\n200000,10\n")
    f["dup_trace"].write_text("input_tokens,output_tokens,input_tokens\n100,10,5000\n")
    arch = {
        "slug": "x",
        "name": "x",
        "hidden_size": 4096,
        "num_layers": "10000000000",
        "num_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
    }
    f["text_count_config"].write_text(json.dumps({"custom_model": arch, "phase": "train"}))
    f["decimal_count_config"].write_text(json.dumps({"custom_model": {**arch, "num_layers": 1e10}, "batch": 32.0}))
    f["inf_config"].write_text('{"workload": {"rate_per_s": Infinity, "duration_s": 1e-300}}')
    f["bool_assumption_config"].write_text('{"assumptions": {"mbu": true}}')
    f["crafted_export"].write_text(
        json.dumps({"format": "rabit-analysis/1", "name": {"a": 1}, "owner": [1], "revisions": [{"config": "x"}]})
    )
    f["nan_run"].write_text(
        '{"completed": 10, "total_input_tokens": 100, "total_output_tokens": 10, "median_ttft_ms": NaN}'
    )
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
    "analyses save": ["analyses", "save", "--name", "fuzzed", "--model", "llama-3.1-8b", "--tp", "1", "--json"],
    "analyses import": ["analyses", "import", "{crafted_export}", "--json"],
    "calibrate add": ["calibrate", "add", "--analysis", "nope", "--file", "{nan_run}", "--json"],
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
    "{nan_metrics}",
    "{nan_csv}",
    "{nan_trace}",
    "{long_trace}",
    "{dup_trace}",
    "{text_count_config}",
    "{decimal_count_config}",
    "{inf_config}",
    "{bool_assumption_config}",
    "{crafted_export}",
    "{nan_run}",
    ",,,",
    "1e10",
    "32.0",
    "true",
    "name\nwith a line break",
    "bell\x07",
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
    *outer, last = sub.split()
    for word in outer:  # a nested subcommand (analyses save): its own parser
        parser = next(a.choices[word] for a in parser._actions if isinstance(getattr(a, "choices", None), dict))
    for a in parser._actions:
        if hasattr(a, "choices") and isinstance(a.choices, dict) and last in a.choices:
            return sorted(
                o
                for act in a.choices[last]._actions
                for o in act.option_strings
                if o.startswith("--") and o != "--help"
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
        flag = draw(st.sampled_from([f for f in FLAGS[sub] if f != "--analysis"] or FLAGS[sub]))
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


# --- a config file's fields: the checks every flag gets, the file and the field named ------------------------

#: What a careless or hostile config file puts where a number is meant (texts, decimals, booleans, non-finite
#: literals, overflowing and negative numbers), written as raw JSON.
CONFIG_VALUES = ['"32"', "32.0", "1e10", "true", "null", "NaN", "Infinity", "-Infinity", "1e400", "-1", "0", "1e308"]
#: Config fields (top level and group.field) the subcommands read from ``--config``.
CONFIG_FIELDS = [
    *("batch", "tp", "pp", "input_tokens", "output_tokens", "block_size", "prefix_cache_frac", "seq_len"),
    *("micro_batch", "global_batch_tokens", "train_tokens", "spec_k", "lora_rank", "gpus_per_node", "nodes"),
    *("workload.rate_per_s", "workload.num_requests", "workload.duration_s", "workload.max_batch", "workload.seed"),
    *("workload.kv_pool_tokens", "targets.max_gpus", "targets.deadline_days", "training.checkpoint_interval_s"),
    *("custom_model.num_layers", "custom_model.num_heads", "custom_model.hidden_size", "assumptions.mbu"),
]
CONFIG_RUNS = {
    "memory": ["memory"],
    "speed": ["speed"],
    "simulate": ["simulate", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1", "--rate", "1", "--requests", "30"],
    "train": ["train", "--tokens", "1e9", "--gpus", "8"],
}


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    sub=st.sampled_from(sorted(CONFIG_RUNS)), field=st.sampled_from(CONFIG_FIELDS), raw=st.sampled_from(CONFIG_VALUES)
)
def test_fuzz_strings_floats_and_non_finite_numbers_in_a_config_file(
    tmp_path_factory, monkeypatch_module, sub, field, raw
):
    from core.catalog import model

    group, _, name = field.rpartition(".")
    if group == "custom_model":
        arch = model("llama-3.1-8b").model_dump()
        body = json.dumps({"custom_model": arch}).replace(f'"{name}": {arch[name]}', f'"{name}": {raw}')
    else:
        body = "{" + (f'"{group}": {{"{name}": {raw}}}' if group else f'"{name}": {raw}') + "}"
    f = tmp_path_factory.mktemp("cfg") / "cfg.json"
    f.write_text(body)
    t0 = time.monotonic()
    rc, out, err = run_cli([*CONFIG_RUNS[sub], "--config", str(f), "--json"])
    assert time.monotonic() - t0 < FUZZ_BUDGET_S + HANG_SLACK_S, (sub, field, raw)
    assert "Traceback" not in err
    if rc == 0:
        _check_numbers(json.loads(out))
    else:
        assert rc == 2 and err.count("\n") == 1, err
        assert "--config" in err or "argument --" in err, err  # the file (and its field), or the flag it fills
    if raw in ('"32"', "true", "NaN", "Infinity", "-Infinity", "1e400"):
        assert rc == 2, (sub, field, raw, out[:200])  # a text, a boolean or a non-finite number is never taken
    if raw in ("32.0", "1e10") and field not in FLOAT_FIELDS:
        assert rc == 2, (sub, field, raw, out[:200])  # nor a decimal where a count is meant


#: The config fields above that hold a real number (a decimal there is a number like any other).
FLOAT_FIELDS = frozenset(
    {
        *("prefix_cache_frac", "train_tokens", "workload.rate_per_s", "workload.duration_s", "targets.deadline_days"),
        *("training.checkpoint_interval_s", "assumptions.mbu"),
    }
)


# --- crafted exports: imported whole or refused whole, naming the field --------------------------------------


def _export() -> dict:
    rc, out, err = run_cli(["analyses", "save", "--name", "base", "--model", "llama-3.1-8b", "--tp", "1", "--json"])
    aid = json.loads(out)["id"]
    rc, out, err = run_cli(["analyses", "export", aid])
    assert rc == 0, err
    return json.loads(out)


def _paths(x, prefix=()):
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, (*prefix, i))


EXPORT_VALUES = st.one_of(
    st.sampled_from([None, True, 0, -1, 1e308, "", "x" * 300, "![x](http://e.example)", "a\x1bb", {}, [], {"a": 1}]),
    st.text(max_size=8),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_crafted_exports(tmp_path_factory, data):
    """An export with one part replaced, dropped or added: imported (and then readable), or exit 2 with one line
    naming it, and nothing written by a refused import."""
    ex = _export()
    paths = [p for p in _paths(ex) if p]
    path = data.draw(st.sampled_from(paths))
    how = data.draw(st.sampled_from(["replace", "drop", "add"]))
    obj = ex
    for k in path[:-1]:
        obj = obj[k]
    if how == "replace":
        obj[path[-1]] = data.draw(EXPORT_VALUES)
    elif how == "drop":
        del obj[path[-1]]
    elif isinstance(obj, dict):
        obj["unexpected"] = data.draw(EXPORT_VALUES)
    f = tmp_path_factory.mktemp("export") / "export.json"
    f.write_text(json.dumps(ex))
    before = json.loads(run_cli(["analyses", "list", "--json"])[1])["analyses"]
    rc, out, err = run_cli(["analyses", "import", str(f), "--json"])
    assert "Traceback" not in err
    after = json.loads(run_cli(["analyses", "list", "--json"])[1])["analyses"]
    if rc == 0:
        new = json.loads(out)["id"]
        rc2, shown, err2 = run_cli(["analyses", "show", new, "--json"])
        assert rc2 == 0, err2  # what was imported can be read back
        assert len(after) == len(before) + 1
    else:
        assert rc == 2 and err.count("\n") == 1 and "argument file" in err, err
        assert after == before  # a refused import writes nothing


def test_markup_and_odd_text_in_a_name_or_note_is_kept_as_text():
    name, note = "![x](http://e.example/x.png) **b** <img src=x>", "two\nlines\twith a tab"
    rc, out, err = run_cli(
        ["analyses", "save", "--name", name, "--note", note, "--model", "llama-3.1-8b", "--tp", "1", "--json"]
    )
    assert rc == 0, err
    shown = json.loads(run_cli(["analyses", "show", json.loads(out)["id"], "--json"])[1])
    assert shown["name"] == name and shown["note"] == note  # data, exactly as typed; pages show it as text
