"""The shared config: frozen, hashable, and it round-trips through the URL and a file."""

import pytest

from core import catalog
from core.base import REGISTRY, Assumptions
from core.config import DEFAULT, RabitConfig, from_json, from_query, problems, to_query
from core.physics import fit_problems


def test_frozen_and_hashable():
    cfg = RabitConfig(batch=7)
    assert hash(cfg) == hash(RabitConfig(batch=7)) and hash(cfg) != hash(DEFAULT)
    with pytest.raises(Exception):
        cfg.batch = 8  # type: ignore[misc]


def test_query_round_trip_with_nested_objects():
    arch = catalog.model("mixtral-8x7b").model_copy(update={"slug": "my-moe", "name": "My MoE"})
    cfg = RabitConfig(
        model="qwen3-32b",
        gpu="mi300x",
        tp=4,
        nodes=2,
        batch=3,
        weights="fp8",
        zero=3,
        sequence_parallel=False,
        prefix_cache_frac=0.25,
        custom_model=arch,
        assumptions=Assumptions().with_(mbu=0.61),
    )
    q = to_query(cfg)
    assert set(q) >= {"model", "gpu", "tp", "nodes", "batch", "weights", "zero", "custom_model", "assumptions"}
    assert all(isinstance(v, str) for v in q.values())
    assert from_query(q) == cfg
    # defaults are left out of the link: a default config is an empty query
    assert to_query(DEFAULT) == {}
    assert from_query({}) == DEFAULT


def test_query_errors_name_the_parameter():
    with pytest.raises(ValueError, match="batch"):
        from_query({"batch": "-3"})
    with pytest.raises(ValueError, match="custom_model"):
        from_query({"custom_model": "zGarbage"})
    # unknown parameters (e.g. from another tool) are ignored
    assert from_query({"utm_source": "x"}) == DEFAULT


def test_json_file_round_trip():
    cfg = RabitConfig(model="deepseek-v3", ep=8, lora_rank=16, phase="train")
    assert from_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValueError, match="tp"):
        from_json('{"tp": 0}')
    with pytest.raises(ValueError):
        from_json("not json")


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"tp": 3}, "tp", "does not divide the 64 attention heads"),
        ({"tp": 16}, "tp", "needs more GPUs"),
        ({"gpus_per_node": 16}, "gpus_per_node", "holds at most 8"),
        ({"ep": 2}, "ep", "has no experts"),
        ({"input_tokens": 200_000}, "input_tokens", "exceeds"),
        ({"model": "nope"}, "model", "unknown model"),
    ],
)
def test_invalid_combinations_are_named(changes, field, words):
    probs = problems(DEFAULT.with_(**changes))
    assert any(p.field == field and words in p.message for p in probs), probs


def test_cannot_fit_at_batch_one_is_a_warning_on_tp():
    """The field checks find nothing wrong with the inputs; the physics wing's fit check warns on TP."""
    cfg = RabitConfig(model="llama-3.1-405b", gpus_per_node=1, tp=1)
    assert problems(cfg) == ()
    probs = fit_problems(cfg)
    assert [(p.field, p.blocking) for p in probs] == [("tp", False)]
    assert "cannot fit even at batch 1" in probs[0].message


def test_field_validation():
    for bad in ({"batch": 0}, {"input_tokens": -1}, {"nodes": 0}, {"prefix_cache_frac": 1.0}):
        with pytest.raises(Exception):
            RabitConfig(**bad)


def test_assumption_bounds_bracket_base():
    for name, info in REGISTRY.items():
        assert min(info.low, info.high) <= info.base <= max(info.low, info.high), name
        assert info.source, name
    lo, hi = Assumptions().at("low"), Assumptions().at("high")
    assert lo.mbu < hi.mbu and lo.step_overhead_ms > hi.step_overhead_ms


