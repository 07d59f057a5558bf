"""The second fuzz pass's reproductions, one per root cause, each in its own throwaway store (conftest's
RABIT_DATA_DIR): every way in (flags, a config file, a link, an upload, a saved analysis, an import) goes
through the same domain checks, every file's numbers are finite, user text is text, a link names what it
cannot honour, and whatever ``export`` writes ``import`` reads.

The pattern behind the thirteen: each way in checked a different subset of the domains, and values read from
files skipped the finiteness checks that flags get. Each test below is one of the reproductions as filed.
"""

from __future__ import annotations

import base64
import json
import re
import time
import tomllib
import zlib
from pathlib import Path

import pytest
from clirun import fails, run
from pagecheck import impossible
from streamlit.testing.v1 import AppTest

from core.catalog import model

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
FIXTURE = ROOT / "tests" / "fixtures" / "vllm_bench_serve_llama-3.1-8b_h100.json"
SMALL = ("--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1")


def blob(obj=None, raw: bytes | None = None, tail: bytes = b"") -> str:
    data = raw if raw is not None else json.dumps(obj).encode()
    return "z" + base64.urlsafe_b64encode(zlib.compress(data, 9) + tail).decode().rstrip("=")


def page(params: dict[str, str], name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(f"../pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_errors(at: AppTest) -> str:
    """The error boxes as a visitor reads them (markdown escapes removed)."""
    return re.sub(r"\\(.)", r"\1", " | ".join(e.value for e in at.error))


def _save(capsys, *extra: str) -> str:
    return run(capsys, "analyses", "save", "--name", "an analysis", *SMALL, *extra, "--json")["id"]


# --- 1: the wheel holds every package the CLI imports -------------------------------------------------------


def test_1_connectors_ship_in_the_wheel():
    # `pip install .` then `rabit diagnose --prometheus http://127.0.0.1:1 --timeout-s 2` is run end to end by
    # tests/test_packaging.py; here: the package list names connectors (and every other package the CLI imports)
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pkg in ("core", "cli", "connectors", "executors", "store", "dashboard", "pages"):
        assert f"{pkg}*" in include, pkg


# --- 2: NaN in telemetry ------------------------------------------------------------------------------------


def test_2_nan_in_telemetry_is_refused_with_its_line_and_never_stored(capsys, tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\n")
    err = fails(capsys, "diagnose", "--metrics", str(m))
    assert "argument --metrics" in err and "line 1" in err and "not a finite number" in err
    aid = _save(capsys)
    err = fails(capsys, "analyses", "attach-telemetry", aid, "--file", str(m))
    assert "argument --file" in err and "line 1" in err
    assert run(capsys, "analyses", "show", aid, "--json")["telemetry"] == []  # nothing stored by a refused file
    assert "no telemetry attached" in fails(capsys, "diagnose", "--analysis", aid)


def test_2_a_nan_stored_by_an_earlier_version_reads_as_a_sample_with_no_value(capsys):
    from store import Store

    aid = _save(capsys)
    # the stored form earlier versions wrote for a NaN sample: its value as null
    old = {"format": "prometheus", "name": "m.txt", "samples": [["vllm:num_requests_running", {}, None, None]]}
    old["samples"].append(["vllm:num_requests_waiting", {}, 0.0, None])
    Store().add_telemetry(aid, "prometheus", old)
    out = run(capsys, "diagnose", "--analysis", aid, "--json")
    missing = {n["rule"]: n["missing"] for n in out["not_evaluated"]}
    assert "vllm:num_requests_running" in missing["queue_growing"]  # present without a value: not evaluated


def test_2_a_summary_with_no_observations_keeps_prometheus_nan_convention(capsys, tmp_path):
    # a Go exporter's summary before its first observation exposes NaN quantiles: that is not a bad file
    m = tmp_path / "m.txt"
    m.write_text(
        '# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile="0.5"} NaN\n'
        "go_gc_duration_seconds_sum 0\ngo_gc_duration_seconds_count 0\nvllm:num_requests_running 3\n"
    )
    assert run(capsys, "diagnose", "--metrics", str(m), "--json")["fired"] == []


# --- 3: train skipped the model domains --------------------------------------------------------------------


@pytest.mark.parametrize("layers", ["10000000000", 10_000_000_000.0, 1e10])
def test_3_a_config_files_model_with_text_or_decimal_counts_is_refused_at_once(capsys, tmp_path, layers):
    arch = model("llama-3.1-8b").model_dump()
    arch["num_layers"] = layers
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"custom_model": arch, "phase": "train"}))
    for argv in (("train", "--tokens", "1e12", "--gpus", "8"), ("memory",), ("simulate", "--rate", "1")):
        t0 = time.monotonic()
        err = fails(capsys, *argv, "--config", str(f))
        assert time.monotonic() - t0 < 10  # refused, not run for a minute
        assert "argument --config" in err and "custom_model.num_layers" in err, err


