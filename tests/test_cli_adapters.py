"""The `rabit` contract for adapters: ``--adapters N --lora-rank R [--lora-targets ...] [--adapter-skew S]
[--max-loras K] [--max-cpu-loras C]`` on memory, speed, simulate and recommend, and their JSON keys."""

import pytest
from clirun import fails, run

EIGHT_B = "--model llama-3.1-8b --gpu h100-sxm --gpus 1 --tp 1 --input 1000 --output 250".split()
ADAPTERS = "--adapters 50 --lora-rank 16 --lora-targets all --max-loras 8".split()


def test_memory_reports_the_adapters_and_their_slots(capsys):
    out = run(capsys, "memory", *EIGHT_B, *ADAPTERS, "--json")
    # 16 x 81,920 weights per layer and unit rank x 32 layers x 2 B (tests/test_adapters.py derives it)
    assert out["adapter_bytes"] == 83_886_080
    assert out["adapter_reserved_bytes_per_gpu"] == 8 * 83_886_080
    assert (out["adapters"], out["max_loras"], out["max_lora_rank"]) == (50, 8, 16)
    base = run(capsys, "memory", *EIGHT_B, "--json")
    assert "adapter_bytes" not in base  # without adapters the keys are the base alone's
    assert out["kv_budget_bytes_per_gpu"] == base["kv_budget_bytes_per_gpu"] - 8 * 83_886_080
    assert out["max_sequences"] < base["max_sequences"]
    # the training phase keeps --lora-rank for the fine-tune
    train = run(capsys, "memory", "--phase", "train", "--model", "llama-3.1-8b", "--lora-rank", "16", "--json")
    assert "adapter_bytes" not in train and train["trainable_params"] < 1e8


def test_speed_pays_for_the_adapters(capsys):
    base = run(capsys, "speed", *EIGHT_B, "--batch", "32", "--json")
    out = run(capsys, "speed", *EIGHT_B, "--batch", "32", *ADAPTERS, "--json")
    assert out["decode_step_s"] > base["decode_step_s"]
    assert out["adapters_in_batch"] == 8.0  # 32 requests over 50 adapters touch more than the 8 slots
    assert out["adapter_bytes_per_step"] > 8 * 83_886_080  # the slots' weights, plus the adapter activations


def test_simulate_reports_loads_and_their_time(capsys):
    argv = ("simulate", *EIGHT_B, "--rate", "10", "--requests", "400", "--adapters", "50", "--lora-rank", "16")
    out = run(capsys, *argv, "--max-loras", "1", "--json")
    assert out["adapter_loads"] > 0
    assert {"p50", "p95"} <= set(out["adapter_load_s"]) and out["adapter_load_s"]["p50"] > 0
    assert out["adapter_blocked_requests"] > 0 and out["adapters_in_batch_mean"] <= 1.0 + 1e-9
    wide = run(capsys, *argv, "--max-loras", "50", "--max-cpu-loras", "50", "--json")
    assert wide["throughput_requests_per_s"] > out["throughput_requests_per_s"]
    base = run(capsys, "simulate", *EIGHT_B, "--rate", "10", "--requests", "400", "--json")
    assert "adapter_loads" not in base


def test_recommend_sets_the_adapters_beside_one_deployment_per_variant(capsys):
    argv = (
        "recommend --model llama-3.1-8b --rate 5 --input 1000 --output 250 --p95-ttft-s 2 --p95-e2e-s 20 "
        "--p95-itl-s none --gpus-allowed h100-sxm,l40s --max-simulations 4 --requests 400 --adapters 300 "
        "--lora-rank 16"
    ).split()
    out = run(capsys, *argv, "--json")
    pv = out["per_variant"]
    assert pv["variants"] == 300 and pv["gpus"] >= 300
    assert pv["cost_per_hour"] > pv["multi_lora"]["cost_per_hour"] > 0
    assert pv["multi_lora"]["gpus"] == out["recommendation"]["replicas"] * out["recommendation"]["gpus_per_replica"]
    assert 1 <= out["adapters"]["max_loras"] <= 300 and out["adapters"]["max_lora_rank"] == 16
    vllm = run(capsys, *argv, "--emit", "vllm", "--json")["launch"]["text"]
    assert "--enable-lora" in vllm and f"--max-loras {out['adapters']['max_loras']}" in vllm
    assert "--max-cpu-loras 300" in vllm  # host memory holds every adapter (not priced)


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--adapters", "-1"], "--adapters"),
        (["--adapters", "5", "--adapter-skew", "9"], "--adapter-skew"),
        (["--adapters", "5", "--max-loras", "0"], "--max-loras"),
        (["--adapters", "5", "--lora-rank", "64", "--max-lora-rank", "32"], "--max-lora-rank"),
        (["--adapters", "5", "--max-lora-rank", "24"], "--max-lora-rank"),
        (["--adapters", "5", "--max-loras", "4", "--max-cpu-loras", "2"], "--max-cpu-loras"),
        (["--adapters", "5", "--lora-targets", "embed"], "--lora-targets"),
    ],
)
def test_bad_adapter_flags_exit_2_naming_the_flag(capsys, extra, flag):
    err = fails(capsys, "memory", *EIGHT_B, *extra)
    assert flag in err
