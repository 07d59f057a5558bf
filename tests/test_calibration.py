"""Calibration from measured runs: bias recovery, interval coverage, the n < 3 band, the comparable rule,
leave-one-out; and the run parsers (vLLM serve / throughput JSON, the CSV template, refusals)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from core.config import RabitConfig
from core.decision import (
    Residual,
    calibrate,
    calibrate_all,
    interval_multipliers,
    leave_one_out,
    predict,
    residuals_of,
)
from core.operations import RunError, csv_template, parse_csv, parse_file, parse_json, parse_rows

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_bench_serve_llama-3.1-8b_h100.json"
TRUE_FACTOR = 1.3
SIGMA = 0.1


def _synthetic(rng: np.random.Generator, n: int, gpu: str = "h100-sxm", metric: str = "ttft_s.p50"):
    """measured = predicted x 1.3 x lognormal(0, 0.1), predictions spread over two decades."""
    pred = 10 ** rng.uniform(-2, 0, n)
    meas = pred * TRUE_FACTOR * np.exp(rng.normal(0.0, SIGMA, n))
    return [
        Residual(label=f"run {i}", metric=metric, gpu=gpu, config="synthetic", measured=float(m), predicted=float(p))
        for i, (p, m) in enumerate(zip(pred, meas))
    ]


def test_bias_recovered_within_5_percent_with_10_runs():
    # The standard error of the mean log-ratio of 10 runs is sigma / sqrt(10) = 0.0316, so a draw's factor is
    # within 5 % of 1.3 (ln 1.05 = 0.0488, ln 0.95 = -0.0513) with probability P(|z| < 1.54) = 0.88; over 200
    # draws at least 80 % must be, and the mean factor must land within 1 % (standard error 0.2 %).
    rng = np.random.default_rng(11)
    factors = np.array([calibrate(_synthetic(rng, 10), "h100-sxm", "ttft_s.p50").factor for _ in range(200)])
    within = np.mean(np.abs(factors / TRUE_FACTOR - 1) < 0.05)
    assert within >= 0.80, within
    assert abs(np.mean(factors) / TRUE_FACTOR - 1) < 0.01
    cal = calibrate(_synthetic(rng, 10), "h100-sxm", "ttft_s.p50")
    assert cal.n == 10 and cal.factor == pytest.approx(math.exp(cal.bias))
    assert cal.bias == pytest.approx(np.mean([r.r for r in cal.runs]))


def test_95_percent_interval_from_5_runs_covers_a_fresh_run_at_least_90_percent_of_the_time():
    rng = np.random.default_rng(2026)
    covered = 0
    for _ in range(200):
        cal = calibrate(_synthetic(rng, 5), "h100-sxm", "ttft_s.p50")
        assert cal.basis == "t"
        fresh = _synthetic(rng, 1)[0]
        covered += fresh.predicted * cal.low_mult <= fresh.measured <= fresh.predicted * cal.high_mult
    assert covered / 200 >= 0.90, covered


@pytest.mark.parametrize("n", [1, 2])
def test_fewer_than_3_runs_give_exactly_the_heuristic_band(n):
    cal = calibrate(_synthetic(np.random.default_rng(n), n), "h100-sxm", "ttft_s.p50")
    assert cal.basis == "heuristic" and cal.n == n
    assert cal.interval == (0.7 * cal.factor, 1.3 * cal.factor)
    rg = cal.range(2.0)
    assert (rg.basis, rg.n_runs, rg.value) == ("calibrated", n, pytest.approx(2.0 * cal.factor))
    assert (rg.low, rg.high) == (pytest.approx(1.4 * cal.factor), pytest.approx(2.6 * cal.factor))


def test_student_t_interval_matches_the_worked_number():
    # r = 0.2, 0.3, 0.25: mean 0.25, s = 0.05; t(0.975, 2) = 4.303 (any t table);
    # half-width 4.303 x 0.05 x sqrt(1 + 1/3) = 0.24843 -> multipliers exp(0.25 -+ 0.24843) = 1.00157, 1.64614.
    bias, lo, hi, sd, basis = interval_multipliers([0.2, 0.3, 0.25])
    assert basis == "t" and bias == pytest.approx(0.25) and sd == pytest.approx(0.05)
    assert lo == pytest.approx(1.00157, abs=2e-4) and hi == pytest.approx(1.64614, abs=5e-4)


def test_only_comparable_runs_count():
    rng = np.random.default_rng(3)
    mix = (
        _synthetic(rng, 4)
        + _synthetic(rng, 3, gpu="a100-80gb")
        + _synthetic(rng, 2, metric="itl_s.p50")
        + _synthetic(rng, 2, metric="ttft_s.p99")
    )
    cals = calibrate_all(mix, "h100-sxm")
    assert cals["ttft_s.p50"].n == 4 and cals["itl_s.p50"].n == 2 and cals["ttft_s.p99"].n == 2
    assert {r.gpu for c in cals.values() for r in c.runs} == {"h100-sxm"}
    assert calibrate(mix, "b200", "ttft_s.p50") is None
    assert calibrate_all(mix, "a100-80gb")["ttft_s.p50"].n == 3


def test_leave_one_out_predicts_each_run_from_the_others():
    cal = calibrate(_synthetic(np.random.default_rng(5), 10), "h100-sxm", "ttft_s.p50")
    loo = leave_one_out(cal)
    assert len(loo.rows) == 10 and all(r.n_others == 9 for r in loo.rows)
    held = loo.rows[0]
    others = [x.r for x in cal.runs[1:]]
    assert held.calibrated == pytest.approx(held.predicted * math.exp(np.mean(others)))
    assert 0.7 <= loo.coverage <= 1.0
    assert leave_one_out(calibrate(_synthetic(np.random.default_rng(5), 1), "h100-sxm", "ttft_s.p50")).rows == ()


# --- parsing ---------------------------------------------------------------------------------------


def test_vllm_bench_serve_result_imports_with_its_config():
    (run,) = parse_file(FIXTURE.name, FIXTURE.read_bytes(), base=RabitConfig())
    c = run.config
    assert (c.model, c.gpu, c.gpus, c.tp, c.input_tokens, c.output_tokens) == (
        "llama-3.1-8b",
        "h100-sxm",
        1,
        1,
        1000,
        250,
    )
    assert (run.load, run.rate_per_s, run.num_requests) == ("rate", 4.0, 1000)
    assert run.value("ttft_s.p50") == pytest.approx(0.03790521383099258)  # median_ttft_ms / 1000
    assert run.value("itl_s.p99") == pytest.approx(0.01411892019212246)
    assert run.value("e2e_s.p50") == pytest.approx(2.2318852310031)
    assert run.value("throughput_tokens_per_s") == pytest.approx(990.1443287950874)


def test_vllm_result_without_a_full_config_is_refused_naming_the_missing_fields():
    data = json.loads(FIXTURE.read_text())
    for k in ("gpu", "gpus", "tp"):
        del data[k]
    with pytest.raises(RunError, match="missing gpu, gpus, tp, pp, weights"):
        parse_json(json.dumps(data))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"median_ttft_ms": -3.0}, "median_ttft_ms' must be positive"),
        ({"completed": None}, "missing field 'completed'"),
        ({"gpu": "tpu-v9"}, "unknown GPU"),
    ],
)
def test_bad_vllm_fields_are_refused(change, message):
    data = {**json.loads(FIXTURE.read_text()), **change}
    with pytest.raises(RunError, match=message):
        parse_json(json.dumps(data), base=RabitConfig())


def test_not_json_and_wrong_json_are_refused():
    with pytest.raises(RunError, match="not JSON"):
        parse_json(b"\x00garbage")
    with pytest.raises(RunError, match="neither a vllm bench serve"):
        parse_json('{"hello": 1}')


def test_vllm_bench_throughput_counts_only_output_tokens():
    # tokens_per_second counts prompt + output tokens: 5000 x 256 / (1024 + 256) = 1000 output tokens/s.
    data = {
        "elapsed_time": 100.0,
        "num_requests": 1000,
        "total_num_tokens": 500000,
        "requests_per_second": 10.0,
        "tokens_per_second": 5000.0,
    }
    run = parse_json(json.dumps(data), base=RabitConfig(input_tokens=1024, output_tokens=256))
    assert run.load == "offline" and run.value("throughput_tokens_per_s") == pytest.approx(1000.0)


def test_csv_template_round_trips_and_typed_rows_are_checked():
    runs = parse_csv(csv_template())
    assert [r.load for r in runs] == ["rate", "batch", "train"]
    assert runs[0].metrics == ("ttft_s.p50", "itl_s.p50") and runs[2].config.gpus == 8
    res = residuals_of(runs)  # every kind of run is predicted on its own config (simulator, speed, training)
    assert [(r.label, r.metric) for r in res] == [
        ("serve-run-1", "ttft_s.p50"),
        ("serve-run-1", "itl_s.p50"),
        ("batch-run", "itl_s.p50"),
        ("train-run", "step_s"),
    ]
    assert all(r.predicted > 0 and r.config for r in res) and "batch 32" in res[2].config
    with pytest.raises(RunError, match="row 1: field 'value' must be a positive number"):
        parse_rows([{"model": "llama-3.1-8b", "metric": "ttft_s.p50", "value": "-1"}], base=RabitConfig())
    with pytest.raises(RunError, match="unknown metric"):
        parse_rows([{"metric": "latency", "value": "1"}], base=RabitConfig())
    with pytest.raises(RunError, match="missing model, gpu, gpus, tp, pp, weights, input_tokens, output_tokens"):
        parse_rows([{"metric": "itl_s.p50", "value": "0.01", "batch": "8"}])
    with pytest.raises(RunError, match="missing column"):
        parse_csv("a,b\n1,2\n")


def test_the_fixture_calibrates_ttft_and_itl_against_the_simulator():
    (run,) = parse_file(FIXTURE.name, FIXTURE.read_bytes(), base=RabitConfig())  # PP and weights: the analysis's
    res = residuals_of([run])
    got = {r.metric: r for r in res}
    assert {"ttft_s.p50", "itl_s.p50"} <= set(got)
    pred = predict(run)
    for m in ("ttft_s.p50", "itl_s.p50"):
        assert got[m].predicted == pred[m] > 0
        cal = calibrate(res, "h100-sxm", m)
        # one run: the factor is that run's measured / predicted, the band x0.7 ... x1.3 of it
        assert cal.factor == pytest.approx(got[m].measured / got[m].predicted)
        assert cal.range(pred[m]).value == pytest.approx(got[m].measured)