def test_3_an_absurd_width_in_a_config_file_is_refused_not_sized(capsys, tmp_path):
    arch = model("llama-3.1-8b").model_dump()
    for v, words in ((1e15, "not a whole number"), (10**15, "above the maximum")):
        arch["hidden_size"] = v
        f = tmp_path / "c.json"
        f.write_text(json.dumps({"custom_model": arch}))
        err = fails(capsys, "train", "--config", str(f), "--tokens", "1e12", "--gpus", "8")
        assert "custom_model.hidden_size" in err and words in err, err


# --- 4: a crafted export ----------------------------------------------------------------------------------


def test_4_an_export_whose_owner_is_an_object_is_refused_naming_the_field(capsys, tmp_path):
    aid = _save(capsys)
    data = json.loads(run_text(capsys, "analyses", "export", aid))
    data["owner"] = {"a": 1}
    f = tmp_path / "e.json"
    f.write_text(json.dumps(data))
    err = fails(capsys, "analyses", "import", str(f))
    assert "argument file" in err and "owner" in err and "not text" in err
    assert [a["id"] for a in run(capsys, "analyses", "list", "--json")["analyses"]] == [aid]  # nothing written


def run_text(capsys, *argv: str) -> str:
    from cli.main import main

    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


# --- 5: a link's model with a float or a text count ------------------------------------------------------


@pytest.mark.parametrize(
    "heads, pages", [(1e10, ("memory", "speed", "serving", "training")), ("10000000000", ("memory",))]
)
def test_5_a_links_model_with_a_float_or_text_count_is_named_on_every_page(clear_cache, heads, pages):
    arch = model("llama-3.1-8b").model_dump()
    arch.update(num_heads=heads)
    for name in pages:
        at = page({"custom_model": blob(arch), "gpus_per_node": "1", "tp": "1"}, name)
        msg = shown_errors(at)
        assert "link parameter custom_model was not used" in msg and "num_heads" in msg, (name, msg)


# --- 6: calibration accepted absurd runs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, words",
    [
        ({"median_ttft_ms": 1e308}, "median_ttft_ms"),
        ({"median_ttft_ms": 1e-320}, "median_ttft_ms"),
        ({"completed": True}, "completed"),
    ],
)
def test_6_an_absurd_benchmark_result_is_refused_and_calibration_still_shows(capsys, tmp_path, change, words):
    aid = _save(capsys)
    good = json.loads(FIXTURE.read_text())
    for i in range(2):  # two good runs, then the absurd one: refused, the calibration still shows
        f = tmp_path / f"good{i}.json"
        f.write_text(json.dumps({**good, "median_ttft_ms": good["median_ttft_ms"] * (1 + i / 10)}))
        run(capsys, "calibrate", "add", "--analysis", aid, "--file", str(f), "--json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, **change}))
    err = fails(capsys, "calibrate", "add", "--analysis", aid, "--file", str(bad))
    assert "argument --file" in err and words in err, err
    shown = run(capsys, "calibrate", "show", "--analysis", aid, "--json")
    assert shown["metrics"]["ttft_s.p50"]["n"] == 2


def test_6_a_template_row_whose_tp_does_not_split_the_heads_is_refused(capsys, tmp_path):
    aid = _save(capsys)
    f = tmp_path / "runs.csv"
    f.write_text(
        "label,model,gpu,gpus,tp,pp,weights,input_tokens,output_tokens,rate_per_s,metric,value\n"
        "r,llama-3.1-8b,h100-sxm,3,3,1,bf16,1000,100,1,ttft_s.p50,0.1\n"
    )
    err = fails(capsys, "calibrate", "add", "--analysis", aid, "--file", str(f))
    assert "row 1" in err and "'tp'" in err and "32 attention heads" in err, err


# --- 7: impossible numbers on pages -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, name",
    [
        ({"model": "llama-3.1-405b", "gpus_per_node": "1", "tp": "1"}, "memory"),
        ({"model": "llama-3.1-405b", "gpus_per_node": "1", "tp": "1"}, "math"),
        ({"spec_method": "draft", "draft_model": "deepseek-v3"}, "speed"),
        ({"workload.rate_per_s": "1e308"}, "serving"),
        ({"assumptions": blob({"failure_rate_per_gpu_hour": 0.0}), "model": "llama-3.1-8b"}, "training"),
    ],
)
def test_7_no_page_shows_an_impossible_number(clear_cache, params, name):
    at = page(params, name)
    for t in at.toggle:  # the derivations too
        if str(t.key or "").startswith("show_math"):
            t.set_value(True)
    at.run()
    assert not impossible(at), impossible(at)
    if "1e308" in params.values():
        assert "workload.rate_per_s" in shown_errors(at)  # refused and named, not computed on


