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
    run_spec,
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
    assert [r.load for r in runs] == ["rate", "batch", "offline", "rate_search", "train"]
    assert runs[0].metrics == ("ttft_s.p50", "itl_s.p50") and runs[4].config.gpus == 8
    assert runs[3].limits == (("ttft_s.p99", 2.0), ("itl_s.p99", 0.05)) and runs[2].num_requests == 1000
    res = residuals_of(runs)  # every kind of run is predicted on its own config (simulator, speed, training)
    assert [(r.label, r.metric) for r in res] == [
        ("serve-run-1", "ttft_s.p50"),
        ("serve-run-1", "itl_s.p50"),
        ("batch-run", "itl_s.p50"),
        ("offline-run", "throughput_tokens_per_s"),
        ("rate-search", "max_rate_per_s"),
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


# --- each run on its own scheduler; offline and rate-search forms ---------------------------------------------

_ROW = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpus": "1",
    "tp": "1",
    "pp": "1",
    "weights": "bf16",
    "input_tokens": "1000",
    "output_tokens": "250",
}


def test_a_run_is_predicted_on_its_own_scheduler_settings():
    # At 20 requests/s of 1,000 + 250 tokens one H100 holds ~60 sequences at once (Little's law with a ~3 s
    # end-to-end); capped at 4 running sequences the queue grows and the first token waits: the prediction moves.
    def ttft(**extra):
        (run,) = parse_rows(
            [{**_ROW, "rate_per_s": "20", "num_requests": "300", **extra, "metric": "ttft_s.p50", "value": "0.05"}]
        )
        return run, predict(run)["ttft_s.p50"]

    wide, t_wide = ttft(max_batch="256", token_budget="8192")
    narrow, t_narrow = ttft(max_batch="4", token_budget="8192")
    assert (wide.config.workload.max_batch, narrow.config.workload.max_batch) == (256, 4)
    assert t_narrow > 3 * t_wide
    # an engine named without its settings brings its documented defaults on the run's GPU (TensorRT-LLM:
    # max batch 2,048, token budget 8,192, KV reserved for prompt plus output at admission)
    trt, _ = ttft(engine="trtllm")
    w = trt.config.workload
    assert (w.engine, w.max_batch, w.token_budget, w.admission) == ("trtllm", 2048, 8192, "reserve")
    # the request count is the run's, not a default
    assert run_spec(wide).num_requests == 300
    with pytest.raises(RunError, match="token budget must be at least the max batch"):
        ttft(max_batch="512", token_budget="256")


def test_vllm_metadata_names_the_scheduler_and_the_analysis_supplies_the_rest():
    data = json.loads(FIXTURE.read_text())
    (plain,) = parse_file("a.json", json.dumps(data).encode(), base=RabitConfig())
    capped = parse_json(json.dumps({**data, "max_num_seqs": "2", "max_num_batched_tokens": "2048"}), base=RabitConfig())
    assert (capped.config.workload.max_batch, capped.config.workload.token_budget) == (2, 2048)
    assert plain.config.workload.max_batch == RabitConfig().workload.max_batch  # the analysis's own
    assert predict(capped)["ttft_s.p50"] > predict(plain)["ttft_s.p50"]


def test_offline_and_rate_search_results_attach_and_are_predicted(tmp_path):
    from store import Store

    rows = [
        {**_ROW, "load": "offline", "num_requests": "500", "metric": "throughput_tokens_per_s", "value": "9000"},
        {
            **_ROW,
            "load": "rate-search",
            "limit_ttft_s": "2",
            "limit_itl_s": "0.05",
            "metric": "max_rate_per_s",
            "value": "12",
        },
        {
            **_ROW,
            "load": "rate-search",
            "limit_ttft_s": "2",
            "limit_itl_s": "0.02",
            "label": "tight",
            "metric": "max_rate_per_s",
            "value": "6",
        },
    ]
    offline, loose, tight = parse_rows(rows)
    assert (
        offline.load == "offline"
        and loose.load == "rate_search"
        and loose.limits == (("ttft_s.p99", 2.0), ("itl_s.p99", 0.05))
    )
    s = Store(f"sqlite:///{tmp_path / 's.sqlite3'}")
    aid = s.create("runs", RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1))
    s.add_runs(aid, [offline, loose, tight])
    assert tuple(r.run for r in s.get(aid).runs) == (offline, loose, tight)
    p_off, p_loose, p_tight = (predict(r) for r in (offline, loose, tight))
    assert p_off["throughput_tokens_per_s"] > 0
    # a tighter inter-token limit can only lower the highest rate that meets it
    assert 0 < p_tight["max_rate_per_s"] <= p_loose["max_rate_per_s"]
    res = residuals_of([offline, loose])
    assert [r.metric for r in res] == ["throughput_tokens_per_s", "max_rate_per_s"]
    with pytest.raises(RunError, match="needs a latency limit"):
        parse_rows([{**_ROW, "load": "rate-search", "metric": "max_rate_per_s", "value": "3"}])


