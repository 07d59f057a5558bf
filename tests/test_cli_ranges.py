"""`ranges`, `range_basis`, --assume, --bound, --config and `rabit assumptions` on every subcommand."""

import json

import pytest

from cli.main import main
from core.config import RabitConfig

SPEED = [
    "speed",
    "--model",
    "llama-3.1-70b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "8",
    "--tp",
    "8",
    "--batch",
    "32",
    "--input",
    "4096",
    "--output",
    "4096",
]
BASIS = "heuristic range from the assumption bounds"


def run_json(args, capsys):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_speed_ranges_straddle_the_values(capsys):
    out = run_json(SPEED, capsys)
    for key in ("decode_step_s", "prefill_s", "tokens_per_s"):
        assert out["ranges"][key]["low"] < out[key] < out["ranges"][key]["high"], key
    assert out["range_basis"] == BASIS
    assert "bound" in out and "comm_s_per_step" in out  # the old keys stay


def test_assume_reproduces_the_worked_example_decode_step(capsys):
    # The textbook chain: MBU 0.8, MFU 0.74 without ramp and none of the fixed per-step costs (scheduler step,
    # CUDA-graph kernel launches, per-sequence bookkeeping and sampling) give an 11.8 ms decode step for
    # Llama-3.1-70B on 8 x H100 SXM, batch 32, 4096 + 4096 tokens.
    out = run_json(
        SPEED
        + [
            "--assume",
            "mbu=0.8",
            "--assume",
            "mfu_max=0.74",
            "--assume",
            "mfu_ramp_tokens=0",
            "--assume",
            "step_overhead_ms=0",
            "--assume",
            "graph_launch_us=0",
            "--assume",
            "seq_overhead_us=0",
            "--assume",
            "sample_bytes_per_vocab=0",
        ],
        capsys,
    )
    assert out["decode_step_s"] == pytest.approx(0.0118, rel=0.02)


def test_the_worked_example_four_flags_leave_only_the_launch_and_per_sequence_costs(capsys):
    # The worked example's four flags alone keep the fixed per-step costs the example leaves out. By hand, for
    # Llama-3.1-70B at TP 8 (80 layers of 10 kernels + 2 all-reduces, 3 more per iteration) and batch 32:
    #   launches:      (80 x 12 + 3) = 963 kernels x 1 us (a CUDA graph: 32 tokens <= vLLM's 512) = 963.0 us
    #   per sequence:  32 x (2 us + 128,256 x 16 B / (3.35e12 B/s x 0.8)) = 32 x 2.7657 us        =  88.5 us
    # so the decode step is the roofline's 11.8 ms plus 1.0515 ms = 12.85 ms.
    four = ["--assume", "mbu=0.8", "--assume", "mfu_max=0.74", "--assume", "mfu_ramp_tokens=0"]
    four += ["--assume", "step_overhead_ms=0"]
    with_costs = run_json(SPEED + four, capsys)["decode_step_s"]
    zero = ["--assume", "graph_launch_us=0", "--assume", "seq_overhead_us=0", "--assume", "sample_bytes_per_vocab=0"]
    roofline = run_json(SPEED + four + zero, capsys)["decode_step_s"]
    fixed_s = 963 * 1e-6 + 32 * (2e-6 + 128_256 * 16 / (3.35e12 * 0.8))
    assert with_costs - roofline == pytest.approx(fixed_s, rel=1e-6)
    assert with_costs == pytest.approx(0.0118 + fixed_s, rel=0.02)