def test_7_the_page_check_sees_each_impossible_number_of_the_report():
    # the check itself: each text the fuzz pass saw on a page is read as impossible, an ordinary page text is not
    from pagecheck import NEGATIVE_SIZE, NON_FINITE, NON_FINITE_IN_PROSE

    for shown in ("-753 GB", "Left for KV cache per GPU: \\-753 GB".replace("\\", "")):
        assert NEGATIVE_SIZE.search(shown), shown
    assert NON_FINITE.search("Break-even acceptance rate: nan")
    assert NON_FINITE_IN_PROSE.search("inf% of the closed-form capacity") and NON_FINITE_IN_PROSE.search("inf days")
    for fine in ("1,024-4,096 tokens", "W − 1.5 GB", "NaN: c > k + 1, it never wins", "TP8 PP1", "nanosecond"):
        assert not (NEGATIVE_SIZE.search(fine) or NON_FINITE_IN_PROSE.search(fine)), fine


# --- 8: traces past the context ------------------------------------------------------------------------


def test_8_a_trace_past_the_context_a_pool_below_one_request_and_duplicate_columns_are_refused(capsys, tmp_path):
    long = tmp_path / "long.csv"
    long.write_text("input_tokens,output_tokens\n200000,10\n")
    err = fails(capsys, "simulate", *SMALL, "--rate", "1", "--requests", "50", "--trace", str(long))
    assert "argument --trace" in err and "row 1" in err and "131,072-token context" in err, err
    err = fails(capsys, "simulate", *SMALL, "--rate", "1", "--requests", "50", "--kv-pool-tokens", "1")
    assert "argument --kv-pool-tokens" in err and "cannot hold one request" in err, err
    dup = tmp_path / "dup.csv"
    dup.write_text("input_tokens,output_tokens,input_tokens\n100,10,5000\n")
    err = fails(capsys, "simulate", *SMALL, "--rate", "1", "--requests", "50", "--trace", str(dup))
    assert "argument --trace" in err and "columns 1 and 3" in err, err


# --- 9: an allowed value that could not be used -------------------------------------------------------------


