"""One analysis file, one set of numbers: the CLI reading a saved config gives what the dashboard's cached
functions give for that config (the same file the sidebar downloads)."""

import json

import pytest

from cli.main import main
from core.base import Assumptions
from core.config import RabitConfig
from dashboard import cache


@pytest.fixture
def saved(tmp_path):
    cfg = RabitConfig(
        model="llama-3.1-8b",
        gpu="a100-80gb",
        gpus_per_node=4,
        tp=2,
        batch=24,
        input_tokens=3000,
        output_tokens=700,
        kv_dtype="fp8",
        block_size=32,
        fabric="roce-400g",
        assumptions=Assumptions().with_(mbu=0.7, gpu_mem_util=0.88, step_overhead_ms=0.8),
    )
    f = tmp_path / "rabit-config.json"
    f.write_text(cfg.model_dump_json(indent=2))
    return cfg, str(f)


def _json(args, capsys):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _same_ranges(cli: dict, ranges: dict, keys) -> None:
    for k in keys:
        assert cli["ranges"][k] == ranges[k].as_json(), k


def test_memory_from_the_file_equals_the_dashboard(saved, capsys):
    cfg, path = saved
    out = _json(["memory", "--config", path], capsys)
    mem = cache.serving_memory(cfg)
    for k in ("max_sequences", "kv_bytes_per_gpu", "total_bytes_per_gpu", "kv_budget_bytes_per_gpu"):
        assert out[k] == getattr(mem, k), k
    _same_ranges(out, cache.memory_ranges(cfg).ranges, ("max_sequences", "kv_bytes_per_gpu"))


def test_speed_from_the_file_equals_the_dashboard(saved, capsys):
    cfg, path = saved
    out = _json(["speed", "--config", path], capsys)
    s = cache.speed_summary(cfg)
    assert out["decode_step_s"] == s.decode.step_s
    assert out["prefill_s"] == s.prefill.ttft_s
    assert out["tokens_per_s"] == s.decode.tokens_per_s
    _same_ranges(out, cache.speed_ranges(cfg).ranges, ("decode_step_s", "prefill_s", "tokens_per_s"))


def test_bound_matches_the_page_switch(saved, capsys):
    from core.decision import at_bound

    cfg, path = saved
    out = _json(["speed", "--config", path, "--bound", "low"], capsys)
    assert out["decode_step_s"] == cache.speed_summary(at_bound(cfg, "low")).decode.step_s


@pytest.fixture
def saved_workload(tmp_path):
    from core.config import Targets, Workload

    cfg = RabitConfig(
        model="llama-3.1-8b",
        gpu="h100-sxm",
        gpus_per_node=1,
        tp=1,
        input_tokens=1000,
        output_tokens=250,
        workload=Workload(rate_per_s=4.0, num_requests=300, lengths="lognormal"),
        targets=Targets(gpus_allowed=("h100-sxm", "a100-80gb"), max_simulations=4, requests_per_simulation=300),
        assumptions=Assumptions().with_(mbu=0.7),
    )
    f = tmp_path / "rabit-config.json"
    f.write_text(cfg.model_dump_json(indent=2))
    return cfg, str(f)


def test_simulate_from_the_file_equals_the_dashboard(saved_workload, capsys):
    from core.serving import sim_spec

    cfg, path = saved_workload
    out = _json(["simulate", "--config", path], capsys)
    spec = sim_spec(cfg)
    s = cache.simulation(cfg, spec).summary
    assert out["e2e_s"]["p95"] == s.e2e_s.p95 and out["ttft_s"]["p50"] == s.ttft_s.p50
    assert out["throughput_tokens_per_s"] == s.throughput_tokens_per_s
    _same_ranges(out, cache.simulation_ranges(cfg, spec).ranges, ("e2e_s.p95", "ttft_s.p95", "itl_s.p50"))


def test_recommend_from_the_file_equals_the_dashboard(saved_workload, capsys):
    from core import catalog
    from core.decision import Constraints, ServingGoal

    cfg, path = saved_workload
    out = _json(["recommend", "--config", path], capsys)
    prices = tuple(catalog.prices())
    goal, cons = ServingGoal.from_config(cfg), Constraints.from_config(cfg)
    rec = cache.recommendation(goal, cons, prices)
    assert out["recommendation"]["label"] == rec.recommendation.label
    assert out["recommendation"]["cost_per_hour"] == rec.recommendation.cost_per_hour
    assert out["recommendation"]["p95_e2e_s"] == rec.recommendation.p95_e2e_s
    rr = cache.recommendation_ranges(goal, cons, prices)
    for k, r in rr.recommendation.ranges.items():
        assert out["ranges"][f"recommendation.{k}"]["low"] == r.low, k


def test_train_from_the_file_equals_the_dashboard(saved, capsys):
    from core.training import goal_from_inputs

    cfg, path = saved
    cfg = cfg.with_(phase="train", train_tokens=1e11)
    f = path.replace("rabit-config.json", "train.json")
    with open(f, "w") as fh:
        fh.write(cfg.model_dump_json())
    out = _json(["train", "--config", f, "--tokens", "1e11", "--gpus", "4"], capsys)
    plan = cache.training_plan(cfg, goal_from_inputs(cfg, gpus=4))
    assert out["step_s"] == plan.best.step_s and out["runtime_s"] == plan.best.runtime_s
    assert out["cost_usd"] == plan.cost_usd
    rg = cache.training_ranges(cfg, goal_from_inputs(cfg, gpus=4))
    _same_ranges(out, rg, ("step_s", "runtime_s", "cost_usd"))


def test_diagnose_from_the_file_equals_the_dashboard(saved, capsys):
    # the Diagnostics page compares telemetry with the open analysis's prediction (cache.analysis_expectation)
    # and its range (cache.simulation_ranges of the same simulated workload); the CLI reads the same file
    from pathlib import Path

    cfg, path = saved
    dump = str(Path(__file__).parent / "fixtures" / "vllm_metrics.txt")
    out = _json(["diagnose", "--metrics", dump, "--config", path], capsys)
    e = cache.analysis_expectation(cfg)
    assert out["expected"]["p95_ttft_s"] == e.p95_ttft_s and out["expected"]["p95_itl_s"] == e.p95_itl_s
    rg = cache.simulation_ranges(cfg, cache.sim_spec(cfg)).ranges
    assert out["ranges"]["expected.p95_ttft_s"] == rg["ttft_s.p95"].as_json()
    assert out["ranges"]["expected.p95_itl_s"] == rg["itl_s.p95"].as_json()


def test_validate_models_and_gpus_from_the_file(saved, capsys):
    # validate predicts published cases (each with its own model and sizes) with the file's assumptions;
    # models and gpus name the file's choices
    from core.decision import run

    cfg, path = saved
    out = _json(["validate", "--family", "vendor-first-token", "--config", path], capsys)
    ref = run(("vendor-first-token",), assumptions=cfg.assumptions)
    assert [c["predicted"] for c in out["cases"]] == [c.predicted for c in ref.cases]
    assert _json(["models", "--config", path], capsys)["selected"] == cfg.model
    assert _json(["gpus", "--config", path], capsys)["selected"] == cfg.gpu


def test_assumptions_in_force_from_the_file_equal_the_dashboards(saved, capsys):
    # the sidebar's assumption inputs hold the file's values; `rabit assumptions --config` lists the same
    cfg, path = saved
    out = _json(["assumptions", "--config", path], capsys)
    assert {a["name"]: a["value"] for a in out["assumptions"]} == cfg.assumptions.model_dump()