def test_workload_and_targets_round_trip_the_link_and_the_file():
    from core.config import Targets, Workload

    cfg = RabitConfig(
        workload=Workload(arrival="closed", users=40, lengths="lognormal", timeout_s=30.0, seed=3),
        targets=Targets(
            p95_ttft_s=None,
            p95_itl_s=0.05,
            gpus_allowed=("h100-sxm", "mi300x"),
            weights_allowed=("fp8",),
            price_kind="spot",
            deadline_days=12.5,
        ),
    )
    q = to_query(cfg)
    # readable keys per field; an unset target travels as "none", a tuple as a comma-separated list
    assert q["workload.arrival"] == "closed" and q["targets.p95_ttft_s"] == "none"
    assert q["targets.gpus_allowed"] == "h100-sxm,mi300x"
    assert from_query(q) == cfg and hash(from_query(q)) == hash(cfg)
    assert from_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValueError, match="rate_per_s"):
        from_query({"workload.rate_per_s": "0"})
    with pytest.raises(ValueError, match="weights_allowed"):
        from_query({"targets.weights_allowed": ""})


def test_serving_goal_has_one_rate_and_a_typed_custom_model():
    from core.config import Workload
    from core.decision import Constraints, ServingGoal

    cfg = RabitConfig(input_tokens=1000, output_tokens=250, workload=Workload(rate_per_s=7.0, lengths="uniform"))
    goal = ServingGoal.from_config(cfg)
    assert goal.rate_per_s == goal.workload.rate_per_s == 7.0
    assert "rate_per_s" not in ServingGoal.model_fields
    assert goal.workload.num_requests == cfg.targets.requests_per_simulation
    assert goal.workload.mean_lengths() == (1000, 250) and goal.workload.input.kind == "uniform"
    assert (goal.p95_ttft_s, goal.p95_e2e_s) == (cfg.targets.p95_ttft_s, cfg.targets.p95_e2e_s)
    # the rate= shorthand lands in the workload
    assert ServingGoal(rate_per_s=3.0).workload.rate_per_s == 3.0
    with pytest.raises(Exception):
        ServingGoal(custom_model={"not": "a model"})
    assert Constraints.from_config(cfg).weights_allowed == cfg.targets.weights_allowed


def test_cli_defaults_are_the_config_defaults():
    from cli.common import config_from_args
    from cli.main import build_parser

    args = build_parser().parse_args(["memory"])
    # the lengths are left unset and fitted to the model's context: the shared defaults where they fit
    assert (args.input, args.output) == (None, None)
    assert (args.batch, args.weights, args.kv_dtype, args.zero, args.recompute) == (
        DEFAULT.batch,
        DEFAULT.weights,
        DEFAULT.kv_dtype,
        DEFAULT.zero,
        DEFAULT.recompute,
    )
    # no flags: the dashboard's opening config, layout included
    cfg = config_from_args(args)
    assert (cfg.tp, cfg.gpus, cfg.batch, cfg.input_tokens, cfg.output_tokens) == (
        DEFAULT.tp,
        DEFAULT.gpus,
        DEFAULT.batch,
        DEFAULT.input_tokens,
        DEFAULT.output_tokens,
    )
    # fewer GPUs than the default TP: TP follows the GPUs given
    assert config_from_args(build_parser().parse_args(["memory", "--model", "llama-3.1-8b", "--gpus", "2"])).tp == 2
    sim = build_parser().parse_args(["simulate"])
    w = DEFAULT.workload
    assert (sim.requests, sim.lengths, sim.spread, sim.max_batch, sim.token_budget, sim.policy, sim.kv_admission) == (
        w.num_requests,
        w.lengths,
        w.spread,
        w.max_batch,
        w.token_budget,
        w.policy,
        w.admission,
    )
    rec = build_parser().parse_args(["recommend"])
    t = DEFAULT.targets
    assert (rec.p95_ttft_s, rec.p95_itl_s, rec.p95_e2e_s, rec.requests, rec.weights_allowed) == (
        t.p95_ttft_s,
        t.p95_itl_s,
        t.p95_e2e_s,
        t.requests_per_simulation,
        t.weights_allowed,
    )