@pytest.mark.parametrize(
    "bad, word",
    [("nope=1", "nope"), ("step_overhead_ms=1e308", "step_overhead_ms"), ("mbu=x", "mbu"), ("mbu", "NAME=VALUE")],
)
def test_bad_assume_exits_2_naming_the_assumption(bad, word, capsys):
    with pytest.raises(SystemExit) as e:
        main(SPEED + ["--assume", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert word in err and err.count("\n") == 1


def test_bound_low_is_slower_and_high_faster(capsys):
    base = run_json(SPEED, capsys)["decode_step_s"]
    low = run_json(SPEED + ["--bound", "low"], capsys)["decode_step_s"]
    high = run_json(SPEED + ["--bound", "high"], capsys)["decode_step_s"]
    assert high < base < low


def test_memory_ranges(capsys):
    out = run_json(
        ["memory", "--gpus", "8", "--tp", "8", "--batch", "32", "--input", "4096", "--output", "4096"], capsys
    )
    r = out["ranges"]
    assert r["max_sequences"]["low"] < out["max_sequences"] < r["max_sequences"]["high"]
    # the batch's own KV bytes depend on no assumption: an empty range, not a made-up one
    assert r["kv_bytes_per_gpu"] == {"low": out["kv_bytes_per_gpu"], "high": out["kv_bytes_per_gpu"]}


def test_simulate_ranges_and_saturation_at_the_bounds(capsys):
    out = run_json(["simulate", "--gpus", "8", "--tp", "8", "--rate", "0.5", "--requests", "300"], capsys)
    for key in ("ttft_s.p95", "e2e_s.p95", "itl_s.p50", "throughput_tokens_per_s", "capacity_requests_per_s"):
        assert key in out["ranges"], key
    p95 = out["e2e_s"]["p95"]
    assert out["ranges"]["e2e_s.p95"]["low"] < p95 < out["ranges"]["e2e_s.p95"]["high"]
    assert set(out["saturated_at_bounds"]) == {"pessimistic", "optimistic"}
    assert isinstance(out["saturation_range"], str)


def test_a_saturated_simulation_reports_no_latency(capsys):
    """2 requests/s against a closed-form capacity of 1.37/s (Llama-3.1-70B, 8 x H100, 4,096 + 4,096 tokens): the
    queue grows for as long as requests arrive, so each percentile would only measure how long the run lasted.
    Every latency is null with the reason beside it, and no latency has a range; throughput keeps its range."""
    out = run_json(["simulate", "--gpus", "8", "--tp", "8", "--rate", "2", "--requests", "2000"], capsys)
    assert out["saturated"] is True
    assert out["latency_withheld"].startswith("saturated")
    for key in ("ttft_s", "itl_s", "e2e_s", "queue_s"):
        assert out[key]["p50"] is None and out[key]["p95"] is None and out[key]["p99"] is None, key
        assert out[key]["mean"] is None and out[key]["n"] > 0
        assert not any(k.startswith(key) for k in out["ranges"]), key
    assert "throughput_tokens_per_s" in out["ranges"]
    # nor does any replica of the deployment (its p95s are the same queue's)
    assert out["per_replica"] and all(
        r["queue_p95_s"] is None and r["ttft_p95_s"] is None and r["e2e_p95_s"] is None for r in out["per_replica"]
    )
    for r in out["per_replica"]:
        for key in ("queue_s", "ttft_s", "itl_s", "e2e_s"):
            assert r[key]["p50"] is None and r[key]["p99"] is None and r[key]["n"] > 0, key


def test_train_ranges(capsys):
    out = run_json(["train", "--tokens", "1e11", "--gpus", "64"], capsys)
    for key in ("step_s", "runtime_s", "gpu_hours", "mfu", "cost_usd"):
        assert out["ranges"][key]["low"] < out[key] < out["ranges"][key]["high"], key
    d = run_json(["train", "--tokens", "1e12", "--deadline-days", "30"], capsys)
    assert d["ranges"]["gpus"]["low"] <= d["gpus"] <= d["ranges"]["gpus"]["high"]


def test_recommend_ranges(capsys):
    out = run_json(
        [
            "recommend",
            "--rate",
            "4",
            "--input",
            "512",
            "--output",
            "128",
            "--p95-e2e-s",
            "20",
            "--gpus-allowed",
            "h100-sxm,a100-80gb",
            "--max-simulations",
            "4",
            "--requests",
            "300",
        ],
        capsys,
    )
    assert out["recommendation"] is not None
    for key in ("cost_per_hour", "p95_e2e_s", "capacity_requests_per_s"):
        r = out["ranges"][f"recommendation.{key}"]
        # high is null (unbounded) where the configuration no longer fits at a bound
        assert r["low"] <= out["recommendation"][key] <= (r["high"] if r["high"] is not None else float("inf")), key
    assert out["ranges"]["recommendation.cost_per_hour"]["high"] is not None
    assert isinstance(out["settled"], bool) and "range_note" in out
    assert isinstance(out["misses_at_pessimistic_bound"], bool)


def test_assumptions_lists_every_assumption(capsys):
    out = run_json(["assumptions"], capsys)
    from core.base import REGISTRY

    assert [a["name"] for a in out["assumptions"]] == list(REGISTRY)
    for a in out["assumptions"]:
        assert {"unit", "base", "low", "high", "moves", "source", "min", "max"} <= set(a)


def test_config_file_is_the_shared_analysis(tmp_path, capsys):
    # the dashboard's download: a RabitConfig as JSON, with a changed assumption
    cfg = RabitConfig(
        batch=16, input_tokens=2048, output_tokens=512, tp=8, assumptions=RabitConfig().assumptions.with_(mbu=0.8)
    )
    f = tmp_path / "rabit-config.json"
    f.write_text(cfg.model_dump_json(indent=2))
    from_file = run_json(["speed", "--config", str(f)], capsys)
    by_flags = run_json(
        [
            "speed",
            "--gpus",
            "8",
            "--tp",
            "8",
            "--batch",
            "16",
            "--input",
            "2048",
            "--output",
            "512",
            "--assume",
            "mbu=0.8",
        ],
        capsys,
    )
    assert from_file["decode_step_s"] == by_flags["decode_step_s"]
    # a flag given on the command line wins over the file
    assert run_json(["speed", "--config", str(f), "--batch", "4"], capsys)["batch"] == 4
    f.write_text("{not json")
    with pytest.raises(SystemExit) as e:
        main(["speed", "--config", str(f)])
    assert e.value.code == 2 and "--config" in capsys.readouterr().err


def test_recommend_train_ranges(capsys):
    out = run_json(
        ["recommend", "--train", "--tokens", "1e11", "--deadline-days", "30", "--gpus-allowed", "h100-sxm"], capsys
    )
    rec = out["recommendation"]
    assert rec is not None and out["range_basis"] == BASIS
    for key in ("cost_usd", "wall_clock_s", "gpu_hours"):
        r = out["ranges"][f"recommendation.{key}"]
        assert r["low"] < rec[key] < r["high"], key
