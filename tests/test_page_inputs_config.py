"""The Training and Next experiment pages' own inputs live in the shared config: they travel in the link and
the downloaded JSON, and ``rabit train`` / ``rabit next-experiment --config FILE`` read them as the pages do."""

import json
from pathlib import Path

from app_state import set_input
from streamlit.testing.v1 import AppTest

from cli.main import main
from core.base import DAY_S, choices
from core.config import DEFAULT, RabitConfig, from_json, from_query, to_query, training_goal_args
from core.training import MAX_GPUS, TrainingGoal, goal_from_inputs
from dashboard import cache, state

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")

CHANGED = DEFAULT.with_(
    training={"mode": "budget", "budget_gpus": 64, "max_gpus": 4096, "pin": True, "checkpoint_interval_s": 900.0},
    experiment={"prompt_spread_frac": 0.25, "output_spread_frac": 0.1, "rate_spread_frac": 0.5},
)


def test_the_page_inputs_round_trip_through_the_link_and_the_file():
    q = to_query(CHANGED)
    assert q["training.mode"] == "budget" and q["training.checkpoint_interval_s"] == "900.0"
    assert q["experiment.rate_spread_frac"] == "0.5"
    assert from_query(q) == CHANGED
    assert from_json(CHANGED.model_dump_json()) == CHANGED
    assert to_query(DEFAULT) == {}  # the defaults add nothing to a link


def test_the_defaults_are_the_cli_flags_and_the_search_ceiling():
    # one ceiling: the last search limit the page offers is core.training's search ceiling
    assert choices.TRAIN_SEARCH_LIMITS[-1] == MAX_GPUS == DEFAULT.training.max_gpus
    # the deadline lives once, in the targets (shared with the Optimizer's training run)
    args = training_goal_args(DEFAULT)
    assert args["deadline_days"] == DEFAULT.targets.deadline_days and args["gpus"] is None
    assert cache.training_goal(DEFAULT) == TrainingGoal(deadline_s=30 * DAY_S, max_gpus=MAX_GPUS)
    # a budget of "none" is the config's own cluster; pinning takes the config's ZeRO, recompute, micro-batch
    budget = cache.training_goal(DEFAULT.with_(training={"mode": "budget", "pin": True}))
    assert budget.gpus == DEFAULT.gpus and budget.deadline_s is None
    assert (budget.zero, budget.recompute, budget.micro_batch) == (DEFAULT.zero, DEFAULT.recompute, 1)
    assert cache.training_goal(CHANGED).checkpoint_interval_s == 900.0


def test_the_widget_shows_minutes_and_percent():
    assert state._to_widget("training.checkpoint_interval_s", 900.0) == 15.0
    assert state._from_widget("training.checkpoint_interval_s", 15.0) == 900.0
    assert state._to_widget("training.checkpoint_interval_s", None) == 0
    assert state._from_widget("training.checkpoint_interval_s", 0.0) is None
    for frac in (0.3, 0.25, 0.05, 0.0):
        shown = state._to_widget("experiment.rate_spread_frac", frac)
        assert state._from_widget("experiment.rate_spread_frac", shown) == frac