def test_a_config_resolves_once_into_a_hashable_deployment():
    from core.config import resolve
    from core.physics import StepModel

    cfg = RabitConfig(model="mixtral-8x7b", tp=2, gpus_per_node=2, weights="fp8")
    dep = resolve(cfg)
    assert dep.model.slug == "mixtral-8x7b" and dep.gpu.memory_bytes > 0 and dep.weight_bytes_per_param == 1.0
    assert dep == resolve(cfg) and hash(dep) == hash(resolve(cfg)) and dep != resolve(cfg.with_(tp=1))
    # the formulas take the deployment: resolving the same config again gives the same constants
    assert StepModel.from_deployment(dep) == StepModel.from_deployment(resolve(cfg))


def test_gpus_fill_one_node_or_whole_nodes():
    from core.config import split_nodes, whole_nodes_problem

    # up to one node the GPUs share it; beyond, whole nodes of 8
    assert split_nodes(4, 8) == (4, 1) and split_nodes(8, 8) == (8, 1) and split_nodes(16, 8) == (8, 2)
    # 12 GPUs lie between one node (8) and two (16)
    assert whole_nodes_problem(12, 8) == "12 GPUs is not a whole number of 8-GPU nodes; use 8 or 16"
    assert whole_nodes_problem(10_001, 8).endswith("use 10,000 or 10,008")
    with pytest.raises(ValueError, match="use 8 or 16"):
        split_nodes(12, 8)


def test_tp_splits_the_heads_and_the_draft_takes_the_largest_tp_its_heads_allow():
    from core.config import resolve

    m = catalog.model("llama-3.1-70b")  # 64 attention heads
    assert m.splits_heads(8) and m.splits_heads(64) and not m.splits_heads(3) and not m.splits_heads(128)
    # the target runs TP 32; Mixtral-8x22B's 48 heads split 16 ways (48 / 32 is not whole): the draft runs TP 16
    cfg = RabitConfig(
        model="llama-3.1-405b", tp=32, nodes=4, gpus_per_node=8, spec_method="draft", draft_model="mixtral-8x22b"
    )
    draft = resolve(cfg).draft()
    assert (draft.tp, draft.pp, draft.ep, draft.model.slug) == (16, 1, 1, "mixtral-8x22b")
    assert draft.gpu == resolve(cfg).gpu


def test_a_copy_checks_what_it_changes_and_equals_the_same_config_built_afresh():
    """with_ validates the changed fields (and the cross-field checks) as construction does, and keeps the rest as
    they were validated (core.base.validated_copy): a bad value through a copy is refused with the construction's
    message, and a copy equals (and hashes as) the config built from scratch with the same values."""
    from pydantic import ValidationError

    for bad in ({"tp": "x"}, {"tp": 0}, {"gpus_per_node": 2.5}, {"prefix_cache_frac": 1.5}, {"batch": True}):
        with pytest.raises(ValidationError) as via_copy:
            DEFAULT.with_(**bad)
        with pytest.raises(ValidationError) as fresh:
            RabitConfig(**{**DEFAULT.model_dump(), **bad})
        assert via_copy.value.errors()[0]["msg"] == fresh.value.errors()[0]["msg"], bad
    moved = DEFAULT.with_(tp=2, batch=16)
    built = RabitConfig(**{**DEFAULT.model_dump(), "tp": 2, "batch": 16})
    assert moved == built and hash(moved) == hash(built) and moved != DEFAULT
    # a group's copy: the same rules one level down (the workload's rate, the adapter set's slots)
    w = DEFAULT.workload
    with pytest.raises(ValidationError):
        w.with_(rate_per_s=-1.0)
    assert w.with_(rate_per_s=3.0).rate_per_s == 3.0 and w.with_(rate_per_s=3.0).max_batch == w.max_batch
    with pytest.raises(ValidationError):
        DEFAULT.adapters.with_(max_loras=0)
    # the kept fields are the instance's own: a copy shares its nested groups instead of rebuilding them
    assert DEFAULT.with_(tp=2).workload is DEFAULT.workload
