"""--assume, --bound and --config on every subcommand, and ranges where a subcommand has estimates
(validate: each case's prediction; diagnose: the analysis's predicted p95s)."""

import argparse
import json
from pathlib import Path

import pytest

from cli.main import build_parser, main
from core.config import RabitConfig

FIX = Path(__file__).parent / "fixtures"
BASIS = "heuristic range from the assumption bounds"

#: One valid invocation of each subcommand that has no store behind it (the analyses and calibrate groups:
#: tests/test_cli_analyses_range_flags.py; the fleet group's plan: tests/test_cli_fleet.py).
INVOCATIONS = {
    "memory": ["memory"],
    "speed": ["speed"],
    "simulate": ["simulate", "--requests", "50"],
    "train": ["train", "--tokens", "1e9", "--gpus", "8"],
    "recommend": ["recommend", "--rate", "1", "--p95-e2e-s", "60", "--gpus-allowed", "h100-sxm"],
    "models": ["models"],
    "gpus": ["gpus"],
    "assumptions": ["assumptions"],
    "validate": ["validate", "--family", "train-papers"],
    "next-experiment": ["next-experiment"],
    "diagnose": ["diagnose", "--metrics", str(FIX / "vllm_metrics.txt")],
    "tune": ["tune"],
    "video": ["video", "--rate", "5"],
}


def _subcommands():
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_estimating_subcommand_takes_the_range_flags():
    subs = _subcommands()
    assert set(INVOCATIONS) == set(subs) - {"analyses", "calibrate", "fleet"}
    for name in INVOCATIONS:
        dests = {a.dest for a in subs[name]._actions}
        assert {"assume", "bound", "config"} <= dests, name


