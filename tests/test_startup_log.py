"""Engine start-up logs as evidence: parsing, the comparison with the prediction, the memory calibration, the
out-of-memory diagnosis and the tuning loop.

The fixtures under ``tests/fixtures/engine_logs/`` are real logs, each with its ``.meta.md`` beside it (engine
version, model, GPU, flags, the numbers as printed, the source repository and commit):

* ``vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log``: vLLM 0.10.1.1 (V1), Qwen2-7B-Instruct on one A100 80GB,
  ``--max-model-len 16384 --gpu-memory-utilization 0.5``; dennislee22/vLLM-benchmarking
  ``log/vllm-7B-1gpuA10080GB-0.5GRAM.log`` @608c86e. The TP 2 sibling at 0.25 @56f8eb2.
* ``sglang_0.4.x_llama3.1-8b_80gb-class_tp1_ok_oldformat.log``: SGLang 0.4.1-era (docs build 2025-01-23),
  Llama-3.1-8B-Instruct, default flags (``mem_fraction_static=0.88``), docs.sglang.ai/start/send_request.html.
* ``sglang_0.5.x_...newformat_trimmed.log``: SGLang 0.5.x (docs CI 2026-02-09), KV pool capped at 20,480 tokens.
* ``vllm_0.6.4dev_v0_llama3.1-8b_..._startup_fail_maxlen_gt_kv.log``: vLLM 0.6.4.dev26 (V0), start-up failure
  "max seq len (131072) is larger than ... KV cache (41200)"; just-record/vllm_practice @5ec0997.
* ``vllm_0.10.1.1_mineru2.5-1.2b_..._startup_fail_no_kv_memory.log``: vLLM 0.10.1.1, ``Available KV cache memory:
  -0.72 GiB`` then "No available memory for the cache blocks"; liberal-CloudArchitect/graduation_design @89afbd2.
* ``vllm_0.7.x_v0_deepseek-r1-awq_8xa800_runtime_oom_EXCERPT.log``: a CUDA out-of-memory error on a request after
  the server was up (vllm-project/vllm#13067, 2025-02-11).
* ``vllm_0.6.x_v0_llama3.1-8b_rtx3090_maxlen{20000,29000}_*_EXCERPT.log``: two V0 runs of one model on one RTX
  3090 at two max model lens (vllm-project/vllm#10517, 2024-12-02).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.catalog import from_hf_config
from core.config import RabitConfig
from core.decision import tune
from core.operations import LogError, calibrate_memory, compare_log, diagnose_oom, parse_log
from tests.clirun import fails, run

D = Path(__file__).parent / "fixtures" / "engine_logs"
GiB = 2**30
QWEN = D / "qwen2-7b-instruct.config.json"


def log(name: str):
    return parse_log((D / name).read_bytes(), name)


def qwen_cfg(gpus: int = 1) -> RabitConfig:
    arch = from_hf_config(json.loads(QWEN.read_text()), slug="qwen2-7b-instruct")
    return RabitConfig(
        custom_model=arch, gpu="a100-80gb", gpus_per_node=gpus, tp=gpus, input_tokens=2000, output_tokens=500
    )


# --- parsing, by hand from the lines as printed ----------------------------------------------------------------


def test_vllm_0_10_v1_log_parses_into_its_numbers():
    # "Model loading took 14.2488 GiB", "Available KV cache memory: 24.83 GiB", "GPU KV cache size: 464,848
    # tokens", "Maximum concurrency for 16,384 tokens per request: 28.37x". By hand: 29,053 blocks x 16 =
    # 464,848 tokens; x 57,344 B per token (2 x 28 layers x 4 KV heads x 128 x 2 B) = 26.66e9 B = 24.83 GiB;
    # 464,848 / 16,384 = 28.37.
    g = log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log")
    assert g.engine == "vllm" and g.version == "0.10.1.1"
    assert g.weights_bytes == pytest.approx(14.2488 * GiB)
    assert g.kv_cache_bytes == pytest.approx(24.83 * GiB)
    assert g.kv_cache_tokens == 464_848 == 29_053 * 16
    assert g.max_concurrency == 28.37 and g.context_tokens == 16_384
    assert g.kv_cache_tokens * 57_344 / GiB == pytest.approx(24.83, abs=0.005)
    assert g.kv_cache_tokens / g.context_tokens == pytest.approx(g.max_concurrency, abs=0.005)
    assert (g.gpu_memory_utilization, g.token_budget) == (0.5, 2048) and g.unrecognised == ()
    assert g.cuda_graph_bytes == pytest.approx(0.50 * GiB) and g.failure is None


def test_vllm_tensor_parallel_log_reads_per_gpu_memory_and_group_tokens():
    # TP 2 at 0.25: each worker prints "Available KV cache memory: 12.02 GiB" and the weights 7.1217 GiB; the
    # group's 450,192 tokens = 28,137 blocks x 16; at 28,672 B per token per GPU (2 KV heads) = 12.02 GiB.
    g = log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp2_ok.log")
    assert g.tp == 2 and g.kv_cache_tokens == 450_192 and g.max_concurrency == 27.48
    assert g.weights_bytes == pytest.approx(7.1217 * GiB) and g.kv_cache_bytes == pytest.approx(12.02 * GiB)
    assert 450_192 * 28_672 / GiB == pytest.approx(12.02, abs=0.005)


def test_sglang_0_4_log_parses_and_derives_what_it_does_not_print():
    # "Load weight begin. avail mem=78.81 GB" / "Load weight end. ... avail mem=63.72 GB" (no mem usage in 0.4.1):
    # weights = 15.09 GiB (SGLang's GB divides by 1 << 30). "K size: 27.13 GB, V size: 27.13 GB" = 54.26 GiB;
    # "max_total_num_tokens=444500": 444,500 x 65,536 B (K of 32 layers x 8 heads x 128 x 2 B) = 27.13 GiB;
    # concurrency (not printed) = 444,500 / 131,072 = 3.391.
    g = log("sglang_0.4.x_llama3.1-8b_80gb-class_tp1_ok_oldformat.log")
    assert g.engine == "sglang" and g.version == "0.4.x format"
    assert g.weights_bytes == pytest.approx((78.81 - 63.72) * GiB)
    assert g.kv_cache_bytes == pytest.approx(54.26 * GiB) and g.kv_cache_tokens == 444_500
    assert 444_500 * 65_536 / GiB == pytest.approx(27.13, abs=0.005)
    assert g.context_tokens == 131_072 and g.max_concurrency == pytest.approx(444_500 / 131_072)
    assert set(g.derived) == {"weights_bytes", "max_concurrency"}
    assert (g.gpu_memory_utilization, g.token_budget, g.max_num_seqs) == (0.88, 8192, 2049)


def test_sglang_0_5_log_new_formats():
    # "Load weight end. elapsed=3.26 s, ..., mem usage=15.02 GB." and "KV Cache is allocated. #tokens: 20480, K
    # size: 1.25 GB, V size: 1.25 GB": 20,480 x 65,536 B = 1.25 GiB each.
    g = log("sglang_0.5.x_llama3.1-8b_lora3_80gb-class_tp1_ok_newformat_trimmed.log")
    assert g.weights_bytes == pytest.approx(15.02 * GiB) and g.kv_cache_bytes == pytest.approx(2.50 * GiB)
    assert g.kv_cache_tokens == 20_480 and g.max_num_seqs == 128 and "weights_bytes" not in g.derived


def test_vllm_v0_block_count_becomes_tokens():
    # "# GPU blocks: 2575, # CPU blocks: 2048" at the default block of 16 = 41,200 tokens (the failing sibling's
    # ValueError prints the same 41,200); "Maximum concurrency for 40960 tokens per request: 1.01x".
    g = log("vllm_0.6.4dev_v0_llama3.1-8b_gpu-unknown_ok_gpu_cpu_blocks.log")
    assert g.kv_cache_tokens == 41_200 and "kv_cache_tokens" in g.derived
    assert g.max_concurrency == 1.01 and g.context_tokens == 40_960 and g.unrecognised == ("kv_cache_bytes",)


# --- what is not a usable log: one clear message -------------------------------------------------------------


def test_truncated_log_is_refused_in_one_line():
    text = (D / "vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log").read_text()
    cut = text[: text.index("Available KV cache memory")]
    with pytest.raises(LogError, match="truncated") as e:
        parse_log(cut)
    assert "\n" not in str(e.value)


def test_a_line_cut_inside_a_number_is_not_read_as_a_smaller_number():
    text = (D / "vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log").read_text()
    cut = text[: text.index("464,848") + 5]  # "GPU KV cache size: 464,8"
    g = parse_log(cut)
    assert g.kv_cache_tokens is None and "kv_cache_tokens" in g.unrecognised and g.kv_cache_bytes is not None


def test_another_programs_log_and_a_50_mb_file_are_refused():
    nginx = '127.0.0.1 - - [10/Oct/2025:13:55:36 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.5.0"\n' * 50
    with pytest.raises(LogError, match="not a vLLM or SGLang start-up log"):
        parse_log(nginx)
    with pytest.raises(LogError, match="limit") as e:
        parse_log(b"INFO Model loading took 1.0 GiB\n" * (50 * 2**20 // 32))
    assert "\n" not in str(e.value)
    with pytest.raises(LogError, match="not UTF-8"):
        parse_log(b"\xff\xfe\x00garbage")


def test_cli_refusals_change_nothing_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RABIT_DATA_DIR", str(tmp_path / "store"))
    aid = run(
        capsys, *["analyses", "save", "--name", "8b", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1", "--json"]
    )["id"]
    big = tmp_path / "big.log"
    with big.open("wb") as f:
        f.truncate(50 * 2**20)  # 50 MB
    other = tmp_path / "nginx.log"
    other.write_text('127.0.0.1 - - "GET / HTTP/1.1" 200\n' * 10)
    trunc = tmp_path / "trunc.log"
    text = (D / "vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log").read_text()
    trunc.write_text(text[: text.index("Available KV cache memory")])
    for f in (big, other, trunc):
        msg = fails(capsys, *["analyses", "attach-log", aid, "--file", str(f)])
        assert "--file" in msg
        assert "--log" in fails(
            capsys, *["memory", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1", "--log", str(f)]
        )
    assert run(capsys, *["analyses", "show", aid, "--json"])["startup_logs"] == []
    ok = run(
        capsys,
        *[
            "analyses",
            "attach-log",
            aid,
            "--file",
            str(D / "sglang_0.4.x_llama3.1-8b_80gb-class_tp1_ok_oldformat.log"),
            "--json",
        ],
    )
    assert ok["log"]["kv_cache_tokens"] == 444_500
    shown = run(capsys, *["analyses", "show", aid, "--json"])["startup_logs"]
    assert len(shown) == 1 and shown[0]["log"]["engine"] == "sglang"


def test_store_keeps_logs_through_export_and_import(tmp_path):
    from store import Store

    s = Store(f"sqlite:///{tmp_path / 's.sqlite3'}")
    aid = s.create("q", qwen_cfg())
    g = log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log")
    s.add_log(aid, "tp1.log", g, "text")
    again = s.get(s.import_(s.export(aid)))
    assert again.logs[0]["log"] == g and again.logs[0]["name"] == "tp1.log"


# --- beside the prediction, and the memory model it calibrates -------------------------------------------------


def test_comparison_with_the_prediction_for_the_same_flags_by_hand():
    # RA-BIT for the log's flags (share 0.5 of 80 GiB, token budget 2,048): weights 7,615,616,512 params x 2 B
    # = 15.231e9 B; workspace 2 x 2,048 x 3,584 x 2 B = 29.36e6 B; KV = 42.950e9 - 1.5 GiB - 15.231e9 -
    # 0.029e9 = 26.078e9 B; the log's 24.83 GiB = 26.661e9 B is x1.0223. The overhead that reproduces the log:
    # (42.950e9 - 15.2995e9 (14.2488 GiB) - 26.661e9 - 0.029e9) / GiB = 0.894 GiB.
    c = compare_log(log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log"), qwen_cfg())
    assert c.predicted["weights_bytes"] == pytest.approx(15.231e9, rel=1e-4)
    assert c.predicted["kv_cache_bytes"] == pytest.approx(26.078e9, rel=1e-3)
    assert c.ratios["kv_cache_bytes"] == pytest.approx(1.0223, abs=2e-3)
    assert c.ratios["kv_cache_tokens"] == pytest.approx(c.ratios["kv_cache_bytes"], rel=2e-3)  # whole blocks
    assert c.calibrated["runtime_overhead_gib"] == pytest.approx(0.894, abs=2e-3)
    # predicted again with it, the KV memory is the log's but for the 68 MB the engine's weights exceed RA-BIT's
    W = c.measured["weights_bytes"] - c.predicted["weights_bytes"]
    assert c.recalibrated["kv_cache_bytes"] == pytest.approx(24.83 * GiB + W, rel=1e-6)
    assert c.config.assumptions.gpu_mem_util == 0.5 and c.config.workload.token_budget == 2048


def test_two_logs_at_two_budgets_separate_the_overhead_from_the_workspace():
    # RTX 3090, 23.58 GiB, share 0.9 (21.22 GiB), weights 14.9888 GiB; KV 3.81 GiB at max model len 20,000 and
    # 2.89 GiB at 29,000 (V0 profiles max(max model len, 2,048) tokens). Non-KV: 2.2332 and 3.1532 GiB, so the
    # workspace is 0.92 GiB / 9,000 tokens = 109,760 B per token (the formula 2 h b_a says 16,384 B: the real
    # profile peak is 6.7x it) and the overhead 2.2332 GiB - 20,000 x 109,760 B = 0.379 GiB.
    cfg = RabitConfig(model="llama-3.1-8b", gpu="l4", gpus_per_node=1, tp=1)
    pairs = [
        (log(f"vllm_0.6.x_v0_llama3.1-8b_rtx3090_{x}_EXCERPT.log"), cfg) for x in ("maxlen20000_ok", "maxlen29000_fail")
    ]
    m = calibrate_memory(pairs)
    assert m.workspace_bytes_per_token == pytest.approx(0.92 * GiB / 9000, rel=1e-3)
    assert m.runtime_overhead_gib == pytest.approx(0.379, abs=2e-3)
    assert m.formula_bytes_per_token == 16_384 and calibrate_memory(pairs[:1]) is None


def test_cli_memory_log_json_contract(capsys):
    out = run(
        capsys,
        *[
            "memory",
            "--model-config",
            str(QWEN),
            "--gpu",
            "a100-80gb",
            "--gpus",
            "1",
            "--tp",
            "1",
            "--log",
            str(D / "vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log"),
            "--json",
        ],
    )
    assert set(out["log"]) >= {
        "weights_bytes",
        "kv_cache_bytes",
        "kv_cache_tokens",
        "max_concurrency",
        "context_tokens",
        "unrecognised",
    }
    assert set(out["log_vs_predicted"]) == {
        "weights_bytes",
        "kv_cache_bytes",
        "kv_cache_tokens",
        "max_concurrency",
        "context_tokens",
    }
    assert out["log"]["kv_cache_tokens"] == 464_848 and out["oom"] is None
    assert out["log_vs_predicted"]["kv_cache_tokens"] == pytest.approx(
        464_848 / out["log_comparison"]["predicted"]["kv_cache_tokens"]
    )


# --- out of memory: at start-up or under load ------------------------------------------------------------------


def test_start_up_and_under_load_failures_are_told_apart():
    start = diagnose_oom(
        log("vllm_0.6.4dev_v0_llama3.1-8b_gpu-unknown_startup_fail_maxlen_gt_kv.log"),
        RabitConfig(model="llama-3.1-8b", gpu="l4", gpus_per_node=1, tp=1, input_tokens=8000, output_tokens=1000),
    )
    load = diagnose_oom(log("vllm_0.7.x_v0_deepseek-r1-awq_8xa800_runtime_oom_EXCERPT.log"))
    assert start.phase == "start-up" and load.phase == "under load"
    # start-up: the KV cache holds 41,200 tokens; a workload of 9,000-token requests loses nothing at 41,200
    assert start.remedies[0].change == "--max-model-len 41200" and start.remedies[0].cost == "free"
    # under load: 1.47 GiB reserved but unallocated against 1.27 GiB asked for: fragmentation, the free remedy
    assert (
        load.remedies[0].change.startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments")
        and load.remedies[0].cost == "free"
    )
    for d in (start, load):
        costs = [r.cost for r in d.remedies]
        assert costs == sorted(costs, key=["free", "headroom", "speed", "capacity", "quality", "hardware"].index)
    neg = diagnose_oom(log("vllm_0.10.1.1_mineru2.5-1.2b_rtx4060laptop-8gb_startup_fail_no_kv_memory.log"))
    assert neg.phase == "start-up" and "nothing for the KV cache" in neg.cause
    assert diagnose_oom(log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log")) is None


# --- the tuning loop -------------------------------------------------------------------------------------------


def test_tuning_loop_on_the_default_config_stops_at_the_target():
    # Llama-3.1-70B, TP 8 on H100, 4,096 + 4,096 tokens: vLLM starts at the model's 131,072-token window, so it
    # reports about 10.8x; --max-model-len 8192 multiplies that by 16 past the target of 32 at once.
    p = tune(RabitConfig())
    assert p.start.max_model_len == 131_072 and not p.start.concurrency >= 32
    assert [s.change for s in p.steps] == ["--max-model-len 8192"] and p.reached
    assert p.final.concurrency == pytest.approx(p.start.concurrency * 16)
    assert "target reached" in p.stopped_because and "--max-model-len 8192" in p.command


def test_tuning_loop_on_a_long_context_config_ends_at_its_stopping_rule():
    cfg = RabitConfig(
        model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, input_tokens=100_000, output_tokens=4_000, batch=16
    )
    p = tune(cfg)
    changes = [s.change.split()[0] for s in p.steps]
    assert changes[:2] == ["--max-model-len", "--gpu-memory-utilization"]
    assert all(b.after.concurrency >= a.after.concurrency for a, b in zip(p.steps, p.steps[1:]))
    # 16 requests of 104,000 tokens at 128 KiB a token need 204 GiB: not even an FP8 KV cache reaches it, so
    # the rule declines the accuracy check and the token budget step (its gain below its prefill cost)
    assert not p.reached and "costs more than it returns" in p.stopped_because
    assert "fp8" in (p.declined or "") and "--max-num-batched-tokens" in (p.declined or "")
    assert "--gpu-memory-utilization 0.95" in p.command and "--max-model-len 104000" in p.command


def test_tuning_loop_from_a_log_starts_at_the_engines_numbers():
    p = tune(qwen_cfg(), 64, log=log("vllm_0.10.1.1_qwen2-7b_a100-80gb_tp1_ok.log"))
    assert p.start.kv_cache_tokens == pytest.approx(464_848, rel=5e-3)  # the calibrated overhead reproduces it
    assert p.steps[0].change == "--max-model-len 2500" and p.reached


def test_cli_tune_json(capsys):
    out = run(
        capsys,
        *[
            "tune",
            "--model",
            "llama-3.1-8b",
            "--gpus",
            "1",
            "--tp",
            "1",
            "--input",
            "100000",
            "--output",
            "4000",
            "--batch",
            "16",
            "--json",
        ],
    )
    assert {"order", "stopping_rule", "start", "steps", "final", "reached", "stopped_because", "command"} <= set(out)
    r = out["ranges"]["final.kv_cache_tokens"]  # more runtime overhead, fewer tokens; less, more
    assert r["low"] < out["final"]["kv_cache_tokens"] < r["high"]
    assert "--target-concurrency" in fails(capsys, *["tune", "--target-concurrency", "0"])
