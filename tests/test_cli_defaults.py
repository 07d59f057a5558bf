"""The CLI's defaults fit the model: lengths the user never typed are not refused, and flags a trace makes
irrelevant are not checked."""

import json
from pathlib import Path

import pytest

from cli.main import main

OPT = str(Path(__file__).resolve().parent / "fixtures" / "opt-13b_config.json")  # max_position_embeddings 2,048


def run(args, capsys) -> tuple[int, dict | str]:
    try:
        code = main(args + ["--json"])
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, json.loads(cap.out) if code == 0 else cap.err


@pytest.mark.parametrize("cmd", ["memory", "speed"])
def test_the_default_lengths_fit_a_short_context(cmd, capsys):
    # OPT-13B reads 2,048 tokens: the shared defaults (4,096 + 4,096) do not fit, so the context is split in halves
    code, out = run([cmd, "--model-config", OPT, "--gpus", "1", "--tp", "1"], capsys)
    assert code == 0, out
    if cmd == "speed":
        assert (out["input_tokens"], out["output_tokens"]) == (1024, 1024)


def test_a_given_length_is_kept_and_the_other_takes_the_rest(capsys):
    code, out = run(["speed", "--model-config", OPT, "--gpus", "1", "--tp", "1", "--input", "1500"], capsys)
    assert code == 0 and (out["input_tokens"], out["output_tokens"]) == (1500, 548)  # 2,048 - 1,500


def test_given_lengths_that_do_not_fit_are_refused_naming_both_flags(capsys):
    code, err = run(["memory", "--model-config", OPT, "--gpus", "1", "--tp", "1", "--input", "3000"], capsys)
    assert code == 2 and "--input/--output" in err and "2,048-token context" in err


def test_a_model_with_a_long_context_keeps_the_shared_defaults(capsys):
    code, out = run(["speed", "--model", "llama-3.1-8b", "--gpus", "1", "--tp", "1"], capsys)
    assert code == 0 and (out["input_tokens"], out["output_tokens"]) == (4096, 4096)


def test_a_trace_makes_the_length_flags_irrelevant(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("input_tokens,output_tokens\n100,50\n300,150\n")
    args = ["simulate", "--model-config", OPT, "--gpus", "1", "--tp", "1", "--rate", "1", "--requests", "40"]
    code, out = run(args + ["--trace", str(trace), "--input", "999999"], capsys)
    assert code == 0, out  # the trace's lengths (200 + 100 on average) are the run's; --input is not checked
    assert out["completed"] == 40
