"""``--assume``, ``--bound`` and ``--config`` on ``rabit analyses save|show`` and ``rabit calibrate add|show``
(issue 9, section 5): the same checks and exit 2 as the estimate subcommands; ``--json`` keeps its keys and
gains ``ranges`` and ``range_basis``. The management subcommands estimate nothing and take none of them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from clirun import fails, run

from cli.main import build_parser
from core.base import Assumptions
from core.config import RabitConfig

FIX = Path(__file__).resolve().parent / "fixtures" / "vllm_bench_serve_llama-3.1-8b_h100.json"
BASIS = "heuristic range from the assumption bounds"
SERVING = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--batch", "16"]


def _save(capsys, *extra: str) -> str:
    return run(capsys, "analyses", "save", "--name", "8B", *SERVING, *extra, "--json")["id"]


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_which_analyses_and_calibrate_subcommands_take_the_flags():
    top = _subparsers(build_parser())
    want = {
        ("analyses", "save"): {"assume", "bound", "config"},
        ("analyses", "show"): {"assume", "bound"},
        ("calibrate", "add"): {"assume", "bound"},
        ("calibrate", "show"): {"assume", "bound"},
    }
    for group in ("analyses", "calibrate"):
        for name, sub in _subparsers(top[group]).items():
            dests = {a.dest for a in sub._actions} & {"assume", "bound", "config"}
            assert dests == want.get((group, name), set()), (group, name)


# --- analyses save -------------------------------------------------------------------------------------


def test_save_from_a_config_file_with_flags_overriding_and_assumptions(tmp_path, capsys):
    # the dashboard's file: a training config (fields no save flag carries) with its own assumptions
    file_cfg = RabitConfig(
        model="qwen3-32b", gpu="h100-sxm", gpus_per_node=8, tp=8, batch=4, phase="train", zero=3, seq_len=8192
    ).model_copy(update={"assumptions": Assumptions().with_(mfu_train=0.3)})
    f = tmp_path / "rabit-config.json"
    f.write_text(file_cfg.model_dump_json())
    aid = run(
        capsys, "analyses", "save", "--name", "from file", "--config", str(f), "--batch", "2", "--assume", "mbu=0.5",
        "--json",
    )["id"]  # fmt: skip
    c = run(capsys, "analyses", "show", aid, "--json")["config"]
    assert (c["model"], c["tp"], c["phase"], c["zero"], c["seq_len"]) == ("qwen3-32b", 8, "train", 3, 8192)
    assert c["batch"] == 2  # the flag wins over the file's 4
    assert c["assumptions"]["mfu_train"] == 0.3 and c["assumptions"]["mbu"] == 0.5  # the file's, then --assume


def test_save_at_a_bound_saves_every_assumption_there(capsys):
    aid = _save(capsys, "--bound", "low")
    saved = run(capsys, "analyses", "show", aid, "--json")["config"]["assumptions"]
    assert saved == json.loads(Assumptions().at("low").model_dump_json())
    assert saved != json.loads(Assumptions().model_dump_json())


@pytest.mark.parametrize("bad, word", [("nope=1", "nope"), ("mbu=7", "mbu"), ("gpu_mem_util=abc", "gpu_mem_util")])
def test_save_refuses_a_bad_assumption_naming_it_and_saves_nothing(bad, word, capsys):
    err = fails(capsys, "analyses", "save", "--name", "x", *SERVING, "--assume", bad)
    assert word in err and "--assume" in err
    assert run(capsys, "analyses", "list", "--json")["analyses"] == []


def test_save_refuses_an_unreadable_config_file_naming_the_flag(tmp_path, capsys):
    bad = tmp_path / "cfg.json"
    bad.write_text("{not json")
    assert "--config" in fails(capsys, "analyses", "save", "--name", "x", "--config", str(bad))


# --- analyses show -------------------------------------------------------------------------------------


def test_show_keeps_its_keys_and_adds_the_headline_with_ranges(capsys):
    from store import Store

    aid = _save(capsys)
    old = set(Store().get(aid).as_json())
    shown = run(capsys, "analyses", "show", aid, "--json")
    assert old <= set(shown) and {"headline", "ranges", "range_basis"} <= set(shown)
    assert shown["range_basis"] == BASIS
    keys = ("prefill_s", "decode_step_s", "tokens_per_s", "e2e_s", "max_sequences", "total_bytes_per_gpu")
    assert set(shown["headline"]) == set(keys) == set(shown["ranges"])
    for k in keys:
        r = shown["ranges"][k]
        assert r["low"] <= shown["headline"][k] <= r["high"], k
    # the same numbers the estimate subcommands give for the saved config
    speed = run(capsys, "speed", "--analysis", aid, "--json")
    mem = run(capsys, "memory", "--analysis", aid, "--json")
    assert shown["headline"]["decode_step_s"] == pytest.approx(speed["decode_step_s"], rel=1e-9)
    assert shown["headline"]["e2e_s"] == pytest.approx(speed["e2e_s"], rel=1e-9)
    assert shown["headline"]["total_bytes_per_gpu"] == pytest.approx(mem["total_bytes_per_gpu"], rel=1e-9)


def test_show_evaluates_the_headline_at_the_assumptions_given(capsys):
    aid = _save(capsys)
    base = run(capsys, "analyses", "show", aid, "--json")["headline"]
    slow = run(capsys, "analyses", "show", aid, "--assume", "mbu=0.3", "--json")["headline"]
    speed = run(capsys, "speed", "--analysis", aid, "--assume", "mbu=0.3", "--json")
    assert slow["decode_step_s"] == pytest.approx(speed["decode_step_s"], rel=1e-9)
    assert slow["decode_step_s"] > base["decode_step_s"]  # less of the bandwidth: a slower decode step
    low = run(capsys, "analyses", "show", aid, "--bound", "low", "--json")
    assert low["headline"]["decode_step_s"] > base["decode_step_s"]  # the pessimistic bound
    assert low["config"]["assumptions"] == json.loads(Assumptions().model_dump_json())  # the stored config as saved


def test_show_of_a_training_analysis_has_the_training_headline(tmp_path, capsys):
    f = tmp_path / "train.json"
    f.write_text(
        RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=8, tp=1, phase="train").model_dump_json()
    )
    aid = run(capsys, "analyses", "save", "--name", "t", "--config", str(f), "--json")["id"]
    shown = run(capsys, "analyses", "show", aid, "--json")
    assert set(shown["headline"]) == {"step_s", "mfu", "runtime_s", "gpu_hours", "cost_usd"}
    hi = run(capsys, "analyses", "show", aid, "--bound", "high", "--json")["headline"]
    assert hi["step_s"] < shown["headline"]["step_s"] and hi["mfu"] > shown["headline"]["mfu"]


@pytest.mark.parametrize("bad, word", [("nope=1", "nope"), ("mbu=7", "mbu")])
def test_show_refuses_a_bad_assumption_naming_it(bad, word, capsys):
    aid = _save(capsys)
    err = fails(capsys, "analyses", "show", aid, "--assume", bad)
    assert word in err and "--assume" in err


# --- calibrate -----------------------------------------------------------------------------------------


def test_calibrate_predictions_at_the_assumptions_given_with_ranges(capsys):
    aid = _save(capsys)
    added = run(capsys, "calibrate", "add", "--analysis", aid, "--file", str(FIX), "--bound", "low", "--json")
    assert {"analysis", "added", "runs"} <= set(added) and added["range_basis"] == BASIS
    base = run(capsys, "calibrate", "show", "--analysis", aid, "--json")
    assert {"analysis", "gpu", "rule", "metrics", "excluded", "ranges", "range_basis"} <= set(base)
    itl = "itl_s.p50"
    pred = base["metrics"][itl]["runs"][0]["predicted"]
    r = base["ranges"][f"metrics.{itl}.runs.0.predicted"]
    assert r["low"] < pred < r["high"]
    for name, m in base["metrics"].items():
        for i, rr in enumerate(m["runs"]):
            rg = base["ranges"][f"metrics.{name}.runs.{i}.predicted"]
            assert rg["low"] <= rr["predicted"] <= rg["high"], name
    low = run(capsys, "calibrate", "show", "--analysis", aid, "--bound", "low", "--json")
    assert low["metrics"][itl]["runs"][0]["predicted"] > pred  # the pessimistic bound: slower decode
    assert low["metrics"][itl]["factor"] < base["metrics"][itl]["factor"]  # so the measured run needs less factor
    # add --bound low predicted what show --bound low compares against
    assert added["predicted"][0][itl] == pytest.approx(low["metrics"][itl]["runs"][0]["predicted"], rel=1e-12)
    slow = run(capsys, "calibrate", "show", "--analysis", aid, "--assume", "mbu=0.3", "--json")
    assert slow["metrics"][itl]["runs"][0]["predicted"] > pred


@pytest.mark.parametrize("cmd", ["add", "show"])
@pytest.mark.parametrize("bad, word", [("nope=1", "nope"), ("mbu=7", "mbu")])
def test_calibrate_refuses_a_bad_assumption_naming_it(cmd, bad, word, capsys):
    aid = _save(capsys)
    files = ["--file", str(FIX)] if cmd == "add" else []
    err = fails(capsys, "calibrate", cmd, "--analysis", aid, *files, "--assume", bad)
    assert word in err and "--assume" in err
    assert run(capsys, "calibrate", "show", "--analysis", aid, "--json")["metrics"] == {}  # nothing attached
