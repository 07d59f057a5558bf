"""``rabit simulate --sessions``: the JSON contract, the sizing answer and the refusals (exit 2, one line)."""

import pytest

from tests.clirun import fails, run

BASE = ("simulate", "--model", "llama-3.1-8b", "--tp", "1", "--gpus", "1")


def test_sessions_json_keys(capsys):
    d = run(capsys, *BASE, "--sessions", "30", "--rate", "0.5", "--turns", "4", "--json")
    s = d["sessions"]
    assert s["loop"] == "compiled" and s["fallback_reason"] is None and s["sessions"] == 30 and s["turns"] == 120
    assert [t["turn"] for t in s["ttft_by_turn"]] == [1, 2, 3, 4]
    for k in (
        "prefix_hit_rate",
        "evicted_prefixes",
        "evicted_tokens",
        "cost_per_session_usd",
        "cost_per_agent_hour_usd",
        "usd_per_hour",
        "ttft_p95_s",
    ):
        assert k in s
    assert d["session_workload"]["num_sessions"] == 30 and d["session_workload"]["rate_per_s"] == 0.5
    assert 0 < s["prefix_hit_rate"] < 1 and s["ttft_by_turn"][1]["hit_frac"] > 0.5


def test_sizing_answers_gpus_and_cost(capsys):
    d = run(
        capsys,
        *BASE,
        "--sessions",
        "10",
        "--agents",
        "16",
        "--turns",
        "4",
        "--ttft-p95",
        "0.5",
        "--size-gpus",
        "h100-sxm,l40s",
        "--json",
    )
    z = d["sizing"]
    assert z["agents"] == 16 and z["ttft_p95_target_s"] == 0.5
    assert {o["gpu"] for o in z["options"]} == {"h100-sxm", "l40s"}
    a = z["answer"]
    assert a is not None and a["meets"] and a["ttft_p95_s"] <= 0.5
    # the answer is the cheapest option that meets
    assert a["usd_per_hour"] == min(o["usd_per_hour"] for o in z["options"] if o["meets"])


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--sessions", "5", "--session-cv", "-1"), ["--session-cv"]),
        (("--size-gpus", "h100-sxm"), ["--size-gpus", "--ttft-p95"]),
        (("--sessions", "5", "--ttft-p95", "0"), ["--ttft-p95", "positive"]),
        (("--sessions", "5", "--turns", "0"), ["--turns", "at least 1"]),
        (("--sessions", "5", "--disagg"), ["--disagg"]),
    ],
)
def test_refusals_name_the_flag(capsys, extra, words):
    err = fails(capsys, *BASE, *extra)
    for w in words:
        assert w in err


def test_bad_session_trace_names_line_and_column(capsys, tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("session_id,turn,input_tokens,output_tokens\na,0,100,20\na,1,5,0\n")
    err = fails(capsys, *BASE, "--session-trace", str(f))
    assert "--session-trace" in err and "line 3" in err and "output_tokens" in err


def test_a_config_file_with_sessions_runs_them(capsys, tmp_path):
    from core.config import RabitConfig, Sessions

    cfg = RabitConfig(model="llama-3.1-8b", tp=1, gpus_per_node=1, sessions=Sessions(num_sessions=12, rate_per_s=1.0))
    f = tmp_path / "c.json"
    f.write_text(cfg.model_dump_json())
    d = run(capsys, "simulate", "--config", str(f), "--json")
    assert d["sessions"]["sessions"] == 12 and d["session_workload"]["rate_per_s"] == 1.0


REC = ("recommend", "--model", "llama-3.1-8b", "--gpus-allowed", "l40s", "--weights-allowed", "bf16")


def test_recommend_sizes_for_agents_as_the_session_sizing_does(capsys):
    """16 agents at 0.5 s p95 TTFT per turn on L40S: the optimizer's search (layouts, counts) and the session
    sizing (the config's replica, counts) land on the same answer, one GPU at TP 1, with the same p95 over every
    turn: far from any batch cap, the two searches simulate the same sessions on the same replica."""
    d = run(capsys, *REC, "--kv-allowed", "bf16", "--agents", "16", "--p95-ttft-s", "0.5", "--max-simulations", "8",
            "--json")  # fmt: skip
    assert d["met"] and d["agents"] == 16 and d["session_workload"]["arrival"] == "agents"
    pick = d["recommendation"]
    z = run(capsys, *BASE, "--gpu", "l40s", "--sessions", "10", "--agents", "16", "--ttft-p95", "0.5",
            "--size-gpus", "l40s", "--json")["sizing"]["answer"]  # fmt: skip
    assert (pick["gpu"], pick["tp"], pick["replicas"]) == (z["gpu"], 1, z["replicas"]) == ("l40s", 1, 1)
    assert pick["p95_ttft_s"] == pytest.approx(z["ttft_p95_s"], rel=1e-12)


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--agents", "16", "--rate", "3"), "not both"),
        (("--agents", "0"), "--agents: must be at least 1"),
    ],
)
def test_recommend_agents_refusals(capsys, extra, words):
    assert words in fails(capsys, *REC, *extra)
