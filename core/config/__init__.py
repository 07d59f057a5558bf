"""Config: the one shared config (workload and targets included), its link and file forms, the field checks, and the deployment it resolves to (the only catalog lookups in ``core``).

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.config.adapters import (
    AdapterSet,
    adapter_problems,
)
from core.config.checks import (
    Problem,
    problems,
    workload_problems,
)
from core.config.deployment import (
    Deployment,
    as_deployment,
    resolve,
    split_nodes,
    whole_nodes_problem,
)
from core.config.settings import (
    COMPUTE_PRECISION,
    DEFAULT,
    GROUPS,
    KV_BYTES,
    WEIGHT_BYTES,
    Disagg,
    RabitConfig,
    Targets,
    Workload,
    default_lengths,
    describe_validation_error,
    differences,
    error_text,
    from_json,
    from_query,
    from_query_report,
    to_query,
    training_goal_args,
)
from core.config.video import (
    VideoDeployment,
    VideoRequest,
    resolve_video,
    video_problems,
)
from core.config.workload import (
    LOAD_FIELDS,
    Draws,
    Lengths,
    ServingLoad,
    SimSpec,
    parse_trace,
    parse_trace_adapters,
)

__all__ = [
    "AdapterSet",
    "Problem",
    "adapter_problems",
    "COMPUTE_PRECISION",
    "DEFAULT",
    "Deployment",
    "Disagg",
    "Draws",
    "GROUPS",
    "KV_BYTES",
    "LOAD_FIELDS",
    "Lengths",
    "RabitConfig",
    "ServingLoad",
    "SimSpec",
    "Targets",
    "VideoDeployment",
    "VideoRequest",
    "WEIGHT_BYTES",
    "Workload",
    "as_deployment",
    "describe_validation_error",
    "error_text",
    "from_json",
    "from_query",
    "from_query_report",
    "parse_trace",
    "parse_trace_adapters",
    "problems",
    "resolve",
    "resolve_video",
    "default_lengths",
    "differences",
    "split_nodes",
    "to_query",
    "training_goal_args",
    "video_problems",
    "whole_nodes_problem",
    "workload_problems",
]
