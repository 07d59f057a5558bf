"""The serving optimizer honours the shared config's assumptions, fabric and block size."""

import core.decision.optimizer as opt
from core import catalog
from core.base import Assumptions
from core.decision import candidate_config


def test_candidates_inherit_the_goal_settings():
    goal = opt.ServingGoal(assumptions=Assumptions().with_(mbu=0.5), fabric="roce-400g", block_size=32)
    c = opt.Candidate(gpu="h100-sxm", gpus_per_replica=8, tp=8, pp=1, weights="bf16", kv_dtype="bf16")
    cfg = candidate_config(goal, c)
    assert cfg.assumptions.mbu == 0.5 and cfg.block_size == 32 and cfg.fabric == "roce-400g"


def test_a_lower_bandwidth_efficiency_slows_the_screen():
    # decode at batch 1 reads every weight once per token: t ~ 1 / mbu, so halving mbu (0.75 -> 0.375)
    # must lengthen every candidate's batch-1 ITL (by less than 2x: overhead and collectives do not scale)
    cons = opt.Constraints(gpus_allowed=("h100-sxm",), weights_allowed=("bf16",), kv_allowed=("bf16",))
    base = {
        (c.gpus_per_replica, c.tp, c.pp): c.batch_1_itl_s
        for c in opt.screen(opt.ServingGoal(), cons, catalog.prices())
        if c.batch_1_itl_s
    }
    slow = {
        (c.gpus_per_replica, c.tp, c.pp): c.batch_1_itl_s
        for c in opt.screen(opt.ServingGoal(assumptions=Assumptions().with_(mbu=0.375)), cons, catalog.prices())
        if c.batch_1_itl_s
    }
    assert base and set(base) == set(slow)
    for k, itl in base.items():
        assert itl < slow[k] < 2 * itl, k


def test_the_sidebars_cached_prefix_and_speculative_decoding_reach_the_candidates():
    # The goal inherits the shared config's settings, so each candidate's deployment carries them. Batch 1 on
    # Llama-3.1-8B, 2,048 prompt tokens: half of them cached leaves 1,024 to prefill; the weights are read once
    # either way and the attention pairs fall from 2,048 x 2,049 / 2 to that minus 1,024 x 1,025 / 2, so the time to
    # the first token falls, but by less than half. Speculative decoding (EAGLE, k = 4, alpha = 0.7) yields
    # E = (1 - 0.7^5) / 0.3 = 2.77 tokens per round for about the cost of one verify pass of 5 tokens, so the time
    # between tokens falls too.
    from core.config import RabitConfig, Targets
    from core.decision import ServingGoal, recommend

    cfg = RabitConfig(
        model="llama-3.1-8b",
        input_tokens=2048,
        output_tokens=128,
        workload={"rate_per_s": 1.0},
        targets=Targets(
            p95_ttft_s=None,
            p95_itl_s=None,
            gpus_allowed=("h100-sxm",),
            weights_allowed=("bf16",),
            kv_allowed=("bf16",),
            max_simulations=1,
            requests_per_simulation=50,
        ),
    )
    cons = opt.Constraints.from_config(cfg)

    def batch_1(c: RabitConfig) -> dict:
        rec = recommend(ServingGoal.from_config(c), cons)
        assert rec.recommendation is not None
        row = next(x for x in rec.candidates if x.shape() == rec.recommendation.shape() and x.simulated)
        return {"ttft": row.batch_1_ttft_s, "itl": row.batch_1_itl_s}

    base = batch_1(cfg)
    cached = batch_1(cfg.with_(prefix_cache_frac=0.5))
    eagle = batch_1(cfg.with_(spec_method="eagle"))
    assert ServingGoal.from_config(cfg.with_(prefix_cache_frac=0.5)).settings.prefix_cache_frac == 0.5
    assert 0.5 * base["ttft"] < cached["ttft"] < base["ttft"] and cached["itl"] == base["itl"]
    assert eagle["itl"] < base["itl"] and eagle["ttft"] == base["ttft"]


def test_a_change_outside_the_inherited_settings_keeps_the_goal():
    # what the search sets itself (GPU, layout, batch) or serving does not read (training) leaves the goal as it
    # is, so the dashboard's cached recommendation still answers
    from core.config import DEFAULT
    from core.decision import ServingGoal

    same = DEFAULT.with_(gpu="h200-sxm", tp=4, batch=7, zero=3, lora_rank=8, training={"pin": True})
    assert ServingGoal.from_config(same) == ServingGoal.from_config(DEFAULT)
    assert ServingGoal.from_config(DEFAULT.with_(spec_method="ngram")) != ServingGoal.from_config(DEFAULT)
