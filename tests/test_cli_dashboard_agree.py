"""One analysis file, one set of numbers: the CLI reading a saved config gives what the dashboard's cached
functions give for that config (the same file the sidebar downloads)."""

import json

import pytest

from cli.main import main
from core.assumptions import Assumptions
from core.config import RabitConfig
from dashboard import cache


@pytest.fixture
def saved(tmp_path):
    cfg = RabitConfig(model="llama-3.1-8b", gpu="a100-80gb", gpus_per_node=4, tp=2, batch=24, input_tokens=3000,
                      output_tokens=700, kv_dtype="fp8", block_size=32, fabric="roce-400g",
                      assumptions=Assumptions().with_(mbu=0.7, gpu_mem_util=0.88, step_overhead_ms=0.8))
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
    from core.uncertainty import at_bound

    cfg, path = saved
    out = _json(["speed", "--config", path, "--bound", "low"], capsys)
    assert out["decode_step_s"] == cache.speed_summary(at_bound(cfg, "low")).decode.step_s