# --- the second calibration: fit the efficiency assumptions ------------------------------------------------------

TRUE = {"mbu": 0.72, "mfu_max": 0.55, "mfu_ramp_tokens": 100.0, "step_overhead_ms": 1.0}  # inside each bound
SHAPES = [
    (1, 128, 256),
    (1, 2048, 128),
    (8, 1024, 512),
    (32, 512, 1024),
    (64, 4096, 256),
    (4, 8192, 64),
    (16, 256, 2048),
    (128, 1024, 128),
    (2, 512, 64),
]


def _model_runs(truth: dict[str, float], gpu: str = "h100-sxm", models: tuple[str, ...] = ("llama-3.1-8b",)) -> list:
    """Batch runs of several shapes (the models taken in turn) whose 'measurements' are the model's own predictions
    at ``truth``."""
    from core.operations import Measurement, Run

    out = []
    for k, (b, i, o) in enumerate(SHAPES):
        cfg = RabitConfig(
            model=models[k % len(models)], gpu=gpu, gpus_per_node=1, tp=1, batch=b, input_tokens=i, output_tokens=o
        )
        probe = Run(
            label=f"batch {b}, {i} in, {o} out",
            source="table",
            config=cfg.with_(assumptions=cfg.assumptions.with_(**truth)),
            load="batch",
            measurements=(Measurement(metric="ttft_s.p50", value=1.0), Measurement(metric="itl_s.p50", value=1.0)),
        )
        got = predict(probe)
        out.append(
            probe.model_copy(
                update={"config": cfg, "measurements": tuple(Measurement(metric=k, value=v) for k, v in got.items())}
            )
        )
    return out


def test_the_fit_recovers_known_efficiencies_from_runs_of_several_shapes():
    from core.decision import fit_assumptions as fit

    f = fit(_model_runs(TRUE), "h100-sxm", "vllm")
    assert set(f.moved) == set(TRUE)
    for k, v in TRUE.items():
        assert f.values[k] == pytest.approx(v, rel=0.02), k
    assert f.sd < 1e-3 and f.basis == "t" and f.high_mult < 1.01
    assert fit(_model_runs(TRUE), "b200", "vllm") is None  # another GPU kind: nothing to fit


def test_on_mi300x_under_vllm_the_fit_also_recovers_the_rocm_attention_bandwidth():
    # Large batches with long contexts pin the K/V reads, which the ROCm paged-attention kernels take at
    # mbu x rocm_attn_bw_eff; small batches the weight reads (mbu) plus the per-step cost, which two weight sizes
    # (8B and 70B in turn) tell apart. One model alone pins the product and the sum, enough to predict its shapes.
    from core.decision import FIT_PARAMS, ROCM_FIT_PARAMS, fit_assumptions, params_for

    truth = {**TRUE, "rocm_attn_bw_eff": 0.5}
    assert params_for("mi300x", "vllm") == ROCM_FIT_PARAMS and params_for("h100-sxm", "vllm") == FIT_PARAMS
    runs = _model_runs(truth, gpu="mi300x", models=("llama-3.1-8b", "llama-3.1-70b"))
    f = fit_assumptions(runs, "mi300x", "vllm")
    assert "rocm_attn_bw_eff" in f.moved
    for k, v in truth.items():
        assert f.values[k] == pytest.approx(v, rel=0.02), k


def test_leave_one_out_error_of_the_fit_beats_the_factor_across_shapes():
    from core.decision import compare_fit as compare

    c = compare(_model_runs(TRUE), "h100-sxm", "vllm")
    e = c.median_abs_error
    # the factor of one metric cannot follow an error that depends on the shape; the fit can
    assert e["fit"] < e["factor"] < e["analytical"] and c.trust == "fit"
    assert "fit" in c.why and len(c.rows) == 2 * len(SHAPES)


def test_cli_calibrate_fit_json(tmp_path, capsys):
    from tests.clirun import run

    aid = run(
        capsys, "analyses", "save", "--name", "fit", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1", "--json"
    )["id"]
    f = tmp_path / "runs.csv"
    f.write_text(csv_template())
    run(capsys, "calibrate", "add", "--analysis", aid, "--file", str(f), "--json")
    out = run(capsys, "calibrate", "fit", "--analysis", aid, "--json")
    (fit,) = out["fits"]
    assert (fit["gpu"], fit["engine"]) == ("h100-sxm", "vllm") and set(fit["values"]) == {
        "mbu",
        "mfu_max",
        "mfu_ramp_tokens",
        "step_overhead_ms",
    }
    assert out["trust"]["h100-sxm/vllm"] in ("fit", "factor", "analytical")
