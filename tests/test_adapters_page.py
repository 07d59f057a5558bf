"""The 50-adapter and 300-adapter questions on the pages: what the adapters take from memory, the per-variant
comparison in GPUs and cost, the loads under load, the adapter chain of Show the math, all from a link."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core import catalog
from core.config import from_query
from core.decision import Constraints, ServingGoal, per_variant, recommend
from core.physics import adapter_kv_cost

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")

#: Fifty adapters over Llama-3.1-8B on one H100, eight GPU slots.
FIFTY = {
    "model": "llama-3.1-8b",
    "tp": "1",
    "gpus_per_node": "1",
    "input_tokens": "1000",
    "output_tokens": "250",
    "adapters.count": "50",
    "adapters.ranks": "16",
    "adapters.max_loras": "8",
    "workload.rate_per_s": "5",
    "workload.num_requests": "300",
    "targets.gpus_allowed": "h100-sxm,l40s",
    "targets.max_simulations": "4",
    "targets.requests_per_simulation": "300",
}
#: Three hundred, their slots left to the search.
THREE_HUNDRED = {**{k: v for k, v in FIFTY.items() if k != "adapters.max_loras"}, "adapters.count": "300"}


def opened(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_memory_page_shows_what_fifty_adapters_take(clear_cache):
    at = opened(FIFTY)
    assert not at.exception
    shown = metrics(at)
    # one rank-16 adapter on every linear layer: 83,886,080 B; eight slots: 671,088,640 B per GPU
    assert shown["One adapter"] == "83.9 MB"
    assert shown["Slots reserved per GPU"] == "671 MB"
    assert shown["Adapter slots"] == "8 at rank 16"
    cost = adapter_kv_cost(from_query(FIFTY))
    assert shown["Sequences without adapters"] == f"{cost.sequences_without:,}"
    assert any(f"{cost.sequences_lost:,} fewer sequences" in c.value for c in at.caption)
    assert any("50 adapters over one base" in m.value for m in at.markdown)
    # the link carries the adapter set
    assert at.query_params["adapters.count"] in ("50", ["50"])


def test_optimizer_page_sets_three_hundred_adapters_beside_one_deployment_each(clear_cache):
    at = opened(THREE_HUNDRED)
    at.switch_page("../pages/optimizer.py").run()
    assert not at.exception
    shown = metrics(at)
    cfg = from_query(THREE_HUNDRED)
    goal, cons = ServingGoal.from_config(cfg), Constraints.from_config(cfg)
    pv = per_variant(goal, cons, catalog.prices(), recommend(goal, cons).recommendation)
    assert pv.gpus >= 300
    assert shown["One deployment per variant"] == f"{pv.gpus:,} GPUs, ${pv.cost_per_hour:,.2f}/h"
    assert shown["Adapters over one base"].endswith(f"${pv.multi_lora_cost_per_hour:,.2f}/h")
    assert any("300 adapters: one deployment per variant" in h.value for h in at.subheader)


def test_serving_page_shows_the_loads_and_math_the_adapter_chain(clear_cache):
    at = opened(FIFTY)
    at.switch_page("../pages/serving.py").run()
    assert not at.exception
    shown = metrics(at)
    assert int(shown["Adapter loads"].replace(",", "")) > 0
    assert "Slot wait p95" in shown
    at.switch_page("../pages/math.py").run()
    assert not at.exception
    assert any(h.value == "Adapters over one base" for h in at.subheader)


def test_serving_page_routes_a_deployments_adapters_by_affinity(clear_cache):
    """Two replicas behind the adapter-affinity router (the link's router): the page simulates the deployment and
    shows its adapter loads, fewer than round-robin's on the same requests (the CLI's numbers)."""
    two = {**FIFTY, "gpus_per_node": "2", "workload.rate_per_s": "10", "workload.num_requests": "400"}
    loads = {}
    for router in ("round-robin", "adapter-affinity"):
        at = opened({**two, "workload.router": router})
        at.switch_page("../pages/serving.py").run()
        assert not at.exception
        loads[router] = int(metrics(at)["Adapter loads"].replace(",", ""))
        assert any("2 replicas" in m.value for m in at.markdown)
    assert 0 < loads["adapter-affinity"] < loads["round-robin"], loads


def test_sidebar_adapter_inputs_update_the_page_and_refuse_bad_ranks(clear_cache):
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert "One adapter" not in metrics(at)  # the base alone by default
    at.number_input(key="cfg.adapters.count").set_value(100).run()
    # Llama-3.1-70B, rank 16, all linear layers, BF16: 16 x 80 x (16,384 + 9,216 + 9,216 + 16,384 + 3 x 36,864)
    # x 2 B = 16 x 80 x 161,792 x 2 = 414,187,520 B
    assert metrics(at)["One adapter"] == "414 MB"
    at.text_input(key="cfg.adapters.ranks").set_value("16, lots").run()
    assert not at.exception
    assert at.sidebar.error


#: The fifty adapters at vLLM's default of one adapter slot (max_loras unset).
ONE_SLOT = {k: v for k, v in FIFTY.items() if k != "adapters.max_loras"}


def test_one_adapter_slot_is_named_as_the_cause_with_its_fix(clear_cache):
    """With one slot for fifty adapters nearly every request waits for a slot: the Serving page's headline and the
    Memory page's adapter section say so, with the wait share and the max_loras that meets the TTFT target."""
    at = opened(ONE_SLOT)
    memory = [w.value for w in at.warning if "wait for an adapter slot" in w.value]
    at.switch_page("../pages/serving.py").run()
    assert not at.exception
    said = [m.value for m in (*at.error, *at.warning) if "wait for an adapter slot" in m.value]
    assert len(said) == 1 and memory, (said, memory)
    text = said[0]
    assert "max_loras = 1 slot" in text and "of the time to first token" in text
    share = int(text.split("**: ")[1].split("%")[0])
    assert share >= 50  # the wait is most of the time to first token
    fix = int(text.split("max_loras = ")[2].split("**")[0])
    assert fix > 1 and "meets the p95 TTFT target of 2 s" in text
    assert f"--max-loras {fix}" in memory[0]
