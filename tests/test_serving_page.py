"""The Serving simulation page: tiles follow the rate, saturation is announced, bad input is an error."""

import re
from pathlib import Path

from app_state import set_input
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def open_serving(**preset) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    # a small, fast replica: Llama-3.1-8B on one H100, 1,000 in / 250 out
    at.selectbox(key="cfg.model").set_value("llama-3.1-8b")
    at.number_input(key="cfg.gpus_per_node").set_value(1)
    at.number_input(key="cfg.tp").set_value(1)
    at.number_input(key="cfg.input_tokens").set_value(1000)
    at.number_input(key="cfg.output_tokens").set_value(250).run()
    for k, v in preset.items():  # page inputs start from these values (saves a first full-size run)
        set_input(at, f"cfg.workload.{k}", v)
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tiles(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_rate_moves_p95_overload_is_flagged_small_runs_withhold(clear_cache):
    at = open_serving(num_requests=400, rate_per_s=5.0, lengths="lognormal")
    assert at.number_input(key="cfg.workload.rate_per_s").value == 5.0
    low = tiles(at)
    assert not any("Saturated" in e.value for e in at.error)
    assert any("Stable" in s.value for s in at.success)
    # 400 completed requests: every percentile is shown
    assert "withheld" not in low["E2E p95"] and "withheld" not in low["E2E p99"]
    at.number_input(key="cfg.workload.rate_per_s").set_value(20.0).run()
    mid = tiles(at)
    assert mid["E2E p95"] != low["E2E p95"]
    assert mid["TTFT p95"] != low["TTFT p95"]
    # far above the ~31 req/s closed-form capacity of this replica
    at.number_input(key="cfg.workload.rate_per_s").set_value(120.0).run()
    assert not at.exception
    assert any("Saturated" in e.value for e in at.error)
    # the knee sweep and the charts are drawn
    assert any("knee" in h.value for h in at.subheader)
    assert len(at.get("plotly_chart")) == 4  # CDF, time series, p95 vs rate (with its band), tornado
    # (one app session for the whole story: starting the app costs more than the simulations)
    at.number_input(key="cfg.workload.rate_per_s").set_value(5.0)
    at.number_input(key="cfg.workload.num_requests").set_value(50).run()
    t = tiles(at)
    assert t["E2E p99"] == "withheld (n=50)" and "withheld" not in t["E2E p95"]
    at.number_input(key="cfg.workload.max_batch").set_value(10_000).run()  # above the 8,192-token budget
    assert not at.exception
    assert any("token_budget" in e.value for e in at.error)


def test_workload_survives_another_page_and_travels_in_the_link(clear_cache):
    at = open_serving(num_requests=200, rate_per_s=3.0)
    at.number_input(key="cfg.workload.rate_per_s").set_value(4.0).run()
    at.switch_page("../pages/memory.py").run()
    assert at.query_params["workload.rate_per_s"] in ("4.0", ["4.0"])  # the link carries the page's inputs
    at.switch_page("../pages/serving.py").run()
    assert not at.exception
    assert at.number_input(key="cfg.workload.rate_per_s").value == 4.0


def test_engine_choice_sets_its_documented_defaults_and_the_launch_cost(clear_cache):
    at = open_serving(num_requests=60, rate_per_s=2.0)
    assert at.selectbox(key="cfg.workload.engine").value == "vllm"
    assert any("vLLM on h100-sxm" in c.value for c in at.caption)
    # TensorRT-LLM: max_batch_size 2,048, GUARANTEED_NO_EVICT (reserve), CUDA graphs up to 128 tokens
    at.selectbox(key="cfg.workload.engine").set_value("trtllm").run()
    assert not at.exception
    cap = next(c.value for c in at.caption if "TensorRT-LLM on h100-sxm" in c.value)
    assert "128 tokens" in cap and "Differs here" in cap
    before = tiles(at)
    next(b for b in at.button if "TensorRT-LLM" in b.label).click().run()
    assert not at.exception
    assert at.session_state["cfg.workload.admission"] == "reserve"
    assert at.session_state["cfg.workload.max_batch"] == 2048
    assert at.session_state["cfg.workload.token_budget"] == 8192
    assert any("These settings are its defaults" in c.value for c in at.caption)
    assert tiles(at) != before  # the simulation reran with the engine's scheduler and launch costs
    # eager mode (no CUDA graphs) makes every iteration pay host launches: the run slows down
    graphs = tiles(at)
    at.checkbox(key="cfg.workload.cuda_graphs").uncheck().run()
    assert not at.exception and at.session_state["cfg.workload.cuda_graphs"] is False
    assert tiles(at)["E2E p95"] != graphs["E2E p95"]


def test_eight_h100_at_tp4_and_five_requests_per_second_are_two_replicas_of_two_and_a_half(clear_cache):
    """The planning meeting's first question, opened from a link: 8 x H100 at TP 4 make 2 replicas, and at 5
    requests/s the router gives each 2.5 (the headline says both; the link round-trips the deployment)."""
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in {
        "tp": "4",
        "input_tokens": "1000",
        "output_tokens": "250",
        "workload.rate_per_s": "5",
        "workload.num_requests": "200",
    }.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("../pages/serving.py").run()
    assert not at.exception, [e.value for e in at.exception]
    head = next(m.value for m in at.markdown if m.value.startswith("### "))
    assert "8 x h100-sxm at 5 requests/s of 1,000 in + 250 out tokens: 2 replicas of TP 4" in head
    assert "**2.5 requests/s each**" in head
    # the capacity card is the deployment's, as its range is (2 x ~9.85 = 19.7 requests/s, not one replica's; 19.6
    # with the paged K/V read at 0.75 of peak, core.physics.read_factors; 19.7 before the TP 4 output and down
    # projections paid their short reduction, core.physics.gemm_shape; 20.6 before the TP 4 all-reduces were priced
    # at the in-switch all-reduce's measured bandwidth)
    card = next(m for m in at.metric if m.label == "Deployment's closed-form capacity [requests/s]")
    bare = [re.match(r"range: ([\d.]+) … ([\d.]+) \(", c.value) for c in at.caption]
    assert card.value == "19.7" and any(float(m[1]) <= 19.7 <= float(m[2]) for m in bare if m)
    # another router and a third replica travel in the link
    at.selectbox(key="cfg.workload.router").set_value("round-robin")
    at.number_input(key="cfg.workload.replicas").set_value(3).run()
    assert not at.exception
    head = next(m.value for m in at.markdown if m.value.startswith("### "))
    assert "3 replicas of TP 4" in head and "1.67 requests/s each" in head and "round-robin" in head
    assert at.query_params["workload.router"] in ("round-robin", ["round-robin"])
    assert at.query_params["workload.replicas"] in ("3", ["3"])
    # disaggregated: the pools and the KV transfer are shown
    at.checkbox(key="cfg.disagg.enabled").check().run()
    assert not at.exception, [e.value for e in at.exception]
    head = next(m.value for m in at.markdown if m.value.startswith("### "))
    assert "1 prefill x h100-sxm TP 4 + 1 decode x h100-sxm TP 4, disaggregated" in head
    assert any(m.label == "KV transfer p50" for m in at.metric)


def test_utilisation_is_the_load_and_the_iteration_share_is_named_apart(clear_cache):
    # 5 requests/s on a replica of ~21 requests/s closed-form capacity (the page's scheduler defaults): a load of
    # 24 %; an iteration runs nearly all the time (a request is always in flight), which the page called "GPU busy"
    at = open_serving(num_requests=400, rate_per_s=5.0)
    t = tiles(at)
    assert "GPU busy" not in t
    util, running = (float(t[k].rstrip("%")) for k in ("Utilisation", "Iteration running"))
    nominal = next(
        float(m.group(1)) for c in at.caption if (m := re.search(r"= (\d+)% of the deployment's closed-form", c.value))
    )
    # utilisation = the arrival rate x the service demand (1 / capacity): the share the headline states
    assert util == nominal
    assert running > 3 * util
