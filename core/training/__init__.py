"""Training: work, the fastest layout that fits, the deadline search to 32,768 GPUs, and goodput.

The model lives in modules along its seams; this one gathers their public names so callers import
from one place:

* :mod:`core.training.flops`: model and hardware FLOPs per token and of the run (Kaplan et al. 2020;
  Narayanan et al., SC'21).
* :mod:`core.training.layout`: one layout's memory (the one body :func:`core.physics.training_memory_parts`)
  and step time (compute, pipeline bubble, TP / EP / PP / DP traffic, optimizer step), on a grid of layouts;
  :mod:`core.training.layout_math` times one layout and records its derivation.
* :mod:`core.training.search`: the fastest layout on a GPU count, the curve over GPU counts, the deadline
  (the cheapest count that meets it with failures, :mod:`core.training.reliability`) and the cost.
* :mod:`core.training.advice`: the changes to a layout that make it fit, each checked by computing it.

Every entry point takes a :class:`core.config.Deployment` (resolved once at the edge) or a config.
"""

from __future__ import annotations

from core.training.advice import training_fit_options
from core.training.deadline import deadline_choice
from core.training.flops import attention_flops_per_token, attention_pairs_per_token, flops_per_token
from core.training.layout import (
    Layout,
    LayoutResult,
    bubble_fraction,
    config_layout,
    group_allreduce_s,
    group_gather_s,
    layout_context,
    layout_grid,
    tp_exposed_s,
)
from core.training.layout_math import (
    evaluate_layout,
    layout_memory,
    training_math,
)
from core.training.reliability import daly_interval_s, goodput, mtbf_s, wall_clock_s
from core.training.search import (
    MAX_GPUS,
    CurvePoint,
    TrainingGoal,
    TrainingPlan,
    budget_problem,
    catalog_price,
    goal_from_inputs,
    gpu_counts,
    layouts_at,
    plan,
)

__all__ = [
    "training_fit_options",
    "daly_interval_s",
    "deadline_choice",
    "goodput",
    "mtbf_s",
    "wall_clock_s",
    "MAX_GPUS",
    "CurvePoint",
    "Layout",
    "LayoutResult",
    "TrainingGoal",
    "TrainingPlan",
    "attention_flops_per_token",
    "attention_pairs_per_token",
    "bubble_fraction",
    "budget_problem",
    "catalog_price",
    "config_layout",
    "evaluate_layout",
    "flops_per_token",
    "goal_from_inputs",
    "gpu_counts",
    "group_allreduce_s",
    "group_gather_s",
    "layout_context",
    "layout_grid",
    "layout_memory",
    "layouts_at",
    "plan",
    "tp_exposed_s",
    "training_math",
]