@pytest.mark.parametrize("name", ["models", "gpus", "validate", "diagnose", "assumptions"])
@pytest.mark.parametrize(
    "bad, word", [("nope=1", "nope"), ("mbu=7", "mbu"), ("step_overhead_ms=1e308", "step_overhead_ms")]
)
def test_bad_assume_exits_2_naming_the_assumption(name, bad, word, capsys):
    with pytest.raises(SystemExit) as e:
        main(INVOCATIONS[name] + ["--assume", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert word in err and "--assume" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["models", "gpus", "validate", "diagnose"])
def test_bad_bound_and_unreadable_config_exit_2_naming_the_flag(name, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(INVOCATIONS[name] + ["--bound", "middle"])
    assert e.value.code == 2 and "--bound" in capsys.readouterr().err
    bad = tmp_path / "cfg.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit) as e:
        main(INVOCATIONS[name] + ["--config", str(bad)])
    assert e.value.code == 2 and "--config" in capsys.readouterr().err


def _json(args, capsys):
    capsys.readouterr()
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_models_and_gpus_name_the_config_files_choice(tmp_path, capsys):
    f = tmp_path / "cfg.json"
    f.write_text(RabitConfig(model="qwen3-32b", gpu="mi300x", gpus_per_node=8).model_dump_json())
    assert _json(["models", "--config", str(f)], capsys)["selected"] == "qwen3-32b"
    assert _json(["gpus", "--config", str(f)], capsys)["selected"] == "mi300x"
    plain = _json(["models"], capsys)
    assert set(plain) == {"models"}  # without --config the listing keeps its keys


def test_validate_ranges_straddle_every_prediction(capsys):
    out = _json(["validate", "--family", "train-papers", "--family", "vendor-first-token"], capsys)
    assert out["range_basis"] == BASIS and len(out["ranges"]) == len(out["cases"])
    for c in out["cases"]:
        r = out["ranges"][f"cases.{c['id']}.predicted"]
        assert r["low"] < c["predicted"] < r["high"], c["id"]


def test_validate_at_a_bound_predicts_every_case_there(capsys):
    base = _json(["validate", "--family", "vendor-first-token"], capsys)
    low = _json(["validate", "--family", "vendor-first-token", "--bound", "low"], capsys)
    high = _json(["validate", "--family", "vendor-first-token", "--bound", "high"], capsys)
    for b, lo, hi in zip(base["cases"], low["cases"], high["cases"]):
        # TTFT: the pessimistic bound is slower, the optimistic faster
        assert lo["predicted"] > b["predicted"] > hi["predicted"], b["id"]
        # the one-at-a-time range lies inside every-assumption-at-once
        r = base["ranges"][f"cases.{b['id']}.predicted"]
        assert hi["predicted"] < r["low"] and r["high"] < lo["predicted"], b["id"]
    one = _json(["validate", "--family", "vendor-first-token", "--assume", "mfu_max=0.5"], capsys)
    assert all(o["predicted"] > b["predicted"] for o, b in zip(one["cases"], base["cases"]))


def test_validate_takes_the_assumptions_of_a_config_file(tmp_path, capsys):
    cfg = RabitConfig(assumptions=RabitConfig().assumptions.with_(mfu_max=0.5))
    f = tmp_path / "cfg.json"
    f.write_text(cfg.model_dump_json())
    by_file = _json(["validate", "--family", "vendor-first-token", "--config", str(f)], capsys)
    by_flag = _json(["validate", "--family", "vendor-first-token", "--assume", "mfu_max=0.5"], capsys)
    assert [c["predicted"] for c in by_file["cases"]] == [c["predicted"] for c in by_flag["cases"]]


@pytest.fixture
def cfg_file(tmp_path):
    # half the default rate: the replica (0.55 requests/s of 4,096 + 4,096 tokens at base) well below capacity at
    # every bound, so its latency ranges stay narrow (at 0.5 requests/s the pessimistic mbu and kv_read_bw_eff
    # bounds saturate it, and the p95 TTFT range reaches minutes)
    base = RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1)
    cfg = base.with_(workload=base.workload.with_(rate_per_s=0.25))
    f = tmp_path / "rabit-config.json"
    f.write_text(cfg.model_dump_json())
    return cfg, str(f)


def test_diagnose_with_a_config_file_shows_the_prediction_its_range_and_where_the_measurement_lies(
    cfg_file, tmp_path, capsys
):
    cfg, f = cfg_file
    dump = tmp_path / "m.txt"
    dump.write_text((FIX / "vllm_metrics.txt").read_text())
    out = _json(["diagnose", "--metrics", str(dump), "--config", f], capsys)
    assert out["range_basis"] == BASIS
    for k in ("p95_ttft_s", "p95_itl_s"):
        r = out["ranges"][f"expected.{k}"]
        assert r["low"] < out["expected"][k] < r["high"], k
        m = out["measured"][k]
        side = "below" if m < r["low"] else "above" if m > r["high"] else None
        assert out["outside_range"].get(k) == side, k
    # the fixture's p95 TTFT (0.45 s) is about 3x the 8B prediction on one H100: outside the range, and the
    # divergence rule fires on the same comparison
    assert out["outside_range"]["p95_ttft_s"] == "above"
    assert "latency_diverges" in [x["rule"] for x in out["fired"]]
    # a figure typed with --expect-* wins and has no range
    typed = _json(["diagnose", "--metrics", str(dump), "--config", f, "--expect-p95-ttft-s", "0.4"], capsys)
    assert typed["expected"]["p95_ttft_s"] == 0.4 and "expected.p95_ttft_s" not in typed["ranges"]


def test_diagnose_predicts_at_the_bound(cfg_file, capsys):
    from core.decision import at_bound
    from core.operations import expectation_of

    cfg, f = cfg_file
    dump = str(FIX / "vllm_metrics.txt")
    low = _json(["diagnose", "--metrics", dump, "--config", f, "--bound", "low"], capsys)
    assert low["expected"]["p95_itl_s"] == expectation_of(at_bound(cfg, "low")).p95_itl_s
    one = _json(["diagnose", "--metrics", dump, "--config", f, "--assume", "mbu=0.6"], capsys)
    base = _json(["diagnose", "--metrics", dump, "--config", f], capsys)
    assert one["expected"]["p95_itl_s"] > base["expected"]["p95_itl_s"]


def test_assumptions_shows_the_values_in_force(tmp_path, capsys):
    out = _json(["assumptions", "--bound", "low", "--assume", "mbu=0.7"], capsys)
    from core.base import REGISTRY

    for a in out["assumptions"]:
        assert a["value"] == (0.7 if a["name"] == "mbu" else REGISTRY[a["name"]].low), a["name"]
    assert "value" not in _json(["assumptions"], capsys)["assumptions"][0]
