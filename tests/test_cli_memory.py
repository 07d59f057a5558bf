"""The `rabit` CLI contract for `memory`, `models` and `gpus`."""

import json
import subprocess
import sys

import pytest

from cli.main import main

EXAMPLE_ARGS = (
    "memory --model llama-3.1-70b --gpu h100-sxm --gpus 8 --tp 8 --batch 32 --input 4096 --output 4096".split()
)


def run_json(args, capsys):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_memory_serving_keys_and_worked_example_numbers(capsys):
    out = run_json(EXAMPLE_ARGS, capsys)
    for key in (
        "weights_bytes_per_gpu",
        "kv_bytes_per_token",
        "kv_bytes_per_gpu",
        "activation_bytes_per_gpu",
        "overhead_bytes_per_gpu",
        "total_bytes_per_gpu",
        "capacity_bytes_per_gpu",
        "fits",
        "max_sequences",
    ):
        assert key in out
    assert round(out["weights_bytes_per_gpu"] / 1e9, 1) == 17.6
    assert out["kv_bytes_per_gpu"] == 80 * 8192 * 4096 / 8 * 32  # 10.7 GB ("11 GB" in the textbook example)
    assert out["kv_bytes_per_token"] == 327_680
    assert out["total_bytes_per_gpu"] / 1e9 == pytest.approx(31.3, rel=0.015)
    assert round(out["capacity_bytes_per_gpu"] / 1e9, 1) == 85.9
    assert out["fits"] is True and out["max_sequences"] > 32


def test_memory_training_keys(capsys):
    out = run_json(
        [
            "memory",
            "--phase",
            "train",
            "--model",
            "llama-3.1-70b",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--pp",
            "2",
            "--zero",
            "3",
            "--micro-batch",
            "1",
            "--seq",
            "4096",
            "--recompute",
            "full",
        ],
        capsys,
    )
    for key in (
        "weight_bytes_per_gpu",
        "gradient_bytes_per_gpu",
        "optimizer_bytes_per_gpu",
        "activation_bytes_per_gpu",
        "total_bytes_per_gpu",
        "fits",
    ):
        assert key in out
    # 70.55e9 x 16 B / (TP 8 x PP 2) / DP 4 under ZeRO-3 = 17.6 GB of weights + grads + optimizer state
    static = out["weight_bytes_per_gpu"] + out["gradient_bytes_per_gpu"] + out["optimizer_bytes_per_gpu"]
    assert static / 1e9 == pytest.approx(70.55 * 16 / 16 / 4, rel=0.01)
    assert out["fits"] is True


def test_model_config_replaces_model(tmp_path, capsys):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    p = tmp_path / "my-llama.json"
    p.write_text(json.dumps(cfg))
    out = run_json(["memory", "--model-config", str(p), "--gpus", "1", "--tp", "1", "--batch", "1"], capsys)
    assert out["model"] == "my-llama" and out["kv_bytes_per_token"] == 131_072


@pytest.mark.parametrize(
    "args, flag",
    [
        (["memory", "--tp", "x"], "--tp"),
        (["memory", "--model", "llama-3.1-70b", "--gpus", "8", "--tp", "7"], "--tp"),
        (["memory", "--gpu", "h900"], "--gpu"),
        (["memory", "--model", "gpt-5"], "--model"),
        (["memory", "--batch", "0"], "--batch"),
        (["memory", "--gpus", "12"], "--gpus"),
        (["memory", "--weights", "fp2"], "--weights"),
        (["memory", "--model-config", "/nonexistent.json"], "--model-config"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err, err


def test_models_and_gpus_list_slugs(capsys):
    models = {m["slug"] for m in run_json(["models"], capsys)["models"]}
    assert {"llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b", "gpt-3-175b"} <= models
    gpus = {g["slug"] for g in run_json(["gpus"], capsys)["gpus"]}
    assert (
        set(
            "h100-sxm h100-pcie h100-nvl h200-sxm b200 b300 gb200 a100-40gb a100-80gb l40s l4 mi300x mi325x mi355x gaudi3".split()
        )
        <= gpus
    )


def test_console_script_runs():
    r = subprocess.run(
        [sys.executable, "-m", "cli.main", *EXAMPLE_ARGS, "--json"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and json.loads(r.stdout)["fits"] is True