def test_9_no_failures_means_no_checkpoints_and_no_interruptions(capsys):
    from cli.main import main

    capsys.readouterr()
    rc = main(["train", *SMALL[:2], "--tokens", "1e11", "--gpus", "8", "--assume", "failure_rate_per_gpu_hour=0"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err  # no overflow warning, no "not a finite number"
    d = run(
        capsys,
        "train",
        *SMALL[:2],
        "--tokens",
        "1e11",
        "--gpus",
        "8",
        "--assume",
        "failure_rate_per_gpu_hour=0",
        "--json",
    )
    assert d["mtbf_s"] is None and d["checkpoint_interval_s"] is None  # null: never interrupted, never checkpointed
    assert d["expected_interruptions"] == 0 and d["goodput"] == 1.0 and d["wall_clock_s"] == d["runtime_s"]


# --- 10: markup injection ----------------------------------------------------------------------------------

HOSTILE = "![x](http://e.example/x.png) **b** <img src=x> [click](http://e.example)"


def _live_markup(at: AppTest) -> list[str]:
    """Markdown sources on the page that would render the hostile name as markup (an image, a link, bold)."""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "button", "subheader", "title"):
        for e in getattr(at, kind, ()):
            src = str(getattr(e, "value", "") or getattr(e, "label", ""))
            live = re.sub(r"\\.", "", src)  # what stays markup once every escaped character is text
            if any(s in live for s in ("](http", "**b**", "<img", "![")):
                out.append(f"{kind}: {src[:120]}")
    return out


def test_10_a_hostile_name_is_text_on_the_diagnostics_page(capsys, clear_cache, tmp_path):
    m = tmp_path / "m.txt"
    m.write_text("vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n")
    aid = run(capsys, "analyses", "save", "--name", HOSTILE, *SMALL, "--json")["id"]
    run(capsys, "analyses", "attach-telemetry", aid, "--file", str(m), "--json")
    at = page({"analysis": aid}, "diagnostics")
    assert not _live_markup(at), _live_markup(at)
    assert any("e.example/x.png" in re.sub(r"\\(.)", r"\1", str(c.value)) for c in at.caption)  # shown, as text


@pytest.mark.parametrize("name", ["line one\nline two", "bell\x07", "escape\x1b[31m", "bidi\u202e"])
def test_10_names_are_one_line_of_plain_text(capsys, name):
    err = fails(capsys, "analyses", "save", "--name", name, *SMALL)
    assert "argument --name" in err and ("control character" in err or "line break" in err), err


# --- 11: links changed without a word ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "param, value, words",
    [
        ("custom_model", "zeNrLK83JAQAEXwG8", "null, not an object"),
        ("assumptions", blob({"mbu": True}), "true is not a number"),
        ("assumptions", blob(raw=b'{"mbu": 0.7, "mbu": 0.8}'), "given twice"),
        ("assumptions", blob(raw=b'\xef\xbb\xbf{"mbu": 0.7}'), "byte-order mark"),
        ("assumptions", blob({"mbu": 0.7}, tail=b"extra"), "follow the end of the compressed data"),
    ],
)
def test_11_a_link_object_that_cannot_be_honoured_is_named(param, value, words):
    from core.config import DEFAULT, from_query_report

    cfg, issues = from_query_report({param: value, "batch": "8"})
    assert cfg.batch == 8 and cfg.assumptions == DEFAULT.assumptions and cfg.custom_model is None
    assert len(issues) == 1 and issues[0].param.startswith(param) and words in issues[0].reason, issues


def test_11_a_link_past_a_thousand_parameters_says_it_was_not_used(clear_cache):
    from dashboard import state

    state.guard_query_limits()  # what dashboard.serve does before the server listens
    params = {f"p{i}": "1" for i in range(1200)} | {"tp": "4"}
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    msg = shown_errors(at)
    assert "not used at all" in msg and "1,201 parameters" in msg and "1,000 parameters" in msg, msg


# --- 12: flags ignored or changed silently ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, flag",
    [
        (
            ["train", "--model", "llama-3.1-8b", "--tokens", "1e10", "--gpus", "8", "--global-batch-tokens", "1"],
            "--global-batch-tokens",
        ),
        (["recommend", "--gpus-allowed", ",,,", "--rate", "1"], "--gpus-allowed"),
        (["recommend", "--gpus-allowed", "", "--rate", "1"], "--gpus-allowed"),
        (["simulate", *SMALL, "--arrival", "closed", "--rate", "5"], "--rate"),
        (["simulate", *SMALL, "--rate", "5", "--users", "8"], "--users"),
        (["simulate", *SMALL, "--rate", "5", "--spread", "0.3"], "--spread"),
        (["memory", "--phase", "serve", "--zero", "3"], "--zero"),
        (["memory", "--phase", "train", "--batch", "8"], "--batch"),
        (["speed", "--spec-alpha", "0.5"], "--spec-alpha"),
        (["train", "--model", "llama-3.1-8b", "--tokens", "1e10", "--gpus", "8", "--max-gpus", "64"], "--max-gpus"),
        (["recommend", "--train", "--tokens", "1e12", "--deadline-days", "30", "--rate", "2"], "--rate"),
        (["recommend", "--rate", "2", "--tokens", "1e12"], "--tokens"),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else x,
)
def test_12_a_flag_the_mode_ignores_or_would_change_is_refused(capsys, argv, flag):
    assert f"argument {flag}" in fails(capsys, *argv)


