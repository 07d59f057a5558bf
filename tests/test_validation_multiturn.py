"""The vllm-multiturn family: vLLM's multi-turn conversation benchmark (GPUStack's Qwen3-8B on RTX 4090 run)
replayed through the session simulator."""

import math

import pytest

import core.decision.validation_files as vfiles
import core.decision.validation_multiturn as mt
from core import serving
from core.decision import run

FAMILY, FILE = mt.FAMILY, mt.FILE
first_input_sigma, multiturn_config, replay, user_turns = (
    mt.first_input_sigma,
    mt.multiturn_config,
    mt.replay,
    mt.user_turns,
)


@pytest.fixture(scope="module")
def rows():
    return vfiles.raw_rows(FILE)


def test_the_csv_holds_the_pages_plain_vllm_row_and_its_benchmark_settings(rows):
    # gpustack/gpustack docs/performance-lab/references/evaluating-lmcache-prefill-acceleration-in-vllm.md,
    # "5K Input Tokens", row "Without LMCache": Input TPS 5849, Total TPS 5957, Mean TTFT 4350.48 ms,
    # Mean TPOT 48.47 ms; generate_multi_turn.json and the benchmark command on the same page.
    got = {r["metric"]: float(r["measured"]) for r in rows}
    assert got == {
        "ttft_mean_s": 4.35048,
        "tpot_mean_s": 0.04847,
        "input_tokens_per_s": 5849.0,
        "total_tokens_per_s": 5957.0,
    }
    for r in rows:
        assert r["family"] == FAMILY and r["source"] and r["date"] and "v0.10.1.1" in r["date"]
        assert (r["model"], r["gpu"], r["tp"], r["engine"]) == ("qwen3-8b", "rtx-4090", "1", "vllm")
        assert (r["conversations"], r["clients"], r["turns_min"], r["turns_max"]) == ("24", "10", "12", "18")
        assert (r["common_prefix"], r["prefix_average"], r["prefix_max"]) == ("500", "4000", "20000")
        assert (r["new_min"], r["new_max"], r["output_min"], r["output_max"]) == ("120", "160", "80", "120")


def test_the_pages_figures_agree_with_each_other_by_littles_law(rows):
    # A closed loop of 10 clients with no pause: requests/s = 10 / mean latency, the latency TTFT + (O - 1) TPOT
    # with O = 100 mean answer tokens: 10 / (4.35048 + 99 x 0.04847) = 10 / 9.1490 = 1.093 /s. The page's
    # Total - Input TPS is the generated tokens per second, 108 / 100 = 1.08 answers/s: 1.2 % apart, so its TPS
    # are tokens over the run's span (the reading the replay uses).
    m = {r["metric"]: float(r["measured"]) for r in rows}
    by_latency = 10 / (m["ttft_mean_s"] + 99 * m["tpot_mean_s"])
    by_tokens = (m["total_tokens_per_s"] - m["input_tokens_per_s"]) / 100
    assert by_latency == pytest.approx(1.093, abs=1e-3)
    assert by_tokens == pytest.approx(by_latency, rel=0.02)


def test_benchmark_settings_map_onto_the_session_workload_by_hand(rows):
    # 12-18 messages rounded up to even: 12, 14, 16, 18 -> 6-9 user turns
    assert user_turns(12, 18) == (6, 9)
    assert user_turns(13, 17) == (7, 9)
    # sigma^2 = 2 ln(1 / 0.85) = 0.32504; sd / mean = sqrt(e^0.32504 - 1) = 0.61975; sd = 2,479.0 tokens;
    # first prompt mean 500 + 4,000 + 140 = 4,640: sigma = sqrt(ln(1 + (2,479.0 / 4,640)^2)) = sqrt(0.25111) = 0.5011
    assert first_input_sigma(4640, 4000) == pytest.approx(0.5011, abs=2e-4)
    s = multiturn_config(rows[0]).sessions
    assert s is not None and s.arrival == "agents" and s.agents == 10 and s.num_sessions == 24 and s.gap_s == 0
    assert s.first_input.mean == 4640 and s.new_input.mean == 140 and s.output.mean == 100
    assert s.turns.mean == 7.5 and s.turns.upper() == 9


def test_the_family_runs_deterministically_and_obeys_the_closed_loop(rows):
    rep = run(families=(FAMILY,))
    assert len(rep.cases) == 4 and [f.family for f in rep.families] == [FAMILY]
    for c in rep.cases:
        assert 0 < c.predicted < math.inf, c.id
    assert [c.predicted for c in rep.cases] == [c.predicted for c in run(families=(FAMILY,)).cases]
    # closed loop of 10 agents: at most 10 turns in the system, so (turns / span) x mean E2E <= 10 (Little's law;
    # below 10 while the last sessions drain)
    cfg = multiturn_config(rows[0])
    assert cfg.sessions is not None
    res = serving.simulate_sessions(cfg, cfg.sessions).result
    done = res.status == 0
    span = float(res.finish_s[done].max() - res.arrival_s.min())
    in_system = done.sum() / span * float(res.samples("e2e_s").mean())
    assert 6.0 < in_system <= 10.0 + 1e-9
    got = dict(replay(cfg))
    assert got["total_tokens_per_s"] > got["input_tokens_per_s"]
