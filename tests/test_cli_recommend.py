"""`rabit recommend` contract: keys, price file, bad arguments."""

import json

import pytest

from cli.main import main

ARGS = [
    "recommend",
    "--model",
    "llama-3.1-8b",
    "--rate",
    "4",
    "--input",
    "1000",
    "--output",
    "250",
    "--p95-e2e-s",
    "15",
    "--gpus-allowed",
    "h100-sxm,a100-80gb",
    "--requests",
    "400",
    "--max-simulations",
    "6",
]
PICK_KEYS = {
    "gpu",
    "gpus_per_replica",
    "tp",
    "pp",
    "weights",
    "kv_dtype",
    "replicas",
    "cost_per_hour",
    "cost_per_million_tokens",
    "p95_e2e_s",
    "capacity_requests_per_s",
    "bottleneck",
}


def test_json_contract(capsys):
    assert main(ARGS + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"recommendation", "pareto", "explanation", "evaluated", "simulated"} <= set(out)
    assert PICK_KEYS <= set(out["recommendation"])
    assert out["recommendation"]["gpu"] in ("h100-sxm", "a100-80gb")
    assert out["recommendation"]["p95_e2e_s"] <= 15
    assert all(PICK_KEYS <= set(p) for p in out["pareto"])
    assert isinstance(out["explanation"], dict) and out["explanation"]["why_gpu"]
    assert 0 < out["simulated"] <= 6 and out["evaluated"] >= out["simulated"]


def test_price_file_changes_the_cost(tmp_path, capsys):
    p = tmp_path / "prices.csv"
    p.write_text(
        "gpu,provider,kind,usd_per_gpu_hour,source,as_of\n"
        "h100-sxm,Our cluster,on-demand,1.00,internal chargeback,2026-11-01\n"
        "a100-80gb,Our cluster,on-demand,0.50,internal chargeback,2026-11-01\n"
    )
    assert main(ARGS + ["--price-file", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rec = out["recommendation"]
    per_gpu = {"h100-sxm": 1.0, "a100-80gb": 0.5}[rec["gpu"]]
    assert rec["cost_per_hour"] == pytest.approx(rec["replicas"] * rec["gpus_per_replica"] * per_gpu)


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--gpus-allowed", "h900"], "--gpus-allowed"),
        (["--weights-allowed", "fp2"], "--weights-allowed"),
        (["--price-file", "/nonexistent.csv"], "--price-file"),
        (["--p95-e2e-s", "-1"], "--p95-e2e-s"),
    ],
)
def test_bad_arguments(extra, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["recommend", "--rate", "1"] + extra)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and flag in err


def test_missing_rate_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["recommend"])
    assert exc.value.code == 2 and "--rate" in capsys.readouterr().err
