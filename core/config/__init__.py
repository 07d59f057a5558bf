"""Config: the one shared config (workload and targets included), its link and file forms, the field checks, and the deployment it resolves to (the only catalog lookups in ``core``).

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.config.adapters import (
    AdapterSet,
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
from core.config.fleet import (
    EXAMPLE_YAML,
    NOMINAL,
    Fleet,
    FleetError,
    FleetSettings,
    FleetWorkload,
    Scenario,
)
from core.config.fleet_forms import (
    EXAMPLE,
    TABLE_COLUMNS,
    fleet_from_tables,
    fleet_json,
    fleet_tables,
    fleet_yaml,
    parse_fleet,
)
from core.config.session_trace import parse_session_trace
from core.config.sessions import (
    SESSION_ARRIVALS,
    Sessions,
    SessionTurn,
    gamma_gaps,
)
from core.config.settings import (
    COMPUTE_PRECISION,
    DEFAULT,
    GROUPS,
    KV_BYTES,
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
    "parse_session_trace",
    "SESSION_ARRIVALS",
    "Sessions",
    "SessionTurn",
    "gamma_gaps",
    "AdapterSet",
    "Problem",
    "COMPUTE_PRECISION",
    "DEFAULT",
    "Deployment",
    "Draws",
    "EXAMPLE",
    "EXAMPLE_YAML",
    "Fleet",
    "FleetError",
    "FleetSettings",
    "FleetWorkload",
    "GROUPS",
    "KV_BYTES",
    "LOAD_FIELDS",
    "Lengths",
    "NOMINAL",
    "RabitConfig",
    "Scenario",
    "ServingLoad",
    "SimSpec",
    "TABLE_COLUMNS",
    "Targets",
    "VideoDeployment",
    "VideoRequest",
    "Workload",
    "as_deployment",
    "describe_validation_error",
    "error_text",
    "fleet_from_tables",
    "fleet_json",
    "fleet_tables",
    "fleet_yaml",
    "from_json",
    "from_query",
    "from_query_report",
    "parse_fleet",
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
