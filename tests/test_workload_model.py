"""One workload model: the config's workload group and the simulator's SimSpec share their fields, defaults and
domains, and every widget's bounds come from the one domain in core.base.limits."""

import ast
from pathlib import Path

import pytest

from core.base import GROUP_DOMAINS
from core.config import DEFAULT, LOAD_FIELDS, RabitConfig, ServingLoad, SimSpec, Workload
from core.decision import ServingGoal
from core.serving import sim_spec

ROOT = Path(__file__).resolve().parent.parent


def test_the_shared_fields_have_one_default():
    for f in LOAD_FIELDS:
        assert (
            Workload.model_fields[f].default == SimSpec.model_fields[f].default == ServingLoad.model_fields[f].default
        )
    # the simulator's default workload is the default config's, and so is the optimizer's default goal's
    assert sim_spec(DEFAULT) == SimSpec()
    assert ServingGoal().workload == ServingGoal.from_config(DEFAULT).workload


def test_sim_spec_carries_every_shared_field_as_it_is():
    # a value other than the default in every shared field (closed loop, so rate and users both matter)
    moved = {
        "arrival": "closed",
        "rate_per_s": 7.5,
        "users": 3,
        "think_s": 1.5,
        "num_requests": 77,
        "duration_s": 60.0,
        "policy": "prefill_priority",
        "token_budget": 4096,
        "max_batch": 64,
        "admission": "reserve",
        "prefix_caching": False,
        "timeout_s": 30.0,
        "kv_pool_tokens": 12_345,
        "seed": 9,
        "prefix_cache_frac": 0.25,
        "prefix_groups": 5,
        "async_scheduling": False,
    }
    assert set(moved) == set(LOAD_FIELDS)
    assert all(moved[f] != getattr(DEFAULT.workload, f) for f in moved)
    cfg = DEFAULT.with_(workload=moved, input_tokens=1000, output_tokens=250)
    spec = sim_spec(cfg)
    assert {f: getattr(spec, f) for f in LOAD_FIELDS} == moved
    assert (spec.input.mean, spec.output.mean) == (1000, 250)


@pytest.mark.parametrize("field, bad", [("rate_per_s", 0.0), ("max_batch", 0), ("seed", -1), ("think_s", 1e9)])
def test_the_config_and_the_simulator_refuse_the_same_values(field, bad):
    d = GROUP_DOMAINS[f"workload.{field}"]
    assert d.problem(bad) is not None
    for build in (lambda: Workload(**{field: bad}), lambda: SimSpec(**{field: bad})):
        with pytest.raises(ValueError, match="below the minimum|above the maximum"):
            build()
    with pytest.raises(ValueError):
        RabitConfig(workload={field: bad})


def test_every_group_field_with_a_number_has_a_domain():
    from core.config import GROUPS

    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            ann = str(info.annotation)
            if ("int" in ann or "float" in ann) and "tuple" not in ann and "Literal" not in ann:
                assert f"{group}.{name}" in GROUP_DOMAINS, f"{group}.{name}"


def _widget_calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("number_input", "slider"):
                yield node


def test_pages_type_no_widget_bounds():
    """A page's number inputs and sliders take their bounds from dashboard.state (the one domain), never typed."""
    typed = []
    for page in sorted((ROOT / "pages").glob("*.py")):
        for call in _widget_calls(page):
            kws = {k.arg for k in call.keywords if k.arg}
            if len(call.args) > 1 or kws & {"min_value", "max_value", "step"}:
                typed.append(f"{page.name}:{call.lineno}")
    assert not typed


def test_widget_bounds_follow_the_domain():
    from dashboard import state

    assert state.bounds("workload.rate_per_s") == {"min_value": 1e-6, "max_value": 1e6, "step": 0.5}
    # a spread is shown in percent: 0 .. 99 % in steps of 5 %
    assert state.bounds("experiment.rate_spread_frac") == {"min_value": 0.0, "max_value": 99.0, "step": 5.0}
    # 0 stands for "no target"
    assert state.bounds("targets.p95_ttft_s")["min_value"] == 0.0
    assert state.bounds("targets.max_gpus") == {"min_value": 0, "max_value": 65_536, "step": 1}
    # a checkpoint interval is shown in minutes: up to 1e7 s / 60
    assert state.bounds("training.checkpoint_interval_s")["max_value"] == pytest.approx(1e7 / 60)
