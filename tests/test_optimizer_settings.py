"""The serving optimizer honours the shared config's assumptions, fabric and block size."""

from core import catalog
import core.decision.optimizer as opt
from core.base import Assumptions


def test_candidates_inherit_the_goal_settings():
    goal = opt.ServingGoal(assumptions=Assumptions().with_(mbu=0.5), fabric="roce-400g", block_size=32)
    c = opt.Candidate(gpu="h100-sxm", gpus_per_replica=8, tp=8, pp=1, weights="bf16", kv_dtype="bf16")
    cfg = opt._config(goal, c)
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