@pytest.mark.parametrize(
    "body, field",
    [
        ('{"workload": {"rate_per_s": Infinity}}', "workload.rate_per_s"),
        ('{"workload": {"duration_s": 1e-300, "num_requests": null}}', "workload.duration_s"),
        ('{"batch": "32"}', "batch"),
        ('{"batch": 32.0}', "batch"),
        ('{"tp": true}', "tp"),
    ],
)
def test_12_a_config_file_value_gets_the_flags_checks_and_names_the_file_and_field(capsys, tmp_path, body, field):
    f = tmp_path / "cfg.json"
    f.write_text(body)
    for argv in (("memory",), ("simulate", *SMALL, "--rate", "1")):
        err = fails(capsys, *argv, "--config", str(f))
        assert "argument --config" in err and str(f) in err and field in err, err


# --- 13: the store's round trip and wording -----------------------------------------------------------------


def test_13_whatever_export_writes_import_reads(capsys, tmp_path):
    aid = _save(capsys)
    big = tmp_path / "big.csv"  # about 2.5 MB of telemetry, as reported
    rows = "".join(f"{t},vllm:num_requests_running,{t % 7}\n" for t in range(80_000))
    big.write_text("timestamp_s,metric,value\n" + rows)
    assert big.stat().st_size > 2_000_000
    run(capsys, "analyses", "attach-telemetry", aid, "--file", str(big), "--json")
    out = tmp_path / "export.json"
    run(capsys, "analyses", "export", aid, "--output", str(out), "--json")
    assert out.stat().st_size < 4 * big.stat().st_size
    new = run(capsys, "analyses", "import", str(out), "--json")["id"]
    from store import Store

    assert len(Store().get(new).telemetry[0]["payload"]["samples"]) == 80_000


def test_13_search_wildcards_match_only_themselves(capsys):
    _save(capsys)
    run(capsys, "analyses", "save", "--name", "100% cached_prefix", *SMALL, "--json")
    for text, n in (("%", 1), ("_", 1), ("cached_p", 1), ("an analysis", 1), ("zzz", 0)):
        assert len(run(capsys, "analyses", "list", "--search", text, "--json")["analyses"]) == n, text


def test_13_messages_name_what_the_user_gave(capsys, tmp_path, monkeypatch):
    import cli.analyses_cmd

    arch = model("llama-3.1-8b").model_dump()
    arch["num_heads"] = "32"
    f = tmp_path / "cfg.json"
    f.write_text(json.dumps({"custom_model": arch}))
    err = fails(capsys, "memory", "--config", str(f))
    assert "argument --config" in err and "custom_model.num_heads" in err and "value num_heads" not in err
    big = tmp_path / "big.json"  # valid JSON over the import's bound: said so, never "is not JSON"
    monkeypatch.setattr(cli.analyses_cmd, "MAX_IMPORT_BYTES", 1000)
    big.write_text(json.dumps({"format": "rabit-analysis/1", "pad": "x" * 2000}))
    err = fails(capsys, "analyses", "import", str(big))
    assert "argument file" in err and "limit is 1,000" in err and "not JSON" not in err, err


def test_13_a_save_that_loses_a_race_without_revision_does_not_name_revision(capsys, monkeypatch):
    from store import Conflict, Store

    aid = _save(capsys)

    def lose(self, analysis_id, config, *, expected_revision, **kw):
        raise Conflict(analysis_id, expected_revision, expected_revision + 1)

    monkeypatch.setattr(Store, "save", lose)
    err = fails(capsys, "analyses", "save", "--analysis", aid, "--batch", "8")
    assert "saved by someone else" in err and "--revision" not in err.split("error:")[1].split("save again")[0]


def test_a_disaggregated_deployment_of_absurd_size_stops_on_its_budget():
    # the pools of a rate near the float limit are tens of millions of instances: building them counts as work,
    # so the simulation stops on its wall-clock budget with the budget's message instead of running for minutes
    from core.base import BudgetExceeded, WorkBudget
    from core.config import RabitConfig
    from core.serving import Layout, PoolLayout, sim_spec, simulate_deployment

    cfg = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
    huge = PoolLayout(instances=50_000_000, gpu="h100-sxm", tp=1, pp=1)
    layout = Layout(mode="disaggregated", prefill=huge, decode=huge)
    t0 = time.monotonic()
    with pytest.raises(BudgetExceeded):
        simulate_deployment(cfg, sim_spec(cfg, num_requests=100), layout, budget=WorkBudget(max_wall_s=0.5))
    assert time.monotonic() - t0 < 30
