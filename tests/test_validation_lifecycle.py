"""The vllm-lifecycle family: public vLLM runs (inference-sim/training) replayed as the benchmark sent them."""

import numpy as np
import pytest

import core.decision.validation_files as vfiles
import core.decision.validation_lifecycle as life
from core import serving
from core.decision import LIFECYCLE_FAMILY, lifecycle_breakdown, run
from tests.clirun import run as cli

ROWS = vfiles.raw_rows(life.FILE)
ROW = {r["id"]: r for r in ROWS}


@pytest.fixture(scope="module")
def report():
    return run((LIFECYCLE_FAMILY,))


def test_the_family_loads_and_every_stage_is_replayed(report):
    # 13 runs: four two-stage runs each of `general` (8 and 20/s) and `codegen` (5 and 10/s), four single-stage
    # `roleplay` / `reasoning` runs less the three overloaded reasoning runs left out: 8 x 2 + 4 + 1 = 21 stages
    assert len(ROWS) == 21 and len({r["run"] for r in ROWS}) == 13
    assert len(report.cases) == 21 * 9
    assert {c.metric for c in report.cases} == set(life.LIFECYCLE_METRICS)
    for c in report.cases:
        assert c.family == LIFECYCLE_FAMILY and c.source.startswith("https://github.com/inference-sim/training/tree/")
        assert 0 < c.measured and 0 < c.predicted < float("inf"), c.id
    (fam,) = report.families
    assert fam.cases == 189


def test_one_row_by_hand_against_its_json():
    # default_args/20260217-155451-llama-2-7b-tp1-codegen/results/stage_0_lifecycle_metrics.json:
    #   load_summary.count 3000, requested_rate 5.0; successes.prompt_len.mean 591.63 -> 592 tokens;
    #   request_latency mean 1.8103224114763325, p90 1.9400948957000081, p99 2.1888283881400454;
    #   time_to_first_token mean 0.025036599272001393, p90 0.028373321300023235, p99 0.04597016739010309;
    #   time_per_output_token (per streamed chunk) mean 0.0036027077654236617, p90 0.003862969027677123,
    #   p99 0.004336487935595737. results/config.yaml: output_len 247 (ignore_eos), 10 x 10 prompts, system 100.
    # Per-token TPOT mean = (1.8103224 - 0.0250366) / 246 = 0.00725726 s; chunks per token
    # 0.00725726 / 0.00360271 = 2.0144; p90 = 0.00386297 x 2.0144 = 0.0077815 s; p99 = 0.00433649 x 2.0144 = 0.0087354.
    r = ROW["life-llama-2-7b-tp1-codegen-s0"]
    assert (r["model"], r["gpu"], r["tp"], r["max_num_seqs"], r["max_num_batched_tokens"]) == (
        "llama-2-7b",
        "h100-sxm",
        "1",
        "128",
        "2048",
    )
    assert (r["requests"], r["input"], r["output"], r["rate_per_s"], r["duration_s"]) == (
        "3000",
        "592",
        "247",
        "5",
        "600",
    )
    assert (r["prompt_groups"], r["prompts_per_group"], r["system_prompt_len"]) == ("10", "10", "100")
    assert float(r["e2e_mean_s"]) == pytest.approx(1.8103224, rel=1e-5)
    assert float(r["e2e_p90_s"]) == pytest.approx(1.9400949, rel=1e-5)
    assert float(r["e2e_p99_s"]) == pytest.approx(2.1888284, rel=1e-5)
    assert float(r["ttft_mean_s"]) == pytest.approx(0.0250366, rel=1e-5)
    assert float(r["ttft_p90_s"]) == pytest.approx(0.0283733, rel=1e-5)
    assert float(r["ttft_p99_s"]) == pytest.approx(0.0459702, rel=1e-5)
    assert float(r["itl_mean_s"]) == pytest.approx(0.00725726, rel=1e-5)
    assert float(r["chunks_per_token"]) == pytest.approx(2.0144, abs=1e-4)
    assert float(r["itl_p90_s"]) == pytest.approx(0.0077815, rel=1e-4)
    assert float(r["itl_p99_s"]) == pytest.approx(0.0087354, rel=1e-4)


# the rates per stage of each profile.yaml's load.stages (inference-sim/training@ed5c1d26)
PROFILE_RATES = {"general": (8.0, 20.0), "codegen": (5.0, 10.0), "roleplay": (6.0,), "reasoning": (4.0,)}


@pytest.mark.parametrize("row_id", sorted(ROW))
def test_each_stage_replays_the_profiles_rate_and_count(row_id):
    r = ROW[row_id]
    profile = r["run"].rsplit("-", 1)[1]
    rate = PROFILE_RATES[profile][int(r["stage"])]
    duration = 1200.0 if profile in ("roleplay", "reasoning") else 600.0
    w = life.lifecycle_config(r).workload
    assert w.rate_per_s == rate and w.arrival == "poisson"
    assert w.num_requests == int(rate * duration)  # inference-perf sends int(rate x duration) per stage
    assert (w.max_batch, w.token_budget, w.policy, w.prefix_caching) == (128, 2048, "chunked", True)