def test_a_link_opens_the_training_page_on_its_budget(clear_cache):
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in to_query(DEFAULT.with_(training={"mode": "budget", "budget_gpus": 16})).items():
        at.query_params[k] = v
    at.run()
    at.switch_page("../pages/training.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key=state.key("training.mode")).value == "budget"
    shown = {m.label: m.value for m in at.metric}
    assert shown["GPUs"] == "16"
    # changing a page input changes the link
    at.number_input(key=state.key("training.budget_gpus")).set_value(32).run()
    assert at.query_params["training.budget_gpus"] in ("32", ["32"])


def _json(args, capsys):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_rabit_train_reads_the_training_group_of_the_file(tmp_path, capsys):
    cfg = RabitConfig(model="llama-3.1-8b", gpus_per_node=8, phase="train", train_tokens=1e11).with_(
        targets={"deadline_days": 2.0}, training={"max_gpus": 512, "checkpoint_interval_s": 1800.0}
    )
    f = tmp_path / "c.json"
    f.write_text(cfg.model_dump_json())
    out = _json(["train", "--config", str(f), "--tokens", "1e11"], capsys)
    p = cache.training_plan(cfg, cache.training_goal(cfg))
    assert out["mode"] == "deadline" and out["deadline_s"] == 2.0 * DAY_S
    assert out["gpus"] == p.gpus and out["runtime_s"] == p.best.runtime_s
    assert out["checkpoint_interval_s"] == 1800.0
    # a budget in the file: planned on exactly that many GPUs, the config's knobs pinned
    cfg = cfg.with_(zero=3, training={"mode": "budget", "budget_gpus": 16, "pin": True})
    f.write_text(cfg.model_dump_json())
    out = _json(["train", "--config", str(f), "--tokens", "1e11"], capsys)
    assert out["gpus"] == 16 and out["layout"]["zero"] == 3
    assert cache.training_goal(cfg) == goal_from_inputs(cfg, gpus=16, max_gpus=MAX_GPUS, pin_sidebar=True)
    # a flag on the command line still wins
    out = _json(["train", "--config", str(f), "--tokens", "1e11", "--gpus", "8"], capsys)
    assert out["gpus"] == 8


def test_the_next_experiment_is_the_configs():
    spec = cache.next_experiment_spec(CHANGED.with_(workload={"rate_per_s": 2.0}, targets={"p95_ttft_s": 1.0}))
    assert spec.goal.workload.rate_per_s == 2.0 and spec.goal.p95_ttft_s == 1.0
    assert (spec.prompt_spread_frac, spec.output_spread_frac, spec.rate_spread_frac) == (0.25, 0.1, 0.5)


def test_the_next_experiment_shows_its_decision_with_a_range_and_a_tornado(clear_cache):
    from test_range_pages import BASIS, _range_captions, _titles

    at = AppTest.from_file(APP, default_timeout=240).run()
    # 1,000 output tokens: the E2E target (20 s) is met today at about 5-6 ms per decode step, so the page has
    # a decision to show (at the default 4,096 the step's fixed costs put every option past 20 s)
    at.number_input(key="cfg.output_tokens").set_value(1000).run()
    at.switch_page("../pages/next_experiment.py").run()
    at.multiselect(key=state.key("targets.gpus_allowed")).set_value(["h100-sxm", "h200-sxm"])
    at.number_input(key=state.key("experiment.rate_spread_frac")).set_value(50.0)
    at.button(key="ne.submit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["experiment.rate_spread_frac"] in ("0.5", ["0.5"])
    assert "Cost per hour" in {m.label for m in at.metric}
    assert any(BASIS in c for c in _range_captions(at)), _range_captions(at)
    assert any(t.startswith("What moves") for t in _titles(at)), _titles(at)


def test_the_diagnostics_predictions_travel_in_the_link(clear_cache):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["predicted.p95_ttft_s"] = "1.5"
    at.query_params["predicted.prefix_cache_frac"] = "0.4"
    at.run()
    at.switch_page("../pages/diagnostics.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key=state.key("predicted.p95_ttft_s")).value == 1.5
    assert at.number_input(key=state.key("predicted.prefix_cache_frac")).value == 40.0  # shown in percent
    at.number_input(key=state.key("predicted.p95_itl_s")).set_value(0.05).run()
    assert at.query_params["predicted.p95_itl_s"] in ("0.05", ["0.05"])
    assert not at.sidebar.error


def test_a_link_carries_the_pages_view(clear_cache):
    """The tab, view and bound a page shows travel in the link too (not in the config file)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["memory.tab"] = "Training"
    at.query_params["memory.bound"] = "pessimistic"
    at.query_params["math.view"] = "sideways"  # not a view of that page: named, the rest applies
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    labels = {m.label for m in at.tabs[1].metric}
    assert "Optimizer state per GPU" in labels and not at.tabs[0].metric
    assert any("pessimistic" in i.value for i in at.info)
    assert not any("Session State" in w.value for w in at.warning)  # no "default value and ..." warning
    assert any("sideways was not used" in e.value for e in at.sidebar.error)
    assert at.query_params["memory.tab"] in ("Training", ["Training"])
    assert at.query_params["memory.bound"] in ("pessimistic", ["pessimistic"])
    set_input(at, "memory.bound", "base")  # back to base: the parameter leaves the link
    at.run()
    assert "memory.bound" not in at.query_params


def test_a_page_keeps_its_view_while_another_is_shown(clear_cache):
    at = AppTest.from_file(APP, default_timeout=120).run()
    set_input(at, "memory.bound", "optimistic")
    at.run()
    at.switch_page("../pages/math.py").run()
    assert at.query_params["memory.bound"] in ("optimistic", ["optimistic"])
    at.switch_page("../pages/memory.py").run()
    assert not at.exception and any("optimistic" in i.value for i in at.info)