def test_the_replayed_arrivals_run_at_the_stage_rate():
    # Poisson arrivals: the observed rate (n - 1) / (last - first) of n = 12,000 arrivals at 20/s has a relative
    # standard deviation of 1 / sqrt(n) = 0.9 %; 3 sigma is 2.7 %.
    cfg = life.lifecycle_config(ROW["life-llama-2-7b-tp1-general-s1"])
    res = serving.simulate_deployment(cfg, serving.sim_spec(cfg)).result
    assert res.arrival_s.size == 12_000
    assert res.summary.arrival_rate_per_s == pytest.approx(20.0, rel=3 / np.sqrt(12_000))


def test_the_replay_is_deterministic():
    cfg = life.lifecycle_config(ROW["life-mixtral-8x7b-v0-1-tp2-codegen-s0"])
    assert life.replay.__wrapped__(cfg) == life.replay.__wrapped__(cfg)


def test_a_repeated_prompt_finds_its_full_blocks_cached():
    # vLLM keeps only full 16-token blocks, and the last prompt token is always computed:
    # 592 tokens: floor(591 / 16) x 16 = 576; 786: floor(785 / 16) x 16 = 784; 16: 0; 17: 16
    assert [life.cached_prefix_tokens(n) for n in (592, 786, 16, 17)] == [576, 784, 0, 16]
    w = life.lifecycle_config(ROW["life-llama-2-7b-tp1-codegen-s0"]).workload
    assert w.prefix_cache_frac == pytest.approx(576 / 592) and w.prefix_groups == 100
    w = life.lifecycle_config(ROW["life-llama-2-7b-tp1-roleplay-s0"]).workload
    assert w.prefix_cache_frac == life.MAX_CACHED_FRAC  # 784 / 786 = 0.9975 is past the simulator's 0.99


def test_the_cache_shortens_the_first_token():
    # the same stage with prefix caching off prefills the whole 592-token prompt: a longer TTFT
    r = ROW["life-llama-2-7b-tp1-codegen-s0"]
    on = dict(life.replay(life.lifecycle_config(r)))
    off = dict(life.replay(life.lifecycle_config({**r, "prefix_caching": "0"})))
    assert on["ttft_s.mean"] < off["ttft_s.mean"]
    assert on["ttft_s.p90"] <= on["ttft_s.p99"] and on["e2e_s.p90"] <= on["e2e_s.p99"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"rate_per_s": ""}, "column 'rate_per_s' is empty"),
        ({"rate_per_s": "fast"}, "column 'rate_per_s' must be a number"),
        ({"e2e_p90_s": "-1"}, "column 'e2e_p90_s' must be a positive number"),
        ({"requests": "2.5"}, "column 'requests' must be a whole number"),
        ({"gpus": "2"}, "column 'gpus' must equal tp"),
        ({"model": "llama-9"}, "column 'model' is not a catalog model"),
        ({"prefix_caching": "yes"}, "column 'prefix_caching' must be 0 or 1"),
        ({"arrival": "closed"}, "column 'arrival' must be 'poisson'"),
        ({"output": "1"}, "column 'output' must be at least 2"),
    ],
)
def test_a_bad_row_names_itself_and_the_column(change, words):
    bad = {**ROW["life-llama-2-7b-tp1-codegen-s0"], **change}
    with pytest.raises(ValueError, match="vllm_lifecycle.csv: row life-llama-2-7b-tp1-codegen-s0: " + words):
        life.expand([bad])


def test_the_breakdown_has_every_run_and_the_medians_by_stage(report):
    b = lifecycle_breakdown(report.cases)
    assert set(b["runs"]) == set(ROW)
    one = b["runs"]["life-llama-2-7b-tp1-codegen-s1"]
    assert (one["stage"], one["rate_per_s"], one["tp"]) == (1, 10.0, 1)
    assert set(one["metrics"]) == set(life.LIFECYCLE_METRICS)
    m = one["metrics"]["e2e_s.mean"]
    assert m["error"] == pytest.approx(m["predicted"] / m["measured"] - 1)
    assert set(b["median_abs_error_by_stage"]) == {"stage_0", "stage_1"}
    # the family median of a metric is the median of its 21 absolute errors
    errs = sorted(abs(c.error) for c in report.cases if c.metric == "ttft_s.mean")
    assert b["median_abs_error"]["ttft_s.mean"] == pytest.approx(errs[10])
    for metric, t in b["targets"].items():
        worst = max(s[metric] for s in b["median_abs_error_by_stage"].values())
        assert t["meets"] == (worst <= t["median_abs_error_max"])


@pytest.mark.slow
def test_cli_validate_family_json_has_the_per_run_keys(capsys):
    # about 20-30 s: every case's range takes a replay at each bound of the assumptions the step model reads
    out = cli(capsys, "validate", "--family", LIFECYCLE_FAMILY, "--json")
    assert [f["family"] for f in out["families"]] == [LIFECYCLE_FAMILY]
    life_out = out["lifecycle"]
    assert set(life_out) == {"runs", "median_abs_error", "median_abs_error_by_stage", "targets"}
    run0 = life_out["runs"]["life-llama-2-70b-tp4-general-s0"]
    assert set(run0) == {"run", "stage", "model", "gpu", "tp", "rate_per_s", "metrics"}
    assert set(run0["metrics"]["ttft_s.p99"]) == {"measured", "predicted", "error"}
    assert set(life_out["targets"]) == {"e2e_s.mean", "ttft_s.mean"}
    assert "cases.life-llama-2-70b-tp4-general-s0-e2e_s.mean.predicted" in out["ranges"]
